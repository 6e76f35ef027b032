"""The rules that follow a change are bounded (nextedit/budget.py): a signature with 60,000 calls is
followed with one suggestion of at most GROUP_SITES calls, the nearest first; a budget already spent
answers with what it has, or nothing, never an error; a stopped parse gives no tree. In the server
(NextEditor), one document's follow never waits for another's (a fake rule held on events), a newer
request stops the older's, and a signature change reaches every open importer however many are open
(20, 60, 200) and whatever order they were opened in. No timing is asserted."""

from __future__ import annotations

import asyncio
import threading

import pytest

from diffusion_lsp.context.languages import language_for
from diffusion_lsp.context.records import Document
from diffusion_lsp.nextedit.budget import GROUP_SITES, GROUP_SPAN, UNBOUNDED, Budget
from diffusion_lsp.candidate import Candidate, Source
from diffusion_lsp.nextedit.follow import follow
from diffusion_lsp.nextedit.history import EditLog, Step
from diffusion_lsp.nextedit.names import parsed
from diffusion_lsp.nextedit.rule import NOTHING, Documents, History, Proposal
from diffusion_lsp.nextedit.rules import propose
from diffusion_lsp.nextedit.scope import Rename
from diffusion_lsp.nextedit.signature import call_edits
from diffusion_lsp.server import next_edit as server_next_edit
from diffusion_lsp.server.config import parse_config
from diffusion_lsp.server.next_edit import NextEditor
from diffusion_lsp.server.positions import UTF16
from diffusion_lsp.server.stats import NextEditStats

PY = language_for("python", "a.py")
CALLS = 60_000
HEAD = "def area(a, b):\n    return a * b\n\n"
BODY = "".join(f"v{i} = area({i}, 2)\n" for i in range(CALLS))
NEW = HEAD.replace("(a, b)", "(a, b, scale)") + BODY
STEP = Step("u", "a.py", 0, ["def area(a, b):\n"], ["def area(a, b, scale):\n"])


def line_at(text: str, offset: int) -> int:
    return text.count("\n", 0, offset)


def test_a_signature_with_60000_calls_is_followed_one_bounded_group_at_a_time_nearest_first():
    found = propose(Documents(NEW, PY, 0), History.of_one([STEP], budget=Budget()))
    first = found.candidates[0] if found.candidates else None
    assert first is not None and first.source == "signature"
    assert line_at(NEW, first.start) == 3  # the first call, under the def
    assert first.text.count(", scale") == GROUP_SITES and line_at(NEW, first.end) - line_at(NEW, first.start) < GROUP_SPAN
    at = NEW.index("v30000 = ")  # the cursor far down the file: the calls from there on
    middle = propose(Documents(NEW, PY, at), History.of_one([STEP], found.change, Budget())).candidates[0]
    assert middle is not None and line_at(NEW, middle.start) <= line_at(NEW, at) <= line_at(NEW, middle.end)
    assert middle.text.startswith(", scale)") and middle.text.count(", scale") == GROUP_SITES  # the group there


def test_a_budget_already_spent_answers_with_what_it_has_or_nothing():
    spent = Budget.of(-1e6)  # a deadline long past (a parse moves it back by what it took: not that far)
    assert follow(NEW, PY, [STEP], 0, budget=spent) is None  # nothing yet: no error
    change, edits = call_edits([STEP], NEW, PY, budget=spent)
    assert change.function == "area" and edits == []  # the change is known; no time for its calls
    few = Budget(most=3)
    assert [line_at(NEW, s) for s, _, _ in call_edits([STEP], NEW, PY, budget=few)[1]] == [3, 4, 5]
    stopped = Budget()
    stopped.stop()
    assert follow(NEW, PY, [STEP], 0, budget=stopped) is None
    found = call_edits([STEP], NEW, PY, budget=stopped)  # None when its parse was abandoned, else no calls
    assert found is None or found[1] == []


def test_a_stopped_budget_abandons_a_parse_and_keeps_nothing():
    text = "".join(f"w{i} = sum([{i}, 2])\n" for i in range(20_000))  # parsed nowhere else
    stopped = Budget()
    stopped.stop()
    with stopped.applied():
        assert parsed(PY, text) is None
    assert parsed(PY, text) is not None  # the same text, with no budget applied: parsed in full


def test_rules_asked_alone_still_see_every_call():
    text = NEW[:NEW.index("v3000 = ")]
    assert len(call_edits([STEP], text, PY, budget=UNBOUNDED)[1]) == 3000


