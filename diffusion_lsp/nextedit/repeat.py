"""The user's last change, made again: what `eval nep`'s repeat-last-edit baseline does once, and
where the next-edit drafts (issue 21: the last edit applied at the analogous sites of the region,
each a candidate the model verifies: suggest.py) come from.

A change is the last edited block shrunk by the common character prefix and suffix of its removed
and added text, widened to whole identifiers (`token_change`): `old_text -> new_text`. When
old_text is not blank (a rename, a changed literal or argument, a deletion), it is made again where
old_text occurs as a whole word. A one-line insertion that is the line above it with identifiers
swapped one for one (`renames`) is made again below a line that holds every swapped-out identifier:
the copy-and-rename of a field list or a block of assignments.

As a next-edit rule (`Repeat`, a candidate of kind REPEAT): the document's newest step made again
at its next occurrence after the cursor, from the step's own lines (no diff of the whole document).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator

from ..candidate import Source
from ..linediff import opcodes
from .edits import minimal_edit
from .history import joined, line_offset
from .rule import NOTHING, Documents, History, Proposal
from .unfinished import unfinished

TOKEN = re.compile(r"\w+|\S")  # identifiers and single symbols, less the marks \w misses (tokens)
MAX_SITES = 3  # drafts offered for one request


class Repeat:
    """The user's last change in the document made again at its next occurrence; none while the
    step leaves its line half typed (its own check: a rename's site that shortens its line is
    repeated by no one)."""

    source, whole_step = Source.REPEAT, False

    def __call__(self, documents: Documents, history: History) -> Proposal:
        steps, text = history.of(documents.uri), documents.text
        if not steps:
            return NOTHING
        step = joined(steps)
        block = last_change(step.old, step.new)
        if block is None or text.count("\n") < step.first or unfinished(step, text, documents.spec):
            return NOTHING
        again = made_again((block[0], block[1], block[2] + step.first), text, documents.cursor)
        edit = None if again is None else minimal_edit(text, again, self.source)
        return NOTHING if edit is None else Proposal((edit,))


def word_char(ch: str) -> bool:
    """Whether `ch` may go on an identifier: XID_Continue, as str.isidentifier has it (letters and
    digits of any script, `_`, combining marks: the accent of a decomposed é, Devanagari's vowel signs)."""
    return ("_" + ch).isidentifier()


def tokens(text: str) -> list[str]:
    """`text`'s identifiers and single symbols, in order: TOKEN's, with a mark that `\\w` does not take
    joined to the word it follows (e + U+0301 is one name)."""
    out, end = [], -1
    for m in TOKEN.finditer(text):
        if out and m.start() == end and word_char(m.group()[0]) and word_char(out[-1][-1]):
            out[-1] += m.group()
        else:
            out.append(m.group())
        end = m.end()
    return out


def whole(token: str) -> str:
    """A pattern for `token` that does not match inside a longer identifier."""
    return ((r"(?<!\w)" if word_char(token[0]) else "") + re.escape(token) + (r"(?!\w)" if word_char(token[-1]) else ""))


def token_change(r: str, n: str) -> tuple[str, str]:
    """r -> n shrunk by their common character prefix and suffix, widened to whole identifiers."""
    p = len(os.path.commonprefix([r, n]))
    s = len(os.path.commonprefix([r[p:][::-1], n[p:][::-1]]))
    # a cut splits an identifier when the kept char next to it and a changed char are both word chars
    while p > 0 and word_char(r[p - 1]) and any(p < len(t) - s and word_char(t[p]) for t in (r, n)):
        p -= 1
    while s > 0 and word_char(r[-s]) and any(len(t) - s > p and word_char(t[-s - 1]) for t in (r, n)):
        s -= 1
    return r[p:len(r) - s], n[p:len(n) - s]


def renames(anchor: str, line: str) -> dict[str, str] | None:
    """The identifier swaps that turn `anchor` into `line`, when that is all that differs."""
    import difflib

    x, y = tokens(anchor), tokens(line)
    swaps = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, x, y, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if tag != "replace" or i2 - i1 != 1 or j2 - j1 != 1 or not word_char(x[i1][0]) or swaps.get(x[i1], y[j1]) != y[j1]:
            return None
        swaps[x[i1]] = y[j1]
    return swaps or None


def last_change(old: list[str], new: list[str]) -> tuple[str, str, int] | None:
    """The last changed block of lines old -> new (difflib opcodes over lines): (removed text, added
    text, its first line in new); None when they are the same."""
    ops = [op for op in opcodes(old, new) if op[0] != "equal"]
    if not ops:
        return None
    _, i1, i2, j1, j2 = ops[-1]
    return "".join(old[i1:i2]), "".join(new[j1:j2]), j1


def copied_below(lines: list[str], swaps: dict[str, str], start: int) -> Iterator[tuple[int, str]]:
    """(k, the lines with line k's renamed copy inserted below it) for each line k >= start that
    holds every swapped-out identifier, in order."""
    find = [re.compile(whole(t)) for t in swaps]
    swap = re.compile("|".join(whole(t) for t in sorted(swaps, key=len, reverse=True)))
    for k in range(start, len(lines)):
        if all(f.search(lines[k]) for f in find):
            body = lines[k].rstrip("\r\n")
            ending = lines[k][len(body):]
            copy = swap.sub(lambda m: swaps[m.group()], body)
            yield k, "".join(lines[:k]) + body + (ending or "\n") + copy + ending + "".join(lines[k + 1:])


def in_region(region: str, cursor: int, removed: str, added: str, anchor: str | None,
              limit: int = MAX_SITES) -> list[str]:
    """The region text with the change removed -> added (the user's last step) made again, once per
    site, nearest after `cursor` (an offset in the region) first, then nearest before it; at most
    `limit`. `anchor`: the line above an inserted line (for copy-and-rename), None when unknown."""
    old_text, new_text = token_change(removed, added)
    if old_text.strip():
        hits = list(re.finditer(whole(old_text), region))
        hits.sort(key=lambda m: (m.start() < cursor, abs(m.start() - cursor)))
        return [region[:m.start()] + new_text + region[m.end():] for m in hits[:limit]]
    if removed or len(added.splitlines()) != 1 or anchor is None or (swaps := renames(anchor, added)) is None:
        return []
    lines = region.splitlines(keepends=True)
    line = region.count("\n", 0, cursor)
    return [text for _, text in copied_below(lines, swaps, line + 1)][:limit]


def repeat_last_edit(old: str, current: str, cursor: tuple[int, int]) -> str | None:
    """The file after the last edit's change is made again (the rule above); None: no edit.
    `cursor`: 0-based (line, character) in `current`."""
    block = last_change(old.splitlines(keepends=True), current.splitlines(keepends=True))
    return None if block is None else made_again(block, current, offset_of(current, cursor))


def made_again(block: tuple[str, str, int], current: str, cursor: int) -> str | None:
    """`current` with the change `block` (removed text, added text, its first line in current: the
    last changed block, `last_change`) made again after offset `cursor`; None: nowhere to."""
    removed, added, first = block
    old_text, new_text = token_change(removed, added)
    if old_text.strip():  # a replacement or deletion: again at the next occurrence
        m = re.compile(whole(old_text)).search(current, cursor)
        return None if m is None else current[:m.start()] + new_text + current[m.end():]
    lines = current.splitlines(keepends=True)
    if removed or len(added.splitlines()) != 1 or first == 0:
        return None  # only a one-line insertion is repeated
    swaps = renames(lines[first - 1], added)
    if swaps is None:
        return None
    return next((text for _, text in copied_below(lines, swaps, current.count("\n", 0, cursor) + 1)), None)


def offset_of(text: str, cursor: tuple[int, int]) -> int:
    """The offset of 0-based (line, column) in `text`, the column held to its line (newline included)."""
    line, col = cursor
    start = line_offset(text, line)
    end = text.find("\n", start)
    return start + min(col, (len(text) if end < 0 else end + 1) - start)
