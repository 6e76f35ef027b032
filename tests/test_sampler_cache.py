"""The sampler's context cache on a real (tiny, random) transformer: a cached step recomputes a window
of the canvas, writes its fresh keys/values into the cache in place and attends to the cache
everywhere else."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from torch.overrides import TorchFunctionMode

from diffusion_lsp.model.decoding.canvas import CanvasRequest, build_row
from diffusion_lsp.model.network.config import ModelConfig
from diffusion_lsp.model.decoding.policies import block_eligible
from diffusion_lsp.model.decoding.batch import Batch
from diffusion_lsp.model.decoding.denoise import hidden_at
from diffusion_lsp.protocol.settings import SamplerConfig
from diffusion_lsp.model.network.transformer import DiffusionTransformer, KVCache

REQUESTS = [CanvasRequest("def add(a, b):\n    return", "\n\nprint(add(1, 2))\n", 12),
            CanvasRequest("import os\n", "x = 1\n", 6)]  # a shorter canvas: window slots past it are junk


def setup(tok, shift: bool):
    torch.manual_seed(0)
    model = DiffusionTransformer(ModelConfig.preset("tiny", vocab_size=tok.vocab_size, shift_logits=shift)).eval()
    rows = [build_row(r, tok, 512, heal=False) for r in REQUESTS]
    return model, Batch.build(rows, [False, False], tok, model.config.vocab_size, int(shift), "cpu")


def step(model, batch, cfg, n, whole=False):
    eligible = batch.masked if whole else block_eligible(batch.masked, cfg.block_size)
    rows, cols = eligible.nonzero(as_tuple=True)
    return rows, cols, hidden_at(model, batch, cfg, n, rows, cols, whole)


@pytest.mark.parametrize("shift", [False, True])
@torch.inference_mode()
def test_a_cached_step_equals_the_full_pass_when_nothing_changed(tokenizer, shift):
    model, batch = setup(tokenizer, shift)
    cfg = SamplerConfig(block_size=4)
    _, _, full = step(model, batch, cfg, 0)
    _, _, cached = step(model, batch, cfg, 1)
    torch.testing.assert_close(cached, full, atol=1e-4, rtol=1e-4)
    _, _, whole = step(model, batch, cfg, 2, whole=True)  # the time-budget step: every masked position
    _, _, whole_full = step(model, batch, SamplerConfig(use_cache=False), 0, whole=True)
    torch.testing.assert_close(whole, whole_full, atol=1e-4, rtol=1e-4)


class _Concatenations(TorchFunctionMode):
    """Records the shape of everything torch.cat makes while it is on."""

    def __init__(self):
        super().__init__()
        self.shapes = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in (torch.cat, torch.concat, torch.concatenate):
            self.shapes.append(tuple(out.shape))
        return out


@pytest.mark.parametrize("shift", [False, True])
@torch.inference_mode()
def test_a_cached_step_writes_its_window_into_the_cache_in_place_and_nothing_else(tokenizer, shift):
    model, batch = setup(tokenizer, shift)
    cfg = SamplerConfig(block_size=4)
    step(model, batch, cfg, 0)
    cache, ptrs = batch.cache, [t.data_ptr() for t in batch.cache.keys + batch.cache.values]
    # commit the first block of each row: the next window is blocks 0 and 1
    written = tokenizer.encode(" a + b + c")[:4]
    assert len(written) == 4
    batch.masked[:, :4] = False
    batch.x.scatter_(1, batch.canvas_idx[:, :4], torch.tensor([written, written]))
    before = [k.clone() for k in batch.cache.keys]
    with _Concatenations() as cats:
        rows, cols, _ = step(model, batch, cfg, 1)
    # the same tensors, written in place; no layer concatenated anything as long as a row (RoPE's halves only)
    assert batch.cache is cache and [t.data_ptr() for t in cache.keys + cache.values] == ptrs
    assert cats.shapes and all(s[2] < batch.junk for s in cats.shapes if len(s) == 4), cats.shapes
    assert sorted(set(cols.tolist())) == [4, 5, 6, 7]  # only the open block gets logits
    _, fresh = model.hidden(batch.x, batch.positions, batch.key_mask)
    for b, length in enumerate(batch.length.tolist()):
        start = int(batch.start[b])
        window = set(range(start - int(shift), start + min(8, length)))
        for pos in range(batch.junk):
            now, old = batch.cache.keys[0][b, :, pos], before[0][b, :, pos]
            if pos in window:  # layer 0 keys depend only on the token and its position: exact
                torch.testing.assert_close(now, fresh.keys[0][b, :, pos], atol=1e-5, rtol=1e-5)
            else:  # the prefix, the rest of the canvas and the suffix are left as cached
                assert torch.equal(now, old), (b, pos)
    assert not batch.cache.key_mask[:, batch.junk].any()  # the junk column is never attended to


@torch.inference_mode()
def test_dropping_a_row_keeps_every_per_row_field_in_step(tokenizer):
    model, batch = setup(tokenizer, False)
    step(model, batch, SamplerConfig(block_size=4), 0)  # fills the cache
    second = {f.name: getattr(batch, f.name) for f in dataclasses.fields(batch)}
    batch.keep(torch.tensor([1]))
    for f in dataclasses.fields(batch):
        now = getattr(batch, f.name)
        if f.metadata.get("listed") and now is not None:  # the rows as built, and their plans
            assert now == second[f.name][1:], f.name
        elif f.metadata.get("fixed") or now is None:
            assert now is second[f.name]
        elif isinstance(now, KVCache):
            for got, was in zip(now.keys + now.values + [now.key_mask], second[f.name].keys + second[f.name].values
                                + [second[f.name].key_mask]):
                assert torch.equal(got, was[1:]), f.name
        else:
            assert torch.equal(now, second[f.name][1:]), f.name


@torch.inference_mode()
def test_a_batch_without_padding_attends_unmasked_to_the_same_result(tokenizer):
    """A row alone has no padding but its junk column: its cache is dense (decided on the host, when
    the batch is built) and its cached steps attend without a mask, as the same row does beside a
    shorter one (masked): the same hidden states."""
    model, pair = setup(tokenizer, False)
    alone = Batch.build(pair.rows[:1], [False], tokenizer, model.config.vocab_size, 0, "cpu")
    assert alone.dense and not pair.dense and alone.junk == pair.junk  # row 0 is the longer one
    cfg = SamplerConfig(block_size=4)
    for n in range(3):
        rows, cols, h = step(model, pair, cfg, n)
        _, _, h_alone = step(model, alone, cfg, n)
        torch.testing.assert_close(h_alone, h[rows == 0], atol=1e-5, rtol=1e-5)
    assert alone.cache.dense and not pair.cache.dense
    kept = alone.joined(alone)  # two rows of the same length: still dense, and so is their cache
    assert kept.dense and kept.cache.dense and not pair.joined(alone).cache.dense
