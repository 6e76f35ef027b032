"""Two next-edit predictors that need no model, beside which the model's figures are read; each
takes (old, current, cursor) and returns the whole predicted file, or None for no edit.

- no edit: the current file.
- repeat last edit (nextedit/repeat.py's, where the language server's candidate comes from too):
  the last changed block of lines old -> current (the same difflib opcodes as
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

from ..nextedit.repeat import last_change, offset_of, repeat_last_edit

__all__ = ["last_block", "no_edit", "offset_of", "repeat_last_edit"]


def no_edit(old: str, current: str, cursor: tuple[int, int]) -> None:
    return None


def last_block(old: str, current: str) -> tuple[str, str, int] | None:
    """The last changed block of lines old -> current: (removed text, added text, its first line in
    current); the same opcodes as history.last_change_end, so the cursor is at its end."""
    return last_change(old.splitlines(keepends=True), current.splitlines(keepends=True))