def make_editor(documents=lambda uri: None, log=None) -> NextEditor:
    class NoModel:  # the sites come from the code: the model is never asked
        capabilities = None

    editor = NextEditor(NoModel(), NextEditStats(), lambda kind, message: None, log or EditLog(merge_s=0),
                        documents=documents)
    editor.configure(parse_config({"nextEdit": {"enable": False, "debounceMs": 0}})[0])
    return editor


class HeldRule:
    """A stand-in for the rules' `propose`: the document `held` blocks until its budget is stopped
    (a huge follow still running); any other document's answers at once."""

    def __init__(self, held: str):
        self.held, self.started, self.ended, self.budget = held, threading.Event(), threading.Event(), None

    def __call__(self, documents, history, kinds, rules=()):
        if documents.text != self.held:
            return Proposal((Candidate(0, 1, "width", Source.RENAME),), Rename("w", "width", 0))
        self.budget = history.budget
        self.started.set()
        self.budget.clock.stop.wait()
        self.ended.set()
        return NOTHING


def test_a_second_documents_next_edit_is_answered_while_the_firsts_follow_runs(monkeypatch):
    rule = HeldRule("huge\n")
    monkeypatch.setattr(server_next_edit, "propose", rule)
    editor = make_editor()
    huge, small = Document("file:///huge.py", "huge\n", "python", 1), Document("file:///small.py", "w\n", "python", 1)

    async def go():
        first = asyncio.ensure_future(editor.suggest(huge, 1, 0, 0, UTF16, "huge.py"))
        await asyncio.to_thread(rule.started.wait)
        # a fail, not a hang, before the fix (one thread for every document's follow): the guard is generous
        second = await asyncio.wait_for(editor.suggest(small, 1, 0, 0, UTF16, "small.py"), 60)
        still_running = not first.done()
        rule.budget.stop()  # the huge follow ends
        return second, still_running, await first

    second, still_running, first = asyncio.run(go())
    assert second is not None and second.shown.text == "width" and still_running and first is None


def test_a_newer_request_for_the_document_stops_the_older_follow(monkeypatch):
    rule = HeldRule("huge\n")
    monkeypatch.setattr(server_next_edit, "propose", rule)
    editor = make_editor()

    async def go():
        older = asyncio.ensure_future(editor.suggest(Document("file:///huge.py", "huge\n", "python", 1), 1, 0, 0,
                                                     UTF16, "huge.py"))
        await asyncio.to_thread(rule.started.wait)
        newer = await editor.suggest(Document("file:///huge.py", "w\n", "python", 2), 2, 0, 0, UTF16, "huge.py")
        return await older, newer

    older, newer = asyncio.run(go())
    assert older is None and newer is not None
    assert rule.ended.wait(60)  # the older rule saw its budget stopped, and returned
    assert editor.stats.superseded == 1


SHAPES = "def area(w, h):\n    return w * h\n"
IMPORTER = "from pkg.shapes import area\n\n\ndef box(w, h):\n    return area(w, h)\n\n\n\n\nprint(area(1, 2))\n"


@pytest.mark.parametrize("importers", [20, 60, 200])
def test_a_signature_change_reaches_every_open_importer(importers):
    log = EditLog(merge_s=0)
    shapes = Document("file:///pkg/shapes.py", SHAPES.replace("(w, h)", "(w, h, scale)"), "python", 2)
    docs = {shapes.uri: shapes} | {f"file:///pkg/use{i}.py": Document(f"file:///pkg/use{i}.py", IMPORTER, "python", 1)
                                   for i in range(importers)}  # opened in this order: shapes.py first
    editor = make_editor(documents=docs.get, log=log)
    log.note(shapes.uri, "pkg/shapes.py", SHAPES, shapes.text, 0, 0, 0)
    for uri in list(docs)[1:]:
        for _ in range(3):
            doc = docs[uri]
            others = [d for u, d in list(docs.items())[-33:] if u != uri]  # the server's: the 32 opened last
            answer = asyncio.run(editor.suggest(doc, doc.version, 0, 0, UTF16, uri[8:], others))
            if answer is None:
                break
            edit = answer.shown
            after = doc.text[:edit.start] + edit.text + doc.text[edit.end:]  # accepted
            at = line_at(doc.text, edit.start)
            log.note(uri, uri[8:], doc.text, after, at, at, at)
            docs[uri] = Document(uri, after, "python", doc.version + 1)
    reached = [u for u, d in docs.items() if u != shapes.uri and "area(w, h, scale)" in d.text
               and "area(1, 2, scale)" in d.text]
    assert len(reached) == importers
