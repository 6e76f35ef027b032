"""nextedit without a model: edit steps and their diffs (history.py), the editable region (region.py),
the prompt (formats/edit_prompt.py), one minimal edit and its filters (edits.py). Expected values are worked out
by hand; token counts use a word counter so that budgets are easy to follow."""

from __future__ import annotations

import pytest

from diffusion_lsp.context.languages import language_for
from diffusion_lsp.candidate import Candidate, Source
from diffusion_lsp.nextedit.edits import breaks_parse, minimal_edit, reverts
from diffusion_lsp.nextedit.history import HUGE_LINES, EditLog, Step, diffs_between, last_change_end, render, \
    steps_between
from diffusion_lsp.formats.edit_prompt import EDITED, HISTORY, NO_HISTORY, ORIGINAL, edit_prompt, history_block
from diffusion_lsp.nextedit.region import editable_region

PY, JS = language_for("python"), language_for("javascript")


def words(text: str) -> int:
    return len(text.split())


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def doc(n: int) -> str:
    return "".join(f"l{k}\n" for k in range(n))


def change(text: str, line: int, new_line: str) -> str:
    lines = text.splitlines(keepends=True)
    lines[line] = new_line
    return "".join(lines)


# ---- history ----

def test_keystrokes_on_one_line_and_the_next_are_one_step():
    clock = Clock()
    steps = EditLog(merge_s=1.0, clock=clock)
    v0 = "a\nb\nc\nd\n"
    v1, v2, v3 = "a\nbx\nc\nd\n", "a\nbxy\nc\nd\n", "a\nbxy\ncz\nd\n"
    steps.note("u", "p.py", v0, v1, 1, 1, 1)
    clock.t = 0.5
    steps.note("u", "p.py", v1, v2, 1, 1, 1)
    assert steps.diffs() == ["--- a/p.py\n+++ b/p.py\n@@ -1,3 +1,3 @@\n a\n-b\n+bxy\n c\n"]
    clock.t = 1.4  # within merge_s of the last keystroke (0.5), not of the first
    steps.note("u", "p.py", v2, v3, 2, 2, 2)  # the next line
    assert len(steps.steps) == 1
    step = steps.last()
    assert (step.first, step.old, step.new) == (0, ["a\n", "b\n", "c\n"], ["a\n", "bxy\n", "cz\n"])
    assert step.diff() == "--- a/p.py\n+++ b/p.py\n@@ -1,3 +1,3 @@\n a\n-b\n-c\n+bxy\n+cz\n"


def test_typing_then_deleting_it_again_leaves_no_step():
    clock = Clock()
    steps = EditLog(clock=clock)
    steps.note("u", "p.py", "a\nb\n", "a\nbx\n", 1, 1, 1)
    clock.t = 0.2
    steps.note("u", "p.py", "a\nbx\n", "a\nb\n", 1, 1, 1)
    assert list(steps.steps) == [] and steps.last() is None


def test_a_change_far_away_or_after_merge_s_or_in_another_document_starts_a_new_step():
    clock = Clock()
    steps = EditLog(size=5, merge_s=1.0, clock=clock)
    v0 = doc(10)
    v1 = change(v0, 2, "L2\n")
    steps.note("a", "a.py", v0, v1, 2, 2, 2)
    clock.t = 0.1
    v2 = change(v1, 7, "L7\n")  # five lines below the step
    steps.note("a", "a.py", v1, v2, 7, 7, 7)
    clock.t = 5.0  # long after: the same line again is a new step
    v3 = change(v2, 7, "M7\n")
    steps.note("a", "a.py", v2, v3, 7, 7, 7)
    clock.t = 5.1  # within merge_s, same line number, other document
    steps.note("b", "b.py", "x\ny\n", "x\nY\n", 1, 1, 1)
    assert steps.diffs() == [
        "--- a/a.py\n+++ b/a.py\n@@ -2,3 +2,3 @@\n l1\n-l2\n+L2\n l3\n",
        "--- a/a.py\n+++ b/a.py\n@@ -7,3 +7,3 @@\n l6\n-l7\n+L7\n l8\n",
        "--- a/a.py\n+++ b/a.py\n@@ -7,3 +7,3 @@\n l6\n-L7\n+M7\n l8\n",
        "--- a/b.py\n+++ b/b.py\n@@ -1,2 +1,2 @@\n x\n-y\n+Y\n",
    ]
    assert steps.last().uri == "b" and steps.last("a").new == ["l6\n", "M7\n", "l8\n"]
    assert steps.last("c") is None


