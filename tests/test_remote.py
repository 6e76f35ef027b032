"""Remote backends (`--backend openai`) against a real HTTP server on 127.0.0.1 with scripted
answers (remote_api.py): the request bodies and the Bearer header, the /completions fallback, retries
on 429 and 5xx, one-line errors for everything else, a hang and a huge body, the key kept out of every
message and log record; `fim` and `fim --batch` end to end."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time

import pytest

from remote_api import ENV, KEY, WAIT, Api, assert_no_key, chain, client, complete, ok
from diffusion_lsp.cli import main
from diffusion_lsp.protocol.settings import LaunchSettings
from diffusion_lsp.backend.api_client import FimClient, RemoteError, RequestFailed, api_message, retry_after


def test_a_fim_request_carries_the_fields_and_the_bearer_key(api):
    api.script.extend([ok("x + 1", usage={"completion_tokens": 3}), ok("1")])
    c, _ = client(api)
    done = complete(c)
    assert (done.text, done.tokens, done.route) == ("x + 1", 3, "/fim/completions")
    path, headers, body = api.got[0]
    assert path == "/v1/fim/completions" and headers["Authorization"] == f"Bearer {KEY}"
    assert body == {"model": "mercury-edit", "prompt": "def f(x):\n    return ", "suffix": "\n", "max_tokens": 16,
                    "temperature": 0.0}
    c, _ = client(api)
    complete(c, max_tokens=5, one_line=True)
    assert api.got[1][2]["stop"] == ["\n"] and api.got[1][2]["max_tokens"] == 5


def test_an_api_without_fim_completions_is_asked_at_completions_and_remembered(api):
    api.script.extend([(404, {"error": {"message": "no route"}}), ok("a"), ok("b")])
    c, _ = client(api)

    async def go():
        try:
            return [(await c.complete("p", "s", 4)).text for _ in range(2)]
        finally:
            await c.aclose()

    assert asyncio.run(go()) == ["a", "b"]
    assert api.paths() == ["/v1/fim/completions", "/v1/completions", "/v1/completions"]
    assert api.got[1][2]["suffix"] == "s" and c.route == "/completions"


def test_404_at_both_endpoints_is_one_error_naming_the_api_message(api):
    api.script.extend([(404, {"error": {"message": "no route"}}), (404, {"error": {"message": "model m not found"}})])
    c, _ = client(api)
    with pytest.raises(RemoteError, match="answered 404 .*model m not found; check the base URL") as e:
        complete(c)
    assert e.value.kind == "endpoint" and "\n" not in str(e.value)


def test_429_waits_as_long_as_retry_after_asks(api):
    api.script.extend([(429, {"error": "slow down"}, {"Retry-After": "3"}), ok("fine")])
    c, waits = client(api)
    assert complete(c).text == "fine"
    assert waits == [3.0] and c.counts == {"requests": 2, "retries": 1, "failures": 0}


def test_5xx_is_retried_with_exponential_backoff(api):
    api.script.extend([(500, b"oops"), (503, {"error": {"message": "overloaded"}}), ok("fine")])
    c, waits = client(api)
    assert complete(c).text == "fine"
    assert waits == [0.5, 1.0] and c.counts["retries"] == 2 and len(api.got) == 3


def test_retries_are_bounded_and_a_long_retry_after_is_not_waited_for(api):
    api.default = (502, {"error": {"message": "bad gateway"}})
    c, waits = client(api, tries=3)
    with pytest.raises(RemoteError, match=r"the API is failing \(HTTP 502 after 3 tries\): bad gateway") as e:
        complete(c)
    assert e.value.kind == "busy" and waits == [0.5, 1.0] and len(api.got) == 3
    api.default = (429, {}, {"Retry-After": "3600"})
    c, waits = client(api, tries=3)
    with pytest.raises(RemoteError, match=r"rate-limited \(HTTP 429 after 1 try\)"):
        complete(c)
    assert waits == []


def test_a_refused_key_is_one_line_naming_the_variable_not_the_key(api, caplog):
    caplog.set_level(logging.DEBUG)
    api.script.append((401, {"error": {"message": f"invalid key {KEY} (Bearer {KEY})"}}))
    c, _ = client(api)
    with pytest.raises(RemoteError, match=r"^the API refused the key in \$TEST_KEY \(HTTP 401\): invalid key") as e:
        complete(c)
    assert e.value.kind == "key" and "[key]" in str(e.value)
    assert_no_key(e.value, *chain(e.value), caplog.text, c.describe(), repr(c), c.counts)


@pytest.mark.parametrize("answer, message", [
    ((400, {"error": {"message": "prompt too long " + "x" * 500 + " " + KEY}}),
     r"rejected the request \(HTTP 400\): prompt too long x+\.\.\.$"),
    ((200, b"<html>not json</html>"), "not JSON"),
    ((200, {"id": 1}), r"no choices\[0\]\.text"),
    ((200, {"choices": []}), r"no choices\[0\]\.text"),
    ((200, {"choices": [{"text": 7}]}), r"no choices\[0\]\.text"),
    ((200, b"[" * 100_000), "not JSON"),
    (("huge", 8 * 1024 * 1024), "larger than"),
])
def test_odd_answers_are_one_line_errors_without_the_key(api, caplog, answer, message):
    caplog.set_level(logging.DEBUG)
    api.script.append(answer)
    c, _ = client(api, max_body=1024 * 1024)
    with pytest.raises(RequestFailed, match=message) as e:
        complete(c)
    assert isinstance(e.value, ValueError) and len(str(e.value)) < 300 and "\n" not in str(e.value)
    assert_no_key(*chain(e.value), caplog.text, c.describe())


def test_a_hang_past_the_timeout_fails_and_drops_the_connection(api):
    api.script.append("hang")
    c, _ = client(api, connect_s=0.5, read_s=0.5)
    with pytest.raises(RemoteError, match="did not answer within 1 s") as e:
        complete(c)
    assert e.value.kind == "timeout" and api.dropped.wait(WAIT)


def test_an_unreachable_api_a_missing_key_and_a_key_a_header_cannot_carry(api, monkeypatch):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nobody listens there once closed
    c = FimClient(f"http://127.0.0.1:{port}/v1", "m", ENV, connect_s=2)
    with pytest.raises(RemoteError, match="cannot reach") as e:
        complete(c)
    assert e.value.kind == "unreachable"
    assert_no_key(*chain(e.value))
    monkeypatch.delenv(ENV)
    with pytest.raises(RemoteError, match=r"\$TEST_KEY that should hold the API key is not set"):
        FimClient(api.base, "m", ENV)
    monkeypatch.setenv(ENV, KEY + "\n" + KEY)
    with pytest.raises(RemoteError, match="characters an HTTP header cannot carry") as e:
        FimClient(api.base, "m", ENV)
    assert_no_key(e.value)


def test_no_key_variable_sends_no_authorization(api):
    c = FimClient(api.base, "m")
    assert complete(c).text == "x = 1" and "Authorization" not in api.got[0][1]


def test_helpers_read_retry_after_and_api_messages():
    assert retry_after("2.5") == 2.5 and retry_after(None) is None and retry_after("soon") is None
    assert 50 < retry_after(time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 60))) <= 60
    assert api_message(b'{"detail": "nope"}') == "nope" and api_message(b'{"error": "bad"}') == "bad"
    assert api_message(b"plain\n  text") == "plain text" and api_message(b"") == ""


# ---- the command line ----

def source(tmp_path):
    path = tmp_path / "a.py"
    path.write_text("def add(a, b):\n    return a + b\n")
    return path


def remote_flags(api: Api) -> list[str]:
    return ["--backend", "openai", "--base-url", api.base, "--remote-model", "m", "--api-key-env", ENV]


def test_fim_json_through_the_api(api, tmp_path, capsys):
    api.script.append(ok("a - b", usage={"completion_tokens": 3}))
    code = main(["fim", str(source(tmp_path)), "--at", "2:12", *remote_flags(api), "--json", "--max-tokens", "7",
                 "--one-line"])
    out = capsys.readouterr().out
    assert code == 0
    record = json.loads(out)
    assert record["text"] == "a - b" and record["confidence"] == [1.0] and record["forwards"] == 0
    assert record["budget_hit"] is False and record["tokens"] == 3  # the API's count: its text is one piece
    body = api.got[0][2]
    assert body["prompt"] == "def add(a, b):\n    return " and body["suffix"] == "a + b\n"
    assert body["max_tokens"] == 7 and body["stop"] == ["\n"] and body["model"] == "m"


def test_fim_batch_through_the_api_records_a_rejected_request_and_goes_on(api, tmp_path, capsys):
    batch = tmp_path / "in.jsonl"
    batch.write_text("\n".join([json.dumps({"id": "a", "prefix": "x = ", "suffix": "\n"}), "not json",
                                json.dumps({"id": "b", "prefix": "y = ", "suffix": "\n", "max_tokens": 3})]) + "\n")

    def answer(path, headers, body):  # the batch's requests arrive together, in any order
        return (400, {"error": {"message": "bad prompt"}}) if body["prompt"] == "y = " else ok("1")

    api.default = answer
    code = main(["fim", "--batch", str(batch), *remote_flags(api)])
    captured = capsys.readouterr()
    records = [json.loads(line) for line in captured.out.splitlines()]
    assert code == 0 and [r["id"] for r in records] == ["a", None, "b"]
    assert records[0]["text"] == "1" and "not valid JSON" in records[1]["error"]
    assert records[2]["error"] == "the API rejected the request (HTTP 400): bad prompt"
    assert "2 of 3 requests failed" in captured.err
    assert len(api.got) == 2  # each request once: a rejected one fails alone, the others are not sent again


def test_fim_with_a_refused_key_is_one_line_exit_2(api, tmp_path, capsys):
    api.default = (401, {"error": {"message": f"bad key {KEY}"}})
    code = main(["fim", str(source(tmp_path)), "--at", "2:12", *remote_flags(api)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith("diffusion-lsp: error: the API refused the key in $TEST_KEY (HTTP 401)")
    assert "\n" not in err and KEY not in err


def test_fim_needs_a_base_url_and_names_a_missing_key_before_reading_input(api, tmp_path, capsys, monkeypatch):
    assert main(["fim", str(source(tmp_path)), "--at", "2:12", "--backend", "openai"]) == 2
    assert "backend openai needs base_url and remote_model" in capsys.readouterr().err
    monkeypatch.delenv(ENV)
    assert main(["fim", str(source(tmp_path)), "--at", "2:12", *remote_flags(api)]) == 2
    assert "$TEST_KEY that should hold the API key is not set" in capsys.readouterr().err and api.got == []


def test_the_backend_answers_many_orders_in_the_one_result_shape(api):
    import asyncio
    import logging

    from diffusion_lsp.protocol.backend import LogReporter
    from diffusion_lsp.protocol.failure import BackendError, Failure
    from diffusion_lsp.protocol.answers import Fill
    from diffusion_lsp.protocol.requests import FillRequest
    from diffusion_lsp.backend.remote import RemoteBackend

    backend = RemoteBackend(LogReporter(logging.getLogger("test")),
                            LaunchSettings(backend="openai", base_url=api.base, remote_model="m", api_key_env=ENV))
    api.script.extend([ok("one", usage={"completion_tokens": 2}), ok(""), (400, {"error": {"message": "no"}})])

    async def go():
        try:
            orders = [FillRequest("a", "b", 4), FillRequest("c", "d", 4), FillRequest("e", "f", 4)]
            return await backend.fill_many(orders), backend.describe()
        finally:
            await backend.close()

    results, described = asyncio.run(go())
    fills = [r for r in results if isinstance(r, Fill)]
    (failed,) = [r for r in results if isinstance(r, BackendError)]
    assert sorted(f.text for f in fills) == ["", "one"] and failed.kind is Failure.REFUSED
    assert sorted((f.pieces, f.tokens) for f in fills) == [([], 0), (["one"], 2)]  # the API's usage
    assert described["requests"] == 3 and described["failures"] == 1
    assert KEY not in repr(backend.__dict__) and KEY not in repr(described)


@pytest.mark.slow
def test_fim_prints_an_answer_holding_a_lone_surrogate_instead_of_crashing(api, tmp_path):
    """JSON can carry "\\ud800" and UTF-8 cannot: printing it was a UnicodeEncodeError traceback, exit 1."""
    import subprocess
    import sys

    api.script.append(ok("a \ud800 b"))
    done = subprocess.run([sys.executable, "-m", "diffusion_lsp", "fim", str(source(tmp_path)), "--at", "2:12",
                           *remote_flags(api)], capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stdout.decode() == "a \ufffd b", done.stderr.decode()


def test_an_api_message_cannot_put_escape_codes_or_lines_on_the_users_terminal():
    from diffusion_lsp.backend.api_client import one_line

    said = one_line("bad\x1b[31mred\x1b[0m\r\nFAKE: diffusion-lsp: error: spoofed")
    assert "\x1b" not in said and "\n" not in said and "\r" not in said and said.startswith("bad [31mred")
