"""What `serve-api` does for a request, without HTTP: admission (a bounded number of requests in
flight; past it `Busy`, answered 429), a fill or a next edit through the model worker (the same
WorkerLink as the language server's: the worker decodes the fills queued together as one batch,
one forward pass per step), the deadline, and one retry when the worker is lost mid-request
(killed, crashed: the link restarts it). Every outcome is counted in `Metrics`."""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass

from ..context.languages import language_for
from ..context.tokens import approx_tokens
from ..model.settings import SamplerConfig
from ..nextedit import mercury
from ..nextedit.suggest import EditRequest, NextEditSettings, plan
from ..server.client import Launch
from ..server.link import Unavailable, WorkerLink
from ..server.next_edit import drive_link
from ..server.stats import Stats
from ..server.wire import DraftEvent, Fill, FillOrder
from .metrics import Metrics
from .requests import Edit, Fim, cut_at_stop

log = logging.getLogger("diffusion-lsp.api")


class Busy(Exception):
    """Too many requests in flight: 429 with Retry-After."""

    retry_after_s = 1


class Failed(Exception):
    """The model could not answer: `status` 503 (loading, worker unavailable), 504 (deadline), or 400
    (the request can never be done, e.g. a canvas past the model's positions: `param` names the field)."""

    def __init__(self, message: str, status: int, retry_after_s: int | None = None, param: str | None = None):
        super().__init__(message)
        self.status, self.retry_after_s, self.param = status, retry_after_s, param

    @property
    def kind(self) -> str:
        """Its type in OpenAI's error shape."""
        return "invalid_request_error" if self.status == 400 else "server_error"


@dataclass
class Answer:
    text: str
    finish_reason: str  # stop | length
    completion_tokens: int
    prompt_tokens: int  # an estimate (context/tokens.approx_tokens): the worker counts only its own
    forwards: int
    batch: int
    ms: float


class _LogUi:
    """The link's reports go to the log; there is no editor to show them to."""

    def show(self, kind: str, message: str) -> None:
        self.log(kind, message)

    def log(self, kind: str, message: str) -> None:
        log.log({"error": logging.ERROR, "warning": logging.WARNING, "info": logging.INFO}.get(kind, logging.DEBUG),
                message)

    async def progress_begin(self, title: str, message: str) -> object:
        log.info("%s: %s", title, message)
        return None

    def progress_end(self, token: object, message: str) -> None:
        log.info("%s", message)


