"""`diffusion-lsp serve` against a misbehaving client: the real server process driven over its pipes
with raw bytes (server/jsonrpc.py). Whatever arrives, each request gets an answer (its result or
its JSON-RPC error), notifications never do, nothing pops up a window, and the server keeps
serving. No model is needed: only initialize, the custom diffusionLsp/stats request and shutdown
are answered for real. Tests wait on the server's messages, never on a clock."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from types import SimpleNamespace

import pytest
import pytest_asyncio
from pygls.exceptions import FeatureNotificationError, FeatureRequestError, JsonRpcInternalError

from diffusion_lsp.protocol.settings import LaunchSettings
from diffusion_lsp.server.frames import MAX_BODY, MAX_HEADER, Frames
from diffusion_lsp.server.server import create_server
from diffusion_lsp.server.session import ServeOptions

TIMEOUT = 60
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, NOT_INITIALIZED = -32700, -32600, -32601, -32602, -32002


def frame(message=None, body: bytes | None = None, length: int | None = None) -> bytes:
    body = json.dumps(message).encode() if body is None else body
    return f"Content-Length: {len(body) if length is None else length}\r\n\r\n".encode() + body


def request(msg_id, method: str, params=None) -> dict:
    return {"jsonrpc": "2.0", "id": msg_id, "method": method, **({} if params is None else {"params": params})}


def notification(method: str, params=None) -> dict:
    return {"jsonrpc": "2.0", "method": method, **({} if params is None else {"params": params})}


STATS = request(1, "diffusionLsp/stats", {})
STATS_BYTES = json.dumps(STATS).encode()


class Raw:
    """The server process; bytes in, framed JSON messages out."""

    def __init__(self, proc: asyncio.subprocess.Process):
        self.proc, self.inbox = proc, []  # messages read, not yet asked for

    def send(self, *data: bytes) -> None:
        self.proc.stdin.write(b"".join(data))

    async def _message(self) -> dict:
        length = None
        while (line := await self.proc.stdout.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        if not line:
            raise EOFError(f"the server closed its output (exit code {await self.proc.wait()})")
        return json.loads(await self.proc.stdout.readexactly(length))

    async def reply(self, msg_id) -> tuple[dict, list[dict]]:
        """The response to `msg_id`, and the notifications sent before it (other responses stay
        in the inbox for their own reply())."""
        def answers(m: dict) -> bool:
            return "method" not in m and m.get("id") == msg_id

        while not any(answers(m) for m in self.inbox):
            self.inbox.append(await asyncio.wait_for(self._message(), TIMEOUT))
        at = next(i for i, m in enumerate(self.inbox) if answers(m))
        before = [m for m in self.inbox[:at] if "method" in m]
        answer, self.inbox = self.inbox[at], [m for m in self.inbox[:at] if "method" not in m] + self.inbox[at + 1:]
        return answer, before

    def responses(self) -> list[dict]:
        """Responses read and not taken by reply()."""
        return [m for m in self.inbox if "method" not in m]

    async def stats_answered(self, msg_id) -> None:
        """Ask for stats; assert the answer came, the server is alive and showed no window."""
        self.send(frame(request(msg_id, "diffusionLsp/stats", {})))
        answer, before = await self.reply(msg_id)
        assert "counts" in answer["result"], answer
        assert not [m for m in before if m.get("method") == "window/showMessage"], before
        assert self.proc.returncode is None

    async def initialize(self) -> None:
        self.send(frame(request("init", "initialize", {"capabilities": {}})),
                  frame(notification("initialized", {})))
        answer, _ = await self.reply("init")
        assert "capabilities" in answer["result"], answer


@pytest_asyncio.fixture
async def raw(tmp_path):
    with open(tmp_path / "stderr.txt", "wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "diffusion_lsp", "serve", "--model", str(tmp_path / "no-model"),
            "--worker-socket", str(tmp_path / "worker.sock"),
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=stderr)
    server = Raw(proc)
    yield server
    if proc.returncode is None:
        proc.kill()
        await proc.wait()


@pytest.mark.slow
@pytest.mark.parametrize("garbage, parse_error", [
    (frame(body=STATS_BYTES, length=len(STATS_BYTES) - 10), True),  # the rest glues onto the next header
    (frame(body=STATS_BYTES, length=len(STATS_BYTES) + 50), True),  # swallows the next header
    (b"Content-Length: abc\r\n\r\n" + STATS_BYTES, False),
    (b"Content-Length: 99999999999\r\n\r\n" + STATS_BYTES, False),  # was MemoryError: the process exited
    (f"Content-Length: {MAX_BODY + 1}\r\n\r\n".encode() + STATS_BYTES, False),
    (b"Content-Length: 5" + b" " * MAX_HEADER + b"\r\n", False),  # a header that never ends
    (b"hello\r\n\r\n{}", False),
    (frame(body=b'{"jsonrpc": "2.0", "id": 1, "method"'), True),
    (frame(body=b"\xff\xfe not utf-8"), True),
    (frame(body=b"[" * 100_000), True),  # RecursionError in json
], ids=["10-short", "50-long", "abc", "99999999999", "over-the-limit", "endless-header", "no-header", "cut-json",
        "not-utf8", "deep-json"])
@pytest.mark.asyncio
async def test_after_garbage_the_server_still_answers(raw, garbage, parse_error):
    await raw.initialize()
    raw.send(garbage)
    await raw.stats_answered(2)  # the request right after the garbage
    await raw.stats_answered(3)
    if parse_error:
        assert (await raw.reply(None))[0]["error"]["code"] == PARSE_ERROR
    assert raw.responses() == []


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_large_message_within_the_limit_is_read(raw):
    await raw.initialize()
    raw.send(frame(notification("x/large", {"text": "é" * 3_000_000})))  # 18 MB of JSON, in many reads
    await raw.stats_answered(2)


@pytest.mark.slow
@pytest.mark.parametrize("message, code, answered_id", [
    ({"jsonrpc": "2.0", "id": 7, "params": {}}, INVALID_REQUEST, 7),  # no method
    ({"jsonrpc": "2.0", "id": 7, "method": 5}, INVALID_REQUEST, 7),
    ({"jsonrpc": "1.0", "id": 7, "method": "diffusionLsp/stats"}, INVALID_REQUEST, 7),
    ({"id": 7, "method": "diffusionLsp/stats"}, INVALID_REQUEST, 7),
    ({"jsonrpc": "2.0", "id": 1.5, "method": "diffusionLsp/stats"}, INVALID_REQUEST, None),
    ({"jsonrpc": "2.0", "id": None, "method": "diffusionLsp/stats"}, INVALID_REQUEST, None),
    ([STATS], INVALID_REQUEST, None),  # a batch: not in the LSP
    (5, INVALID_REQUEST, None),
    ({"foo": "bar"}, INVALID_REQUEST, None),
    (request(7, "textDocument/inlineCompletion", {"textDocument": {"uri": "file:///a.py"},
                                                  "position": {"line": -1, "character": 0},
                                                  "context": {"triggerKind": 1}}), INVALID_PARAMS, 7),
    (request(7, "textDocument/inlineCompletion", {"textDocument": 5}), INVALID_PARAMS, 7),
    (request(7, "textDocument/inlineCompletion", [1, 2]), INVALID_PARAMS, 7),
    (request(7, "textDocument/inlineCompletion"), INVALID_PARAMS, 7),
    (request(7, "no/suchMethod", {}), METHOD_NOT_FOUND, 7),
], ids=["no-method", "method-not-a-string", "jsonrpc-1.0", "no-jsonrpc", "float-id", "null-id", "batch", "number",
        "not-a-message", "negative-position", "unparseable-params", "params-list", "no-params", "unknown-method"])
@pytest.mark.asyncio
async def test_a_malformed_request_gets_its_json_rpc_error(raw, message, code, answered_id):
    await raw.initialize()
    raw.send(frame(message))
    answer, before = await raw.reply(answered_id)
    assert answer["error"]["code"] == code, answer
    assert not [m for m in before if m.get("method") == "window/showMessage"], before
    await raw.stats_answered(2)
    assert raw.responses() == []


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_malformed_next_edit_request_is_one_warning_line_not_a_traceback(raw, tmp_path):
    """pygls logged the handler's invalid-params error as a crash: an ERROR line and a 10-line traceback
    for every malformed copilotInlineEdit. Its params are now checked before dispatch."""
    await raw.initialize()
    for i, params in enumerate([{"textDocument": {"uri": "file:///a.py"}}, [1, 2], None,
                                {"textDocument": {"uri": "file:///a.py", "version": -1},
                                 "position": {"line": 0, "character": 0}}], start=10):
        raw.send(frame(request(i, "textDocument/copilotInlineEdit", params)))
        answer, _ = await raw.reply(i)
        assert answer["error"]["code"] == INVALID_PARAMS and "copilotInlineEdit needs" in answer["error"]["message"]
    await raw.stats_answered(2)
    log = (tmp_path / "stderr.txt").read_text()
    assert "Traceback" not in log and " ERROR " not in log, log
    assert log.count("answered textDocument/copilotInlineEdit") == 4


@pytest.mark.slow
@pytest.mark.asyncio
async def test_an_unknown_command_is_invalid_params_and_one_warning_line(raw, tmp_path):
    """pygls answered a command it does not have with -32602, and logged it as an ERROR with a
    traceback (VS Code's output shows it as [error])."""
    await raw.initialize()
    raw.send(frame(request(5, "workspace/executeCommand", {"command": "nope", "arguments": []})))
    answer, _ = await raw.reply(5)
    assert answer["error"]["code"] == INVALID_PARAMS and "no command 'nope' here" in answer["error"]["message"]
    raw.send(frame(request(6, "workspace/executeCommand", {"command": "diffusionLsp.didAcceptCompletion",
                                                             "arguments": ["file:///a.py"]})))
    assert "error" not in (await raw.reply(6))[0]  # the server's own command still runs
    await raw.stats_answered(2)
    log = (tmp_path / "stderr.txt").read_text()
    assert "Traceback" not in log and " ERROR " not in log, log


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_cancel_or_progress_cancel_naming_no_usable_id_is_dropped(raw):
    """pygls hashes the id: {"id": {"a": 1}} killed the server (exit 1), a progress token object was
    an internal error shown in the log."""
    await raw.initialize()
    raw.send(frame(notification("$/cancelRequest", {"id": {"a": 1}})),
             frame(notification("$/cancelRequest", {"id": [1]})),
             frame(notification("window/workDoneProgress/cancel", {"token": {"a": 1}})))
    await raw.stats_answered(2)  # alive, and no window
    assert raw.responses() == [] and raw.proc.returncode is None


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_custom_request_may_leave_out_params(raw):
    await raw.initialize()
    raw.send(frame(request(2, "diffusionLsp/stats")))
    answer, _ = await raw.reply(2)
    assert "counts" in answer["result"], answer


@pytest.mark.slow
@pytest.mark.asyncio
async def test_broken_notifications_get_no_reply_and_no_window(raw):
    await raw.initialize()
    raw.send(frame(notification("textDocument/didChange", {  # a document that is not open
                 "textDocument": {"uri": "file:///never-opened.py", "version": 2},
                 "contentChanges": [{"range": {"start": {"line": 0, "character": 0},
                                               "end": {"line": 0, "character": 0}}, "text": "x"}]})),
             frame(notification("textDocument/didOpen", {"textDocument": 5})),
             frame(notification("textDocument/didClose")),
             frame({"jsonrpc": "1.0", "method": "initialized", "params": {}}),
             frame(notification("no/suchNotification", {})),
             frame(notification("$/cancelRequest", {"id": "never-sent"})),
             frame({"jsonrpc": "2.0", "id": "never-sent", "result": None}))  # a response to nothing
    await raw.stats_answered(2)  # no window before it
    assert raw.responses() == []


@pytest.mark.slow
@pytest.mark.asyncio
async def test_requests_before_initialize_and_after_shutdown_are_refused(raw):
    raw.send(frame(request(1, "diffusionLsp/stats", {})),
             frame(notification("textDocument/didOpen", {"textDocument": {
                 "uri": "file:///a.py", "languageId": "python", "version": 1, "text": "x = 1\n"}})))
    answer, before = await raw.reply(1)
    assert answer["error"]["code"] == NOT_INITIALIZED and before == []
    await raw.initialize()
    raw.send(frame(request(2, "initialize", {"capabilities": {}})))
    assert (await raw.reply(2))[0]["error"]["code"] == INVALID_REQUEST  # only once
    raw.send(frame(request(3, "shutdown")), frame(request(4, "diffusionLsp/stats", {})),  # right behind it
             frame(notification("initialized", {})))
    assert (await raw.reply(3))[0]["result"] is None
    raw.send(frame(request(5, "diffusionLsp/stats", {})))  # once shutdown has been answered
    for msg_id in (4, 5):
        assert (await raw.reply(msg_id))[0]["error"]["code"] == INVALID_REQUEST  # as the LSP spec says
    raw.send(frame(notification("exit")))
    assert await asyncio.wait_for(raw.proc.wait(), TIMEOUT) == 0


@pytest.mark.slow
@pytest.mark.asyncio
async def test_exit_without_shutdown_exits_with_1(raw):
    await raw.initialize()
    raw.send(frame(notification("exit")))
    assert await asyncio.wait_for(raw.proc.wait(), TIMEOUT) == 1


@pytest.mark.slow
@pytest.mark.asyncio
async def test_over_tcp_too(tmp_path):
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "diffusion_lsp", "serve", "--tcp", "0", "--log-level", "INFO",
        "--model", str(tmp_path / "no-model"), "--worker-socket", str(tmp_path / "worker.sock"),
        stderr=asyncio.subprocess.PIPE)
    try:
        listening = None
        while listening is None:
            line = await asyncio.wait_for(proc.stderr.readline(), TIMEOUT)
            assert line, "the server exited before listening"
            listening = re.search(rb"listening on ([\d.]+):(\d+)", line)
        drain = asyncio.ensure_future(proc.stderr.read())  # pygls logs every message at INFO
        reader, writer = await asyncio.open_connection(listening[1].decode(), int(listening[2]))
        writer.write(frame(request(1, "initialize", {"capabilities": {}})) + b"Content-Length: 99999999999\r\n\r\n"
                     + frame(request(2, "diffusionLsp/stats", {})))
        messages = b""
        while b'"counts"' not in messages:
            messages += await asyncio.wait_for(reader.read(1 << 16), TIMEOUT)
        writer.close()
        assert await asyncio.wait_for(proc.wait(), TIMEOUT) == 0  # the client went away
        drain.cancel()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


