"""Completer without LSP or a model, with the real context and post-processing: input guards, cache,
supersession, cancellation, the parse-error re-sample, the replace range, context work off the
event loop. The model is a fake link that waits on events."""

from __future__ import annotations

import asyncio
import threading

import pytest

from diffusion_lsp.candidate import Candidate, Source
from diffusion_lsp.context.records import Document, EditSnippet
from diffusion_lsp.lifecycle import Latest, Stopped, race
from diffusion_lsp.server.completion import Completer, locate, replace_range
from diffusion_lsp.server.failures import BadInput
from diffusion_lsp.server.config import parse_config
from diffusion_lsp.server.indexer import Indexer
from diffusion_lsp.protocol.failure import BackendError, Failure, Stop
from diffusion_lsp.server.positions import UTF8, UTF16
from diffusion_lsp.server.stats import Stats
from diffusion_lsp.protocol.capabilities import Capabilities
from diffusion_lsp.protocol.answers import DraftTally, Fill

WAIT = 30  # seconds: only reached when a test is failing
DOC = Document("file:///a.py", "import os\n\nprint(os.sep)\n", "python")
CURSOR = (1, 0)  # the blank line: a one-line completion


def shown(text: str, doc: Document = DOC, at: tuple[int, int] = CURSOR, replace_chars: int = 0) -> Candidate:
    """The model's completion `text` shown at `at` (line, column) of `doc`."""
    return Candidate.at(locate(doc.text, *at, UTF16, 5000), text, Source.MODEL, replace_chars)


def test_locate_converts_and_refuses_bad_positions():
    text = "x = 'é😀'\ny = \n"
    assert locate(text, 1, 4, UTF16, 5000) == text.index("y") + 4
    assert locate(text, 0, 12, UTF8, 5000) == len("x = 'é😀'") and locate(text, 0, 11, UTF8, 5000) == 7
    for line, column, reason in [(3, 0, "past the end of the document"), (1, 9, "past the end of its line"),
                                 (-1, 0, "past the end of the document"), (0, -1, "past the end of its line")]:
        with pytest.raises(BadInput, match=reason):
            locate(text, line, column, UTF16, 5000)
    with pytest.raises(BadInput, match="binary"):
        locate("a\x00b", 0, 1, UTF16, 5000)
    with pytest.raises(BadInput, match="6000 characters"):
        locate("x" * 6000, 0, 1, UTF16, 5000)


def test_replace_range_covers_the_replaced_characters_on_the_line_only():
    text = "f(é)\nz"
    assert replace_range(text, Candidate.at(3, "1)", Source.MODEL), UTF16) is None
    assert replace_range(text, Candidate.at(3, "1)", Source.MODEL, 1), UTF8) == ((0, 4), (0, 5))
    assert replace_range(text, Candidate.at(3, "1)", Source.MODEL, 9), UTF16) == ((0, 3), (0, 4))


class FakeLink:
    """Answers `texts` in turn (the last one from then on); with `hold`, waits until released (or is
    cancelled, or superseded by a newer order with the same key as every Backend is: each recorded).
    Records each FillRequest. It cannot probe: no drafts."""

    capabilities = Capabilities()

    def __init__(self, *texts, hold=False, delay_s=0.0, error=None):
        self.texts, self.orders, self.cancelled, self.delay_s, self.error = list(texts or ["os.getcwd()"]), [], 0, \
            delay_s, error
        self.started, self.release = asyncio.Event(), asyncio.Event()
        self.latest = Latest(lambda key: asyncio.Event())
        if not hold:
            self.release.set()

    async def fill(self, key, order):
        self.orders.append(order)
        self.started.set()
        if self.error is not None:
            raise self.error
        try:
            with self.latest.take(key) as newer:
                await race(self.release.wait(), newer.wait())
            await asyncio.sleep(self.delay_s)
        except Stopped:
            self.cancelled += 1
            raise BackendError.dropped(Stop.SUPERSEDED, "superseded") from None
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        text = self.texts.pop(0) if len(self.texts) > 1 else self.texts[0]
        return Fill(text, [text], [0.99], ms=1.0)


