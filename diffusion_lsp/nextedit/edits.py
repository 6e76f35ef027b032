"""A rewritten region -> one minimal range edit (a Candidate, candidate.py), and the filters a
suggestion must pass.

The model returns the whole region as it should read; the edit is what differs, found by trimming
the common prefix and suffix, so an unchanged region is no edit and a one-word change is a one-word
range. Filters: an edit that undoes the user's last step is never suggested, nor one that breaks
the parse of a region that parsed (tree-sitter, on a window around the region)."""

from __future__ import annotations

import bisect
import os
import re
from dataclasses import replace

from ..candidate import Candidate, Source
from ..context.languages import LanguageSpec
from ..context.parsing import error_count, parse_window
from .history import Step


class LineEnds:
    """A document whose lines end in "\r\n" or "\r" as the next-edit pipeline sees it: with "\n"
    (the model writes "\n", tree-sitter's parse filter splits windows at "\n"), and the way back:
    an edit's offsets and line breaks in the editor's own text. Lines and columns are the same in both."""

    def __init__(self, text: str):
        self.text = text
        self.unix = text.replace("\r\n", "\n").replace("\r", "\n")
        self.end = "\n" if self.unix == text else "\r\n" if "\r\n" in text else "\r"
        if self.unix != text:  # where each line starts, in both texts
            self._starts = [0] + [m.end() for m in re.finditer(r"\r\n|\r|\n", text)]
            self._unix_starts = [0] + [i + 1 for i, c in enumerate(self.unix) if c == "\n"]

    def offset(self, unix_offset: int) -> int:
        """An offset into `unix` -> the same place in `text`."""
        if self.unix == self.text:
            return unix_offset
        line = bisect.bisect_right(self._unix_starts, unix_offset) - 1
        return self._starts[line] + unix_offset - self._unix_starts[line]

    def edit(self, edit: Candidate) -> Candidate:
        """An edit of `unix` -> the same edit of `text`, its line breaks written as `text` writes them
        (its source and evidence kept)."""
        if self.unix == self.text:
            return edit
        return replace(edit, start=self.offset(edit.start), end=self.offset(edit.end),
                       text=edit.text.replace("\n", self.end))


def minimal_edit(old: str, new: str, source: Source, at: int = 0, **evidence) -> Candidate | None:
    """The one range edit turning `old` into `new` (offsets shifted by `at`), from `source` with its
    `evidence`; None when equal. The common suffix is only trimmed where it does not
    overlap the common prefix (both found in C: a whole 170 KB document costs well under a millisecond)."""
    if old == new:
        return None
    p = len(os.path.commonprefix([old, new]))
    s = len(os.path.commonprefix([old[p:][::-1], new[p:][::-1]]))
    return Candidate(at + p, at + len(old) - s, new[p:len(new) - s], source, **evidence)


def line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset)


def reverts(step: Step | None, doc: str, edit: Candidate) -> bool:
    """True when applying `edit` to `doc` puts the lines of the user's last step back as they were
    before it (an undo), or re-adds what that step removed where it removed it."""
    if step is None:
        return False
    lines = doc.splitlines(keepends=True)
    lo, hi = step.first, step.first + len(step.new)
    if "".join(lines[lo:hi]) != "".join(step.new):
        return False  # the step's lines have moved on since: compare nothing
    first_line, last_line = line_of(doc, edit.start), line_of(doc, edit.end)
    if last_line < lo - 1 or first_line > hi:
        return False
    after = edit.apply(doc).splitlines(keepends=True)
    delta = len(after) - len(lines)
    return "".join(after[lo:hi + delta]) == "".join(step.old) and step.old != step.new


def breaks_parse(spec: LanguageSpec | None, doc: str, edit: Candidate, margin_lines: int = 30) -> bool:
    """True when the edit adds syntax errors to a window around it that parsed without any."""
    if spec is None:
        return False
    lo = doc.rfind("\n", 0, max(0, edit.start))
    for _ in range(margin_lines):
        if lo <= 0:
            lo = 0
            break
        lo = doc.rfind("\n", 0, lo)
    lo = max(0, lo + 1 if lo > 0 else 0)
    hi = edit.end
    for _ in range(margin_lines):
        nxt = doc.find("\n", hi)
        if nxt < 0:
            hi = len(doc)
            break
        hi = nxt + 1
    before = parse_window(spec, doc, lo, hi, key="nextedit-before")
    if before is None or error_count(before.tree.root_node) > 0:
        return False  # no parse, or it did not parse before: nothing to keep
    new_doc = edit.apply(doc)
    after = parse_window(spec, new_doc, lo, hi + len(edit.text) - (edit.end - edit.start), key="nextedit-after")
    return after is not None and error_count(after.tree.root_node) > 0
