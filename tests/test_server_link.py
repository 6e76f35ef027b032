"""WorkerLink without a worker: the fill deadline and the restart of a worker that stops answering,
the crash-loop cap, model switching, one message per failure, and the worker's refusals as the
Backend's failures. The client is a fake whose events the link awaits, as it does the real one's."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from conftest import RecordingUi
from diffusion_lsp.protocol.settings import LaunchSettings
from diffusion_lsp.protocol.failure import BackendError, Failure, Stop
from diffusion_lsp.protocol.answers import Fill
from diffusion_lsp.protocol.requests import FillRequest
from diffusion_lsp.worker.client import Pong, WorkerUnavailable
from diffusion_lsp.worker.spec import WorkerSpec
from diffusion_lsp.worker import link as link_module
from diffusion_lsp.worker.link import RESTARTS_PER_MINUTE, WorkerLink

ORDER = FillRequest("x = ", "\n", 4)


class FakeClient:
    """`answer`: what fill does (a Fill, an exception, or "hang"); `pong`: what ping answers (busy_s, or a Pong)."""

    made: list[FakeClient] = []
    max_tokens = None  # the loaded model's largest canvas: not said by this fake
    capabilities = None  # nor what the model can do: the link takes our own models'

    def __init__(self, launch, answer=None, pong=0.0, fail_start=None):
        self.launch, self.events = launch, asyncio.Queue()
        self.answer, self.pong, self.fail_start = answer or Fill("1", ["1"], [0.9]), pong, fail_start
        self.connected, self.state, self.pid, self.error = False, "stopped", 4242, None
        self.killed = self.closed = self.starts = 0
        FakeClient.made.append(self)

    async def start(self):
        self.starts += 1
        if self.fail_start:
            raise WorkerUnavailable(self.fail_start)
        self.connected, self.state = True, "ready"

    def lose(self, reason: str) -> None:  # what the real client does when its worker goes away
        self.connected, self.state = False, "stopped"
        self.events.put_nowait({"event": "lost", "state": "stopped", "reason": reason})

    async def ask(self, key, order):  # the real client's signature
        if self.answer == "hang":
            await asyncio.Event().wait()
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer

    async def ping(self, timeout_s):
        return Pong(self.pong) if isinstance(self.pong, float) else self.pong

    def kill(self, why):
        self.killed += 1
        self.lose(f"the model worker (pid {self.pid}) exited with code -9")

    async def close(self):
        self.closed += 1


def make_link(**client):
    FakeClient.made = []
    ui = RecordingUi()
    link = WorkerLink(ui, WorkerSpec(Path("/tmp/w.sock")), lambda launch: FakeClient(launch, **client))
    return link, ui, link.counts


async def settle():
    """Loop turns enough for the link's supervisor to handle what the client said."""
    for _ in range(5):
        await asyncio.sleep(0)


@pytest.mark.parametrize("pong, restarted", [(None, True), (0.1, False), (1000.0, True)])
def test_a_fill_past_its_deadline_is_answered_and_a_worker_that_stopped_answering_is_restarted(pong, restarted):
    link, ui, stats = make_link(answer="hang", pong=pong)
    link.configure(link.spec, True, 0.05)

    async def go():
        with pytest.raises(BackendError, match="fillTimeoutS") as e:
            await link.fill("a.py", ORDER)
        assert e.value.kind is Failure.TIMEOUT
        await link.check
        await settle()  # the supervisor hears of the lost worker and starts it again

    asyncio.run(go())
    first = FakeClient.made[0]
    assert stats["fill_timeouts"] == 1 and first.killed == int(restarted)
    if restarted:
        assert stats["worker_crashes"] == 1 and first.starts == 2  # killed, lost, started again
        assert sum("restarting it" in m for _, m in ui.shown) == 2  # the hang, then the restart notice
    else:
        assert any("worker.fillTimeoutS" in m for _, m in ui.logged) and ui.shown == []