def make(link, count_tokens=len, edits=(), **completion):
    logged = []
    completer = Completer(link, Stats(), lambda kind, message: logged.append((kind, message)),
                          lambda: list(edits), count_tokens)
    completer.configure(parse_config({"completion": {"confidenceCut": 0.0, "drafts": False, **completion}})[0])
    completer.logged = logged
    return completer


def test_answer_then_cache_hit_without_the_model():
    link = FakeLink()
    completer = make(link)

    async def go():
        return [await completer.complete(DOC, *CURSOR, UTF16) for _ in range(2)]

    assert asyncio.run(go()) == [shown("os.getcwd()")] * 2
    assert len(link.orders) == 1 and completer.stats.cache_hits == 1
    order = link.orders[0]
    assert order.prefix.endswith("import os\n") and order.suffix == "\nprint(os.sep)\n" and order.one_line


def test_an_answer_that_writes_over_the_auto_closed_bracket_carries_its_range():
    doc = Document("file:///b.py", "import os\nprint()\n", "python")
    answer = asyncio.run(make(FakeLink("os.sep) + 1")).complete(doc, 1, 6, UTF16))
    assert answer == shown("os.sep) + 1", doc, (1, 6), 1) and replace_range(doc.text, answer, UTF16) == ((1, 6), (1, 7))


def test_a_newer_request_supersedes_and_abandons_the_older_fill():
    link = FakeLink(hold=True)
    completer = make(link)

    async def go():
        older = asyncio.ensure_future(completer.complete(DOC, *CURSOR, UTF16))
        await link.started.wait()
        newer_doc = Document(DOC.uri, "import os\nx\nprint(os.sep)\n", "python")
        newer = asyncio.ensure_future(completer.complete(newer_doc, 1, 1, UTF16))
        assert await older is None
        link.release.set()
        return await newer

    assert asyncio.run(go()) == Candidate.at(len("import os\nx"), "os.getcwd()", Source.MODEL)  # the newer request's own fill
    assert completer.stats.superseded == 1 and link.cancelled == 1


def test_a_superseded_completions_fill_is_cancelled_at_once_not_awaited_to_its_end():
    """Before, the older request awaited its fill until the backend itself dropped it (when the newer
    request's fill, with the same key, reached it after its debounce) or answered it, and then threw the
    answer away. Now the newer request's arrival ends it and cancels its fill in the backend, while the
    newer one still waits for typing to pause."""
    link = FakeLink(hold=True)
    completer = make(link)

    async def go():
        older = asyncio.ensure_future(completer.complete(DOC, *CURSOR, UTF16))
        await link.started.wait()
        completer.configure(parse_config({"completion": {"confidenceCut": 0.0, "drafts": False,
                                                         "debounceMs": 5000}})[0])
        newer = asyncio.ensure_future(completer.complete(DOC, *CURSOR, UTF16))  # in its debounce: no fill yet
        answered = await asyncio.wait_for(older, WAIT)
        seen = (answered, link.cancelled, len(link.orders), completer.stats.superseded)
        newer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await newer
        return seen

    assert asyncio.run(go()) == (None, 1, 1, 1)


def test_debounce_lets_a_newer_request_win_before_the_model_runs():
    link = FakeLink()
    completer = make(link, debounceMs=5000)

    async def go():
        older = asyncio.ensure_future(completer.complete(DOC, *CURSOR, UTF16))
        await asyncio.sleep(0)  # one loop turn (not a delay): the older request reaches its debounce
        completer.configure(parse_config({"completion": {"confidenceCut": 0.0}})[0])  # no debounce now
        newer = asyncio.ensure_future(completer.complete(DOC, *CURSOR, UTF16))
        return await older, await newer

    assert asyncio.run(go()) == (None, shown("os.getcwd()"))
    assert len(link.orders) == 1 and completer.stats.superseded == 1


