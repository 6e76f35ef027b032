"""What to complete at the cursor: the rest of the line, one line, or a multi-line block.

Line rules decide most cases and work for any language, even mid-edit when the parse is broken:
text after the cursor that is more than auto-closed brackets means REST_OF_LINE; a cursor right
after a block opener (`:` in Python, `{` elsewhere), or on a blank line below one, whose block has
nothing in it yet means BLOCK; everything else is LINE. With a parsed window, an otherwise empty
body found by queries/<lang>/bodies.scm (say one holding only a docstring) also means BLOCK."""

from __future__ import annotations

from dataclasses import dataclass

from .languages import LanguageSpec, query_for
from .lines import (indent_at, indent_unit, is_trailer, line_bounds, next_nonblank, prev_nonblank,
                    strip_comment, unclosed_brackets, width)
from .parsing import Window
from .records import SpanKind

# Canvas size (fill tokens) per span kind: a rest-of-line fill is short, a block needs room.
CANVAS_TOKENS = {SpanKind.REST_OF_LINE: 16, SpanKind.LINE: 32, SpanKind.BLOCK: 96}
MAX_LINE_SUFFIX = 4096  # a longer rest of line is kept only up to here


@dataclass
class Span:
    kind: SpanKind
    max_tokens: int
    indent: str  # leading whitespace of the cursor's line
    scope_indent: str  # BLOCK: the fill's lines must be indented at least this much
    line_prefix: str  # the current line up to the cursor
    line_suffix: str  # the current line after the cursor
    rule: str  # which rule decided, for logs and tests


def _markers(spec: LanguageSpec | None) -> tuple[str, ...]:
    return (spec.comment,) if spec else ("#", "//")


def _openers(spec: LanguageSpec | None) -> tuple[str, ...]:
    return spec.block_openers if spec else (":", "{")


def _empty_after(text: str, line_end: int, line_suffix: str, header_indent: str, spec) -> bool:
    """Nothing is in the block yet: it closes on the cursor's line, or the next non-blank line is
    back at the header's indentation (or a closing bracket), or the file ends."""
    if line_suffix.strip():
        return is_trailer(line_suffix)
    nxt = next_nonblank(text, line_end)
    if nxt is None:
        return True
    line = text[nxt[0]:nxt[1]]
    return width(indent_at(text, nxt[0])) <= width(header_indent) or (
        (spec is None or not spec.indent_blocks) and line.lstrip()[:1] in ")]}")


def _empty_body(spec: LanguageSpec, win: Window, offset: int, cursor_col: int) -> str | None:
    """Indentation of the header of the innermost empty body around the cursor, else None."""
    query = query_for(spec, "bodies")
    if query is None:
        return None
    import tree_sitter

    b = win.byte_of(offset)
    cursor = tree_sitter.QueryCursor(query)
    last = len(win.data[:b].rstrip())  # a Python block ends at its last statement, above the cursor
    cursor.set_byte_range(max(last - 1, 0), min(b + 1, len(win.data)))
    best = None
    for node in cursor.captures(win.tree.root_node).get("body", []):
        if node.start_byte >= b:
            continue
        inside = b < node.end_byte or (  # Python: a block ends before the blank lines below it
            spec.indent_blocks and not win.data[node.end_byte:b].strip()
            and cursor_col >= node.start_point[1])
        if inside and (best is None or node.start_byte > best.start_byte):
            best = node
    if best is None or not _is_empty(best):
        return None
    header = best.parent or best
    return indent_at(win.text, win.text.rfind("\n", 0, win.offset_of(header.start_byte) - win.start) + 1)


def _is_empty(body) -> bool:
    kids = [c for c in body.named_children if "comment" not in c.type]
    if kids and kids[0].type == "expression_statement" and kids[0].named_child_count == 1 \
            and kids[0].named_children[0].type == "string":
        kids = kids[1:]  # a Python docstring alone leaves the body to write
    return not kids and not body.has_error


def decide_span(text: str, offset: int, spec: LanguageSpec | None, win: Window | None = None) -> Span:
    start, end = line_bounds(text, offset)
    line_prefix, line_suffix = text[start:offset], text[offset:min(end, offset + MAX_LINE_SUFFIX)]
    indent = indent_at(text, start)
    header = None  # indentation of the block's header line when BLOCK

    def span(kind: SpanKind, rule: str) -> Span:
        scope = ""
        if kind is SpanKind.BLOCK:
            here = line_prefix if not line_prefix.strip() else indent
            unit = indent_unit(text, start, spec.indent_unit if spec else "    ")
            scope = here if width(here) > width(header) else header + unit
        return Span(kind, CANVAS_TOKENS[kind], indent, scope, line_prefix, line_suffix, rule)

    if line_suffix.strip() and not is_trailer(line_suffix):
        return span(SpanKind.REST_OF_LINE, "text-after-cursor")
    openers = _openers(spec)
    if line_prefix.strip():
        code = strip_comment(line_prefix, _markers(spec))
        colon_inside = code.endswith(":") and unclosed_brackets(code[-MAX_LINE_SUFFIX:]) > 0  # lambda, dict
        if code.endswith(openers) and not colon_inside and _empty_after(text, end, line_suffix, indent, spec):
            header = indent
            return span(SpanKind.BLOCK, "after-opener")
        return span(SpanKind.LINE, "end-of-line")
    prev = prev_nonblank(text, start)
    if prev is not None and strip_comment(text[prev[0]:prev[1]], _markers(spec)).endswith(openers):
        header = indent_at(text, prev[0])
        if _empty_after(text, end, line_suffix, header, spec):
            return span(SpanKind.BLOCK, "below-opener")
    if win is not None and spec is not None:
        header = _empty_body(spec, win, offset, len(line_prefix.expandtabs(4)))
        if header is not None:
            return span(SpanKind.BLOCK, "empty-body")
    return span(SpanKind.LINE, "blank-line")
