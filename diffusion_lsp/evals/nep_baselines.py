"""Two next-edit predictors that need no model, beside which the model's figures are read; each
takes (old, current, cursor) and returns the whole predicted file, or None for no edit.

- no edit: the current file.
- repeat last edit: the last changed block of lines old -> current (the same difflib opcodes as
  last_change_end), shrunk by the common character prefix and suffix of its removed and added text,
  then widened to whole identifiers (runs of letters, digits, _) where a cut would split one:
  `old_text -> new_text`. (a) old_text not blank (a replacement or deletion): that change is made at
  the first occurrence of old_text at or after the cursor, not inside a longer identifier. (b) a
  one-line insertion (no removed text), the whole dataset's case: when the added line is the line
  above it with some identifiers swapped one for one (tokens: identifiers and single symbols), the
  first line after the cursor's line that holds every swapped-out identifier gets a copy below it
  with the same swaps (the previous edit's copy-and-rename, repeated). Anything else, or no such
  place, is no edit."""

from __future__ import annotations

import difflib
import os
import re

TOKEN = re.compile(r"\w+|\S")  # identifiers and single symbols


def no_edit(old: str, current: str, cursor: tuple[int, int]) -> None:
    return None


def _word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _whole(token: str) -> str:
    """A pattern for `token` that does not match inside a longer identifier."""
    return ((r"(?<!\w)" if _word(token[0]) else "") + re.escape(token) + (r"(?!\w)" if _word(token[-1]) else ""))


def last_block(old: str, current: str) -> tuple[str, str, int] | None:
    """The last changed block of lines old -> current: (removed text, added text, its first line in
    current); the same opcodes as history.last_change_end, so the cursor is at its end."""
    a, b = old.splitlines(keepends=True), current.splitlines(keepends=True)
    ops = [op for op in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes() if op[0] != "equal"]
    if not ops:
        return None
    _, i1, i2, j1, j2 = ops[-1]
    return "".join(a[i1:i2]), "".join(b[j1:j2]), j1


def token_change(r: str, n: str) -> tuple[str, str]:
    """r -> n shrunk by their common character prefix and suffix, widened to whole identifiers."""
    p = len(os.path.commonprefix([r, n]))
    s = len(os.path.commonprefix([r[p:][::-1], n[p:][::-1]]))
    # a cut splits an identifier when the kept char next to it and a changed char are both word chars
    while p > 0 and _word(r[p - 1]) and any(p < len(t) - s and _word(t[p]) for t in (r, n)):
        p -= 1
    while s > 0 and _word(r[-s]) and any(len(t) - s > p and _word(t[-s - 1]) for t in (r, n)):
        s -= 1
    return r[p:len(r) - s], n[p:len(n) - s]


def renames(anchor: str, line: str) -> dict[str, str] | None:
    """The identifier swaps that turn `anchor` into `line`, when that is all that differs."""
    x, y = TOKEN.findall(anchor), TOKEN.findall(line)
    swaps = {}
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, x, y, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        if tag != "replace" or i2 - i1 != 1 or j2 - j1 != 1 or not _word(x[i1][0]) or swaps.get(x[i1], y[j1]) != y[j1]:
            return None
        swaps[x[i1]] = y[j1]
    return swaps or None


def repeat_last_edit(old: str, current: str, cursor: tuple[int, int]) -> str | None:
    """The file after the last edit's change is made again (the rule above); None: no edit.
    `cursor`: 0-based (line, character) in `current`."""
    block = last_block(old, current)
    if block is None:
        return None
    removed, added, first = block
    old_text, new_text = token_change(removed, added)
    if old_text.strip():  # a replacement or deletion: again at the next occurrence
        m = re.compile(_whole(old_text)).search(current, offset_of(current, cursor))
        return None if m is None else current[:m.start()] + new_text + current[m.end():]
    lines = current.splitlines(keepends=True)
    if removed or len(added.splitlines()) != 1 or first == 0:
        return None  # only a one-line insertion is repeated
    swaps = renames(lines[first - 1], added)
    if swaps is None:
        return None
    find = [re.compile(_whole(t)) for t in swaps]
    swap = re.compile("|".join(_whole(t) for t in sorted(swaps, key=len, reverse=True)))
    for k in range(cursor[0] + 1, len(lines)):
        if all(f.search(lines[k]) for f in find):
            body = lines[k].rstrip("\r\n")
            ending = lines[k][len(body):]
            copy = swap.sub(lambda m: swaps[m.group()], body)
            return "".join(lines[:k]) + body + (ending or "\n") + copy + ending + "".join(lines[k + 1:])
    return None


def offset_of(text: str, cursor: tuple[int, int]) -> int:
    lines = text.splitlines(keepends=True)
    line, col = cursor
    return sum(map(len, lines[:line])) + (min(col, len(lines[line])) if line < len(lines) else 0)
