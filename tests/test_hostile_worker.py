"""The worker under hostile orders: an order that fails in the model fails alone and the model thread
goes on; a model thread that holds a cancelled order (or is gone) is found by a ping and its worker
restarted, with /health saying so until the new one is ready; a model that never loads is "failed"
with the reason (the editor is shown it, serve-api answers 503 naming it) instead of "loading" for
good; and a cancel reaches structured answers and edits from an instruction as it reaches
fills. Fake engines driven by events (test_server_worker.py's), the real embedded model where the
stop must reach the model's own loop, and one real serve-api whose structured request's client
leaves."""

from __future__ import annotations

import asyncio
import json
import os
import select
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from conftest import RecordingUi
from diffusion_lsp.api.app import create_app
from diffusion_lsp.api.metrics import Metrics
from diffusion_lsp.api.service import Service
from diffusion_lsp.protocol.failure import BackendError, Failure
from diffusion_lsp.protocol.answers import Answered, Fill
from diffusion_lsp.protocol.requests import FillRequest, InstructRequest, StructuredRequest
from diffusion_lsp.protocol.settings import LaunchSettings
from diffusion_lsp.model.decoding.stop import OrderStopped
from diffusion_lsp.worker.client import Pong
from diffusion_lsp.worker.link import WorkerLink
from diffusion_lsp.worker.listener import bind, serve
from diffusion_lsp.worker.process import Worker, start
from diffusion_lsp.worker.spec import WorkerSpec
from test_server_worker import SAMPLING, WAIT, FakeConn, FakeEngine, fill

TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
CHAT = json.dumps({"messages": [{"role": "user", "content": "A person as JSON"}]})


class HostileEngine(FakeEngine):
    """FakeEngine with conversations and single orders. A conversation that says "deep" overflows the
    stack while its prompt is built (what a 500-deep tool-call argument did in model/chat/prompting.py);
    a structured answer runs "forwards" until released, and with `wedged` never looks at its stop
    flag (a model thread stuck in one call), else raises OrderStopped at the next one once it is set."""

    wedged = False

    def chat_prompt(self, chat, n):
        if "deep" in chat:
            raise RecursionError("maximum recursion depth exceeded")
        return [1, 2, 3]

    def answer_structured(self, order, stop=None):
        self.started.set()
        forwards = 0
        while not self.release.wait(0.005):
            if stop is not None and stop.is_set() and not self.wedged:
                raise OrderStopped(f"stopped after {forwards} forwards")
            forwards += 1
        return Answered("json", "{}", forwards=forwards)


def structured(rid, key="s"):
    return {"op": "structured", "id": rid, "key": key, "chat": CHAT, "output": json.dumps({"object": True}),
            "max_tokens": 8, "sampling": SAMPLING}


@pytest.fixture
def hostile():
    engine = HostileEngine()
    worker = Worker(lambda: engine)
    engine.thread = threading.Thread(target=worker.run, daemon=True)  # the model thread, for a test to join
    engine.thread.start()
    conn = FakeConn()
    worker.connect(conn)
    yield worker, engine, conn
    engine.release.set()


# ---- the model thread survives what fails in it ----

