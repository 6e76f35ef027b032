"""The pygls server: typed handlers `(ls, params) -> result | None` that turn LSP types into the
session's plain ones and delegate: a completion to the Completer, settings and documents to the
Session. No model or context work here: the model lives in the worker process, context work in the
completer's and the indexer's threads."""

from __future__ import annotations

import logging
import sys
from urllib.parse import unquote

from lsprotocol import types
from pygls.exceptions import FeatureRequestError, JsonRpcInternalError
from pygls.lsp.server import LanguageServer

from ..context.languages import prepare
from ..context.types import Document
from . import positions
from .completion import Answer
from .protocol import Protocol, serve_stdio, serve_tcp
from .session import ServeOptions, Session

NAME, VERSION = "diffusion-lsp", "0.1.0"
STATS = "diffusionLsp/stats"  # custom request: counts, latency percentiles, worker pid and state
ACCEPTED = "diffusionLsp.didAcceptCompletion"  # command on each item, run by the editor on accept
DID_SHOW = "textDocument/didShowCompletion"  # Copilot language server feedback notifications
DID_PARTIALLY_ACCEPT = "textDocument/didPartiallyAcceptCompletion"
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
        """Serve over stdio with protocol.py's reader (pygls' own dies or goes deaf on one bad
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

    def document(self, uri: str) -> Document | None:
        """A snapshot of an open document (its text is an immutable str: safe to read in a thread)."""
        return _snapshot(self.workspace.text_documents.get(unquote(uri)))  # pygls keys them unquoted

    def other_documents(self, uri: str) -> list[Document]:
        """The most recently opened other documents, for cross-file context."""
        key, docs = unquote(uri), self.workspace.text_documents
        return [_snapshot(d) for k, d in list(docs.items())[-MAX_OPEN_DOCS - 1:] if k != key]

    @property
    def encoding(self) -> str:
        return self.workspace.position_encoding or positions.UTF16


def _snapshot(doc) -> Document | None:
    if doc is None:
        return None
    return Document(uri=doc.uri, text=doc.source, language_id=doc.language_id or "", version=doc.version or 0)


def initialize(ls: DiffusionServer, params: types.InitializeParams) -> None:
    ls.session.configure(params.initialization_options)


def initialized(ls: DiffusionServer, params: types.InitializedParams) -> None:
    ls.session.ui.log("info", f"{NAME} {VERSION}: positions in {ls.encoding}")


def did_change_configuration(ls: DiffusionServer, params: types.DidChangeConfigurationParams) -> None:
    ls.session.configure(params.settings)


async def did_open(ls: DiffusionServer, params: types.DidOpenTextDocumentParams) -> None:
    doc = params.text_document
    try:  # the grammar and queries, before the first completion pays for them
        prepare(doc.language_id, doc.uri)
    except Exception as e:  # a broken query is our bug: say so, keep serving
        ls.session.ui.log("error", f"preparing {doc.language_id}: {type(e).__name__}: {e}")
    if (opened := ls.document(doc.uri)) is not None:
        await ls.session.opened(opened)


def did_change(ls: DiffusionServer, params: types.DidChangeTextDocumentParams) -> None:
    doc = ls.workspace.text_documents.get(unquote(params.text_document.uri))
    if doc is None:
        return
    for change in params.content_changes:
        if isinstance(change, types.TextDocumentContentChangePartial):
            ls.session.changed(doc.uri, doc.source, change.range.start.line, change.text.count("\n"))
        else:
            ls.session.changed(doc.uri, doc.source, 0, 0)


async def inline_completion(ls: DiffusionServer,
                            params: types.InlineCompletionParams) -> types.InlineCompletionList | None:
    uri, pos = params.text_document.uri, params.position
    answer = await ls.session.completer.complete(ls.document(uri), pos.line, pos.character, ls.encoding,
                                                 ls.other_documents(uri))
    return types.InlineCompletionList(items=[] if answer is None else [_item(uri, answer)])


def _item(uri: str, answer: Answer) -> types.InlineCompletionItem:
    rng = None if answer.range is None else types.Range(types.Position(*answer.range[0]),
                                                         types.Position(*answer.range[1]))
    accept = types.Command(title="accepted", command=ACCEPTED, arguments=[uri])
    return types.InlineCompletionItem(insert_text=answer.text, range=rng, command=accept)


def did_show(ls: DiffusionServer, params) -> None:
    ls.session.stats.shown += 1


def did_partially_accept(ls: DiffusionServer, params) -> None:
    ls.session.stats.partially_accepted += 1
    length = getattr(params, "acceptedLength", None)
    if isinstance(length, int) and length > 0:
        ls.session.stats.accepted_chars += length


def accepted(ls: DiffusionServer, *args) -> None:
    ls.session.stats.accepted += 1


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
        (DID_SHOW, did_show), (DID_PARTIALLY_ACCEPT, did_partially_accept), (STATS, stats),
        (types.SHUTDOWN, shutdown),
    ]:
        ls.feature(method)(handler)
    ls.feature(types.TEXT_DOCUMENT_INLINE_COMPLETION, types.InlineCompletionOptions())(inline_completion)
    ls.command(ACCEPTED)(accepted)
    return ls
