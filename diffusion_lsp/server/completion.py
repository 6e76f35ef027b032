"""One inline completion, without LSP: (document, position) -> the candidate shown (candidate.py's
`Candidate`, its span starting at the cursor); server.py makes its LSP item, whose range is
`replace_range`.

Top to bottom: locate the position and refuse bad input; the cache; the request's ticket
(lifecycle.py: superseded by a newer request for the same document, the debounce); the context
(context/gather.py); the fill through the Backend (protocol/backend.py: the model worker, or a remote
API); post-processing (context/postprocess.py) and one shorter, more careful re-sample of
a fill that breaks the parse; which candidate is shown. The context is gathered in a thread
of its own, so tree-sitter and the tokenizer never block the event loop, and other documents'
indexes are only looked up here (server/indexer.py builds them). Post-processing runs on the loop:
its work is bounded (it re-parses the window gather parsed, incrementally: p95 0.39 ms, max 0.65 ms
in `bench lsp`), while waking a thread right after a fill waits for a core the worker's threads
are still spinning on (measured: p95 1.9 ms, max 5.5 ms, more than the work itself).
Drafts are verified by model/decoding/verify.py; which candidate is shown (the model's fill or a draft), or
none, the acceptance model decides (acceptance/chooser.py, over acceptance/completion_candidates.py)."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor

from ..protocol.backend import Backend
from ..protocol.answers import Fill, Kept
from ..protocol.reasons import Cut
from ..protocol.requests import FillRequest
from ..acceptance.chooser import choose
from ..acceptance.completion_candidates import offers
from ..acceptance.features import Spot, features
from ..acceptance.feedback import Feedback
from ..acceptance.model import AcceptanceModel
from ..context.drafts import LastFills, cursor_lines, drafts_for
from ..context.gather import gather
from ..context.index import indexed
from ..context.postprocess import postprocess
from ..context.tokens import approx_tokens, valid_text
from ..context.records import CompletionContext, ContextBudget, Document, EditSnippet, SpanKind
from ..candidate import Candidate
from . import positions
from .cache import CompletionCache
from ..context.languages import language_for
from ..lifecycle import Ticket, tickets
from .config import Config, serves_language
from .failures import BadInput, answering
from .stats import Stats, Timing

Position = tuple[int, int]  # LSP (line, character) in the negotiated encoding
RESAMPLE_THRESHOLD = 0.97  # the parse-error re-sample commits only tokens this sure


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


def check_language(cfg: Config, doc: Document) -> None:
    """BadInput when the model does not write the document's language (completion.languages, by
    default the languages its checkpoint claims): no Python in a Go file."""
    spec = language_for(doc.language_id, doc.uri)
    if spec is not None and not serves_language(cfg, spec):
        raise BadInput(f"the model does not write {spec.name} (completion.languages is "
                       f"{cfg.completion.languages}; add {spec.name!r}, or \"*\", to try it)")


def replace_range(text: str, candidate: Candidate, encoding: str) -> tuple[Position, Position] | None:
    """The LSP range of the characters after the cursor (on its line) the completion `candidate`
    writes over: its span, ended at the line's end; None when it writes over nothing."""
    if candidate.replace_chars <= 0:
        return None
    line_end = text.find("\n", candidate.start)
    end = min(candidate.end, len(text) if line_end < 0 else line_end)
    return positions.position_at(text, candidate.start, encoding), positions.position_at(text, end, encoding)


def finish(ctx: CompletionContext, fill: Fill, confidence_cut: float, check_syntax: bool) -> tuple[Candidate | None, bool]:
    """Post-process a fill -> (its candidate at the cursor, broke): broke when it was dropped for
    breaking the parse. The confidence cut judges the model's own tokens: a draft it kept whole is
    the fill, and is shown whole."""
    reasons: list[Cut] = []
    if fill.draft.outcome is Kept.WHOLE:
        confidence_cut = 0.0
    sug = postprocess(ctx, fill.text, fill.pieces, fill.confidence, confidence_cut=confidence_cut, reasons=reasons,
                      check_syntax=check_syntax)
    return sug, sug is None and Cut.PARSE_ERROR in reasons


