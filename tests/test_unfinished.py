"""A line half typed is no change to follow or repeat (nextedit/unfinished.py). A user trial: while
`chopped = value / power` was retyped, at `chopped = value /` the server proposed deleting ` power`
on a later line: the repeat candidate (the step read as ` power` deleted), which the shipped next-edit
acceptance model liked. Here every line of a file is retyped key by key into the NextEditor (no model:
the code's candidates, judged by the shipped acceptance model, after some earlier steps), and nothing
is proposed at any prefix; a rename, a signature change and a change repeated that are finished still
are; the model's drafts are not made from a half-typed step."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

import diffusion_lsp
from diffusion_lsp.acceptance.model import AcceptanceModel
from diffusion_lsp.context.languages import language_for
from diffusion_lsp.context.records import Document
from diffusion_lsp.nextedit.follow import follow
from diffusion_lsp.nextedit.history import EditLog, Step
from diffusion_lsp.nextedit.repeat import Repeat
from diffusion_lsp.nextedit.rule import Documents, History
from diffusion_lsp.nextedit.unfinished import unfinished
from diffusion_lsp.protocol.capabilities import Capabilities
from diffusion_lsp.server.config import parse_config
from diffusion_lsp.server.next_edit import NextEditor
from diffusion_lsp.server.positions import UTF16
from diffusion_lsp.server.stats import NextEditStats

PY, JS = language_for("python", "a.py"), language_for("javascript", "a.js")
SHIPPED = Path(diffusion_lsp.__file__).parent / "checkpoints" / "default" / "edit_acceptance.json"
SOURCE = '''import math


def scale(value, power, items):
    chopped = value / power
    total = compute(value, power) + math.floor(chopped)
    result = [item.name for item in items if item.size > power]
    return round(chopped, 2) ** power, total, result


def other(x, power, items):
    y = compute(x, power) + math.floor(x / power)
    z = [item.name for item in items if item.size > power]
    return x * power, y, z
'''
SCRIPT = '''function scale(value, power) {
  const chopped = value / power;
  return compute(value, power) + Math.floor(chopped);
}

function other(x, power) {
  return compute(x, power) + Math.floor(x / power);
}
'''


class NoModel:
    """A link the editor must not ask: the code's candidates only."""

    capabilities = Capabilities(probe=True)

    async def probe(self, key, order):
        raise AssertionError("the model was asked")


class Typist:
    """A user at the keyboard: each key one change noted in the edit log (30 ms apart, so a line
    typed is one step), and the next edit asked for after it with the cursor where the key left it."""

    def __init__(self, text: str, uri: str = "file:///a.py", language: str = "python", earlier: int = 8):
        self.text, self.uri, self.language, self.version, self.now = text, uri, language, 1, 0.0
        self.log = EditLog(clock=lambda: self.now)
        self.editor = NextEditor(NoModel(), NextEditStats(), lambda kind, message: None, self.log)
        self.editor.configure(parse_config({"nextEdit": {"enable": False, "debounceMs": 0}})[0])
        self.editor.acceptance = AcceptanceModel.load(SHIPPED, "edit")
        for i in range(earlier):  # steps before: the acceptance model trusts a user who has done more
            end = self.text.count("\n")
            self.put(end, self.text.splitlines(keepends=True)[:end], f"# note {i}", 6.0)

    def put(self, line: int, lines: list[str], new: str, pause: float = 0.03):
        """Line `line` (0-based) becomes `new`; the next edit asked with the cursor at its end."""
        old = lines[line] if line < len(lines) else ""
        after = "".join(lines[:line]) + new + "\n" + "".join(lines[line + 1:]) if line < len(lines) \
            else self.text + new + "\n"
        self.log.note(self.uri, "a", self.text, after, line, line, line + (line >= len(lines)))
        self.text, self.version, self.now = after, self.version + 1, self.now + pause
        doc = Document(self.uri, self.text, self.language, self.version)
        answer = asyncio.run(self.editor.suggest(doc, self.version, line, len(new), UTF16, "a"))
        got = answer and answer.shown
        return None if got is None else (old, new, got.source, self.text[got.start:got.end], got.text)

    def retype(self, line: int, as_: str | None = None) -> list:
        """Line `line` emptied key by key to its indent and typed again (as `as_`), each key asked."""
        was = self.text.splitlines()[line]
        indent = len(was) - len(was.lstrip())
        shown = [self.put(line, self.text.splitlines(keepends=True), was[:k]) for k in range(len(was) - 1, indent - 1, -1)]
        new = was if as_ is None else as_
        shown += [self.put(line, self.text.splitlines(keepends=True), new[:k]) for k in range(indent + 1, len(new) + 1)]
        return [s for s in shown if s is not None]


