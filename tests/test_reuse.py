"""Reusing a document's last fill: how rows line up, the moved keys, and fills that start from it."""

from __future__ import annotations

import pytest
import torch

from diffusion_lsp.model.decoding.canvas import CanvasRequest, build_row
from diffusion_lsp.model.network.config import ModelConfig
from diffusion_lsp.model.decoding.reuse import ContextMemo, Entry, warm_row
from diffusion_lsp.model.decoding.sampler import fill
from diffusion_lsp.protocol.settings import LaunchSettings, SamplerConfig
from diffusion_lsp.model.network.transformer import DiffusionTransformer

PREFIX = "def area(width, height):\n    result = width * height\n    return res"
SUFFIX = "\n\n\ndef volume(width, height, depth):\n    return area(width, height) * depth\n"


def entry(ids, start, length, age=0):
    return Entry(ids, start, length, [torch.zeros(1, len(ids), 2)], [torch.zeros(1, len(ids), 2)], age)


def test_rows_line_up_on_their_shared_prefix_and_suffix():
    memo = ContextMemo(max_entries=2, max_age=3)
    old = [1, 2, 3, 4, 0, 0, 0, 7, 8, 9]  # prefix 1-4, canvas of 3, suffix 7-9
    memo.put("a", entry(old, 4, 3))
    plan = memo.plan("a", [1, 2, 3, 5, 6, 0, 0, 0, 7, 8, 9], 5, 3)  # typed: 4 became 5 6
    assert (plan.prefix, plan.suffix, plan.shift) == (3, 3, 1)
    assert memo.plan("b", old, 4, 3) is None  # another document
    assert memo.plan("a", [9, 9, 9, 9, 0, 0, 0, 9, 9, 9], 4, 3) is None  # too little in common
    memo.put("a", entry(old, 4, 3, age=3))
    assert memo.plan("a", old, 4, 3) is None  # too old: a full pass again
    memo.put("b", entry(old, 4, 3))
    memo.put("c", entry(old, 4, 3))
    assert list(memo.entries) == ["b", "c"]  # least recent dropped


@pytest.mark.parametrize("flags", [dict(), dict(qk_norm=True, shift_logits=True)])
@torch.inference_mode()
def test_moved_keys_equal_fresh_ones_in_the_first_layer(tokenizer, flags):
    # layer 0 keys depend on the token and its position only, so lining up must reproduce them exactly
    torch.manual_seed(0)
    model = DiffusionTransformer(ModelConfig.preset("tiny", **flags)).eval()
    rows = [build_row(CanvasRequest(PREFIX[:-k] if k else PREFIX, SUFFIX, 8), tokenizer, 512, heal=False)
            for k in (3, 0)]  # the user typed "res"
    caches = [model.hidden(torch.tensor([r.ids]), torch.arange(len(r.ids))[None],
                           torch.ones(1, len(r.ids), dtype=torch.bool))[1] for r in rows]
    memo = ContextMemo()
    old, new = rows
    memo.put("doc", Entry(old.ids, old.start, old.length, [k[0] for k in caches[0].keys],
                          [v[0] for v in caches[0].values], 0))
    plan = memo.plan("doc", new.ids, new.start, new.length)
    assert plan.shift == new.start - old.start > 0 and plan.suffix == len(new.ids) - new.start - new.length
    for kind in ("keys", "values"):
        warm = warm_row(plan, 0, kind, len(new.ids), new.start, new.length, model.config.rope_theta)
        fresh = getattr(caches[1], kind)[0][0]
        reused = list(range(plan.prefix)) + list(range(new.start + new.length, len(new.ids)))
        torch.testing.assert_close(warm[:, reused], fresh[:, reused], atol=1e-5, rtol=1e-5)
        assert not warm[:, plan.prefix : new.start + new.length].any()  # left for the first pass


@torch.inference_mode()
def test_a_fill_starts_from_the_documents_last_fill(tiny_checkpoint):
    from diffusion_lsp.engine import load_engine

    engine = load_engine(LaunchSettings(str(tiny_checkpoint), device="cpu", threads=1, precision="fp32"))  # exact keys to compare
    tok, model, cfg = engine.tokenizer, engine.model, SamplerConfig(heal=False)
    memo = ContextMemo()
    req = CanvasRequest(PREFIX, SUFFIX, 8, doc="file:///a.py")
    (first,) = fill(model, tok, [req], cfg, memo=memo)
    (again,) = fill(model, tok, [req], cfg, memo=memo)
    row = build_row(req, tok, model.config.max_seq_len, heal=False)
    assert first.reused == 0 and again.reused == len(row.ids) - row.length  # all but the canvas
    # the same context: the stored prefix and suffix are exactly what a full pass computes
    assert (again.text, again.confidence) == (first.text, pytest.approx(first.confidence, abs=1e-4))
    typed = CanvasRequest(PREFIX + "u", SUFFIX, 8, doc="file:///a.py")
    (after,) = fill(model, tok, [typed], cfg, memo=memo)
    assert after.reused > 0.9 * len(row.ids) - row.length
    # what changed was recomputed: every first-layer key outside the canvas is what a full pass gives
    new = build_row(typed, tok, model.config.max_seq_len, heal=False)
    _, full = model.hidden(torch.tensor([new.ids]), torch.arange(len(new.ids))[None],
                           torch.ones(1, len(new.ids), dtype=torch.bool))
    outside = list(range(new.start)) + list(range(new.start + new.length, len(new.ids)))
    stored = memo.entries["file:///a.py"].keys[0]
    torch.testing.assert_close(stored[:, outside], full.keys[0][0][:, outside], atol=1e-5, rtol=1e-5)
    (plain,) = fill(model, tok, [typed], SamplerConfig(heal=False, reuse_context=False), memo=memo)
    assert plain.reused == 0
    (other,) = fill(model, tok, [CanvasRequest(PREFIX, SUFFIX, 8, doc="file:///b.py")], cfg, memo=memo)
    assert other.reused == 0  # another document
