"""serve-api's bound on max_tokens and its `model` field, in process (starlette's TestClient over a fake
worker): one bound (--max-tokens and the loaded model's canvas, whichever is smaller) and one message
wherever max_tokens is refused; a body without `model` is answered by the served model."""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from diffusion_lsp.api.app import create_app
from diffusion_lsp.api.metrics import Metrics
from diffusion_lsp.api.service import Service
from diffusion_lsp.protocol.answers import Fill
from diffusion_lsp.protocol.capabilities import Capabilities
from diffusion_lsp.protocol.failure import BackendError, Failure
from diffusion_lsp.protocol.requests import max_tokens_refusal
from diffusion_lsp.worker.spec import WorkerSpec

ASK = [{"role": "user", "content": "hi"}]


class AnsweringBackend:
    """A worker that has said its largest canvas (`limit`; None: not yet) and answers "x" per token,
    refusing a canvas past the model as the worker does (worker/process.py)."""
    capabilities = Capabilities(chat=True, structured=True)
    counts = {"worker_crashes": 0}

    def __init__(self, limit: int | None, model_limit: int = 511):
        self.limit, self.model_limit, self.asked = limit, model_limit, []

    async def start(self):
        pass

    async def ready(self):
        pass

    def describe(self) -> dict:
        return {"state": "ready", "error": None, "max_tokens": self.limit}

    async def fill(self, key, order):
        self.asked.append(order.max_tokens)
        if (refused := max_tokens_refusal(order.max_tokens, self.model_limit)) is not None:
            raise BackendError(Failure.INVALID, refused, param="max_tokens")
        return Fill("x" * order.max_tokens, ["x"] * order.max_tokens, [1.0] * order.max_tokens,
                    tokens=order.max_tokens)

    async def close(self):
        pass


def _app(tmp_path, backend, **kw):
    service = Service(WorkerSpec(tmp_path / "w.sock"), Metrics())
    service.backend = backend
    return TestClient(create_app(service, models=["served-name", "alias"], **kw))


@pytest.mark.parametrize("limit", [511, None])
def test_max_tokens_has_one_bound_and_one_message(tmp_path, limit):
    """A user's case: 600 was refused "between 1 and 512" (--max-tokens) and 512 "at most 511" (the
    model): two bounds, two messages. Now both say the model's bound, once it is known (before, the
    worker refuses with the same message), on the completion and the chat routes."""
    backend = AnsweringBackend(limit)
    with _app(tmp_path, backend, max_tokens=512) as http:
        for route, body in [("/v1/completions", {"prompt": "a", "suffix": "b"}), ("/v1/chat/completions",
                                                                                    {"messages": ASK})]:
            for n in (512, 600, 0):
                r = http.post(route, json={**body, "max_tokens": n})
                most = 512 if limit is None and n != 512 else 511  # 600 and 0: --max-tokens before the model says
                assert r.status_code == 400, r.text
                assert r.json()["error"] == {"message": f"max_tokens must be an integer between 1 and {most}, got {n}",
                                             "type": "invalid_request_error", "param": "max_tokens", "code": None}
            ok = http.post(route, json={**body, "max_tokens": 511})
            assert ok.status_code == 200 and ok.json()["usage"]["completion_tokens"] == 511, ok.text
            newer = http.post(route, json={**body, "max_completion_tokens": 700})
            assert newer.json()["error"]["message"] == f"max_completion_tokens must be an integer between 1 and " \
                                                       f"{511 if limit else 512}, got 700", newer.text
    assert backend.asked == ([511, 511] if limit else [512, 511, 512, 511])  # known: refused before the worker


def test_a_body_without_model_is_answered_by_the_served_model(tmp_path):
    """Decided: `model` may be left out, as vLLM's server allows; the answer names the served model (the
    first --served-model-name). A name not served is a 404 naming /v1/models."""
    with _app(tmp_path, AnsweringBackend(511)) as http:
        for route, body in [("/v1/completions", {"prompt": "a", "max_tokens": 3}),
                            ("/v1/chat/completions", {"messages": ASK, "max_tokens": 3})]:
            r = http.post(route, json=body)
            assert r.status_code == 200 and r.json()["model"] == "served-name", r.text
            assert http.post(route, json={**body, "model": "alias"}).json()["model"] == "alias"
            wrong = http.post(route, json={**body, "model": "gpt-4"})
            assert wrong.status_code == 404 and wrong.json()["error"]["code"] == "model_not_found"
            assert "GET /v1/models lists served-name, alias" in wrong.json()["error"]["message"]


def test_the_model_refuses_a_structured_answer_past_its_canvas_with_the_same_message():
    from diffusion_lsp.engine import load_engine
    from diffusion_lsp.model.decoding.canvas import DoesNotFit
    from diffusion_lsp.protocol.requests import StructuredRequest
    from diffusion_lsp.protocol.settings import LaunchSettings, SamplerConfig

    engine = load_engine(LaunchSettings(threads=1))
    order = StructuredRequest(json.dumps({"messages": ASK}), json.dumps({"object": True}), 4000, SamplerConfig())
    with pytest.raises(DoesNotFit) as e:
        engine.answer_structured(order)
    assert str(e.value) == f"max_tokens must be an integer between 1 and {engine.max_tokens()}, got 4000"
    assert e.value.param == "max_tokens"


def test_serve_api_help_names_every_route_it_serves(tmp_path, capsys):
    from diffusion_lsp.cli import main

    app = create_app(Service(WorkerSpec(tmp_path / "w.sock"), Metrics()), models=["diffusion-lsp"])
    paths = {route.path for route in app.routes}
    assert "/v1/completions" in paths
    with pytest.raises(SystemExit):
        main(["serve-api", "--help"])
    described = " ".join(capsys.readouterr().out.split("options:")[0].split())  # the description, unwrapped
    assert [p for p in sorted(paths) if p not in described] == []  # /v1/chat/completions was missing
