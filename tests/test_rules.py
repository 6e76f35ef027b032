"""The next-edit rules' table (nextedit/rules.py): each rule has its own source, named by the edit
acceptance model's features; the first followed rule with sites wins and its change travels with
its candidate; a repeat is proposed only to a caller that asks for Kind.REPEAT (an acceptance model
decides), never by the rules alone; a half-typed step is followed by no `whole_step` rule."""

from __future__ import annotations

from diffusion_lsp.candidate import Kind, Request, Source
from diffusion_lsp.context.languages import language_for
from diffusion_lsp.nextedit.history import Step
from diffusion_lsp.nextedit.rule import Documents, History
from diffusion_lsp.nextedit.rules import RULES, propose
from diffusion_lsp.nextedit.scope import Rename

PY = language_for("python")
SOURCE = "def area(w, h):\n    x = w * h\n    return x * w\n\n\nprint(w)\n"


def test_each_rule_has_a_source_of_its_own_that_the_edit_model_names():
    sources = [rule.source for rule in RULES]
    assert len(set(sources)) == len(sources) and set(sources) <= set(Request.EDIT.sources)
    assert [rule.source for rule in RULES if rule.source.kind is not Kind.CODE] == [Source.REPEAT]


def test_the_first_followed_rule_with_sites_wins_and_its_change_travels_with_it():
    text = SOURCE.replace("def area(w, h)", "def area(width, h)")
    step = Step("u", "a.py", 0, ["def area(w, h):\n"], ["def area(width, h):\n"])
    found = propose(Documents(text, PY, 0, "u"), History({"u": [step]}))
    assert [(c.source, text[c.start:c.end], c.text) for c in found.candidates] == [
        (Source.RENAME, "w * h\n    return x * w", "width * h\n    return x * width")]
    assert found.change == Rename("w", "width", text.index("width"))


def test_a_repeat_is_proposed_only_to_a_caller_that_asks_for_one():
    text = "a = 2 + b\nc = 1 + d\n"  # a literal changed: no rule follows it, the repeat makes it again
    step = Step("u", "a.py", 0, ["a = 1 + b\n"], ["a = 2 + b\n"])
    documents, history = Documents(text, PY, 5, "u"), History({"u": [step]})
    assert propose(documents, history).candidates == ()  # the rules alone never show a repeat
    found = propose(documents, history, {Kind.CODE, Kind.REPEAT})
    assert [(c.source, text[c.start:c.end], c.text) for c in found.candidates] == [(Source.REPEAT, "1", "2")]
    assert found.change is None


def test_a_half_typed_step_is_followed_by_no_whole_step_rule():
    text = SOURCE.replace("def area(w, h)", "def area(w, h, ")
    step = Step("u", "a.py", 0, ["def area(w, h):\n"], ["def area(w, h, :\n"])
    assert propose(Documents(text, PY, 0, "u"), History({"u": [step]}), set(Kind)).candidates == ()
