"""The server's copy of each open document, kept equal to the editor's.

pygls' `TextDocument` splits lines with `str.splitlines`, which also ends a line at \\f, \\v,
\\x1c-\\x1e, \\x85, U+2028 and U+2029, while the LSP ends lines only at \\n, \\r\\n and \\r. After the
first edit below such a character pygls splices at the wrong place and its copy silently drifts
from the editor's: one form feed, common in CPython and GNU-style sources, is enough. Here every
change is applied with the LSP's line ends in the negotiated position encoding (positions.py),
by scanning to the edited line (from the last edit's line when it can) and splicing the string,
never splitting the whole text into lines as pygls does for every keystroke.

pygls 2 makes its documents in `Workspace._create_text_document`; `SyncedWorkspace` overrides that
factory, and the JSON-RPC protocol (jsonrpc.py) puts a `SyncedWorkspace` in place of pygls' own."""

from __future__ import annotations

import logging
import re
from urllib.parse import unquote

from lsprotocol import types
from pygls.workspace import TextDocument, Workspace

from . import positions

log = logging.getLogger(__name__)
_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # one line with its break, the LSP's way


def _clamped(text: str, span: tuple[int, int] | None, line: int, column: int, encoding: str) -> tuple[int, bool]:
    """Offset of (line, column), given `span`, the line's positions.line_span; clamped into the
    text as vscode-languageserver-textdocument's offsetAt does: a column past the end of its line
    is the line's end (the LSP spec says so for Position.character), a line past the last is the
    end of the text, a negative line or column is the start. Also says whether it clamped."""
    if line < 0:
        return 0, True
    if span is None:
        return len(text), True
    start, end = span
    index = positions.column_to_index(text[start:end], column, encoding)
    if index is None:
        return (start if column < 0 else end), True
    return start + index, False


def line_span_near(text: str, line: int, near: tuple[int, int] = (0, 0)) -> tuple[int, int] | None:
    """positions.line_span(text, line), scanning from `near`: a line at or above `line` and the
    offset where it starts. Typing edits the same few lines over and over, so starting at the last
    edit's line makes a keystroke's scan a few lines long instead of the whole prefix. Measured per
    keystroke at line 4,000 of 5,000 (this machine, 2 cores): pygls 0.7 ms; scanning from the top
    0.5 ms with "\\n" breaks, 1.6 ms with "\\r\\n" (positions.line_span's regex path); from the
    last edit's line 0.07 ms (a copy of the text's tail, then the splice)."""
    near_line, near_start = near
    if line < 0 or line < near_line or near_line <= 0:
        return positions.line_span(text, line)
    span = positions.line_span(text[near_start:], line - near_line)
    return None if span is None else (near_start + span[0], near_start + span[1])


def edit_offsets(text: str, rng: types.Range, encoding: str,
                 near: tuple[int, int] = (0, 0)) -> tuple[int, int, tuple[int, int]]:
    """(start, end, anchor): the offsets of an edit's range in `text`, and (line, offset) of the
    start of its first line, a `near` for the next edit (the text before it does not change).

    A range past the end of the text or of a line, or inverted, is clamped and put in order, with
    one log line, rather than refused: the editor has already applied the edit to its own buffer,
    so refusing it leaves the two copies different for the rest of the session, while clamping
    does what VS Code and vscode-languageserver-textdocument (the reference most clients test
    against) do with the same range, so the copies most likely still agree."""
    s, e = rng.start, rng.end
    start_span = line_span_near(text, s.line, near)
    end_span = start_span if e.line == s.line else line_span_near(text, e.line, near)
    start, clamped_start = _clamped(text, start_span, s.line, s.character, encoding)
    end, clamped_end = _clamped(text, end_span, e.line, e.character, encoding)
    if clamped_start or clamped_end:
        log.warning("an edit's range %d:%d-%d:%d lies outside the document; clamped into it",
                    s.line, s.character, e.line, e.character)
    if end < start:
        log.warning("an edit's range %d:%d-%d:%d is inverted; applied in order", s.line, s.character, e.line,
                    e.character)
        start, end = end, start
    anchor = (s.line, start_span[0]) if start_span is not None and start >= start_span[0] else (0, 0)
    return start, end, anchor


