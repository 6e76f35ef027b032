"""Completer without LSP or a model: input guards, cache, supersession, cancellation, the
parse-error re-sample, and the replace range. The fill is a fake that waits on events."""

from __future__ import annotations

import asyncio

import pytest

from diffusion_lsp.context.types import CompletionContext, Document, SpanKind, Suggestion
from diffusion_lsp.server.completion import BadInput, Completer, Fill, Unavailable, locate, replace_range
from diffusion_lsp.server.config import parse_config
from diffusion_lsp.server.context_api import ContextApi, postprocess
from diffusion_lsp.server.positions import UTF8, UTF16
from diffusion_lsp.server.stats import Stats


def test_locate_converts_and_refuses_bad_positions():
    text = "x = 'é😀'\ny = \n"
    assert locate(text, 1, 4, UTF16, 5000) == text.index("y") + 4
    assert locate(text, 0, 12, UTF8, 5000) == len("x = 'é😀'") and locate(text, 0, 11, UTF8, 5000) == 7
    for line, column, reason in [(3, 0, "past the end of the document"), (1, 9, "past the end of its line")]:
        with pytest.raises(BadInput, match=reason):
            locate(text, line, column, UTF16, 5000)
    with pytest.raises(BadInput, match="binary"):
        locate("a\x00b", 0, 1, UTF16, 5000)
    with pytest.raises(BadInput, match="6000 characters"):
        locate("x" * 6000, 0, 1, UTF16, 5000)


def test_replace_range_covers_the_replaced_characters_on_the_line_only():
    text = "f(é)\nz"
    assert replace_range(text, 3, Suggestion("1)"), UTF16) is None
    assert replace_range(text, 3, Suggestion("1)", replace_chars=1), UTF8) == ((0, 4), (0, 5))
    assert replace_range(text, 3, Suggestion("1)", replace_chars=9), UTF16) == ((0, 3), (0, 4))


class FakeFill:
    """Answers `text`; with `hold`, waits until released (or is cancelled, which it records)."""

    def __init__(self, text="foo()", hold=False, delay_s=0.0):
        self.text, self.calls, self.cancelled, self.delay_s = text, [], [], delay_s
        self.started, self.release = asyncio.Event(), asyncio.Event()
        if not hold:
            self.release.set()

    async def __call__(self, rid, key, request):
        self.calls.append(request)
        self.started.set()
        try:
            await self.release.wait()
            await asyncio.sleep(self.delay_s)
        except asyncio.CancelledError:
            self.cancelled.append(rid)
            raise
        return Fill(self.text, [self.text], [0.99])


def make(fill, parse_errors=(), language="python", **completion):
    errors = list(parse_errors)

    def gather(doc, offset, open_docs, recent_edits, budget, count_tokens):
        return CompletionContext(prefix=doc.text[:offset], suffix=doc.text[offset:], kind=SpanKind.LINE,
                                 max_tokens=16, language=language, offset=offset, line_suffix="", indent="")

    api = ContextApi(gather, postprocess, lambda *a: errors.pop(0) if errors else False)
    completer = Completer(fill, api, len, Stats())
    completer.configure(parse_config({"completion": {"confidenceCut": 0.0, **completion}})[0])
    return completer


DOC = Document("file:///a.py", "x = \n", "python")


def test_answer_then_cache_hit_without_the_model():
    fill = FakeFill()
    completer = make(fill)

    async def go():
        return [await completer.complete(DOC, 4) for _ in range(2)]

    assert asyncio.run(go()) == [Suggestion("foo()")] * 2
    assert len(fill.calls) == 1 and completer.stats.cache_hits == 1 and fill.calls[0]["max_tokens"] == 16


def test_a_newer_request_supersedes_and_abandons_the_older_fill():
    fill = FakeFill(hold=True)
    completer = make(fill)

    async def go():
        older = asyncio.ensure_future(completer.complete(DOC, 4))
        await fill.started.wait()
        newer = asyncio.ensure_future(completer.complete(Document(DOC.uri, "x = 1\n", "python"), 5))
        assert await older is None
        fill.release.set()
        return await newer

    assert asyncio.run(go()) == Suggestion("foo()")
    assert completer.stats.superseded == 1 and fill.cancelled == [1]


def test_debounce_lets_a_newer_request_win_before_the_model_runs():
    fill = FakeFill()
    completer = make(fill, debounceMs=5000)

    async def go():
        older = asyncio.ensure_future(completer.complete(DOC, 4))
        await asyncio.sleep(0)  # one loop turn (not a delay): the older request reaches its debounce
        completer.configure(parse_config({"completion": {"confidenceCut": 0.0}})[0])  # no debounce now
        newer = asyncio.ensure_future(completer.complete(DOC, 4))
        return await older, await newer

    assert asyncio.run(go()) == (None, Suggestion("foo()"))
    assert len(fill.calls) == 1 and completer.stats.superseded == 1


