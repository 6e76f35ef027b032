"""Drafts verified on the canvas (model/decoding/verify.py): an oracle model with known probabilities keeps a
right draft whole, a draft right only at first in part, a wrong one not at all; the batched scorer
gives each row what it gives it alone."""

from __future__ import annotations

import pytest
import torch

from diffusion_lsp.model.decoding.canvas import CanvasRequest
from diffusion_lsp.model.families.checkpoint import load_checkpoint
from diffusion_lsp.model.decoding.probe import ScoreRow, probe, score_rows
from diffusion_lsp.model.decoding.sampler import fill
from diffusion_lsp.protocol.settings import SamplerConfig
from diffusion_lsp.model.decoding.verify import kept_prefix
from test_sampler import PREFIX, SUFFIX, setup_oracle

ANSWER = " a + b"
CFG = SamplerConfig(policy="one", heal=False)  # one token per step: a fill's forwards are known


def line(model, tok, candidates=(), cfg=CFG):
    (res,) = fill(model, tok, [CanvasRequest(PREFIX, SUFFIX, 8, one_line=True, candidates=candidates)], cfg)
    return res


def test_kept_prefix_keeps_all_of_a_likely_draft_else_the_believed_prefix():
    assert kept_prefix([0.3, 0.3, 0.3], [0.9, 0.9, 0.9], keep=0.5, accept=0.2) == 3  # geometric mean 0.3
    assert kept_prefix([0.9, 0.6, 0.001, 0.9], [0.9, 0.7, 0.5, 0.9], keep=0.5, accept=0.2) == 2  # mean 0.15
    assert kept_prefix([0.9, 0.1, 0.9], [0.9, 0.1, 0.9], keep=0.5, accept=0.99) == 3  # 0.1 is its first choice
    assert kept_prefix([0.01, 0.9], [0.5, 0.9], keep=0.5, accept=0.5) == 0
    assert kept_prefix([], [], keep=0.5, accept=0.2) == 0


def test_a_right_draft_is_kept_whole_and_is_the_fill_for_the_scoring_passes(tokenizer, oracle):
    model, ids = setup_oracle(tokenizer, oracle, answer=ANSWER)
    plain = line(model, tokenizer)
    drafted = line(model, tokenizer, (ANSWER,))
    assert plain.text == drafted.text == ANSWER
    assert drafted.verdict.tokens == len(ids) + 1 == len(drafted.verdict.kept)  # its tokens and the filler that ends it
    assert drafted.forwards == CFG.draft_stride < plain.forwards == len(ids) + 1
    assert drafted.confidence == pytest.approx([0.99] * len(ids), abs=1e-4)


def test_a_draft_right_only_at_first_is_kept_in_part_and_the_model_writes_the_rest(tokenizer, oracle):
    model, ids = setup_oracle(tokenizer, oracle, answer=ANSWER)
    wrong = " a + zq"
    common = next(i for i, (x, y) in enumerate(zip(ids, tokenizer.encode(wrong))) if x != y)
    assert common >= 1
    res = line(model, tokenizer, (wrong,))
    assert res.text == ANSWER
    assert len(res.verdict.kept) == common < res.verdict.tokens
    assert res.forwards == CFG.draft_stride + (len(ids) + 1 - common)  # one step per token left, the filler too


def test_a_wrong_draft_costs_the_scoring_passes_and_changes_nothing(tokenizer, oracle):
    model, ids = setup_oracle(tokenizer, oracle, answer=ANSWER)
    plain = line(model, tokenizer)
    res = line(model, tokenizer, ("zq zq",))
    assert res.verdict.kept == [] and res.verdict.offered == 1
    assert (res.text, res.confidence) == (plain.text, plain.confidence)
    assert res.forwards == plain.forwards + CFG.draft_stride


def test_of_several_drafts_the_one_kept_whole_wins(tokenizer, oracle):
    model, ids = setup_oracle(tokenizer, oracle, answer=ANSWER)
    res = line(model, tokenizer, ("zq zq", " a + zq", ANSWER))
    assert res.verdict.offered == 3 and len(res.verdict.kept) == res.verdict.tokens
    assert res.text == ANSWER and res.forwards == CFG.draft_stride


def test_a_request_without_drafts_decodes_beside_one_with_them(tokenizer, oracle):
    model, ids = setup_oracle(tokenizer, oracle, answer=ANSWER)
    a, b = fill(model, tokenizer, [CanvasRequest(PREFIX, SUFFIX, 8, one_line=True, candidates=(ANSWER,)),
                                   CanvasRequest(PREFIX, SUFFIX, 8, one_line=True)], CFG)
    assert a.text == b.text == ANSWER
    assert a.verdict is not None and b.verdict is None and a.forwards < b.forwards


def test_scoring_rows_together_gives_each_what_it_gets_alone(tiny_checkpoint):
    model, tok, _ = load_checkpoint(tiny_checkpoint)
    texts = [("def f(x):\n    return ", "x + 1", "\n\nprint(f(2))\n"), ("import os\n", "import json as j", "\n")]
    rows, bos = [], [] if tok.bos_id is None else [tok.bos_id]
    for pre, mid, suf in texts:
        p, m, s = bos + tok.encode(pre), tok.encode(mid), tok.encode(suf)
        rows.append(ScoreRow(p + m + s, len(p), len(m)))
    together, best, _ = score_rows(model, tok, rows, 3)
    for i, r in enumerate(rows):
        alone, alone_best, _ = score_rows(model, tok, [r], 3)
        torch.testing.assert_close(together[i, : r.length], alone[0], atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(best[i, : r.length], alone_best[0], atol=1e-5, rtol=1e-4)
        assert together[i, r.length:].abs().sum() == 0  # nothing past a shorter row's middle
    got = probe(model, tok, *texts[0], stride=3)  # probe is the one-row case
    assert got.prob == pytest.approx(together[0, : rows[0].length].tolist(), abs=1e-5)


def test_candidates_and_the_draft_tally_cross_the_wire_and_bad_ones_are_refused():
    from diffusion_lsp.protocol.answers import Draft, DraftTally, Fill
    from diffusion_lsp.protocol.requests import FillRequest

    order = FillRequest("a", "b", 8, one_line=True, candidates=("x + 1", "y"))
    assert FillRequest.from_message(order.message(1, "k")) == order
    for bad in (["x"] * 9, [""], "x", [3]):
        with pytest.raises(ValueError, match="candidates"):
            FillRequest.from_message({**order.message(1, "k"), "candidates": bad})
    fill_ = Fill("x", ["x"], [0.5], draft=DraftTally(2, 4, 3))
    message = fill_.message(1)
    assert Fill.from_message(message) == fill_ and Draft.from_message(message) is None  # not a step's draft
    assert DraftTally(2, 4, 3).outcome == "part" and DraftTally(1, 4, 4).outcome == "whole"
    assert DraftTally(1, 4, 0).outcome == "rejected" and DraftTally().outcome is None
    for bad in ([1, 2, 3], None, [1, 2]):  # kept more than it had; none; short
        with pytest.raises(ValueError, match="draft tally"):
            Fill.from_message({**message, "drafted": bad})
