"""Shared fixtures: a tiny real checkpoint written in our on-disk format, and an oracle model."""

from __future__ import annotations

import sysconfig
from pathlib import Path

import pytest
import torch

from diffusion_lsp.model.checkpoint import save_checkpoint
from diffusion_lsp.model.config import ModelConfig
from diffusion_lsp.model.tokenizer import train_bpe
from diffusion_lsp.model.transformer import DiffusionTransformer, KVCache

STDLIB = Path(sysconfig.get_paths()["stdlib"])
CORPUS_FILES = ["json/decoder.py", "json/encoder.py", "textwrap.py", "shlex.py"]


def corpus_texts() -> list[str]:
    return [(STDLIB / f).read_text() for f in CORPUS_FILES] + ["x = self.foo(bar)\n" * 50]


@pytest.fixture(scope="session")
def tokenizer():
    return train_bpe(corpus_texts(), vocab_size=512)


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory, tokenizer) -> Path:
    torch.manual_seed(0)
    model = DiffusionTransformer(ModelConfig.preset("tiny"))
    return save_checkpoint(tmp_path_factory.mktemp("ckpt") / "tiny", model, tokenizer)


class OracleModel(torch.nn.Module):
    """A fake denoiser with known logits: position q should hold table[q] (filler where the table has
    nothing). Its confidence is p_hi at positions in `easy` or whose left neighbour is no longer a
    mask, else p_lo, so parallel policies have something to decide. Speaks the sampler's model API:
    hidden() and logits(), full and cached modes."""

    def __init__(self, tok, table: dict[int, int], easy=(), p_hi=0.99, p_lo=0.6, shift=False,
                 rival: dict[int, int] | None = None):
        super().__init__()
        self.tok, self.table, self.easy = tok, table, set(easy)
        self.p_hi, self.p_lo, self.rival = p_hi, p_lo, rival or {}
        self.config = ModelConfig(vocab_size=tok.vocab_size, dim=8, n_layers=1, n_heads=1,
                                  max_seq_len=512, shift_logits=shift)
        self.dummy = torch.nn.Parameter(torch.zeros(1))
        self.calls = 0

    def hidden(self, tokens, positions, key_mask, cache=None):
        self.calls += 1
        left_is_mask = torch.zeros_like(tokens, dtype=torch.bool)
        left_is_mask[:, 1:] = tokens[:, :-1] == self.tok.mask_id
        shift = int(self.config.shift_logits)
        if shift:  # output i predicts position i + 1, whose left neighbour is token i
            left_is_mask = tokens == self.tok.mask_id
        h = torch.stack([(positions + shift).float(), left_is_mask.float()], -1)  # [B, S, 2]
        return h, KVCache([], [], key_mask)

    def logits(self, h):
        V = self.config.vocab_size
        flat = h.reshape(-1, h.shape[-1])
        out = torch.full((flat.shape[0], V), -1e4)
        for s in range(flat.shape[0]):
            q, left_mask = int(flat[s, 0]), bool(flat[s, 1])
            target = self.table.get(q, self.tok.filler_id)
            p = self.p_hi if (q in self.easy or not left_mask) else self.p_lo
            rest = (1 - p) / (V - 1)
            out[s] = torch.log(torch.tensor(rest))
            out[s, target] = torch.log(torch.tensor(p))
            if q in self.rival:  # a rival token more likely than the target
                out[s, self.rival[q]] = torch.log(torch.tensor(min(0.98, p + 0.3)))
        return out.reshape(*h.shape[:-1], V)


@pytest.fixture
def oracle():
    return OracleModel
