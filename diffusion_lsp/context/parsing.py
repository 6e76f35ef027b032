"""Parsing a window of a document: the few dozen lines the model sees, never the whole file.

Why a window: a from-scratch parse of a 5,000-line Python file takes ~36 ms here, and even an
incremental reparse after one keystroke that leaves a syntax error costs 7 ms p50 / 22 ms p95 (error
recovery), against a 5 ms budget for all server overhead. A ~80-line window parses in under a
millisecond. Windows are cached by content (the same request parsed by gather() is reused by the
syntax check), and a changed window for the same key is reparsed incrementally from the old one.

Offsets are str indices; tree-sitter wants UTF-8 bytes. Lone surrogates are kept with
"surrogatepass" so that any Python string round-trips."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from .languages import LanguageSpec, parser_for
from .lines import indent_at, width

CACHE_SIZE = 16  # windows kept: a few per open document is plenty
PARSE_BUDGET_MS = 3.0  # a parse that takes longer is abandoned (no tree: line rules only)
MAX_EXTEND = 4096  # how far past the window a docstring or comment left open is followed


def utf8(s: str) -> bytes:
    return s.encode("utf-8", "surrogatepass")


@dataclass
class Window:
    """A parsed slice text[start:start + len(text)] of a document."""

    start: int  # offset of the window in the document
    text: str
    data: bytes  # utf8(text)
    tree: object  # tree_sitter.Tree

    def byte_of(self, offset: int) -> int:
        """Byte index in the window of a document offset (clamped to the window)."""
        i = min(max(offset - self.start, 0), len(self.text))
        return i if len(self.data) == len(self.text) else len(utf8(self.text[:i]))

    def offset_of(self, byte: int) -> int:
        """Document offset of a byte index in the window (node boundaries never split a character)."""
        if len(self.data) == len(self.text):
            return self.start + byte
        return self.start + len(self.data[:byte].decode("utf-8", "surrogatepass"))


def _point(data: bytes, pos: int) -> tuple[int, int]:
    return data.count(b"\n", 0, pos), pos - (data.rfind(b"\n", 0, pos) + 1)


def _common_prefix(a: bytes, b: bytes, limit: int) -> int:
    i = 0
    for step in (4096, 256, 16, 1):  # whole slices compare in C; a few steps per size at most
        while i + step <= limit and a[i:i + step] == b[i:i + step]:
            i += step
    return i


def _common_suffix(a: bytes, b: bytes, limit: int) -> int:
    i, la, lb = 0, len(a), len(b)
    for step in (4096, 256, 16, 1):
        while i + step <= limit and a[la - i - step:la - i] == b[lb - i - step:lb - i]:
            i += step
    return i


def _edit_range(old: bytes, new: bytes) -> tuple[int, int, int]:
    """(start, old_end, new_end) of the one region where old and new differ."""
    start = _common_prefix(old, new, min(len(old), len(new)))
    tail = _common_suffix(old, new, min(len(old), len(new)) - start)
    return start, len(old) - tail, len(new) - tail


def _parse(parser, data: bytes, old_tree=None):
    """Parse with a deadline: error recovery on an unlucky window (one that starts inside a
    docstring, say) can take 10x the usual time; past PARSE_BUDGET_MS there is no tree."""
    deadline = time.perf_counter() + PARSE_BUDGET_MS / 1e3
    try:
        args = (old_tree,) if old_tree is not None else ()
        return parser.parse(lambda i, _: data[i:i + 65536], *args,
                            progress_callback=lambda *_: time.perf_counter() > deadline)
    except ValueError:  # cancelled
        parser.reset()
        return None


def _far(old: bytes, new: bytes) -> bool:
    """Whether more than half of `new` differs from `old`."""
    start, old_end, new_end = _edit_range(old, new)
    return (old_end - start) + (new_end - start) > len(new) // 2


def reparse(parser, old_tree, old: bytes, new: bytes):
    """Parse `new`, reusing `old_tree` (the tree of `old`, left untouched) when only a small region
    changed (reusing a tree of unrelated text is slower than a fresh parse). None past the deadline."""
    tree = edited(old_tree, old, new)
    return _parse(parser, new, tree)


def edited(old_tree, old: bytes, new: bytes):
    """A copy of `old_tree` (the tree of `old`, left untouched) told where `new` differs, to parse
    `new` incrementally; None when more than half of `new` differs (reusing a tree of unrelated
    text is slower than a fresh parse)."""
    start, old_end, new_end = _edit_range(old, new)
    if (old_end - start) + (new_end - start) > len(new) // 2:
        return None
    tree = old_tree.copy()
    tree.edit(start_byte=start, old_end_byte=old_end, new_end_byte=new_end, start_point=_point(old, start),
              old_end_point=_point(old, old_end), new_end_point=_point(new, new_end))
    return tree


class WindowCache:
    """Parsed windows by content, plus the last window per key for incremental reparsing."""

    def __init__(self, size: int = CACHE_SIZE):
        self.size = size
        self.by_content: OrderedDict[tuple[str, bytes], object] = OrderedDict()
        self.last: OrderedDict[tuple[str, str], tuple[bytes, object]] = OrderedDict()
        self.lock = threading.Lock()

    def parse(self, spec: LanguageSpec, data: bytes, key: str = ""):
        """The tree of `data`, or None when the language has no grammar."""
        parser = parser_for(spec)
        if parser is None:
            return None
        with self.lock:
            if (spec.name, data) in self.by_content:
                self.by_content.move_to_end((spec.name, data))
                return self.by_content[(spec.name, data)]
            prev = self.last.get((spec.name, key))
            if prev is None:
                tree = _parse(parser, data)
            elif prev[1] is None:  # the last window ran past its deadline: retry only a new one
                tree = _parse(parser, data) if _far(prev[0], data) else None
            else:
                tree = reparse(parser, prev[1], prev[0], data)
            self.by_content[(spec.name, data)] = tree  # None too: a slow window stays slow
            self.last[(spec.name, key)] = (data, tree)
            self.last.move_to_end((spec.name, key))
            for d in (self.by_content, self.last):
                while len(d) > self.size:
                    d.popitem(last=False)
            return tree


WINDOWS = WindowCache()


def _delimiters(spec: LanguageSpec) -> list[tuple[str, str]]:
    return [('"""', '"""'), ("'''", "'''")] if spec.indent_blocks else [("/*", "*/")]


def _left_open(text: str, start: int, end: int, open_: str, close: str) -> bool:
    """Whether text[start:end] ends inside an open_ ... close pair (by counting delimiters)."""
    if open_ == close:
        return text.count(open_, start, end) % 2 == 1
    return text.rfind(open_, start, end) > text.rfind(close, start, end)


def parse_bounds(text: str, start: int, end: int, offset: int, spec: LanguageSpec) -> tuple[int, int]:
    """The part of text[start:end] (line starts and ends) worth parsing. An unterminated docstring
    or block comment at either edge, or in Python a window that begins deep and dedents below its
    first line, leaves a tree of errors that takes 5-10x longer to recover from. So: begin after a
    string or comment that `start` is inside of, then at the shallowest line (Python); end past
    the close of one left open (up to MAX_EXTEND characters further). When the cursor itself is in
    such a string, begin at its opening instead (up to MAX_EXTEND characters before)."""
    line_start = text.rfind("\n", 0, offset) + 1
    around_cursor = False  # a string or comment holds the cursor too: the window starts at its opening
    for open_, close in _delimiters(spec):
        if _left_open(text, 0, start, open_, close):
            at = text.find(close, start)
            if 0 <= at < line_start:
                start = text.find("\n", at) + 1 or line_start
            elif start - text.rfind(open_, 0, start) <= MAX_EXTEND:
                start, around_cursor = text.rfind("\n", 0, text.rfind(open_, 0, start)) + 1, True
    if spec.indent_blocks and not around_cursor:
        best, best_width, pos = start, None, start
        while pos <= line_start:
            stop = text.find("\n", pos)
            stop = len(text) if stop < 0 else stop
            if text[pos:stop].strip():
                w = width(indent_at(text, pos))
                if best_width is None or w < best_width:
                    best, best_width = pos, w
            pos = stop + 1
        start = best
    for open_, close in _delimiters(spec):
        if _left_open(text, start, end, open_, close):
            at = text.find(close, end, end + MAX_EXTEND)
            if at >= 0:
                stop = text.find("\n", at + len(close))
                end = len(text) if stop < 0 else stop
    return start, end


def parse_window(spec: LanguageSpec | None, text: str, start: int, end: int, key: str = "") -> Window | None:
    """Parse text[start:end]; None when the language is unknown or has no grammar."""
    if spec is None:
        return None
    piece = text[start:end]
    data = utf8(piece)
    tree = WINDOWS.parse(spec, data, key)
    return None if tree is None else Window(start, piece, data, tree)


def error_count(node, limit: int = 64) -> int:
    """ERROR and MISSING nodes under `node`, descending only into subtrees that have errors."""
    count, stack = 0, [node]
    while stack and count < limit:
        n = stack.pop()
        if n.is_error or n.is_missing:
            count += 1
            continue
        stack.extend(c for c in n.children if c.has_error or c.is_missing)
    return count


def errors_with_insertion(spec: LanguageSpec, win: Window, offset: int, insert: str,
                          replace: int = 0) -> int | None:
    """Error count of the window with `insert` written at `offset` over `replace` characters;
    None when the parse ran past its deadline."""
    parser = parser_for(spec)
    i = offset - win.start
    new = utf8(win.text[:i] + insert + win.text[i + replace:])
    with WINDOWS.lock:
        tree = reparse(parser, win.tree, win.data, new)
    return None if tree is None else error_count(tree.root_node)