def test_cancelling_the_request_cancels_the_fill():
    fill = FakeFill(hold=True)
    completer = make(fill)

    async def go():
        task = asyncio.ensure_future(completer.complete(DOC, 4))
        await fill.started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert fill.cancelled == [1]


@pytest.mark.parametrize("errors, expected, calls", [
    ([True, False], Suggestion("foo()"), 2), ([True, True], None, 2), ([False], Suggestion("foo()"), 1)])
def test_a_fill_that_breaks_the_parse_is_resampled_once(errors, expected, calls):
    fill = FakeFill()
    completer = make(fill, parse_errors=errors)
    assert asyncio.run(completer.complete(DOC, 4)) == expected
    assert len(fill.calls) == calls
    if calls == 2:
        assert fill.calls[1]["max_tokens"] == 8 and fill.calls[1]["sampling"]["threshold"] >= 0.97


def test_single_line_fills_get_the_line_budget_and_a_late_parse_error_is_not_resampled():
    fill = FakeFill(delay_s=0.05)  # 50 ms: past half of a 20 ms budget
    completer = make(fill, parse_errors=[True, False], lineBudgetMs=20)
    assert asyncio.run(completer.complete(DOC, 4)) is None
    assert len(fill.calls) == 1 and fill.calls[0]["sampling"]["time_budget_ms"] == 20
    assert completer.stats.parse_rejects == completer.stats.resamples_skipped == 1
    fill = FakeFill(delay_s=0.05)
    completer = make(fill, parse_errors=[True, False], lineBudgetMs=10_000)
    assert asyncio.run(completer.complete(DOC, 4)) == Suggestion("foo()")
    assert len(fill.calls) == 2 and 9_000 < fill.calls[1]["sampling"]["time_budget_ms"] < 10_000  # what is left
    fill = FakeFill()
    asyncio.run(make(fill, lineBudgetMs=None).complete(DOC, 4))
    assert fill.calls[0]["sampling"]["time_budget_ms"] is None


def test_unsupported_and_disabled_languages_are_refused():
    with pytest.raises(BadInput, match="unsupported language"):
        asyncio.run(make(FakeFill(), language=None).complete(Document("file:///n.txt", "x", "plaintext"), 1))
    with pytest.raises(BadInput, match="disabled"):
        asyncio.run(make(FakeFill(), disabledLanguages=["python"]).complete(DOC, 4))


def test_an_unavailable_model_is_not_cached_as_nothing_to_say():
    async def no_model(rid, key, request):
        return None

    completer = make(no_model)
    with pytest.raises(Unavailable):
        asyncio.run(completer.complete(DOC, 4))
    assert len(completer.cache) == 0


def test_finish_lets_a_syntax_checking_postprocess_say_why_it_rejects():
    def native(ctx, text, pieces=None, confidence=None, threshold=0.0, reasons=None, check_syntax=True):
        if check_syntax and "(" in text:
            reasons.append("parse-error")
            return None
        return Suggestion(text) if text else None

    api = ContextApi(None, native, lambda *a: pytest.fail("the native check is used"))
    ctx = CompletionContext("x = ", "", SpanKind.LINE, 8, "python", 4, "", "")
    assert api.finish(ctx, "x = ", "f(", ["f("], [1.0], 0.0, True) == (None, True)
    assert api.finish(ctx, "x = ", "f(", ["f("], [1.0], 0.0, False) == (Suggestion("f("), False)
    assert api.finish(ctx, "x = ", "", [], [], 0.0, True) == (None, False)


def test_stats_report_counts_and_nearest_rank_percentiles():
    from diffusion_lsp.server.stats import percentile

    assert percentile([], 50) is None
    assert [percentile([5, 1, 3, 2, 4], q) for q in (0, 50, 95, 100)] == [1, 3, 5, 5]
    stats = Stats(requests=3, shown=1)
    stats.latency_ms.extend([10.0, 30.0, 20.0])
    report = stats.report(worker={"pid": 7})
    assert report["counts"]["requests"] == 3 and report["counts"]["shown"] == 1
    assert report["latency_ms"] == {"p50": 20.0, "p95": 30.0, "p99": 30.0} and report["worker"] == {"pid": 7}
    assert "latency_ms" not in report["counts"]
