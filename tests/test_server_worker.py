"""The worker without a model: supersession and cancellation between denoising steps, batching,
a model that fails to load, owner-only sockets, and the asyncio client over a real socket. The
fake engine's decoding runs 'steps' until released and is told which rows stop between them, as the
sampler's Decoding is."""

from __future__ import annotations

import asyncio
import os
import socket
import stat
import threading
import types

import pytest

from diffusion_lsp.protocol.capabilities import Capabilities
from diffusion_lsp.protocol.settings import LaunchSettings, SamplerConfig
from diffusion_lsp.worker import listener as listener_module
from diffusion_lsp.worker import wire
from diffusion_lsp.worker.client import WorkerClient, WorkerUnavailable
from diffusion_lsp.worker.spec import WorkerSpec
from diffusion_lsp.worker.listener import bind, serve
from diffusion_lsp.protocol.answers import Fill
from diffusion_lsp.protocol.requests import FillRequest
from diffusion_lsp.engine import FillBatch
from diffusion_lsp.worker import process
from diffusion_lsp.worker.process import Worker

WAIT = 30  # seconds: only reached when a test is failing
SAMPLING = {"policy": "threshold", "threshold": 0.9}


class CharTok:
    def decode(self, ids):
        return "".join(map(chr, ids))


class FakeDecoding:
    """sampler.Decoding's shape: a step per turn, `stop(i)` between steps, requests that join (add)
    and finish one by one. A step runs when the test gives the engine a step (engine.step()): order i
    is done after its max_tokens steps, and every row is done once the engine is released; meanwhile
    turns that decode nothing come every 5 ms."""

    joins = True

    def __init__(self, engine, orders):
        self.engine, self.orders, self.stopped, self.finished = engine, list(orders), set(), []
        self.left = [o.max_tokens for o in orders]

    def live(self):
        return [i for i, n in enumerate(self.left) if n > 0 and i not in self.stopped]

    def stop(self, i):
        self.stopped.add(i)
        if self.left[i] > 0:
            self.finished.append(i)
            self.left[i] = 0

    def add(self, orders):
        first = len(self.orders)
        self.orders += orders
        self.left += [o.max_tokens for o in orders]
        with self.engine.changed:
            self.engine.joined.append([o.prefix for o in orders])
            self.engine.changed.notify_all()
        return list(range(first, len(self.orders)))

    def active(self):
        return len(self.live())

    def take_finished(self):
        done, self.finished = self.finished, []
        return done

    def __iter__(self):
        self.engine.batches.append([o.prefix for o in self.orders])
        self.engine.started.set()
        while self.live():
            if self.engine.steps.acquire(timeout=0.005) or self.engine.release.is_set():  # else a turn that
                rows = self.live()  # decodes nothing, for the worker to look at its jobs in between
                with self.engine.changed:
                    self.engine.events.append(("step", [self.orders[i].prefix for i in rows]))
                    self.engine.changed.notify_all()
                for i in rows:
                    self.left[i] = 0 if self.engine.release.is_set() else self.left[i] - 1
                    if self.left[i] == 0:
                        self.finished.append(i)
            yield []  # one denoising step

    def result(self, i):
        o = self.orders[i]
        return None if i in self.stopped else Fill(o.prefix.upper(), list(o.prefix.upper()), [1.0] * len(o.prefix),
                                                   1.0, 1)


class FakeEngine:
    def __init__(self):
        self.tokenizer, self.batches, self.events, self.joined = CharTok(), [], [], []
        self.started, self.release, self.steps = threading.Event(), threading.Event(), threading.Semaphore(0)
        self.changed = threading.Condition()  # notified when a step or a join is recorded

    def step(self):
        self.steps.release()

    capabilities = Capabilities(probe=True, drafts=True)  # diffusion_lsp.engine.Engine's

    def max_tokens(self) -> int:
        return 16  # the largest canvas this fake model takes

    def answer(self, orders, keys, stops=None):  # the warm-up fill
        return [None]

    def decode_orders(self, orders, keys):  # diffusion_lsp.engine.Engine's
        return FakeDecoding(self, orders)

    def batch(self, orders, keys, stops):  # diffusion_lsp.engine.Engine's, over this fake's decoding
        return FillBatch(self, orders, keys, stops)

    @staticmethod
    def join(decoding, orders, keys):
        return decoding.add(orders)

    @staticmethod
    def answer_of(decoding, i):
        return decoding.result(i)


