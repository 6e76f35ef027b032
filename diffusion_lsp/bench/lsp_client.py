"""A minimal editor for `diffusion-lsp bench lsp`: pygls's language client on the server's stdio,
with just what the replay needs (documents, keystrokes, inline completions, statistics)."""

from __future__ import annotations

import asyncio
import time
from collections import deque

from lsprotocol import types
from pygls.lsp.client import LanguageClient

from ..errors import UserError
from ..server import positions

START_TIMEOUT_S = 60.0  # the server's initialize answer
LOAD_TIMEOUT_S = 600.0  # the model load (the first one after an install compiles nothing, but is slow on CPU)
REQUEST_TIMEOUT_S = 120.0
STATS = "diffusionLsp/stats"
NEXT_EDIT = "textDocument/copilotInlineEdit"
CAPS = types.ClientCapabilities(
    general=types.GeneralClientCapabilities(position_encodings=[positions.UTF8, positions.UTF16]),
    window=types.WindowClientCapabilities(work_done_progress=True),
    text_document=types.TextDocumentClientCapabilities(
        synchronization=types.TextDocumentSyncClientCapabilities(),
        inline_completion=types.InlineCompletionClientCapabilities()))


def plain(value):
    """pygls gives custom requests' results as namedtuples: back to dicts and lists."""
    if hasattr(value, "_asdict"):
        return {k: plain(v) for k, v in value._asdict().items()}
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


