"""The sampler on an oracle model with known logits."""

from __future__ import annotations

import pytest

from diffusion_lsp.model.decoding.canvas import CanvasRequest, build_row
from diffusion_lsp.model.decoding.results import first_line as _first_line
from diffusion_lsp.model.decoding.sampler import Decoding, fill
from diffusion_lsp.protocol.settings import SamplerConfig

PREFIX = "def add(a, b):\n    return"
SUFFIX = "\n\nprint(add(1, 2))\n"
ANSWER = " a + b"


def setup_oracle(tok, oracle, prefix=PREFIX, answer=ANSWER, max_tokens=8, heal=False, **kw):
    """An oracle whose table holds `answer` right after the prefix's canvas start."""
    row = build_row(CanvasRequest(prefix, SUFFIX, max_tokens), tok, 512, heal=heal)
    ids = tok.encode(answer)
    table = {row.start + i: t for i, t in enumerate(ids)}
    return oracle(tok, table, **kw), ids


def run(model, tok, cfg=None, prefix=PREFIX, max_tokens=8):
    (res,) = fill(model, tok, [CanvasRequest(prefix, SUFFIX, max_tokens)], cfg or SamplerConfig(heal=False))
    return res


def test_confident_oracle_is_reproduced_in_one_pass_and_filler_is_stripped(tokenizer, oracle):
    model, ids = setup_oracle(tokenizer, oracle, easy=range(1000))
    res = run(model, tokenizer)
    assert res.text == ANSWER
    assert res.tokens == len(ids) < 8  # the rest of the 8-token canvas was filler, stripped
    assert res.forwards == 1 < res.tokens
    assert len(res.confidence) == res.tokens and min(res.confidence) > 0.9


@pytest.mark.parametrize("shift", [False, True])
def test_dependent_oracle_threshold_needs_fewer_passes_than_tokens(tokenizer, oracle, shift):
    # every third position is easy; the others become sure once their left neighbour is written
    model, ids = setup_oracle(tokenizer, oracle, max_tokens=12, shift=shift, easy=range(0, 1000, 3))
    plain = SamplerConfig(heal=False, trailing_fillers=False, block_size=0)
    threshold = run(model, tokenizer, plain, max_tokens=12)
    one = run(model, tokenizer, SamplerConfig(policy="one", heal=False, trailing_fillers=False, block_size=0), max_tokens=12)
    assert threshold.text == one.text == ANSWER
    assert one.forwards == 12  # one committed position per pass over the whole canvas
    assert threshold.forwards == 3


def test_a_committed_filler_fills_the_rest_of_the_canvas(tokenizer, oracle):
    # left to right, one position per pass: the answer's 3 tokens, then one filler ends the fill
    model, ids = setup_oracle(tokenizer, oracle, max_tokens=12)
    res = run(model, tokenizer, SamplerConfig(policy="one", heal=False), max_tokens=12)
    assert res.text == ANSWER and res.forwards == len(ids) + 1 < 12


def test_a_fill_has_at_least_one_real_token(tokenizer, oracle):
    model = oracle(tokenizer, {}, easy=range(1000))  # predicts filler everywhere
    assert run(model, tokenizer, SamplerConfig(heal=False, trailing_fillers=False, block_size=0)).tokens == 0
    res = run(model, tokenizer)
    assert res.tokens == 1 and res.canvas[0] != tokenizer.filler_id


@pytest.mark.parametrize("trailing", [False, True])
def test_fillers_never_come_before_a_committed_real_token(tokenizer, oracle, trailing):
    # the table leaves a hole at positions 3-4 (filler) before a sure token at 5, committed first
    row = build_row(CanvasRequest(PREFIX, SUFFIX, 8), tokenizer, 512, heal=False)
    a, b, c, d = (tokenizer.encode(w)[0] for w in (" a", " +", " b", " c"))
    table = {row.start + j: t for j, t in zip((0, 1, 2, 5), (a, b, c, d))}
    model = oracle(tokenizer, table, easy={row.start + 5}, p_lo=0.5)
    res = run(model, tokenizer, SamplerConfig(heal=False, trailing_fillers=trailing))
    real = [t != tokenizer.filler_id for t in res.canvas]
    first_filler = real.index(False)
    assert all(real[:6]) == trailing  # the hole got real tokens only under the rule
    assert not any(real[first_filler:]) or not trailing


