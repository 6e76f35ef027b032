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

import re

from ..nextedit.repeat import copied_below, last_change, renames, token_change, whole


def no_edit(old: str, current: str, cursor: tuple[int, int]) -> None:
    return None


def last_block(old: str, current: str) -> tuple[str, str, int] | None:
    """The last changed block of lines old -> current: (removed text, added text, its first line in
    current); the same opcodes as history.last_change_end, so the cursor is at its end."""
    return last_change(old.splitlines(keepends=True), current.splitlines(keepends=True))


def repeat_last_edit(old: str, current: str, cursor: tuple[int, int]) -> str | None:
    """The file after the last edit's change is made again (the rule above); None: no edit.
    `cursor`: 0-based (line, character) in `current`."""
    block = last_block(old, current)
    if block is None:
        return None
    removed, added, first = block
    old_text, new_text = token_change(removed, added)
    if old_text.strip():  # a replacement or deletion: again at the next occurrence
        m = re.compile(whole(old_text)).search(current, offset_of(current, cursor))
        return None if m is None else current[:m.start()] + new_text + current[m.end():]
    lines = current.splitlines(keepends=True)
    if removed or len(added.splitlines()) != 1 or first == 0:
        return None  # only a one-line insertion is repeated
    swaps = renames(lines[first - 1], added)
    if swaps is None:
        return None
    return next((text for _, text in copied_below(lines, swaps, cursor[0] + 1)), None)


def offset_of(text: str, cursor: tuple[int, int]) -> int:
    lines = text.splitlines(keepends=True)
    line, col = cursor
    return sum(map(len, lines[:line])) + (min(col, len(lines[line])) if line < len(lines) else 0)