def apply_change(text: str, change: types.TextDocumentContentChangeEvent, encoding: str,
                 near: tuple[int, int] = (0, 0)) -> tuple[str, tuple[int, int]]:
    """`text` after one didChange content change (a partial one replaces its range, a whole one
    replaces everything), and a `near` for the next change (see edit_offsets)."""
    if not isinstance(change, types.TextDocumentContentChangePartial):
        return change.text, (0, 0)
    start, end, anchor = edit_offsets(text, change.range, encoding, near)
    new = text[:start] + change.text + text[end:]
    offset = anchor[1]  # still a line start, unless the edit put a "\n" right after the "\r" before it
    if offset > 0 and new[offset - 1] == "\r" and new.startswith("\n", offset):
        anchor = (0, 0)
    return new, anchor


def encoding_name(encoding) -> str:
    """"utf-8" / "utf-16" / "utf-32" from a PositionEncodingKind or a plain string."""
    return str(getattr(encoding, "value", encoding) or positions.UTF16)


class SyncedDocument(TextDocument):
    """pygls' TextDocument with the LSP's line ends: changes go through `apply_change`, and `lines`
    (used by pygls' own helpers such as offset_at_position and word_at_position) breaks where
    the positions do. A partial change is applied as one whatever sync kind was advertised: its
    range says what the editor did (pygls would replace the whole text with the fragment)."""

    _near: tuple[str, tuple[int, int]] | None = None  # (the text it belongs to, a `near` in it)

    def apply_change(self, change: types.TextDocumentContentChangeEvent) -> None:
        text = self.source
        near = self._near[1] if self._near is not None and self._near[0] is text else (0, 0)
        self._source, near = apply_change(text, change, encoding_name(self.position_codec.encoding), near)
        self._near = (self._source, near)

    @property
    def lines(self) -> tuple[str, ...]:
        return tuple(_LINE.findall(self.source))


class SyncedWorkspace(Workspace):
    """pygls' Workspace holding SyncedDocuments; a change to a document that is not open is logged
    and dropped (pygls raises KeyError, which reached the user as an "Error in server" window)."""

    @classmethod
    def like(cls, workspace: Workspace) -> SyncedWorkspace:
        """A SyncedWorkspace with `workspace`'s root, folders, sync kind and position encoding."""
        return cls(workspace.root_uri, workspace._sync_kind, list(workspace.folders.values()),
                   workspace.position_encoding)

    def _create_text_document(self, doc_uri: str, source: str | None = None, version: int | None = None,
                              language_id: str | None = None) -> SyncedDocument:
        return SyncedDocument(doc_uri, source=source, version=version, language_id=language_id,
                              sync_kind=self._sync_kind, position_codec=self.position_codec)

    def stale(self, text_doc: types.VersionedTextDocumentIdentifier) -> str | None:
        """Why a change to `text_doc` must not be applied: its version is not newer than the
        document's (LSP versions increase with every change); None when it may be."""
        doc = self.text_documents.get(unquote(text_doc.uri))
        if doc is None or doc.version is None or text_doc.version is None or text_doc.version > doc.version:
            return None
        return f"{text_doc.uri} is at version {doc.version}; a change to version {text_doc.version} is not newer"

    def update_text_document(self, text_doc: types.VersionedTextDocumentIdentifier,
                             change: types.TextDocumentContentChangeEvent) -> None:
        doc = self.text_documents.get(unquote(text_doc.uri))
        if doc is None:
            log.warning("didChange for %s, which is not open: ignored", text_doc.uri)
            return
        doc.apply_change(change)
        doc.version = text_doc.version
