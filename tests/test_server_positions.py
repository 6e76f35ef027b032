"""LSP positions <-> offsets for UTF-8, UTF-16 and UTF-32, on non-ASCII lines and every line break."""

from __future__ import annotations

import random

import pytest

from diffusion_lsp.server.positions import (UTF8, UTF16, UTF32, choose_encoding, column_to_index, index_to_column,
                                            line_span, offset_at, position_at, units)

LINE = "a😀é b"  # 😀: 4 UTF-8 units, 2 UTF-16 units; é: 2 UTF-8 units, 1 UTF-16 unit


@pytest.mark.parametrize("offered, chosen", [
    (None, UTF16), ([], UTF16), (["utf-16"], UTF16), (["utf-16", "utf-8"], UTF8), (["utf-32"], UTF32),
    (["utf-32", "utf-16"], UTF32), (["latin-1"], UTF16),
])
def test_utf8_whenever_offered_else_utf16(offered, chosen):
    assert choose_encoding(offered) == chosen


def test_units_per_encoding():
    assert [units(LINE, e) for e in (UTF8, UTF16, UTF32)] == [9, 6, 5]
    with pytest.raises(ValueError, match="utf-7"):
        units(LINE, "utf-7")


@pytest.mark.parametrize("encoding, columns", [
    (UTF16, [0, 1, 1, 2, 3, 4, 5, None]),  # column 2 is inside the surrogate pair: snaps to 😀
    (UTF8, [0, 1, 1, 1, 1, 2, 2, 3, 4, 5, None]),
    (UTF32, [0, 1, 2, 3, 4, 5, None]),
])
def test_column_to_index(encoding, columns):
    assert [column_to_index(LINE, c, encoding) for c in range(len(columns))] == columns
    assert column_to_index(LINE, -1, encoding) is None


@pytest.mark.parametrize("encoding", [UTF8, UTF16, UTF32])
def test_index_to_column_inverts_column_to_index(encoding):
    for i in range(len(LINE) + 1):
        assert column_to_index(LINE, index_to_column(LINE, i, encoding), encoding) == i
    with pytest.raises(ValueError):
        index_to_column(LINE, len(LINE) + 1, encoding)


@pytest.mark.parametrize("text, spans", [
    ("ab\ncd", [(0, 2), (3, 5), None]),
    ("ab\n", [(0, 2), (3, 3), None]),  # after a final line break: one more, empty, line
    ("ab\r\ncd\rx", [(0, 2), (4, 6), (7, 8), None]),
    ("a\x0cb\u2028c\n", [(0, 5), (6, 6), None]),  # form feed and U+2028 do not end LSP lines
    ("", [(0, 0), None]),
])
def test_line_span(text, spans):
    assert [line_span(text, n) for n in range(len(spans))] == spans
    assert line_span(text, -1) is None


@pytest.mark.parametrize("encoding", [UTF8, UTF16, UTF32])
def test_offsets_round_trip_on_mixed_text_and_line_breaks(encoding):
    rng = random.Random(0)
    alphabet = ["a", "é", "😀", "中", " ", "\n", "\r\n", "\r", "\t"]
    for _ in range(30):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randrange(0, 40)))
        for offset in range(len(text) + 1):
            if 0 < offset < len(text) and text[offset - 1:offset + 1] == "\r\n":
                continue  # between \r and \n is not a position
            line, column = position_at(text, offset, encoding)
            assert offset_at(text, line, column, encoding) == offset, (text, offset)


def test_past_the_end_is_none():
    text = f"x\n{LINE}\n"
    assert offset_at(text, 1, 6, UTF16) == 2 + len(LINE)
    assert offset_at(text, 1, 7, UTF16) is None
    assert offset_at(text, 1, 9, UTF8) == 2 + len(LINE) and offset_at(text, 1, 10, UTF8) is None
    assert offset_at(text, 3, 0, UTF16) is None


def test_agrees_with_pygls_on_lf_text():
    from lsprotocol import types
    from pygls.workspace import PositionCodec, TextDocument

    text = f"def f():\n    return '{LINE}'\n\n中文 = 1\n"
    for encoding in (UTF8, UTF16, UTF32):
        doc = TextDocument("file:///x.py", text, position_codec=PositionCodec(encoding))
        for offset in range(len(text)):  # (pygls misplaces the empty line after the final break)
            line, column = position_at(text, offset, encoding)
            assert doc.offset_at_position(types.Position(line, column)) == offset


def test_line_span_matches_a_plain_reading_of_the_lsp_line_ends():
    import re

    breaks = re.compile(r"\r\n|\r|\n")

    def reference(text, line):
        starts = [0] + [m.end() for m in breaks.finditer(text)]
        ends = [m.start() for m in breaks.finditer(text)] + [len(text)]
        return (starts[line], ends[line]) if 0 <= line < len(starts) else None

    rng = random.Random(1)
    pieces = ["a", "b", "\r", "\n", "\r\n", "\f", "\u2028", "é"]
    for _ in range(2000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(0, 40)))
        for line in range(-1, 30):
            assert line_span(text, line) == reference(text, line), (text, line)
    crlf, mixed = "x = 1\r\n" * 130_000, "x\r" + "y = 2\r\n" * 70_000  # past re's repeat limit
    for text in (crlf, mixed):
        for line in (0, 1, 59_999, 60_000, 60_001, 69_999, 70_000, 70_001, 129_999, 130_000, 130_001):
            assert line_span(text, line) == reference(text, line), line