def test_one_line_request_stops_once_its_first_line_is_written(tokenizer, oracle):
    answer = " a + b\n    c = d\n    e = f"
    model, ids = setup_oracle(tokenizer, oracle, answer=answer, max_tokens=16)
    cfg = SamplerConfig(policy="one", heal=False)
    whole = run(model, tokenizer, cfg, max_tokens=16)
    (line,) = fill(model, tokenizer, [CanvasRequest(PREFIX, SUFFIX, 16, one_line=True)], cfg)
    assert whole.text == answer
    first = tokenizer.encode(" a + b")
    assert ids[: len(first)] == first and tokenizer.decode(ids[len(first):]).startswith("\n")  # the break's own token
    assert line.text == " a + b" and line.token_ids == first  # the first line, without the break or what follows
    assert line.tokens == len(line.confidence) == len(line.pieces) == len(first)
    assert line.forwards < whole.forwards


def test_a_fill_stops_at_its_first_token_below_the_confidence_cut(tokenizer, oracle):
    # every token is committed at 0.25 or 0.2: below 0.3, the caller would drop the fill from its first one
    model, ids = setup_oracle(tokenizer, oracle, max_tokens=8, p_hi=0.25, p_lo=0.2)
    whole = run(model, tokenizer, SamplerConfig(heal=False))
    assert whole.text == ANSWER and whole.forwards > 3
    early = run(model, tokenizer, SamplerConfig(heal=False, confidence_cut=0.3))
    assert early.forwards == 1 and early.text == tokenizer.decode(ids[:1])  # the low token is kept, masks dropped
    assert early.confidence == [pytest.approx(0.25, abs=0.01)]
    assert run(model, tokenizer, SamplerConfig(heal=False, confidence_cut=0.2)).text == ANSWER  # none below 0.2
    with pytest.raises(ValueError, match="confidence_cut"):
        SamplerConfig(confidence_cut=1.5)


def test_topk_commits_k_per_step(tokenizer, oracle):
    model, _ = setup_oracle(tokenizer, oracle, max_tokens=9)
    res = run(model, tokenizer, SamplerConfig(policy="topk", k=3, heal=False, trailing_fillers=False, block_size=0), max_tokens=9)
    assert res.text == ANSWER and res.forwards == 3


def test_entropy_bounded_commits_more_when_confident(tokenizer, oracle):
    sure, _ = setup_oracle(tokenizer, oracle, max_tokens=8, easy=range(1000))
    unsure, _ = setup_oracle(tokenizer, oracle, max_tokens=8, p_hi=0.6, p_lo=0.6)
    cfg = SamplerConfig(policy="eb", gamma=1.0, heal=False, trailing_fillers=False)  # sure: ~0.12 nats each; unsure: ~3.2
    assert run(sure, tokenizer, cfg).forwards == 1
    res = run(unsure, tokenizer, cfg)
    assert res.text == ANSWER and res.forwards == 8  # each uncertain position alone exceeds gamma


def test_semi_autoregressive_blocks(tokenizer, oracle):
    model, _ = setup_oracle(tokenizer, oracle, max_tokens=12, easy=range(1000))
    res = run(model, tokenizer, SamplerConfig(block_size=4, heal=False, trailing_fillers=False), max_tokens=12)
    assert res.text == ANSWER and res.forwards == 3  # one pass per block even when all are sure


def test_time_budget_returns_a_complete_greedy_fill(tokenizer, oracle):
    model, _ = setup_oracle(tokenizer, oracle, max_tokens=16)
    res = run(model, tokenizer, SamplerConfig(policy="one", time_budget_ms=0.0, heal=False), max_tokens=16)
    assert res.budget_hit and res.forwards == 1
    assert res.text == ANSWER  # every position committed greedily, nothing left masked
    assert tokenizer.mask_id not in res.canvas


