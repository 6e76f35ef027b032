"""Cross-file context: definitions of identifiers used near the cursor, found in other open
documents, and recently edited snippets, rendered as comments in the document's language:

    # file: utils.py
    # def helper(x: int) -> int:
    #     \"\"\"Double x.\"\"\"

Documents the current one imports come first, then the ones they import, then any other open
document. Each rendered block is counted once; blocks are added, most relevant first, while the
budget lasts."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable, Iterable

from .index import MAX_LINE_CHARS, Definition, DocIndex, import_names, index_document
from .languages import LanguageSpec
from .parsing import parse_window
from .records import Document, EditSnippet

MAX_IDENTIFIERS = 24  # identifiers near the cursor that are looked up
MAX_PER_NAME = 2  # definitions shown for one identifier
MAX_PER_MODULE = 6  # definitions shown for an identifier naming an open module (`utils.`)
MAX_EDIT_LINES = 8
IMPORT_HEAD_CHARS = 8192  # imports are read from the start of the current document only
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_LOCAL_DEF = re.compile(r"\b(?:def|class|fn|func|function|struct|enum|trait|interface|type)\s+"
                        r"([A-Za-z_][A-Za-z0-9_]*)")


@dataclass
class CrossFile:
    text: str = ""  # comment lines, each ending in a newline
    tokens: int = 0
    items: list[str] = field(default_factory=list)  # what was included, for logs and tests


def near_identifiers(before: str, after: str) -> list[str]:
    """Identifiers around the cursor, nearest first: backwards through `before`, then `after`."""
    out: dict[str, None] = {}
    for name in reversed(_IDENT.findall(before)):
        out.setdefault(name)
    for name in _IDENT.findall(after):
        out.setdefault(name)
    return [n for n in out if len(n) > 1][:MAX_IDENTIFIERS]


def file_label(uri: str) -> str:
    return uri.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1]


_IMPORTS: dict[tuple[str, str], frozenset[str]] = {}  # (language, head of a document) -> imports


def _current_imports(doc: Document, spec: LanguageSpec | None) -> frozenset[str]:
    if spec is None:
        return frozenset()
    end = doc.text.rfind("\n", 0, IMPORT_HEAD_CHARS) if len(doc.text) > IMPORT_HEAD_CHARS else len(doc.text)
    head = doc.text[:max(end, 0)]
    found = _IMPORTS.get((spec.name, head))
    if found is None:
        win = parse_window(spec, head, 0, len(head), key=doc.uri + "#head")
        found = frozenset() if win is None else import_names(spec, win.tree.root_node, win.data)
        if len(_IMPORTS) >= 64:
            _IMPORTS.clear()
        _IMPORTS[(spec.name, head)] = found
    return found


def _ranked(doc: Document, spec, others: list[DocIndex]) -> list[DocIndex]:
    direct_names = _current_imports(doc, spec)
    direct = {i.uri for i in others if i.names & direct_names}
    second_names = frozenset().union(*(i.imports for i in others if i.uri in direct))
    second = {i.uri for i in others if i.uri not in direct and i.names & second_names}
    return sorted(others, key=lambda i: 0 if i.uri in direct else 1 if i.uri in second else 2)


def _render_def(d: Definition, c: str) -> str:
    lines = [f"{c} {line}" for line in d.signature.splitlines()]
    if d.detail:
        lines.append(f"{c}     {d.detail}")
    return "\n".join(lines) + "\n"


def _render_edit(e: EditSnippet, c: str) -> str:
    lines = e.text.strip("\n").split("\n", MAX_EDIT_LINES)[:MAX_EDIT_LINES]  # never split a whole file
    body = "\n".join(f"{c} {line[:MAX_LINE_CHARS].rstrip()}".rstrip() for line in lines)
    return f"{c} recent edit in {file_label(e.uri)}:\n{body}\n"


def cross_file(doc: Document, spec: LanguageSpec | None, open_docs: Iterable[Document],
               recent_edits: Iterable[EditSnippet], near_before: str, near_after: str, kept: str,
               budget: int, count_tokens: Callable[[str], int],
               index_of: Callable[[Document], DocIndex | None] = index_document) -> CrossFile:
    """Render cross-file context for `doc` within `budget` tokens. `kept` is the prefix and suffix
    text the model already sees: definitions and edits found there are not repeated. `index_of`
    gives another document's index: built on demand by default, `index.indexed` (never parses)
    on the language server's request path."""
    out = CrossFile()
    if budget <= 0:
        return out
    c = spec.comment if spec else "#"
    others = [i for i in (index_of(d) for d in open_docs if d.uri != doc.uri) if i is not None]
    others = _ranked(doc, spec, others)
    local = set(_LOCAL_DEF.findall(kept))
    blocks: dict[str, list[str]] = {}  # file label -> rendered definitions, in order of first use
    used: set[tuple[str, str]] = set()

    def add(label: str, block: str, item: str) -> bool:
        header = f"{c} file: {label}\n" if label not in blocks else ""
        n = count_tokens(header + block)
        if out.tokens + n > budget:
            return False
        blocks.setdefault(label, []).append(block)
        out.tokens += n
        out.items.append(item)
        return True

    for name in near_identifiers(near_before, near_after):
        if name in local:
            continue
        found = [d for i in others for d in i.defs.get(name, ())][:MAX_PER_NAME]
        for i in others:
            if name in i.names:
                found += [d for d in i.order if d.depth == 0][:MAX_PER_MODULE]
        for d in found:
            if (d.uri, d.signature) not in used and d.signature not in kept:
                used.add((d.uri, d.signature))
                add(file_label(d.uri), _render_def(d, c), f"{file_label(d.uri)}:{d.name}")
    edits = []
    for e in reversed(list(recent_edits)):  # newest first
        snippet = e.text.strip()
        if not snippet or (e.uri == doc.uri and snippet in kept):
            continue
        block = _render_edit(e, c)
        n = count_tokens(block)
        if out.tokens + n > budget:
            break  # newest first: an older edit does not jump the queue (nor is it tokenized for nothing)
        edits.append(block)
        out.tokens += n
        out.items.append(f"edit:{file_label(e.uri)}")
    parts = [f"{c} file: {label}\n" + "".join(bs) for label, bs in blocks.items()] + edits
    out.text = "".join(parts)
    return out
