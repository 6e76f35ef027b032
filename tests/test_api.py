"""`diffusion-lsp serve-api` for real on 127.0.0.1, driven by the official `openai` client and httpx:
a fill on both routes and in a FIM template (Zed's request, as its OpenAI-compatible edit-prediction
provider sends it), streaming deltas and `diffusing` drafts, a next edit, the key, 429 when the
queue is full, bad and hostile bodies, a client leaving mid-stream, the worker killed mid-request,
and the language server's remote backend pointed at it.

The checkpoints' answers are known: test_server_range's scripted checkpoint writes "foo(value) + 1"
after "self." one token per step; test_server_e2e's echo checkpoint re-masks into "foo"s."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import openai
import pytest
from lsprotocol import types

from conftest import open_doc, start_server, stop_server, within
from diffusion_lsp.bench.api import stop
from diffusion_lsp.model.decoding.results import MASK_GLYPH
from diffusion_lsp.formats import mercury
from test_server_e2e import echo_checkpoint  # noqa: F401 (a fixture)
from test_server_range import CAPS, SCRIPT, scripted_checkpoint

pytestmark = pytest.mark.slow
PREFIX, SUFFIX, ANSWER = "def f(self):\n    y = self.", "\n", "foo(value) + 1"
KEY_ENV, KEY = "DIFFUSION_LSP_TEST_API_KEY", "sk-test-0123456789"


WAIT_S = 120  # seconds: only reached when a test is failing (a model load included)


def until(check, what: str, wait_s: float = WAIT_S):
    """`check()`'s first true value. serve-api is another process: what it exposes to wait on is what
    /health and /metrics say, so they are read until they say it, up to `wait_s`."""
    deadline = time.monotonic() + wait_s
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {wait_s:g} s")
        time.sleep(0.05)
    return value


def health(base: str) -> httpx.Response | None:
    """/health's answer, or None while nothing listens yet."""
    try:
        return httpx.get(base + "/health", timeout=2)
    except httpx.HTTPError:
        return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Api:
    def __init__(self, model: Path, folder: Path, *flags: str, env: dict | None = None, heal: bool = False):
        folder.mkdir(mode=0o700, exist_ok=True)
        self.port = free_port()
        self.base = f"http://127.0.0.1:{self.port}"
        self.log = folder / "api.log"
        cmd = [sys.executable, "-m", "diffusion_lsp", "serve-api", "--port", str(self.port), "--model", str(model),
               *([] if heal else ["--no-heal"]), "--worker-socket", str(folder / "worker.sock"), "--log-level",
               "warning", *flags]
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})})
        def ready() -> bool:
            assert self.proc.poll() is None, self.log.read_text()
            return getattr(health(self.base), "status_code", None) == 200

        until(ready, "ready serve-api")

    def client(self, **options) -> openai.OpenAI:
        return openai.OpenAI(base_url=self.base + "/v1", api_key=options.pop("api_key", "unused"), **options)

    def worker_pid(self) -> int:
        return httpx.get(self.base + "/health").json()["worker"]["pid"]

    def metric(self, name: str, headers: dict | None = None) -> float:
        text = httpx.get(self.base + "/metrics", headers=headers or {}).text
        return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(name))

    def close(self) -> None:
        stop(self.proc)


@pytest.fixture(scope="module")
def api(tokenizer, tmp_path_factory):
    folder = tmp_path_factory.mktemp("api")
    server = Api(scripted_checkpoint(tokenizer, SCRIPT, folder / "model"), folder / "run", "--max-in-flight", "1",
                 "--timeout", "10")
    yield server
    server.close()


# ---- the API with the official client ----