def test_a_conversation_whose_prompt_overflows_the_stack_fails_alone_and_the_model_thread_goes_on(hostile):
    """Before: the RecursionError escaped the admission of the batch, killed the model thread, and every
    later request of every route timed out while the worker said it was ready."""
    worker, engine, conn = hostile
    worker.handle(conn, {**fill(1, key="a.py"), "chat": json.dumps({"messages": "deep"})})
    worker.handle(conn, fill(2, key="b.py", prefix="next"))
    engine.release.set()
    first = conn.reply(1)
    assert first["ok"] is False and first["failure"] == "refused" and "RecursionError" in first["error"]
    assert conn.reply(2)["text"] == "NEXT"
    worker.handle(conn, {"op": "ping", "id": 3})
    assert "dead" not in conn.reply(3)


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the thread's end, on purpose
def test_a_model_thread_that_dies_is_said_dead_in_a_ping(hostile, monkeypatch):
    """What no order's handling catches (here SystemExit from the engine) ends the thread: the ping says
    so, and its clients restart the worker rather than wait on it for good."""
    worker, engine, conn = hostile
    # as Python itself does, a thread ended by SystemExit is no error to report (the thread is joined
    # below, so it ends within this test, not during a later one)
    monkeypatch.setattr(threading, "excepthook", threading.__excepthook__)

    def exits(orders, keys):
        raise SystemExit("the engine gave up")

    engine.decode_orders = exits
    worker.handle(conn, fill(1))
    with worker.cond:
        assert worker.cond.wait_for(lambda: worker.died is not None, WAIT)
    worker.handle(conn, {"op": "ping", "id": 2})
    assert conn.reply(2)["dead"] == "SystemExit: the engine gave up"
    engine.thread.join(WAIT)
    assert not engine.thread.is_alive()


# ---- cancellation reaches structured orders ----

def test_a_running_structured_answer_is_cancelled_at_its_next_forward(hostile):
    """Before: the worker ran a structured answer to its end whoever cancelled it (the client gone, a
    deadline), and every order behind it waited as long."""
    worker, engine, conn = hostile
    worker.handle(conn, structured(1))
    assert engine.started.wait(WAIT)
    worker.handle(conn, fill(2, key="b.py", prefix="after"))
    worker.handle(conn, {"op": "cancel", "id": 1})
    assert conn.reply(1) == {"id": 1, "ok": False, "failure": "dropped", "error": "cancelled",
                             "stop": "cancelled"}  # without the release
    engine.release.set()
    assert conn.reply(2)["text"] == "AFTER"


def test_a_model_thread_that_holds_a_cancelled_order_is_said_stuck_in_a_ping(hostile):
    worker, engine, conn = hostile
    engine.wedged = True
    worker.handle(conn, structured(1))
    assert engine.started.wait(WAIT)
    worker.handle(conn, {"op": "ping", "id": 2})
    assert "stuck_s" not in conn.reply(2)  # running, not stopped: not stuck
    worker.handle(conn, {"op": "cancel", "id": 1})
    later = time.monotonic() + 60
    assert worker.stuck_s(later) >= 60  # 60 s from now it still holds the cancelled order
    worker.handle(conn, {"op": "ping", "id": 3})
    assert "stuck_s" in conn.reply(3)
    engine.release.set()  # it lets go at last
    assert conn.reply(1) == {"id": 1, "ok": False, "failure": "dropped", "error": "cancelled", "stop": "cancelled"}
    assert worker.stuck_s(later) is None


# ---- the real model: the stop reaches its own loops ----

@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    from diffusion_lsp.engine import load_engine

    template = tmp_path_factory.mktemp("chat") / "chat.jinja"
    template.write_text(TEMPLATE)
    return load_engine(LaunchSettings(device="cpu", chat_template=str(template)))


def counting_forwards(engine, monkeypatch, stop_after: int, stop: threading.Event) -> list:
    """The model's forwards counted; `stop` set once `stop_after` of them ran (the client leaving)."""
    calls, hidden = [], engine.model.hidden

    def counted(*args, **kwargs):
        calls.append(1)
        if len(calls) == stop_after:
            stop.set()
        return hidden(*args, **kwargs)

    monkeypatch.setattr(engine.model, "hidden", counted)
    return calls


PERSON = {"type": "object", "properties": {f"field{i}": {"type": "string", "minLength": 8, "maxLength": 12}
                                           for i in range(6)},
          "required": [f"field{i}" for i in range(6)], "additionalProperties": False}


def test_a_structured_answer_of_the_real_model_stops_at_the_forward_after_its_stop(engine, monkeypatch):
    order = StructuredRequest(CHAT, json.dumps({"schema": PERSON}), 64)
    full = engine.answer_structured(order)
    assert full.forwards > 3
    stop = threading.Event()
    calls = counting_forwards(engine, monkeypatch, 2, stop)
    with pytest.raises(OrderStopped, match="after 2 forwards"):
        engine.answer_structured(order, stop)
    assert len(calls) == 2  # not full.forwards


