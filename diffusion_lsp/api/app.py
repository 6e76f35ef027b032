"""The HTTP side of `serve-api` (Starlette, served by uvicorn): OpenAI-compatible routes over the
Service, in OpenAI's shapes (answers, `{"error": {...}}` errors, `text/event-stream` streams).

- `POST /v1/completions` (with `suffix`, or a prompt in a FIM template), `POST /v1/fim/completions`:
  the fill in `choices[0].text`, with `usage`. `stream: true` sends deltas of the text as its
  committed prefix grows step by step; with `diffusing: true` too, every event carries the whole
  draft after a denoising step (masked positions as a glyph): the draft sharpening.
- `POST /v1/edit/completions`: Inception's next-edit request, the rewritten region in
  `choices[0].message.content`.
- `GET /v1/models`, `GET /health` (200 when the model is ready, 503 before; no key needed, and
  without the key it says only that),
  `GET /metrics` (Prometheus).

Every request body is read up to `max_body_bytes` (413 past it), checked (400 naming the field),
admitted among at most `max_in_flight` requests (429 with Retry-After past it) and answered within
the request timeout (504). With a key, `/v1/*` and `/metrics` need `Authorization: Bearer KEY`,
compared in constant time (401 otherwise). A client that goes away mid-request or mid-stream
cancels its fill in the worker (counted, and logged as status 499). Nothing a client sends answers
500: an unexpected failure is logged and answered 500 without details, and counted. What every
route shares (the key, the body, errors, counting) is gate.py's; each route's own work is `Routes`'."""

from __future__ import annotations

import asyncio
import functools
import json
import time
import uuid
import weakref
from contextlib import asynccontextmanager

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..lifecycle import Stopped, race
from .bodies import Fim, cut_at_stop, parse_edit, parse_fim, parse_instruct, stream_safe
from .chat import Chat, message_of, parse_chat
from .gate import ApiError, Gate, unless_gone, until_disconnect
from .service import ChatReply, Failed, Reply, Service


def usage(answer: Reply) -> dict:
    return {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
            "total_tokens": answer.prompt_tokens + answer.completion_tokens}


def completion_body(model: str, rid: str, answer: Reply) -> dict:
    return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "text": answer.text, "finish_reason": answer.finish_reason, "logprobs": None}],
            "usage": usage(answer)}


def event(rid: str, model: str, text: str, finish: str | None) -> str:
    chunk = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
             "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}]}
    return f"data: {json.dumps(chunk)}\n\n"


def error_event(e: Failed) -> str:
    """A stream's failure once it has started (the model was still loading when it was admitted)."""
    return f"data: {json.dumps({'error': {'message': str(e), 'type': e.kind, 'param': e.param}})}\n\n"


def from_usage(include: bool, kind: str, rid: str, model: str, answer: Reply) -> str:
    """A stream's last events: the usage chunk (stream_options.include_usage), then [DONE]."""
    chunk = {"id": rid, "object": kind, "created": int(time.time()), "model": model, "choices": [],
             "usage": usage(answer)}
    return (f"data: {json.dumps(chunk)}\n\n" if include else "") + "data: [DONE]\n\n"


