"""From the model's fill to the candidate shown at the cursor (candidate.py's `Candidate`, from
`Source.MODEL`), by rules applied in this order:

1. drop a low-confidence tail: cut at the first token committed with confidence < confidence_cut
   (completion.confidenceCut), then back to a clean boundary (the last whole line, else the last
   whole word);
2. stay within the scope: LINE and REST_OF_LINE stop at the first newline; BLOCK stops at a line
   dedented below the block (keeping a closing-bracket line only when the suffix does not close it);
3. drop text the suffix already has: last lines that repeat the next lines;
4. balance brackets and quotes against the rest of the line: a fill that closes the auto-closed
   characters after the cursor writes over them (replace_chars), and an end of the fill that the
   rest of the line starts with is dropped (`x, y)` before `, y)`);
5. reject a fill that makes the syntax worse: more parse errors in the window with the fill than
   without. A fill that ends on a dangling operator (`x = self.`), leaves a bracket or quote open
   (it ran out of canvas, say), or closes one it never opened, is first cut before that and
   checked again (at most three times, keeping at least a quarter of it); only when that fails
   too is it rejected (the server re-samples once; `creates_parse_error` is the same check on
   its own).

Each rule that changes or rejects the fill appends its `Cut` (protocol/reasons.py) to `reasons`;
a rejection's `rejects`, so the caller can tell PARSE_ERROR (worth a re-sample) from the rest."""

from __future__ import annotations

import re

from ..candidate import Candidate, Source
from ..protocol.reasons import Cut
from .languages import language_for
from .lines import indent_at, unbalanced_cuts, width
from .overlap import balance_closers, drop_duplicate_lines, drop_line_overlap, reduce_replace
from .parsing import error_count, errors_with_insertion, parse_window
from .records import CompletionContext, SpanKind

CHECK_LINES_BEFORE, CHECK_LINES_AFTER = 60, 30  # window of creates_parse_error without a context
_PARTIAL_WORD = re.compile(r"[A-Za-z0-9_]+$")
_DANGLING = re.compile(r"[\s.,;:=+\-*/%&|^<>!~@?\\]+$")  # operators and separators that need something after


def _line_prefix(ctx: CompletionContext) -> str:
    return ctx.prefix[ctx.prefix.rfind("\n") + 1:]


def drop_low_confidence(text: str, pieces: list[str] | None, confidence: list[float] | None,
                        confidence_cut: float) -> tuple[str, int]:
    """(text, tokens dropped). `pieces` (each token's text, adding up to `text`: the sampler makes
    them so, healing included) locate the cut; without them it is placed proportionally."""
    if not confidence or confidence_cut <= 0:
        return text, 0
    low = next((i for i, c in enumerate(confidence) if c < confidence_cut), None)
    if low is None:
        return text, 0
    if pieces is not None:
        if len(pieces) != len(confidence) or sum(map(len, pieces)) != len(text):
            raise ValueError(f"{len(pieces)} pieces of {sum(map(len, pieces))} characters do not line up with "
                             f"{len(confidence)} confidences and a text of {len(text)} characters")
        cut = sum(len(p) for p in pieces[:low])
    else:
        cut = round(len(text) * low / len(confidence))
    kept = text[:cut]
    if cut < len(text) and text[cut] != "\n":  # the kept part ends mid-line
        nl = kept.rfind("\n")
        if nl >= 0 and kept[:nl].strip():
            kept = kept[:nl]
        elif _PARTIAL_WORD.search(kept) and (text[cut].isalnum() or text[cut] == "_"):
            kept = _PARTIAL_WORD.sub("", kept)
    return kept, len(confidence) - low


def keep_scope(ctx: CompletionContext, text: str) -> str:
    """The part of the fill inside the current scope (see the module docstring, rule 2)."""
    if ctx.kind is not SpanKind.BLOCK:
        nl = text.find("\n")
        return text if nl < 0 else text[:nl]
    lines = text.split("\n")
    line_prefix = _line_prefix(ctx)
    if not line_prefix.strip() and lines[0].strip() and \
            width(line_prefix + indent_at(lines[0], 0)) < width(ctx.scope_indent):
        return ""  # the fill starts outside the block it was asked for
    braces = ctx.language != "python"
    for j in range(1, len(lines)):
        line = lines[j]
        if not line.strip() or width(indent_at(line, 0)) >= width(ctx.scope_indent):
            continue
        keep = j
        if braces and all(c in ")]};," for c in line.strip()) and not _closed_after(ctx):
            keep = j + 1  # the block's own closing line, which the suffix does not have
        return "\n".join(lines[:keep])
    return text


def _closed_after(ctx: CompletionContext) -> bool:
    """Whether the text after the cursor closes the block: a closer on the cursor's line or a next
    non-blank line, dedented below the block, that starts with one."""
    if any(c in ")]}" for c in ctx.line_suffix):
        return True
    for line in ctx.suffix.split("\n")[1:]:
        if line.strip():
            return line.lstrip()[0] in ")]}" and width(indent_at(line, 0)) < width(ctx.scope_indent)
    return False


