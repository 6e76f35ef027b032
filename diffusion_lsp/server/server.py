"""The pygls server: typed handlers `(ls, params) -> result | None` that turn LSP types into the
session's plain ones and delegate: a completion to the Completer, settings and documents to the
Session. No model or context work here: the model lives in the worker process, context work in the
completer's and the indexer's threads.
The reader is jsonrpc.py's."""

from __future__ import annotations

import logging
import os
import sys
from urllib.parse import unquote, urlparse

from lsprotocol import types
from pygls.exceptions import FeatureRequestError, JsonRpcInternalError
from pygls.lsp.server import LanguageServer

from .. import __version__
from ..context.languages import prepare
from ..candidate import Candidate
from ..context.records import Document
from . import positions
from .completion import replace_range
from .instruct import METHOD as EDIT_WITH_INSTRUCTION, edit_with_instruction, parse as parse_instruct_params
from .jsonrpc import Protocol, serve_stdio, serve_tcp
from .next_edit import EditAnswer
from .session import ServeOptions, Session

NAME, VERSION = "diffusion-lsp", __version__
STATS = "diffusionLsp/stats"  # custom request: counts, latency percentiles, worker pid and state
ACCEPTED = "diffusionLsp.didAcceptCompletion"  # command on each item, run by the editor on accept
DID_SHOW = "textDocument/didShowCompletion"  # Copilot language server feedback notifications
DID_PARTIALLY_ACCEPT = "textDocument/didPartiallyAcceptCompletion"
NEXT_EDIT = "textDocument/copilotInlineEdit"  # Copilot's next-edit request (copilot-lsp, sidekick.nvim)
DID_SHOW_INLINE_EDIT = "textDocument/didShowInlineEdit"
DID_FOCUS = "textDocument/didFocus"
ACCEPTED_EDIT = "diffusionLsp.didAcceptNextEdit"  # command on each next edit, run by the editor on accept
APPLY_EDIT_TITLE = "Apply suggested edit"
MAX_OPEN_DOCS = 32  # other open documents offered to the context gatherer
_LEVELS = {"error": types.MessageType.Error, "warning": types.MessageType.Warning,
           "info": types.MessageType.Info, "debug": types.MessageType.Log}


class LspUi:
    """Session's Ui over pygls: window/showMessage, window/logMessage, $/progress."""

    def __init__(self, ls: LanguageServer):
        self.ls, self._tokens = ls, 0

    def show(self, kind: str, message: str) -> None:
        self.ls.window_show_message(types.ShowMessageParams(type=_LEVELS[kind], message=message))

    def log(self, kind: str, message: str) -> None:
        self.ls.window_log_message(types.LogMessageParams(type=_LEVELS[kind], message=message))

    async def progress_begin(self, title: str, message: str) -> object:
        window = self.ls.client_capabilities.window
        if window is None or not window.work_done_progress:
            return None
        self._tokens += 1
        token = f"diffusion-lsp/model/{self._tokens}"
        try:
            await self.ls.work_done_progress.create_async(token)
        except Exception as e:
            self.log("warning", f"no progress report: {e}")
            return None
        self.ls.work_done_progress.begin(token, types.WorkDoneProgressBegin(title=title, message=message))
        return token

    def progress_end(self, token: object, message: str) -> None:
        if token is not None:
            self.ls.work_done_progress.end(token, types.WorkDoneProgressEnd(message=message))