@pytest.mark.parametrize("pasted", ["p\n" * (HUGE_LINES + 50), "q" * 9000 + "\n"])
def test_a_huge_change_clears_the_history(pasted):
    clock = Clock()
    steps = EditLog(clock=clock)
    steps.note("b", "b.py", "x\n", "y\n", 0, 0, 0)
    clock.t = 10.0
    before = "a\nb\n"
    after = "a\n" + pasted + "b\n"
    steps.note("a", "a.py", before, after, 1, 1, 1 + pasted.count("\n"))
    assert list(steps.steps) == [] and steps.diffs() == []


def test_the_log_keeps_the_newest_steps_and_next_edit_sees_the_newest_n():
    clock = Clock()
    steps = EditLog(size=3, clock=clock)
    for k in range(4):
        clock.t = 10.0 * k
        steps.note(f"u{k}", "p.py", "x\n", f"x{k}\n", 0, 0, 0)
    assert [s.uri for s in steps.steps] == ["u1", "u2", "u3"]
    assert steps.diffs(2) == [s.diff() for s in list(steps.steps)[1:]] and steps.diffs(0) == []
    assert len(steps.diffs()) == len(steps.diffs(5)) == 3


def test_completion_sees_the_steps_text_one_snippet_per_spot():
    """One note per change feeds both views: typing at one spot in several steps (slower than
    merge_s) is one snippet, its newest text; another spot is another; a huge step clears both."""
    clock = Clock()
    log = EditLog(clock=clock)
    v0 = "a = 1\nb = 2\nc = 3\nd = 4\ne = 5\nf = 6\ng = 7\n"
    v1 = v0.replace("b = 2", "b = 2x")
    log.note("file:///a.py", "a.py", v0, v1, 1, 1, 1)
    clock.t = 5.0  # a new step at the same spot
    v2 = v1.replace("b = 2x", "b = 22")
    log.note("file:///a.py", "a.py", v1, v2, 1, 1, 1)
    clock.t = 10.0
    v3 = v2.replace("g = 7", "g = 77")  # elsewhere
    log.note("file:///a.py", "a.py", v2, v3, 6, 6, 6)
    assert len(log.diffs()) == 3
    assert [e.text for e in log.snippets()] == ["a = 1\nb = 22\nc = 3", "f = 6\ng = 77"]
    clock.t = 20.0
    big = "".join(f"x{i} = {i}\n" for i in range(20))
    log.note("file:///b.py", "b.py", "", big, 0, 0, 20)  # a pasted block: its first lines only
    assert log.snippets()[-1].text == "".join(f"x{i} = {i}\n" for i in range(14)).rstrip("\n")


def test_render_shows_context_and_adds_missing_line_breaks():
    assert render("p.py", 4, ["a\n", "b\n", "c"], ["a\n", "B\n", "c"]) == \
        "--- a/p.py\n+++ b/p.py\n@@ -5,3 +5,3 @@\n a\n-b\n+B\n c\n"
    assert render("p.py", 0, [], ["new\n"]) == "--- a/p.py\n+++ b/p.py\n@@ -1,0 +1,1 @@\n+new\n"


def test_steps_and_diffs_between_two_versions_one_per_hunk():
    old = doc(10)
    lines = old.splitlines(keepends=True)
    new = "".join(lines[:2] + ["N\n"] + lines[2:8] + ["L8\n"] + lines[9:])
    steps = steps_between("m.py", old, new)
    assert [(s.first, s.old, s.new) for s in steps] == [
        (1, ["l1\n", "l2\n"], ["l1\n", "N\n", "l2\n"]),
        (8, ["l7\n", "l8\n", "l9\n"], ["l7\n", "L8\n", "l9\n"]),
    ]
    # each hunk is a step applied after the ones before it: its lines are numbered in `new`
    assert diffs_between("m.py", old, new) == [
        "--- a/m.py\n+++ b/m.py\n@@ -2,2 +2,3 @@\n l1\n+N\n l2\n",
        "--- a/m.py\n+++ b/m.py\n@@ -9,3 +9,3 @@\n l7\n-l8\n+L8\n l9\n",
    ]
    assert diffs_between("m.py", old, old) == []