def test_a_fill_on_both_routes_and_in_a_fim_template(api, tokenizer):
    client = api.client()
    done = client.completions.create(model="diffusion-lsp", prompt=PREFIX, suffix=SUFFIX, max_tokens=16)
    assert done.choices[0].text == ANSWER and done.choices[0].finish_reason == "stop"
    assert done.usage.completion_tokens == len(tokenizer.encode(ANSWER))  # the scripted model writes its tokens
    fim = httpx.post(api.base + "/v1/fim/completions", json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 16})
    assert fim.status_code == 200 and fim.json()["choices"][0]["text"] == ANSWER
    # Zed's OpenAI-compatible edit-prediction provider: a qwen FIM prompt, its stop tokens, no suffix field
    zed = {"model": "diffusion-lsp", "prompt": f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>",
           "max_tokens": 64, "temperature": None, "stop": ["<|endoftext|>", "<|fim_prefix|>", "<fim_prefix>", "<PRE>"]}
    answer = httpx.post(api.base + "/v1/completions", json=zed)
    assert answer.status_code == 200 and answer.json()["choices"][0]["text"] == ANSWER
    stopped = client.completions.create(model="diffusion-lsp", prompt=PREFIX, suffix=SUFFIX, max_tokens=16,
                                        stop=["("])
    assert stopped.choices[0].text == "foo" and stopped.choices[0].finish_reason == "stop"
    assert [m.id for m in client.models.list().data] == ["diffusion-lsp"]
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gpt-4", prompt=PREFIX, max_tokens=4)


def test_usage_counts_the_tokens_the_model_wrote_never_past_max_tokens(tokenizer, tmp_path):
    """With token healing the fill's first token re-types the prompt's last one ("."): it is one of
    the max_tokens the model writes, and usage counts it, once."""
    server = Api(scripted_checkpoint(tokenizer, SCRIPT, tmp_path / "model"), tmp_path / "run", heal=True)
    try:
        client = server.client()
        cut = client.completions.create(model="diffusion-lsp", prompt=PREFIX, suffix=SUFFIX, max_tokens=4)
        assert cut.choices[0].text == "foo(value" and cut.choices[0].finish_reason == "length"  # ".", foo, (, value
        assert cut.usage.completion_tokens == 4
        whole = client.completions.create(model="diffusion-lsp", prompt=PREFIX, suffix=SUFFIX, max_tokens=16)
        assert whole.choices[0].text == ANSWER and whole.choices[0].finish_reason == "stop"
        assert whole.usage.completion_tokens == len(tokenizer.encode(SCRIPT))  # ".", then ANSWER's tokens
    finally:
        server.close()


def test_streaming_deltas_and_diffusing_drafts(api):
    client = api.client()
    chunks = list(client.completions.create(model="diffusion-lsp", prompt=PREFIX, suffix=SUFFIX, max_tokens=16,
                                            stream=True))
    texts = [c.choices[0].text for c in chunks]
    assert "".join(texts) == ANSWER and len([t for t in texts if t]) >= 3, texts  # the text as it commits
    assert chunks[-1].choices[0].finish_reason == "stop"
    drafts = [c.choices[0].text for c in client.completions.create(
        model="diffusion-lsp", prompt=PREFIX, suffix=SUFFIX, max_tokens=16, stream=True,
        extra_body={"diffusing": True})]
    assert drafts[-1] == ANSWER and len(drafts) >= 3, drafts
    assert all(MASK_GLYPH in d for d in drafts[:-1]), drafts  # each a whole draft, masks still in it
    masks = [d.count(MASK_GLYPH) for d in drafts]
    assert masks == sorted(masks, reverse=True), drafts  # sharpening: fewer masks at every step