def test_cache_modes_give_the_oracle_answer(tokenizer, oracle):
    model, _ = setup_oracle(tokenizer, oracle, max_tokens=10)
    for cfg in (SamplerConfig(use_cache=False, heal=False), SamplerConfig(refresh_every=2, heal=False)):
        assert run(model, tokenizer, cfg, max_tokens=10).text == ANSWER


def test_token_healing_continues_the_word(tokenizer, oracle):
    prefix = "x = self.fo"
    row = build_row(CanvasRequest(prefix, "", 4), tokenizer, 512, heal=True)
    assert row.healed and "fo".endswith(row.healed)
    allowed = tokenizer.ids_starting_with(row.healed)
    foo = next(i for i in allowed if tokenizer.decode([i]).startswith(row.healed + "o"))
    wrong = tokenizer.encode(" bar")[0]
    model = oracle(tokenizer, {row.start: foo}, easy=range(1000), rival={row.start: wrong})
    (res,) = fill(model, tokenizer, [CanvasRequest(prefix, "", 4)], SamplerConfig())
    full = prefix + res.text
    assert full.startswith("x = self.foo"), full
    assert res.tokens == 1  # the model wrote one token: it re-types what was there, plus the "o"


def test_a_healed_fill_has_at_most_max_tokens_tokens_one_confidence_each(tokenizer, oracle):
    """The re-typed token takes one of the canvas's max_tokens positions: the count a fill reports
    (`fim --json`, serve-api's usage) is the tokens it wrote, never past max_tokens, one per confidence."""
    prefix = "x = self.fo"
    row = build_row(CanvasRequest(prefix, "", 4), tokenizer, 512, heal=True)
    foo = next(i for i in row.first_allowed if tokenizer.decode([i]).startswith(row.healed + "o"))
    rest = tokenizer.encode("(bar, baz) + qux")  # more than the canvas holds
    model = oracle(tokenizer, {row.start + i: t for i, t in enumerate([foo, *rest])}, easy=range(1000))
    (res,) = fill(model, tokenizer, [CanvasRequest(prefix, "", 4)], SamplerConfig())
    assert res.token_ids == [foo, *rest[:3]]
    assert res.tokens == len(res.confidence) == len(res.pieces) == 4
    assert prefix + res.text == prefix[: -len(row.healed)] + tokenizer.decode([foo, *rest[:3]])


def test_the_first_line_keeps_the_text_of_the_token_that_breaks_it():
    # pieces as _canvas leaves a one-line fill: the token holding the first line break is the last
    assert _first_line("f(x)\n    ", ["f", "(x", ")\n    "]) == ("f(x)", ["f", "(x", ")"])
    assert _first_line("f(x)\n    ", ["f", "(x)", "\n    "]) == ("f(x)", ["f", "(x)"])
    assert _first_line("\n", ["\n"]) == ("", [])
    assert _first_line("f(x)", ["f", "(x)"]) == ("f(x)", ["f", "(x)"])
    # a decoder that rewrites earlier text puts all of it on the first token: every token stays
    assert _first_line("f(x)\n    y", ["f(x)\n    y", "", ""]) == ("f(x)", ["f(x)", "", ""])


def test_a_healed_newline_does_not_end_a_one_line_fill(tokenizer, oracle):
    # the prefix ends with "\n": healing re-types it in the first token ("\n   "), which is not
    # the end of the line being written
    prefix, answer = "def f(x):\n    y = x\n", "\n    return y\n    z = 1\n"
    model, _ = setup_oracle(tokenizer, oracle, prefix=prefix, answer=answer, max_tokens=12, heal=True)
    cfg = SamplerConfig(policy="one")
    (whole,) = fill(model, tokenizer, [CanvasRequest(prefix, SUFFIX, 12)], cfg)
    (line,) = fill(model, tokenizer, [CanvasRequest(prefix, SUFFIX, 12, one_line=True)], cfg)
    assert whole.text == answer[1:]
    assert line.text == "    return y" and line.forwards < whole.forwards


