"""An engine in this process as a Backend (protocol/backend.py): what the command line (`fim`), the evaluations
and tests use. The model runs in one thread of its own, one call at a time, so the event loop that
awaits it stays free, and it is loaded there too (`loading`): torch's OpenMP threads are per calling
thread, and a model loaded on one thread and run on another ran slower here (a 16-token fill on the
embedded model, 2 threads: 62-75 ms loaded and run on one thread, 108-143 ms loaded on the main
thread and run on another; with 1 thread both 65-87 ms). A newer order with the same key supersedes
an older one as in the worker (one still running is abandoned between denoising steps), and
cancelling a call abandons its order the same way. `fill_many` decodes the orders as one batch.
Stopped between steps as model/decoding/stop.py says; rewrites are for native models (model/families/native.py)."""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

from ..protocol.capabilities import Capabilities
from ..protocol.failure import BackendError, Failure, Stop
from ..protocol.answers import Answered, Draft, Fill, Probed
from ..protocol.requests import FillRequest, InstructRequest, ProbeRequest, RewriteRequest, StructuredRequest
from ..lifecycle import Latest
from ..model.decoding.stop import OrderStopped


class LocalBackend:
    @property
    def capabilities(self) -> Capabilities:
        """The engine's (no drafts: `stream` gives the fill alone)."""
        said = self.engine.capabilities
        return Capabilities(probe=said.probe, rewrite=said.rewrite)

    def __init__(self, engine):
        self.engine = engine  # diffusion_lsp.engine.Engine
        self._thread: ThreadPoolExecutor | None = None  # the model's thread, made on first use
        self._latest = Latest(lambda key: threading.Event())  # by key: the stop flag of its newest order

    @classmethod
    def loading(cls, load) -> LocalBackend:
        """The backend of the engine `load()` returns, loaded on the model's own thread (raises what
        `load` raises)."""
        backend = cls(None)
        backend.engine = backend.on_model_thread(load)
        return backend

    def on_model_thread(self, fn, *args):
        """fn(*args) on the model's thread, waited for: torch work outside the orders (a loss)."""
        return self._pool().submit(fn, *args).result()

    def _pool(self) -> ThreadPoolExecutor:
        if self._thread is None:
            self._thread = ThreadPoolExecutor(1, thread_name_prefix="diffusion-lsp-model")
        return self._thread

    async def start(self) -> None:
        """The engine is loaded before the backend is made."""

    async def ready(self) -> None:
        """The engine is loaded before the backend is made."""

    async def fill(self, key: str, order: FillRequest) -> Fill:
        with self._latest.take(key) as stop:
            (fill,) = await self._run(stop, self.engine.answer, [order], [key], [stop])
        if fill is None:
            raise BackendError.dropped(Stop.SUPERSEDED, "superseded by a newer fill")
        return fill

    async def stream(self, key: str, order: FillRequest) -> AsyncIterator[Draft | Fill]:
        """No drafts (capabilities.drafts is false): the fill alone."""
        yield await self.fill(key, order)

    async def probe(self, key: str, order: ProbeRequest) -> Probed:
        with self._latest.take(key) as stop:
            return await self._run(stop, self.engine.answer_probe, order, key)

    async def rewrite(self, key: str, order: RewriteRequest) -> Fill:
        """A region rewritten from an edit prompt (a model asked in chat: a native model); INVALID for
        our own models, which re-mask a region instead (capabilities.rewrite)."""
        with self._latest.take(key) as stop:
            return await self._run(stop, self.engine.answer_rewrite, order, stop)

    async def instruct(self, key: str, order: InstructRequest) -> Fill:
        """A region rewritten as an instruction says."""
        with self._latest.take(key) as stop:
            return await self._run(stop, self.engine.answer_instruct, order, stop)

    async def structured(self, key: str, order: StructuredRequest) -> Answered:
        """JSON or tool calls under constraints; INVALID for a model without a chat
        template or whose decoding is transformers' (capabilities.structured)."""
        with self._latest.take(key) as stop:
            return await self._run(stop, self.engine.answer_structured, order, stop)

    async def fill_many(self, orders: list[FillRequest]) -> list[Fill | BackendError]:
        """One batch (one forward pass per step for all); when the batch as a whole is refused, each
        order alone, so that only the bad ones fail."""
        if not orders:
            return []
        stop = threading.Event()
        try:
            fills = await self._run(stop, self.engine.answer, orders, [""] * len(orders))
            return [f if f is not None else BackendError.dropped(Stop.CANCELLED) for f in fills]
        except BackendError as e:
            if len(orders) == 1:
                return [e]
        return [(await self.fill_many([o]))[0] for o in orders]

    async def _run(self, stop: threading.Event, fn, *args):
        """fn(*args) in the model's thread; cancelling the caller sets `stop` (the sampler checks it
        between steps, a structured answer before each forward). A ValueError
        (an order that does not fit the model) is INVALID; anything else is a bug, raised as it is."""
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._pool(), functools.partial(fn, *args))
        except OrderStopped:
            raise BackendError.dropped(Stop.SUPERSEDED, "superseded by a newer order") from None
        except asyncio.CancelledError:
            stop.set()
            raise
        except ValueError as e:
            raise BackendError(Failure.INVALID, str(e)) from None

    def describe(self) -> dict:
        return {"backend": "local", "state": "ready", "max_tokens": self.engine.max_tokens()}

    async def close(self) -> None:
        """Stop what is still running. The model's thread stays (it holds the model's torch state,
        see the module's docstring) and ends with the process; the backend can be used again."""
        self._latest.supersede_all()
