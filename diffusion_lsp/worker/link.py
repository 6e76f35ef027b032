"""The shared model worker as a Backend (protocol/backend.py): `await link.fill(key, order) -> Fill`.

Above the socket client, it owns the worker's life cycle: started on demand with a progress report
while the model loads, one clear message when it cannot start or load, one notice and a restart when
it crashes (at most RESTARTS_PER_MINUTE, then on the next request only), and a deadline on every
order: past `fill_timeout_s` it fails with TIMEOUT (and is cancelled in the worker), and a worker
that then does not answer a ping (stopped, hung), whose model thread is gone, or whose model thread
still holds a cancelled order STUCK_GRACE_S later, is killed and restarted; until the new one is
ready the link says "restarting" and why (`describe`: serve-api's /health). It reports to a person
through a Reporter and counts into `counts`; it calls none of its callers back. What the client
hears from the worker (ready, failed, lost) a supervising task of the link awaits (`_supervise`).
Probes: model/decoding/probe.py; rewrites: model/families/native.py; instructions: formats/instruct.py."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from contextlib import asynccontextmanager
from collections.abc import AsyncIterator, Callable

from ..protocol.capabilities import Capabilities
from ..protocol.backend import Reporter
from ..protocol.failure import BackendError, Failure
from ..protocol.answers import Answered, Draft, Fill, Probed
from ..protocol.requests import FillRequest, InstructRequest, ProbeRequest, RewriteRequest, StructuredRequest
from .client import Pong, WorkerClient, WorkerUnavailable
from ..lifecycle import deadline
from ..protocol.backend import FILL_TIMEOUT_S
from .spec import WorkerSpec

RESTARTS_PER_MINUTE = 3  # beyond this, a crashed worker restarts on the next request only
PING_TIMEOUT_S = 2.0  # the worker's socket thread answers a ping at once, even mid-batch
HUNG_FACTOR = 3.0  # a batch running this many fill deadlines is stuck: restart the worker
# a model thread lets go of a cancelled order at its next denoising step or forward (the embedded model's
# forward takes milliseconds here; this leaves room for a large checkpoint's on a CPU): one that has not is stuck
STUCK_GRACE_S = 10.0
# an order the model failed (a bug on the model's side, not the input's) is logged each time and shown at most
# once per this long: while typing, a failure that repeats would be a notice per key
FAILURE_SHOWN_EVERY_S = 300.0


class _Progress:
    """One progress report at a time, begun when the worker starts and ended when the model is ready
    or has failed, even when that happens while the editor is still creating its token."""

    def __init__(self, ui: Reporter):
        self.ui, self.active, self.begun, self.token, self.ended = ui, False, False, None, None

    async def begin(self, title: str, message: str) -> None:
        if self.active:
            return
        self.active, self.begun, self.ended = True, False, None
        self.token = await self.ui.progress_begin(title, message)
        self.begun = True
        if self.ended is not None:
            self.end(self.ended)

    def end(self, message: str) -> None:
        if not self.active:
            return
        if not self.begun:
            self.ended = message
            return
        self.active = False
        self.ui.progress_end(self.token, message)


class WorkerLink:
    OWN_MODEL = Capabilities(probe=True, drafts=True)  # our own models' (engine.Engine), until the worker says

    @property
    def capabilities(self) -> Capabilities:
        """What the worker's model can do, as its state event says once it is loaded; until then our
        own models' (a model transformers runs cannot probe, and rewrites instead)."""
        said = self.client.capabilities if self.client is not None else None
        return said or self.OWN_MODEL

    def __init__(self, ui: Reporter, spec: WorkerSpec, client_factory: Callable[[WorkerSpec], WorkerClient] = WorkerClient,
                 fill_timeout_s: float = FILL_TIMEOUT_S):
        self.ui, self.spec, self._new_client = ui, spec, client_factory
        self.enabled, self.fill_timeout_s = True, fill_timeout_s
        self.client: WorkerClient | None = None
        self.progress = _Progress(ui)
        self.counts = {"worker_crashes": 0, "fill_timeouts": 0, "model_failures": 0}
        self._shown_failure: str | None = None
        self._last_refused: str | None = None  # the last order the model failed, and why (`describe`)
        self._refused_shown_at: float | None = None  # monotonic, when a failed order was last shown
        self._crashes: deque[float] = deque()
        self._checking = False
        self.stuck_grace_s = STUCK_GRACE_S
        self._restarting: str | None = None  # why the worker is being restarted, until the new one is ready
        self._supervisor: asyncio.Task | None = None
        self.check: asyncio.Future | None = None  # the last liveness check a missed deadline started

    def configure(self, spec: WorkerSpec, enabled: bool, fill_timeout_s: float) -> None:
        """New settings; another model or socket means another worker (connected on demand)."""
        self.enabled, self.fill_timeout_s = enabled, fill_timeout_s
        if spec != self.spec:
            self.spec = spec
            self._drop_client()

    def _drop_client(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
            self._supervisor = None
        if self.client is not None:
            client, self.client = self.client, None
            asyncio.ensure_future(client.close())

    async def ensure(self) -> WorkerClient | None:
        """Connect to (or start) the worker; None when completions are off or it fails (reported)."""
        if not self.enabled:
            return None
        if self.client is None:
            self.client = self._new_client(self.spec)
            self._supervisor = asyncio.ensure_future(self._supervise(self.client))
        client = self.client
        if not client.connected:
            await self.progress.begin("diffusion-lsp", "loading the model")
            try:
                await client.start()
            except (WorkerUnavailable, OSError, RuntimeError, ValueError) as e:
                self._restarting = None  # not restarting: it cannot start (said below)
                self.progress.end("the model worker is unavailable")
                self._report_failure(f"could not start the model worker: {e}")
                return None
            if client.state != "loading":
                self.progress.end(f"model {client.state}")
        return client

    async def start(self) -> None:
        """Connect to the worker, or start it (the model loads meanwhile); failures are reported."""
        await self.ensure()

    async def ready(self) -> None:
        """Return once the model is loaded (starting the worker if need be); BackendError when it
        cannot start or failed to load. Awaited, never polled: the client says when its state changes."""
        while True:
            client = await self.ensure()
            if client is None:
                why = self._shown_failure or "completions are off"
                raise BackendError(Failure.OFF if not self.enabled else Failure.UNAVAILABLE,
                                   f"the model worker is unavailable: {why}")
            await client.settled()
            if client.state == "ready":
                return
            if client.state == "failed":
                raise BackendError(Failure.UNAVAILABLE, f"the model failed to load: {client.error}")
            await asyncio.sleep(0)  # lost while loading: the next pass starts it again

    async def fill(self, key: str, order: FillRequest) -> Fill:
        """The worker's fill. Raises BackendError. Cancelling this coroutine cancels the fill in the worker."""
        return await self._call("fill", key, order)

    async def probe(self, key: str, order: ProbeRequest) -> Probed:
        """The worker's probe, with the same deadline and failures as `fill`."""
        return await self._call("probe", key, order)

    async def rewrite(self, key: str, order: RewriteRequest) -> Fill:
        """A region rewritten from an edit prompt, where the worker's model is asked so (capabilities.rewrite)."""
        if not self.capabilities.rewrite:
            raise BackendError(Failure.INVALID, "the model worker's model rewrites no region from a prompt "
                                                "(capabilities.rewrite)")
        return await self._call("rewrite", key, order)

    async def instruct(self, key: str, order: InstructRequest) -> Fill:
        """A region rewritten as an instruction says: every model answers one."""
        return await self._call("instruct", key, order)

    async def structured(self, key: str, order: StructuredRequest) -> Answered:
        """A conversation answered in JSON under constraints, where the worker's model decodes so
        (capabilities.structured)."""
        if not self.capabilities.structured:
            raise BackendError(Failure.INVALID, "the model worker's model decodes no JSON under constraints "
                                                "(capabilities.structured)")
        return await self._call("structured", key, order)

    async def stream(self, key: str, order: FillRequest) -> AsyncIterator[Draft | Fill]:
        """The fill's drafts after each denoising step, then the fill; the deadline is the whole stream's."""
        client = await self._client()
        end = time.monotonic() + self.fill_timeout_s
        items = client.stream(key, order)
        try:
            while True:
                try:
                    async with self._guard("fill", client, end - time.monotonic()):
                        item = await items.__anext__()
                except StopAsyncIteration:
                    return
                yield item
        finally:
            await items.aclose()

    async def fill_many(self, orders: list[FillRequest]) -> list[Fill | BackendError]:
        """Each order under a key of its own, sent at once: the worker decodes them as batches."""
        async def one(i: int, order: FillRequest):
            try:
                return await self.fill(f"batch:{id(orders)}:{i}", order)
            except BackendError as e:
                return e
        return list(await asyncio.gather(*(one(i, o) for i, o in enumerate(orders))))

    async def _client(self) -> WorkerClient:
        client = await self.ensure()
        if client is None:
            raise BackendError(Failure.OFF if not self.enabled else Failure.UNAVAILABLE,
                               f"the model worker is not available{': ' + self._shown_failure if self._shown_failure else ''}")
        return client

    async def _call(self, op: str, key: str, order):
        client = await self._client()
        async with self._guard(op, client):
            return await client.ask(key, order)

    @asynccontextmanager
    async def _guard(self, op: str, client: WorkerClient, seconds: float | None = None) -> AsyncIterator[None]:
        """The body within `seconds` (the order's deadline by default), its failures as BackendErrors; a missed
        deadline is counted and starts a liveness check."""
        def missed() -> None:
            self.counts["fill_timeouts"] += 1
            self.suspect()
        try:
            async with deadline(max(0.0, self.fill_timeout_s if seconds is None else seconds),
                                f"no {op} within worker.fillTimeoutS ({self.fill_timeout_s:g} s)", missed):
                yield
        except WorkerUnavailable as e:
            kind = Failure.STARTING if client.connected and client.state == "loading" else Failure.LOST
            raise BackendError(kind, str(e)) from None
        except BackendError as e:
            if e.kind is Failure.REFUSED:
                self._refused(op, e)
            raise

    def _refused(self, op: str, error: BackendError) -> None:
        """An order the model failed: logged and counted each time, shown at most once per
        FAILURE_SHOWN_EVERY_S with the count so far (the log has each one)."""
        self.counts["model_failures"] += 1
        self._last_refused = f"{op} failed: {error}"
        self.ui.log("error", self._last_refused)
        now = time.monotonic()
        if self._refused_shown_at is None or now - self._refused_shown_at >= FAILURE_SHOWN_EVERY_S:
            self._refused_shown_at = now
            n = self.counts["model_failures"]
            self.ui.show("warning", f"diffusion-lsp: the model failed a {op} ({error}); suggestions may be missing "
                                    f"({n} failed order{'s' * (n != 1)} so far; each is in the log)")

    def suspect(self) -> None:
        """A call got no answer in time (this link's deadline, or a caller's shorter one: serve-api's
        request timeout): check that the worker is alive, and restart it when it is not."""
        if self.client is not None and self.client.connected:
            self.check = asyncio.ensure_future(self._check_alive(self.client))

    async def _check_alive(self, client: WorkerClient) -> None:
        """After a missed deadline (whose order was cancelled in the worker): a worker that does not
        answer a ping, whose model thread is gone, has held a cancelled order for `stuck_grace_s`, or
        has run one batch for HUNG_FACTOR deadlines, is killed; its lost connection restarts it. One
        that is still within the grace is asked again once the grace is over."""
        if self._checking:
            return
        self._checking = True
        try:
            why = self._stuck(pong := await client.ping(PING_TIMEOUT_S))
            if why is None and pong.stuck_s is not None:  # a stopped order not let go yet: look again after its grace
                await asyncio.sleep(self.stuck_grace_s - pong.stuck_s)
                if client is not self.client or not client.connected:  # closed, replaced or lost meanwhile
                    return
                why = self._stuck(pong := await client.ping(PING_TIMEOUT_S))
            if why is None:
                self.ui.log("warning", f"a fill took over {self.fill_timeout_s:g} s (the worker's batch has run "
                                       f"{pong.busy_s:.1f} s); a slow model may need a larger worker.fillTimeoutS")
                return
            why = f"the model worker (pid {client.pid}) {why}"
            self._restarting = why
            self._report_failure(f"{why}; restarting it")
            client.kill(why)
        finally:
            self._checking = False

    def _stuck(self, pong: Pong | None) -> str | None:
        """Why a worker that answered `pong` must be restarted, or None."""
        if pong is None:
            return "does not answer"
        if pong.dead:
            return f"lost its model thread ({pong.dead})"
        if pong.stuck_s is not None and pong.stuck_s >= self.stuck_grace_s:
            return f"has not let go of a cancelled order in {pong.stuck_s:.0f} s (its model thread is stuck)"
        if pong.busy_s >= HUNG_FACTOR * self.fill_timeout_s:
            return f"has run one batch for {pong.busy_s:.0f} s"
        return None

    async def _supervise(self, client: WorkerClient) -> None:
        """What the worker says, as it says it: ready, failed to load, or gone (then restarted)."""
        while True:
            message = await client.events.get()
            event, state = message.get("event"), message.get("state")
            if event == "lost":
                await self._lost(message.get("reason", "the model worker was lost"))
            elif state == "ready":
                self._shown_failure = self._restarting = None
                self.progress.end("model ready")
                self.ui.log("info", f"model worker pid {message.get('pid') or client.pid} is ready")
            elif state == "failed":
                self._restarting = None
                self.progress.end("the model failed to load")
                self._report_failure(f"could not load the model: {message.get('error')}. Completions are off "
                                     "until it loads; check the model.path setting or `serve --model DIR`")

    async def _lost(self, reason: str) -> None:
        self.counts["worker_crashes"] += 1
        now = time.monotonic()
        self._crashes.append(now)
        while self._crashes and now - self._crashes[0] > 60:
            self._crashes.popleft()
        if self.counts["worker_crashes"] == 1:
            self.ui.show("warning", f"diffusion-lsp: {reason}; restarting it")
        self.ui.log("warning", f"{reason}; restarting it")
        self._shown_failure, self._restarting = None, reason
        if len(self._crashes) <= RESTARTS_PER_MINUTE:
            await self.ensure()
        else:
            self.ui.log("warning", f"more than {RESTARTS_PER_MINUTE} crashes in a minute: "
                                   "the worker restarts on the next request only")

    def _report_failure(self, message: str) -> None:
        self.ui.log("error", message)
        if message != self._shown_failure:  # once, not on every request
            self._shown_failure = message
            self.ui.show("error", f"diffusion-lsp: {message}")

    async def close(self) -> None:
        if self._supervisor is not None:
            self._supervisor.cancel()
        if self.client is not None:
            await self.client.close()

    def describe(self) -> dict:
        """The worker as serve-api's /health shows it: "restarting" (and why) from the moment the link
        gives up on a worker until its successor is ready."""
        c = self.client
        state = "restarting" if self._restarting else c.state if c else "stopped"
        return {"pid": c.pid if c else None, "state": state,
                "error": self._restarting or (c.error if c else None) or self._shown_failure,
                "socket": str(self.spec.socket),
                "max_tokens": c.max_tokens if c else None,
                "capabilities": c.capabilities.message() if c and c.capabilities else None,  # once the model says
                "last_failure": self._last_refused}  # the last order the model failed (counts: model_failures)