def test_batch_of_mixed_requests_matches_each_alone(tokenizer, oracle):
    requests = [
        CanvasRequest(PREFIX, SUFFIX, 8, id="a"),
        CanvasRequest("import os\n", "", 3, id="b"),
        CanvasRequest("", "x = 1\n", 12, id="c"),
        CanvasRequest("class A:\n    def f(self):\n        return se", "\n", 5, id="d"),
    ]
    table = {q: tokenizer.encode(" value = 42 + total")[q % 5] for q in range(200)}
    model = oracle(tokenizer, table)
    for cfg in (SamplerConfig(), SamplerConfig(policy="eb"), SamplerConfig(use_cache=False, block_size=4)):
        together = fill(model, tokenizer, requests, cfg)
        for req, res in zip(requests, together):
            (alone,) = fill(model, tokenizer, [req], cfg)
            assert (res.id, res.text, res.forwards, res.confidence) == (req.id, alone.text, alone.forwards,
                                                                        alone.confidence)
    assert len({r.forwards for r in together}) > 1  # rows finished at their own pace


def test_one_forward_pass_per_step_for_the_whole_batch(tokenizer, oracle):
    table = {q: tokenizer.encode(" ok")[0] for q in range(200)}
    model = oracle(tokenizer, table)
    reqs = [CanvasRequest("a = 1\n", "", 6), CanvasRequest("b = 2\nc = 3\n", "", 6)]
    results = fill(model, tokenizer, reqs, SamplerConfig(policy="one", heal=False))
    assert model.calls == max(r.forwards for r in results) == 6


def test_bad_requests_raise_value_error(tokenizer, oracle):
    model, _ = setup_oracle(tokenizer, oracle)
    with pytest.raises(ValueError, match="max_tokens"):
        fill(model, tokenizer, [CanvasRequest("x", "", 0)])
    with pytest.raises(ValueError, match="fit"):
        fill(model, tokenizer, [CanvasRequest("x", "", 10_000)])
    with pytest.raises(ValueError, match="policy"):
        SamplerConfig(policy="greedy")
    with pytest.raises(ValueError, match="block_size"):
        SamplerConfig(block_size=-1)
    assert fill(model, tokenizer, []) == []


def test_long_context_is_cut_to_fit(tokenizer, oracle):
    # both sides are far too long for the oracle's 512 positions: the prefix keeps its end, the
    # suffix its start (a quarter of the room), and the canvas sits where the cut row puts it
    req = CanvasRequest("x = 1\n" * 2000, "y = 2\n" * 2000, 8)
    row = build_row(req, tokenizer, 512, heal=False)
    suffix = row.ids[row.start + row.length :]
    assert len(row.ids) == 512 and len(suffix) == (512 - 1 - 8) // 4
    assert tokenizer.decode(row.ids[: row.start]).endswith("x = 1\n") and tokenizer.decode(suffix).startswith("y = 2\n")
    model = oracle(tokenizer, {row.start + i: t for i, t in enumerate(tokenizer.encode(ANSWER))}, easy=range(1000))
    (res,) = fill(model, tokenizer, [req], SamplerConfig(heal=False))
    assert res.text == ANSWER and res.forwards == 1


def test_a_stopped_request_is_abandoned_between_steps(tokenizer, oracle):
    table = {q: tokenizer.encode(" ok")[0] for q in range(200)}
    model = oracle(tokenizer, table)
    reqs = [CanvasRequest("a = 1\n", "", 6), CanvasRequest("b = 2\n", "", 6)]
    cfg = SamplerConfig(policy="one", heal=False)
    decoding = Decoding(model, tokenizer, reqs, cfg)
    for step, drafts in enumerate(decoding):
        assert drafts == []  # no request asked for drafts
        if step == 0:
            decoding.stop(1)
    kept, stopped = decoding.results()
    assert stopped.cancelled and stopped.text == "" and stopped.forwards == 1
    assert not kept.cancelled and kept.forwards == 6 and kept.text == fill(model, tokenizer, reqs[:1], cfg)[0].text