class BenchClient:
    """`async with BenchClient(server_command, settings) as lsp:` starts and initializes the server
    and shuts it down (killing it if it will not stop). Positions are given as (line, text of that
    line before the position) and sent in the negotiated encoding."""

    def __init__(self, command: list[str], settings: dict):
        self.command, self.settings = command, settings
        self.client = LanguageClient("diffusion-lsp-bench", "0.1")
        self.encoding = positions.UTF16
        self.loaded = asyncio.Event()  # the model load's $/progress ended
        self.shown: list[str] = []  # window/showMessage
        self.stderr: deque[str] = deque(maxlen=20)
        self.versions: dict[str, int] = {}
        c = self.client

        @c.feature(types.WINDOW_WORK_DONE_PROGRESS_CREATE)
        def _create(params):
            return None

        @c.feature(types.PROGRESS)
        def _progress(params):
            value = params.value
            kind = value.get("kind") if isinstance(value, dict) else getattr(value, "kind", None)
            if kind == "end":
                self.loaded.set()

        @c.feature(types.WINDOW_SHOW_MESSAGE)
        def _show(params):
            self.shown.append(params.message)

        @c.feature(types.WINDOW_LOG_MESSAGE)
        def _log(params):
            pass

    async def __aenter__(self) -> "BenchClient":
        await self.client.start_io(*self.command)
        self._drain = asyncio.ensure_future(self._read_stderr(self.client._server.stderr))
        try:
            result = await asyncio.wait_for(self.client.initialize_async(types.InitializeParams(
                capabilities=CAPS, initialization_options=self.settings)), START_TIMEOUT_S)
        except Exception as e:  # a timeout, or a server that died
            await self._kill()
            raise UserError(f"the language server did not start ({type(e).__name__}: {e}); "
                            f"its stderr: {' | '.join(self.stderr)}") from None
        self.encoding = result.capabilities.position_encoding or positions.UTF16
        self.client.initialized(types.InitializedParams())
        return self

    async def __aexit__(self, *exc) -> None:
        try:
            await asyncio.wait_for(self.client.shutdown_async(None), 10)
            self.client.exit(None)
            await asyncio.wait_for(self.client.stop(), 10)
        except Exception:
            await self._kill()
        self._drain.cancel()

    @property
    def pid(self) -> int | None:
        """The server process's id."""
        server = self.client._server
        return None if server is None else server.pid

    async def _kill(self) -> None:
        server = self.client._server
        if server is not None and server.returncode is None:
            server.kill()
            await server.wait()

    async def _read_stderr(self, stream) -> None:
        """Keep the server's stderr pipe drained (pygls opens it and never reads it)."""
        while line := await stream.readline():
            self.stderr.append(line.decode(errors="replace").rstrip())

    async def wait_for_model(self, local: bool = True) -> dict:
        """Start the worker (by opening a document), wait for the model and warm the server up
        with one completion; the worker's stats entry. UserError when the model does not load.
        `local`: a model in a worker, whose load the server reports with $/progress (a remote API
        has no load to wait for)."""
        uri = "file:///bench/warmup.py"
        self.open(uri, "def f(x):\n    return \n")
        try:
            if local:
                await asyncio.wait_for(self.loaded.wait(), LOAD_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise UserError(f"the model did not load in {LOAD_TIMEOUT_S:.0f} s") from None
        if not local:  # the remote backend starts its client with the first request
            await self.complete(uri, 1, "    return ")
        worker = (await self.stats())["worker"]
        if worker["state"] != "ready" or worker.get("error"):
            what = "the model did not load" if local else "the API did not answer"
            raise UserError(f"{what}: {worker.get('error') or ' | '.join(self.shown) or worker['state']}")
        if local:
            await self.complete(uri, 1, "    return ")
        self.close(uri)
        return worker

    def open(self, uri: str, text: str, language_id: str = "python") -> None:
        self.versions[uri] = 1
        self.client.text_document_did_open(types.DidOpenTextDocumentParams(
            types.TextDocumentItem(uri=uri, language_id=language_id, version=1, text=text)))

    def close(self, uri: str) -> None:
        self.client.text_document_did_close(types.DidCloseTextDocumentParams(types.TextDocumentIdentifier(uri)))

    def _position(self, at: tuple[int, str]) -> types.Position:
        return types.Position(at[0], positions.units(at[1], self.encoding))

    def _changed(self, uri: str, change) -> None:
        self.versions[uri] += 1
        self.client.text_document_did_change(types.DidChangeTextDocumentParams(
            types.VersionedTextDocumentIdentifier(uri=uri, version=self.versions[uri]), [change]))

    def change(self, uri: str, start: tuple[int, str], end: tuple[int, str], text: str) -> None:
        """Replace the text between two positions, as one keystroke or edit."""
        rng = types.Range(self._position(start), self._position(end))
        self._changed(uri, types.TextDocumentContentChangePartial(range=rng, text=text))

    def replace_all(self, uri: str, text: str) -> None:
        self._changed(uri, types.TextDocumentContentChangeWholeDocument(text=text))

    async def complete(self, uri: str, line: int, before: str) -> tuple[float, str]:
        """Ask for an inline completion with the cursor after `before` on `line` -> (the
        milliseconds until the answer came, the first item's text or "")."""
        params = types.InlineCompletionParams(
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Automatic),
            text_document=types.TextDocumentIdentifier(uri=uri), position=self._position((line, before)))
        t0 = time.perf_counter()
        got = await asyncio.wait_for(self.client.text_document_inline_completion_async(params), REQUEST_TIMEOUT_S)
        ms = (time.perf_counter() - t0) * 1e3
        items = got.items if isinstance(got, types.InlineCompletionList) else got or []
        text = items[0].insert_text if items else ""
        return ms, text if isinstance(text, str) else text.value

    def configure(self, settings: dict) -> None:
        self.client.workspace_did_change_configuration(types.DidChangeConfigurationParams(settings=settings))

    async def next_edit(self, uri: str, line: int, before: str) -> tuple[float, dict | None]:
        """Ask for the next edit (textDocument/copilotInlineEdit) with the cursor after `before` on
        `line` of the current version -> (milliseconds until the answer, the edit or None)."""
        params = {"textDocument": {"uri": uri, "version": self.versions[uri]},
                  "position": {"line": line, "character": positions.units(before, self.encoding)}}
        t0 = time.perf_counter()
        got = await asyncio.wait_for(self.client.protocol.send_request_async(NEXT_EDIT, params), REQUEST_TIMEOUT_S)
        edits = plain(got).get("edits") or []
        return (time.perf_counter() - t0) * 1e3, edits[0] if edits else None

    async def stats(self) -> dict:
        return plain(await asyncio.wait_for(self.client.protocol.send_request_async(STATS, {}), REQUEST_TIMEOUT_S))
