"""The model worker as the completer sees it: `await link.fill(key, order) -> Fill | None`.

Below the completer and above the socket client, it owns the worker's life cycle: started on
demand with $/progress while the model loads, one clear message when it cannot start or load, one
notice and a restart when it crashes (at most RESTARTS_PER_MINUTE, then on the next request only),
and a deadline on every fill: past `worker.fillTimeoutS` the request is answered empty, and a
worker that then does not answer a ping (stopped, hung) is killed and restarted. It reports to the
user through a `Ui` sink and counts into `Stats`; it never calls back into its callers."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Protocol

from .client import Launch, WorkerClient, WorkerUnavailable
from .stats import Stats
from .wire import Fill, FillOrder, FillRefused, ProbeOrder, Probed

RESTARTS_PER_MINUTE = 3  # beyond this, a crashed worker restarts on the next request only
PING_TIMEOUT_S = 2.0  # the worker's socket thread answers a ping at once, even mid-batch
HUNG_FACTOR = 3.0  # a batch running this many fill deadlines is stuck: restart the worker


class Ui(Protocol):
    def show(self, kind: str, message: str) -> None: ...  # kind: error | warning | info | debug
    def log(self, kind: str, message: str) -> None: ...
    async def progress_begin(self, title: str, message: str) -> object: ...
    def progress_end(self, token: object, message: str) -> None: ...


class Unavailable(Exception):
    """The model could not answer (off, not loaded, failed, gone, past its deadline): answered
    empty and not cached. The message says why; `kind` is off | starting | lost | timeout | refused |
    invalid (serve-api retries a fill whose worker was lost, answers an invalid one 400 naming
    `param`, and the others with their status)."""

    def __init__(self, message: str, kind: str = "off", param: str | None = None):
        super().__init__(message)
        self.kind, self.param = kind, param


class _Progress:
    """One $/progress at a time, begun when the worker starts and ended when the model is ready or
    has failed, even when that happens while the client is still creating the token."""

    def __init__(self, ui: Ui):
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


ClientFactory = Callable[[Launch, Callable[[dict], None], Callable[[str], None]], WorkerClient]


class WorkerLink:
    can_probe = True  # nextedit's remask-and-refine asks the model how sure it is of given tokens

    def __init__(self, ui: Ui, stats: Stats, launch: Launch, client_factory: ClientFactory = WorkerClient):
        self.ui, self.stats, self.launch, self._new_client = ui, stats, launch, client_factory
        self.enabled, self.fill_timeout_s = True, 10.0
        self.client: WorkerClient | None = None
        self.progress = _Progress(ui)
        self._shown_failure: str | None = None
        self._crashes: deque[float] = deque()
        self._checking = False
        self.check: asyncio.Future | None = None  # the last liveness check a missed deadline started

    def configure(self, launch: Launch, enabled: bool, fill_timeout_s: float) -> None:
        """New settings; another model or socket means another worker (connected on demand)."""
        self.enabled, self.fill_timeout_s = enabled, fill_timeout_s
        if launch != self.launch:
            self.launch = launch
            if self.client is not None:
                client, self.client = self.client, None
                asyncio.ensure_future(client.close())

    async def ensure(self) -> WorkerClient | None:
        """Connect to (or start) the worker; None when completions are off or it fails (reported)."""
        if not self.enabled:
            return None
        if self.client is None:
            self.client = self._new_client(self.launch, self._on_event, self._on_lost)
        client = self.client
        if not client.connected:
            await self.progress.begin("diffusion-lsp", "loading the model")
            try:
                await client.start()
            except (WorkerUnavailable, OSError, RuntimeError, ValueError) as e:
                self.progress.end("the model worker is unavailable")
                self._report_failure(f"could not start the model worker: {e}")
                return None
            if client.state != "loading":
                self.progress.end(f"model {client.state}")
        return client

    async def fill(self, key: str, order: FillOrder, on_draft=None) -> Fill | None:
        """The worker's fill; None when the worker dropped it for a newer one. Raises Unavailable.
        Cancelling this coroutine cancels the fill in the worker. With `order.drafts`, on_draft gets
        each draft (wire.DraftEvent)."""
        return await self._call("fill", key, order, on_draft)

    async def probe(self, key: str, order: ProbeOrder) -> Probed | None:
        """The worker's probe (model/probe.py), with the same deadline and failures as `fill`."""
        return await self._call("probe", key, order)

    async def _call(self, op: str, key: str, order, on_draft=None):
        client = await self.ensure()
        if client is None:
            raise Unavailable("the model worker is not available", "off")
        ask = client.fill(key, order, on_draft) if op == "fill" else client.probe(key, order)
        try:
            return await asyncio.wait_for(ask, self.fill_timeout_s)
        except asyncio.TimeoutError:
            self.stats.fill_timeouts += 1
            self.suspect()
            raise Unavailable(f"no {op} within worker.fillTimeoutS ({self.fill_timeout_s:g} s)", "timeout") from None
        except WorkerUnavailable as e:
            kind = "starting" if client.connected and client.state == "loading" else "lost"
            raise Unavailable(str(e), kind) from None
        except FillRefused as e:
            if e.reason in ("superseded", "cancelled"):
                return None
            if e.reason == "invalid":  # the input's problem, the same on every try
                raise Unavailable(e.error or f"the {op} does not fit the model", "invalid", e.param) from None
            if e.reason == "error":
                self.ui.log("error", f"{op} failed: {e.error}")
            kind = "refused" if e.reason == "error" else "off"
            raise Unavailable(f"the worker refused the {op}: {e}", kind) from None

    def suspect(self) -> None:
        """A call got no answer in time (this link's deadline, or a caller's shorter one: serve-api's
        request timeout): check that the worker is alive, and restart it when it is not."""
        if self.client is not None and self.client.connected:
            self.check = asyncio.ensure_future(self._check_alive(self.client))

    async def _check_alive(self, client: WorkerClient) -> None:
        """After a missed deadline: a worker that does not answer a ping, or whose batch has run
        for HUNG_FACTOR deadlines, is killed; its lost connection restarts it."""
        if self._checking:
            return
        self._checking = True
        try:
            busy = await client.ping(PING_TIMEOUT_S)
            if busy is not None and busy < HUNG_FACTOR * self.fill_timeout_s:
                self.ui.log("warning", f"a fill took over {self.fill_timeout_s:g} s (the worker's batch has run "
                                       f"{busy:.1f} s); a slow model may need a larger worker.fillTimeoutS")
                return
            why = "does not answer" if busy is None else f"has run one batch for {busy:.0f} s"
            self._report_failure(f"the model worker (pid {client.pid}) {why}; restarting it")
            client.kill()
        finally:
            self._checking = False

    def _on_event(self, message: dict) -> None:
        state = message.get("state")
        if state == "ready":
            self._shown_failure = None
            self.progress.end("model ready")
            self.ui.log("info", f"model worker pid {message.get('pid') or self._pid()} is ready")
        elif state == "failed":
            self.progress.end("the model failed to load")
            self._report_failure(f"could not load the model: {message.get('error')}. Completions are off "
                                 "until it loads; check the model.path setting or `serve --model DIR`")

    def _on_lost(self, reason: str) -> None:
        self.stats.worker_crashes += 1
        now = time.monotonic()
        self._crashes.append(now)
        while self._crashes and now - self._crashes[0] > 60:
            self._crashes.popleft()
        if self.stats.worker_crashes == 1:
            self.ui.show("warning", f"diffusion-lsp: {reason}; restarting it")
        self.ui.log("warning", f"{reason}; restarting it")
        self._shown_failure = None
        if len(self._crashes) <= RESTARTS_PER_MINUTE:
            asyncio.ensure_future(self.ensure())
        else:
            self.ui.log("warning", f"more than {RESTARTS_PER_MINUTE} crashes in a minute: "
                                   "the worker restarts on the next request only")

    def _report_failure(self, message: str) -> None:
        self.ui.log("error", message)
        if message != self._shown_failure:  # once, not on every request
            self._shown_failure = message
            self.ui.show("error", f"diffusion-lsp: {message}")

    def _pid(self):
        return self.client.pid if self.client else "?"

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()

    def describe(self) -> dict:
        c = self.client
        return {"pid": c.pid if c else None, "state": c.state if c else "stopped",
                "error": (c.error if c else None) or self._shown_failure, "socket": str(self.launch.socket),
                "max_tokens": c.max_tokens if c else None}
