"""nextedit/suggest.py without a server: which lines the probe doubts, the span re-masked, and the
pipeline's orders and outcome over a fake backend that answers each order (and over the in-process
backend on the oracle model of conftest.py). Expected values are worked out by hand; token counts
use a word counter."""

from __future__ import annotations

import asyncio
import dataclasses
import math

import pytest

from diffusion_lsp.protocol.capabilities import Capabilities
from diffusion_lsp.protocol.failure import BackendError, Failure, Stop
from diffusion_lsp.backend.local import LocalBackend
from diffusion_lsp.context.languages import language_for
from diffusion_lsp.protocol.settings import SamplerConfig
from diffusion_lsp.candidate import Candidate, Source
from diffusion_lsp.nextedit.history import Step
from diffusion_lsp.formats.edit_prompt import EDITED, HISTORY, NO_HISTORY, ORIGINAL
from diffusion_lsp.nextedit.run import predict_file
from diffusion_lsp.nextedit.settings import NextEditSettings
from diffusion_lsp.nextedit.suggest import EditRequest, choose_span, doubted_lines, narrow, suggest
from diffusion_lsp.protocol.answers import Fill, Probed
from diffusion_lsp.protocol.requests import FillRequest, ProbeRequest

PY = language_for("python")


def words(text: str) -> int:
    return len(text.split())


# ---- doubted_lines, choose_span ----

REGION = "a = 1\nb = 2\nc = 3\n"
TOKENS = ["a", " =", " 1", "\n", "b", " =", " 2", "\n", "c", " =", " 3", "\n"]


def probed(pieces, doubts: dict[int, tuple[float, float]]) -> Probed:
    """Every piece sure (0.9 of 0.9) but those in `doubts`: index -> (prob, best)."""
    prob = [doubts.get(i, (0.9, 0.9))[0] for i in range(len(pieces))]
    best = [doubts.get(i, (0.9, 0.9))[1] for i in range(len(pieces))]
    return Probed(list(pieces), prob, best, 4, 1.0)


def test_a_line_is_doubted_by_its_most_doubted_token():
    assert doubted_lines(REGION, probed(TOKENS, {}), 4.0) == {}
    got = doubted_lines(REGION, probed(TOKENS, {6: (0.1, 0.8)}), 4.0)  # " 2": 8 times less likely
    assert got.keys() == {1} and got[1] == pytest.approx(math.log(8))
    assert doubted_lines(REGION, probed(TOKENS, {6: (0.1, 0.8)}), 10.0) == {}  # not doubted enough
    got = doubted_lines(REGION, probed(TOKENS, {6: (0.1, 0.8), 4: (0.05, 0.9)}), 4.0)
    assert got == pytest.approx({1: math.log(18)})
    # a line break or indentation is never the doubted token
    assert doubted_lines(REGION, probed(TOKENS, {7: (0.001, 0.9), 3: (0.001, 0.9)}), 4.0) == {}


def test_a_piece_spanning_lines_counts_on_the_line_it_starts():
    pieces = ["a = 1\n", "b = 2\nc", " = 3\n"]
    got = doubted_lines(REGION, probed(pieces, {1: (0.01, 0.5), 2: (0.1, 0.9)}), 4.0)
    assert got == pytest.approx({1: math.log(50), 2: math.log(9)})
    assert doubted_lines("a\nb", probed(["a\n", "b\n", "zz"], {2: (0.01, 0.9)}), 4.0) == {}  # past the region