def test_a_next_edit_through_the_edit_endpoint(echo_checkpoint, tmp_path):  # noqa: F811
    server = Api(echo_checkpoint, tmp_path / "run", "--timeout", "20", "--next-edit",
                 json.dumps({"maxSpanLines": 1, "minConfidence": 0.5}))
    try:
        region = "def area(width, h):\n    return w * h\n"
        content = mercury.edit_request("area.py", "", region, 4, "\nprint(area(2, 3))\n",
                                       ["--- a/area.py\n+++ b/area.py\n@@ -1 +1 @@\n-def area(w, h):\n"
                                        "+def area(width, h):\n"], lambda t: len(t) // 3 + 1, 400)
        client = server.client()
        done = client.post("/edit/completions", cast_to=openai.types.chat.ChatCompletion,
                           body={"model": "diffusion-lsp", "messages": [{"role": "user", "content": content}]})
        # the history's rename is followed by the language server's rules: the model is not asked
        assert mercury.rewritten(done.choices[0].message.content) == "def area(width, h):\n    return width * h\n"
        content = mercury.edit_request("area.py", "", region, 4, "\nprint(area(2, 3))\n", [], lambda t: len(t) // 3 + 1,
                                       400)  # no history: the model's edit
        done = client.post("/edit/completions", cast_to=openai.types.chat.ChatCompletion,
                           body={"model": "diffusion-lsp", "messages": [{"role": "user", "content": content}]})
        new = mercury.rewritten(done.choices[0].message.content)
        changed = [(a, b) for a, b in zip(region.splitlines(), new.splitlines()) if a != b]
        assert len(new.splitlines()) == 2 and len(changed) == 1, new
        assert changed[0][1].strip().strip("fo") == "", changed  # the echo model's foo's
        via = asyncio.run(_edit_through_the_language_servers_client(server.base, content))
        assert mercury.rewritten(via) == new  # the remote backend's own client (backend/api_client.py) gets the same
        bad = httpx.post(server.base + "/v1/edit/completions", json={"messages": [{"role": "user", "content": "hi"}]})
        assert bad.status_code == 400 and "<|current_file_content|>" in bad.json()["error"]["message"]
        huge = mercury.edit_request("area.py", "", "x = 1\n" * 20_000, 0, "", [], lambda t: len(t) // 3 + 1, 10 ** 6)
        big = httpx.post(server.base + "/v1/edit/completions", timeout=60,
                         json={"messages": [{"role": "user", "content": huge}]})  # was a retryable 503
        assert big.status_code == 400 and "retry-after" not in big.headers, big.text
        assert big.json()["error"]["param"] == "messages" and "does not fit" in big.json()["error"]["message"]
        lone = mercury.edit_request("area.py", "", "x = '\ud800'\n", 0, "", [], lambda t: len(t) // 3 + 1, 400)
        echoed = httpx.post(server.base + "/v1/edit/completions", timeout=60,  # the region comes back in the answer
                            content=json.dumps({"messages": [{"role": "user", "content": lone}]}),
                            headers={"Content-Type": "application/json"})
        assert echoed.status_code == 200, echoed.text  # was a 500: the answer could not be encoded
    finally:
        server.close()


async def _edit_through_the_language_servers_client(base: str, content: str) -> str:
    from diffusion_lsp.backend.api_client import FimClient

    client = FimClient(base + "/v1", "diffusion-lsp")
    try:
        return (await client.edit(content, 128)).text
    finally:
        await client.aclose()


def test_the_key_is_needed_when_one_is_set(tokenizer, tmp_path):
    model = scripted_checkpoint(tokenizer, SCRIPT, tmp_path / "model")
    server = Api(model, tmp_path / "run", "--api-key-env", KEY_ENV, env={KEY_ENV: KEY})
    try:
        with pytest.raises(openai.AuthenticationError):
            server.client(api_key="wrong").completions.create(model="diffusion-lsp", prompt=PREFIX, max_tokens=4)
        bare = httpx.post(server.base + "/v1/completions", json={"prompt": PREFIX, "max_tokens": 4})
        assert bare.status_code == 401 and bare.headers["www-authenticate"] == "Bearer"
        assert httpx.get(server.base + "/metrics").status_code == 401
        done = server.client(api_key=KEY).completions.create(model="diffusion-lsp", prompt=PREFIX, suffix=SUFFIX,
                                                             max_tokens=16)
        assert done.choices[0].text == ANSWER
        health = httpx.get(server.base + "/health")  # load balancers ask without a key
        assert health.status_code == 200 and health.json() == {"status": "ok"}  # no pid, socket or error
        full = httpx.get(server.base + "/health", headers={"Authorization": f"Bearer {KEY}"}).json()
        assert full["worker"]["state"] == "ready" and full["worker"]["pid"] > 0
        assert server.metric('diffusion_lsp_api_rejected_total{reason="auth"}', {"Authorization": f"Bearer {KEY}"}) == 3
    finally:
        server.close()
    with pytest.raises(subprocess.CalledProcessError):  # a key variable that is not set: refused at start
        subprocess.run([sys.executable, "-m", "diffusion_lsp", "serve-api", "--api-key-env", "NO_SUCH_VAR_XYZ"],
                       check=True, capture_output=True, timeout=60)


def test_a_full_queue_answers_429_with_retry_after(api):
    pid = api.worker_pid()
    os.kill(pid, signal.SIGSTOP)  # the worker stalls: the one request admitted (--max-in-flight 1) waits
    try:
        first, refused = asyncio.run(_hold_and_probe(api, pid))
    finally:
        os.kill(pid, signal.SIGCONT)
    assert refused.status_code == 429 and refused.response.headers["retry-after"] == "1"
    assert first.status_code == 200 and first.json()["choices"][0]["text"] == ANSWER
    assert api.metric('diffusion_lsp_api_rejected_total{reason="queue_full"}') >= 1


async def _hold_and_probe(api: Api, pid: int):
    async with httpx.AsyncClient(timeout=30) as http:
        first = asyncio.ensure_future(http.post(api.base + "/v1/completions",
                                                json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 16}))
        await asyncio.to_thread(until, lambda: api.metric("diffusion_lsp_api_queue_depth") == 1, "admitted request")
        with pytest.raises(openai.RateLimitError) as refused:  # the official client, not retrying
            api.client(max_retries=0).completions.create(model="diffusion-lsp", prompt=PREFIX, max_tokens=4)
        os.kill(pid, signal.SIGCONT)
        return await first, refused.value


def test_bad_and_hostile_bodies_get_4xx_and_the_server_keeps_serving(api):
    url = api.base + "/v1/completions"
    cases = {
        "malformed": httpx.post(url, content=b"{not json", headers={"Content-Type": "application/json"}),
        "binary": httpx.post(url, content=bytes(range(256)) * 4),
        "oversized": httpx.post(url, content=b"x" * (2 << 20)),
        "wrong type": httpx.post(url, json={"prompt": PREFIX, "max_tokens": "lots"}),
        "not an object": httpx.post(url, json=[1, 2, 3]),
        "huge max_tokens": httpx.post(url, json={"prompt": PREFIX, "max_tokens": 10 ** 9}),
        "deeply nested": httpx.post(url, content=b"[" * 100_000 + b"]" * 100_000),
        "no route": httpx.post(api.base + "/v1/nothing", json={}),
        "wrong method": httpx.get(url),
    }
    status = {k: r.status_code for k, r in cases.items()}
    assert status == {"malformed": 400, "binary": 400, "oversized": 413, "wrong type": 400, "not an object": 400,
                      "huge max_tokens": 400, "deeply nested": 400, "no route": 404, "wrong method": 405}, status
    assert all("error" in r.json() for r in cases.values())
    assert cases["wrong type"].json()["error"]["param"] == "max_tokens"
    unknown = httpx.post(url, json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 16, "mystery": {"a": 1}})
    assert unknown.status_code == 200 and unknown.json()["choices"][0]["text"] == ANSWER  # ignored, counted
    assert api.metric("diffusion_lsp_api_ignored_fields_total") >= 1


def test_input_the_model_can_never_take_is_a_400_naming_the_field_not_a_retryable_503(api):
    """A lone surrogate got 503 (TypeError from the tokenizer) and max_tokens 512 passed the API's own
    check, then got 503 with Retry-After ("does not fit the model's 512 positions"): the openai client
    retries 503s. Surrogates are read as U+FFFD, as the language server reads them; a canvas that does
    not fit is the same on every try, so a 400."""
    url = api.base + "/v1/completions"
    lone = json.dumps({"prompt": PREFIX, "suffix": "\ud800" + SUFFIX, "max_tokens": 16})  # json.dumps escapes it
    answer = httpx.post(url, content=lone, headers={"Content-Type": "application/json"})
    assert answer.status_code == 200 and answer.json()["choices"][0]["text"] == ANSWER, answer.text
    big = httpx.post(url, json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 512})
    assert big.status_code == 400 and "retry-after" not in big.headers, big.text
    assert big.json()["error"]["param"] == "max_tokens" and "between 1 and 511, got 512" in big.json()["error"]["message"]
    streamed = httpx.post(url, json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 512, "stream": True})
    assert streamed.status_code == 400 and streamed.json()["error"]["param"] == "max_tokens"  # before the stream
    odd = httpx.post(url, json={"prompt": "a", "temperature": 10 ** 400})  # math.isfinite overflowed: a 500
    assert odd.status_code == 400 and odd.json()["error"]["param"] == "temperature"
    fits = httpx.post(url, json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 400})
    assert fits.status_code == 200 and fits.json()["choices"][0]["text"] == ANSWER


