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
cancels its fill in the worker (counted, and logged as status 499). Nothing a client sends answers 500: an unexpected failure is logged
and answered 500 without details, and counted."""

from __future__ import annotations

import asyncio
import functools
import hmac
import json
import logging
import time
import uuid
import weakref
from contextlib import asynccontextmanager

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from ..lifecycle import Stopped, first
from .bodies import BadRequest, Edit, Fim, cut_at_stop, parse_edit, parse_fim, stream_safe
from .service import Answer, Busy, Failed, Service

log = logging.getLogger("diffusion-lsp.api")


CLIENT_GONE = 499  # nginx's "client closed request": counted, and sent to nobody


class ClientGone(Exception):
    """The client disconnected before its answer; its fill was cancelled."""


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str, param: str | None = None, code: str | None = None,
                 headers: dict | None = None):
        super().__init__(message)
        self.status, self.kind, self.param, self.code, self.headers = status, kind, param, code, headers or {}

    def response(self) -> JSONResponse:
        return JSONResponse({"error": {"message": str(self), "type": self.kind, "param": self.param,
                                       "code": self.code}}, status_code=self.status, headers=self.headers)


def create_app(service: Service, *, models: list[str], api_key: str | None = None,
               max_body_bytes: int = 1 << 20, max_tokens: int = 512) -> Starlette:
    metrics = service.metrics
    key = api_key.encode() if api_key else None

    def authorized(request: Request) -> bool:
        if key is None:
            return True
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), key)

    def authorize(request: Request) -> None:
        if not authorized(request):
            metrics.rejected.labels("auth").inc()
            raise ApiError(401, "a valid API key is needed: Authorization: Bearer KEY", "authentication_error",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    async def read_json(request: Request):
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > max_body_bytes):
            metrics.rejected.labels("too_large").inc()
            raise ApiError(413, f"the body is over {max_body_bytes} bytes", "invalid_request_error")
        body = bytearray()
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > max_body_bytes:
                    metrics.rejected.labels("too_large").inc()
                    raise ApiError(413, f"the body is over {max_body_bytes} bytes", "invalid_request_error")
        except ClientDisconnect:  # it left mid-body (or was too slow: receive.py closed it)
            raise ClientGone() from None
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as e:  # RecursionError: nested too deeply to decode
            metrics.rejected.labels("bad_request").inc()
            raise ApiError(400, f"the body is not JSON: {e}", "invalid_request_error") from None

    def check_model(name: str | None) -> str:
        if name is None or name in models:
            return name or models[0]
        metrics.rejected.labels("model").inc()
        raise ApiError(404, f"the model {name!r} does not exist here; GET /v1/models lists {', '.join(models)}",
                       "invalid_request_error", "model", "model_not_found")

    def parsed(fn, body):
        try:
            req = fn(body, max_tokens)
        except BadRequest as e:
            metrics.rejected.labels("bad_request").inc()
            raise ApiError(400, str(e), "invalid_request_error", e.param) from None
        if req.ignored:
            metrics.ignored_fields.inc(len(req.ignored))
        return req

    def handler(route: str, fn):
        """A route's handler with the shared parts: auth, errors in OpenAI's shape, counting."""
        async def endpoint(request: Request) -> Response:
            t0 = time.monotonic()
            try:
                authorize(request)
                response = await fn(request)
            except ApiError as e:
                response = e.response()
            except Busy as e:
                response = ApiError(429, "too many requests in flight; retry shortly", "rate_limit_error",
                                    code="queue_full", headers={"Retry-After": str(e.retry_after_s)}).response()
            except Failed as e:
                headers = {"Retry-After": str(e.retry_after_s)} if e.retry_after_s else {}
                response = ApiError(e.status, str(e), e.kind, e.param, headers=headers).response()
            except ClientGone:
                metrics.disconnects.inc()
                response = Response(status_code=CLIENT_GONE)
            except asyncio.CancelledError:  # servers that cancel the handler when the client leaves
                metrics.disconnects.inc()
                raise
            except Exception:
                log.exception("%s failed", route)
                response = ApiError(500, "internal error (logged)", "server_error").response()
            metrics.requests.labels(route, str(response.status_code)).inc()
            if not isinstance(response, StreamingResponse):
                metrics.latency.labels(route).observe(time.monotonic() - t0)
            return response
        return endpoint

    async def until_disconnect(request: Request) -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    async def unless_gone(request: Request, work):
        """`work`'s result; a client that disconnects first cancels it (and its fill in the worker)."""
        try:
            return await first(work, until_disconnect(request))
        except Stopped:
            raise ClientGone() from None

    def completion_body(model: str, rid: str, answer: Answer) -> dict:
        return {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
                "choices": [{"index": 0, "text": answer.text, "finish_reason": answer.finish_reason,
                             "logprobs": None}],
                "usage": usage(answer)}

    def usage(answer: Answer) -> dict:
        return {"prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
                "total_tokens": answer.prompt_tokens + answer.completion_tokens}

    async def fim_route(request: Request, route: str) -> Response:
        fim = parsed(parse_fim, await read_json(request))
        model = check_model(fim.model)
        service.check(fim)
        rid = f"cmpl-{uuid.uuid4().hex[:24]}"
        if fim.stream:
            release = service.reserve()  # 429 before the stream starts; released when it ends
            events = stream(request, fim, model, rid, release, route)
            weakref.finalize(events, release)  # a stream never started (the client left at once)
            return StreamingResponse(events, media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        async with service.admit():
            answer = await unless_gone(request, service.complete(fim))
        return JSONResponse(completion_body(model, rid, answer))

    def event(rid: str, model: str, text: str, finish: str | None) -> str:
        chunk = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
                 "choices": [{"index": 0, "text": text, "finish_reason": finish, "logprobs": None}]}
        return f"data: {json.dumps(chunk)}\n\n"

    async def stream(request: Request, fim: Fim, model: str, rid: str, release, route: str):
        """The events of a stream; a client that leaves (seen at once, not at the next write) ends it
        and cancels its fill."""
        items = service.stream(fim)
        gone = asyncio.ensure_future(until_disconnect(request))
        t0, sent = time.monotonic(), ""
        try:
            while True:
                try:
                    item = await first(items.__anext__(), gone)
                except Stopped:
                    metrics.disconnects.inc()
                    return
                except Failed as e:  # a 400 the model found once the stream had started (it was still loading)
                    yield f"data: {json.dumps({'error': {'message': str(e), 'type': e.kind, 'param': e.param}})}\n\n"
                    return
                if isinstance(item, Answer):
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
            else:  # a draft's committed text is a prefix of the final text (model/sampler.py _draft)
                yield event(rid, model, answer.text[len(sent):], answer.finish_reason)
            if fim.include_usage:
                chunk = {"id": rid, "object": "text_completion", "created": int(time.time()), "model": model,
                         "choices": [], "usage": usage(answer)}
                yield f"data: {json.dumps(chunk)}\n\n"
            yield "data: [DONE]\n\n"
        except asyncio.CancelledError:
            metrics.disconnects.inc()
            raise
        finally:
            gone.cancel()
            await items.aclose()
            metrics.latency.labels(route).observe(time.monotonic() - t0)
            release()

    async def edit_route(request: Request) -> Response:
        edit: Edit = parsed(parse_edit, await read_json(request))
        model = check_model(edit.model)
        async with service.admit():
            answer = await unless_gone(request, service.edit(edit))
        return JSONResponse({
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}", "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": answer.text},
                         "finish_reason": answer.finish_reason}],
            "usage": usage(answer)})

    async def models_route(request: Request) -> Response:
        return JSONResponse({"object": "list", "data": [
            {"id": m, "object": "model", "created": 0, "owned_by": "diffusion-lsp"} for m in models]})

    async def health(request: Request) -> Response:
        """Ready or not for anyone (load balancers ask without a key); the worker's pid, socket and
        load error only for those who may use the API."""
        worker = service.describe()
        ready = worker["state"] == "ready"
        body = {"status": "ok" if ready else worker["state"]}
        if authorized(request):
            body.update(worker=worker, in_flight=service.in_flight, models=models)
        return JSONResponse(body, status_code=200 if ready else 503)

    async def metrics_route(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE_LATEST)

    async def not_found(request: Request, exc) -> Response:
        return ApiError(404, f"no route {request.method} {request.url.path}", "invalid_request_error").response()

    async def not_allowed(request: Request, exc) -> Response:
        return ApiError(405, f"{request.method} is not allowed on {request.url.path}",
                        "invalid_request_error").response()

    routes = [
        *(Route(route, handler(route, functools.partial(fim_route, route=route)), methods=["POST"])
          for route in ("/v1/completions", "/v1/fim/completions")),
        Route("/v1/edit/completions", handler("/v1/edit/completions", edit_route), methods=["POST"]),
        Route("/v1/models", handler("/v1/models", models_route), methods=["GET"]),
        Route("/health", health, methods=["GET"]),
        Route("/metrics", handler("/metrics", metrics_route), methods=["GET"]),
    ]
    @asynccontextmanager
    async def lifespan(app):
        await service.start()  # the model loads before the first request
        try:
            yield
        finally:
            await service.close()

    return Starlette(routes=routes, exception_handlers={404: not_found, 405: not_allowed}, lifespan=lifespan)
