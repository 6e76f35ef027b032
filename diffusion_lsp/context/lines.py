"""Line arithmetic on document text by offsets, without splitting the whole file into lines."""

from __future__ import annotations

import re

CLOSERS = ")]}"
OPENERS = "([{"
QUOTES = "\"'`"
PAIRS = {")": "(", "]": "[", "}": "{"}
TRAILERS = CLOSERS + QUOTES + ";,"  # what may follow the cursor and still count as an empty line end
MAX_SCAN_LINES = 200  # how far line searches look before giving up
INDENT_SCAN_LINES = 64  # lines above the cursor that show the file's indentation step
_WS = re.compile(r"[ \t]*")


def line_bounds(text: str, offset: int) -> tuple[int, int]:
    """(start, end) of the line holding `offset`; end is the index of its newline or len(text)."""
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    return start, len(text) if end < 0 else end


def indent_at(text: str, line_start: int) -> str:
    return _WS.match(text, line_start).group()


def width(indent: str) -> int:
    return len(indent.expandtabs(4))


def is_trailer(s: str) -> bool:
    """True when `s` is non-blank and only closing brackets, quotes, ';' or ',' (auto-closed text)."""
    stripped = s.strip()
    return bool(stripped) and all(c in TRAILERS or c.isspace() for c in stripped)


def unclosed_brackets(s: str) -> int:
    """How many brackets `s` opens and leaves open (strings skipped, stray closers ignored)."""
    stack, quote = [], None
    for i, ch in enumerate(s):
        if quote:
            quote = None if ch == quote and s[i - 1:i] != "\\" else quote
        elif ch in QUOTES:
            quote = ch
        elif ch in OPENERS:
            stack.append(ch)
        elif ch in CLOSERS and stack and stack[-1] == PAIRS[ch]:
            stack.pop()
    return len(stack)


def unbalanced_cuts(s: str) -> list[int]:
    """Where to cut `s` so that it leaves nothing open, longest first: before the first bracket or
    quote it opens and never closes, and before its first closer that closes nothing in `s`."""
    stack, quote, stray = [], None, None  # stack: indices of open brackets; quote: (char, index)
    for i, ch in enumerate(s):
        if quote:
            quote = None if ch == quote[0] and s[i - 1:i] != "\\" else quote
        elif ch in QUOTES:
            quote = (ch, i)
        elif ch in OPENERS:
            stack.append(i)
        elif ch in CLOSERS:
            if stack and s[stack[-1]] == PAIRS[ch]:
                stack.pop()
            elif stray is None:
                stray = i
    opened = min(stack[:1] + ([quote[1]] if quote else []), default=None)
    return sorted({c for c in (opened, stray) if c is not None}, reverse=True)


def strip_comment(line: str, markers: tuple[str, ...]) -> str:
    """The line without a trailing comment (naive: ignores markers inside strings)."""
    for m in markers:
        i = line.find(m)
        if i >= 0 and (i == 0 or line[i - 1].isspace()):
            line = line[:i]
    return line.rstrip()


def prev_nonblank(text: str, line_start: int) -> tuple[int, int] | None:
    """(start, end) of the nearest non-blank line above the line starting at `line_start`."""
    end = line_start - 1
    for _ in range(MAX_SCAN_LINES):
        if end < 0:
            return None
        start = text.rfind("\n", 0, end) + 1
        if text[start:end].strip():
            return start, end
        end = start - 1
    return None


def next_nonblank(text: str, line_end: int) -> tuple[int, int] | None:
    """(start, end) of the nearest non-blank line below the line ending at `line_end`."""
    start = line_end + 1
    for _ in range(MAX_SCAN_LINES):
        if start > len(text):
            return None
        end = text.find("\n", start)
        end = len(text) if end < 0 else end
        if text[start:end].strip():
            return start, end
        start = end + 1
    return None


def indent_unit(text: str, line_start: int, default: str) -> str:
    """The smallest indentation step among the lines above `line_start` (the file's style)."""
    steps: dict[str, int] = {}
    pos, prev = line_start, None
    for _ in range(INDENT_SCAN_LINES):
        if pos <= 0:
            break
        start = text.rfind("\n", 0, pos - 1) + 1
        if text[start:pos].strip():
            ind = indent_at(text, start)
            if prev is not None and len(prev) > len(ind) and prev.startswith(ind):
                step = prev[len(ind):]
                steps[step] = steps.get(step, 0) + 1
            prev = ind
        pos = start
    if not steps:
        return default
    return max(steps, key=lambda s: (steps[s], -len(s)))