def test_a_client_that_leaves_cancels_its_request_and_the_server_goes_on(api):
    """With the worker stalled, a plain request and then a stream whose clients give up are seen to
    leave (not kept to the request's deadline, a 504), and each gives its place back."""
    before = api.metric("diffusion_lsp_api_client_disconnects_total")
    timeouts = api.metric("diffusion_lsp_api_timeouts_total")
    body = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 16}
    pid = api.worker_pid()
    os.kill(pid, signal.SIGSTOP)
    try:
        for n, stream in enumerate((False, True), start=1):
            with pytest.raises(httpx.ReadTimeout), httpx.Client(timeout=httpx.Timeout(30, read=1)) as http:
                with http.stream("POST", api.base + "/v1/completions", json={**body, "stream": stream}) as r:
                    next(r.iter_lines())  # no event comes: the client gives up
            until(lambda: (api.metric("diffusion_lsp_api_client_disconnects_total") == before + n
                           and api.metric("diffusion_lsp_api_queue_depth") == 0)
                  or api.metric("diffusion_lsp_api_timeouts_total") > timeouts, "disconnect or timeout")
            assert api.metric("diffusion_lsp_api_timeouts_total") == timeouts, stream  # it left before its deadline
            assert api.metric("diffusion_lsp_api_client_disconnects_total") == before + n, stream
            assert api.metric("diffusion_lsp_api_queue_depth") == 0, stream  # its place was given back
    finally:
        os.kill(pid, signal.SIGCONT)
    done = api.client().completions.create(model="diffusion-lsp", prompt=PREFIX, suffix=SUFFIX, max_tokens=16)
    assert done.choices[0].text == ANSWER


