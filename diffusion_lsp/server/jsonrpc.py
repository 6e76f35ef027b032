"""JSON-RPC that survives a misbehaving client, around pygls' LSP protocol.

pygls 2's reader (pygls.io_.run_async) failed in ways we measured against the real server:
`Content-Length: 99999999999` made it allocate the body up front and exit with MemoryError; after
one wrong length (10 bytes short, 50 long, "abc") the leftover bytes glued onto the next header,
which it matches only at the start of a line, so every later message was lost; and a body that is
not JSON or not a well-formed message was reported in an "Error in server" window while the request
itself was never answered. Here `Frames` bounds each body (MAX_BODY) and resynchronises at the next
`Content-Length:` (frames.py), and `Protocol.receive` answers each malformed request with its JSON-RPC error
(-32700 parse error, -32600 invalid request, -32602 invalid params; pygls itself answers -32601),
logs and drops malformed notifications (they never get replies), and keeps the LSP's lifecycle:
ServerNotInitialized before `initialize`, InvalidRequest after `shutdown`. A refusal a handler raises
(a JsonRpcException) is answered the same way, one log line, not pygls' ERROR and traceback."""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import os
import re
import threading
from collections.abc import Awaitable, Callable
from typing import BinaryIO

import cattrs
from lsprotocol import types
from pygls.exceptions import (JsonRpcContentModified, JsonRpcException, JsonRpcInternalError, JsonRpcInvalidParams,
                              JsonRpcInvalidRequest, JsonRpcParseError, JsonRpcRequestCancelled,
                              JsonRpcServerNotInitialized)
from pygls.io_ import StdoutWriter
from pygls.protocol import (JsonRPCNotification, JsonRPCRequestMessage, JsonRPCResponseMessage,
                            LanguageServerProtocol, lsp_method)
from pygls.server import JsonRPCServer

from . import positions
from .documents import SyncedWorkspace
from .frames import Frames

log = logging.getLogger(__name__)

CHUNK = 64 << 10  # bytes per read from the client
READ_AHEAD = 64  # chunks (4 MiB) the stdin thread may read before the loop takes them


def _why(e: Exception) -> str:
    if isinstance(e, cattrs.BaseValidationError):
        return "; ".join(cattrs.transform_error(e))
    return f"{type(e).__name__}: {e}"


def _envelope_problem(data: dict) -> str | None:
    """What makes `data` no JSON-RPC 2.0 message, or None."""
    if data.get("jsonrpc") != "2.0":
        return f"jsonrpc is {data.get('jsonrpc')!r}, not '2.0'"
    if "method" in data and not isinstance(data["method"], str):
        return "method is not a string"
    msg_id = data.get("id")
    if "id" in data and (isinstance(msg_id, bool) or not isinstance(msg_id, (int, str, type(None)))):
        return "id is neither a number nor a string"
    if "id" in data and msg_id is None and "method" in data:
        return "a request's id is null"
    return None


_ID_PARAM = {"$/cancelRequest": "id", types.WINDOW_WORK_DONE_PROGRESS_CANCEL: "token"}


def _bad_id(method: str, params) -> str | None:
    """Why a notification that names a request or a progress by id cannot be served: its id is not
    an integer or a string (JSON-RPC ids, LSP progress tokens)."""
    key = _ID_PARAM.get(method)
    if key is None:
        return None
    value = params.get(key) if isinstance(params, dict) else None
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        return None
    return f"params.{key} must be an integer or a string, got {value!r}"[:200]


def _usable_id(data: dict):
    msg_id = data.get("id")
    return msg_id if isinstance(msg_id, (int, str)) and not isinstance(msg_id, bool) else None