def test_cancelling_the_request_cancels_the_fill():
    link = FakeLink(hold=True)
    completer = make(link)

    async def go():
        task = asyncio.ensure_future(completer.complete(DOC, *CURSOR, UTF16))
        await link.started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert link.cancelled == 1 and completer.stats.cancelled == 1


@pytest.mark.parametrize("texts, expected, calls", [
    ([")(", "os.getcwd()"], shown("os.getcwd()"), 2), ([")(", ")("], None, 2), (["os.getcwd()"], shown("os.getcwd()"), 1)])
def test_a_fill_that_breaks_the_parse_is_resampled_once_shorter_and_more_careful(texts, expected, calls):
    link = FakeLink(*texts)
    completer = make(link)
    assert asyncio.run(completer.complete(DOC, *CURSOR, UTF16)) == expected
    assert len(link.orders) == calls and completer.stats.parse_rejects == texts[:calls].count(")(")
    if calls == 2:
        first, second = link.orders
        assert second.max_tokens == first.max_tokens // 2 and second.sampling.threshold == 0.97


def test_single_line_fills_get_the_line_budget_and_a_late_parse_error_is_not_resampled():
    link = FakeLink(")(", "os.getcwd()", delay_s=0.05)  # 50 ms: past half of a 20 ms budget
    completer = make(link, lineBudgetMs=20)
    assert asyncio.run(completer.complete(DOC, *CURSOR, UTF16)) is None
    assert len(link.orders) == 1 and link.orders[0].sampling.time_budget_ms == 20
    assert completer.stats.parse_rejects == completer.stats.resamples_skipped == 1
    link = FakeLink(")(", "os.getcwd()")
    completer = make(link, lineBudgetMs=60_000)
    assert asyncio.run(completer.complete(DOC, *CURSOR, UTF16)) == shown("os.getcwd()")
    first, second = link.orders
    assert first.sampling.time_budget_ms == 60_000 and 0 < second.sampling.time_budget_ms < 60_000  # what is left
    link = FakeLink()
    asyncio.run(make(link, lineBudgetMs=None).complete(DOC, *CURSOR, UTF16))
    assert link.orders[0].sampling.time_budget_ms is None and link.orders[0].sampling.confidence_cut == 0.0


def test_bad_input_is_logged_and_answered_empty():
    completer = make(FakeLink())

    async def go():
        got = [await completer.complete(Document("file:///n.txt", "x", "plaintext"), 0, 1, UTF16),
               await completer.complete(None, 0, 0, UTF16),
               await completer.complete(DOC, -1, 0, UTF16),
               await completer.complete(DOC, 0, 99, UTF16)]
        completer.configure(parse_config({"completion": {"disabledLanguages": ["python"]}})[0])
        return got + [await completer.complete(DOC, *CURSOR, UTF16)]

    assert asyncio.run(go()) == [None] * 5
    reasons = [m for _, m in completer.logged]
    assert completer.stats.bad_input == 5 and completer.stats.errors == 0
    for expected in ("unsupported language 'plaintext'", "unknown document", "past the end of the document",
                     "past the end of its line", "disabled for 'python'"):
        assert sum(expected in r for r in reasons) == 1, (expected, reasons)


def test_an_unavailable_model_is_not_cached_as_nothing_to_say():
    link = FakeLink(error=BackendError(Failure.UNAVAILABLE, "the model worker is not available"))
    completer = make(link)
    assert asyncio.run(completer.complete(DOC, *CURSOR, UTF16)) is None
    assert len(completer.cache) == 0 and completer.stats.empty == 1
    assert completer.logged == [("debug", "no completion: the model worker is not available")]


