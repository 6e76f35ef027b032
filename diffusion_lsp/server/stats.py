"""Counters the server reports with the `diffusionLsp/stats` request: requests, answers, cache
hits, superseded and cancelled requests, Copilot-style shown/accepted feedback, latencies, and
where the time of the last requests went (read by `diffusion-lsp bench lsp`).
Drafts: context/drafts.py, verified by model/decoding/verify.py, made again at analogous sites by
nextedit/repeat.py; a fill's outcome is protocol/answers.py's DraftTally."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass, field, fields

from ..candidate import Choice
from ..protocol.answers import Kept
from ..protocol.reasons import EditOutcome

WINDOW = 1000  # latencies kept for the percentiles
RECENT = 128  # per-request timings sent with each report


def percentile(values, q: float) -> float | None:
    """Nearest-rank percentile (q in [0, 100]); None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


@dataclass
class Timing:
    """Where one completion's time went, in ms. `seq` numbers requests as `Stats.requests` counts
    them, so a client that sends one request at a time can match its own to these."""

    seq: int
    kind: str | None = None  # the span kind; None when no context was gathered (cache hit, refusal)
    source: str = "none"  # model | cache | none
    total_ms: float = 0.0  # the completer's whole time: cache, debounce, context, model, post-processing
    wait_ms: float = 0.0  # debounce
    context_ms: float = 0.0  # gather: tree-sitter, prefix and suffix, cross-file
    model_ms: float = 0.0  # waiting for the worker (a re-sample included)
    worker_ms: float = 0.0  # the worker's own time for the fills, as it reports it
    post_ms: float = 0.0  # post-processing with its syntax check

    @property
    def overhead_ms(self) -> float:
        """The server's own work: everything but waiting for the worker or the debounce."""
        return self.total_ms - self.model_ms - self.wait_ms


@dataclass
class NextEditStats:
    requests: int = 0  # textDocument/copilotInlineEdit and code action requests that asked the model
    answered: int = 0  # with an edit
    empty: int = 0
    stale: int = 0  # the request's version was not the document's: answered empty at once
    superseded: int = 0
    cancelled: int = 0
    bad_input: int = 0  # position past the end, huge line, binary, language
    errors: int = 0
    shown: int = 0  # textDocument/didShowInlineEdit
    accepted: int = 0  # the edit's accept command ran
    focus: int = 0  # textDocument/didFocus
    jumps: int = 0  # edits more than nextEdit.jumpLines lines from the cursor
    drafts_offered: int = 0  # drafts probed: the last edit made again at an analogous site
    drafts_kept: int = 0  # answers that were a draft the model preferred to what was there
    judged: int = 0  # requests whose candidates the next-edit acceptance model scored
    held_back: int = 0  # of those, nothing reached its bar
    acceptance: str = ""  # which next-edit acceptance model decides, or why none (one line)
    by_source: dict = field(default_factory=dict)  # source of what was shown -> count
    reasons: dict = field(default_factory=dict)  # outcome reason -> count (edit, no-doubt, unchanged, undo, ...)
    latency_ms: deque = field(default_factory=lambda: deque(maxlen=WINDOW), repr=False)
    model_ms: deque = field(default_factory=lambda: deque(maxlen=WINDOW), repr=False)
    forwards: deque = field(default_factory=lambda: deque(maxlen=WINDOW), repr=False)  # per model-run request
    recent: deque = field(default_factory=lambda: deque(maxlen=RECENT), repr=False)  # per request: mode,
    # reason, forwards, edited_tokens, model_ms, ms (read by `bench lsp`)

    def chose(self, choice: Choice, jump: bool) -> None:
        """Count a next edit's decision: what the acceptance model judged, what was shown (`jump`: far
        from the cursor); the change's own sites count as the "scope" outcome."""
        self.judged += bool(choice.scored)
        self.held_back += bool(choice.scored) and choice.shown is None
        if choice.shown is None:
            return
        source = choice.shown.source
        self.by_source[source.value] = self.by_source.get(source.value, 0) + 1
        if source.followed:
            self.reasons[EditOutcome.SCOPE] = self.reasons.get(EditOutcome.SCOPE, 0) + 1
        self.jumps += jump

    def report(self) -> dict:
        counts = {f.name: getattr(self, f.name) for f in fields(self) if f.type in ("int", int)}
        return {"counts": counts, "reasons": dict(self.reasons), "acceptance": self.acceptance,
                "shown_by_source": dict(self.by_source),
                "latency_ms": {f"p{q}": percentile(self.latency_ms, q) for q in (50, 95, 99)},
                "model_ms": {f"p{q}": percentile(self.model_ms, q) for q in (50, 95, 99)},
                "forwards": {f"p{q}": percentile(self.forwards, q) for q in (50, 95)},
                "recent": list(self.recent)}