def test_an_edit_from_an_instruction_of_the_real_model_stops_between_steps(engine, monkeypatch):
    order = InstructRequest("def f(x):\n", "    return x\n", "\n", "double it", 24)
    stop = threading.Event()
    calls = counting_forwards(engine, monkeypatch, 1, stop)
    with pytest.raises(OrderStopped, match="after 1 step"):
        engine.answer_instruct(order, stop)
    assert len(calls) == 1


# ---- the link restarts a stuck worker, and says so until the new one is ready ----

class ScriptedClient:
    """The worker client as the link sees it: its pings answer `pongs` in turn, and a started worker
    says "ready" once `ready` is set (a fresh worker loading meanwhile)."""

    def __init__(self, pongs: list):
        self.pongs, self.events, self.ready = list(pongs), asyncio.Queue(), asyncio.Event()
        self.connected, self.state, self.pid, self.error, self.killed = False, "stopped", 4242, None, []
        self.max_tokens = self.capabilities = None
        self.hang = True

    async def start(self):
        self.connected, self.state = True, "loading"

    async def settled(self):
        await self.ready.wait()
        if self.state == "loading":
            self.state = "ready"
            self.events.put_nowait({"event": "state", "state": "ready", "pid": self.pid})

    async def ask(self, key, order):
        if self.hang:
            await asyncio.Event().wait()
        return Fill("ok", ["ok"], [1.0])

    async def ping(self, timeout_s):
        return self.pongs.pop(0)

    def kill(self, why):
        self.killed.append(why)
        self.connected, self.state, self.ready = False, "stopped", asyncio.Event()
        self.events.put_nowait({"event": "lost", "state": "stopped", "reason": f"{why} and was killed"})

    async def close(self):
        pass


def scripted_link(pongs):
    ui = RecordingUi()
    client = ScriptedClient(pongs)
    link = WorkerLink(ui, WorkerSpec(Path("/tmp/w.sock")), lambda spec: client, fill_timeout_s=0.05)
    link.stuck_grace_s = 0.05
    return link, client, ui


@pytest.mark.parametrize("pongs, why", [
    ([Pong(busy_s=0.06, stuck_s=0.0), Pong(busy_s=0.2, stuck_s=0.15)], "has not let go of a cancelled order"),
    ([Pong(busy_s=0.06, dead="RecursionError: maximum recursion depth exceeded")], "lost its model thread"),
])
def test_a_worker_whose_model_thread_is_stuck_or_gone_is_restarted_and_said_not_ready_until_back(pongs, why):
    """Before: a ping answered at once with a batch running less than three deadlines was a slow model,
    so a model thread stuck on (or dead after) one order left every request timing out for good."""
    link, client, ui = scripted_link(pongs)

    async def go():
        client.ready.set()
        await link.ready()
        with pytest.raises(BackendError) as e:
            await link.fill("a.py", FillRequest("x", "", 4))
        assert e.value.kind is Failure.TIMEOUT
        await asyncio.wait_for(link.check, WAIT)  # the liveness check the missed deadline started
        assert len(client.killed) == 1 and why in client.killed[0]
        for _ in range(5):  # the supervisor hears of the lost worker and starts the next one
            await asyncio.sleep(0)
        said = link.describe()
        assert said["state"] == "restarting" and why in said["error"]
        client.hang = False
        client.ready.set()  # the new worker is ready
        await asyncio.wait_for(link.ready(), WAIT)
        for _ in range(5):
            await asyncio.sleep(0)
        assert link.describe()["state"] == "ready" and link.describe()["error"] is None
        assert (await link.fill("a.py", FillRequest("x", "", 4))).text == "ok"

    asyncio.run(go())
    assert link.counts["worker_crashes"] == 1
    assert any(why in m and "restarting it" in m for _, m in ui.shown)