class DiffusionServer(LanguageServer):
    def __init__(self, options: ServeOptions):
        super().__init__(NAME, VERSION, protocol_cls=Protocol,
                         text_document_sync_kind=types.TextDocumentSyncKind.Incremental)
        self.session = Session(options, LspUi(self), self.document)

    def start_io(self, stdin=None, stdout=None) -> int:
        """Serve over stdio with our JSON-RPC reader (pygls' own dies or goes deaf on one bad
        header); the exit code the LSP spec asks for."""
        return serve_stdio(self, stdin or sys.stdin.buffer, stdout or sys.stdout.buffer)

    def start_tcp(self, host: str, port: int) -> int:
        return serve_tcp(self, host, port)

    def report_server_error(self, error: Exception, source) -> None:
        """pygls shows each error outside a request's response in an "Error in server" window, which
        the user can do nothing about: log it instead (to stderr alone when sending itself failed)."""
        if source is FeatureRequestError:  # already in the request's error response
            return
        logging.getLogger(__name__).error("%s: %s", type(error).__name__, error)
        if source is not JsonRpcInternalError:
            self.session.ui.log("error", f"{type(error).__name__}: {error}")

    def invalid_params(self, method: str, params) -> str | None:
        """Why the params of a request are invalid, or None: checked before dispatch, so that a
        malformed one is one warning line, not a handler's error that pygls logs with its traceback
        (Copilot's request, whose type pygls does not know, and a command this server does not have)."""
        if method == NEXT_EDIT:
            return next_edit_problem(params)
        if method == EDIT_WITH_INSTRUCTION:
            try:
                parse_instruct_params(params)
            except ValueError as e:
                return str(e)
        if method == types.WORKSPACE_EXECUTE_COMMAND:
            name = params.get("command") if isinstance(params, dict) else None
            if name not in (ACCEPTED, ACCEPTED_EDIT):
                return f"no command {name!r} here (this server has {ACCEPTED} and {ACCEPTED_EDIT})"
        return None

    def document(self, uri: str) -> Document | None:
        """A snapshot of an open document (its text is an immutable str: safe to read in a thread)."""
        return _snapshot(self.workspace.text_documents.get(unquote(uri)))  # pygls keys them unquoted

    def other_documents(self, uri: str) -> list[Document]:
        """The most recently opened other documents, for cross-file context."""
        key, docs = unquote(uri), self.workspace.text_documents
        return [_snapshot(d) for k, d in list(docs.items())[-MAX_OPEN_DOCS - 1:] if k != key]

    def path_of(self, uri: str) -> str:
        """The document's path as the model sees it: relative to the workspace root when inside it."""
        path = unquote(urlparse(uri).path) or uri
        root = self.workspace.root_path
        if root and path.startswith(root.rstrip("/") + "/"):
            return os.path.relpath(path, root)
        return os.path.basename(path) or path

    @property
    def encoding(self) -> str:
        return self.workspace.position_encoding or positions.UTF16


def _snapshot(doc) -> Document | None:
    if doc is None:
        return None
    return Document(uri=doc.uri, text=doc.source, language_id=doc.language_id or "", version=doc.version or 0)


def initialize(ls: DiffusionServer, params: types.InitializeParams) -> None:
    ls.session.root = _root_path(params)
    ls.session.configure(params.initialization_options)


def _root_path(params: types.InitializeParams) -> str | None:
    """The workspace's folder: the first workspace folder, else rootUri, else rootPath (file: URIs only)."""
    uris = [f.uri for f in params.workspace_folders or ()] + [params.root_uri]
    for uri in uris:
        if uri and urlparse(uri).scheme == "file":
            return unquote(urlparse(uri).path) or None
    return params.root_path or None


def initialized(ls: DiffusionServer, params: types.InitializedParams) -> None:
    ls.session.ui.log("info", f"{NAME} {VERSION}: positions in {ls.encoding}")


def did_change_configuration(ls: DiffusionServer, params: types.DidChangeConfigurationParams) -> None:
    ls.session.configure(params.settings)


def did_open(ls: DiffusionServer, params: types.DidOpenTextDocumentParams) -> None:
    """Not a coroutine: the document is the session's before the next message (a change sent right
    after the open was once handled first, and its edit lost from the history)."""
    doc = params.text_document
    try:  # the grammar and queries, before the first completion pays for them
        prepare(doc.language_id, doc.uri)
    except Exception as e:  # a broken query is our bug: say so, keep serving
        ls.session.ui.log("error", f"preparing {doc.language_id}: {type(e).__name__}: {e}")
    if (opened := ls.document(doc.uri)) is not None:
        ls.session.opened(opened)


def did_change(ls: DiffusionServer, params: types.DidChangeTextDocumentParams) -> None:
    doc = ls.workspace.text_documents.get(unquote(params.text_document.uri))
    if doc is None:
        return
    changes = params.content_changes
    span = None
    if len(changes) == 1 and isinstance(changes[0], types.TextDocumentContentChangePartial):
        r = changes[0].range
        span = (r.start.line, r.end.line, r.start.line + changes[0].text.count("\n"))
    ls.session.changed(doc.uri, doc.source, ls.path_of(doc.uri), span)


