"""The in-process backend (backend/local.py) over a fake engine: every torch call on one thread (the
model is loaded where it runs), supersession and cancellation between steps, and a batch that fails
as a whole retried order by order so only the bad ones fail."""

from __future__ import annotations

import asyncio
import threading

import pytest

from diffusion_lsp.protocol.failure import BackendError, Failure
from diffusion_lsp.backend.local import LocalBackend
from diffusion_lsp.protocol.answers import Fill
from diffusion_lsp.protocol.requests import FillRequest


class FakeEngine:
    """Records the thread of every call; `answer` steps until released or stopped, as the sampler's
    Decoding does when the engine drives it; a prefix "bad" does not fit the model (ValueError)."""

    def __init__(self):
        self.threads = {threading.get_ident()}  # where it was made: its load
        self.started, self.release = threading.Event(), threading.Event()
        self.batches = []

    def answer(self, orders, keys, stops=None):
        self.threads.add(threading.get_ident())
        if any(o.prefix == "bad" for o in orders):
            raise ValueError("the canvas does not fit the model")
        self.batches.append([o.prefix for o in orders])
        self.started.set()
        while not self.release.wait(0.005):
            if stops and all(s.is_set() for s in stops):
                return [None] * len(orders)
        return [Fill(o.prefix.upper(), [o.prefix.upper()], [1.0], batch=len(orders)) for o in orders]

    def answer_probe(self, order, key=None):
        self.threads.add(threading.get_ident())
        raise AssertionError("not asked here")


def test_the_engine_is_loaded_and_run_on_the_models_own_thread():
    backend = LocalBackend.loading(FakeEngine)
    backend.engine.release.set()
    fill = asyncio.run(backend.fill("a", FillRequest("x", "", 4)))
    assert fill.text == "X" and len(backend.engine.threads) == 1
    assert backend.engine.threads != {threading.get_ident()}  # not the caller's (the event loop's) thread


def test_a_newer_order_for_the_same_key_drops_the_older_between_steps():
    backend = LocalBackend.loading(FakeEngine)
    engine = backend.engine

    async def go():
        old = asyncio.ensure_future(backend.fill("doc", FillRequest("old", "", 4)))
        await asyncio.get_running_loop().run_in_executor(None, engine.started.wait, 30)
        new = asyncio.ensure_future(backend.fill("doc", FillRequest("new", "", 4)))
        with pytest.raises(BackendError) as e:
            await old
        engine.release.set()
        return e.value, await new

    dropped, fill = asyncio.run(go())
    assert dropped.kind is Failure.DROPPED and fill.text == "NEW" and engine.batches == [["old"], ["new"]]


def test_a_batch_refused_as_a_whole_is_asked_order_by_order():
    backend = LocalBackend.loading(FakeEngine)
    backend.engine.release.set()
    got = asyncio.run(backend.fill_many([FillRequest("a", "", 4), FillRequest("bad", "", 4), FillRequest("c", "", 4)]))
    assert [g.text if isinstance(g, Fill) else g.kind for g in got] == ["A", Failure.INVALID, "C"]
    assert backend.engine.batches == [["a"], ["c"]]  # the batch of three failed before it started
