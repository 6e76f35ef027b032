"""An index of one document's definitions and imports, for cross-file context.

Built from a full parse with queries/<lang>/definitions.scm and imports.scm, and cached per
document version: other open documents rarely change while the user types in one, so each is
indexed once per change (a 5,000-line file takes ~40 ms). `index_document` builds what is missing;
`indexed` only looks, and is what the language server's request path uses: its indexer
(server/indexer.py) builds them in the background, and a request uses the last index built for a
document even when the document has changed since (its definitions rarely move far)."""

from __future__ import annotations

import re
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from .languages import LanguageSpec, language_for, parser_for, query_for
from .parsing import utf8
from .records import Document

INDEX_CACHE_SIZE = 64
MAX_SIGNATURE_LINES = 4
MAX_LINE_CHARS = 160
MAX_INDEX_BYTES = 2_000_000  # bigger documents (generated, minified) are not indexed
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOISE = frozenset({"h", "hpp", "hh", "c", "cc", "cpp", "js", "jsx", "ts", "tsx", "mjs", "py", "rs",
                    "go", "java", "crate", "self", "super", "std", "src", "lib", "com", "org"})


@dataclass(frozen=True)
class Definition:
    name: str
    uri: str
    signature: str  # header text up to the body, at most MAX_SIGNATURE_LINES lines
    detail: str  # docstring or leading comment, else the body's first line ("" when none)
    depth: int  # 0 for top-level definitions


@dataclass
class DocIndex:
    uri: str
    language: str
    names: frozenset[str]  # what other files call this one when importing it: stem, folder
    imports: frozenset[str]  # name parts of the modules it imports
    defs: dict[str, list[Definition]] = field(default_factory=dict)
    order: list[Definition] = field(default_factory=list)  # in file order


def module_names(uri: str) -> frozenset[str]:
    parts = [p for p in uri.replace("\\", "/").split("/") if p]
    stem = parts[-1].split(".")[0] if parts else ""
    folder = parts[-2] if len(parts) > 1 else ""
    return frozenset(n for n in (stem, folder) if n and n not in ("__init__", "mod", "index", "main"))


def import_names(spec: LanguageSpec, root, data: bytes) -> frozenset[str]:
    query = query_for(spec, "imports")
    if query is None:
        return frozenset()
    import tree_sitter

    out = set()
    for node in tree_sitter.QueryCursor(query).captures(root).get("module", []):
        out.update(_IDENT.findall(data[node.start_byte:node.end_byte].decode("utf-8", "replace")))
    return frozenset(out - _NOISE)


def _line(data: bytes, start: int) -> str:
    end = data.find(b"\n", start)
    text = data[start:len(data) if end < 0 else end].decode("utf-8", "replace").strip()
    return text[:MAX_LINE_CHARS]


def _detail(d, body, data: bytes) -> str:
    prev = d.prev_named_sibling
    if d.parent is not None and d.parent.type == "decorated_definition":
        prev = d.parent.prev_named_sibling
    if prev is not None and "comment" in prev.type and prev.end_point[0] + 1 >= d.start_point[0]:
        return _line(data, prev.start_byte)
    if body is None:
        return ""
    kids = [c for c in body.named_children if "comment" not in c.type]
    if not kids:
        return ""
    first = kids[0]
    if first.type == "expression_statement" and first.named_child_count == 1 \
            and first.named_children[0].type == "string":  # a docstring: its first line
        lines = [s.strip() for s in data[first.start_byte:first.end_byte].decode("utf-8", "replace")
                 .strip("\"' \n").splitlines() if s.strip()]
        return '"""' + lines[0][:MAX_LINE_CHARS] + '"""' if lines else ""
    return _line(data, first.start_byte)


def _signature(d, body, data: bytes) -> str:
    end = body.start_byte if body is not None else d.end_byte
    lines = data[d.start_byte:end].decode("utf-8", "replace").rstrip().splitlines()
    col = d.start_point[1]
    out = [lines[0][:MAX_LINE_CHARS]] if lines else []
    for line in lines[1:MAX_SIGNATURE_LINES]:
        cut = len(line) - len(line.lstrip())
        out.append(line[min(cut, col):][:MAX_LINE_CHARS].rstrip())
    if len(lines) > MAX_SIGNATURE_LINES:
        out.append("...")
    return "\n".join(out)


def build_index(doc: Document, spec: LanguageSpec) -> DocIndex | None:
    parser, query = parser_for(spec), query_for(spec, "definitions")
    data = utf8(doc.text)
    if parser is None or query is None or len(data) > MAX_INDEX_BYTES:
        return None
    import tree_sitter

    root = parser.parse(data).root_node
    index = DocIndex(doc.uri, spec.name, module_names(doc.uri), import_names(spec, root, data))
    seen = set()
    for _, caps in tree_sitter.QueryCursor(query).matches(root):
        d, name = caps["definition"][0], caps["name"][0]
        if d.start_byte in seen:
            continue
        seen.add(d.start_byte)
        body = caps["body"][0] if caps.get("body") else None
        text = data[name.start_byte:name.end_byte].decode("utf-8", "replace")
        text = re.split(r"::|\.", text)[-1].lstrip("~")
        depth, p = 0, d.parent
        while p is not None and p.parent is not None:
            depth += p.type not in ("decorated_definition", "export_statement", "expression_statement")
            p = p.parent
        item = Definition(text, doc.uri, _signature(d, body, data), _detail(d, body, data), depth)
        index.defs.setdefault(text, []).append(item)
        index.order.append(item)
    index.order.sort(key=lambda x: x.depth)
    return index


def _key(doc: Document) -> tuple:
    return doc.version, len(doc.text), hash(doc.text)  # str caches its hash: O(1) after the first


class _IndexCache:
    def __init__(self, size: int = INDEX_CACHE_SIZE):
        self.size, self.items, self.lock = size, OrderedDict(), threading.Lock()

    def get(self, doc: Document) -> DocIndex | None:
        spec = language_for(doc.language_id, doc.uri)
        if spec is None:
            return None
        with self.lock:
            hit = self.items.get(doc.uri)
            if hit is not None and hit[0] == _key(doc):
                self.items.move_to_end(doc.uri)
                return hit[1]
        return self.put(doc, build_index(doc, spec))

    def put(self, doc: Document, index: DocIndex | None) -> DocIndex | None:
        with self.lock:
            self.items[doc.uri] = (_key(doc), index)
            while len(self.items) > self.size:
                self.items.popitem(last=False)
        return index

    def latest(self, uri: str) -> DocIndex | None:
        with self.lock:
            hit = self.items.get(uri)
        return None if hit is None else hit[1]

    def is_current(self, doc: Document) -> bool:
        with self.lock:
            hit = self.items.get(doc.uri)
        return hit is not None and hit[0] == _key(doc)


INDEXES = _IndexCache()


def index_document(doc: Document) -> DocIndex | None:
    """The (cached) index of a document, built when missing or stale; None for unknown languages
    or huge documents."""
    return INDEXES.get(doc)


def indexed(doc: Document) -> DocIndex | None:
    """The last index built for this document (maybe of an older version), or None: never parses."""
    return INDEXES.latest(doc.uri)
