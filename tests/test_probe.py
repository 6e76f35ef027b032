"""model/decoding/probe.py: each middle token's probability with it masked, in interleaved passes whose
later passes run only the middle against the first pass's cache. With one layer, the context's
keys/values come straight from its embeddings, whatever the middle holds, so the cached passes must
equal plain full passes exactly: that checks the positions, the masks and the shifted-logits case."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from diffusion_lsp.model.network.config import ModelConfig
from diffusion_lsp.model.decoding.probe import ScoreRow, probe, score_rows
from diffusion_lsp.model.network.transformer import DiffusionTransformer

PREFIX, MIDDLE, SUFFIX = "def f(x):\n", "    return x + 1\n", "\nprint(f(2))\n"


def one_layer(shift: bool) -> DiffusionTransformer:
    torch.manual_seed(1)
    cfg = dataclasses.replace(ModelConfig.preset("tiny"), n_layers=1, vocab_size=512, shift_logits=shift)
    return DiffusionTransformer(cfg).eval()


def naive(model, tok, stride: int) -> tuple[list[float], list[float]]:
    """Every pass as a full forward pass over the whole row."""
    bos = [] if tok.bos_id is None else [tok.bos_id]
    pre, mid, suf = tok.encode(PREFIX), tok.encode(MIDDLE), tok.encode(SUFFIX)
    ids = torch.tensor(bos + pre + mid + suf)
    start, n, shift = len(bos) + len(pre), len(mid), int(model.config.shift_logits)
    prob, best = [0.0] * n, [0.0] * n
    for j in range(stride):
        x = ids.clone()
        cols = [i for i in range(n) if i % stride == j]
        x[[start + i for i in cols]] = tok.mask_id
        with torch.no_grad():
            logits = model(x[None])[0][0].float()
        logits[:, [t for t in (tok.mask_id, tok.bos_id) if t is not None]] = float("-inf")
        p = logits.softmax(-1)
        for i in cols:
            prob[i] = p[start + i - shift, mid[i]].item()
            best[i] = p[start + i - shift].max().item()
    return prob, best


@pytest.mark.parametrize("shift", [False, True])
@pytest.mark.parametrize("stride", [1, 3, 4])
def test_cached_passes_equal_full_passes_with_one_layer(tokenizer, shift, stride):
    model = one_layer(shift)
    got = probe(model, tokenizer, PREFIX, MIDDLE, SUFFIX, stride)
    prob, best = naive(model, tokenizer, stride)
    assert got.prob == pytest.approx(prob, rel=1e-4, abs=1e-6)
    assert got.best == pytest.approx(best, rel=1e-4, abs=1e-6)
    assert "".join(got.pieces) == MIDDLE and got.forwards == stride


def test_an_empty_middle_costs_nothing_and_a_middle_too_long_is_refused(tokenizer):
    model = one_layer(False)
    assert probe(model, tokenizer, PREFIX, "", SUFFIX).forwards == 0
    with pytest.raises(ValueError, match="does not fit"):
        probe(model, tokenizer, "", "x = self.foo(bar)\n" * 400, "")
    with pytest.raises(ValueError, match="stride"):
        probe(model, tokenizer, PREFIX, MIDDLE, SUFFIX, 0)


@torch.inference_mode()
def test_later_passes_write_their_own_copies_of_pass_0s_cache(tokenizer):
    """Passes 1.. write their windows into the cache in place, each into its own copy of pass 0's:
    the cache that comes back (and that a memo keeps) is pass 0's full pass, left as it was."""
    torch.manual_seed(1)
    model = DiffusionTransformer(ModelConfig.preset("tiny", vocab_size=512)).eval()  # two layers: context moves
    pre, mid = tokenizer.encode(PREFIX), tokenizer.encode(MIDDLE)
    rows = [ScoreRow(pre + mid + tokenizer.encode(s), len(pre), len(mid)) for s in (SUFFIX, "\n")]  # padded
    _, _, cache = score_rows(model, tokenizer, rows, 3)
    S = max(len(r.ids) for r in rows)
    x = torch.full((2, S + 1), tokenizer.mask_id)
    for b, r in enumerate(rows):
        x[b, : len(r.ids)] = torch.tensor(r.ids)
    key_mask = x != tokenizer.mask_id
    x[:, [len(pre) + i for i in range(0, len(mid), 3)]] = tokenizer.mask_id  # pass 0 masks every third
    _, first = model.hidden(x, torch.arange(S + 1).expand(2, S + 1), key_mask)
    for got, want in zip(cache.keys + cache.values, first.keys + first.values):
        torch.testing.assert_close(got, want, atol=1e-6, rtol=1e-6)