@pytest.mark.parametrize("line", range(4, 8))
def test_no_next_edit_is_proposed_at_any_prefix_of_a_retyped_line(line):
    typist = Typist(SOURCE)
    assert typist.retype(line) == []
    assert typist.text == SOURCE + "".join(f"# note {i}\n" for i in range(8))


def test_nor_while_a_line_is_retyped_otherwise_or_in_javascript():
    typist = Typist(SOURCE)
    assert typist.retype(4, "    chopped = value // power") == []
    typist = Typist(SCRIPT, "file:///a.js", "javascript")
    assert typist.retype(1) == [] and typist.retype(2) == []


def test_a_finished_rename_signature_and_repeat_are_still_proposed():
    typist = Typist(SOURCE)
    lines = typist.text.splitlines(keepends=True)
    got = typist.put(3, lines, "def scale(value, exponent, items):")
    assert got[2] == "rename" and got[4] == got[3].replace("power", "exponent") and got[3].startswith("power")
    typist = Typist(SOURCE.replace("    return x * power, y, z\n", "    return x * power, y, z\n\n\nother(1, 2, [])\n"))
    got = typist.put(10, typist.text.splitlines(keepends=True), "def other(x, power, items, extra):")
    assert got[2:] == ("signature", "", ", extra")
    typist = Typist(SOURCE)  # a change in the middle of a line: the repeat candidate, made again where it stands next
    new = "    result = [item.name for item in items if item.size < power]"
    typist.put(6, typist.text.splitlines(keepends=True), new)
    doc, mine = Document(typist.uri, typist.text, "python", 9), [s for s in typist.log.steps if s.uri == typist.uri]
    offer, = Repeat()(Documents(doc.text, PY, typist.text.index(new) + len(new), doc.uri),
                      History({doc.uri: mine})).candidates
    assert (typist.text[offer.start:offer.end], offer.text, typist.text.count("\n", 0, offer.start)) == (">", "<", 12)


RULES = [  # (line before, line after, whether unfinished)
    ("    chopped = value / power", "    chopped = value /", True),  # ends in an operator, and a syntax error
    ("    chopped = value / power", "    chopped = value", True),  # cut short: being retyped
    ("    chopped = value / power", "    chopped = value / po", True),  # a name half typed
    ("    chopped = value / power", "    chopped = value // p", True),  # a name half typed, retyped otherwise
    ("    chopped = value / power", "    chopped = (value /", True),  # a bracket left open
    ("    chopped = value / power", "    chopped = value / items", False),  # a name spelled elsewhere
    ("    chopped = value / power", "    chopped = value / exponent", True),  # spelled nowhere else: half typed
    ("    chopped = value / power", "    chopped = value / 10", False),
    ("    chopped = value / power", "    chopped = (value / power)", False),
    ("    chopped = value / power", "    chopped = value / power  # the part.", False),  # a comment's end
    ("    chopped = value / power", "    chopped = value / power  # a new remark", False),  # a word of a comment
    ("import math", "from math import *", False),
]