def test_a_slow_model_that_lets_go_of_its_cancelled_order_is_not_restarted():
    link, client, ui = scripted_link([Pong(busy_s=0.06, stuck_s=0.0), Pong(busy_s=0.0)])

    async def go():
        client.ready.set()
        await link.ready()
        with pytest.raises(BackendError):
            await link.fill("a.py", FillRequest("x", "", 4))
        await asyncio.wait_for(link.check, WAIT)

    asyncio.run(go())
    assert client.killed == [] and link.describe()["state"] == "ready"
    assert any("worker.fillTimeoutS" in m for _, m in ui.logged)


# ---- the load has a deadline ----

class NeverLoads:
    """A load that returns only when the test lets it (a checkpoint whose warm-up never finishes)."""

    def __init__(self):
        self.go = threading.Event()

    def __call__(self):
        self.go.wait(WAIT)
        return FakeEngine()


def test_a_model_that_does_not_load_in_time_is_failed_and_says_why():
    """Before: every request was answered "the model worker is loading" for good."""
    load = NeverLoads()
    worker, conn = Worker(load, load_timeout_s=0.1), FakeConn()
    worker.connect(conn)
    try:
        start(worker)  # what the worker process does: the model thread and the load's deadline
        with conn.cond:
            assert conn.cond.wait_for(lambda: conn.sent[-1].get("state") == "failed", WAIT), conn.sent
        assert "did not load within 0.1 s" in conn.sent[-1]["error"]
        worker.handle(conn, fill(1))
        refused = conn.reply(1)
        assert refused["failure"] == "unavailable" and "did not load within 0.1 s" in refused["error"]
    finally:
        load.go.set()


def test_a_model_that_loads_after_its_deadline_stays_failed():
    load = NeverLoads()
    worker, conn = Worker(load, load_timeout_s=3600), FakeConn()
    worker.connect(conn)
    thread = threading.Thread(target=worker.run)
    thread.start()
    worker.load_overdue()  # what the deadline's timer calls
    load.go.set()
    thread.join(WAIT)
    assert not thread.is_alive() and worker.state == "failed"
    assert [m["state"] for m in conn.sent] == ["loading", "failed"]


@pytest.fixture
def never_loading_worker(tmp_path):
    """A worker on a real socket whose model does not load within its 0.2 s deadline."""
    load = NeverLoads()
    worker = Worker(load, load_timeout_s=0.2)
    listener, lock = bind(tmp_path / "w.sock")
    threading.Thread(target=serve, args=(listener, worker, 0), daemon=True).start()
    start(worker)
    yield WorkerSpec(tmp_path / "w.sock")
    load.go.set()
    listener.close()
    os.close(lock)


def test_the_editor_is_shown_that_the_model_did_not_load_in_time(never_loading_worker):
    ui = RecordingUi()
    link = WorkerLink(ui, never_loading_worker)

    async def go():
        with pytest.raises(BackendError) as e:
            await asyncio.wait_for(link.ready(), WAIT)
        assert e.value.kind is Failure.UNAVAILABLE and "did not load within 0.2 s" in str(e.value)
        await link.close()

    asyncio.run(go())
    assert any(kind == "error" and "could not load the model: the model did not load within 0.2 s" in m
               for kind, m in ui.shown), ui.shown


def test_serve_api_answers_503_naming_a_load_that_ran_out_and_health_is_not_ok(never_loading_worker):
    from starlette.testclient import TestClient

    service = Service(never_loading_worker, Metrics(), timeout_s=WAIT)
    with TestClient(create_app(service, models=["diffusion-lsp"])) as http:
        done = http.post("/v1/completions", json={"prompt": "def f(", "suffix": ")", "max_tokens": 4})
        assert done.status_code == 503 and "did not load within 0.2 s" in done.json()["error"]["message"]
        health = http.get("/health")
        assert health.status_code == 503 and health.json()["status"] == "failed"
        assert "did not load within 0.2 s" in health.json()["worker"]["error"]