def test_the_span_is_the_most_doubted_line_grown_over_doubted_neighbours():
    assert choose_span({}, 0, 3) is None
    assert choose_span({1: 2.0, 5: 2.0}, 4, 3) == (5, 6)  # a tie: the line nearer the cursor
    assert choose_span({1: 2.0, 5: 2.0}, 2, 3) == (1, 2)
    assert choose_span({1: 2.0, 3: 2.0}, 1, 3) == (1, 2)  # a gap is not bridged
    doubted = {2: 1.5, 3: 3.0, 4: 1.6, 5: 1.4}
    assert choose_span(doubted, 0, 3) == (2, 5)  # 3, then 4 (1.6 > 1.5), then 2 (1.5 > 1.4)
    assert choose_span(doubted, 0, 2) == (3, 5)
    assert choose_span(doubted, 0, 1) == (3, 4)
    assert choose_span(doubted, 0, 10) == (2, 6)


def test_the_re_masked_span_runs_from_the_first_to_the_last_doubted_token_of_the_lines():
    sure = probed(TOKENS, {})
    assert narrow(REGION, probed(TOKENS, {6: (0.1, 0.8)}), 4.0, (1, 2)) == (9, 11)  # " 2"
    assert narrow(REGION, probed(TOKENS, {4: (0.1, 0.8), 6: (0.1, 0.8)}), 4.0, (1, 2)) == (6, 11)  # "b = 2"
    assert narrow(REGION, probed(TOKENS, {6: (0.1, 0.8), 8: (0.1, 0.8)}), 4.0, (1, 3)) == (9, 13)  # " 2\nc"
    assert narrow(REGION, probed(TOKENS, {6: (0.1, 0.8), 8: (0.1, 0.8)}), 4.0, (2, 3)) == (12, 13)  # not line 1's
    assert narrow(REGION, sure, 4.0, (1, 2)) == (6, 12)  # nothing doubted there: the whole line
    assert narrow(REGION, sure, 4.0, (2, 3)) == (12, 18)


# ---- plan, driven by a fake ----

TEXT = ("import os\n\n\n\n"
        "def area(w, h):\n"  # line 4: the region starts here (the window starts at 5, inside the function)
        "    return w * h\n"
        "\n\n"
        "print(area(2, 3))\n")  # line 8: the cursor
OLD = TEXT[TEXT.index("def"):]  # the region, lines 4..8
DIFF = "--- a/m.py\n+++ b/m.py\n@@ -5,1 +5,1 @@\n-def area(w):\n+def area(w, h):\n"
PREFIX = HISTORY + DIFF + "<|current_file|> m.py\n" + "import os\n\n\n\n"
PRINT = TEXT.index("print(")
ADD_4 = Candidate(PRINT + 15, PRINT + 15, ", 4", Source.MODEL)  # print(area(2, 3| -> print(area(2, 3, 4))


def bare(edit: Candidate | None) -> Candidate | None:
    """The edit without the model's confidence in it (out.confidence, asserted on its own)."""
    return None if edit is None else dataclasses.replace(edit, confidence=None)


def request(mode=None, last_step=None, diffs=(DIFF,), **settings) -> EditRequest:
    return EditRequest(TEXT, "m.py", (8, 0), PY, list(diffs), last_step, NextEditSettings(**settings), words,
                       sampling=SamplerConfig(threshold=0.8), mode=mode)


class Fake:
    """Answers a probe doubting the region lines in `doubted` (one piece per line), and a fill with
    `text`; or None to either when told."""

    def __init__(self, doubted=(), text="", confidence=(0.9, 0.8), probe_none=False, fill_none=False):
        self.doubted, self.text, self.confidence = set(doubted), text, list(confidence)
        self.probe_none, self.fill_none = probe_none, fill_none
        self.orders = []

    def __call__(self, order):
        self.orders.append(order)
        if isinstance(order, ProbeRequest):
            if self.probe_none:
                return None
            lines = order.middle.splitlines(keepends=True)
            return probed(lines, {i: (0.05, 0.9) for i in self.doubted})
        # where the fill ends is as sure as its least sure token
        end = min(self.confidence, default=1.0)
        return None if self.fill_none else Fill(self.text, [self.text], self.confidence, ms=3.0, forwards=6,
                                                end_confidence=end)