def test_a_client_that_leaves_a_stream_after_its_first_draft_leaves_no_traceback(api):
    """Leaving a `diffusing` stream after its first event closed the stream while its next step was
    still unwinding: "aclose(): asynchronous generator is already running", a traceback per stream."""
    body = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 64, "stream": True, "diffusing": True}
    for _ in range(8):
        with httpx.Client(timeout=30) as http, http.stream("POST", api.base + "/v1/completions", json=body) as r:
            next(r.iter_lines())
    done = api.client().completions.create(model="diffusion-lsp", prompt=PREFIX, suffix=SUFFIX, max_tokens=16)
    assert done.choices[0].text == ANSWER
    log = api.log.read_text()
    assert "already running" not in log and "Traceback" not in log, log[-3000:]


def test_a_worker_that_stops_answering_is_killed_and_restarted_after_a_missed_deadline(tokenizer, tmp_path):
    """SIGSTOP: every request got 504 for good and /health said ready; the request's deadline
    cancelled the link's call before the link's own ping-and-restart ran. As in the language
    server, a missed deadline now has the worker pinged, and killed and restarted when it is mute."""
    server = Api(scripted_checkpoint(tokenizer, SCRIPT, tmp_path / "model"), tmp_path / "run", "--timeout", "2")
    try:
        body = {"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 16}
        pid = server.worker_pid()
        os.kill(pid, signal.SIGSTOP)
        late = httpx.post(server.base + "/v1/completions", json=body, timeout=30)
        assert late.status_code == 504, late.text

        def restarted() -> dict | None:  # the ping's 2 s, then a new worker loads the model
            h = httpx.get(server.base + "/health").json()["worker"]
            return h if h["pid"] not in (pid, None) and h["state"] == "ready" else None

        until(restarted, "new ready worker")
        again = httpx.post(server.base + "/v1/completions", json=body, timeout=30)
        assert again.status_code == 200 and again.json()["choices"][0]["text"] == ANSWER
    finally:
        server.close()


def test_a_worker_killed_mid_request_is_restarted_and_the_request_retried(api):
    pid = api.worker_pid()
    os.kill(pid, signal.SIGSTOP)  # hold the request in the worker, then kill the worker under it

    async def go():
        async with httpx.AsyncClient(timeout=30) as http:
            task = asyncio.ensure_future(http.post(api.base + "/v1/completions",
                                                   json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 16}))
            await asyncio.to_thread(until, lambda: api.metric("diffusion_lsp_api_queue_depth") == 1,
                                    "admitted request")
            os.kill(pid, signal.SIGKILL)
            return await task

    answer = asyncio.run(go())
    assert answer.status_code == 200 and answer.json()["choices"][0]["text"] == ANSWER, answer.text
    assert api.worker_pid() != pid
    assert api.metric("diffusion_lsp_api_retries_total") >= 1
    assert api.metric("diffusion_lsp_api_worker_restarts") >= 1