class Protocol(LanguageServerProtocol):
    """pygls' LSP protocol, with UTF-8 positions whenever offered, SyncedWorkspace for documents,
    and `receive` as the front door for each message body."""

    def __init__(self, server, converter):
        super().__init__(server, converter)
        self._closing = False  # shutdown was requested: from now on only `exit` is served
        self._methods: dict = {}  # id -> method of each request a handler is running, for its log line
        if not isinstance(getattr(self, "_request_futures", None), dict):  # what _execute_handler trims
            raise RuntimeError("this pygls keeps no _request_futures: server/jsonrpc.py needs updating for it")

    @lsp_method(types.INITIALIZE)
    def lsp_initialize(self, params: types.InitializeParams):
        """pygls takes the client's first known encoding; we take UTF-8 whenever it is offered."""
        general = params.capabilities.general
        if general is not None and general.position_encodings:
            chosen = positions.choose_encoding(list(general.position_encodings))
            general.position_encodings = [chosen] + [e for e in general.position_encodings if e != chosen]
        return (yield from super().lsp_initialize(params))

    @lsp_method(types.TEXT_DOCUMENT_DID_CHANGE)
    def lsp_text_document__did_change(self, params: types.DidChangeTextDocumentParams):
        """pygls applies a change of any version; one that is not newer than the document (sent
        out of order, or twice) would take the copy back to an older text that the next edits
        then take as current: it is dropped, and said in the log."""
        if (why := self.workspace.stale(params.text_document)) is not None:
            log.warning("dropped a didChange: %s", why)
            self._server.window_log_message(types.LogMessageParams(types.MessageType.Warning, f"dropped a change: {why}"))
            return
        yield from super().lsp_text_document__did_change(params)

    @property
    def workspace(self) -> SyncedWorkspace:
        """pygls builds a plain Workspace inside lsp_initialize and offers no factory for it; every
        reader (pygls' didOpen/didChange/didClose and our handlers) comes through here, so the
        first one swaps in a SyncedWorkspace, before any document is put in it."""
        workspace = super().workspace
        if not isinstance(workspace, SyncedWorkspace):
            self._workspace = workspace = SyncedWorkspace.like(workspace)
        return workspace

    def receive(self, body: bytes) -> bool:
        """Handle one message body; False when it is not JSON (the caller may resynchronise in it)."""
        try:
            data = json.loads(body)
        except (ValueError, RecursionError) as e:
            log.warning("a message body of %d bytes is not JSON (%s): answered Parse error", len(body), e)
            self._reply_error(None, JsonRpcParseError(f"Parse error: {e}"))
            return False
        if not isinstance(data, dict):
            self._refuse(None, "?", JsonRpcInvalidRequest("Invalid request: a message is a JSON object (no batches)"))
        elif "method" in data and "id" in data:
            self._on_request(data)
        elif "method" in data:
            self._on_notification(data)
        elif "id" in data and ("result" in data or "error" in data):
            self._on_response(data)
        else:
            self._refuse(_usable_id(data), "?", JsonRpcInvalidRequest(
                "Invalid request: a message needs a method (request, notification) or a result or error (response)"))
        return True

    def _on_request(self, data: dict) -> None:
        msg_id, method = _usable_id(data), data["method"]
        if problem := _envelope_problem(data):
            return self._refuse(msg_id, method, JsonRpcInvalidRequest(f"Invalid request: {problem}"))
        if self._closing:  # the LSP spec: requests after shutdown error with InvalidRequest
            return self._refuse(msg_id, method, JsonRpcInvalidRequest("Invalid request: the server has shut down"))
        initialized = self._workspace is not None
        if not initialized and method != types.INITIALIZE:
            return self._refuse(msg_id, method, JsonRpcServerNotInitialized("Server not initialized"))
        if initialized and method == types.INITIALIZE:  # a second one would drop every open document
            return self._refuse(msg_id, method, JsonRpcInvalidRequest("Invalid request: initialize was sent before"))
        try:
            message = self._structure(data)
        except Exception as e:
            return self._refuse(msg_id, method, JsonRpcInvalidParams(f"Invalid params: {_why(e)}"))
        if (why := self._server.invalid_params(method, data.get("params"))) is not None:
            return self._refuse(msg_id, method, JsonRpcInvalidParams(f"Invalid params: {why}"))
        if method == types.SHUTDOWN:
            self._closing = True
        if method in self.fm.features or method in self.fm.builtin_features:  # else pygls answers at once
            self._methods[msg_id] = method
        self.handle_message(message)

    def _on_notification(self, data: dict) -> None:
        method = data["method"]
        if problem := _envelope_problem(data):
            log.warning("dropped a notification: %s", problem)
        elif method != types.EXIT and (self._closing or self._workspace is None):
            log.info("dropped %s %s", method, "after shutdown" if self._closing else "before initialize")
        elif (why := _bad_id(method, data.get("params"))) is not None:
            log.warning("dropped %s: %s", method, why)  # pygls hashes it: a dict killed the server
        else:
            try:
                message = self._structure(data)
            except Exception as e:
                log.warning("dropped %s: invalid params: %s", method, _why(e))
                return
            self.handle_message(message)

    def _on_response(self, data: dict) -> None:
        if problem := _envelope_problem(data):
            log.warning("dropped a response: %s", problem)
            return
        try:
            message = self._structure(data)
        except Exception as e:
            log.warning("dropped the response to %r: %s", data.get("id"), _why(e))
            return
        self.handle_message(message)

    def _structure(self, data: dict):
        """One message from its JSON, as pygls' structure_message does, less its traceback log; the
        generic (non-LSP) messages may leave out params, as JSON-RPC allows."""
        if "method" in data:
            cls = self.get_message_type(data["method"]) or (
                JsonRPCRequestMessage if "id" in data else JsonRPCNotification)
            if cls in (JsonRPCRequestMessage, JsonRPCNotification):
                data = {"params": None, **data}
        elif "error" in data:
            cls = types.ResponseErrorMessage
        else:
            cls = self._result_types.pop(data["id"], None) or JsonRPCResponseMessage
        return self._converter.structure(data, cls)

    def _execute_handler(self, msg_id, handler, callback, args=None, kwargs=None) -> None:
        """pygls keeps the future of each handler it runs under its id, for a cancel to find, and only a
        request's answer takes it out again: a notification whose handler is a generator (pygls' own
        didOpen, didChange, didClose) and each step of one stayed there for good, about 2 KB a
        keystroke (the server grew 38 MB in 5 minutes of typing). Here every one leaves once done."""
        super()._execute_handler(msg_id, handler, callback, args, kwargs)
        if (future := self._request_futures.get(msg_id)) is not None:
            future.add_done_callback(functools.partial(self._forget, msg_id))

    def _forget(self, msg_id, future) -> None:
        if self._request_futures.get(msg_id) is future:  # not a later request's under a reused id
            del self._request_futures[msg_id]

    def _send_handler_result(self, future, *, msg_id) -> None:
        """A handler's answer. pygls logs a JsonRpcException raised by a handler at ERROR with its
        traceback, as a crash; a handler raises one only for a refusal it expects (editWithInstruction's
        unknown document, stale version, position past the end, superseded request: 31 tracebacks in one
        session): answered with that error and one log line, as a refusal before dispatch is. Any other
        exception is a bug and keeps pygls' traceback."""
        method = self._methods.pop(msg_id, "?")
        error = None if future.cancelled() else future.exception()
        if isinstance(error, JsonRpcException) and not isinstance(error, JsonRpcInternalError):
            self._request_futures.pop(msg_id, None)
            moved_on = isinstance(error, (JsonRpcRequestCancelled, JsonRpcContentModified))  # the user typed on
            return self._refuse(msg_id, method, error, logging.INFO if moved_on else logging.WARNING)
        super()._send_handler_result(future, msg_id=msg_id)

    def _refuse(self, msg_id, method: str, error: JsonRpcException, level: int = logging.WARNING) -> None:
        log.log(level, "answered %s #%s with %d: %s", method, msg_id, error.code, error.message)
        self._reply_error(msg_id, error)

    def _reply_error(self, msg_id, error: JsonRpcException) -> None:
        if msg_id is None:  # lsprotocol's converter would leave out an id of None; JSON-RPC wants "id": null
            self._send_data({"jsonrpc": "2.0", "id": None, "error": {"code": error.code, "message": error.message}})
        else:
            self._send_response(msg_id, error=error.to_response_error())