def test_crash_loops_are_capped_then_restart_on_the_next_request():
    link, ui, stats = make_link()

    async def go():
        assert await link.fill("a.py", ORDER) == Fill("1", ["1"], [0.9])
        client = FakeClient.made[0]
        for _ in range(RESTARTS_PER_MINUTE + 2):
            client.lose("the model worker (pid 4242) exited with code 1")
            await settle()
        starts_after_crashes = client.starts
        client.connected = False
        await link.fill("a.py", ORDER)  # a request still restarts it
        return starts_after_crashes, client.starts

    after_crashes, after_request = asyncio.run(go())
    assert after_crashes == 1 + RESTARTS_PER_MINUTE and after_request == after_crashes + 1
    assert stats["worker_crashes"] == RESTARTS_PER_MINUTE + 2
    assert [k for k, _ in ui.shown] == ["warning"]  # one notice, not one per crash
    assert any("next request only" in m for _, m in ui.logged)


def test_another_model_closes_the_old_worker_and_starts_the_new_one_on_demand():
    link, ui, stats = make_link()
    other = WorkerSpec(Path("/tmp/other.sock"), LaunchSettings(path="/models/other"))

    async def go():
        await link.fill("a.py", ORDER)
        link.configure(other, True, 10.0)
        await asyncio.sleep(0)
        await link.fill("a.py", ORDER)

    asyncio.run(go())
    old, new = FakeClient.made
    assert old.closed == 1 and new.launch == other and new.starts == 1
    assert link.describe()["socket"] == "/tmp/other.sock"


def test_a_worker_that_cannot_start_is_reported_once_and_requests_stay_empty():
    link, ui, stats = make_link(fail_start="no worker answers on /tmp/w.sock")

    async def go():
        for _ in range(3):
            with pytest.raises(BackendError) as e:
                await link.fill("a.py", ORDER)
            assert e.value.kind is Failure.UNAVAILABLE

    asyncio.run(go())
    assert ui.shown == [("error", "diffusion-lsp: could not start the model worker: no worker answers on /tmp/w.sock")]


@pytest.mark.parametrize("kind", list(Failure))
def test_a_refusal_crosses_the_wire_as_it_was_said(kind):
    stop = Stop.CANCELLED if kind is Failure.DROPPED else None  # a dropped order says why
    back = BackendError.from_message(BackendError(kind, "why", "max_tokens", stop).message(1))
    assert (back.kind, str(back), back.param) == (kind, "why", "max_tokens")


@pytest.mark.parametrize("failure, kind", [(k.value, k) for k in Failure] + [("something new", Failure.REFUSED)])
def test_the_workers_refusals_are_the_backends_failures(failure, kind):
    said = {"id": 1, "ok": False, "failure": failure, "error": "why", "param": "max_tokens",
            **({"stop": "superseded"} if kind is Failure.DROPPED else {})}
    link, ui, stats = make_link(answer=BackendError.from_message(said))
    with pytest.raises(BackendError) as e:
        asyncio.run(link.fill("a.py", ORDER))
    assert e.value.kind is kind and e.value.retryable is (kind in (Failure.STARTING, Failure.LOST, Failure.TIMEOUT,
                                                                    Failure.BUSY))
    assert e.value.param == "max_tokens" and str(e.value).endswith("why")
    assert (("error", "fill failed: why") in ui.logged) == (kind is Failure.REFUSED)


def test_orders_the_model_failed_are_shown_at_most_once_per_window_and_each_logged(monkeypatch):
    # a user's log: "fill failed: RuntimeError: ..." on every key while retyping, and nothing on screen
    said = BackendError(Failure.REFUSED, "RuntimeError: Size does not match at dimension 0")
    link, ui, stats = make_link(answer=said)

    async def fail(n):
        for _ in range(n):
            with pytest.raises(BackendError):
                await link.fill("a.py", ORDER)

    asyncio.run(fail(3))
    assert [m for _, m in ui.logged].count(f"fill failed: {said}") == 3 and stats["model_failures"] == 3
    assert ui.shown == [("warning", f"diffusion-lsp: the model failed a fill ({said}); suggestions may be missing "
                                    "(1 failed order so far; each is in the log)")]
    assert link.describe()["last_failure"] == f"fill failed: {said}"
    monkeypatch.setattr(link_module, "FAILURE_SHOWN_EVERY_S", 0.0)  # the window has passed
    asyncio.run(fail(1))
    assert len(ui.shown) == 2 and "(4 failed orders so far" in ui.shown[1][1]


def test_completions_off_means_no_worker():
    link, ui, stats = make_link()
    link.configure(link.spec, False, 10.0)
    with pytest.raises(BackendError) as e:
        asyncio.run(link.fill("a.py", ORDER))
    assert e.value.kind is Failure.OFF and FakeClient.made == []