def test_a_lone_surrogate_in_the_document_does_not_stop_completions():
    from diffusion_lsp.server.session import counter_for

    doc = Document("file:///s.py", "name = '\ud800'\nimport os\n\nprint(os.sep)\n", "python")
    link = FakeLink()
    completer = make(link, count_tokens=counter_for(None))  # the real tokenizer refuses lone surrogates
    assert asyncio.run(completer.complete(doc, 2, 0, UTF16)) == shown("os.getcwd()", doc, (2, 0))
    assert "\ufffd" in link.orders[0].prefix and "\ud800" not in link.orders[0].prefix


def test_context_is_gathered_off_the_event_loop_with_the_recent_edits():
    threads = []

    def count(text):
        threads.append(threading.current_thread())
        return len(text) // 3 + 1

    edits = [EditSnippet("file:///other.py", "def helper_from_the_edit():\n    pass")]
    link = FakeLink()
    asyncio.run(make(link, count_tokens=count, edits=edits).complete(DOC, *CURSOR, UTF16))
    assert threads and threading.main_thread() not in threads
    assert "helper_from_the_edit" in link.orders[0].prefix


def test_a_request_is_answered_while_a_large_document_is_still_being_indexed():
    big = Document("file:///big.py", "".join(f"def f{i}(x):\n    return x + {i}\n" for i in range(20_000)), "python")
    indexing, release, order = threading.Event(), threading.Event(), []

    def slow_build(fn, doc):
        order.append("indexing started")
        indexing.set()
        release.wait(WAIT)
        order.append("indexing done")

    async def go():
        indexer = Indexer({big.uri: big}.get, run=slow_build)
        indexer.schedule(big.uri, now=True)
        await asyncio.get_running_loop().run_in_executor(None, indexing.wait, WAIT)
        answer = await make(FakeLink()).complete(DOC, *CURSOR, UTF16, open_docs=[big])
        order.append("answered")
        release.set()
        await indexer.idle()
        indexer.close()
        return answer

    assert asyncio.run(go()) == shown("os.getcwd()")
    assert order == ["indexing started", "answered", "indexing done"]


class DraftingLink(FakeLink):
    """A link that can probe, answering a fill whose draft it reports kept whole (tokens sure 0.1)."""

    capabilities = Capabilities(probe=True)

    async def fill(self, key, order):
        self.orders.append(order)
        text = order.candidates[0] if order.candidates else "nothing"
        return Fill(text, [text], [0.1], ms=1.0, forwards=2,
                    draft=DraftTally(len(order.candidates), 3, 3) if order.candidates else DraftTally())


REPEATING = Document("file:///r.py", "def f(a):\n    total = compute(a, 1)\n    return total\n\n"
                                     "def g(b):\n    total = compute(b, 1)\n    ret\n", "python")


def test_drafts_from_the_file_go_with_the_order_and_a_draft_kept_whole_is_shown_whole():
    link = DraftingLink()
    completer = make(link, confidenceCut=0.5, drafts=True)
    answer = asyncio.run(completer.complete(REPEATING, 6, 7, UTF16))
    (order,) = link.orders
    assert order.candidates[0] == "urn total"  # what followed "total\n    ret" above
    assert answer == shown("urn total", REPEATING, (6, 7))  # shown though its tokens are below the cut: the model kept it whole
    counts = completer.stats.report()["counts"]
    assert (counts["drafts_offered"], counts["drafts_whole"], counts["drafts_part"], counts["drafts_rejected"]) == \
        (1, 1, 0, 0)
    assert counts["forwards"] == 2 and counts["fill_tokens"] == 1 and counts["forwards_per_token"] == 2.0


def test_no_drafts_when_they_are_off_or_the_backend_cannot_probe():
    off = DraftingLink()
    asyncio.run(make(off, drafts=False).complete(REPEATING, 6, 7, UTF16))
    blind = FakeLink()
    completer = make(blind, drafts=True)
    for _ in range(2):
        asyncio.run(completer.complete(REPEATING, 6, 7, UTF16))
        completer.cache.clear()
    assert off.orders[0].candidates == () and [o.candidates for o in blind.orders] == [(), ()]
    assert sum("drafts are not verified" in m for _, m in completer.logged) == 1  # said once
