"""LSP positions <-> Python string offsets, for the negotiated position encoding.

An LSP position is (line, character) where `character` counts code units of the line in the
negotiated encoding: UTF-16 by default (LSP 3.17 `PositionEncodingKind`), UTF-8 or UTF-32 when
both sides agree. Python strings index code points, so "é" is 1 index, 2 UTF-8 units, 1 UTF-16
unit, and "😀" is 1 index, 4 UTF-8 units, 2 UTF-16 units. Lines end at "\\n", "\\r\\n" or "\\r"
(the LSP spec's list; unlike str.splitlines, form feeds and U+2028 do not end a line)."""

from __future__ import annotations

import re

UTF8, UTF16, UTF32 = "utf-8", "utf-16", "utf-32"
ENCODINGS = (UTF8, UTF16, UTF32)
_NEWLINE = re.compile(r"\r\n|\r|\n")
# % (lines - 1): that many whole lines; atomic, so that "\r\n" is never taken back as two breaks
_SKIP = r"(?>[^\r\n]*+(?>\r\n|\r|\n)){%d}[^\r\n]*+(?>\r\n|\r|\n)"
_MAX_REPEAT = 60_000  # re's counted repeats stop at 65,535


def choose_encoding(offered: list[str] | None) -> str:
    """UTF-8 when the client offers it (no conversion for UTF-8 editors such as Neovim), else the
    first encoding we know from the client's list, else UTF-16, the protocol's default."""
    offered = [e for e in (offered or []) if e in ENCODINGS]
    if UTF8 in offered:
        return UTF8
    return offered[0] if offered else UTF16


def units(text: str, encoding: str) -> int:
    """Length of `text` in code units of `encoding`."""
    if encoding == UTF32:
        return len(text)
    if text.isascii():
        return len(text)
    if encoding == UTF8:
        return len(text.encode("utf-8", "surrogatepass"))
    if encoding == UTF16:
        return len(text) + sum(1 for c in text if ord(c) > 0xFFFF)
    raise ValueError(f"unknown position encoding {encoding!r}; expected one of {', '.join(ENCODINGS)}")


def column_to_index(line: str, column: int, encoding: str) -> int | None:
    """Code-unit column -> index into `line` (without its line break). A column inside a character
    (between the two halves of a UTF-16 surrogate pair, or inside a UTF-8 sequence) snaps to that
    character's start. None when the column is negative or past the end of the line."""
    if column < 0:
        return None
    if encoding == UTF32 or line.isascii():
        return column if column <= len(line) else None
    seen = 0
    for i, c in enumerate(line):
        width = units(c, encoding)
        if column < seen + width:
            return i
        seen += width
    return len(line) if column == seen else None


def index_to_column(line: str, index: int, encoding: str) -> int:
    """Index into `line` -> code-unit column."""
    if not 0 <= index <= len(line):
        raise ValueError(f"index {index} is outside a line of {len(line)} characters")
    return units(line[:index], encoding)


def line_span(text: str, line: int) -> tuple[int, int] | None:
    """(start, end) offsets of line `line`, its line break excluded; None past the last line.
    A text ending with a line break has one more, empty, line (where the cursor can be)."""
    if line < 0:
        return None
    crlf = "\r" in text
    if not crlf or text.count("\r") == text.count("\r\n"):  # every break is a "\n": str.find runs in C
        start = 0
        for _ in range(line):
            nl = text.find("\n", start)
            if nl < 0:
                return None
            start = nl + 1
        end = text.find("\n", start)
        if end < 0:
            return start, len(text)
        return start, (end - 1 if crlf and end > start and text[end - 1] == "\r" else end)
    start = 0
    if line:  # lone "\r" breaks too: skip `line` lines in one regex match (in C, unlike finditer's loop)
        if line > _MAX_REPEAT:
            return _line_span_chunked(text, line)
        skipped = re.compile(_SKIP % (line - 1)).match(text)
        if skipped is None:
            return None
        start = skipped.end()
    end = _NEWLINE.search(text, start)
    return start, (len(text) if end is None else end.start())


def _line_span_chunked(text: str, line: int) -> tuple[int, int] | None:
    start = 0
    for _ in range(line // _MAX_REPEAT):
        m = re.compile(_SKIP % (_MAX_REPEAT - 1)).match(text, start)
        if m is None:
            return None
        start = m.end()
    rest = line % _MAX_REPEAT
    if rest:
        m = re.compile(_SKIP % (rest - 1)).match(text, start)
        if m is None:
            return None
        start = m.end()
    end = _NEWLINE.search(text, start)
    return start, (len(text) if end is None else end.start())


def offset_at(text: str, line: int, column: int, encoding: str) -> int | None:
    """LSP position -> offset into `text`; None when the position is past the end of its line or
    of the document."""
    span = line_span(text, line)
    if span is None:
        return None
    start, end = span
    index = column_to_index(text[start:end], column, encoding)
    return None if index is None else start + index


def position_at(text: str, offset: int, encoding: str) -> tuple[int, int]:
    """Offset into `text` -> LSP (line, column)."""
    if not 0 <= offset <= len(text):
        raise ValueError(f"offset {offset} is outside a text of {len(text)} characters")
    before = text[:offset]
    breaks = list(_NEWLINE.finditer(before)) if "\r" in before else None
    if breaks is None:
        line, start = before.count("\n"), before.rfind("\n") + 1
    else:
        line, start = len(breaks), (breaks[-1].end() if breaks else 0)
        if before.endswith("\r") and text[offset:offset + 1] == "\n":  # inside a "\r\n" pair
            line, start = line - 1, (breaks[-2].end() if len(breaks) > 1 else 0)
            return line, units(text[start:offset - 1], encoding)
    return line, units(text[start:offset], encoding)


def range_at(text: str, start: int, end: int, encoding: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """Offsets [start, end) into `text` -> an LSP range ((line, column), (line, column))."""
    return position_at(text, start, encoding), position_at(text, end, encoding)