def test_an_indented_empty_line_is_continued_at_its_indentation(oracle):
    """Byte-level BPE writes "\n    return" as "\n   " + " return": healing a prefix that ends in the
    token "\n    " must let the fill re-type it one blank shorter, or the only continuations are
    deeper indentation (the embedded model indented every such fill 4 columns too deep)."""
    from diffusion_lsp.engine import DEFAULT_MODEL
    from diffusion_lsp.model.network.config import SpecialTokens
    from diffusion_lsp.model.decoding.results import unhealed as _unhealed
    from diffusion_lsp.model.network.tokenizer import Tokenizer

    tok = Tokenizer.from_file(DEFAULT_MODEL / "tokenizer.json", SpecialTokens())
    prefix = "def f(x):\n    y = x * 2\n    "
    row = build_row(CanvasRequest(prefix, "", 6), tok, 512, heal=True)
    assert row.healed == "\n    "
    (shorter,) = tok.ids_of_text("\n   ")
    assert shorter in row.first_allowed
    deeper = tok.ids_of_text("\n       ")[0]  # what the constraint left before: 4 columns too deep
    model = oracle(tok, {row.start + i: t for i, t in enumerate([shorter, *tok.encode(" return y")])},
                   easy=range(1000))
    (res,) = fill(model, tok, [CanvasRequest(prefix, "", 6)], SamplerConfig())
    assert res.text == "return y" and res.token_ids[0] == shorter != deeper
    assert _unhealed("\n   y", "\n    ") == "y"  # the next token left out the blank: the user's stand
    assert _unhealed("\n\n    y", "\n    ") == "\n    y"  # a blank line first: kept


def _drive_with_joins(model, tok, first, joins, cfg):
    """Decode `first`, adding joins[k] after step k + 1 -> (results, the order requests finished in,
    the request indices the drafts were given for)."""
    decoding = Decoding(model, tok, first, cfg)
    order, drafted = [], set()
    for step, drafts in enumerate(decoding):
        drafted |= {i for i, _ in drafts}
        order += decoding.take_finished()
        if step < len(joins):
            decoding.add(joins[step])
    return decoding.results(), order + decoding.take_finished(), drafted


def test_requests_that_join_a_running_decoding_match_each_alone(tokenizer, oracle):
    """Continuous batching: requests added between steps decode as they would alone (greedy
    oracle), each is said finished once, and short ones that came later finish first."""
    requests = [
        CanvasRequest(PREFIX, SUFFIX, 8, id="a"),
        CanvasRequest("import os\n", "", 3, id="b", drafts=True),
        CanvasRequest("", "x = 1\n", 12, id="c"),
        CanvasRequest("class A:\n    def f(self):\n        return se" * 3, "\n", 5, id="d"),
    ]
    table = {q: tokenizer.encode(" value = 42 + total")[q % 5] for q in range(400)}
    model = oracle(tokenizer, table)
    for cfg in (SamplerConfig(policy="one"), SamplerConfig(policy="eb"), SamplerConfig(use_cache=False, block_size=4)):
        got, order, drafted = _drive_with_joins(model, tokenizer, requests[:1], [requests[1:3], requests[3:]], cfg)
        for req, res in zip(requests, got):
            (alone,) = fill(model, tokenizer, [req], cfg)
            assert (res.id, res.text, res.forwards, res.confidence) == (req.id, alone.text, alone.forwards,
                                                                        alone.confidence)
        assert sorted(order) == [0, 1, 2, 3] and drafted <= {1}
    assert order.index(1) < order.index(0)  # b joined after a and left before it
    assert got[0].batch > 1 and got[1].batch > 1  # they shared steps


