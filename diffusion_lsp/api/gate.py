"""What every `serve-api` route shares before and after its own work: the key (constant-time
compare), reading a body up to its limit, the model name, the request checks (bodies.py), errors
in OpenAI's shape (`ApiError`), counting, and noticing a client that left (`unless_gone`).
A body is read by receive.py."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import time
from collections.abc import Awaitable, Callable

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from ..lifecycle import Stopped, race
from .bodies import BadRequest
from .metrics import Metrics
from .service import Busy, Failed

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


class Gate:
    def __init__(self, metrics: Metrics, models: list[str], api_key: str | None, max_body_bytes: int,
                 max_tokens: int, model_tokens: Callable[[], int | None] = lambda: None):
        """max_tokens: serve-api's --max-tokens; model_tokens: the loaded model's own largest canvas
        (None until the worker has said it)."""
        self.metrics, self.models, self.max_body_bytes, self.max_tokens = metrics, models, max_body_bytes, max_tokens
        self.model_tokens = model_tokens
        self.key = api_key.encode() if api_key else None

    def most_tokens(self) -> int:
        """The one bound on a request's max_tokens: --max-tokens, and the model's canvas once it is known
        (before, the worker refuses a canvas past it with the same message: max_tokens_refusal)."""
        model = self.model_tokens()
        return self.max_tokens if model is None else min(self.max_tokens, model)

    def authorized(self, request: Request) -> bool:
        if self.key is None:
            return True
        scheme, _, token = request.headers.get("authorization", "").partition(" ")
        return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode(), self.key)

    def authorize(self, request: Request) -> None:
        if not self.authorized(request):
            self.metrics.rejected.labels("auth").inc()
            raise ApiError(401, "a valid API key is needed: Authorization: Bearer KEY", "authentication_error",
                           code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"})

    async def read_json(self, request: Request):
        limit = self.max_body_bytes
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > limit):
            self.metrics.rejected.labels("too_large").inc()
            raise ApiError(413, f"the body is over {limit} bytes", "invalid_request_error")
        body = bytearray()
        try:
            async for chunk in request.stream():
                body += chunk
                if len(body) > limit:
                    self.metrics.rejected.labels("too_large").inc()
                    raise ApiError(413, f"the body is over {limit} bytes", "invalid_request_error")
        except ClientDisconnect:  # it left mid-body (or was too slow: the receiver closed it)
            raise ClientGone() from None
        try:
            return json.loads(body)
        except (ValueError, RecursionError) as e:
            self.metrics.rejected.labels("bad_request").inc()
            why = "is nested too deeply to read" if isinstance(e, RecursionError) else \
                f"is not JSON: {e}"
            raise ApiError(400, f"the body {why}", "invalid_request_error") from None

    def check_model(self, name: str | None) -> str:
        if name is None or name in self.models:
            return name or self.models[0]
        self.metrics.rejected.labels("model").inc()
        raise ApiError(404, f"the model {name!r} does not exist here; GET /v1/models lists {', '.join(self.models)}",
                       "invalid_request_error", "model", "model_not_found")

    def parsed(self, fn, body):
        """The request `fn` parses from `body`; 400 naming the field it rejects."""
        try:
            req = fn(body, self.most_tokens())
        except BadRequest as e:
            self.metrics.rejected.labels("bad_request").inc()
            raise ApiError(400, str(e), "invalid_request_error", e.param) from None
        if req.ignored:
            self.metrics.ignored_fields.inc(len(req.ignored))
        return req

    def handler(self, route: str, fn: Callable[[Request], Awaitable[Response]]):
        """A route's handler with the shared parts: auth, errors in OpenAI's shape, counting."""
        async def endpoint(request: Request) -> Response:
            t0 = time.monotonic()
            try:
                self.authorize(request)
                response = await fn(request)
            except Exception as e:  # noqa: BLE001 -- every failure is an answer, never a traceback to the client
                response = self.failure_response(route, e)
            except asyncio.CancelledError:  # servers that cancel the handler when the client leaves
                self.metrics.disconnects.inc()
                raise
            self.metrics.requests.labels(route, str(response.status_code)).inc()
            if not isinstance(response, StreamingResponse):
                self.metrics.latency.labels(route).observe(time.monotonic() - t0)
            return response
        return endpoint

    def failure_response(self, route: str, error: Exception) -> Response:
        """The answer to a request that failed with `error`: its status once, here."""
        if isinstance(error, ApiError):
            return error.response()
        if isinstance(error, Busy):
            return ApiError(429, "too many requests in flight; retry shortly", "rate_limit_error", code="queue_full",
                            headers={"Retry-After": str(error.retry_after_s)}).response()
        if isinstance(error, Failed):
            headers = {"Retry-After": str(error.retry_after_s)} if error.retry_after_s else {}
            return ApiError(error.status, str(error), error.kind, error.param, headers=headers).response()
        if isinstance(error, ClientGone):
            self.metrics.disconnects.inc()
            return Response(status_code=CLIENT_GONE)
        log.error("%s failed", route, exc_info=error)
        return ApiError(500, "internal error (logged)", "server_error").response()


async def until_disconnect(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


async def unless_gone(request: Request, work):
    """`work`'s result; a client that disconnects first cancels it (and its fill in the worker)."""
    try:
        return await race(work, until_disconnect(request))
    except Stopped:
        raise ClientGone() from None
