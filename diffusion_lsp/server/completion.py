"""One inline completion, without LSP: input guards, cache, supersession, debounce, context, the
model fill, post-processing and the parse-error re-sample. The fill itself is a callable (the
worker client in the server, a fake in tests)."""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..context.types import CompletionContext, Document, SpanKind, Suggestion
from . import positions
from .cache import CompletionCache
from .config import Config
from .context_api import ContextApi, budget_for
from .stats import Stats, Timing


class BadInput(Exception):
    """An expected refusal (unknown document, position past the end, ...): answered empty, logged."""


class Unavailable(Exception):
    """The model could not answer (not loaded yet, failed, worker gone): answered empty, not cached."""


def locate(text: str, line: int, column: int, encoding: str, max_line_chars: int) -> int:
    """LSP position -> offset into `text`, or BadInput saying why there is nothing to complete."""
    if "\x00" in text:
        raise BadInput("binary content (NUL bytes)")
    span = positions.line_span(text, line)
    if span is None:
        raise BadInput(f"position {line}:{column} is past the end of the document")
    if span[1] - span[0] > max_line_chars:
        raise BadInput(f"line {line} has {span[1] - span[0]} characters (completion.maxLineChars is {max_line_chars})")
    index = positions.column_to_index(text[span[0]:span[1]], column, encoding)
    if index is None:
        raise BadInput(f"position {line}:{column} is past the end of its line")
    return span[0] + index


def replace_range(text: str, offset: int, sug: Suggestion, encoding: str):
    """((line, col), (line, col)) of the text the item replaces, or None for a plain insertion."""
    if sug.replace_chars <= 0:
        return None
    line_end = text.find("\n", offset)
    end = min(offset + sug.replace_chars, len(text) if line_end < 0 else line_end)
    return positions.position_at(text, offset, encoding), positions.position_at(text, end, encoding)


@dataclass
class Fill:
    """A worker's answer for one canvas."""

    text: str
    pieces: list[str]  # per-token text, "".join(pieces) == text
    confidence: list[float]  # per token
    ms: float = 0.0
    reused: int = 0  # context positions the worker reused from this document's last fill


FillFn = Callable[[int, str, dict], Awaitable["Fill | None"]]  # (request id, document key, request)


@dataclass
class _Ticket:
    uri: str
    superseded: asyncio.Event = field(default_factory=asyncio.Event)