def fill_request(cfg: Config, ctx: CompletionContext, max_tokens: int, budget_ms: float | None,
                 careful: bool = False, candidates: tuple[str, ...] = ()) -> FillRequest:
    """The fill a completion asks for: the time budget is the tighter of sampling.timeBudgetMs and
    `budget_ms`; a fill stops at its first token below completion.confidenceCut (dropped anyway);
    a careful one (the re-sample) commits only tokens RESAMPLE_THRESHOLD sure."""
    s = cfg.sampling
    budgets = [b for b in (s.time_budget_ms, budget_ms) if b is not None]
    sampling = s.replace(time_budget_ms=max(min(budgets), 0.0) if budgets else None,
                         confidence_cut=cfg.completion.confidence_cut,
                         threshold=max(s.threshold, RESAMPLE_THRESHOLD) if careful else s.threshold)
    return FillRequest(valid_text(ctx.prefix), valid_text(ctx.suffix), max_tokens,
                       one_line=ctx.kind is not SpanKind.BLOCK, sampling=sampling, candidates=candidates)


class Completer:
    """`complete` never raises but CancelledError: every refusal and failure is one log line and an
    empty answer. Cancelling it (`$/cancelRequest`) cancels the fill in the backend."""

    def __init__(self, backend: Backend, stats: Stats, log: Callable[[str, str], None],
                 recent_edits: Callable[[], Sequence[EditSnippet]] = tuple,
                 count_tokens: Callable[[str], int] = approx_tokens):
        self.backend, self.stats, self.log, self.recent_edits = backend, stats, log, recent_edits
        self.count_tokens = count_tokens
        self.cfg = Config()
        self.cache = CompletionCache(self.cfg.completion.cache_size)
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="diffusion-lsp-context")
        self.tickets = tickets()
        self.last_fills = LastFills()  # each document's last suggestion: a draft while it still applies
        self.said_no_drafts = False
        self.acceptance: AcceptanceModel | None = None  # decides what is shown; None: the rules
        self.feedback = Feedback(log=log)  # what the user did with it, kept on this machine

    def configure(self, cfg: Config, count_tokens: Callable[[str], int] | None = None) -> None:
        self.cfg = cfg
        self.cache = CompletionCache(cfg.completion.cache_size)
        self.feedback.enabled = cfg.completion.feedback
        if count_tokens is not None:
            self.count_tokens = count_tokens

    async def complete(self, doc: Document | None, line: int, column: int, encoding: str,
                       open_docs: Sequence[Document] = ()) -> Candidate | None:
        """The completion shown at (line, column) of `doc` (None: not open), or None. A newer request for the
        document supersedes this one (BackendError(DROPPED), answered empty)."""
        stats, t0 = self.stats, time.perf_counter()
        stats.requests += 1
        timing, shown = Timing(stats.requests), None
        try:
            if not self.cfg.completion.enable:
                return None
            with answering(stats, self.log, "completion"):
                if doc is None:
                    raise BadInput("unknown document (not open)")
                offset = locate(doc.text, line, column, encoding, self.cfg.completion.max_line_chars)
                stats.timings.append(timing)
                with self.tickets.take(doc.uri) as ticket:
                    sug = await self._decide(ticket, timing, doc, offset, list(open_docs))
                if sug is not None and sug.text:
                    shown = sug
        finally:
            timing.total_ms = (time.perf_counter() - t0) * 1e3
            stats.latency_ms.append(timing.total_ms)
        stats.empty += shown is None
        stats.answered += shown is not None
        return shown

    async def _decide(self, ticket: Ticket, timing: Timing, doc: Document, offset: int,
                      open_docs: list[Document]) -> Candidate | None:
        cc = self.cfg.completion
        if doc.language_id in cc.disabled_languages:
            raise BadInput(f"completion is disabled for {doc.language_id!r}")
        check_language(self.cfg, doc)
        prefix, suffix = doc.text[:offset], doc.text[offset:]
        hit, cached = self.cache.lookup(doc.uri, prefix, suffix)
        if hit:
            self.stats.cache_hits += 1
            timing.source = "cache"
            return cached
        t0 = time.perf_counter()
        await ticket.pause(cc.debounce_ms / 1000)
        t1 = time.perf_counter()
        ctx, drafts = await self._in_thread(self._context, doc, offset, open_docs, self.recent_edits())
        timing.wait_ms, timing.context_ms = (t1 - t0) * 1e3, (time.perf_counter() - t1) * 1e3
        if ctx.language is None:
            raise BadInput(f"unsupported language {doc.language_id!r}")
        timing.kind = ctx.kind.value
        budget = cc.line_budget_ms if ctx.kind is not SpanKind.BLOCK else None
        verify = tuple(valid_text(d.text) for d in drafts) if self.backend.capabilities.probe else ()
        order = fill_request(self.cfg, ctx, ctx.max_tokens, budget, candidates=verify)
        sug, broke, fill = await self._sample(ticket, timing, ctx, order)
        if broke:
            self.stats.parse_rejects += 1
            left = None if budget is None else budget - (time.perf_counter() - t1) * 1e3
            if left is None or left > budget / 2:  # re-sample once, shorter and more careful
                careful = fill_request(self.cfg, ctx, max(4, ctx.max_tokens // 2), left, careful=True)
                sug, broke, fill = await self._sample(ticket, timing, ctx, careful)
                self.stats.parse_rejects += broke
            else:
                self.stats.resamples_skipped += 1
        sug = self._choose(doc, offset, ctx, sug, fill, drafts)
        self.cache.put(doc.uri, prefix, suffix, sug)  # not superseded: _sample's ticket said so, and no await since
        if sug is not None and sug.text:
            self.last_fills.put(doc.uri, cursor_lines(doc.text, offset), sug.text)
        return sug

    def _choose(self, doc: Document, offset: int, ctx: CompletionContext, cut: Candidate | None, fill: Fill,
                drafts: list[Candidate]) -> Candidate | None:
        """What is shown: the candidate the acceptance model likes best when it is likely
        enough to be kept, else nothing; without one, the model's `cut` fill."""
        if self.acceptance is None:
            return cut
        spot = Spot.at(doc.text, offset, ctx.language)
        choice = choose(self.acceptance, offers(cut, fill, drafts), lambda c, others: features(c, spot, others),
                        self.cfg.completion.show_above)
        self.stats.chose(choice)
        if choice.scored:
            self.log("debug", "completion acceptance: " + ", ".join(
                f"{o.source} {o.text.strip()[:40]!r} P={p:.2f}" for o, p in choice.scored)
                + (f"; shown: {choice.shown.source}" if choice.shown else "; nothing reaches the bar"))
        if choice.shown is not None:
            self.feedback.shown(doc.uri, choice.feats)
        return choice.shown

    def _context(self, doc: Document, offset: int, open_docs: list[Document],
                 edits: Sequence[EditSnippet]) -> tuple[CompletionContext, list[Candidate]]:
        """(the context, the drafts from the user's code) at `offset`: in the context thread."""
        cc = self.cfg.completion
        ctx = gather(doc, offset, open_docs, edits, ContextBudget.split(cc.max_context_tokens), self.count_tokens,
                     indexed)
        if not cc.drafts or ctx.language is None:
            return ctx, []
        if not self.backend.capabilities.probe:
            if not self.said_no_drafts:
                self.said_no_drafts = True
                self.log("info", "drafts are not verified: this backend cannot score given tokens (only an "
                                 "acceptance model weighs them)")
            if self.acceptance is None:
                return ctx, []  # nothing would read them
        return ctx, drafts_for(doc, offset, open_docs, self.last_fills)

    async def _sample(self, ticket: Ticket, timing: Timing, ctx: CompletionContext,
                      order: FillRequest) -> tuple[Candidate | None, bool, Fill]:
        """(the fill's candidate, broke the parse, the fill); BackendError(DROPPED, SUPERSEDED) when superseded
        before or meanwhile (the ticket's run: the fill is cancelled in the backend at once, and a fill
        that came anyway is never shown)."""
        fill, ms = await ticket.run(self._fill(timing, ticket.key, order))
        t1 = time.perf_counter()
        self.stats.model_ms.append(ms)
        timing.source = "model"
        timing.worker_ms += fill.ms
        self.stats.reused_fills += fill.reused > 0
        self.stats.forwards += fill.forwards
        self.stats.fill_tokens += fill.tokens
        self.stats.drafted(fill.draft.outcome)
        cc = self.cfg.completion
        try:
            return (*finish(ctx, fill, cc.confidence_cut, cc.reject_parse_errors), fill)
        finally:
            timing.post_ms += (time.perf_counter() - t1) * 1e3

    async def _fill(self, timing: Timing, key: str, order: FillRequest) -> tuple[Fill, float]:
        """The backend's fill and its ms, counted; its time is the request's model time even when it is
        cancelled (by a newer request, $/cancelRequest: cancelling this cancels the fill in the backend)."""
        t0 = time.perf_counter()
        self.stats.model_calls += 1
        try:
            fill = await self.backend.fill(key, order)
        finally:
            ms = (time.perf_counter() - t0) * 1e3
            timing.model_ms += ms
        return fill, ms

    async def _in_thread(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self.thread, functools.partial(fn, *args))

    def close(self) -> None:
        self.thread.shutdown(wait=False, cancel_futures=True)