class Routes:
    """Each route's own work, over the Service; what they share is the Gate's."""

    def __init__(self, service: Service, gate: Gate):
        self.service, self.gate, self.metrics = service, gate, service.metrics

    async def fim(self, request: Request, route: str) -> Response:
        fim = self.gate.parsed(parse_fim, await self.gate.read_json(request))
        model = self.gate.check_model(fim.model)
        rid = f"cmpl-{uuid.uuid4().hex[:24]}"
        if fim.stream:
            release = self.service.reserve()  # 429 before the stream starts; released when it ends
            events = self.stream(request, fim, model, rid, release, route)
            weakref.finalize(events, release)  # a stream never started (the client left at once)
            return StreamingResponse(events, media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        async with self.service.admit():
            answer = await unless_gone(request, self.service.complete(fim))
        return JSONResponse(completion_body(model, rid, answer))

    async def stream(self, request: Request, fim: Fim, model: str, rid: str, release, route: str):
        """The events of a stream; a client that leaves (seen at once, not at the next write) ends it
        and cancels its fill."""
        items = self.service.stream(fim)
        gone = asyncio.ensure_future(until_disconnect(request))
        t0, sent = time.monotonic(), ""
        try:
            while True:
                try:
                    item = await race(items.__anext__(), gone)
                except Stopped:
                    self.metrics.disconnects.inc()
                    return
                except Failed as e:  # a 400 the model found once the stream had started (it was still loading)
                    yield error_event(e)
                    return
                if isinstance(item, Reply):
                    break
                if fim.diffusing:
                    yield event(rid, model, cut_at_stop(item.text, fim.stop)[0], None)
                    continue
                text, stopped = cut_at_stop(item.committed, fim.stop)
                safe = text if stopped else stream_safe(text, fim.stop)
                if len(safe) > len(sent) and safe.startswith(sent):
                    yield event(rid, model, safe[len(sent):], None)
                    sent = safe
                if stopped:  # the rest cannot change the answer
                    yield event(rid, model, "", "stop")
                    yield "data: [DONE]\n\n"
                    return
            answer = item
            if fim.diffusing:
                yield event(rid, model, answer.text, answer.finish_reason)
            else:  # a draft's committed text is a prefix of the final text (the sampler's drafts)
                yield event(rid, model, answer.text[len(sent):], answer.finish_reason)
            yield from_usage(fim.include_usage, "text_completion", rid, model, answer)
        except asyncio.CancelledError:
            self.metrics.disconnects.inc()
            raise
        finally:
            await self._ended(items, gone, route, t0, release)

    async def _ended(self, items, gone, route: str, t0: float, release) -> None:
        """A stream's end, however it ended: counted, its place released, its fill closed."""
        gone.cancel()
        self.metrics.latency.labels(route).observe(time.monotonic() - t0)
        release()
        # the server cancels the stream's generator when the client leaves, and may cancel every await
        # there again: a fill step still unwinding is closed by its own cancellation (its generator
        # cancels the fill in the worker), a suspended one is closed now
        if not items.ag_running:
            await items.aclose()

    async def chat(self, request: Request) -> Response:
        chat: Chat = self.gate.parsed(parse_chat, await self.gate.read_json(request))
        model = self.gate.check_model(chat.model)
        rid = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        if chat.stream:
            self.service.refuse_now(chat)
            release = self.service.reserve()
            try:  # a conversation its template cannot render is a 400, not an event in a stream
                chat = await self.service.render(chat)
            except BaseException:
                release()
                raise
            events = self.chat_events(request, chat, model, rid, release)
            weakref.finalize(events, release)
            return StreamingResponse(events, media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        async with self.service.admit():
            answer = await unless_gone(request, self.service.chat(chat))
        return JSONResponse({
            "id": rid, "object": "chat.completion", "created": int(time.time()), "model": model,
            "choices": [{"index": 0, "message": message_of(answer.text, answer.calls, rid),
                         "finish_reason": answer.finish_reason, "logprobs": None}],
            "usage": usage(answer)})

    async def chat_events(self, request: Request, chat: Chat, model: str, rid: str, release):
        """`chat.completion.chunk`s: the role, then content deltas as the committed text grows (with
        `diffusing`, the whole draft after every step), then the finish; tool calls come whole."""
        def chunk(delta: dict, finish: str | None = None) -> str:
            body = {"id": rid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]}
            return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

        items = self.service.chat_stream(chat)
        gone = asyncio.ensure_future(until_disconnect(request))
        t0, sent = time.monotonic(), ""
        try:
            yield chunk({"role": "assistant", "content": ""})
            while True:
                try:
                    item = await race(items.__anext__(), gone)
                except Stopped:
                    self.metrics.disconnects.inc()
                    return
                except StopAsyncIteration:
                    return
                except Failed as e:
                    yield error_event(e)
                    return
                if isinstance(item, ChatReply):
                    break
                draft, stops = item, chat.stop
                if chat.diffusing:
                    yield chunk({"content": cut_at_stop(draft.text, stops)[0]})
                    continue
                text, stopped = cut_at_stop(draft.committed, stops)
                safe = text if stopped else stream_safe(text, stops)
                if len(safe) > len(sent) and safe.startswith(sent):
                    yield chunk({"content": safe[len(sent):]})
                    sent = safe
                if stopped:
                    yield chunk({}, "stop")
                    yield "data: [DONE]\n\n"
                    return
            answer = item
            if answer.calls:
                calls = message_of(None, answer.calls, rid)["tool_calls"]
                yield chunk({"tool_calls": [{"index": i, **c} for i, c in enumerate(calls)]})
            elif chat.diffusing:
                yield chunk({"content": answer.text})
            elif answer.text[len(sent):]:
                yield chunk({"content": answer.text[len(sent):] if answer.text.startswith(sent) else answer.text})
            yield chunk({}, answer.finish_reason)
            yield from_usage(chat.include_usage, "chat.completion.chunk", rid, model, answer)
        except asyncio.CancelledError:
            self.metrics.disconnects.inc()
            raise
        finally:
            await self._ended(items, gone, "/v1/chat/completions", t0, release)

    async def edit(self, request: Request) -> Response:
        """Mercury's next edit (`messages`), or an edit from an `instruction` (the code in `input`)."""
        body = await self.gate.read_json(request)
        instructed = isinstance(body, dict) and "instruction" in body
        edit = self.gate.parsed(parse_instruct if instructed else parse_edit, body)
        model = self.gate.check_model(edit.model)
        async with self.service.admit():
            answer = await unless_gone(request, (self.service.instruct if instructed else self.service.edit)(edit))
        return JSONResponse({
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.text},
                         "finish_reason": answer.finish_reason}],
            "usage": usage(answer)})

    async def models(self, request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": m, "object": "model", "created": 0, "owned_by": "diffusion-lsp"} for m in self.gate.models]})

    async def health(self, request: Request) -> Response:
        """Ready or not for anyone (load balancers ask without a key); the worker's pid, socket and
        load error only for those who may use the API."""
        worker = self.service.describe()
        ready = worker["state"] == "ready"
        body = {"status": "ok" if ready else worker["state"]}
        if self.gate.authorized(request):
            body.update(worker=worker, in_flight=self.service.in_flight, models=self.gate.models)
        return JSONResponse(body, status_code=200 if ready else 503)

    async def prometheus(self, request: Request) -> Response:
        return Response(self.metrics.render(), media_type=CONTENT_TYPE_LATEST)


async def not_found(request: Request, exc) -> Response:
    return ApiError(404, f"no route {request.method} {request.url.path}", "invalid_request_error").response()


async def not_allowed(request: Request, exc) -> Response:
    return ApiError(405, f"{request.method} is not allowed on {request.url.path}", "invalid_request_error").response()


def create_app(service: Service, *, models: list[str], api_key: str | None = None,
               max_body_bytes: int = 1 << 20, max_tokens: int = 512) -> Starlette:
    gate = Gate(service.metrics, models, api_key, max_body_bytes, max_tokens,
                lambda: service.describe().get("max_tokens"))
    r = Routes(service, gate)
    routes = [
        *(Route(path, gate.handler(path, functools.partial(r.fim, route=path)), methods=["POST"])
          for path in ("/v1/completions", "/v1/fim/completions")),
        Route("/v1/edit/completions", gate.handler("/v1/edit/completions", r.edit), methods=["POST"]),
        Route("/v1/chat/completions", gate.handler("/v1/chat/completions", r.chat), methods=["POST"]),
        Route("/v1/models", gate.handler("/v1/models", r.models), methods=["GET"]),
        Route("/health", r.health, methods=["GET"]),
        Route("/metrics", gate.handler("/metrics", r.prometheus), methods=["GET"]),
    ]

    @asynccontextmanager
    async def lifespan(app):
        await service.start()  # the model loads before the first request
        try:
            yield
        finally:
            await service.close()

    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_allowed}, lifespan=lifespan)
