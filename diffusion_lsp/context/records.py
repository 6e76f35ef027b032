"""The boundary between the language server and the context/post-processing modules.

Offsets are Python string indices (code points) into a document's text; the server converts LSP
positions (UTF-16 or UTF-8 code units) to offsets before calling in here."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


@dataclass
class Document:
    uri: str
    text: str
    language_id: str  # the editor's languageId: "python", "javascript", "typescriptreact", "rust", ...
    version: int = 0


@dataclass
class EditSnippet:
    """A recently edited region of some open document, offered to the model as extra context."""

    uri: str
    text: str


class SpanKind(str, Enum):
    REST_OF_LINE = "rest-of-line"  # cursor inside a line that already has text after it
    LINE = "line"  # complete the current line only
    BLOCK = "block"  # a multi-line block: empty function body, after a block opener, ...


@dataclass
class ContextBudget:
    prefix_tokens: int = 384
    suffix_tokens: int = 128
    cross_file_tokens: int = 128  # definitions from other open documents and recent edits

    @classmethod
    def split(cls, total: int) -> ContextBudget:
        """`total` tokens: 1/8 cross-file, 1/4 suffix, the rest prefix."""
        cross, suffix = total // 8, total // 4
        return cls(prefix_tokens=total - cross - suffix, suffix_tokens=suffix, cross_file_tokens=cross)


@dataclass
class CompletionContext:
    prefix: str  # everything the model sees before the canvas (cross-file context first)
    suffix: str  # everything the model sees after it
    kind: SpanKind
    max_tokens: int  # canvas size for this span kind
    language: str | None  # canonical language name ("python", "javascript", ...) or None if unknown
    offset: int  # cursor offset in the document
    line_suffix: str  # the rest of the current line after the cursor
    indent: str  # indentation of the cursor's line
    extras: dict = field(default_factory=dict)  # diagnostics for logs and tests
    scope_indent: str = ""  # BLOCK: lines of the fill must be indented at least this much
    document: Document | None = None  # the document gather() read; postprocess checks syntax on it
    parse_window: tuple[int, int] | None = None  # (start, end) offsets parsed for the syntax check