@pytest.mark.asyncio
async def test_the_language_server_completes_through_serve_api(api, tmp_path):
    options = {"model": {"backend": "openai", "baseUrl": api.base + "/v1", "remoteModel": "diffusion-lsp"},
               "completion": {"confidenceCut": 0.0}, "worker": {"fillTimeoutS": 20}}
    client = await start_server(tmp_path / "unused", None, CAPS, options)
    try:
        open_doc(client, "file:///p.py", PREFIX + SUFFIX)
        result = await within(client.text_document_inline_completion_async(types.InlineCompletionParams(
            text_document=types.TextDocumentIdentifier("file:///p.py"), position=types.Position(1, 13),
            context=types.InlineCompletionContext(trigger_kind=types.InlineCompletionTriggerKind.Invoked))))
        items = result.items if hasattr(result, "items") else result
        assert [i.insert_text for i in items] == [ANSWER]
    finally:
        await stop_server(client)


def test_the_metrics_are_prometheus_text(api):
    text = httpx.get(api.base + "/metrics").text
    for name in ("requests_total", "rejected_total", "queue_depth", "batch_size_bucket", "completion_tokens_total",
                 "tokens_per_second", "forwards_total"):
        assert f"diffusion_lsp_api_{name}" in text, name
    assert json.loads(httpx.get(api.base + "/health").text)["status"] == "ok"