class FakeConn:
    _ids = iter(range(1, 1000))

    def __init__(self, timeline: list | None = None):
        self.id, self.sent, self.cond = next(self._ids), [], threading.Condition()
        self.timeline = timeline  # where its answers go in order with the engine's steps

    def send(self, message):
        with self.cond:
            self.sent.append(message)
            if self.timeline is not None and "ok" in message:
                self.timeline.append(("answer", message["id"]))
            self.cond.notify_all()

    def reply(self, rid):
        with self.cond:
            assert self.cond.wait_for(lambda: any(m.get("id") == rid for m in self.sent), WAIT), self.sent
            return next(m for m in self.sent if m.get("id") == rid)


def fill(rid, key="a.py", prefix="x", max_tokens=4):
    return {"op": "fill", "id": rid, "key": key, "prefix": prefix, "suffix": "", "max_tokens": max_tokens,
            "sampling": SAMPLING}


def _running(continuous: bool):
    engine = FakeEngine()
    worker = Worker(lambda: engine, continuous=continuous)
    threading.Thread(target=worker.run, daemon=True).start()
    conn = FakeConn(engine.events)
    worker.connect(conn)
    return worker, engine, conn


@pytest.fixture
def running():
    worker, engine, conn = _running(continuous=True)
    yield worker, engine, conn
    engine.release.set()


@pytest.fixture
def static():
    """A worker without continuous batching (`--static-batching`): what is queued while a batch runs
    waits for it to end, and decodes as the next batch."""
    worker, engine, conn = _running(continuous=False)
    yield worker, engine, conn
    engine.release.set()


def test_a_running_fill_is_superseded_between_steps(running):
    worker, engine, conn = running
    worker.handle(conn, fill(1, prefix="old"))
    assert engine.started.wait(WAIT)
    worker.handle(conn, fill(2, prefix="new"))
    assert conn.reply(1) == {"id": 1, "ok": False, "failure": "dropped", "error": "superseded by a newer request",
                             "stop": "superseded"}
    engine.release.set()
    assert conn.reply(2)["text"] == "NEW" and conn.reply(2)["pieces"] == ["N", "E", "W"]


def test_a_queued_fill_is_superseded_without_running_and_the_rest_are_batched(static):
    worker, engine, conn = static
    worker.handle(conn, fill(1, key="busy.py", prefix="busy"))
    assert engine.started.wait(WAIT)
    for rid, key in [(2, "a.py"), (3, "b.py"), (4, "a.py")]:
        worker.handle(conn, fill(rid, key=key, prefix=f"p{rid}"))
    assert conn.reply(2) == {"id": 2, "ok": False, "failure": "dropped", "error": "superseded by a newer request",
                             "stop": "superseded"}
    engine.release.set()
    assert [conn.reply(i)["ok"] for i in (1, 3, 4)] == [True, True, True]
    assert engine.batches == [["busy"], ["p3", "p4"]]


def test_a_fill_past_the_models_positions_is_invalid_and_its_batch_goes_on(static):
    """The same on every try, so not an error of the batch (which failed every fill in it) nor a
    reason to retry: "invalid", naming the field."""
    worker, engine, conn = static
    worker.handle(conn, fill(1, key="busy.py", prefix="busy"))
    assert engine.started.wait(WAIT)
    worker.handle(conn, fill(2, key="a.py", prefix="big", max_tokens=17))
    worker.handle(conn, fill(3, key="b.py", prefix="ok", max_tokens=16))
    engine.release.set()
    assert conn.reply(2) == {"id": 2, "ok": False, "failure": "invalid", "param": "max_tokens",
                             "error": "max_tokens must be an integer between 1 and 16, got 17"}
    assert conn.reply(3)["text"] == "OK" and engine.batches == [["busy"], ["ok"]]