class Service:
    def __init__(self, launch: Launch, metrics: Metrics, *, timeout_s: float = 30.0, max_in_flight: int = 64,
                 sampling: SamplerConfig = SamplerConfig(), next_edit: NextEditSettings = NextEditSettings()):
        self.metrics, self.timeout_s, self.max_in_flight = metrics, timeout_s, max_in_flight
        self.sampling, self.next_edit = sampling, next_edit
        self.stats = Stats()
        self.link = WorkerLink(_LogUi(), self.stats, launch)
        self.link.fill_timeout_s = timeout_s
        self.in_flight = 0
        self._ids = itertools.count(1)
        self._thread = ThreadPoolExecutor(2, thread_name_prefix="diffusion-lsp-api")
        metrics.worker_restarts.set_function(lambda: self.stats.worker_crashes)

    async def start(self) -> None:
        """Start (or connect to) the worker, so that the model loads before the first request."""
        await self.link.ensure()

    def describe(self) -> dict:
        return self.link.describe()

    def reserve(self) -> Callable[[], None]:
        """A place among the requests in flight, or Busy; returns its release (idempotent)."""
        if self.in_flight >= self.max_in_flight:
            self.metrics.rejected.labels("queue_full").inc()
            raise Busy()
        self.in_flight += 1
        self.metrics.in_flight.set(self.in_flight)
        released = False

        def release() -> None:
            nonlocal released
            if not released:
                released = True
                self.in_flight -= 1
                self.metrics.in_flight.set(self.in_flight)
        return release

    @asynccontextmanager
    async def admit(self):
        release = self.reserve()
        try:
            yield
        finally:
            release()

    async def _until_ready(self, deadline: float) -> None:
        """Wait for a worker that is starting or restarting, until `deadline` (monotonic)."""
        while time.monotonic() < deadline:
            state = self.describe()["state"]
            if state == "ready":
                return
            if state == "failed":
                raise Failed(f"the model failed to load: {self.describe().get('error')}", 503)
            if state == "stopped" and await self.link.ensure() is None:  # it cannot start: say why, now
                raise Failed(f"the model worker is unavailable: {self.describe().get('error') or 'see the log'}",
                             503, retry_after_s=2)
            await asyncio.sleep(0.05)
        raise Failed("the model is not ready", 503, retry_after_s=2)

    async def _ask(self, call: Callable, deadline: float, param: str | None = None):
        """One model call with the request's deadline; a worker lost meanwhile is waited for and
        asked again, once. A request the model can never do is a 400 naming `param` (else the
        worker's own name for the field)."""
        retried = False
        while True:
            await self._until_ready(deadline)
            try:
                return await asyncio.wait_for(call(), max(0.01, deadline - time.monotonic()))
            except Unavailable as e:
                if e.kind == "invalid":
                    raise Failed(str(e), 400, param=param or e.param) from None
                if e.kind == "lost" and not retried:
                    retried = True
                    self.metrics.retries.inc()
                    log.warning("retrying a request: %s", e)
                    continue
                if e.kind != "timeout":
                    raise Failed(str(e), 503, retry_after_s=2) from None
            except asyncio.TimeoutError:  # our deadline cancelled the link's call before its own ran
                self.link.suspect()  # else a stopped worker would hold every request past its deadline for good
            self.metrics.timeouts.inc()  # our deadline, or the link's (worker.fillTimeoutS)
            raise Failed(f"no answer within the request timeout ({self.timeout_s:g} s)", 504)

    def check(self, req: Fim) -> None:
        """A request the loaded model can never take: a 400 before anything starts (a stream, say)."""
        limit = self.describe().get("max_tokens")
        if limit is not None and req.max_tokens > limit:
            raise Failed(f"max_tokens {req.max_tokens} does not fit the model: at most {limit}", 400,
                         param="max_tokens")

    async def complete(self, req: Fim, on_draft: Callable[[DraftEvent], None] | None = None) -> Answer:
        """The fill for `req`; with on_draft, the worker's draft after every denoising step."""
        t0 = time.monotonic()
        deadline = t0 + self.timeout_s
        order = FillOrder(req.prefix, req.suffix, req.max_tokens, sampling=self.sampling, drafts=on_draft is not None)
        key = f"api:{next(self._ids)}"  # its own key: API requests never supersede each other

        async def call():
            return await self.link.fill(key, order, on_draft)

        fill: Fill | None = await self._ask(call, deadline)
        if fill is None:  # dropped by the worker (cancelled): the client has gone
            raise asyncio.CancelledError()
        text, stopped = cut_at_stop(fill.text, req.stop)
        tokens = len(fill.pieces)  # one per token the model wrote, at most max_tokens (sampler.FillResult.tokens)
        finish = "stop" if stopped or tokens < req.max_tokens else "length"
        answer = Answer(text, finish, tokens, approx_tokens(req.prefix) + approx_tokens(req.suffix), fill.forwards,
                        fill.batch, (time.monotonic() - t0) * 1e3)
        self.metrics.observe_fill(answer)
        return answer

    async def edit(self, req: Edit) -> Answer:
        """The region of a next-edit request as it should read, through the next-edit decoding
        (nextedit/suggest.py, remask-and-refine) with the request's region and cursor."""
        t0 = time.monotonic()
        deadline = t0 + self.timeout_s
        e = req.request
        text = e.before + e.region + e.after
        start, end = len(e.before), len(e.before) + len(e.region)
        at = start + (e.cursor if e.cursor is not None else 0)
        line = text.count("\n", 0, at)
        cursor = (line, at - (text.rfind("\n", 0, at) + 1))
        history = [e.history] if e.history.strip() else []
        settings = self.next_edit
        edit_req = EditRequest(text, e.path or "untitled", cursor, language_for(None, e.path), history, None, settings,
                               approx_tokens, sampling=self.sampling, region=(start, end))
        key = f"api-edit:{next(self._ids)}"

        async def call():
            return await drive_link(plan(edit_req), self.link, key, self._thread)

        out = await self._ask(call, deadline, param="messages")
        region = e.region
        if out is not None and out.edit is not None:
            new = out.edit.apply(text)
            region = new[start:len(new) - len(e.after)]
        forwards = out.forwards if out is not None else 0
        answer = Answer(mercury.fenced(region), "stop", approx_tokens(region), approx_tokens(text), forwards, 1,
                        (time.monotonic() - t0) * 1e3)
        self.metrics.observe_fill(answer)
        return answer

    async def close(self) -> None:
        await self.link.close()
        self._thread.shutdown(wait=False, cancel_futures=True)
