"""One next-edit suggestion, without LSP: (document, version, position) -> EditAnswer (the candidate
shown, candidate.py, in that version; its LSP range is made where the reply is built, server.py).

Top to bottom: refuse a stale version or bad input; share a request already running for the same
document, version and position (the code action and the NES request ask the same question); the
request's ticket (lifecycle.py: superseded by a newer one for the document, the debounce); then the
candidates, cheapest first: the rest of the user's last change at its next sites, from the code
alone (the rules' table, nextedit/rules.py: a rename through the name's scope, a signature's
calls, ..., and the last edit repeated where an acceptance model decides; in a thread of its own per
request, never behind another document's, within a budget: nextedit/budget.py), then the
next-edit pipeline's edit (nextedit/suggest.py) over the Backend, its CPU steps (the region's
parse, the prompt's token counts, the filters) in a thread of their own. The one chooser
(acceptance/chooser.py) decides which is shown, if any, with the next-edit acceptance model over
acceptance/edits.py's features; without one, the rules: the change's sites whenever there are
some, else the model's edit. The last answer per document is kept for the
code action and for inline completion, which offers it when it is an insertion at the cursor."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import PurePosixPath
from urllib.parse import unquote

from ..acceptance.chooser import choose
from ..acceptance.edits import features_at
from ..acceptance.model import AcceptanceModel
from ..candidate import Candidate, Choice, Kind
from ..protocol.backend import Backend
from ..protocol.failure import BackendError, Failure
from ..context.index import indexed
from ..context.languages import language_for
from ..context.tokens import approx_tokens
from ..context.records import Document
from ..nextedit.edits import LineEnds
from ..nextedit.history import EditLog, Step
from ..lifecycle import Ticket, deadline, tickets
from ..nextedit.budget import FOLLOW_MS, PARSE_S, Budget
from ..nextedit.rule import Change, Documents, History, Other
from ..nextedit.rules import propose
from ..nextedit.settings import NextEditSettings
from ..nextedit.suggest import EditRequest, Outcome, suggest
from .completion import check_language, locate
from .config import Config
from ..protocol.reasons import EditOutcome
from .failures import BadInput, answering
from .stats import NextEditStats

RULES_CAP_S = 3 * PARSE_S  # a last resort: each parse of a follow (the document, before its step) ends by PARSE_S
RULE_THREADS = 16  # follows running at once (one live request per document; a superseded one soon ends)


@dataclass(frozen=True)
class EditAnswer:
    """The candidate shown for one version of a document, and what only the request knows."""

    doc: Document  # the version it answers: its uri, its version, the text its offsets are in
    shown: Candidate
    jump: bool = False  # more than nextEdit.jumpLines lines from the cursor
    p: float | None = None  # the next-edit acceptance model's P(right); None: shown by the rules


class NextEditor:
    """`suggest` never raises but CancelledError: a refusal or failure is one log line and None."""

    def __init__(self, backend: Backend, stats: NextEditStats, log: Callable[[str, str], None], edits: EditLog,
                 count_tokens: Callable[[str], int] = approx_tokens,
                 documents: Callable[[str], Document | None] = lambda uri: None):
        self.backend, self.stats, self.log, self.edits = backend, stats, log, edits
        self.documents = documents  # any open document by uri: where a change being followed was made
        self.count_tokens = count_tokens
        self.cfg = Config()
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="diffusion-lsp-nextedit")
        # the follows': several, so that one document's never waits for another's (a superseded one stops
        # within a parse callback); reused, with their parsers (a thread per request grew RSS by 220 MB)
        self.rules = ThreadPoolExecutor(RULE_THREADS, thread_name_prefix="diffusion-lsp-follow")
        self.tickets = tickets()
        self._running: dict[tuple, asyncio.Future] = {}
        self.last: dict[str, EditAnswer] = {}  # per document, the newest answer
        self.following: dict[str, Change] = {}  # per document, the change being followed (a rename, a signature)
        self.acceptance: AcceptanceModel | None = None  # decides which next edit is shown; None: the rules

    def configure(self, cfg: Config, count_tokens: Callable[[str], int] | None = None) -> None:
        self.cfg = cfg
        if count_tokens is not None:
            self.count_tokens = count_tokens

    @property
    def settings(self) -> NextEditSettings:
        return self.cfg.next_edit

    def cached(self, uri: str, version: int) -> EditAnswer | None:
        ans = self.last.get(uri)
        return ans if ans is not None and ans.doc.version == version else None

    async def suggest(self, doc: Document | None, version: int | None, line: int, column: int, encoding: str,
                      path: str, open_docs: Sequence[Document] = ()) -> EditAnswer | None:
        if not self.settings.enable and not self.settings.follow:
            return None
        if doc is None or (version is not None and version != doc.version):
            self.stats.stale += 1
            return None
        key = (doc.uri, doc.version, line, column)
        running = self._running.get(key)
        if running is not None and not running.done():
            return await asyncio.shield(running)
        fut = asyncio.ensure_future(self._suggest(doc, line, column, encoding, path, list(open_docs)))
        self._running[key] = fut
        try:
            return await fut
        finally:
            if self._running.get(key) is fut:
                del self._running[key]

    async def _suggest(self, doc: Document, line: int, column: int, encoding: str, path: str,
                       open_docs: list[Document]) -> EditAnswer | None:
        stats, t0 = self.stats, time.perf_counter()
        stats.requests += 1
        answer, out = None, None
        try:
            with answering(stats, self.log, "next edit"):
                offset = locate(doc.text, line, column, encoding, self.cfg.completion.max_line_chars)
                answer, out = await self._decide(doc, offset, path, open_docs)
        finally:
            ms = (time.perf_counter() - t0) * 1e3
            stats.latency_ms.append(ms)
            if out is not None:
                stats.recent.append({"mode": out.mode, "reason": out.reason, "forwards": out.forwards,
                                     "edited_tokens": out.edited_tokens, "model_ms": out.model_ms, "ms": ms,
                                     "jump": out.jump})
        stats.answered += answer is not None
        stats.empty += answer is None
        if answer is not None:
            self.last[doc.uri] = answer
        return answer

    async def _decide(self, doc: Document, offset: int, path: str,
                      open_docs: list[Document]) -> tuple[EditAnswer | None, Outcome | None]:
        """The candidates, cheapest first: the change's own next sites (code alone), shown at once when
        the acceptance model likes them (or, with none, whenever there are some); else the model's edit
        (when next edits are on), and the best of all when it reaches the bar."""
        s = self.settings
        spec = language_for(doc.language_id, doc.uri)
        if spec is None:
            raise BadInput(f"unsupported language {doc.language_id!r}")
        with self.tickets.take(doc.uri) as ticket:
            await ticket.pause(s.debounce_ms / 1000)
            mine = [step for step in self.edits.steps if step.uri == doc.uri]  # oldest first
            offers = await self._follow(doc, spec, offset, open_docs, ticket)
            features = features_at(doc.text, offset, len(mine))
            choice = choose(self.acceptance, offers, features, s.show_above)
            if choice.shown is not None or not s.enable:
                return self._answer(doc, choice, offset), None
            check_language(self.cfg, doc)  # the model's languages: the code's candidates are any language's
            ends = LineEnds(doc.text)  # the pipeline sees "\n" line ends; its edit is mapped back
            before = LineEnds(doc.text[:offset]).unix
            cursor = (before.count("\n"), len(before) - before.rfind("\n") - 1)
            req = EditRequest(ends.unix, path, cursor, spec,
                              self.edits.diffs(s.history_steps), self.edits.last(doc.uri), s, self.count_tokens,
                              sampling=self.cfg.sampling, uri=doc.uri, open_docs=open_docs, index_of=indexed)
            out = await ticket.run(suggest(req, self.backend, "nextedit:" + doc.uri, self._in_thread))
        self.stats.reasons[out.reason] = self.stats.reasons.get(out.reason, 0) + 1
        self.stats.model_ms.append(out.model_ms)
        self.stats.forwards.append(out.forwards)
        self.stats.drafts_offered += out.drafts
        self.stats.drafts_kept += out.reason is EditOutcome.DRAFT and out.edit is not None
        if out.edit is not None:  # the model's edit, or a draft it preferred, in the editor's line ends
            offers.append(ends.edit(out.edit))
        choice = choose(self.acceptance, offers, features, s.show_above)
        return self._answer(doc, choice, offset), out

    def _answer(self, doc: Document, choice: Choice, offset: int) -> EditAnswer | None:
        """The edit shown, counted; None when nothing is."""
        if choice.scored:
            self.log("debug", "next-edit acceptance: " + ", ".join(
                f"{o.source} {o.text.strip()[:30]!r} P={p:.2f}" for o, p in choice.scored)
                + ("; nothing reaches the bar" if choice.shown is None else
                   f"; shown: {choice.shown.source}" + (" (by the rules: too few in its calibration)"
                                                        if choice.p is None else "")))
        shown = choice.shown
        jump = shown is not None and abs(doc.text.count("\n", 0, shown.start)
                                         - doc.text.count("\n", 0, offset)) > self.settings.jump_lines
        self.stats.chose(choice, jump)
        return None if shown is None else EditAnswer(doc, shown, jump, choice.p)

    async def _follow(self, doc: Document, spec, offset: int, open_docs: list[Document],
                      ticket: Ticket) -> list[Candidate]:
        """The rules' candidates (the next-edit rules' table): the rest of the user's last change at its next
        sites (in `doc`, or at the calls in `doc` of a signature changed in another open document)
        when following is on, and the last edit repeated when an acceptance model decides: the rules
        alone never show a repeat. The change followed is noted for the document it was made in."""
        kinds = ({Kind.CODE} if self.settings.follow else set()) | ({Kind.REPEAT} if self.acceptance else set())
        if not kinds:
            return []
        others = self._elsewhere(doc, open_docs)
        steps: dict[str, list[Step]] = {}
        for step in self.edits.steps:
            steps.setdefault(step.uri, []).append(step)
        history = History(steps, dict(self.following), Budget.of(FOLLOW_MS))
        found = await self._rules(ticket, history.budget, propose, Documents(doc.text, spec, offset, doc.uri, others),
                                  history, kinds)
        if found is None:
            return []
        followed = next((c for c in found.candidates if c.source.followed), None)
        if followed is not None and found.change is not None:  # still followed once its step leaves the edit log
            self._note(followed.origin or doc.uri, found.change)
        return list(found.candidates)

    async def _rules(self, ticket: Ticket, budget: Budget, fn, *args):
        """fn(*args) in a thread of the follows' pool (never behind another document's follow, nor the
        model's CPU steps), until a newer request for the document supersedes it (BackendError DROPPED)
        or RULES_CAP_S pass (None); either way its budget is stopped, so the thread is free soon after."""
        try:
            async with deadline(RULES_CAP_S, "the change's sites took too long"):
                return await ticket.run(self._in_thread(fn, *args, pool=self.rules))
        except BaseException as e:
            budget.stop()
            if not isinstance(e, BackendError) or e.kind is not Failure.TIMEOUT:
                raise
            self.log("debug", f"next edit: nothing followed: {e}")
            return None

    def _note(self, uri: str, change: Change) -> None:
        """`change` is what `uri`'s follow follows now (the newest noted last)."""
        self.following.pop(uri, None)
        self.following[uri] = change

    def _elsewhere(self, doc: Document, open_docs: list[Document]) -> tuple[Other, ...]:
        """Every other open document of doc's language that may have changed a signature: those in the
        edit log (newest first), then those whose change is followed (the newest noted first), open
        in `open_docs` or not (`documents`). No window drops one: the follow walks them in this
        order until its budget is spent (a window of the 3 edited last, among the 32 opened last,
        reached none of 60 importers, and 3 of 20)."""
        by_uri, out = {d.uri: d for d in open_docs}, []
        for uri in dict.fromkeys([s.uri for s in reversed(self.edits.steps)] + list(reversed(self.following))):
            other = by_uri.get(uri) or (self.documents(uri) if uri != doc.uri else None)
            if uri != doc.uri and other is not None and other.language_id == doc.language_id:
                out.append(Other(uri, other.text, PurePosixPath(unquote(uri)).stem))
        return tuple(out)

    async def _in_thread(self, fn, *args, pool: ThreadPoolExecutor | None = None):
        return await asyncio.get_running_loop().run_in_executor(pool or self.thread, functools.partial(fn, *args))

    def close(self) -> None:
        self.thread.shutdown(wait=False, cancel_futures=True)
        self.rules.shutdown(wait=False, cancel_futures=True)
