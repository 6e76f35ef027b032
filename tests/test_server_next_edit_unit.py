"""NextEditor without LSP or a model: stale versions, the LSP range of an edit, a shared request,
supersession, full mode for a link that cannot probe, the per-document answer, the undo filter fed
by the edit history, the enable setting. The model is a fake link that waits on events."""

from __future__ import annotations

import asyncio

from diffusion_lsp.context.records import Document
from diffusion_lsp.nextedit.history import EditLog
from diffusion_lsp.server.config import parse_config
from diffusion_lsp.server.next_edit import EditAnswer, NextEditor
from diffusion_lsp.server.positions import UTF8, UTF16, range_at
from diffusion_lsp.server.stats import NextEditStats
from diffusion_lsp.protocol.capabilities import Capabilities
from diffusion_lsp.protocol.answers import Fill, Probed

URI = "file:///a.py"
LINE = 'label = "é😀"; total = add(2, 3)\n'
TEXT = "import os\n\n" + LINE
NEW_LINE = 'label = "é😀"; total = add(2, 3, 4)\n'
AT = TEXT.index("3)") + 1  # where ", 4" goes
DOC = Document(URI, TEXT, "python", 1)


class FakeLink:
    """probe: doubts the middle's line `doubted` (one piece per line), after `release` when held;
    fill: answers `text`. Records every order and each cancelled probe."""

    def __init__(self, text=NEW_LINE, doubted=2, can_probe=True, hold=False):
        self.text, self.doubted = text, doubted
        self.capabilities = Capabilities(probe=True) if can_probe else Capabilities(rewrite=True)  # an API's
        self.probes, self.fills, self.rewrites, self.cancelled = [], [], [], 0
        self.started, self.release = asyncio.Event(), asyncio.Event()
        if not hold:
            self.release.set()

    async def probe(self, key, order):
        self.probes.append((key, order))
        self.started.set()
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        lines = order.middle.splitlines(keepends=True)
        prob = [0.05 if i == self.doubted else 0.9 for i in range(len(lines))]
        return Probed(lines, prob, [0.9] * len(lines), order.stride, 1.0)

    async def fill(self, key, order):
        self.fills.append((key, order))
        return Fill(self.text, [self.text], [0.9], ms=2.0, forwards=5)

    async def rewrite(self, key, order):  # an API's edit endpoint answers the region in a code fence
        self.rewrites.append((key, order))
        return Fill(f"```python\n{self.text}\n```", [self.text], [1.0], ms=2.0)


def make(link, steps=None, **next_edit):
    logged = []
    editor = NextEditor(link, NextEditStats(), lambda kind, message: logged.append((kind, message)),
                        steps or EditLog())
    cfg, problems = parse_config({"nextEdit": {"enable": True, **next_edit}})  # no model claims them here
    assert problems == []
    editor.configure(cfg, count_tokens=lambda t: len(t.split()))
    editor.logged = logged
    return editor




def sent(answer: EditAnswer | None, encoding: str = UTF16) -> tuple | None:
    """What the server sends of an answer: (uri, version, its LSP range as the reply computes it, its
    text, its offsets, whether it is a jump, its source)."""
    if answer is None:
        return None
    e = answer.shown
    return (answer.doc.uri, answer.doc.version, range_at(answer.doc.text, e.start, e.end, encoding), e.text,
            e.start, e.end, answer.jump, e.source)


EXPECTED = (URI, 1, ((2, 31), (2, 31)), ", 4", AT, AT, False, "model")  # "é😀": 2 + 1 UTF-16 units


def test_an_edit_gets_its_range_in_the_negotiated_encoding_and_is_kept_for_its_version():
    link = FakeLink()
    editor = make(link)

    async def go():
        return await editor.suggest(DOC, 1, 2, 0, UTF16, "a.py"), await editor.suggest(DOC, 1, 2, 3, UTF8, "a.py")

    utf16, utf8 = asyncio.run(go())
    assert sent(utf16) == EXPECTED
    assert sent(utf8, UTF8)[2:6] == (((2, 34), (2, 34)), ", 4", AT, AT)  # 2 + 4 bytes
    assert [key for key, _ in link.probes] == ["nextedit:" + URI] * 2
    assert link.probes[0][1].middle == TEXT and link.fills[0][1].prefix.endswith("import os\n\n")
    s = editor.stats
    assert (s.requests, s.answered, s.empty, s.stale) == (2, 2, 0, 0) and s.reasons == {"edit": 2}
    assert list(s.forwards) == [4 + 5, 4 + 5]
    assert editor.cached(URI, 1) == utf8 and editor.cached(URI, 2) is None and editor.cached("file:///b.py", 1) is None


def test_a_stale_version_or_an_unknown_document_is_answered_empty_at_once():
    link = FakeLink()
    editor = make(link)

    async def go():
        return [await editor.suggest(DOC, 0, 2, 0, UTF16, "a.py"), await editor.suggest(None, 1, 0, 0, UTF16, "a.py")]

    assert asyncio.run(go()) == [None, None]
    assert editor.stats.stale == 2 and editor.stats.requests == 0 and link.probes == [] and link.fills == []
    assert editor.cached(URI, 1) is None


def test_disabled_next_edit_answers_empty_without_the_model():
    link = FakeLink()
    editor = make(link, enable=False)  # a rename would still be followed (no rename here): never the model
    assert asyncio.run(editor.suggest(DOC, 1, 2, 0, UTF16, "a.py")) is None
    assert link.probes == [] and link.fills == []
    off = make(link, enable=False, follow=False)
    assert asyncio.run(off.suggest(DOC, 1, 2, 0, UTF16, "a.py")) is None and off.stats.requests == 0


