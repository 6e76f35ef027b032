"""Decoding a next edit: `await suggest(request, backend, key)` -> Outcome, a straight pipeline
over a Backend (protocol/backend.py): region -> prompt -> await probe -> choose the span -> await fill
-> filters. The CPU steps (the region's parse, the prompt's token counts, the filters) run where
`cpu` puts them (a thread, for the language server). The language server, serve-api, `eval nep`
and tests all run this one pipeline, over the worker, a remote API or an engine in process.

- full re-mask: the old region is shown (formats/edit_prompt.py) and the whole region is a canvas with slack
  (fillers) so its length may change; the model writes the region as it should read.
- remask-and-refine (default; needs a backend that can probe): the region stays in place and is probed (model/decoding/probe.py): the lines
  holding tokens the model doubts (its own first choice is `doubt` times likelier) are the only
  ones considered, and only their doubted tokens (from the first to the last) are re-masked, with
  slack, and denoised with everything else visible. A region the model does
  not doubt costs the probe's passes and nothing more; an edit on two lines costs those lines.

Drafts (refine mode, `drafts`): before the doubted span is chosen, the user's last change made again
at the region's analogous sites (repeat.py: the same rename, literal or argument change, the same
copy-and-rename of a line) is probed in place, one probe per site; the draft the model likes best
is the edit when the model finds its changed tokens likelier than the ones it would replace (mean
log-probability over the changed span, each text judged in place with its neighbours). A draft
so kept skips `min_confidence` (the model preferred it to what is there); the other filters apply.

Through a remote API that cannot probe but has an edit endpoint, the region is rewritten there
(formats/mercury.py); one that has neither gets a full re-mask. Either way the result is diffed against the old region into one minimal edit (edits.py) and
filtered: unchanged -> nothing; an undo of the last step, a parse it breaks, or a fill less sure
than `min_confidence` -> nothing, each with its reason.
Drafts made again at analogous sites: repeat.py; a probe's context reused: model/decoding/reuse.py; what a
model claims: model/families/claims.py."""

from __future__ import annotations

import math
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from ..candidate import Candidate, Source
from ..protocol.backend import Backend
from ..protocol.capabilities import Capabilities
from ..protocol.answers import Fill, Probed
from ..protocol.reasons import EditOutcome
from ..protocol.requests import FillRequest, ProbeRequest, RewriteRequest
from ..context.languages import LanguageSpec
from ..protocol.settings import SamplerConfig
from .settings import Mode, NextEditSettings
from .edits import breaks_parse, line_of, minimal_edit, reverts
from ..formats import mercury
from . import repeat
from .history import Step
from .unfinished import unfinished
from ..formats.edit_prompt import edit_prompt
from .region import Region, editable_region

DOC_KEY = "nextedit"  # in process, the probe's context is reused by the fill after it


@dataclass
class EditRequest:
    text: str  # the document
    path: str  # as shown to the model
    cursor: tuple[int, int]  # 0-based (line, str index in the line)
    spec: LanguageSpec | None
    diffs: list[str]  # edit history, oldest first
    last_step: Step | None  # the user's last edit step in this document (the undo filter)
    settings: NextEditSettings
    count: Callable[[str], int]  # the model's token count
    sampling: SamplerConfig = field(default_factory=SamplerConfig)
    mode: Mode | None = None  # overrides settings.mode (benchmarks run both)
    uri: str = ""  # the document's uri (cross-file context skips it)
    open_docs: list = field(default_factory=list)  # other open documents (context.records.Document)
    index_of: Callable | None = None  # their definitions (context.index.indexed on the server's path)
    region: tuple[int, int] | None = None  # str offsets of the region to rewrite; None: editable_region's


@dataclass
class Outcome:
    edit: Candidate | None  # the model's edit (Source.MODEL), or a draft it preferred (Source.DRAFT)
    reason: EditOutcome
    mode: Mode
    region: Region
    forwards: int = 0
    model_ms: float = 0.0
    edited_tokens: int = 0  # tokens of the region the edit rewrote (old and new, the larger)
    confidence: float = 0.0  # mean confidence of the fill's tokens and of where it ends
    jump: bool = False  # the edit starts more than jump_lines lines from the cursor
    drafts: int = 0  # drafts probed (the last step made again)