async def _serve(frames: Frames, protocol: Protocol, stop: threading.Event) -> None:
    while not stop.is_set():
        body = await frames.next()
        if body is None:
            return
        if not protocol.receive(body):
            frames.recover(body)


def _stdin_chunks(stream: BinaryIO, loop: asyncio.AbstractEventLoop) -> Callable[[], Awaitable[bytes]]:
    """Chunks of `stream`, read by a daemon thread (a read still blocked when the client sends
    `exit` must not keep the process alive), at most READ_AHEAD ahead of the loop."""
    chunks: asyncio.Queue[bytes] = asyncio.Queue()
    room = threading.Semaphore(READ_AHEAD)
    # The raw file descriptor when there is one: a daemon thread still blocked in a BufferedReader
    # when the interpreter exits holds the reader's lock, and Python aborts ("could not acquire lock
    # for <_io.BufferedReader name='<stdin>'> at interpreter shutdown").
    try:
        read = functools.partial(os.read, stream.fileno())
    except (AttributeError, OSError):  # an in-memory stream (io.UnsupportedOperation is an OSError)
        read = getattr(stream, "read1", stream.read)

    def pump() -> None:
        while True:
            room.acquire()
            try:
                chunk = read(CHUNK)
            except (OSError, ValueError):  # closed under us
                chunk = b""
            try:
                loop.call_soon_threadsafe(chunks.put_nowait, chunk)
            except RuntimeError:  # the loop has closed: the server is stopping
                return
            if not chunk:
                return

    async def next_chunk() -> bytes:
        chunk = await chunks.get()
        room.release()
        return chunk

    threading.Thread(target=pump, name="lsp-stdin", daemon=True).start()
    return next_chunk


