"""Fills from an OpenAI-compatible fill-in-the-middle API (`--backend openai`), e.g. Inception's
Mercury (base https://api.inceptionlabs.ai/v1, models mercury-edit / mercury-coder).

One async core, `FimClient.complete` (and `edit`), behind the remote Backend (backend/remote.py)
that the language server, the command line and the evaluations use. What a request holds depends on
the server (`--server`, backend/profiles.py); the generic one: a fill is `POST {base}/fim/completions` with
model, prompt, suffix, max_tokens, stop and temperature, the answer in `choices[0].text`; an API
that answers 404 there is asked `POST {base}/completions` with `suffix`, and the client remembers
which one answered. 429 and 5xx are retried with exponential backoff (Retry-After honoured) a
bounded number of times; every other failure is one line (`RemoteError`).

The API key is read from the environment variable the settings name (never a setting itself),
sent as `Authorization: Bearer`, and kept out of every message, exception, repr and count: messages
are built from status codes and the API's own error text with the key scrubbed out (in every form
an API echoes it: KeyScrubber), and an httpx exception (whose request carries the header) is never
chained to ours.
Mercury Edit's tagged format: formats/mercury.py."""

from __future__ import annotations

import asyncio
import email.utils
import json
import os
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import httpx

from .profiles import Asking, fenced_code, profile_for
from ..keyscrub import KeyScrubber
from ..context.tokens import valid_text
from ..protocol.settings import LaunchSettings

MAX_BODY = 4 * 1024 * 1024  # bytes read from an answer: a 4096-token fill is well under 100 KB
MAX_MESSAGE = 200  # characters of the API's own error message kept in ours


class RemoteError(Exception):
    """The API could not answer; the message is one line without the key. `kind` groups failures
    for reporting once: key | endpoint | unreachable | timeout | busy | rejected | answer."""

    def __init__(self, message: str, kind: str, status: int | None = None):
        super().__init__(message)
        self.kind, self.status = kind, status


class RequestFailed(RemoteError, ValueError):
    """This request failed (the API rejected it, or its answer was unusable); others may not. A
    ValueError, like a local model's refusal, so `fim --batch` records it and goes on."""


@dataclass
class Completion:
    text: str
    tokens: int  # the API's usage.completion_tokens; 0 when it does not say
    ms: float
    route: str  # the path that answered


def one_line(text: str) -> str:
    """Collapse whitespace, drop control characters (an API's escape codes must not reach the
    user's terminal, nor a line break forge a line of ours) and truncate: one short line."""
    text = " ".join("".join(c if c.isprintable() else " " for c in text).split())
    return text if len(text) <= MAX_MESSAGE else text[: MAX_MESSAGE - 3] + "..."


