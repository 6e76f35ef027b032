"""Edit history: one log per workspace of the edits made to open documents, with the two views the
model is shown -- next edit's (the steps rendered as unified diffs, newest last) and completion's
(the recent edits' text as snippets of context).

In the editor, keystrokes are merged into steps: a change in the same document within `merge_s` of
the previous one and on or next to the lines that step touched extends it (typing a word, a line, a
few lines is one step). A step keeps its own old and new lines only, never a copy of the document.
A huge change (a paste of a whole file, a formatter run) is not an edit the model can learn from and
would fill the budget: it clears the history instead.

`diffs_between` gives the same rendering for two versions of a file (evaluation data, mined training
edits): one diff per hunk, split by `hunk_groups`, the one hunk splitter (data/edits.py uses it too)."""

from __future__ import annotations

import re
import time
from collections import deque
from dataclasses import dataclass, field

from ..context.records import EditSnippet
from ..linediff import grouped_opcodes, opcodes

CONTEXT = 1  # unchanged lines shown around a change
MERGE_S = 1.0  # changes closer than this, at the same spot, are one step
HUGE_LINES = 200  # a step with more old or new lines than this resets the history
HUGE_CHARS = 8000
KEPT = 20  # steps kept: the most nextEdit.historySteps may show
SNIPPET_LINES = 14  # at most this many lines of a step shown as completion context: not a whole file


def render(path: str, first: int, old: list[str], new: list[str]) -> str:
    """One unified-diff hunk: `old` lines became `new` lines at 0-based line `first`; both lists may
    start and end with the same (context) lines, which are shown as context."""
    out = [f"--- a/{path}\n", f"+++ b/{path}\n",
           f"@@ -{first + 1},{len(old)} +{first + 1},{len(new)} @@\n"]
    for tag, i1, i2, j1, j2 in opcodes(old, new):
        if tag == "equal":
            out.extend(" " + _line(s) for s in old[i1:i2])
        else:
            out.extend("-" + _line(s) for s in old[i1:i2])
            out.extend("+" + _line(s) for s in new[j1:j2])
    return "".join(out)


def _line(s: str) -> str:
    return s if s.endswith("\n") else s + "\n"


def hunk_groups(a: list[str], b: list[str], context: int = CONTEXT) -> list[list[tuple]]:
    """Lines a -> b split into hunks: difflib's opcodes (at a bounded cost: linediff), grouped with
    `context` equal lines around each change (changes closer than 2 x context lines are one hunk);
    no group when a == b."""
    groups = grouped_opcodes(a, b, context)
    return [g for g in groups if any(op[0] != "equal" for op in g)]


