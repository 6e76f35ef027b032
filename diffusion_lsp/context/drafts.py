"""Drafts of a completion from the code itself, for the model to verify (model/decoding/verify.py).

Most of what a user types repeats the repository in front of them: the call they wrote a screen
above, the line that followed a line like the one they just wrote. Three drafters, all pure text,
in the context thread of every request (a 9,428-line file with 10 other documents open: p50 1.7 ms
at a fresh position, 0.6 ms typing along a line, whose neighbours' word overlaps are cached):

- `lookup`: prompt lookup (Saxena 2023; the draft model of "prompt lookup decoding"): the longest
  tail of the text before the cursor that occurs elsewhere in this document or another open one;
  the draft is what followed that occurrence, to the end of its line.
- `similar_line`: the line that followed the earlier line most like the one above the cursor, with
  the identifiers that differ between those two lines swapped the same way (`a = f(x)` followed by
  `b = g(x)`; above the cursor `a = f(y)`: the draft is `b = g(y)`), at the cursor's indentation.
- `LastFills`: the document's last suggestion, when the cursor's line still reads as it did (the
  cache answers an unchanged document; this one survives edits elsewhere in the file).

A draft is a candidate (candidate.py) that inserts at the cursor, to the end of its line
(model/decoding/verify.py ends a one-line draft there), from the drafter that wrote it (`Source.LAST`,
`LOOKUP`, `LINE`). `drafts_for` gives at most `limit` distinct ones, best first; every one agrees
with what is already typed on the cursor's line.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

from ..candidate import Candidate, Source
from .records import Document

WORDS = re.compile(r"\w+|[^\w\s]+|\s+")  # identifiers, runs of punctuation, runs of blanks
MIN_MATCH_CHARS = 8  # a shorter repeated tail ("self." or "(") says little about what follows
MAX_MATCH_WORDS = 24  # the longest tail looked up
# earlier lines compared with the line above the cursor, nearest first: on the held-out files of docker,
# cattrs and dateutil, 100, 200 and 400 find the same right drafts (64 of 900 lines); 400 cost twice as much
SIMILAR_SCAN_LINES = 200
MIN_SIMILARITY = 0.5  # word overlap (Dice) of a line with the one above the cursor to count as similar
LIMIT = 3


@dataclass(frozen=True)
class Found:
    text: str
    match: float
    lines_away: int


def _line_around(text: str, offset: int) -> tuple[int, str]:
    """(start of the cursor's line, the line's text before the cursor)."""
    start = text.rfind("\n", 0, offset) + 1
    return start, text[start:offset]


def cursor_lines(text: str, offset: int) -> str:
    """The line above the cursor's and the cursor's line up to the cursor: where a last fill was made."""
    return text[text.rfind("\n", 0, max(0, text.rfind("\n", 0, offset))) + 1:offset]


def _rest_of_line(text: str, at: int) -> str:
    """text from `at` to the end of its line."""
    end = text.find("\n", at)
    return text[at:] if end < 0 else text[at:end]


def lookup(doc: Document, offset: int, others: Iterable[Document] = ()) -> str | None:
    """Prompt lookup: what followed the longest tail of doc.text[:offset] (whole words, at least
    MIN_MATCH_CHARS) found elsewhere: earlier or later in the document (never at the cursor), then in
    `others`. The nearest occurrence before the cursor wins a tie. None when nothing repeats. At
    blanks no other line has there (an editor's indentation of an empty line), the text of the line
    that followed the line above, at the cursor's indentation, whatever its own was."""
    found = lookup_found(doc, offset, others)
    return None if found is None else found.text


def lookup_found(doc: Document, offset: int, others: Iterable[Document] = ()) -> Found | None:
    """`lookup`, with how long the repeated tail is and where it was found."""
    found = _lookup(doc, offset, others)
    start, typed = _line_around(doc.text, offset)
    if found is None and typed and typed.isspace():  # blanks the file does not have there: an editor's
        found = _lookup(doc, start, others)
        return Found(found.text.lstrip(), found.match, found.lines_away) if found and found.text.lstrip() else None
    return found


def _lookup(doc: Document, offset: int, others: Iterable[Document]) -> Found | None:
    """lookup's search. Shortest tail first: a hit near the cursor is found at once, and the first
    miss ends it (measured: a binary search over the tails was 2.6x slower, its misses scanning every
    document)."""
    text = doc.text
    before = text[max(0, offset - 400):offset]
    tails = [before[m.start():] for m in WORDS.finditer(before)][::-1][:MAX_MATCH_WORDS]  # shortest first
    sources = [text] + [d.text for d in others if d.uri != doc.uri]
    best = None  # (the text that followed, the tail's length, where it was in this document or None)
    for tail in tails:
        if len(tail) < MIN_MATCH_CHARS or not tail.strip():
            continue
        found = None
        for k, src in enumerate(sources):
            # k == 0: the document itself, the cursor's own occurrence excluded (it ends at `offset`)
            at = src.rfind(tail, 0, offset - 1) if k == 0 else src.rfind(tail)
            if at < 0 and k == 0:
                at = src.find(tail, offset)
            if at >= 0:
                found = (_rest_of_line(src, at + len(tail)), len(tail), at if k == 0 else None)
                break
        if found is None:
            break  # a longer tail cannot occur where this one does not
        if found[0].strip():
            best = found
    if best is None:
        return None
    rest, length, at = best  # lines away counted once, for the tail that won
    return Found(rest, float(length), -1 if at is None else text.count("\n", min(at, offset), max(at, offset)))


@functools.lru_cache(maxsize=8192)  # the lines above the cursor are the same from one keystroke to the next
def _words(line: str) -> tuple[str, ...]:
    return tuple(w for w in WORDS.findall(line) if not w.isspace())


@functools.lru_cache(maxsize=16384)  # typing along a line compares the same lines with the same line above
def _similarity(line: str, target: str) -> float:
    """Word overlap (Dice) of two lines."""
    a, b = _words(line), _words(target)
    if not a or not b:
        return 0.0
    common = sum(min(a.count(w), b.count(w)) for w in set(a))
    return 2 * common / (len(a) + len(b))


def _swaps(old: tuple[str, ...], new: tuple[str, ...]) -> dict[str, str] | None:
    """Word-for-word substitutions turning `old` into `new` when they have the same shape (same
    number of words, only identifiers or literals differ, each one the same way); None otherwise."""
    if len(old) != len(new):
        return None
    swaps: dict[str, str] = {}
    for a, b in zip(old, new):
        if a == b:
            continue
        if not (re.fullmatch(r"\w+", a) and re.fullmatch(r"\w+", b)) or swaps.get(a, b) != b:
            return None
        swaps[a] = b
    return swaps


def _apply(line: str, swaps: dict[str, str]) -> str:
    if not swaps:
        return line
    return re.sub(r"\w+", lambda m: swaps.get(m.group(), m.group()), line)


def similar_line(doc: Document, offset: int) -> str | None:
    """`similar_found`'s text."""
    found = similar_found(doc, offset)
    return None if found is None else found.text


def similar_found(doc: Document, offset: int) -> Found | None:
    """The line that followed the earlier line most like the line above the cursor, its identifiers
    swapped as those two lines differ, at the cursor line's indentation; None when no earlier line
    is similar enough (MIN_SIMILARITY) or the line that followed disagrees with what is typed."""
    text = doc.text
    start, typed = _line_around(text, offset)
    if start == 0:
        return None
    # the complete lines before the cursor's, as far back as the scan goes (rsplit stops there)
    lines = text[:start].rsplit("\n", SIMILAR_SCAN_LINES + 2)[:-1]
    if len(lines) > SIMILAR_SCAN_LINES + 1:
        lines = lines[1:]  # the first piece holds everything before the window
    above = next((i for i in range(len(lines) - 1, -1, -1) if lines[i].strip()), None)
    if above is None:
        return None
    best, best_score = None, MIN_SIMILARITY
    for i in range(above - 1, max(-1, above - 1 - SIMILAR_SCAN_LINES), -1):
        if i + 1 >= above or not lines[i + 1].strip():  # nothing new follows it, or a blank line
            continue
        score = _similarity(lines[i], lines[above])
        if score > best_score:
            best, best_score = i, score
    if best is None:
        return None
    follow = _apply(lines[best + 1], _swaps(_words(lines[best]), _words(lines[above])) or {})
    indent = len(follow) - len(follow.lstrip())
    # the following line sat at its own indentation relative to its model line: keep that step
    step = indent - (len(lines[best]) - len(lines[best].lstrip()))
    base = len(lines[above]) - len(lines[above].lstrip())
    line = " " * max(0, base + step) + follow.lstrip() if "\t" not in follow[:indent] else follow
    away = above - best
    if not line.startswith(typed):  # typed at another indentation (an editor's guess, say)
        stripped = typed.lstrip()
        return Found(line.lstrip()[len(stripped):], best_score, away) if line.lstrip().startswith(stripped) else None
    return Found(line[len(typed):], best_score, away)


class LastFills:
    """Each document's last suggestion and the text it was made after (`cursor_lines`)."""

    def __init__(self, size: int = 64):
        self.size = size
        self._last: OrderedDict[str, tuple[str, str]] = OrderedDict()

    def put(self, uri: str, typed: str, text: str) -> None:
        self._last[uri] = (typed, text)
        self._last.move_to_end(uri)
        while len(self._last) > self.size:
            self._last.popitem(last=False)

    def draft(self, uri: str, typed: str) -> str | None:
        """The rest of the last suggestion when `typed` (cursor_lines) reads as it did then, plus
        characters that follow the suggestion (typed through); None otherwise."""
        if uri not in self._last:
            return None
        old, text = self._last[uri]
        if not typed.startswith(old) or not text.startswith(typed[len(old):]):
            return None
        rest = text[len(typed) - len(old):]
        return rest if rest.strip() else None


def drafts_for(doc: Document, offset: int, others: Iterable[Document] = (), last: LastFills | None = None,
               limit: int = LIMIT) -> list[Candidate]:
    """Distinct drafts at `offset`, best first: the last suggestion, prompt lookup, the similar line.
    A draft that ends with the text after the cursor on its line ends before it (the fill goes
    between the two)."""
    after = _rest_of_line(doc.text, offset)
    rest = last.draft(doc.uri, cursor_lines(doc.text, offset)) if last else None
    found = [(Source.LAST, Found(rest, 0.0, 0) if rest else None),
             (Source.LOOKUP, lookup_found(doc, offset, others)), (Source.LINE, similar_found(doc, offset))]
    out: list[Candidate] = []
    for source, f in found:
        text = f.text if f else None
        if text and after.strip() and text.endswith(after):
            text = text[: len(text) - len(after)]
        if not (text and text.strip()):
            continue
        same = next((i for i, c in enumerate(out) if c.text == text), None)
        if same is None:
            out.append(Candidate.at(offset, text, source, match=f.match, lines_away=f.lines_away))
        else:
            out[same] = dataclasses.replace(out[same], agree=out[same].agree + 1)
    return out[:limit]
