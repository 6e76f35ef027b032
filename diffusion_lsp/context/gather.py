"""gather(): everything the model needs for one completion, from the document and the editor state.

Cost is bounded by the budget, not the file: lines are taken outwards from the cursor and counted
as they are kept, only that window is parsed (parsing.py says why), and other documents are
indexed once per version (index.py).
Units are found by queries/<lang>/units.scm."""

from __future__ import annotations

import time
from typing import Callable, Iterable, Mapping

from .crossfile import cross_file
from .cutting import heuristic_unit_starts, memoized, snap_start, take_prefix, take_suffix
from .index import DocIndex, index_document
from .languages import LanguageSpec, language_for, query_for
from .parsing import Window, parse_bounds, parse_window
from .spans import decide_span
from .tokens import approx_tokens
from .records import CompletionContext, ContextBudget, Document, EditSnippet

NEAR_LINES_BEFORE = 12  # identifiers from these lines above the cursor are looked up elsewhere
NEAR_LINES_AFTER = 3


def tree_unit_starts(spec: LanguageSpec, win: Window, start: int, stop: int) -> list[int]:
    """Line starts in [start, stop] where a unit (the language's units query) begins its line."""
    query = query_for(spec, "units")
    if query is None:
        return []
    import tree_sitter

    cursor = tree_sitter.QueryCursor(query)
    cursor.set_byte_range(win.byte_of(start), win.byte_of(stop) + 1)
    text = win.text
    out = set()
    for node in cursor.captures(win.tree.root_node).get("unit", []):
        at = win.offset_of(node.start_byte)
        line_start = text.rfind("\n", 0, at - win.start) + 1 + win.start
        if start <= line_start <= stop and not text[line_start - win.start:at - win.start].strip():
            out.add(line_start)
    return sorted(out)


def _last_lines(s: str, n: int) -> str:
    pos = len(s)
    for _ in range(n):
        pos = s.rfind("\n", 0, pos)
        if pos < 0:
            return s
    return s[pos + 1:]


def _first_lines(s: str, n: int) -> str:
    pos = -1
    for _ in range(n):
        pos = s.find("\n", pos + 1)
        if pos < 0:
            return s
    return s[:pos]


def gather(doc: Document, offset: int, open_docs: Iterable[Document] | Mapping[str, Document] = (),
           recent_edits: Iterable[EditSnippet] = (), budget: ContextBudget | None = None,
           count_tokens: Callable[[str], int] = approx_tokens,
           index_of: Callable[[Document], DocIndex | None] = index_document) -> CompletionContext:
    """Context for a completion at `offset` (a str index into doc.text; clamped to the text).

    open_docs may include `doc` itself (it is skipped); recent_edits are oldest first (a deque
    appended to as edits happen): the newest get the cross-file budget first. `index_of` gives
    the other documents' definitions (crossfile.cross_file)."""
    t0 = time.perf_counter()
    count_tokens = memoized(count_tokens)
    budget = budget or ContextBudget()
    text = doc.text
    clamped = min(max(offset, 0), len(text))
    spec = language_for(doc.language_id, doc.uri)
    start, prefix_tokens = take_prefix(text, clamped, budget.prefix_tokens, count_tokens)
    end, suffix_tokens = take_suffix(text, clamped, budget.suffix_tokens, count_tokens)
    win = None if spec is None else parse_window(spec, text, *parse_bounds(text, start, end, clamped, spec),
                                                 key=doc.uri)
    span = decide_span(text, clamped, spec, win)

    line_start = text.rfind("\n", 0, clamped) + 1
    if start == line_start:
        units = []
    elif win is not None:
        units = tree_unit_starts(spec, win, win.start, line_start)
    else:
        units = heuristic_unit_starts(text, start, line_start)
    code_start = snap_start(text, start, clamped, units)
    if code_start != start:  # the dropped lines were counted one by one: memo hits
        dropped = sum(count_tokens(line + "\n") for line in text[start:code_start - 1].split("\n"))
        prefix_tokens = max(prefix_tokens - dropped, 0)
    code, suffix = text[code_start:clamped], text[clamped:end]

    if isinstance(open_docs, Mapping):
        open_docs = open_docs.values()
    xf = cross_file(doc, spec, open_docs, recent_edits, _last_lines(code, NEAR_LINES_BEFORE),
                    _first_lines(suffix, NEAR_LINES_AFTER), code + suffix, budget.cross_file_tokens,
                    count_tokens, index_of)
    extras = {
        "rule": span.rule, "prefix_tokens": prefix_tokens, "suffix_tokens": suffix_tokens,
        "cross_file_tokens": xf.tokens, "cross_file": xf.items, "prefix_start": code_start,
        "suffix_end": end, "snapped": code_start != start, "parsed": win is not None,
        "clamped": clamped != offset, "ms": (time.perf_counter() - t0) * 1e3,
    }
    return CompletionContext(
        prefix=xf.text + code, suffix=suffix, kind=span.kind, max_tokens=span.max_tokens,
        language=spec.name if spec else None, offset=clamped, line_suffix=span.line_suffix,
        indent=span.indent, extras=extras, scope_indent=span.scope_indent, document=doc,
        parse_window=(win.start, win.start + len(win.text)) if win is not None else None)