def api_message(raw: bytes, scrub: Callable[[str], str] = str) -> str:
    """The error message an API put in its body ({"error": {"message"}}, {"error": "..."},
    {"message"} or {"detail"}), else the start of the body, as one line; "" for none. `scrub` runs
    before the cut, so that no part of a secret survives it."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        return one_line(scrub(head(raw.decode("utf-8", errors="replace"))))
    if isinstance(data, dict):
        error = data.get("error")
        for value in (error.get("message") if isinstance(error, dict) else error, data.get("message"),
                      data.get("detail")):
            if isinstance(value, str) and value.strip():
                return one_line(scrub(head(value)))
    return one_line(scrub(head(json.dumps(data))))


def parse_answer(raw: bytes) -> tuple[str, int]:
    """(text, completion tokens) from a completions answer; RequestFailed when it has none. Lone
    surrogates in the text (JSON can carry them, UTF-8 cannot) become U+FFFD."""
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError):
        raise RequestFailed("the API's answer is not JSON", "answer") from None
    choices = data.get("choices") if isinstance(data, dict) else None
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else {}
    text = first.get("text")
    if text is None and isinstance(first.get("message"), dict):  # a chat-shaped FIM answer
        text = first["message"].get("content")
    if not isinstance(text, str):
        raise RequestFailed("the API's answer has no choices[0].text", "answer")
    usage = data.get("usage")
    tokens = usage.get("completion_tokens") if isinstance(usage, dict) else None
    return valid_text(text), tokens if isinstance(tokens, int) and not isinstance(tokens, bool) and tokens >= 0 else 0


def retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date); None when absent or odd."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time()) if when is not None and when.tzinfo else None


MAX_SCAN = 4096  # characters of an API's text scrubbed (and then cut to MAX_MESSAGE): a 4 MiB body took 4.6 s
_LAST_WORD = re.compile(r"[^\s\"'`<>()\[\]{},;:]+\Z")


def head(text: str) -> str:
    """The start of an API's text that is scrubbed and shown: MAX_SCAN characters, less a word the
    cut went through (a piece of a key too short to be known as one)."""
    return text if len(text) <= MAX_SCAN else _LAST_WORD.sub("", text[:MAX_SCAN])


def read_key(env: str | None) -> str | None:
    """The API key from the environment variable `env` (None: no key); RemoteError when it is
    missing or could not go in a header (httpx's own error would quote it)."""
    if env is None:
        return None
    key = os.environ.get(env, "").strip()
    if not key:
        raise RemoteError(f"the environment variable ${env} that should hold the API key is not set", "key")
    if not key.isascii() or not key.isprintable() or any(c.isspace() for c in key):
        raise RemoteError(f"the API key in ${env} has characters an HTTP header cannot carry", "key")
    return key


class FimClient:
    """One API (base URL, model, key). `complete` raises RemoteError; cancelling it closes the HTTP
    request. `counts` (requests, retries, failures) holds numbers only."""

    def __init__(self, base_url: str, model: str, api_key_env: str | None = None, *, connect_s: float = 5.0,
                 read_s: float = 30.0, tries: int = 4, backoff_s: float = 0.5, max_wait_s: float = 20.0,
                 temperature: float = 0.0, max_body: int = MAX_BODY,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep, route: str | None = None,
                 server: str = "generic", fim_template: str | None = None, remote_format: str = "completions"):
        if tries < 1:
            raise ValueError(f"tries must be at least 1, got {tries}")
        self.asking = Asking(profile_for(server), model, fim_template, remote_format == "chat", temperature)
        self.base_url, self.model, self.api_key_env = base_url.rstrip("/"), model, api_key_env
        self.tries, self.backoff_s, self.max_wait_s = tries, backoff_s, max_wait_s
        self.temperature, self.max_body, self.sleep = temperature, max_body, sleep
        self.deadline_s = connect_s + read_s  # one try, whole: a read timeout is per chunk, a drip is not
        self.route = route  # the path that answers, once known
        self.counts = {"requests": 0, "retries": 0, "failures": 0}
        self._key = read_key(api_key_env)
        self._scrub = KeyScrubber(self._key)
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(read_s, connect=connect_s))

    @classmethod
    def from_launch(cls, launch: LaunchSettings, **options) -> FimClient:
        if launch.base_url is None or launch.remote_model is None:
            raise ValueError("backend openai needs base_url and remote_model")
        return cls(launch.base_url, launch.remote_model, launch.api_key_env, server=launch.server,
                   fim_template=launch.fim_template, remote_format=launch.remote_format, **options)

    def __repr__(self) -> str:
        return f"FimClient({self.base_url!r}, {self.model!r}, api_key_env={self.api_key_env!r})"

    def _fail(self, cls, message: str, kind: str, status: int | None = None) -> RemoteError:
        self.counts["failures"] += 1
        return cls(self._scrub(message), kind, status)

    async def complete(self, prefix: str, suffix: str, max_tokens: int, one_line: bool = False) -> Completion:
        """The API's fill between prefix and suffix: at most max_tokens tokens, the first line only
        when one_line (stop at a newline; in a chat answer, its code's first line)."""
        request = self.asking.fill_request(prefix, suffix, max_tokens, one_line)
        t0, said = time.perf_counter(), ""
        paths = (self.route,) if self.route else request.routes
        for path in paths:
            raw, said = await self._post(path, request.body)
            if raw is None:  # 404: no such endpoint here (or no such model: the API's message says)
                continue
            try:
                text, tokens = parse_answer(raw)
                text = fenced_code(text) if request.fenced else text
            except ValueError as e:  # RequestFailed, or a chat answer without its code fence
                raise self._fail(RequestFailed, str(e), "answer") from None
            if one_line and request.fenced:
                text = text.split("\n", 1)[0]
            self.route = path
            return Completion(text, tokens, (time.perf_counter() - t0) * 1e3, path)
        raise self._fail(RemoteError, f"{self.base_url} answered 404 (not found) at {' and '.join(paths)}"
                                      f"{said}; check the base URL and the model name", "endpoint", 404)

    async def edit(self, content: str, max_tokens: int) -> Completion:
        """A next edit from the API's edit endpoint (or, for a server without one, through chat): one
        user message in Inception's tagged format; the answer, chat-shaped, is the
        rewritten code_to_edit section."""
        request = self.asking.edit_request(content, max_tokens)
        if request is None:
            raise self._fail(RemoteError, f"server {self.asking.profile.name} has no next-edit endpoint "
                                          "(remote_format chat asks an instruct model instead)", "endpoint")
        return await self._one(request, "the API has no next-edit endpoint")

    async def instruct(self, content: str, max_tokens: int) -> Completion:
        """An edit from an instruction, through the API's chat endpoint (instruct_request):
        the code in the answer's fence."""
        return await self._one(self.asking.instruct_request(content, max_tokens),
                               "an edit from an instruction needs the API's chat endpoint")

    async def _one(self, request, missing: str) -> Completion:
        """The answer of a request with one route; a 404 says `missing`."""
        (route,) = request.routes
        t0 = time.perf_counter()
        raw, said = await self._post(route, request.body)
        if raw is None:
            raise self._fail(RemoteError, f"{self.base_url} answered 404 (not found) at {route}{said}: {missing}",
                             "endpoint", 404)
        try:
            text, tokens = parse_answer(raw)
            text = fenced_code(text) if request.fenced else text
        except RequestFailed as e:
            raise self._fail(RequestFailed, str(e), e.kind) from None
        except ValueError as e:  # a chat answer without its code fence
            raise self._fail(RequestFailed, str(e), "answer") from None
        return Completion(text, tokens, (time.perf_counter() - t0) * 1e3, route)

    async def _post(self, path: str, body: dict) -> tuple[bytes | None, str]:
        """(the answer's body, "") or, for a 404, (None, what the API said); retries 429 and 5xx;
        RemoteError otherwise."""
        url, env = self.base_url + path, self.api_key_env
        for attempt in range(1, self.tries + 1):
            self.counts["requests"] += 1
            status, headers, raw, failure = await self._send(url, body)
            if failure is not None:
                raise failure
            if raw is None:
                raise self._fail(RequestFailed, f"the API's answer is larger than {self.max_body} bytes", "answer",
                                 status)
            if 200 <= status < 300:
                return raw, ""
            said = api_message(raw, self._scrub)
            said = f": {said}" if said else ""
            if status == 404:
                return None, said
            if status in (401, 403):
                whose = f"the key in ${env}" if env else "a request without a key (set model.apiKeyEnv)"
                raise self._fail(RemoteError, f"the API refused {whose} (HTTP {status}){said}", "key", status)
            if status == 429 or status >= 500:
                wait = self._wait(attempt, retry_after(headers.get("retry-after")))
                if attempt < self.tries and wait is not None:
                    self.counts["retries"] += 1
                    await self.sleep(wait)
                    continue
                why = "rate-limited" if status == 429 else "failing"
                raise self._fail(RemoteError, f"the API is {why} (HTTP {status} after {attempt} "
                                              f"{'try' if attempt == 1 else 'tries'}){said}", "busy", status)
            raise self._fail(RequestFailed, f"the API rejected the request (HTTP {status}){said}", "rejected", status)
        raise AssertionError("unreachable")  # the last try always returns or raises

    def _wait(self, attempt: int, asked: float | None) -> float | None:
        """Seconds before try attempt + 1: exponential backoff, or longer when Retry-After asks;
        None when the API asks for more than max_wait_s."""
        if asked is not None and asked > self.max_wait_s:
            return None
        return max(self.backoff_s * 2 ** (attempt - 1), asked or 0.0)

    async def _send(self, url: str, body: dict) -> tuple[int, httpx.Headers | None, bytes | None,
                                                          RemoteError | None]:
        """(status, headers, body or None when too large, failure). httpx's exceptions end here and
        ours is raised outside their `except`, unchained: their request carries the key's header."""
        try:
            return await asyncio.wait_for(self._exchange(url, body), self.deadline_s)
        except (asyncio.TimeoutError, httpx.TimeoutException):
            failure = self._fail(RemoteError, f"{url} did not answer within {self.deadline_s:g} s", "timeout")
        except (httpx.HTTPError, httpx.InvalidURL) as e:
            failure = self._fail(RemoteError, f"cannot reach {url}: {type(e).__name__}: {one_line(str(e))}",
                                 "unreachable")
        return 0, None, None, failure

    async def _exchange(self, url: str, body: dict) -> tuple[int, httpx.Headers, bytes | None, None]:
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        async with self._http.stream("POST", url, json=body, headers=headers) as response:
            chunks, size = [], 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > self.max_body:  # leaving the block closes the connection
                    return response.status_code, response.headers, None, None
                chunks.append(chunk)
            return response.status_code, response.headers, b"".join(chunks), None

    def describe(self) -> dict:
        return {"base_url": self.base_url, "model": self.model, "api_key_env": self.api_key_env,
                "route": self.route, **self.asking.describe(), **self.counts}

    async def aclose(self) -> None:
        await self._http.aclose()