def did_close(ls: DiffusionServer, params: types.DidCloseTextDocumentParams) -> None:
    ls.session.closed(unquote(params.text_document.uri))


async def inline_completion(ls: DiffusionServer,
                            params: types.InlineCompletionParams) -> types.InlineCompletionList | None:
    uri, pos = params.text_document.uri, params.position
    doc = ls.document(uri)
    shown = await ls.session.completer.complete(doc, pos.line, pos.character, ls.encoding,
                                                ls.other_documents(uri))
    items = [] if shown is None else [_item(uri, doc.text, shown, ls.encoding)]
    edit = _insertion_at_cursor(ls, doc, pos)
    if edit is not None and not any(i.insert_text == edit.text for i in items):
        accept = types.Command(title="accepted", command=ACCEPTED_EDIT, arguments=[uri])
        items.append(types.InlineCompletionItem(insert_text=edit.text, command=accept))
    return types.InlineCompletionList(items=items)


def _insertion_at_cursor(ls: DiffusionServer, doc, pos: types.Position):
    """The document's last next edit when it is an insertion at this position of this version."""
    if doc is None or (edit := ls.session.next_edit.cached(doc.uri, doc.version)) is None:
        return None
    at = (pos.line, pos.character)
    return edit.shown if edit_range(edit, ls.encoding) == (at, at) and edit.shown.text else None


def edit_range(edit: EditAnswer, encoding: str) -> tuple[tuple[int, int], tuple[int, int]]:
    """The LSP range of the next edit shown, in the version of the document it answers."""
    return positions.range_at(edit.doc.text, edit.shown.start, edit.shown.end, encoding)


def _field(obj, *keys):
    """params.a.b of a message pygls left untyped (a dict, or an object with attributes)."""
    for key in keys:
        obj = obj.get(key) if isinstance(obj, dict) else getattr(obj, key, None)
        if obj is None:
            return None
    return obj


def next_edit_problem(params) -> str | None:
    uri, version = _field(params, "textDocument", "uri"), _field(params, "textDocument", "version")
    line, character = _field(params, "position", "line"), _field(params, "position", "character")
    if not isinstance(uri, str) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0
                                           for v in (version, line, character)):
        return "copilotInlineEdit needs textDocument.uri and .version, and a position"
    return None


async def next_edit(ls: DiffusionServer, params) -> dict:
    """textDocument/copilotInlineEdit (its params checked by invalid_params): at most one edit, empty
    for a version that is not current."""
    uri, version = _field(params, "textDocument", "uri"), _field(params, "textDocument", "version")
    line, character = _field(params, "position", "line"), _field(params, "position", "character")
    edit = await ls.session.next_edit.suggest(ls.document(uri), version, line, character, ls.encoding,
                                              ls.path_of(uri), ls.other_documents(uri))
    if edit is None:
        return {"edits": []}
    version = edit.doc.version
    return {"edits": [{
        "text": edit.shown.text, "textDocument": {"uri": uri, "version": version},
        "range": _range_json(edit_range(edit, ls.encoding)),
        "command": {"title": "Accept next edit", "command": ACCEPTED_EDIT, "arguments": [uri, version]},
    }]}


def _range_json(rng) -> dict:
    (l0, c0), (l1, c1) = rng
    return {"start": {"line": l0, "character": c0}, "end": {"line": l1, "character": c1}}


async def code_action(ls: DiffusionServer, params: types.CodeActionParams) -> list[types.CodeAction] | None:
    """The next edit at the range's start as a code action, for editors without next-edit support."""
    uri, pos = params.text_document.uri, params.range.start
    doc = ls.document(uri)
    if doc is None or not ls.session.cfg.next_edit.enable:
        return None
    if params.context.only and not any(str(k).startswith(("quickfix", "refactor")) for k in params.context.only):
        return None
    edit = ls.session.next_edit.cached(doc.uri, doc.version)
    if edit is None:
        edit = await ls.session.next_edit.suggest(doc, doc.version, pos.line, pos.character, ls.encoding,
                                                  ls.path_of(uri), ls.other_documents(uri))
    if edit is None:
        return None
    start, end = edit_range(edit, ls.encoding)
    rng = types.Range(types.Position(*start), types.Position(*end))
    return [types.CodeAction(
        title=APPLY_EDIT_TITLE, kind=types.CodeActionKind.RefactorRewrite,
        # no `command` to count its acceptance: lsprotocol-based clients read any action with a
        # "command" key as a bare Command and lose the edit
        edit=types.WorkspaceEdit(changes={uri: [types.TextEdit(range=rng, new_text=edit.shown.text)]}))]


