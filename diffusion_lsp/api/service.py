"""What `serve-api` does for a request, without HTTP: admission (a bounded number of requests in
flight; past it `Busy`, answered 429), a fill or a next edit through the Backend (the model
worker, the same WorkerLink as the language server's: it decodes the fills queued together as one
batch, one forward pass per step; next edits through the one next-edit pipeline,
nextedit/suggest.py, after the rest of the change the request's history made, by the language
server's rules, nextedit/follow.py), the deadline, and one retry when the worker is lost mid-request (killed,
crashed: the link restarts it). A backend failure becomes an HTTP status here, once (STATUS).
Every outcome is counted in `Metrics`.
The chat template (model/chat/conversation.py) renders in the bounds of model/chat/sandbox.py; structured answers are
model/structured/constrained.py's, an edit from an instruction formats/instruct.py's."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import itertools
import json
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass

from ..protocol.backend import LogReporter
from ..protocol.failure import BackendError, Failure
from ..protocol.answers import Draft, Fill
from ..protocol.requests import FillRequest, StructuredRequest
from ..context.languages import language_for
from ..context.tokens import approx_tokens
from ..model.chat.conversation import ChatTemplate
from ..protocol.settings import SamplerConfig
from ..formats import mercury
from ..formats.instruct import order_for
from ..nextedit.follow import followed_in
from ..nextedit.history import steps_of
from ..nextedit.settings import NextEditSettings
from ..nextedit.suggest import EditRequest, suggest
from ..worker.spec import WorkerSpec
from ..worker.link import WorkerLink
from .metrics import Metrics
from .bodies import Edit, Fim, Instruct, cut_at_stop
from .chat import Chat

log = logging.getLogger("diffusion-lsp.api")


class Busy(Exception):
    """Too many requests in flight: 429 with Retry-After."""

    retry_after_s = 1


# a backend failure -> (HTTP status, Retry-After seconds); DROPPED never gets here (the client left)
STATUS = {Failure.OFF: (503, 2), Failure.STARTING: (503, 2), Failure.LOST: (503, 2), Failure.UNAVAILABLE: (503, 2),
          Failure.TIMEOUT: (504, None), Failure.BUSY: (503, 2), Failure.REFUSED: (503, 2), Failure.INVALID: (400, None),
          Failure.DROPPED: (503, None)}
# what a worker's INVALID answer may name that is a field of every route's request as it is (the rest it
# names, e.g. a probe's middle, is the route's content, which the route names: messages, input)
ROUTE_FIELDS = frozenset({"max_tokens", "response_format", "tools"})


class Failed(Exception):
    """The model could not answer: `status` 503 (loading, worker unavailable), 504 (deadline), or 400
    (the request can never be done, e.g. a canvas past the model's positions: `param` names the field)."""

    @classmethod
    def of(cls, error: BackendError, param: str | None = None) -> Failed:
        status, retry = STATUS[error.kind]
        if error.param in ROUTE_FIELDS:  # the request's own field, on every route
            param = error.param
        return cls(str(error), status, retry, param=(param or error.param) if status == 400 else None)

    def __init__(self, message: str, status: int, retry_after_s: int | None = None, param: str | None = None):
        super().__init__(message)
        self.status, self.retry_after_s, self.param = status, retry_after_s, param

    @property
    def kind(self) -> str:
        """Its type in OpenAI's error shape."""
        return "invalid_request_error" if self.status == 400 else "server_error"


@dataclass
class Reply:
    text: str
    finish_reason: str  # stop | length
    completion_tokens: int
    prompt_tokens: int  # an estimate (context/tokens.approx_tokens): the worker counts only its own
    forwards: int
    batch: float
    ms: float


@dataclass
class ChatReply(Reply):
    calls: list[dict] = dataclasses.field(default_factory=list)  # tool calls: [{"name", "arguments"}]


class Service:
    def __init__(self, spec: WorkerSpec, metrics: Metrics, *, timeout_s: float = 30.0, max_in_flight: int = 64,
                 sampling: SamplerConfig = SamplerConfig(), next_edit: NextEditSettings = NextEditSettings(),
                 chat: ChatTemplate | None = None):
        """chat: the template the worker's conversations are put in (launch_template for
        spec.model), rendered here; None: the worker renders them."""
        self.metrics, self.timeout_s, self.max_in_flight = metrics, timeout_s, max_in_flight
        self.chat_template = chat
        self._render = ThreadPoolExecutor(2, thread_name_prefix="diffusion-lsp-render")
        self.sampling, self.next_edit = sampling, next_edit
        self.backend = WorkerLink(LogReporter(log), spec, fill_timeout_s=timeout_s)
        self.in_flight = 0
        self._ids = itertools.count(1)
        self._thread = ThreadPoolExecutor(2, thread_name_prefix="diffusion-lsp-api")
        metrics.worker_restarts.set_function(lambda: self.backend.counts["worker_crashes"])

    async def start(self) -> None:
        """Start (or connect to) the worker, so that the model loads before the first request."""
        await self.backend.start()

    def describe(self) -> dict:
        return self.backend.describe()

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

    async def _ask(self, call: Callable, deadline: float, param: str | None = None, retry: bool = True,
                   wait_ready: bool = True):
        """One model call with the request's deadline, once the model is ready (awaited, unless the
        caller just did: a stream's next step); a worker lost meanwhile is waited for and asked
        again, once (with `retry`). A request the model can never do is a 400 naming `param` (where the
        route puts what the worker calls its content: messages, input), else the worker's own name for
        the field; max_tokens (ROUTE_FIELDS) is named as it is."""
        retried = not retry
        while True:
            try:
                if wait_ready:
                    await asyncio.wait_for(self.backend.ready(), max(0.01, deadline - time.monotonic()))
                return await asyncio.wait_for(call(), max(0.01, deadline - time.monotonic()))
            except BackendError as e:
                if e.kind is Failure.LOST and not retried:
                    retried = True
                    self.metrics.retries.inc()
                    log.warning("retrying a request: %s", e)
                    continue
                if e.kind is Failure.DROPPED:  # cancelled in the worker: the client has gone
                    raise asyncio.CancelledError() from None
                if e.kind is not Failure.TIMEOUT:
                    raise Failed.of(e, param) from None
            except asyncio.TimeoutError:  # our deadline, before the model was ready or the link's own ran out
                worker = self.describe()
                if worker["state"] != "ready":  # loading, or restarting (and why)
                    why = f"{worker['state']}: {worker['error']}" if worker["error"] else worker["state"]
                    raise Failed(f"the model is not ready ({why})", 503, retry_after_s=2) from None
                self.backend.suspect()  # else a stopped worker would hold every request past its deadline for good
            self.metrics.timeouts.inc()  # our deadline, or the link's (worker.fillTimeoutS)
            raise Failed(f"no answer within the request timeout ({self.timeout_s:g} s)", 504)

    async def complete(self, req: Fim) -> Reply:
        """The fill for `req`."""
        t0 = time.monotonic()
        order = FillRequest(req.prefix, req.suffix, req.max_tokens, sampling=self.sampling)
        key = f"api:{next(self._ids)}"  # its own key: API requests never supersede each other
        fill = await self._ask(functools.partial(self.backend.fill, key, order), t0 + self.timeout_s)
        return self.answer(req, fill, t0)

    async def stream(self, req: Fim) -> AsyncIterator[Draft | Reply]:
        """The worker's draft after every denoising step, then the answer; the deadline is the whole
        stream's. Failures as `complete`'s (no retry once a draft was sent)."""
        t0 = time.monotonic()
        deadline = t0 + self.timeout_s
        order = FillRequest(req.prefix, req.suffix, req.max_tokens, sampling=self.sampling, drafts=True)
        await self._ask(self.backend.ready, deadline, wait_ready=False)
        items = self.backend.stream(f"api:{next(self._ids)}", order)
        try:
            while True:
                try:
                    item = await self._ask(items.__anext__, deadline, retry=False, wait_ready=False)
                except StopAsyncIteration:
                    return
                yield self.answer(req, item, t0) if isinstance(item, Fill) else item
        finally:
            await items.aclose()

    def answer(self, req: Fim, fill: Fill, t0: float) -> Reply:
        text, stopped = cut_at_stop(fill.text, req.stop)
        tokens = fill.tokens  # one per token the model wrote, at most max_tokens (sampler.FillResult.tokens)
        finish = "stop" if stopped or tokens < req.max_tokens else "length"
        answer = Reply(text, finish, tokens, approx_tokens(req.prefix) + approx_tokens(req.suffix), fill.forwards,
                        fill.batch, (time.monotonic() - t0) * 1e3)
        self.metrics.observe_fill(answer)
        return answer

    async def edit(self, req: Edit) -> Reply:
        """The region of a next-edit request as it should read: the rest of the change its history's
        last diff made, where it has sites in the region (the language server's follow rules: a rename,
        a signature's calls, an argument), else through the next-edit decoding
        (remask-and-refine) with the request's region and cursor."""
        t0 = time.monotonic()
        deadline = t0 + self.timeout_s
        e = req.request
        text = e.before + e.region + e.after
        start, end = len(e.before), len(e.before) + len(e.region)
        at = start + (e.cursor if e.cursor is not None else 0)
        line = text.count("\n", 0, at)
        cursor = (line, at - (text.rfind("\n", 0, at) + 1))
        spec, steps = language_for(None, e.path), steps_of(e.history, e.path, text)
        region = await self._in_thread(followed_in, text, spec, steps, start, end) if spec and steps else None
        forwards = 0
        if region is None:
            history = [e.history] if e.history.strip() else []
            edit_req = EditRequest(text, e.path or "untitled", cursor, spec, history, None, self.next_edit,
                                   approx_tokens, sampling=self.sampling, region=(start, end))
            key = f"api-edit:{next(self._ids)}"
            out = await self._ask(functools.partial(suggest, edit_req, self.backend, key, self._in_thread), deadline,
                                  param="messages")
            region, forwards = e.region, out.forwards
            if out.edit is not None:
                new = out.edit.apply(text)
                region = new[start:len(new) - len(e.after)]
        answer = Reply(mercury.fenced(region), "stop", approx_tokens(region), approx_tokens(text), forwards, 1,
                        (time.monotonic() - t0) * 1e3)
        self.metrics.observe_fill(answer)
        return answer

    async def instruct(self, req: Instruct) -> Reply:
        """`input` rewritten as the instruction says, between the file's prefix and suffix."""
        t0 = time.monotonic()
        text = req.prefix + req.input + req.suffix
        spec = language_for(req.language, None) if req.language else None
        try:
            order = order_for(text, len(req.prefix), len(req.prefix) + len(req.input), req.instruction,
                              spec.comment if spec else "#", req.max_tokens)
        except ValueError as e:
            raise Failed(str(e), 400, param="instruction") from None
        fill = await self._ask(functools.partial(self.backend.instruct, f"api-instruct:{next(self._ids)}", order),
                               t0 + self.timeout_s, param="input")
        answer = Reply(fill.text, "stop" if fill.tokens < order.max_tokens else "length", fill.tokens,
                        approx_tokens(text) + approx_tokens(req.instruction), fill.forwards, fill.batch,
                        (time.monotonic() - t0) * 1e3)
        self.metrics.observe_fill(answer)
        return answer

    def refuse_now(self, req: Chat) -> None:
        """A 400, before a stream starts, for a conversation the ready model cannot answer (no chat
        template; no constraints): a stream admitted while the model loads says it as its error event."""
        if self.describe().get("state") == "ready":
            self._chat_sampling(req)

    def _chat_sampling(self, req: Chat) -> SamplerConfig:
        """The request's sampling once the model is ready; a 400 for a model that cannot answer the
        request (no chat template; no constraints for response_format / tools)."""
        caps = self.backend.capabilities
        if not caps.chat:
            raise Failed("the model has no chat template, so it cannot answer a conversation: serve an instruct "
                         "checkpoint, or give a template with --chat-template FILE", 400, param="messages")
        if req.output is not None and not caps.structured:
            raise Failed("this model's decoding cannot be constrained (its canvas is transformers' own): no "
                         "response_format or tools", 400, param="tools" if '"tools"' in req.output else "response_format")
        sampling = self.sampling if req.threshold is None else dataclasses.replace(self.sampling, threshold=req.threshold)
        return sampling

    async def render(self, req: Chat) -> Chat:
        """`req` with its conversation rendered in the chat template (ChatTemplate.segments):
        here, in a thread of the API, within the sandbox's bounds, so that no template or
        message holds the model's thread, and before anything starts (a stream, say). A conversation the
        template fails on or breaks a bound with is a 400 naming messages."""
        if self.chat_template is None:
            return dataclasses.replace(req, rendered=req.chat)
        raw = json.loads(req.chat)
        loop = asyncio.get_running_loop()
        try:
            segments = await loop.run_in_executor(self._render, self.chat_template.segments, raw["messages"],
                                                  raw["tools"])
        except ValueError as e:
            raise Failed(str(e), 400, param="messages") from None
        return dataclasses.replace(req, rendered=json.dumps({**raw, "rendered": segments}, ensure_ascii=False))

    async def chat(self, req: Chat) -> ChatReply:
        """A conversation's answer: free text on the canvas after the chat template's generation prompt, or
        JSON / tool calls under constraints."""
        t0 = time.monotonic()
        deadline = t0 + self.timeout_s
        await self._ask(self.backend.ready, deadline, wait_ready=False)
        sampling = self._chat_sampling(req)
        if req.rendered is None:
            req = await self.render(req)
        chat = req.rendered
        key = f"api-chat:{next(self._ids)}"
        prompt_tokens = approx_tokens(req.chat)
        if req.output is None:
            fill = await self._ask(functools.partial(self.backend.fill, key, FillRequest(
                "", "", req.max_tokens, sampling=sampling, chat=chat)), deadline, param="messages")
            return self.chat_answer(req, fill, t0)
        order = StructuredRequest(chat, req.output, req.max_tokens, sampling)
        # the worker names the field: max_tokens, response_format / tools (a layout past the model), or messages
        got = await self._ask(functools.partial(self.backend.structured, key, order), deadline)
        text, stopped = cut_at_stop(got.text, req.stop) if got.kind == "text" else (got.text, False)
        finish = "tool_calls" if got.calls else "stop" if got.kind != "text" or stopped or got.tokens < req.max_tokens \
            else "length"
        answer = ChatReply(text, finish, got.tokens, prompt_tokens, got.forwards, 1.0, (time.monotonic() - t0) * 1e3,
                            got.calls)
        self.metrics.observe_fill(answer)
        return answer

    def chat_answer(self, req: Chat, fill: Fill, t0: float) -> ChatReply:
        text, stopped = cut_at_stop(fill.text, req.stop)
        finish = "stop" if stopped or fill.tokens < req.max_tokens else "length"
        answer = ChatReply(text, finish, fill.tokens, approx_tokens(req.chat), fill.forwards, fill.batch,
                            (time.monotonic() - t0) * 1e3)
        self.metrics.observe_fill(answer)
        return answer

    async def chat_stream(self, req: Chat) -> AsyncIterator[Draft | ChatReply]:
        """A free-text answer's drafts after every denoising step, then the answer; a constrained one
        (response_format, tools) is the answer alone."""
        if req.output is not None:
            yield await self.chat(req)
            return
        t0 = time.monotonic()
        deadline = t0 + self.timeout_s
        await self._ask(self.backend.ready, deadline, wait_ready=False)
        sampling = self._chat_sampling(req)
        if req.rendered is None:
            req = await self.render(req)
        order = FillRequest("", "", req.max_tokens, sampling=sampling, drafts=True, chat=req.rendered)
        items = self.backend.stream(f"api-chat:{next(self._ids)}", order)
        try:
            while True:
                try:
                    item = await self._ask(items.__anext__, deadline, retry=False, wait_ready=False,
                                           param="messages")
                except StopAsyncIteration:
                    return
                yield self.chat_answer(req, item, t0) if isinstance(item, Fill) else item
        finally:
            await items.aclose()

    async def _in_thread(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._thread, functools.partial(fn, *args))

    async def close(self) -> None:
        await self.backend.close()
        self._thread.shutdown(wait=False, cancel_futures=True)
        self._render.shutdown(wait=False, cancel_futures=True)
