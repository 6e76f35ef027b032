"""Which tree-sitter grammar a document uses, and its parsers and queries, loaded lazily and cached.

A language is known when the editor's languageId or the file's extension names it. Grammars come
from their own wheels (tree-sitter-python, ...); a missing wheel or an unknown language gives None,
and callers fall back to plain-text behaviour. Queries live in `queries/<dir>/<name>.scm`."""

from __future__ import annotations

import importlib
import logging
import threading
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LanguageSpec:
    name: str  # canonical name: "python", "javascript", "typescript", "tsx", ...
    module: str  # grammar wheel's module
    function: str  # its function returning the language pointer
    query_dir: str  # folder under queries/
    comment: str  # line-comment prefix, for cross-file context rendered as comments
    indent_blocks: bool = False  # blocks are opened by ':' and closed by dedent (Python)
    indent_unit: str = "    "  # one level of indentation when the file does not show one

    @property
    def block_openers(self) -> tuple[str, ...]:
        return (":",) if self.indent_blocks else ("{",)


_SPECS = {s.name: s for s in [
    LanguageSpec("python", "tree_sitter_python", "language", "python", "#", indent_blocks=True),
    LanguageSpec("javascript", "tree_sitter_javascript", "language", "javascript", "//"),
    LanguageSpec("typescript", "tree_sitter_typescript", "language_typescript", "typescript", "//"),
    LanguageSpec("tsx", "tree_sitter_typescript", "language_tsx", "typescript", "//"),
    LanguageSpec("rust", "tree_sitter_rust", "language", "rust", "//"),
    LanguageSpec("go", "tree_sitter_go", "language", "go", "//", indent_unit="\t"),
    LanguageSpec("java", "tree_sitter_java", "language", "java", "//"),
    LanguageSpec("c", "tree_sitter_c", "language", "c", "//"),
    LanguageSpec("cpp", "tree_sitter_cpp", "language", "cpp", "//"),
]}

LANGUAGE_IDS = {  # LSP languageId -> canonical name
    "python": "python", "javascript": "javascript", "javascriptreact": "javascript",
    "typescript": "typescript", "typescriptreact": "tsx", "rust": "rust", "go": "go",
    "java": "java", "c": "c", "cpp": "cpp", "tsx": "tsx", "jsx": "javascript",
}

EXTENSIONS = {
    ".py": "python", ".pyi": "python", ".js": "javascript", ".mjs": "javascript",
    ".cjs": "javascript", ".jsx": "javascript", ".ts": "typescript", ".mts": "typescript",
    ".cts": "typescript", ".tsx": "tsx", ".rs": "rust", ".go": "go", ".java": "java",
    ".c": "c", ".h": "c", ".cc": "cpp", ".cpp": "cpp", ".cxx": "cpp", ".hpp": "cpp",
    ".hh": "cpp", ".hxx": "cpp",
}

QUERY_NAMES = ("definitions", "imports", "bodies", "units")


def language_for(language_id: str | None, uri: str | None = None) -> LanguageSpec | None:
    """The grammar for a languageId (or canonical name), else for the uri's extension, else None."""
    name = LANGUAGE_IDS.get((language_id or "").lower())
    if name is None and uri:
        tail = uri.rsplit("/", 1)[-1]
        dot = tail.rfind(".")
        name = EXTENSIONS.get(tail[dot:].lower()) if dot > 0 else None
    return _SPECS.get(name) if name else None


def all_languages() -> list[LanguageSpec]:
    return list(_SPECS.values())


@lru_cache(maxsize=None)
def grammar(spec: LanguageSpec):
    """The tree_sitter.Language, or None when its wheel (or tree-sitter itself) is not installed."""
    try:
        import tree_sitter

        return tree_sitter.Language(getattr(importlib.import_module(spec.module), spec.function)())
    except (ImportError, AttributeError, ValueError) as e:
        log.warning("no tree-sitter grammar for %s (%s); using plain-text context", spec.name, e)
        return None


class _Parsers(threading.local):
    """tree-sitter parsers are not thread-safe: one per language per thread."""

    def __init__(self):
        self.by_name = {}


_PARSERS = _Parsers()


def parser_for(spec: LanguageSpec | None):
    if spec is None:
        return None
    parser = _PARSERS.by_name.get(spec.name)
    if parser is None:
        lang = grammar(spec)
        if lang is None:
            return None
        import tree_sitter

        parser = _PARSERS.by_name[spec.name] = tree_sitter.Parser(lang)
    return parser


def query_source(spec: LanguageSpec, name: str) -> str | None:
    path = resources.files("diffusion_lsp.context") / "queries" / spec.query_dir / f"{name}.scm"
    return path.read_text(encoding="utf-8") if path.is_file() else None


@lru_cache(maxsize=None)
def query_for(spec: LanguageSpec, name: str):
    """The compiled query `name` of the language's folder of queries; None when the file or grammar is missing.
    A query that does not compile is our bug, so it raises naming the file."""
    if name not in QUERY_NAMES:
        raise ValueError(f"unknown query {name!r}; expected one of {QUERY_NAMES}")
    lang = grammar(spec)
    source = query_source(spec, name)
    if lang is None or source is None:
        return None
    import tree_sitter

    try:
        return tree_sitter.Query(lang, source)
    except (tree_sitter.QueryError, ValueError) as e:
        raise RuntimeError(f"queries/{spec.query_dir}/{name}.scm does not compile for {spec.name}: {e}")


def prepare(language_id: str, uri: str = "") -> bool:
    """Load the grammar and compile the queries of a document's language ahead of its first
    completion (a few ms, once per language). False for a language we do not know."""
    spec = language_for(language_id, uri)
    if spec is None or parser_for(spec) is None:
        return False
    for name in QUERY_NAMES:
        query_for(spec, name)
    return True
