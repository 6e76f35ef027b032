"""The pygls server: typed handlers `(ls, params) -> result | None` that delegate to Session (no
model work here; the model lives in the worker process)."""

from __future__ import annotations

import asyncio

from lsprotocol import types
from pygls.lsp.server import LanguageServer
from pygls.protocol import LanguageServerProtocol, lsp_method

from ..context.languages import prepare
from ..context.types import Document
from . import positions
from .completion import replace_range
from .session import ServeOptions, Session

NAME, VERSION = "diffusion-lsp", "0.1.0"
STATS = "diffusionLsp/stats"  # custom request: counts, latency percentiles, worker pid and state
ACCEPTED = "diffusionLsp.didAcceptCompletion"  # command on each item, run by the editor on accept
DID_SHOW = "textDocument/didShowCompletion"  # Copilot language server feedback notifications
DID_PARTIALLY_ACCEPT = "textDocument/didPartiallyAcceptCompletion"
MAX_OPEN_DOCS = 32  # other open documents offered to the context gatherer
_LEVELS = {"error": types.MessageType.Error, "warning": types.MessageType.Warning,
           "info": types.MessageType.Info, "debug": types.MessageType.Log}


class Protocol(LanguageServerProtocol):
    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        """pygls takes the client's first known encoding; we take UTF-8 whenever it is offered."""
        general = params.capabilities.general
        if general is not None and general.position_encodings:
            chosen = positions.choose_encoding(list(general.position_encodings))
            general.position_encodings = [chosen] + [e for e in general.position_encodings if e != chosen]
        return (yield from super().lsp_initialize(params))


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
        self.session = Session(options, LspUi(self))


def _document(doc) -> Document | None:
    if doc is None:
        return None
    return Document(uri=doc.uri, text=doc.source, language_id=doc.language_id or "", version=doc.version or 0)


def initialize(ls: DiffusionServer, params: types.InitializeParams) -> None:
    ls.session.configure(params.initialization_options)


def initialized(ls: DiffusionServer, params: types.InitializedParams) -> None:
    ls.session.ui.log("info", f"{NAME} {VERSION}: positions in {ls.workspace.position_encoding}")


def did_change_configuration(ls: DiffusionServer, params: types.DidChangeConfigurationParams) -> None:
    ls.session.configure(params.settings)


async def did_open(ls: DiffusionServer, params: types.DidOpenTextDocumentParams) -> None:
    doc = params.text_document
    try:  # the grammar and queries, before the first completion pays for them
        prepare(doc.language_id, doc.uri)
    except Exception as e:  # a broken query is our bug: say so, keep serving
        ls.session.ui.log("error", f"preparing {doc.language_id}: {type(e).__name__}: {e}")
    primed = asyncio.ensure_future(ls.session.prime(doc.text))
    await ls.session.ensure_worker()  # start the model on demand, before the first completion
    await primed


def did_change(ls: DiffusionServer, params: types.DidChangeTextDocumentParams) -> None:
    doc = ls.workspace.text_documents.get(params.text_document.uri)
    for change in params.content_changes:
        if doc is not None and isinstance(change, types.TextDocumentContentChangePartial):
            ls.session.note_edit(doc.uri, doc.source, change.range.start.line, change.text.count("\n"))


async def inline_completion(ls: DiffusionServer,
                            params: types.InlineCompletionParams) -> types.InlineCompletionList | None:
    uri, pos = params.text_document.uri, params.position
    docs = ls.workspace.text_documents
    doc = _document(docs.get(uri))
    others = [_document(d) for u, d in list(docs.items())[-MAX_OPEN_DOCS - 1:] if u != uri]
    encoding = ls.workspace.position_encoding or positions.UTF16
    got = await ls.session.complete(doc, uri, pos.line, pos.character, encoding, others)
    if got is None:
        return types.InlineCompletionList(items=[])
    offset, sug = got
    span = replace_range(doc.text, offset, sug, encoding)
    rng = None if span is None else types.Range(types.Position(*span[0]), types.Position(*span[1]))
    accept = types.Command(title="accepted", command=ACCEPTED, arguments=[uri])
    return types.InlineCompletionList(items=[types.InlineCompletionItem(insert_text=sug.text, range=rng,
                                                                        command=accept)])


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