@pytest.mark.parametrize("old, new, end", [
    ("ab\ncd\n", "ab\ncXd\n", (1, 2)),  # an insertion inside a line: after the inserted character
    ("a\nb\n", "a\nNEW\nb\n", (1, 3)),  # a whole line inserted
    ("f(a, b)\n", "f(x, b)\n", (0, 3)),  # a replacement
    ("x = 1\n", "x = 42\n", (0, 6)),
    ("a\nb\nc\n", "a\nc\n", (1, 0)),  # a line deleted: where it was
    ("abc\n", "ac\n", (0, 1)),  # a character deleted
    ("a\nb", "a\nbc", (1, 2)),  # the last line, without a trailing line break
    ("a\nxy", "a\nxzy", (1, 2)),
    ("a\nb\n", "a\nb\nc", (2, 1)),
    ("a\nb\n", "a\nb\n", None),
])
def test_last_change_end(old, new, end):
    assert last_change_end(old, new) == end


def test_last_change_end_is_the_last_of_several_changes():
    assert last_change_end("one\ntwo\nthree\n", "ONE\ntwo\nthreeX\n") == (2, 6)


# ---- region ----

def plain(n: int) -> str:
    return "".join(f"line {k}\n" for k in range(n))


def test_the_plain_window_has_more_lines_below_the_cursor():
    text = plain(30)
    r = editable_region(text, 10, None, words, max_lines=20)
    lines = text.splitlines(keepends=True)
    assert (r.first, r.end, r.lines) == (7, 18, 11)
    assert text[r.start_offset:r.end_offset] == "".join(lines[7:18])


def test_the_region_stays_within_max_lines_and_max_tokens_and_holds_the_cursor():
    text = plain(30)
    r = editable_region(text, 10, None, words, max_lines=4)
    assert (r.first, r.end) == (9, 13)
    r = editable_region(text, 10, None, words, max_lines=20, max_tokens=10)  # 2 words a line: 5 lines
    assert (r.first, r.end) == (8, 13)  # trimmed from the end farther from the cursor
    assert words(text[r.start_offset:r.end_offset]) == 10
    for cursor in (0, 1, 15, 29):
        for max_lines, max_tokens in ((1, 350), (3, 350), (20, 4), (20, 1)):
            r = editable_region(text, cursor, PY, words, max_lines, max_tokens)
            assert r.first <= cursor < r.end and r.lines <= max_lines
            assert r.lines == 1 or words(text[r.start_offset:r.end_offset]) <= max_tokens


def test_the_cursor_past_the_end_is_clamped_and_an_empty_document_has_an_empty_region():
    text = plain(30)
    r = editable_region(text, 100, None, words)
    assert (r.first, r.end, r.end_offset) == (26, 30, len(text))
    r = editable_region("a\nb", 7, None, words)
    assert (r.first, r.end, r.start_offset, r.end_offset) == (0, 2, 0, 3)
    for spec in (None, PY):
        r = editable_region("", 3, spec, words)
        assert (r.first, r.end, r.start_offset, r.end_offset) == (0, 1, 0, 0)


PY_DOC = ("import os\n"  # 0
          "\n"
          "result = compute(\n"  # 2
          "    alpha,\n"  # 3
          "    beta,\n"
          "    gamma,\n"
          ")\n"  # 6
          "x = 1\n"
          "y = 2\n"
          "z = 3\n"
          "u = 4\n"
          "v = 5\n"
          "w = 6\n"
          "def f(a,\n"  # 13
          "      b):\n"
          "    return a + b\n"  # 15
          "\n"
          "t = 0\n")


def test_a_statement_cut_by_the_window_is_taken_whole_when_it_fits():
    lines = PY_DOC.splitlines(keepends=True)
    assert editable_region(PY_DOC, 6, None, words).first == 3  # the plain window starts inside the call
    r = editable_region(PY_DOC, 6, PY, words, max_lines=20)
    assert (r.first, r.end) == (2, 16)  # the call above, the function below
    assert PY_DOC[r.start_offset:r.end_offset] == "".join(lines[2:16])
    # with 12 lines the call still fits (2..14) but the function (13..16) would not: left cut
    r = editable_region(PY_DOC, 6, PY, words, max_lines=12)
    assert (r.first, r.end) == (2, 14)
    assert editable_region(PY_DOC, 6, None, words, max_lines=12).first == 3


def test_a_javascript_function_cut_by_the_window_is_taken_whole():
    text = ("const a = 1;\n"
            "function add(x, y) {\n"
            "  const s = x + y;\n"
            "  return s;\n"
            "}\n") + "".join(f"let b{k} = {k};\n" for k in range(11))
    assert (editable_region(text, 5, None, words).first, editable_region(text, 5, None, words).end) == (2, 13)
    r = editable_region(text, 5, JS, words)
    assert (r.first, r.end) == (1, 13)