def _exit_code(e: SystemExit) -> int:
    """pygls' `exit` handler calls sys.exit: 0 after shutdown, 1 without, as the LSP spec says."""
    return e.code if isinstance(e.code, int) else 0


def serve_stdio(server: JsonRPCServer, stdin: BinaryIO, stdout: BinaryIO) -> int:
    """pygls' JsonRPCServer._start_io_async with Frames as the reader; the process exit code."""
    server._stop_event = stop = threading.Event()
    server.protocol.set_writer(StdoutWriter(stdout))

    async def main() -> None:
        await _serve(Frames(_stdin_chunks(stdin, asyncio.get_running_loop())), server.protocol, stop)

    try:
        asyncio.run(main())
    except BrokenPipeError:
        log.error("the client closed the connection; stopping")
    except SystemExit as e:
        return _exit_code(e)
    finally:
        server.shutdown()
    return 0


def serve_tcp(server: JsonRPCServer, host: str, port: int) -> int:
    """pygls' JsonRPCServer.start_tcp with Frames as the reader (one client, for debugging)."""
    server._stop_event = stop = threading.Event()

    async def connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        server.protocol.set_writer(writer)
        await _serve(Frames(lambda: reader.read(CHUNK)), server.protocol, stop)
        server.shutdown()  # closes the listener: serve_forever ends

    async def main() -> None:
        server._server = await asyncio.start_server(connection, host, port)
        log.info("listening on %s:%d", *server._server.sockets[0].getsockname()[:2])  # --tcp 0: the port chosen
        async with server._server:
            await server._server.serve_forever()

    try:
        asyncio.run(main())
    except asyncio.CancelledError:
        pass
    except SystemExit as e:
        return _exit_code(e)
    return 0