# ---- for real: serve-api, and a worker process that is killed and restarted ----

WIDE = {"type": "object", "properties": {f"f{i}": {"type": "string", "minLength": 16, "maxLength": 24}
                                         for i in range(16)},
        "required": [f"f{i}" for i in range(16)], "additionalProperties": False}  # 384 forwards, 25 s here


@pytest.mark.slow
def test_a_structured_request_whose_client_leaves_is_cancelled_in_the_worker(tmp_path):
    """The probe's case: a structured answer whose client left after 0.3 s was decoded to its end and held
    the next request as long. Now the worker reports it cancelled mid-decoding, and the next is answered."""
    from diffusion_lsp.engine import DEFAULT_MODEL
    from test_api import Api

    (tmp_path / "chat.jinja").write_text(TEMPLATE)
    api = Api(DEFAULT_MODEL, tmp_path / "run", "--chat-template", str(tmp_path / "chat.jinja"), "--timeout", "120")
    try:
        # no max_tokens: a constrained answer within 64 would be narrowed, or refused (16 x minLength 16)
        body = {"messages": [{"role": "user", "content": "A record"}],
                "response_format": {"type": "json_schema", "json_schema": {"name": "wide", "schema": WIDE}}}
        with pytest.raises(httpx.ReadTimeout):  # the client leaves while the answer is decoded
            httpx.post(api.base + "/v1/chat/completions", json=body, timeout=httpx.Timeout(120, read=2.0))
        after = httpx.post(api.base + "/v1/chat/completions", timeout=120,
                           json={"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
        assert after.status_code == 200, after.text
        log = (tmp_path / "run" / "worker.sock.log").read_text()
        assert "StructuredRequest" in log and ": cancelled (stopped after" in log, log[-2000:]
    finally:
        api.close()


WEDGED_WORKER = """
import dataclasses
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from test_hostile_worker import HostileEngine
from diffusion_lsp.worker.listener import bind, serve
from diffusion_lsp.worker.process import Worker, start

engine = HostileEngine()
engine.wedged = True  # its structured answers never look at their stop flag
engine.capabilities = dataclasses.replace(engine.capabilities, chat=True, structured=True)
worker = Worker(lambda: engine)
listener, lock = bind(Path(sys.argv[1]))
print("ready", flush=True)
start(worker)
serve(listener, worker, 0)
"""


@pytest.mark.slow
def test_a_worker_process_stuck_on_a_cancelled_order_is_killed_and_a_fresh_one_started(tmp_path):
    """The link gives up on the stuck worker process (SIGKILL), an order in flight fails saying why, the
    link says "restarting" until the next worker (the embedded model, spawned on the same socket) is
    ready, and that one answers."""
    socket_path = tmp_path / "sockets" / "w.sock"
    socket_path.parent.mkdir(mode=0o700)
    spec = WorkerSpec(socket_path, idle_exit_s=0)
    wedged = subprocess.Popen([sys.executable, "-c", WEDGED_WORKER, str(socket_path), str(Path(__file__).parent)],
                              stdout=subprocess.PIPE)
    ui = RecordingUi()
    link = WorkerLink(ui, spec, fill_timeout_s=3.0)
    link.stuck_grace_s = 0.5

    async def go():
        said, _, _ = select.select([wedged.stdout], [], [], WAIT)  # it listens (started here, not by the link)
        assert said and wedged.stdout.readline() == b"ready\n"
        await asyncio.wait_for(link.ready(), WAIT)
        assert link.describe()["pid"] == wedged.pid
        order = StructuredRequest(CHAT, json.dumps({"object": True}), 8)
        with pytest.raises(BackendError) as e:
            await link.structured("s", order)
        assert e.value.kind is Failure.TIMEOUT  # and the order is cancelled in the worker, which holds it
        with pytest.raises(BackendError) as e:  # in flight when the link gives up on the worker
            await link.fill("a.py", FillRequest("def f(x):\n", "\n", 4))
        assert e.value.kind is Failure.LOST and "has not let go of a cancelled order" in str(e.value)
        assert link.describe()["state"] == "restarting"
        await asyncio.wait_for(link.ready(), WAIT * 4)  # the fresh worker has loaded the embedded model
        said = link.describe()
        assert said["state"] == "ready" and said["pid"] not in (None, wedged.pid)
        fill = await link.fill("a.py", FillRequest("def f(x):\n    return ", "\n", 4))
        await link.close()
        return fill

    try:
        assert isinstance(asyncio.run(go()), Fill)
        assert wedged.wait(WAIT) == -signal.SIGKILL
        assert link.counts["worker_crashes"] == 1
        assert any("has not let go of a cancelled order" in m and "restarting it" in m for _, m in ui.shown)
    finally:
        if wedged.poll() is None:
            wedged.kill()


@pytest.mark.slow
@pytest.mark.parametrize("value", ["nan", "0", "inf"])
def test_a_load_timeout_that_is_no_deadline_is_one_line_and_exit_2(value):
    done = subprocess.run([sys.executable, "-m", "diffusion_lsp", "serve-api", "--load-timeout", value],
                          capture_output=True, text=True, timeout=WAIT)
    bound = "at most 86400 (a day)" if float(value) > 1 else "at least 1"  # inf: the re-run probe's case
    why = f"diffusion-lsp: error: --load-timeout must be {bound}, got {float(value)}"
    assert done.returncode == 2 and done.stderr.strip() == why


def test_the_editors_load_timeout_reaches_the_worker_it_starts():
    from diffusion_lsp.server.config import parse_config
    from diffusion_lsp.server.session import worker_spec

    cfg, problems = parse_config({"worker": {"loadTimeoutS": 45}})
    spec = worker_spec(cfg)
    assert problems == [] and spec.load_timeout_s == 45
    command = spec.command()
    assert command[command.index("--load-timeout") + 1] == "45.0"
    assert parse_config({"worker": {"loadTimeoutS": 0}})[1]  # no deadline at all is a bad value, reported


# ---- the in-process backend hands its structured orders the same stop ----

def test_the_in_process_backend_frees_its_model_thread_of_a_cancelled_structured_answer():
    """Its one model thread ran a cancelled structured answer to its end, and every call behind it waited."""
    from diffusion_lsp.backend.local import LocalBackend

    engine = HostileEngine()
    engine.answer = lambda orders, keys, stops=None: [Fill(o.prefix.upper(), [o.prefix.upper()], [1.0])
                                                      for o in orders]
    backend = LocalBackend(engine)

    async def go():
        held = asyncio.ensure_future(backend.structured("s", StructuredRequest(CHAT, json.dumps({"object": True}), 8)))
        await asyncio.get_running_loop().run_in_executor(None, engine.started.wait, WAIT)
        held.cancel()  # the caller goes away: the stop is set, the answer ends at its next forward
        with pytest.raises(asyncio.CancelledError):
            await held
        return await asyncio.wait_for(backend.fill("a.py", FillRequest("next", "", 4)), WAIT)

    try:
        assert asyncio.run(go()).text == "NEXT"  # the model thread is free without the release
    finally:
        engine.release.set()


def test_a_link_closed_while_it_waits_out_the_grace_kills_nobody():
    """The worker is shared: a session that closes (or switches model) during the grace must not kill
    it for the others because its own connection no longer answers."""
    link, client, ui = scripted_link([Pong(busy_s=0.06, stuck_s=0.0), None])

    async def go():
        client.ready.set()
        await link.ready()
        with pytest.raises(BackendError):
            await link.fill("a.py", FillRequest("x", "", 4))
        await link.close()
        client.connected = False  # what the real client's close does
        await asyncio.wait_for(link.check, WAIT)

    asyncio.run(go())
    assert client.killed == []