class FakeBackend:
    """A Backend whose answers come from `answer(order)`; None is an order the backend dropped."""

    capabilities = Capabilities(probe=True)

    def __init__(self, answer):
        self.answer = answer

    async def fill(self, key, order):
        return self._given(order)

    async def probe(self, key, order):
        return self._given(order)

    def _given(self, order):
        if (got := self.answer(order)) is None:
            raise BackendError.dropped(Stop.SUPERSEDED)
        return got


def run(req: EditRequest, fake) -> object:
    return asyncio.run(suggest(req, FakeBackend(fake), "k"))


def test_refine_probes_the_region_and_stops_when_nothing_is_doubted():
    fake = Fake()
    out = run(request(), fake)
    assert fake.orders == [ProbeRequest(PREFIX, OLD, "", 4)]
    assert (out.edit, out.reason, out.mode, out.forwards, out.model_ms) == (None, "no-doubt", "refine", 4, 1.0)
    assert (out.region.first, out.region.end, out.region.start_offset, out.region.end_offset) == \
        (4, 9, TEXT.index("def"), len(TEXT))
    fake = Fake()
    run(request(stride=2, history_steps=0), fake)
    assert fake.orders == [ProbeRequest(HISTORY + NO_HISTORY + "<|current_file|> m.py\nimport os\n\n\n\n", OLD, "", 2)]


def test_the_history_setting_keeps_the_newest_steps():
    older = "--- a/m.py\n+++ b/m.py\n@@ -1,1 +1,1 @@\n-import sys\n+import os\n"
    fake = Fake()
    run(request(diffs=(older, DIFF), history_steps=1), fake)
    assert fake.orders[0].prefix == PREFIX
    fake = Fake()
    run(request(diffs=(older, DIFF)), fake)
    assert fake.orders[0].prefix == HISTORY + older + DIFF + "<|current_file|> m.py\nimport os\n\n\n\n"


def test_refine_refills_the_doubted_line_and_answers_the_minimal_edit():
    fake = Fake(doubted={4}, text="print(area(2, 3, 4))")
    req = request()
    out = run(req, fake)
    probe, fill = fake.orders
    assert isinstance(probe, ProbeRequest) and isinstance(fill, FillRequest)
    head = "def area(w, h):\n    return w * h\n\n\n"
    # "print(area(2," "3))": 2 words, and 8 of slack
    assert (fill.prefix, fill.suffix, fill.max_tokens) == (PREFIX + head, "", 10)
    assert fill.sampling == req.sampling and not fill.one_line
    assert (bare(out.edit), out.reason, out.mode) == (ADD_4, "edit", "refine")
    assert (out.forwards, out.model_ms, out.edited_tokens, out.jump) == (4 + 6, 1.0 + 3.0, 2, False)
    assert out.confidence == pytest.approx((0.9 + 0.8 + 0.8) / 3)  # tokens and where the fill ends
    assert out.edit.apply(TEXT) == TEXT.replace("area(2, 3)", "area(2, 3, 4)")


def test_only_the_doubted_tokens_are_re_masked():
    def answer(order):
        answers.append(order)
        if isinstance(order, ProbeRequest):
            lines = order.middle.splitlines(keepends=True)
            pieces = lines[:4] + ["print(area(2,", " 3", "))\n"]
            return probed(pieces, {5: (0.05, 0.9)})  # " 3"
        return Fill(" 3, 4", [" 3", ",", " 4"], [0.9, 0.9, 0.9], ms=3.0, forwards=6)

    answers = []
    out = run(request(), answer)
    fill = answers[1]
    assert fill.prefix == PREFIX + OLD[:OLD.index(" 3))")] and fill.prefix.endswith("print(area(2,")
    assert (fill.suffix, fill.max_tokens) == ("))\n", 1 + 8)  # " 3": 1 word, and 8 of slack
    assert (bare(out.edit), out.reason, out.forwards) == (ADD_4, "edit", 4 + 6)