def test_an_error_outside_a_request_is_logged_not_shown(tmp_path):
    """pygls' default report_server_error opens an "Error in server" window for it."""
    ls = create_server(ServeOptions(LaunchSettings(path=str(tmp_path / "no-model"))))
    said = []
    ls.session.ui = SimpleNamespace(show=lambda *a: said.append(("show", *a)), log=lambda *a: said.append(("log", *a)))
    ls.report_server_error(KeyError("file:///x.py"), FeatureNotificationError)  # a notification handler raised
    ls.report_server_error(ValueError("bad"), FeatureRequestError)  # already in the request's error response
    ls.report_server_error(BrokenPipeError(), JsonRpcInternalError)  # sending failed: stderr only
    assert said == [("log", "error", "KeyError: 'file:///x.py'")]


# ---- Frames alone ----

async def bodies(stream: bytes, chunk: int) -> list[bytes]:
    pieces = [stream[i:i + chunk] for i in range(0, len(stream), chunk)] + [b""]

    async def read() -> bytes:
        return pieces.pop(0)

    frames, out = Frames(read), []
    while (body := await frames.next()) is not None:
        out.append(body)
    return out


@pytest.mark.parametrize("chunk", [1, 2, 7, 1 << 16])
@pytest.mark.asyncio
async def test_frames_do_not_depend_on_how_the_bytes_arrive(chunk):
    stream = (b"Content-Type: application/vscode-jsonrpc; charset=utf-8\r\nContent-Length: 2\r\n\r\n{}"
              b"content-length:3\n\n[1]"  # any case, bare \n line ends
              b"junk Content-Length: 4\r\n\r\nnull"  # garbage glued onto a header
              b"Content-Length: x\r\nContent-Length: 1\r\n\r\n5"  # a bad length, then a good one
              b"Content-Length: 5" + b" " * MAX_HEADER + b"\r\nContent-Length: 2\r\n\r\n{}")  # a header too long
    assert await bodies(stream, chunk) == [b"{}", b"[1]", b"null", b"5", b"{}"]
