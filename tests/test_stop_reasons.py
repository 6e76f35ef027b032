"""Why an order was stopped (protocol/failure.py Stop): one vocabulary on both sides of the worker's
socket. A dropped order's "no" carries its stop reason's value over the wire and is read back as the
same member; a reason the reader does not know, or none, is refused with the value named, never
guessed; and only a DROPPED failure has one."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

from diffusion_lsp.protocol.failure import BackendError, Failure, Stop
from diffusion_lsp.protocol.requests import FillRequest
from diffusion_lsp.protocol.settings import LaunchSettings
from diffusion_lsp.worker import wire
from diffusion_lsp.worker.client import WorkerClient
from diffusion_lsp.worker.spec import WorkerSpec

WAIT = 30  # seconds: only reached when a test is failing


@pytest.mark.parametrize("stop", list(Stop))
def test_a_stop_reason_crosses_the_wire_as_its_member(stop):
    said = wire.decode(wire.encode(BackendError.dropped(stop).message(7)))
    assert said == {"id": 7, "ok": False, "failure": "dropped", "error": stop.said, "stop": stop.value}
    back = BackendError.from_message(said)
    assert (back.kind, back.stop, str(back)) == (Failure.DROPPED, stop, stop.said)


@pytest.mark.parametrize("stop, why", [("vanished", "unknown stop reason 'vanished' (known: superseded, cancelled)"),
                                       (None, "unknown stop reason None"), ("SUPERSEDED", "'SUPERSEDED'")])
def test_a_stop_reason_this_side_does_not_know_is_refused_not_guessed(stop, why):
    said = {"id": 7, "ok": False, "failure": "dropped", "error": "gone", **({} if stop is None else {"stop": stop})}
    with pytest.raises(ValueError, match=why.replace("(", r"\(").replace(")", r"\)")):
        BackendError.from_message(said)


def test_a_stop_reason_goes_with_a_dropped_order_alone():
    with pytest.raises(ValueError, match="stop reason goes with DROPPED"):
        BackendError(Failure.DROPPED, "no reason")
    with pytest.raises(ValueError, match="stop reason goes with DROPPED"):
        BackendError(Failure.REFUSED, "failed", stop=Stop.CANCELLED)
    assert "stop" not in BackendError(Failure.REFUSED, "failed").message(1)
    assert BackendError.from_message({"id": 1, "ok": False, "failure": "busy", "stop": "vanished"}).stop is None


def _worker_answering(path, answers: list[dict]):
    """A worker socket at `path` that says hello (as this install's worker would) and answers each
    order it reads with the next of `answers` (under the order's id)."""
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(1)
    launch = LaunchSettings()
    hello = {"event": "hello", "version": wire.WIRE_VERSION, "pid": 1, "state": "ready",
             "model": wire.model_name(launch), "build": wire.build_id(), "weights": wire.weights_id(launch)}

    def talk():
        conn, _ = server.accept()
        conn.sendall(wire.encode(hello))
        lines = conn.makefile("rb")
        for answer in answers:
            order = wire.decode(lines.readline())
            conn.sendall(wire.encode({**answer, "id": order["id"]}))
        conn.recv(1)  # until the client hangs up

    threading.Thread(target=talk, daemon=True).start()
    return server


def test_the_client_reads_a_workers_stop_reason_and_refuses_one_it_does_not_know(tmp_path):
    path = tmp_path / "w.sock"
    server = _worker_answering(path, [
        {"ok": False, "failure": "dropped", "error": "superseded by a newer request", "stop": "superseded"},
        {"ok": False, "failure": "dropped", "error": "gone", "stop": "vanished"},
    ])
    client = WorkerClient(WorkerSpec(socket=path))

    async def go():
        await client.start()
        errors = []
        for _ in range(2):
            with pytest.raises(BackendError) as e:
                await asyncio.wait_for(client.ask("a.py", FillRequest("x", "", 4)), WAIT)
            errors.append(e.value)
        await client.close()
        return errors

    try:
        superseded, unknown = asyncio.run(go())
    finally:
        server.close()
    assert (superseded.kind, superseded.stop) == (Failure.DROPPED, Stop.SUPERSEDED)
    assert unknown.kind is Failure.REFUSED and unknown.stop is None
    assert str(unknown) == ("the worker's answer is unusable: unknown stop reason 'vanished' "
                            "(known: superseded, cancelled)")