def test_the_same_question_while_it_runs_shares_its_answer():
    link = FakeLink(hold=True)
    editor = make(link)

    async def go():
        first = asyncio.ensure_future(editor.suggest(DOC, 1, 2, 0, UTF16, "a.py"))
        await link.started.wait()
        second = asyncio.ensure_future(editor.suggest(DOC, None, 2, 0, UTF16, "a.py"))  # runs before the release
        link.release.set()
        return await first, await second

    assert tuple(map(sent, asyncio.run(go()))) == (EXPECTED, EXPECTED)
    assert len(link.probes) == 1 and len(link.fills) == 1 and editor.stats.requests == 1


def test_a_newer_request_for_the_document_supersedes_the_older():
    link = FakeLink(hold=True)
    editor = make(link)
    newer_doc = Document(URI, TEXT, "python", 2)

    async def go():
        older = asyncio.ensure_future(editor.suggest(DOC, 1, 2, 0, UTF16, "a.py"))
        await link.started.wait()
        newer = asyncio.ensure_future(editor.suggest(newer_doc, 2, 2, 5, UTF16, "a.py"))
        got_older = await older
        link.release.set()
        return got_older, await newer

    older, newer = asyncio.run(go())
    assert older is None and sent(newer) == (URI, 2, ((2, 31), (2, 31)), ", 4", AT, AT, False, "model")
    assert link.cancelled == 1 and len(link.probes) == 2 and len(link.fills) == 1
    assert editor.stats.superseded == 1 and editor.stats.answered == 1 and editor.stats.empty == 1
    assert editor.cached(URI, 2) == newer and editor.cached(URI, 1) is None


def test_a_link_that_cannot_probe_asks_the_apis_edit_endpoint():
    link = FakeLink(text="import os\n\n" + NEW_LINE.rstrip("\n"), can_probe=False)
    editor = make(link)
    assert sent(asyncio.run(editor.suggest(DOC, 1, 2, 0, UTF16, "a.py"))) == EXPECTED
    assert link.probes == [] and link.fills == [] and len(link.rewrites) == 1
    (_, order), = link.rewrites
    # the region (the whole file) between Mercury's tags, the cursor at the start of line 2
    assert "current_file_path: a.py\n<|code_to_edit|>\nimport os\n\n<|cursor|>" + LINE + "<|/code_to_edit|>" in order.content
    assert editor.stats.reasons == {"edit": 1}


def test_an_edit_that_undoes_the_users_last_step_is_not_suggested():
    steps = EditLog()
    steps.note(URI, "a.py", "import os\n\n" + NEW_LINE, TEXT, 2, 2, 2)  # the user just took ", 4" out
    link = FakeLink()
    editor = make(link, steps=steps)
    assert asyncio.run(editor.suggest(DOC, 1, 2, 0, UTF16, "a.py")) is None
    assert editor.stats.reasons == {"undo": 1} and editor.stats.empty == 1
    prefix = link.probes[0][1].prefix
    assert "@@ -2,2 +2,2 @@\n \n-" + NEW_LINE + "+" + LINE in prefix  # the step is in the history


def test_changed_lines_keep_what_is_outside_them_equal():
    """session._changed_lines, on random edits: the lines before `first` and after the last changed
    lines are the same in both texts, and the spans are real lines of each."""
    import random

    from diffusion_lsp.server.session import _changed_lines

    rng = random.Random(0)
    for _ in range(3000):
        before = "".join(rng.choice("ab\n") for _ in range(rng.randint(0, 12)))
        chars = list(before)
        for _ in range(rng.randint(0, 3)):
            i = rng.randint(0, len(chars))
            if rng.random() < 0.4 and i < len(chars):
                del chars[i]
            else:
                chars.insert(i, rng.choice("ab\n"))
        after = "".join(chars)
        first, last_before, last_after = _changed_lines(before, after)
        a, b = before.split("\n"), after.split("\n")
        assert a[:first] == b[:first] and a[last_before + 1:] == b[last_after + 1:], (before, after)
        assert first <= last_before < len(a) and first <= last_after < len(b), (before, after)
    assert _changed_lines("x = 1\ny = 2\n", "x = 1\ny = 3\n") == (1, 1, 1)


def test_a_document_with_cr_or_crlf_line_ends_gets_its_own_line_ends_back():
    """On a "\\r"-only file a next edit rewrote the region with "\\n" line ends (and the parse filter,
    which cuts windows at "\\n", never fired): the plan now sees "\\n" and its edit is mapped back."""
    unix = "import os\n\ntotal = add(2, 3)\nx = 1\n"
    edits = {}
    for end in ("\r", "\r\n", "\n"):
        text = unix.replace("\n", end)
        editor = make(FakeLink(text="total = add(2, 3)\nprint(total)\n", doubted=2))
        doc = Document(URI, text, "python", 1)
        edits[end] = edit = asyncio.run(editor.suggest(doc, 1, 2, 0, UTF16, "a.py")).shown
        assert range_at(text, edit.start, edit.end, UTF16) == ((3, 0), (3, 0)), end  # an insertion at the start of "x = 1"
        assert text[:edit.start] + edit.text + text[edit.end:] == text.replace(f"){end}", f"){end}print(total){end}")
    assert [edits[e].text for e in edits] == ["print(total)\r", "print(total)\r\n", "print(total)\n"]