class Completer:
    """Cancelling `fill`'s awaitable must abandon the work (the worker client sends a cancel)."""

    def __init__(self, fill: FillFn, context: ContextApi, count_tokens: Callable[[str], int], stats: Stats):
        self.fill, self.context, self.count_tokens, self.stats = fill, context, count_tokens, stats
        self.cfg = Config()
        self.cache = CompletionCache(self.cfg.completion.cache_size)
        self._latest: dict[str, _Ticket] = {}
        self._ids = itertools.count(1)

    def configure(self, cfg: Config) -> None:
        self.cfg = cfg
        self.cache = CompletionCache(cfg.completion.cache_size)

    async def complete(self, doc: Document, offset: int, open_docs: list[Document] = (),
                       recent_edits=()) -> Suggestion | None:
        """The suggestion at `offset`, or None: nothing to say, or superseded by a newer request for
        the same document. BadInput for a language the context modules do not know; Unavailable
        when the model cannot answer."""
        ticket = _Ticket(doc.uri)
        if (old := self._latest.get(doc.uri)) is not None:
            old.superseded.set()
        self._latest[doc.uri] = ticket
        timing = Timing(self.stats.requests)
        t0 = time.perf_counter()
        try:
            return await self._complete(ticket, timing, doc, offset, list(open_docs), list(recent_edits))
        finally:
            timing.total_ms = (time.perf_counter() - t0) * 1e3
            self.stats.timings.append(timing)
            if self._latest.get(doc.uri) is ticket:
                del self._latest[doc.uri]

    async def _complete(self, ticket, timing, doc, offset, open_docs, recent_edits) -> Suggestion | None:
        cc = self.cfg.completion
        if doc.language_id in cc.disabled_languages:
            raise BadInput(f"completion is disabled for {doc.language_id!r}")
        prefix, suffix = doc.text[:offset], doc.text[offset:]
        hit, cached = self.cache.lookup(doc.uri, prefix, suffix)
        if hit:
            self.stats.cache_hits += 1
            timing.source = "cache"
            return cached
        t0 = time.perf_counter()
        if cc.debounce_ms and await _set_within(ticket.superseded, cc.debounce_ms / 1000):
            return self._superseded()
        t1 = time.perf_counter()
        ctx = self.context.gather(doc, offset, open_docs, recent_edits, budget_for(cc.max_context_tokens),
                                  self.count_tokens)
        timing.wait_ms, timing.context_ms = (t1 - t0) * 1e3, (time.perf_counter() - t1) * 1e3
        if ctx.language is None:
            raise BadInput(f"unsupported language {doc.language_id!r}")
        timing.kind = ctx.kind.value
        budget = cc.line_budget_ms if ctx.kind is not SpanKind.BLOCK else None
        sampling = _sampling(self.cfg, budget)
        sug, broke = await self._sample(ticket, timing, doc, ctx, ctx.max_tokens, sampling)
        if broke:
            self.stats.parse_rejects += 1
            left = None if budget is None else budget - (time.perf_counter() - t1) * 1e3
            if left is None or left > budget / 2:  # re-sample once, shorter and more careful
                careful = {**_sampling(self.cfg, left), "threshold": max(sampling["threshold"], 0.97)}
                sug, broke = await self._sample(ticket, timing, doc, ctx, max(4, ctx.max_tokens // 2), careful)
                self.stats.parse_rejects += broke
            else:
                self.stats.resamples_skipped += 1
        if not ticket.superseded.is_set():
            self.cache.put(doc.uri, prefix, suffix, sug)
        return sug

    async def _sample(self, ticket: _Ticket, timing: Timing, doc: Document, ctx: CompletionContext,
                      max_tokens: int, sampling: dict) -> tuple[Suggestion | None, bool]:
        """(suggestion, broke the parse); (None, False) when superseded."""
        if ticket.superseded.is_set():
            return self._superseded(), False
        request = {"prefix": ctx.prefix, "suffix": ctx.suffix, "max_tokens": max_tokens, "sampling": sampling,
                   "one_line": ctx.kind is not SpanKind.BLOCK}  # post-processing keeps one line of those
        self.stats.model_calls += 1
        t0 = time.perf_counter()
        task = asyncio.ensure_future(self.fill(next(self._ids), ticket.uri, request))
        waiter = asyncio.ensure_future(ticket.superseded.wait())
        try:
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
        finally:  # also on our own cancellation ($/cancelRequest): abandon the fill
            waiter.cancel()
            if not task.done():
                task.cancel()
            t1 = time.perf_counter()
            timing.model_ms += (t1 - t0) * 1e3
        if not task.done() or task.cancelled():
            return self._superseded(), False
        fill = task.result()
        if fill is None:
            raise Unavailable("the model is not ready")
        self.stats.model_ms.append((t1 - t0) * 1e3)
        timing.source = "model"
        timing.worker_ms += fill.ms
        self.stats.reused_fills += fill.reused > 0
        cc = self.cfg.completion
        try:
            return self.context.finish(ctx, doc.text, fill.text, fill.pieces, fill.confidence, cc.confidence_cut,
                                       cc.reject_parse_errors)
        finally:
            timing.post_ms += (time.perf_counter() - t1) * 1e3

    def _superseded(self) -> None:
        self.stats.superseded += 1
        return None


def _sampling(cfg: Config, budget_ms: float | None) -> dict:
    """The worker's SamplerConfig fields: the time budget is the tighter of sampling.timeBudgetMs and
    `budget_ms`; a fill stops at its first token below completion.confidenceCut (dropped anyway)."""
    s = cfg.sampling
    budgets = [b for b in (s.time_budget_ms, budget_ms) if b is not None]
    return s.replace(time_budget_ms=max(min(budgets), 0.0) if budgets else None,
                     stop_below=cfg.completion.confidence_cut).to_wire()


async def _set_within(event: asyncio.Event, seconds: float) -> bool:
    """Wait for `event` at most `seconds`; True when it was set."""
    try:
        await asyncio.wait_for(event.wait(), seconds)
        return True
    except asyncio.TimeoutError:
        return False