def steps_between(path: str, old: str, new: str, context: int = CONTEXT) -> list["Step"]:
    """One step per hunk of old -> new, in file order (lines of `new`)."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    out = []
    for group in hunk_groups(a, b, context):
        i1, i2, j1, j2 = group[0][1], group[-1][2], group[0][3], group[-1][4]
        out.append(Step(path, path, j1, a[i1:i2], b[j1:j2]))
    return out


HUNK = re.compile(r"@@ -\d+(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def steps_of(history: str, path: str, text: str) -> list["Step"]:
    """The steps of the unified diffs in `history` (`render`'s, or an API client's edit history; other
    text between them is passed over) that change `path` (any file when it is empty), oldest first,
    each placed where its lines now stand in `text`: at its hunk's line when they stand there, else
    where they stand once (a client may send the file cut); a step whose lines stand nowhere is left out."""
    out, file, lines = [], None, history.splitlines(keepends=True)
    i = 0
    while i < len(lines):
        line, i = lines[i], i + 1
        if line.startswith("+++ "):
            file = line[4:].strip().removeprefix("b/")
        elif (m := HUNK.match(line)) and file is not None:
            want_old, want_new = int(m.group(1) or 1), int(m.group(3) or 1)
            step = Step(path, path, max(0, int(m.group(2)) - 1), [], [])
            while i < len(lines) and (len(step.old) < want_old or len(step.new) < want_new) \
                    and lines[i][:1] in (" ", "-", "+", "\\"):
                line, i = lines[i], i + 1
                if line[0] in " -":
                    step.old.append(line[1:])
                if line[0] in " +":
                    step.new.append(line[1:])
            if (not path or file == path) and (step.old, step.new) != ([], []):
                out.append(step)
    standing = [_line(s) for s in text.splitlines(keepends=True)]
    return [s for s in (_placed(s, standing) for s in out[-KEPT:]) if s is not None]


def _placed(step: "Step", lines: list[str]) -> "Step | None":
    """`step` at the line where its new lines stand in `lines` (the text's, each ending in a newline)."""
    new, n = [_line(s) for s in step.new], len(step.new)
    if not new or lines[step.first:step.first + n] == new:
        return step
    at = [i for i in range(len(lines) - n + 1) if lines[i] == new[0] and lines[i:i + n] == new]
    return Step(step.uri, step.path, at[0], step.old, step.new) if len(at) == 1 else None


def diffs_between(path: str, old: str, new: str, context: int = CONTEXT) -> list[str]:
    """One rendered diff per hunk of old -> new, in file order."""
    return [step.diff() for step in steps_between(path, old, new, context)]


def last_change_end(old: str, new: str) -> tuple[int, int] | None:
    """(line, column) in `new` where its last difference from `old` ends: where an editor's cursor
    is after making that edit. None when they are equal."""
    if old == new:
        return None
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    ops = [op for op in opcodes(a, b) if op[0] != "equal"]
    tag, i1, i2, j1, j2 = ops[-1]
    if j2 == j1:  # lines deleted: the cursor is where they were
        return j1, 0
    last_new = b[j2 - 1]
    last_old = a[i2 - 1] if i2 > i1 else ""
    if last_new.endswith("\n") and last_new.rstrip("\r\n") == last_old:  # a line break added at its end
        return j2, 0
    # within the last changed line, the end of its differing part
    k = 0
    while k < min(len(last_new), len(last_old)) and last_new[-1 - k] == last_old[-1 - k]:
        k += 1
    col = len(last_new.rstrip("\r\n")) - max(0, k - (len(last_new) - len(last_new.rstrip("\r\n"))))
    return j2 - 1, max(0, col)


@dataclass
class Step:
    uri: str
    path: str
    first: int  # 0-based first line of the span in the document
    old: list[str]  # the span's lines before the step
    new: list[str]  # the span's lines now
    at: float = field(default=0.0)  # when it last grew

    def diff(self) -> str:
        return render(self.path, self.first, self.old, self.new)


def joined(steps: list[Step]) -> Step:
    """The newest of a document's steps (oldest first) with the steps just before it on the same
    lines: a name or an argument typed with pauses is several steps, and one change."""
    newest, old = steps[-1], steps[-1].old
    for step in reversed(steps[:-1]):
        if step.first != newest.first or step.new != old:
            break
        old = step.old
    return Step(newest.uri, newest.path, newest.first, old, newest.new, newest.at)


def undone(step: Step, text: str) -> tuple[str, int]:
    """(`text` as it was before `step`, the offset where the step's lines start, in both)."""
    start, end = line_offset(text, step.first), line_offset(text, step.first + len(step.new))
    return text[:start] + "".join(step.old) + text[end:], start


def line_offset(text: str, line: int) -> int:
    """Offset where 0-based `line` starts (len(text) past the end). str.split runs in C: 0.6 ms at
    line 4,500 of a 170 KB file, where a loop of str.find takes 1.5 ms."""
    if line <= 0:
        return 0
    rest = text.split("\n", line)
    return len(text) if len(rest) <= line else len(text) - len(rest[-1])


def _lines_at(text: str, start: int, n: int) -> list[str]:
    """Up to n lines (keepends) from offset `start`, a line start."""
    out = []
    while len(out) < n and start < len(text):
        nl = text.find("\n", start)
        end = len(text) if nl < 0 else nl + 1
        out.append(text[start:end])
        start = end
    return out


class EditLog:
    """Per workspace: the last `size` edit steps across documents, oldest first, noted once per
    change; `diffs` is next edit's view of them, `snippets` completion's."""

    def __init__(self, size: int = KEPT, merge_s: float = MERGE_S, clock=time.monotonic):
        self.steps: deque[Step] = deque(maxlen=max(1, size))
        self.merge_s, self.clock = merge_s, clock

    def clear(self) -> None:
        self.steps.clear()

    def note(self, uri: str, path: str, before: str, after: str, start_line: int, end_line: int,
             new_end_line: int) -> None:
        """One content change: lines start_line..end_line of `before` (0-based, inclusive) became
        start_line..new_end_line of `after`."""
        now = self.clock()
        last = self.steps[-1] if self.steps else None
        delta = new_end_line - end_line
        merge = (last is not None and last.uri == uri and now - last.at <= self.merge_s
                 and last.first - 1 <= start_line and end_line <= last.first + len(last.new))
        if merge:
            lo, hi_old = min(last.first, start_line), max(last.first + len(last.new) - 1, end_line)
        else:
            lo, hi_old = max(0, start_line - CONTEXT), end_line + CONTEXT
        base = line_offset(before, lo)  # the same in `after`: nothing above start_line changed
        old = _lines_at(before, base, hi_old - lo + 1)
        new = _lines_at(after, base, hi_old + delta - lo + 1)
        if merge:  # the step's own old lines stand where its new ones are now
            a, b = last.first - lo, last.first - lo + len(last.new)
            old = old[:a] + last.old + old[b:]
            self.steps.pop()
        if max(len(old), len(new)) > HUGE_LINES or max(sum(map(len, old)), sum(map(len, new))) > HUGE_CHARS:
            self.steps.clear()
            return
        if old != new:
            self.steps.append(Step(uri, path, lo, old, new, now))

    def last(self, uri: str | None = None) -> Step | None:
        """The newest step (in `uri` when given)."""
        return next((s for s in reversed(self.steps) if uri is None or s.uri == uri), None)

    def diffs(self, n: int | None = None) -> list[str]:
        """The newest n steps (all without n) as unified diffs, oldest first."""
        steps = list(self.steps)
        if n is not None:
            steps = steps[-n:] if n > 0 else []
        return [s.diff() for s in steps]

    def snippets(self) -> list[EditSnippet]:
        """The steps' text as it reads now (their lines and one around), oldest first: typing at one
        spot over several steps is one snippet, its newest text; a blank one is left out."""
        out: list[tuple[Step, EditSnippet]] = []
        for step in self.steps:
            text = "".join(step.new[:SNIPPET_LINES]).rstrip("\n")
            if out and out[-1][0].uri == step.uri and abs(out[-1][0].first - step.first) <= 2 * CONTEXT:
                out.pop()  # the same spot, edited again: its newest text only
            if text.strip():
                out.append((step, EditSnippet(step.uri, text)))
        return [snippet for _, snippet in out]