def test_slow_or_vanishing_senders_are_cut_off_and_counted_not_500s(tokenizer, tmp_path):
    """uvicorn has no deadline for a request to arrive: 60 connections trickling their headers were all
    open after 20 s. And a client that left mid-body was a 500 with an ERROR traceback, not a 499."""
    server = Api(scripted_checkpoint(tokenizer, SCRIPT, tmp_path / "model"), tmp_path / "run",
                 "--receive-timeout", "1.5")
    try:
        host, port = "127.0.0.1", server.port
        head = b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 100\r\n"
        trickling = [socket.create_connection((host, port)) for _ in range(5)]
        for s in trickling:
            s.settimeout(10)
        closed = 0
        for i in range(40):  # a byte of headers every 0.1 s from each (the client's pace): never done in 1.5 s
            for s in list(trickling):
                try:
                    s.sendall(head[i:i + 1])
                except OSError:  # the server closed it
                    closed += 1
                    trickling.remove(s)
            time.sleep(0.1)
        for s in trickling:  # headers never ended: whatever is left is closed by the server, its read gives EOF
            assert s.recv(1024) == b"", "a trickling connection stayed open"
            closed += 1
        assert closed == 5
        before = server.metric("diffusion_lsp_api_client_disconnects_total")
        with socket.create_connection((host, port)) as s:  # headers, half a body, then gone
            s.sendall(head + b"\r\n" + b'{"prompt": "def f(')
        until(lambda: server.metric("diffusion_lsp_api_client_disconnects_total") > before, "disconnect")
        assert server.metric("diffusion_lsp_api_client_disconnects_total") == before + 1
        assert server.metric('diffusion_lsp_api_requests_total{route="/v1/completions",status="499"}') == 1
        assert server.metric('diffusion_lsp_api_requests_total{route="/v1/completions",status="500"}') == 0
        assert "Traceback" not in server.log.read_text()
        done = httpx.post(server.base + "/v1/completions", json={"prompt": PREFIX, "suffix": SUFFIX, "max_tokens": 16})
        assert done.status_code == 200 and done.json()["choices"][0]["text"] == ANSWER  # and it goes on serving
    finally:
        server.close()


@pytest.mark.parametrize("flags, why", [
    (["--timeout", "nan"], "--timeout must be at least 0.1, got nan"),
    (["--receive-timeout", "nan"], "--receive-timeout must be at least 0.1, got nan"),
    (["--host", "not a host!"], "--host not a host!: not an address this machine has"),
    (["--port", "PORT_IN_USE"], "cannot listen on 127.0.0.1:PORT_IN_USE: Address already in use"),
    (["--worker-socket", "SHARED/w.sock"], "must be a directory owned by uid"),
])
def test_a_bad_start_is_one_line_and_exit_2_before_anything_loads(tmp_path, flags, why):
    """They were: exit 3 after uvicorn's log (port in use, no such host), a server that never got
    ready logging an ERROR every 50 ms (a worker socket in a folder others can enter), NaN accepted."""
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = str(taken.getsockname()[1])
        shared = tmp_path / "shared"
        shared.mkdir(mode=0o755)
        shared.chmod(0o755)
        flags = [f.replace("PORT_IN_USE", port).replace("SHARED", str(shared)) for f in flags]
        done = subprocess.run([sys.executable, "-m", "diffusion_lsp", "serve-api", *flags], capture_output=True,
                              text=True, timeout=60)
    why = why.replace("PORT_IN_USE", port)
    assert done.returncode == 2 and done.stderr.strip().splitlines()[-1].startswith("diffusion-lsp: error: "), done
    assert why in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_worker_socket_served_by_another_model_is_a_503_saying_so(tmp_path):
    """Every request got "the model is not ready" and /health "stopped" with no error, while the log
    said why every 50 ms."""
    import threading

    from diffusion_lsp.worker import wire

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    path = run / "w.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    server.listen(8)
    hello = wire.encode({"event": "hello", "version": wire.WIRE_VERSION, "pid": 1, "state": "ready",
                         "model": "/models/another", "build": wire.build_id(), "weights": ""})

    def serve():  # a worker of another model: says hello to every connection
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.sendall(hello)

    threading.Thread(target=serve, daemon=True).start()
    port = free_port()
    log = open(tmp_path / "api.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "diffusion_lsp", "serve-api", "--port", str(port),
                             "--worker-socket", str(path), "--log-level", "warning"], stdout=log, stderr=log)
    try:
        base = f"http://127.0.0.1:{port}"
        first = until(lambda: health(base), "answer from /health")
        answer = httpx.post(base + "/v1/completions", json={"prompt": "x = ", "max_tokens": 4}, timeout=30)
        assert answer.status_code == 503 and "serves the model /models/another" in answer.json()["error"]["message"]
        assert "serves the model /models/another" in httpx.get(base + "/health").json()["worker"]["error"]
        assert first.status_code == 503
    finally:
        stop(proc)
        server.close()
        log.close()