def test_cancel_and_disconnect_stop_fills(running):
    worker, engine, conn = running
    worker.handle(conn, fill(1))
    assert engine.started.wait(WAIT)
    worker.handle(conn, {"op": "cancel", "id": 1})
    assert conn.reply(1) == {"id": 1, "ok": False, "failure": "dropped", "error": "cancelled", "stop": "cancelled"}
    other, _ = FakeConn(), engine.started.clear()
    worker.connect(other)
    worker.handle(other, fill(2, key="busy.py"))
    assert engine.started.wait(WAIT)  # 2 runs while 3 queues
    worker.handle(conn, fill(3))
    worker.disconnect(conn)  # its queued fill is dropped, nobody to answer
    assert all(j.conn is other for j in worker.jobs.values()) and all(j.conn is other for j in worker.queue)
    worker.disconnect(other)  # its running fill stops between steps
    assert other.reply(2) == {"id": 2, "ok": False, "failure": "dropped", "error": "cancelled", "stop": "cancelled"}


def test_bad_requests_are_answered_not_fatal(running):
    worker, engine, conn = running
    worker.handle(conn, {"op": "fill", "id": 1, "prefix": 3})
    worker.handle(conn, {"op": "dance", "id": 2})
    worker.handle(conn, {**fill(3), "sampling": {"policy": "beam"}})
    worker.handle(conn, {**fill(4), "max_tokens": True})
    assert [conn.reply(i)["failure"] for i in (1, 2, 3, 4)] == ["refused"] * 4
    assert "beam" in conn.reply(3)["error"] and "max_tokens" in conn.reply(4)["error"]


def test_a_bad_sampling_value_is_refused_alone_while_its_neighbours_decode(static):
    worker, engine, conn = static
    worker.handle(conn, fill(1, key="busy.py", prefix="busy"))
    assert engine.started.wait(WAIT)
    worker.handle(conn, fill(2, key="a.py", prefix="good"))
    worker.handle(conn, {**fill(3, key="b.py", prefix="bad"), "sampling": {**SAMPLING, "block_size": 10**12}})
    worker.handle(conn, fill(4, key="c.py", prefix="fine"))
    assert conn.reply(3)["failure"] == "refused" and "block_size" in conn.reply(3)["error"]
    engine.release.set()
    assert [conn.reply(i)["text"] for i in (1, 2, 4)] == ["BUSY", "GOOD", "FINE"]
    assert engine.batches == [["busy"], ["good", "fine"]]


def _wait(engine, predicate):
    with engine.changed:
        assert engine.changed.wait_for(predicate, WAIT), (engine.events, engine.joined)


def test_a_fill_joins_a_running_batch_at_the_next_step_and_is_answered_when_it_is_done(running):
    """Continuous batching, as the order of events: B arrives while A decodes, shares A's next step,
    and is answered as soon as that step is done while A goes on; C, with other settings, waits for
    the batch to end, and so does D behind it (no newcomer overtakes the head of the queue)."""
    worker, engine, conn = running
    worker.handle(conn, fill(1, key="a.py", prefix="A", max_tokens=3))
    assert engine.started.wait(WAIT)
    engine.step()
    _wait(engine, lambda: engine.events == [("step", ["A"])])
    worker.handle(conn, fill(2, key="b.py", prefix="B", max_tokens=1))
    _wait(engine, lambda: engine.joined == [["B"]])
    engine.step()
    assert conn.reply(2)["text"] == "B"
    worker.handle(conn, {**fill(3, key="c.py", prefix="C", max_tokens=1), "sampling": {"policy": "one"}})
    worker.handle(conn, fill(4, key="d.py", prefix="D", max_tokens=1))
    engine.step()
    assert conn.reply(1)["text"] == "A"
    engine.release.set()
    assert conn.reply(3)["text"] == "C" and conn.reply(4)["text"] == "D"
    assert engine.events[:5] == [("step", ["A"]), ("step", ["A", "B"]), ("answer", 2), ("step", ["A"]), ("answer", 1)]
    assert engine.joined == [["B"]] and engine.batches == [["A"], ["C"], ["D"]]


def test_a_full_batch_takes_no_more_until_a_row_leaves(running):
    worker, engine, conn = running
    worker.max_batch = 2
    worker.handle(conn, fill(1, key="a.py", prefix="A", max_tokens=2))
    assert engine.started.wait(WAIT)
    worker.handle(conn, fill(2, key="b.py", prefix="B", max_tokens=1))
    _wait(engine, lambda: engine.joined == [["B"]])
    worker.handle(conn, fill(3, key="c.py", prefix="C", max_tokens=1))
    engine.step()  # A and B; B leaves, and C takes its place
    engine.step()
    assert conn.reply(1)["text"] == "A" and conn.reply(3)["text"] == "C"
    assert engine.events == [("step", ["A", "B"]), ("answer", 2), ("step", ["A", "C"]), ("answer", 1), ("answer", 3)]
    assert engine.joined == [["B"], ["C"]]