def _tidy_end(ctx: CompletionContext, text: str) -> str:
    if ctx.kind is SpanKind.BLOCK and ctx.line_suffix.strip():
        return text.rstrip() + "\n" + ctx.indent  # the closer after the cursor gets its own line
    return text.rstrip() if not ctx.line_suffix.strip() else text


def postprocess(ctx: CompletionContext, text: str, pieces: list[str] | None = None,
                confidence: list[float] | None = None, confidence_cut: float = 0.0,
                reasons: list[Cut] | None = None, check_syntax: bool = True) -> Candidate | None:
    """The candidate to show at the cursor for a fill, or None (with the rejection appended to `reasons`)."""
    reasons = reasons if reasons is not None else []

    def reject(why: Cut) -> None:
        reasons.append(why)
        return None

    if not text.strip():
        return reject(Cut.EMPTY)
    text, dropped = drop_low_confidence(text, pieces, confidence, confidence_cut)
    if dropped:
        reasons.append(Cut.TAIL)
        if not text.strip():
            return reject(Cut.LOW_CONFIDENCE)
    scoped = keep_scope(ctx, text)
    if scoped != text:
        reasons.append(Cut.SCOPE)
        if not scoped.strip():
            return reject(Cut.OUT_OF_SCOPE)
    text = scoped
    line_prefix = _line_prefix(ctx)
    text, k = drop_duplicate_lines(text, line_prefix, ctx.suffix)
    if k:
        reasons.append(Cut.DUPLICATE_LINES)
    replace = 0
    if ctx.kind is not SpanKind.BLOCK:
        text, replace = balance_closers(text, line_prefix, ctx.line_suffix)
        text, n = drop_line_overlap(text, ctx.line_suffix[replace:])
        text, replace = reduce_replace(text, replace, ctx.line_suffix)
        if n:
            reasons.append(Cut.OVERLAP)
        if replace:
            reasons.append(Cut.REPLACE)
    if not text.strip():
        return reject(Cut.DUPLICATE)
    text = _tidy_end(ctx, text)
    candidate = Candidate.at(ctx.offset, text, Source.MODEL, replace)
    if check_syntax and ctx.document is not None and ctx.parse_window is not None and \
            _worse_syntax(ctx, candidate):
        return _cut_unbalanced(ctx, text, replace, reasons)
    return candidate


def _cut_unbalanced(ctx: CompletionContext, text: str, replace: int, reasons: list[Cut]) -> Candidate | None:
    """A fill that broke the syntax, cut to its longest start that does not: first without a
    dangling operator at the end (`x = self.`), then before what it leaves open or closes without
    opening. None, with the PARSE_ERROR rejection, when no cut helps."""
    cuts = [] if replace else [len(text)] + unbalanced_cuts(text)
    tried, solid = {text}, len("".join(text.split()))
    for cut in cuts:
        kept = _DANGLING.sub("", text[:cut])
        if kept in tried or 4 * len("".join(kept.split())) < solid:  # keep at least a quarter of the fill
            continue
        tried.add(kept)
        if not _worse_syntax(ctx, candidate := Candidate.at(ctx.offset, _tidy_end(ctx, kept), Source.MODEL)):
            reasons.append(Cut.UNBALANCED)
            return candidate
    reasons.append(Cut.PARSE_ERROR)
    return None


def _worse_syntax(ctx: CompletionContext, s: Candidate) -> bool:
    spec = language_for(ctx.language)
    doc = ctx.document
    win = parse_window(spec, doc.text, *ctx.parse_window, key=doc.uri)
    if win is None:
        return False
    after = errors_with_insertion(spec, win, s.start, s.text, s.replace_chars)
    return after is not None and after > error_count(win.tree.root_node)


def creates_parse_error(doc_text: str, candidate: Candidate, language: str | None, key: str = "") -> bool:
    """Whether the completion `candidate` (inserted at its start) leaves more parse errors than there were, counted
    in the lines around the cursor (a whole-file reparse would cost far more than the 5 ms budget).
    `language` is a languageId or canonical name; unknown languages never fail the check."""
    spec = language_for(language)
    if spec is None:
        return False
    offset = min(candidate.start, len(doc_text))
    start = end = offset
    for _ in range(CHECK_LINES_BEFORE):
        start = doc_text.rfind("\n", 0, max(start - 1, 0)) + 1 if start > 0 else 0
    for _ in range(CHECK_LINES_AFTER):
        nl = doc_text.find("\n", end + 1) if end < len(doc_text) else -1
        end = len(doc_text) if nl < 0 else nl
    win = parse_window(spec, doc_text, start, end, key=key)
    if win is None:
        return False
    after = errors_with_insertion(spec, win, offset, candidate.text, candidate.replace_chars)
    return after is not None and after > error_count(win.tree.root_node)
