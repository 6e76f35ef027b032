"""A scripted OpenAI-compatible FIM API on 127.0.0.1 and helpers, shared by test_remote.py (the client
and the command line) and test_remote_server.py (the language server's RemoteBackend)."""

from __future__ import annotations

import asyncio
import json
import select
import socket
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from diffusion_lsp.context.records import Document
from diffusion_lsp.backend.api_client import FimClient

WAIT = 30  # seconds: only reached when a test is failing
KEY = "sk-SENTINEL-7f3a9c0d-do-not-leak"
ENV = "TEST_KEY"
DOC = Document("file:///a.py", "import os\n\nprint(os.sep)\n", "python")


def ok(text, **extra):
    return 200, {"choices": [{"text": text, "index": 0}], **extra}


class Api(ThreadingHTTPServer):
    """Answers each POST with the next scripted answer (then `default`) and records what it got:
    (path, headers, body). An answer is (status, JSON or bytes[, headers]), a function of what it
    got that returns one, "hang" (hold the
    request until the client drops it: `dropped` is set) or ("huge", n) (a 200 of n bytes)."""

    daemon_threads = True

    def __init__(self):
        super().__init__(("127.0.0.1", 0), Handler)
        self.script, self.default, self.got = deque(), ok("x = 1"), []
        self.hanging, self.dropped, self.stopping = threading.Event(), threading.Event(), threading.Event()
        threading.Thread(target=self.serve_forever, args=(0.01,), daemon=True).start()

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def paths(self) -> list[str]:
        return [path for path, _, _ in self.got]

    def stop(self):
        self.stopping.set()
        self.shutdown()
        self.server_close()


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):  # quiet
        pass

    def do_POST(self):
        api: Api = self.server
        raw = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        api.got.append((self.path, dict(self.headers), json.loads(raw)))
        answer = api.script.popleft() if api.script else api.default
        if callable(answer):
            answer = answer(*api.got[-1])
        if answer == "hang":
            return self._hang(api)
        if answer[0] == "huge":
            return self._huge(answer[1])
        status, body, *headers = answer
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        for name, value in (headers[0] if headers else {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _hang(self, api: Api):
        api.hanging.set()
        deadline = time.monotonic() + WAIT
        while time.monotonic() < deadline and not api.stopping.is_set():
            if select.select([self.connection], [], [], 0.05)[0]:
                try:
                    peek = self.connection.recv(1, socket.MSG_PEEK)
                except OSError:
                    peek = b""
                if not peek:  # the client closed the connection
                    api.dropped.set()
                    break
        self.close_connection = True

    def _huge(self, size: int):
        self.send_response(200)
        self.send_header("Content-Length", str(size))
        self.end_headers()
        block = b'{"choices": [{"text": "' + b"a" * 65536
        try:
            for _ in range(size // len(block)):
                self.wfile.write(block)
        except OSError:
            pass
        self.close_connection = True


@pytest.fixture
def api(monkeypatch):
    monkeypatch.setenv(ENV, KEY)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    server = Api()
    yield server
    server.stop()


def client(api: Api, **options) -> tuple[FimClient, list[float]]:
    """A client whose backoff waits are recorded, not slept."""
    waits = []

    async def sleep(seconds):
        waits.append(seconds)

    options = {"sleep": sleep, "backoff_s": 0.5, **options}
    return FimClient(api.base, "mercury-edit", ENV, **options), waits


def complete(c: FimClient, prefix="def f(x):\n    return ", suffix="\n", max_tokens=16, one_line=False):
    async def go():
        try:
            return await c.complete(prefix, suffix, max_tokens, one_line)
        finally:
            await c.aclose()

    return asyncio.run(go())


def assert_no_key(*things):
    for thing in things:
        assert KEY not in str(thing) and KEY not in repr(thing)
        assert KEY[:12] not in str(thing)  # nor a cut part of it


def chain(e: BaseException) -> list[BaseException]:
    out = []
    while e is not None and e not in out:
        out.append(e)
        e = e.__cause__ or e.__context__
    return out


# ---- the client ----