def test_without_continuous_batching_a_batch_is_answered_at_its_end(static):
    worker, engine, conn = static
    worker.handle(conn, fill(1, key="a.py", prefix="A", max_tokens=1))
    assert engine.started.wait(WAIT)
    worker.handle(conn, fill(2, key="b.py", prefix="B", max_tokens=1))
    worker.handle(conn, fill(3, key="c.py", prefix="C", max_tokens=2))
    for _ in range(3):
        engine.step()
    assert conn.reply(2)["text"] == "B" and conn.reply(3)["text"] == "C"
    assert engine.events == [("step", ["A"]), ("answer", 1), ("step", ["B", "C"]), ("step", ["C"]),
                             ("answer", 2), ("answer", 3)]
    assert engine.joined == [] and engine.batches == [["A"], ["B", "C"]]


def test_a_ping_is_answered_while_a_batch_runs(running, monkeypatch):
    worker, engine, conn = running
    now = [1000.0]  # the worker's clock, moved by hand
    monkeypatch.setattr(process, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    worker.handle(conn, {"op": "ping", "id": 1})
    assert conn.reply(1) == {"id": 1, "ok": True, "pong": True, "busy_s": 0.0}
    worker.handle(conn, fill(2))
    assert engine.started.wait(WAIT)
    now[0] += 2.5
    worker.handle(conn, {"op": "ping", "id": 3})
    assert worker.busy_since == 1000.0 and conn.reply(3)["busy_s"] == 2.5  # how long the batch has run
    engine.release.set()
    assert conn.reply(2)["ok"]


def test_a_model_that_fails_to_load_answers_every_fill_with_the_reason():
    def load():
        raise FileNotFoundError("no weights here")

    worker, conn = Worker(load), FakeConn()
    worker.connect(conn)
    worker.run()  # returns once the load has failed
    assert conn.sent[-1] == {"event": "state", "state": "failed", "error": "FileNotFoundError: no weights here"}
    worker.handle(conn, fill(1))
    assert conn.reply(1)["failure"] == "unavailable"


def test_servers_with_other_batching_flags_never_share_a_worker(tmp_path, monkeypatch):
    """A serve-api with --static-batching beside one without reached the first one's worker (the
    socket's name came from the model's launch settings alone), and its flag did nothing."""
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    launch = LaunchSettings(device="cpu")
    plain = WorkerSpec.of(launch, prefix="api", max_batch=16)
    assert WorkerSpec.of(launch, prefix="api", max_batch=16).socket == plain.socket  # the same ones share
    others = [WorkerSpec.of(launch, prefix="api", max_batch=16, continuous=False), WorkerSpec.of(launch, prefix="api",
                                                                                               max_batch=8)]
    assert len({plain.socket, *(o.socket for o in others)}) == 3
    assert "--static-batching" in others[0].command() and "--static-batching" not in plain.command()
    assert WorkerSpec.of(launch, tmp_path / "mine.sock", continuous=False).socket == tmp_path / "mine.sock"


def test_the_socket_is_owner_only_and_one_worker_holds_it(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    folder = wire.private_dir()
    wire.ensure_private_dir(folder)
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    path = wire.default_socket(LaunchSettings(device="cpu"))
    assert path.parent == folder and path != wire.default_socket(LaunchSettings(device="cuda"))
    assert path != wire.default_socket(LaunchSettings(device="cpu", precision="fp32"))  # another worker
    listener, lock = bind(path)
    try:
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert bind(path) is None  # the lock is held: another worker serves this socket
    finally:
        listener.close()
        os.close(lock)
    folder.chmod(0o755)
    with pytest.raises(RuntimeError, match="0700"):
        wire.ensure_private_dir(folder)


def test_the_client_over_a_real_socket_fills_cancels_and_notices_a_lost_worker(tmp_path):
    engine = FakeEngine()
    worker = Worker(lambda: engine)
    listener, lock = bind(tmp_path / "w.sock")
    threading.Thread(target=serve, args=(listener, worker, 0), daemon=True).start()
    threading.Thread(target=worker.run, daemon=True).start()

    async def go():
        client = WorkerClient(WorkerSpec(socket=tmp_path / "w.sock"))
        await client.start()
        await asyncio.wait_for(client.settled(), WAIT)
        assert client.state == "ready" and client.pid == os.getpid()
        said = [client.events.get_nowait() for _ in range(client.events.qsize())]
        assert said[0]["event"] == "hello" and said[-1]["state"] == "ready"  # what its owner awaits
        held = asyncio.ensure_future(client.ask("a.py", FillRequest("held", "", 4)))
        await asyncio.get_running_loop().run_in_executor(None, engine.started.wait, WAIT)
        held.cancel()  # what $/cancelRequest does: the worker must stop the fill between steps
        with pytest.raises(asyncio.CancelledError):
            await held
        engine.release.set()
        answer = await asyncio.wait_for(client.ask("a.py", FillRequest("go", "", 4, sampling=SamplerConfig())), WAIT)
        assert answer == Fill("GO", ["G", "O"], [1.0, 1.0], 1.0, 1, 0) and engine.batches[0] == ["held"]
        for conn in list(worker.conns):  # the worker goes away
            conn.sock.shutdown(socket.SHUT_RDWR)
        lost = await asyncio.wait_for(client.events.get(), WAIT)
        assert lost["event"] == "lost" and "lost" in lost["reason"] and not client.connected
        with pytest.raises(WorkerUnavailable):
            await client.ask("a.py", FillRequest("x", "", 4))

    try:
        asyncio.run(go())
    finally:
        listener.close()
        os.close(lock)


def _fake_worker_socket(path, lines: list[bytes]):
    """A socket at `path` whose one connection gets `lines` and is then held open."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)

    def talk():
        conn, _ = server.accept()
        for line in lines:
            conn.sendall(line)
        conn.recv(1)  # until the client hangs up

    threading.Thread(target=talk, daemon=True).start()
    return server


def test_a_worker_that_resets_the_connection_on_its_way_out_is_not_a_failure(tmp_path):
    """When a shared worker was killed, the session that did not restart it sometimes connected as it
    went and showed "could not start the model worker: Connection reset by peer"; it tries again."""
    import struct

    path = tmp_path / "w.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(2)

    def talk():
        dying, _ = server.accept()  # the old worker: takes the connection and drops it
        dying.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        dying.close()
        conn, _ = server.accept()  # the next one says hello
        conn.sendall(wire.encode(_hello(LaunchSettings())))
        conn.recv(1)

    threading.Thread(target=talk, daemon=True).start()
    client = WorkerClient(WorkerSpec(socket=path))

    async def go():
        await client.start()
        state = client.state
        await client.close()
        return state

    try:
        assert asyncio.run(go()) == "ready"
    finally:
        server.close()


def test_a_worker_of_another_wire_version_is_refused_with_a_clear_reason(tmp_path):
    path = tmp_path / "w.sock"
    server = _fake_worker_socket(path, [wire.encode({"event": "hello", "version": 1, "pid": 1, "state": "ready"})])
    client = WorkerClient(WorkerSpec(socket=path))
    try:
        with pytest.raises(WorkerUnavailable, match=f"protocol version .1, this server speaks {wire.WIRE_VERSION}"):
            asyncio.run(client.start())
    finally:
        server.close()


def test_an_over_long_line_from_the_worker_drops_the_connection(tmp_path, monkeypatch):
    from diffusion_lsp.worker import client as client_module

    monkeypatch.setattr(client_module, "MAX_LINE", 4096)
    path = tmp_path / "w.sock"
    hello = wire.encode(_hello(LaunchSettings()))
    server = _fake_worker_socket(path, [hello, b'{"id": 1, "text": "' + b"x" * 10_000 + b'"}\n'])

    async def go():
        client = WorkerClient(WorkerSpec(socket=path))
        await client.start()
        fill = asyncio.ensure_future(client.ask("a.py", FillRequest("x", "", 4)))
        while (await asyncio.wait_for(client.events.get(), WAIT))["event"] != "lost":
            pass
        with pytest.raises(WorkerUnavailable):
            await fill
        return client.connected

    try:
        assert asyncio.run(go()) is False
    finally:
        server.close()


def test_the_worker_exits_once_its_last_client_has_gone(tmp_path):
    worker = Worker(lambda: FakeEngine())
    listener, lock = bind(tmp_path / "w.sock")
    done = threading.Event()

    def run():
        serve(listener, worker, 0)
        done.set()

    threading.Thread(target=run, daemon=True).start()
    try:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(str(tmp_path / "w.sock"))
        assert wire.decode(sock.makefile("rb").readline())["event"] == "hello"
        assert not done.is_set()  # a client is connected: it stays
        sock.close()
        assert done.wait(WAIT)
    finally:
        listener.close()
        os.close(lock)


def test_a_client_that_stops_reading_is_dropped_without_stalling_the_sender(tmp_path, monkeypatch):
    monkeypatch.setattr(listener_module, "SEND_TIMEOUT_S", 1)
    worker = Worker(lambda: FakeEngine())
    listener, lock = bind(tmp_path / "w.sock")
    threading.Thread(target=serve, args=(listener, worker, 600), daemon=True).start()
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(str(tmp_path / "w.sock"))  # and never reads
    try:
        with worker.cond:
            assert worker.cond.wait_for(lambda: worker.conns, WAIT)
            (conn,) = worker.conns
        sent = threading.Event()

        def flood():  # what the model thread does with answers: one blocked send must not hang it
            for _ in range(64):
                conn.send({"event": "state", "state": "ready", "error": "x" * 1_000_000})
            sent.set()

        threading.Thread(target=flood, daemon=True).start()
        assert sent.wait(WAIT)
        with worker.cond:
            assert worker.cond.wait_for(lambda: not worker.conns, WAIT)  # dropped, cleaned up
    finally:
        sock.close()
        listener.close()
        os.close(lock)


def test_a_socket_folder_that_does_not_exist_is_made_private_and_a_planted_socket_is_refused(tmp_path):
    path = tmp_path / "new" / "deeper" / "w.sock"
    wire.check_socket_path(path)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    planted = tmp_path / "new" / "deeper" / "p.sock"
    planted.symlink_to(tmp_path / "elsewhere.sock")
    with pytest.raises(RuntimeError, match="not a socket owned by"):
        wire.check_socket_path(planted)
    shared = tmp_path / "shared"
    shared.mkdir(mode=0o777)
    shared.chmod(0o777)
    with pytest.raises(RuntimeError, match="0700"):
        wire.check_socket_path(shared / "w.sock")


def _hello(launch: LaunchSettings, **changes) -> dict:
    """The hello a worker started with `launch` by this install says."""
    return {"event": "hello", "version": wire.WIRE_VERSION, "pid": 1, "state": "ready",
            "model": wire.model_name(launch), "build": wire.build_id(), "weights": wire.weights_id(launch), **changes}


@pytest.mark.parametrize("changes, why", [
    ({"model": "/models/a"}, "serves the model /models/a, not /models/b"),
    ({"build": "0.0.9+0123abcd"}, "runs diffusion-lsp 0.0.9.0123abcd, not this install's"),
    ({"build": None}, "runs diffusion-lsp None"),  # a worker from before builds were said
    ({"weights": "0" * 16}, "loaded other weights of /models/b"),
])
def test_a_shared_socket_whose_worker_runs_other_code_or_another_model_is_refused(tmp_path, changes, why):
    path = tmp_path / "w.sock"
    launch = LaunchSettings(path="/models/b")
    server = _fake_worker_socket(path, [wire.encode(_hello(launch, **changes))])
    client = WorkerClient(WorkerSpec(socket=path, model=launch))
    try:
        with pytest.raises(WorkerUnavailable, match=why):
            asyncio.run(client.start())
    finally:
        server.close()


def test_the_default_socket_differs_for_another_install_or_changed_weights(tmp_path, monkeypatch, tiny_checkpoint):
    import shutil

    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    folder = tmp_path / "model"
    shutil.copytree(tiny_checkpoint, folder)
    launch = LaunchSettings(path=str(folder))
    first = wire.default_socket(launch)
    assert wire.default_socket(launch) == first  # stable: sessions of one install share their worker
    weights = folder / "model.safetensors"
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))  # re-trained
    retrained = wire.default_socket(launch)
    assert retrained != first
    monkeypatch.setattr(wire, "build_id", lambda: "9.9.9+feedface")  # an upgraded install
    assert wire.default_socket(launch) not in (first, retrained)