def _slack(n: int) -> int:
    return max(8, n // 4)


def _lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def doubted_lines(region_text: str, probed: Probed, doubt: float) -> dict[int, float]:
    """Line (0-based in the region) -> its strongest doubt, log(best / prob), over the lines with a
    token whose model's first choice is `doubt` times likelier than it."""
    out: dict[int, float] = {}
    line, floor = 0, math.log(doubt)
    for piece, p, best in zip(probed.pieces, probed.prob, probed.best):
        score = math.log(max(best, 1e-12) / max(p, 1e-12))
        starts = line
        if score >= floor and piece.strip():
            out[starts] = max(out.get(starts, 0.0), score)
        line += piece.count("\n")
    n = len(_lines(region_text))
    return {k: v for k, v in out.items() if k < n}


def choose_span(doubted: dict[int, float], cursor: int, max_lines: int) -> tuple[int, int] | None:
    """The lines to re-mask: the most doubted line (ties: nearest the cursor line) grown over
    adjacent doubted lines up to max_lines -> (first, end) in region lines."""
    if not doubted:
        return None
    top = max(doubted, key=lambda k: (doubted[k], -abs(k - cursor)))
    a, b = top, top + 1
    while b - a < max_lines and (a - 1 in doubted or b in doubted):
        if b in doubted and (a - 1 not in doubted or doubted[b] >= doubted[a - 1]):
            b += 1
        else:
            a -= 1
    return a, b


def narrow(region_text: str, probed: Probed, doubt: float, lines: tuple[int, int]) -> tuple[int, int]:
    """Character offsets in the region of the re-masked span: from the first doubted token of the
    chosen lines to the end of the last one. Only what the model doubts is re-masked: a renamed
    word costs the forwards of that word, not of its line."""
    floor, line, at = math.log(doubt), 0, 0
    a = b = None
    for piece, p, best in zip(probed.pieces, probed.prob, probed.best):
        if lines[0] <= line < lines[1] and piece.strip() and math.log(max(best, 1e-12) / max(p, 1e-12)) >= floor:
            a = at if a is None else a
            b = at + len(piece)
        at += len(piece)
        line += piece.count("\n")
    if a is None:  # no doubted token there after all: the whole lines
        starts = [0] + [i + 1 for i, c in enumerate(region_text) if c == "\n"]
        a, b = starts[min(lines[0], len(starts) - 1)], (starts[lines[1]] if lines[1] < len(starts) else len(region_text))
    return a, min(b, len(region_text))


def _fit_newline(old: str, new: str) -> str:
    """A fill replacing whole lines ends with a line break when they did; an empty one deletes them."""
    return new + "\n" if new and old.endswith("\n") and not new.endswith("\n") else new


def _definitions(req: EditRequest, before: str, old: str, after: str) -> str:
    """Other open documents' definitions of names near the region, in 1/8 of the context."""
    if not req.open_docs or req.index_of is None:
        return ""
    from ..context.crossfile import cross_file
    from ..context.records import Document

    doc = Document(uri=req.uri, text=req.text, language_id=req.spec.name if req.spec else "")
    near = before[-400:] + old
    return cross_file(doc, req.spec, req.open_docs, (), near, after[:400], before[-2000:] + old + after[:2000],
                      req.settings.max_context_tokens // 8, req.count, req.index_of).text


def given_region(text: str, start: int, end: int) -> Region:
    """The Region of text[start:end] (a caller's, e.g. an edit request's code_to_edit section)."""
    first = text.count("\n", 0, start)
    last = text.count("\n", 0, end) + (0 if end > start and text[end - 1] == "\n" else 1)
    return Region(first, max(last, first + 1), start, end)


def mode_for(asked: Mode | str, can: Capabilities) -> Mode:
    """The mode a backend can run: refine needs a probe; without one, an API's edit endpoint
    (Mode.API), else a full re-mask."""
    asked = Mode(asked)
    if asked is Mode.REFINE and not can.probe:
        return Mode.API if can.rewrite else Mode.FULL
    return asked


@dataclass
class _Prepared:
    """The CPU half before the model: the region, its text, what surrounds it, the history shown."""

    region: Region
    old: str
    before: str
    after: str
    diffs: list[str]
    cursor: tuple[int, int]  # where the model is told the user is: the cursor, or the site jumped to


Cpu = Callable[..., Awaitable]  # cpu(fn, *args) -> fn(*args), run where the caller wants CPU work


async def inline(fn, *args):
    return fn(*args)


def _prepare(req: EditRequest) -> _Prepared:
    s, text = req.settings, req.text
    region_tokens = max(8, min(s.region_tokens, s.max_context_tokens // 4))
    cursor = req.cursor
    if req.region is not None:
        region = given_region(text, *req.region)
    else:
        region = editable_region(text, cursor[0], req.spec, req.count, s.region_lines, region_tokens)
        if s.drafts and (site := next_site(req, region)) is not None:  # the last step's next site, elsewhere
            cursor = site
            region = editable_region(text, cursor[0], req.spec, req.count, s.region_lines, region_tokens)
    old = text[region.start_offset:region.end_offset]
    before, after = text[:region.start_offset], text[region.end_offset:]
    diffs = req.diffs[-s.history_steps:] if s.history_steps else []
    return _Prepared(region, old, before, after, diffs, cursor)


def next_site(req: EditRequest, region: Region) -> tuple[int, int] | None:
    """(line, column) of the next place the user's last step would be made again (the text it
    replaced, as a whole word, as the drafts make it), when the region around the cursor holds none: the first
    after the region, else the first in the file. None when the region holds one, or none is left."""
    last = req.last_step
    change = None if last is None else repeat.last_change(last.old, last.new)
    if change is None:
        return None
    old_text, _ = repeat.token_change(change[0], change[1])
    if not old_text.strip():
        return None
    hits = [m.start() for m in re.finditer(repeat.whole(old_text), req.text)]
    if not hits or any(region.start_offset <= h < region.end_offset for h in hits):
        return None
    at = next((h for h in hits if h >= region.end_offset), hits[0])
    line = req.text.count("\n", 0, at)
    return line, at - (req.text.rfind("\n", 0, at) + 1)


def _prompt(req: EditRequest, p: _Prepared, room: int, old_region: str | None = None):
    definitions = _definitions(req, p.before, p.old, p.after)
    return edit_prompt(p.diffs, req.path, p.before, p.after, req.count, room, old_region=old_region,
                       definitions=definitions)


async def suggest(req: EditRequest, backend: Backend, key: str, cpu: Cpu = inline) -> Outcome:
    """The next edit of `req` through `backend`; raises BackendError (DROPPED when superseded there)."""
    s, count = req.settings, req.count
    mode = mode_for(req.mode or s.mode, backend.capabilities)
    p = await cpu(_prepare, req)
    old, region = p.old, p.region
    n_old = await cpu(count, old)
    forwards, model_ms = 0, 0.0
    if mode is Mode.API:
        cursor = _cursor_in(old, region, p.cursor)
        content = await cpu(mercury.edit_request, req.path, p.before, old, cursor, p.after, p.diffs, count,
                            s.max_context_tokens)
        fill = await backend.rewrite(key, RewriteRequest(content, 2 * n_old + 64))
        new = _fit_newline(old, mercury.rewritten(fill.text))
    elif mode is Mode.FULL:
        canvas = n_old + _slack(n_old)
        prompt = await cpu(_prompt, req, p, s.max_context_tokens - canvas, old)
        fill = await backend.fill(key, FillRequest(prompt.prefix, prompt.suffix, canvas, sampling=req.sampling))
        new = _fit_newline(old, fill.text)
    else:
        prompt = await cpu(_prompt, req, p, s.max_context_tokens - n_old - _slack(n_old) - 1)
        probed = await backend.probe(key, ProbeRequest(prompt.prefix, old, prompt.suffix, s.stride))
        forwards, model_ms = probed.forwards, probed.ms
        drafts = await cpu(_drafts, req, p) if s.drafts else []
        best, best_score = None, -math.inf
        for draft in drafts:
            got = await backend.probe(key, ProbeRequest(prompt.prefix, draft, prompt.suffix, s.stride))
            forwards, model_ms = forwards + got.forwards, model_ms + got.ms
            score = preference(old, probed, draft, got)
            if score is not None and score[1] > score[0] and score[1] > best_score:
                best, best_score = draft, score[1]
        if best is not None:
            out = await cpu(_judge, req, mode, region, old, best, math.exp(best_score), forwards, model_ms, True)
            out.drafts = len(drafts)
            return out
        span = choose_span(doubted_lines(old, probed, s.doubt), p.cursor[0] - region.first, s.max_span_lines)
        if span is None:
            return Outcome(None, EditOutcome.NO_DOUBT, mode, region, forwards, model_ms, drafts=len(drafts))
        a, b = narrow(old, probed, s.doubt, span)
        head, middle, tail = old[:a], old[a:b], old[b:]
        n_mid = await cpu(count, middle)
        fill = await backend.fill(key, FillRequest(prompt.prefix + head, tail + prompt.suffix, n_mid + _slack(n_mid),
                                                 sampling=req.sampling))
        new = head + _fit_newline(middle, fill.text) + tail
        out = await cpu(_judge, req, mode, region, old, new, _confidence(fill), forwards + fill.forwards,
                        model_ms + fill.ms)
        out.drafts = len(drafts)
        return out
    return await cpu(_judge, req, mode, region, old, new, _confidence(fill), forwards + fill.forwards,
                     model_ms + fill.ms)


def _drafts(req: EditRequest, p: _Prepared) -> list[str]:
    """The region with the user's last step made again at its analogous sites."""
    last = req.last_step
    change = None if last is None else repeat.last_change(last.old, last.new)  # the step's lines hold context
    if change is None or unfinished(last, req.text, req.spec):  # a line half typed: no change to repeat yet
        return []
    removed, added, at = change
    lines = req.text.splitlines(keepends=True)
    above = last.first + at - 1  # the document line above the changed block: a copied line's original
    anchor = lines[above] if 0 <= above < len(lines) else None
    cursor = _cursor_in(p.old, p.region, p.cursor)
    return [d for d in repeat.in_region(p.old, cursor, removed, added, anchor) if d != p.old]


def _cursor_in(old: str, region: Region, cursor: tuple[int, int]) -> int:
    """The cursor's offset in the region's text `old`."""
    return sum(map(len, old.splitlines(keepends=True)[:cursor[0] - region.first])) + cursor[1]


def _span_logp(probed: Probed, lo: int, hi: int) -> float | None:
    """Mean log-probability of the probed tokens that overlap text[lo:hi] (the token at lo when the
    span is empty: a deletion is judged by what then stands there)."""
    at, logs = 0, []
    for piece, p in zip(probed.pieces, probed.prob):
        end = at + len(piece)
        if (at < hi and end > lo) or (lo == hi and at <= lo < end):
            logs.append(math.log(max(p, 1e-12)))
        at = end
    return sum(logs) / len(logs) if logs else None


def preference(old: str, probed_old: Probed, draft: str, probed_draft: Probed) -> tuple[float, float] | None:
    """(the model's mean log-probability of the tokens a draft replaces, of the tokens it writes),
    each judged in place; None when either side has no token to judge."""
    e = minimal_edit(old, draft, Source.DRAFT) or Candidate(len(old), len(old), "", Source.DRAFT)
    before, after = _span_logp(probed_old, e.start, e.end), _span_logp(probed_draft, e.start, e.start + len(e.text))
    return None if before is None or after is None else (before, after)


def _confidence(fill: Fill) -> float:
    """Mean over the fill's tokens and where it ends (an empty fill, a deletion, is only the latter)."""
    return (sum(fill.confidence) + fill.end_confidence) / (len(fill.confidence) + 1)


def _judge(req: EditRequest, mode: Mode, region: Region, old: str, new: str, confidence: float, forwards: int,
           model_ms: float, drafted: bool = False) -> Outcome:
    """The filters: the region as the model wrote it (or a draft it preferred, `drafted`), diffed into
    one minimal edit and refused when it changes nothing, undoes the user's last step, breaks the
    parse or (not drafted) is not sure enough."""
    s, text = req.settings, req.text
    edit = minimal_edit(old, new, Source.DRAFT if drafted else Source.MODEL, region.start_offset,
                        confidence=confidence)
    out = Outcome(edit, EditOutcome.DRAFT if drafted else EditOutcome.EDIT, mode, region, forwards, model_ms, confidence=confidence)
    if edit is None:
        out.reason = EditOutcome.UNCHANGED
        return out
    out.edited_tokens = max(req.count(text[edit.start:edit.end]), req.count(edit.text), 1)
    out.jump = abs(line_of(text, edit.start) - req.cursor[0]) > s.jump_lines
    if reverts(req.last_step, text, edit):
        out.reason, out.edit = EditOutcome.UNDO, None
    elif breaks_parse(req.spec, text, edit):
        out.reason, out.edit = EditOutcome.PARSE, None
    elif confidence < s.min_confidence and not drafted:
        out.reason, out.edit = EditOutcome.LOW_CONFIDENCE, None
    return out
