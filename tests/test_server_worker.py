"""The worker without a model: supersession and cancellation between denoising steps, batching,
a model that fails to load, owner-only sockets, and the asyncio client over a real socket. The
fake engine runs 'steps' until released and asks should_stop between them, like the sampler."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import threading
from types import SimpleNamespace

import pytest

from diffusion_lsp.server import wire
from diffusion_lsp.server.client import Launch, WorkerClient
from diffusion_lsp.server.listener import bind, serve
from diffusion_lsp.server.worker import Worker, token_pieces

WAIT = 30  # seconds: only reached when a test is failing
SAMPLING = {"policy": "threshold", "threshold": 0.9}


class CharTok:
    def decode(self, ids):
        return "".join(map(chr, ids))


class FakeEngine:
    def __init__(self):
        self.tokenizer, self.batches = CharTok(), []
        self.started, self.release = threading.Event(), threading.Event()

    def fill(self, requests, cfg=None, should_stop=None):
        if should_stop is None:  # the warm-up fill
            return []
        self.batches.append([r.prefix for r in requests])
        self.started.set()
        stopped = [False] * len(requests)
        while not self.release.wait(0.005):  # one denoising step
            stopped = [s or should_stop(i) for i, s in enumerate(stopped)]
            if all(stopped):
                break
        return [SimpleNamespace(text=r.prefix.upper(), token_ids=[ord(c) for c in r.prefix.upper()],
                                confidence=[1.0] * len(r.prefix), ms=1.0, forwards=1, cancelled=s, reused=0)
                for r, s in zip(requests, stopped)]


class FakeConn:
    _ids = iter(range(1, 1000))

    def __init__(self):
        self.id, self.sent, self.cond = next(self._ids), [], threading.Condition()

    def send(self, message):
        with self.cond:
            self.sent.append(message)
            self.cond.notify_all()

    def reply(self, rid):
        with self.cond:
            assert self.cond.wait_for(lambda: any(m.get("id") == rid for m in self.sent), WAIT), self.sent
            return next(m for m in self.sent if m.get("id") == rid)


def fill(rid, key="a.py", prefix="x"):
    return {"op": "fill", "id": rid, "key": key, "prefix": prefix, "suffix": "", "max_tokens": 4,
            "sampling": SAMPLING}


@pytest.fixture
def running():
    engine = FakeEngine()
    worker = Worker(lambda: engine)
    threading.Thread(target=worker.run, daemon=True).start()
    conn = FakeConn()
    worker.connect(conn)
    yield worker, engine, conn
    engine.release.set()


def test_token_pieces_add_up_to_the_text_even_across_multibyte_tokens(tokenizer):
    ids = tokenizer.encode("s = 'é😀 naïve'\n    return s")
    text = tokenizer.decode(ids)
    pieces = token_pieces(tokenizer, ids, text)
    assert "".join(pieces) == text and len(pieces) == len(ids)
    healed = token_pieces(tokenizer, ids, text[2:])  # the sampler strips a healed prefix
    assert "".join(healed) == text[2:] and len(healed) == len(ids)


def test_a_running_fill_is_superseded_between_steps(running):
    worker, engine, conn = running
    worker.handle(conn, fill(1, prefix="old"))
    assert engine.started.wait(WAIT)
    worker.handle(conn, fill(2, prefix="new"))
    assert conn.reply(1) == {"id": 1, "ok": False, "reason": "superseded"}
    engine.release.set()
    assert conn.reply(2)["text"] == "NEW" and conn.reply(2)["pieces"] == ["N", "E", "W"]


def test_a_queued_fill_is_superseded_without_running_and_the_rest_are_batched(running):
    worker, engine, conn = running
    worker.handle(conn, fill(1, key="busy.py", prefix="busy"))
    assert engine.started.wait(WAIT)
    for rid, key in [(2, "a.py"), (3, "b.py"), (4, "a.py")]:
        worker.handle(conn, fill(rid, key=key, prefix=f"p{rid}"))
    assert conn.reply(2) == {"id": 2, "ok": False, "reason": "superseded"}
    engine.release.set()
    assert [conn.reply(i)["ok"] for i in (1, 3, 4)] == [True, True, True]
    assert engine.batches == [["busy"], ["p3", "p4"]]


def test_cancel_and_disconnect_stop_fills(running):
    worker, engine, conn = running
    worker.handle(conn, fill(1))
    assert engine.started.wait(WAIT)
    worker.handle(conn, {"op": "cancel", "id": 1})
    assert conn.reply(1) == {"id": 1, "ok": False, "reason": "cancelled"}
    other, _ = FakeConn(), engine.started.clear()
    worker.connect(other)
    worker.handle(other, fill(2, key="busy.py"))
    assert engine.started.wait(WAIT)  # 2 runs while 3 queues
    worker.handle(conn, fill(3))
    worker.disconnect(conn)  # its queued fill is dropped, nobody to answer
    assert all(j.conn is other for j in worker.jobs.values()) and all(j.conn is other for j in worker.queue)
    worker.disconnect(other)  # its running fill stops between steps
    assert other.reply(2)["reason"] == "cancelled"


def test_bad_requests_are_answered_not_fatal(running):
    worker, engine, conn = running
    worker.handle(conn, {"op": "fill", "id": 1, "prefix": 3})
    worker.handle(conn, {"op": "dance", "id": 2})
    worker.handle(conn, {**fill(3), "sampling": {"policy": "beam"}})
    assert [conn.reply(i)["reason"] for i in (1, 2, 3)] == ["error"] * 3
    assert "beam" in conn.reply(3)["error"]


def test_a_model_that_fails_to_load_answers_every_fill_with_the_reason():
    def load():
        raise FileNotFoundError("no weights here")

    worker, conn = Worker(load), FakeConn()
    worker.connect(conn)
    worker.run()  # returns once the load has failed
    assert conn.sent[-1] == {"event": "state", "state": "failed", "error": "FileNotFoundError: no weights here"}
    worker.handle(conn, fill(1))
    assert conn.reply(1)["reason"] == "model"


def test_the_socket_is_owner_only_and_one_worker_holds_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    folder = wire.private_dir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    path = wire.default_socket(None, "cpu")
    assert path.parent == folder and path != wire.default_socket(None, "cuda")
    assert path != wire.default_socket(None, "cpu", "fp32")  # another precision: another worker
    listener, lock = bind(path)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert bind(path) is None  # the lock is held: another worker serves this socket
    finally:
        listener.close()
        os.close(lock)
    folder.chmod(0o755)
    with pytest.raises(RuntimeError, match="0700"):
        wire.private_dir()


def test_the_client_over_a_real_socket_fills_cancels_and_notices_a_lost_worker(tmp_path):
    engine = FakeEngine()
    worker = Worker(lambda: engine)
    listener, lock = bind(tmp_path / "w.sock")
    threading.Thread(target=serve, args=(listener, worker, 0), daemon=True).start()
    threading.Thread(target=worker.run, daemon=True).start()

    async def go():
        lost, ready = asyncio.Event(), asyncio.Event()
        client = WorkerClient(Launch(socket=tmp_path / "w.sock"),
                              on_event=lambda m: m.get("state") == "ready" and ready.set(),
                              on_lost=lambda reason: lost.set())
        await client.start()
        await asyncio.wait_for(ready.wait(), WAIT)
        assert client.pid == os.getpid()
        held = asyncio.ensure_future(client.fill(1, "a.py", {**fill(1), "prefix": "held"}))
        await asyncio.get_running_loop().run_in_executor(None, engine.started.wait, WAIT)
        held.cancel()  # what $/cancelRequest does: the worker must stop the fill between steps
        with pytest.raises(asyncio.CancelledError):
            await held
        engine.release.set()
        answer = await asyncio.wait_for(client.fill(2, "a.py", {**fill(2), "prefix": "go"}), WAIT)
        assert answer["text"] == "GO" and engine.batches[0] == ["held"]
        for conn in list(worker.conns):  # the worker goes away
            conn.sock.shutdown(socket.SHUT_RDWR)
        await asyncio.wait_for(lost.wait(), WAIT)
        assert not client.connected and await client.fill(3, "a.py", fill(3)) is None

    try:
        asyncio.run(go())
    finally:
        listener.close()
        os.close(lock)