def test_an_edit_far_from_the_cursor_is_a_jump():
    fake = Fake(doubted={0}, text="def area(w, h, d):\n")
    out = run(request(), fake)
    fill = fake.orders[1]
    assert fill.prefix == PREFIX and fill.suffix == "    return w * h\n\n\nprint(area(2, 3))\n"
    at = TEXT.index("h):") + 1
    assert (bare(out.edit), out.reason, out.jump) == (Candidate(at, at, ", d", Source.MODEL), "edit", True)  # line 4, cursor on 8
    assert not run(request(jump_lines=4), Fake(doubted={0}, text="def area(w, h, d):\n")).jump


def test_full_mode_shows_the_old_region_and_fills_the_whole_region():
    new_region = OLD.replace("area(2, 3)", "area(2, 3, 4)").rstrip("\n")
    fake = Fake(text=new_region)
    out = run(request(mode="full"), fake)
    (fill,) = fake.orders
    assert fill.prefix == PREFIX + ORIGINAL + OLD + EDITED
    assert fill.suffix == "" and fill.max_tokens == 9 + 8  # the region's 9 words and 8 of slack
    assert (bare(out.edit), out.reason, out.mode, out.forwards, out.model_ms) == (ADD_4, "edit", "full", 6, 3.0)
    fake = Fake(text=new_region)
    out = run(EditRequest(TEXT, "m.py", (8, 0), PY, [DIFF], None, NextEditSettings(mode="full"), words), fake)
    assert [type(o) for o in fake.orders] == [FillRequest] and bare(out.edit) == ADD_4


UNDO_STEP = Step("file:///m.py", "m.py", 8, ["print(area(2, 3, 4))\n"], ["print(area(2, 3))\n"])


@pytest.mark.parametrize("mode", ["refine", "full"])
@pytest.mark.parametrize("line, confidence, last_step, reason", [
    ("print(area(2, 3))", (0.9,), None, "unchanged"),
    ("print(area(2, 3)", (0.9,), None, "parse"),  # a bracket short
    ("print(area(2, 3, 4))", (0.1, 0.2), None, "low-confidence"),  # below minConfidence 0.3
    ("print(area(2, 3, 4))", (0.9,), UNDO_STEP, "undo"),  # the user just took ", 4" out
    ("print(area(2, 3, 4))", (0.9,), Step("u", "m.py", 5, ["x\n"], ["y\n"]), "edit"),  # that step moved on
])
def test_filters(mode, line, confidence, last_step, reason):
    text = line if mode == "refine" else OLD.replace("print(area(2, 3))\n", line)
    out = run(request(mode=mode, last_step=last_step), Fake(doubted={4}, text=text, confidence=confidence))
    assert out.reason == reason
    assert bare(out.edit) == (ADD_4 if reason == "edit" else None)
    assert out.forwards == (10 if mode == "refine" else 6)


@pytest.mark.parametrize("mode, fake, orders", [
    ("refine", Fake(probe_none=True), 1),
    ("refine", Fake(doubted={4}, fill_none=True), 2),
    ("full", Fake(fill_none=True), 1),
])
def test_a_dropped_order_ends_the_pipeline(mode, fake, orders):
    with pytest.raises(BackendError) as e:
        run(request(mode=mode), fake)
    assert e.value.kind is Failure.DROPPED and len(fake.orders) == orders


# ---- predict_file: the in-process backend on the oracle model ----

class Recording:
    """An Engine that records what its probe and fills cost."""

    def __init__(self, engine):
        self.engine, self.probes, self.fills, self.orders = engine, [], [], []
        self.capabilities = engine.capabilities

    def answer_probe(self, order, key=None):
        r = self.engine.answer_probe(order, key)
        self.probes.append(r)
        return r

    def answer(self, orders, keys, stops=None):
        fills = self.engine.answer(orders, keys, stops)
        self.orders.extend(orders)
        self.fills.extend(fills)
        return fills