def test_a_joining_request_can_be_stopped_before_and_after_it_joins(tokenizer, oracle):
    table = {q: tokenizer.encode(" ok")[0] for q in range(200)}
    model = oracle(tokenizer, table)
    cfg = SamplerConfig(policy="one", heal=False)
    decoding = Decoding(model, tokenizer, [CanvasRequest("a = 1\n", "", 6)], cfg)
    for step, _ in enumerate(decoding):
        if step == 0:
            assert decoding.add([CanvasRequest("b = 2\n", "", 6), CanvasRequest("c = 3\n", "", 6)]) == [1, 2]
            decoding.stop(1)  # before its first step
        if step == 2:
            decoding.stop(2)  # after it joined
    a, b, c = decoding.results()
    assert b.cancelled and b.forwards == 0 and c.cancelled and 0 < c.forwards < 6
    assert not a.cancelled and a.forwards == 6 and a.text == fill(model, tokenizer, [CanvasRequest("a = 1\n", "", 6)], cfg)[0].text


def test_joining_the_embedded_model_s_batch_changes_no_fill():
    """A real model, its context cache and padding: a longer row and a wider canvas join a running
    batch, and every fill is what it is alone (fp32)."""
    from diffusion_lsp.engine import load_engine
    from diffusion_lsp.protocol.settings import LaunchSettings

    engine = load_engine(LaunchSettings(precision="fp32"))
    reqs = [CanvasRequest("def add(a, b):\n    return ", "\n", 8, id=0),
            CanvasRequest("import os\nimport sys\n\n\ndef main(argv):\n    path = os.path.join(", ")\n    return path\n",
                        16, id=1),
            CanvasRequest("x = [", "]\n", 24, id=2)]
    for cfg in (SamplerConfig(), SamplerConfig(block_size=4)):
        got, order, _ = _drive_with_joins(engine.model, engine.tokenizer, reqs[:1], [reqs[1:2], reqs[2:]], cfg)
        alone = [engine.fill([r], cfg)[0] for r in reqs]
        assert [(r.text, r.forwards) for r in got] == [(r.text, r.forwards) for r in alone]
        assert sorted(order) == [0, 1, 2]


@pytest.mark.parametrize("cfg", [SamplerConfig(), SamplerConfig(policy="eb", block_size=4), SamplerConfig(block_size=0),
                                 SamplerConfig(use_cache=False), SamplerConfig(time_budget_ms=0.0)])
def test_the_gpus_static_step_gives_the_same_fills(tokenizer, oracle, monkeypatch, cfg):
    """On a GPU a step runs every row's whole open block through the head (a shape that does not
    depend on the data: no nonzero, no host sync); the positions that are not eligible are dropped,
    so every fill is what the CPU's step gives, with the oracle and with the embedded model."""
    from diffusion_lsp.engine import load_engine
    from diffusion_lsp.model.decoding import denoise
    from diffusion_lsp.protocol.settings import LaunchSettings

    requests = [CanvasRequest(PREFIX, SUFFIX, 8, id="a"), CanvasRequest("import os\n", "", 3, id="b"),
                CanvasRequest("", "x = 1\n", 12, id="c", one_line=True)]
    table = {q: tokenizer.encode(" value = 42 + total")[q % 5] for q in range(200)}
    engine = load_engine(LaunchSettings(precision="fp32"))
    real = [CanvasRequest("def add(a, b):\n    return ", "\n", 8), CanvasRequest("import os\nx = [", "]\n", 24)]
    runs, heads = [], []
    stats = denoise.head_stats

    def counted(model, h, *args, **kw):  # how many positions each step runs through the head
        heads[-1].append(h.shape[0])
        return stats(model, h, *args, **kw)

    monkeypatch.setattr(denoise, "head_stats", counted)
    for static in (False, True):
        monkeypatch.setattr(denoise, "STATIC_STEP", static)
        heads.append([])
        got = fill(oracle(tokenizer, table), tokenizer, requests, cfg)
        runs.append([(r.text, r.forwards, r.confidence) for r in got]
                    + [(r.text, r.forwards) for r in engine.fill(real, cfg)])
    assert runs[0] == runs[1]
    assert sum(heads[1]) > sum(heads[0])  # the static step did run more positions through the head