# ---- prompt ----

D = [f"-old{k}\n+new{k}\n" for k in range(1, 5)]  # 2 words each


def test_history_keeps_the_newest_diffs_that_fit_oldest_first():
    assert history_block(D, words, budget=6) == (HISTORY + D[2] + D[3], 2)  # 1 + 2 + 2; a third would be 7
    assert history_block(D, words, budget=100, max_steps=3) == (HISTORY + D[1] + D[2] + D[3], 3)
    assert history_block(D, words, budget=100, max_steps=0) == (HISTORY + NO_HISTORY, 0)
    assert history_block([], words, budget=100) == (HISTORY + NO_HISTORY, 0)
    assert history_block(D, words, budget=2) == (HISTORY + NO_HISTORY, 0)
    assert history_block(["-a\n+b"], words, budget=9) == (HISTORY + "-a\n+b\n", 1)


BEFORE = "".join(f"b{k} x\n" for k in range(1, 7))  # 6 lines, 2 words each
AFTER = "".join(f"a{k} x\n" for k in range(1, 4))


def test_the_prompt_cuts_the_code_at_line_boundaries_around_the_region():
    p = edit_prompt(D[:3], "p.py", BEFORE, AFTER, words, budget=20)
    head = HISTORY + D[0] + D[1] + D[2] + "<|current_file|> p.py\n"  # 9 words, of 10 for the history
    # 11 words left: a quarter (2) for the code after, the rest (9) for the code before
    assert p.prefix == head + "b3 x\nb4 x\nb5 x\nb6 x\n"
    assert p.suffix == "a1 x\n" and p.history_steps == 3
    assert words(p.prefix) + words(p.suffix) <= 20
    p = edit_prompt(D[:3], "p.py", BEFORE, AFTER, words, budget=20, history_budget=4)
    assert p.prefix.startswith(HISTORY + D[2] + "<|current_file|>") and p.history_steps == 1
    p = edit_prompt(D, "p.py", BEFORE, AFTER, words, budget=1000, max_steps=2)
    assert p.prefix == HISTORY + D[2] + D[3] + "<|current_file|> p.py\n" + BEFORE and p.suffix == AFTER


def test_full_mode_shows_the_old_region_within_the_budget():
    p = edit_prompt([], "p.py", BEFORE, AFTER, words, budget=20, old_region="r1 y\nr2 y")
    # head 4 words, old region block 6: 10 left, 2 of them after the region
    assert p.prefix == (HISTORY + NO_HISTORY + "<|current_file|> p.py\n" + "b3 x\nb4 x\nb5 x\nb6 x\n"
                        + ORIGINAL + "r1 y\nr2 y\n" + EDITED)
    assert p.suffix == "a1 x\n" and p.history_steps == 0
    assert words(p.prefix) + words(p.suffix) == 20
    tiny = edit_prompt([], "p.py", BEFORE, AFTER, words, budget=10, old_region="r1 y\nr2 y")
    assert tiny.prefix.endswith("p.py\n" + ORIGINAL + "r1 y\nr2 y\n" + EDITED) and tiny.suffix == ""


# ---- edits ----

@pytest.mark.parametrize("old, new, at, edit", [
    ("abc", "abc", 0, None),
    ("ac", "abc", 10, Candidate(11, 11, "b", Source.MODEL)),  # insertion
    ("abc", "ac", 0, Candidate(1, 2, "", Source.MODEL)),  # deletion
    ("f(a, b)", "f(x, b)", 0, Candidate(2, 3, "x", Source.MODEL)),  # replacement
    ("aaa", "aa", 0, Candidate(2, 3, "", Source.MODEL)),  # the common suffix overlaps the common prefix
    ("aa", "aaa", 5, Candidate(7, 7, "a", Source.MODEL)),
    ("", "x\n", 3, Candidate(3, 3, "x\n", Source.MODEL)),
])
def test_minimal_edit(old, new, at, edit):
    got = minimal_edit(old, new, Source.MODEL, at)
    assert got == edit
    if got is not None:
        assert got.apply(" " * at + old) == " " * at + new


def test_an_edit_applied():
    assert Candidate(4, 5, "42", Source.MODEL).apply("x = 1\n") == "x = 42\n"
    assert Candidate(0, 0, "# ", Source.MODEL).apply("x\n") == "# x\n"
    assert Candidate(1, 3, "", Source.MODEL).apply("abcd") == "ad"


