"""The editable region: the lines around the cursor that a next edit may rewrite.

It starts as a window around the cursor (more below it than above: the next edit usually follows the
last one) and is widened with tree-sitter so that it never starts or ends inside a statement: at
each end, the outermost syntax node cut by the boundary is taken in whole when the region stays
within `max_lines`. Then it is trimmed to `max_tokens` from the end farther from the cursor. Unknown
languages keep the plain window. Only a window of the file is parsed (context/parsing.py)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..context.languages import LanguageSpec
from ..context.parsing import parse_window
from ..context.tokens import over_budget

ABOVE, BELOW = 3, 7  # the plain window: lines above / below the cursor line
PARSE_MARGIN = 60  # lines parsed on each side of the region


@dataclass(frozen=True)
class Region:
    first: int  # 0-based first line
    end: int  # one past the last line
    start_offset: int  # str offsets of the region in the document
    end_offset: int

    @property
    def lines(self) -> int:
        return self.end - self.first


def line_offsets(text: str) -> list[int]:
    """Start offset of every line, plus len(text) at the end."""
    starts = [0]
    i = text.find("\n")
    while i >= 0:
        starts.append(i + 1)
        i = text.find("\n", i + 1)
    if starts[-1] != len(text):
        starts.append(len(text))
    return starts


def _widen(spec: LanguageSpec, text: str, starts: list[int], lo: int, hi: int, max_lines: int) -> tuple[int, int]:
    n_lines = len(starts) - 1
    a, b = max(0, lo - PARSE_MARGIN), min(n_lines, hi + PARSE_MARGIN)
    win = parse_window(spec, text, starts[a], starts[b])
    if win is None:
        return lo, hi
    root = win.tree.root_node

    def node_at(line: int):
        row = line - a
        s = text[starts[line]:starts[line + 1]]
        col = len((s.rstrip("\r\n")).encode("utf-8", "surrogatepass")) - len(
            s.rstrip("\r\n").lstrip().encode("utf-8", "surrogatepass"))
        return root.descendant_for_point_range((row, col), (row, col))

    def outermost(node, ok):
        best = None
        while node is not None and node != root:
            if ok(node):
                best = node
            node = node.parent
        return best

    if lo < hi:
        top = outermost(node_at(lo), lambda n: n.start_point[0] + a < lo and hi - (n.start_point[0] + a) <= max_lines)
        if top is not None:
            lo = top.start_point[0] + a
        last = hi - 1
        bottom = outermost(node_at(last), lambda n: n.end_point[0] + a > last and n.start_point[0] + a >= lo
                           and n.end_point[0] + a + 1 - lo <= max_lines)
        if bottom is not None:
            hi = bottom.end_point[0] + a + 1
    return lo, min(hi, n_lines)


def editable_region(text: str, cursor_line: int, spec: LanguageSpec | None, count: Callable[[str], int],
                    max_lines: int = 20, max_tokens: int = 350) -> Region:
    """The region around 0-based `cursor_line` (clamped to the document)."""
    starts = line_offsets(text)
    n_lines = max(1, len(starts) - 1)
    cursor_line = min(max(0, cursor_line), n_lines - 1)
    lo = max(0, cursor_line - min(ABOVE, max_lines // 3))
    hi = min(n_lines, lo + max(1, min(max_lines, ABOVE + 1 + BELOW)))
    if spec is not None and len(starts) > 1:
        lo, hi = _widen(spec, text, starts, lo, hi, max_lines)
    hi = max(hi, min(n_lines, cursor_line + 1))
    while hi - lo > 1 and over_budget(count, text[starts[lo]:starts[min(hi, len(starts) - 1)]], max_tokens):
        if hi - 1 - cursor_line >= cursor_line - lo:
            hi -= 1
        else:
            lo += 1
    hi = min(hi, len(starts) - 1) if len(starts) > 1 else hi
    return Region(lo, hi, starts[lo] if starts else 0, starts[hi] if hi < len(starts) else len(text))