def backend_for(engine, can_probe=True):
    if not can_probe:  # the backend says what its engine says it can do
        engine.capabilities = dataclasses.replace(engine.capabilities, probe=False)
    return LocalBackend(engine)


def predict(engine, tokenizer, *args, can_probe=True):
    count = lambda t: len(tokenizer.encode(t))  # noqa: E731
    return asyncio.run(predict_file(backend_for(engine, can_probe), "m.py", *args, PY, count))


CURRENT = "import os\na = 1\nb = 2\nc = 3\nd = 4\n"


def oracle_engine(tokenizer, oracle):
    from diffusion_lsp.engine import Engine

    x = tokenizer.encode("x")
    assert len(x) == 1
    # the model's first choice everywhere is "x": every token of the file is doubted equally
    return Engine(oracle(tokenizer, {q: x[0] for q in range(512)}), tokenizer, {})


def test_predict_file_refills_the_lines_at_the_cursor_and_counts_every_forward(tokenizer, oracle):
    engine = Recording(oracle_engine(tokenizer, oracle))
    old = CURRENT.replace("a = 1", "a = 0")
    got = predict(engine, tokenizer, old, CURRENT, (2, 0))
    # all five lines tie: the cursor's line, grown downwards to maxSpanLines (3) lines, is refilled with x
    assert got.outcome.reason == "edit" and got.outcome.mode == "refine"
    assert got.text is not None and got.text == got.outcome.edit.apply(CURRENT)
    (req,) = engine.orders
    head = "import os\na = 1\n"
    assert req.prefix.endswith(head) and CURRENT.endswith(req.suffix)
    n_mid = len(tokenizer.encode(CURRENT[len(head):len(CURRENT) - len(req.suffix)]))  # "b = 2 ... d = 4"
    assert req.max_tokens == n_mid + max(8, n_mid // 4)  # the canvas and its slack
    # all of it "x", after the canvas's first token, which re-types the prefix's last "\n" (token healing)
    assert got.text == head + "x" * (req.max_tokens - 1) + "\n"
    assert got.outcome.edit.start == len(head)
    (probe,), (fill,) = engine.probes, engine.fills
    assert probe.forwards == 4 and fill.forwards >= 1
    assert got.forwards == got.outcome.forwards == 4 + fill.forwards


def test_predict_file_with_an_engine_that_cannot_probe_uses_full_mode(tokenizer, oracle):
    engine = Recording(oracle_engine(tokenizer, oracle))
    got = predict(engine, tokenizer, CURRENT.replace("a = 1", "a = 0"), CURRENT, (2, 0), can_probe=False)
    assert got.outcome.mode == "full" and engine.probes == [] and len(engine.fills) == 1
    assert got.forwards == engine.fills[0].forwards
    n_old = len(tokenizer.encode(CURRENT))  # the region is the whole file: it is rewritten in full
    canvas = n_old + max(8, n_old // 4)  # its first token re-types the prompt's last "\n" (token healing)
    assert got.text == got.outcome.edit.apply(CURRENT) == "x" * (canvas - 1) + "\n"


def test_an_empty_fill_deletes_the_doubted_line_gated_by_where_the_fill_ends():
    class Deleting(Fake):
        def __call__(self, order):
            if isinstance(order, ProbeRequest):
                return super().__call__(order)
            self.orders.append(order)
            return Fill("", [], [], ms=3.0, forwards=2, end_confidence=self.end)

    fake = Deleting(doubted={4})
    fake.end = 0.9
    out = run(request(), fake)
    line = "print(area(2, 3))\n"
    assert (out.reason, bare(out.edit)) == ("edit", Candidate(PRINT, PRINT + len(line), "", Source.MODEL))
    fake = Deleting(doubted={4})
    fake.end = 0.1  # the model was not sure the span ends at once: no suggestion
    assert run(request(), fake).reason == "low-confidence"