def test_an_edit_that_restores_the_last_step_is_an_undo():
    step = Step("u", "p.py", 1, ["b\n"], ["bx\n"])
    text = "a\nbx\nc\n"
    assert reverts(step, text, Candidate(3, 4, "", Source.MODEL))  # takes the x away again
    assert not reverts(step, text, Candidate(5, 6, "C", Source.MODEL))  # the next line
    assert not reverts(step, text, Candidate(2, 2, "#", Source.MODEL))  # the same line, something else
    assert not reverts(None, text, Candidate(3, 4, "", Source.MODEL))
    # the user went on typing on that line: the step's lines are no longer there, nothing is compared
    assert not reverts(step, "a\nbxy\nc\n", Candidate(3, 5, "", Source.MODEL))
    far = Step("u", "p.py", 1, ["b\n"], ["bx\n"])
    assert not reverts(far, "a\nbx\nc\nd\ne\nf\n", Candidate(10, 11, "", Source.MODEL))


def test_re_adding_the_lines_the_last_step_deleted_is_an_undo():
    step = Step("u", "p.py", 0, ["a\n", "b\n", "c\n"], ["a\n", "c\n"])
    assert reverts(step, "a\nc\n", Candidate(2, 2, "b\n", Source.MODEL))
    assert not reverts(step, "a\nc\n", Candidate(2, 2, "z\n", Source.MODEL))


@pytest.mark.parametrize("spec, text, old, new, broken", [
    (PY, "def f(x):\n    return x + 1\n", "x + 1", "x +", True),
    (PY, "def f(x):\n    return x + 1\n", "x + 1", "x + 2", False),
    (PY, "def f(x:\n    return x + 1\n", "x + 1", "x +", False),  # it did not parse before
    (None, "def f(x):\n    return x + 1\n", "x + 1", "x +", False),
    (JS, "function f(x) {\n  return x + 1;\n}\n", "}\n", "\n", True),
    (JS, "function f(x) {\n  return x + 1;\n}\n", "x + 1", "x * 2", False),
    (JS, "function f(x) {\n  return x + ;\n}\n", "x + ;", "x + (;", False),
])
def test_breaks_parse(spec, text, old, new, broken):
    start = text.index(old)
    assert breaks_parse(spec, text, Candidate(start, start + len(old), new, Source.MODEL)) is broken


def test_last_change_end_after_a_line_break_at_the_end_is_the_next_line():
    from diffusion_lsp.nextedit.history import last_change_end

    assert last_change_end("a", "a\n") == (1, 0)
    assert last_change_end("ab", "a\nb") == (1, 0)


def test_a_huge_line_near_the_cursor_is_never_counted():
    """A 2 MB minified line near the cursor was counted nine times for one next edit (3 s each, the
    GIL held: the whole server stalled). Over every budget by its length alone, it is left out uncounted."""
    from diffusion_lsp.formats.edit_prompt import cut_lines

    lines = [f"x{i} = {i}\n" for i in range(40)]
    lines[22] = "y = [" + ", ".join(["1"] * 300_000) + "]\n"
    text = "".join(lines)

    def count(t: str) -> int:
        assert len(t) < 100_000, "the huge line was counted"
        return len(t.split())

    region = editable_region(text, 18, language_for("python"), count, max_lines=20, max_tokens=350)
    assert region.first <= 18 < region.end <= 22  # it stops before the huge line
    assert cut_lines("".join(lines[22:]), count, 128, keep_end=False) == ""  # nearest line too big: nothing
    assert cut_lines("".join(lines[10:23]), count, 128, keep_end=True) == ""
    assert cut_lines("".join(lines[:22]), count, 128, keep_end=True) == "".join(lines[:22])


def test_a_long_text_is_counted_without_holding_the_gil():
    from diffusion_lsp.context.tokens import LONG_TEXT, TokenCounter

    class Tok:  # records which encoding call counted what
        calls = []

        def encode(self, text, add_special_tokens):
            self.calls.append(("encode", len(text)))
            return type("E", (), {"ids": text.split()})()

        def encode_batch(self, texts, add_special_tokens):  # releases the GIL in tokenizers
            self.calls.append(("encode_batch", len(texts[0])))
            return [type("E", (), {"ids": t.split()})() for t in texts]

    count = TokenCounter(Tok())
    assert count("a b") == 2 and count("a " * LONG_TEXT) == LONG_TEXT
    assert Tok.calls == [("encode", 3), ("encode_batch", 2 * LONG_TEXT)]