@dataclass
class Stats:
    requests: int = 0  # textDocument/inlineCompletion received
    answered: int = 0  # answered with at least one item
    empty: int = 0  # answered with no item (nothing to say, bad input, model unavailable)
    cache_hits: int = 0  # answered from the cache (exact or type-ahead), no model call
    model_calls: int = 0  # fills sent to the worker (a parse-error re-sample counts again)
    reused_fills: int = 0  # fills whose first pass started from the document's last fill
    superseded: int = 0  # dropped because a newer request for the same document arrived
    cancelled: int = 0  # $/cancelRequest from the client
    bad_input: int = 0  # unknown document, position past the end, huge line, binary, language
    errors: int = 0  # unexpected failures (logged, answered empty)
    parse_rejects: int = 0  # fills dropped because they broke the parse
    resamples_skipped: int = 0  # broke the parse past half of completion.lineBudgetMs: no re-sample
    shown: int = 0  # textDocument/didShowCompletion
    accepted: int = 0  # the item's accept command ran
    partially_accepted: int = 0  # textDocument/didPartiallyAcceptCompletion
    accepted_chars: int = 0  # characters accepted partially
    drafts_offered: int = 0  # fills given drafts from the user's code
    drafts_whole: int = 0  # ... whose chosen draft the model kept whole
    drafts_part: int = 0  # ... kept in part: a prefix, the rest denoised
    drafts_rejected: int = 0  # ... rejected at the first token: fully denoised
    forwards: int = 0  # forward passes of the model's fills (drafts' verification passes included)
    fill_tokens: int = 0  # tokens those fills wrote
    judged: int = 0  # requests whose candidates the acceptance model scored
    judged_shown: int = 0  # ... and whose best candidate reached the bar
    latency_ms: deque = field(default_factory=lambda: deque(maxlen=WINDOW), repr=False)
    model_ms: deque = field(default_factory=lambda: deque(maxlen=WINDOW), repr=False)
    timings: deque = field(default_factory=lambda: deque(maxlen=WINDOW), repr=False)  # of Timing
    next_edit: NextEditStats = field(default_factory=NextEditStats)
    won: dict = field(default_factory=dict)  # candidate source -> times it was shown
    shown_p: deque = field(default_factory=lambda: deque(maxlen=WINDOW), repr=False)  # P of what was shown
    acceptance: str = ""  # which acceptance model decides, or why none (one line)

    def chose(self, choice: Choice) -> None:
        """Count a completion's acceptance decision."""
        self.judged += 1
        if choice.shown is not None:
            self.judged_shown += 1
            source = choice.shown.source.value
            self.won[source] = self.won.get(source, 0) + 1
            if choice.p is not None:
                self.shown_p.append(choice.p)

    def drafted(self, outcome: Kept | None) -> None:
        """Count a fill's draft outcome (DraftTally.outcome; None: it had none)."""
        if outcome is None:
            return
        self.drafts_offered += 1
        self.drafts_whole += outcome is Kept.WHOLE
        self.drafts_part += outcome is Kept.PART
        self.drafts_rejected += outcome is Kept.REJECTED

    def report(self, **extra) -> dict:
        counts = {f.name: getattr(self, f.name) for f in fields(self) if f.type in ("int", int)}
        lat = {f"p{q}": percentile(self.latency_ms, q) for q in (50, 95, 99)}
        model = {f"p{q}": percentile(self.model_ms, q) for q in (50, 95, 99)}
        overhead = {f"p{q}": percentile([t.overhead_ms for t in self.timings], q) for q in (50, 95, 99)}
        recent = [asdict(t) for t in list(self.timings)[-RECENT:]]
        counts["forwards_per_token"] = round(self.forwards / self.fill_tokens, 3) if self.fill_tokens else None
        shown_p = list(self.shown_p)
        judged = {"model": self.acceptance, "shown_share": self.judged_shown / self.judged if self.judged else None,
                  "mean_p_shown": sum(shown_p) / len(shown_p) if shown_p else None, "won": dict(self.won)}
        return {"counts": counts, "latency_ms": lat, "model_ms": model, "overhead_ms": overhead,
                "timings": recent, "acceptance": judged, "next_edit": self.next_edit.report(), **extra}