def did_show_inline_edit(ls: DiffusionServer, params) -> None:
    ls.session.stats.next_edit.shown += 1


def did_focus(ls: DiffusionServer, params) -> None:
    ls.session.stats.next_edit.focus += 1


def accepted_edit(ls: DiffusionServer, *args) -> None:
    ls.session.stats.next_edit.accepted += 1


def _item(uri: str, text: str, shown: Candidate, encoding: str) -> types.InlineCompletionItem:
    """The completion `shown` in the document whose text is `text` as its LSP item: its text, and the
    range after the cursor it writes over (none: inserted at the cursor)."""
    span = replace_range(text, shown, encoding)
    rng = None if span is None else types.Range(types.Position(*span[0]), types.Position(*span[1]))
    accept = types.Command(title="accepted", command=ACCEPTED, arguments=[uri])
    return types.InlineCompletionItem(insert_text=shown.text, range=rng, command=accept)


def did_show(ls: DiffusionServer, params) -> None:
    ls.session.stats.shown += 1


def did_partially_accept(ls: DiffusionServer, params) -> None:
    ls.session.stats.partially_accepted += 1
    ls.session.completer.feedback.partly_accepted(_uri_of(params))
    length = getattr(params, "acceptedLength", None)
    if isinstance(length, int) and length > 0:
        ls.session.stats.accepted_chars += length


def accepted(ls: DiffusionServer, *args) -> None:
    ls.session.stats.accepted += 1
    uri = args[0][0] if args and isinstance(args[0], list) and args[0] else args[0] if args else None
    if isinstance(uri, str):
        ls.session.completer.feedback.accepted(uri)


def _uri_of(params) -> str | None:
    """The document a Copilot-style notification names, where it names one."""
    doc = getattr(params, "textDocument", None) or getattr(params, "text_document", None)
    uri = getattr(doc, "uri", None) if doc is not None else None
    if uri is None and isinstance(params, dict):
        uri = (params.get("textDocument") or {}).get("uri") if isinstance(params.get("textDocument"), dict) else None
    return uri if isinstance(uri, str) else None


def stats(ls: DiffusionServer, params) -> dict:
    return ls.session.report()


async def shutdown(ls: DiffusionServer, params) -> None:
    await ls.session.close()


def create_server(options: ServeOptions) -> DiffusionServer:
    ls = DiffusionServer(options)
    for method, handler in [
        (types.INITIALIZE, initialize), (types.INITIALIZED, initialized),
        (types.WORKSPACE_DID_CHANGE_CONFIGURATION, did_change_configuration),
        (types.TEXT_DOCUMENT_DID_OPEN, did_open), (types.TEXT_DOCUMENT_DID_CHANGE, did_change),
        (types.TEXT_DOCUMENT_DID_CLOSE, did_close), (NEXT_EDIT, next_edit),
        (DID_SHOW_INLINE_EDIT, did_show_inline_edit), (DID_FOCUS, did_focus),
        (DID_SHOW, did_show), (DID_PARTIALLY_ACCEPT, did_partially_accept), (STATS, stats),
        (EDIT_WITH_INSTRUCTION, edit_with_instruction),
        (types.SHUTDOWN, shutdown),
    ]:
        ls.feature(method)(handler)
    ls.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())(inline_completion)
    ls.feature(types.TEXT_DOCUMENT_CODE_ACTION, types.CodeActionOptions(
        code_action_kinds=[types.CodeActionKind.RefactorRewrite]))(code_action)
    ls.command(ACCEPTED)(accepted)
    ls.command(ACCEPTED_EDIT)(accepted_edit)
    return ls