@pytest.mark.parametrize("old, new, expected", RULES)
def test_which_steps_leave_their_line_unfinished(old, new, expected):
    text = SOURCE.replace(old + "\n", new + "\n", 1)
    line = text.splitlines().index(new)
    step = Step("u", "a.py", line, [old + "\n"], [new + "\n"])
    assert (unfinished(step, text, PY) is not None) is expected


def test_javascript_lines_continue_past_an_operator_and_a_kept_bracket_is_no_change():
    old, new = "  const chopped = value / power;", "  const chopped = value /"
    text = SCRIPT.replace(old, new)  # `value /\n  return ...` may parse as a division: the operator says it
    assert unfinished(Step("u", "a.js", 1, [old + "\n"], [new + "\n"]), text, JS) is not None
    old, new = "function scale(value, power) {", "function scale(value, power, extra) {"
    assert unfinished(Step("u", "a.js", 0, [old + "\n"], [new + "\n"]), SCRIPT.replace(old, new), JS) is None


def test_follow_says_in_one_debug_line_why_nothing_was_followed(caplog):
    old, new = "    chopped = value / power", "    chopped = value /"
    text = SOURCE.replace(old, new)
    with caplog.at_level(logging.DEBUG, logger="diffusion_lsp.nextedit.rules"):
        assert follow(text, PY, [Step("u", "a.py", 4, [old + "\n"], [new + "\n"])], text.index(new) + len(new)) is None
    said = [r.getMessage() for r in caplog.records if r.name == "diffusion_lsp.nextedit.rules"]
    assert said == ["nothing followed: line 5 is being retyped ('chopped = value /' of 'chopped = value / power')"]


def test_no_draft_is_made_from_a_half_typed_step():
    from test_nextedit_drafts import Scripted, run

    from diffusion_lsp.nextedit.settings import NextEditSettings
    from diffusion_lsp.nextedit.suggest import EditRequest

    old, new = "    chopped = value / power\n", "    chopped = value /\n"
    text = SOURCE.replace(old, new)
    step = Step("file:///a.py", "a.py", 4, [old], [new])
    req = EditRequest(text, "a.py", (4, len(new) - 1), PY, [step.diff()], step, NextEditSettings(region_lines=20),
                      lambda t: len(t.split()))
    assert run(req, Scripted()).drafts == 0
    done = Step("file:///a.py", "a.py", 4, [old], ["    chopped = value / items\n"])
    req.last_step, req.text = done, SOURCE.replace(old, done.new[0])
    assert run(req, Scripted()).drafts > 0  # the same step finished: its drafts are made


def test_a_line_that_ends_in_an_operator_inside_brackets_parses_and_is_still_unfinished():
    text = "total = (value *\n         power)\n"
    step = Step("u", "a.py", 0, ["total = (value\n"], ["total = (value *\n"])
    assert unfinished(step, text, PY) == "line 1 ends in '*'"
    kept = Step("u", "a.py", 0, ["total = (value -\n"], ["total = (value *\n"])  # it ended so before: no change
    assert unfinished(kept, text, PY) is None


def test_a_rename_to_a_name_its_old_one_starts_with_goes_on_through_sites_that_end_their_lines():
    from test_calls import suggest_until_done

    source = ("def f(total_count):\n    a = total_count\n    b = 1\n    c = 2\n    d = 3\n    e = 4\n"
              "    return a + total_count\n")
    text, shown = suggest_until_done(source.replace("f(total_count)", "f(total)"), source, 0)
    # accepting `a = total` cuts its line short, as retyping it would: the rename going on still goes on
    assert [t for _, t in shown] == ["total", "total"] and "total_count" not in text


def test_a_line_cut_inside_a_word_is_being_retyped_though_the_rest_is_a_known_name():
    text = "x = re.sub(a, b, c)\nindent = self.sub\ny = self.subsequent_indent\n"
    step = Step("u", "a.py", 1, ["indent = self.subsequent_indent\n"], ["indent = self.sub\n"])
    assert unfinished(step, text, PY) == "line 2 is being retyped ('indent = self.sub' of " \
                                         "'indent = self.subsequent_indent')"
