"""The language server through the remote backend (RemoteBackend) against the scripted API of
remote_api.py: a completion, cancellation and supersession dropping the HTTP connection (seen by the
server, waited for by event), failures shown once, the deadline, the session switching backends."""

from __future__ import annotations

import asyncio
import logging
import threading

import pytest

from conftest import RecordingUi
from remote_api import DOC, ENV, KEY, WAIT, Api, assert_no_key, chain, ok
from diffusion_lsp.candidate import Candidate, Source
from diffusion_lsp.context.records import Document
from diffusion_lsp.server.completion import Completer
from diffusion_lsp.server.config import parse_config
from diffusion_lsp.protocol.failure import BackendError, Failure
from diffusion_lsp.worker.link import WorkerLink
from diffusion_lsp.server.positions import UTF16
from diffusion_lsp.backend.remote import RemoteBackend
from diffusion_lsp.server.stats import Stats
from diffusion_lsp.protocol.requests import FillRequest


# ---- the language server ----

def remote_cfg(api: Api, **completion):
    return parse_config({"model": {"backend": "openai", "baseUrl": api.base, "remoteModel": "mercury-edit",
                                   "apiKeyEnv": ENV},
                         "completion": {"confidenceCut": 0.0, **completion}, "worker": {"fillTimeoutS": 20}})[0]


def make_completer(api: Api):
    cfg, ui, stats = remote_cfg(api), RecordingUi(), Stats()
    link = RemoteBackend(ui, cfg.model, fill_timeout_s=cfg.worker.fill_timeout_s)
    completer = Completer(link, stats, ui.log)
    completer.configure(cfg)
    return completer, link, ui


def failed_fill(api: Api) -> tuple[RecordingUi, BackendError]:
    """A fill the API fails: what the user was shown and logged, and the link's error."""
    completer, link, ui = make_completer(api)

    async def go():
        with pytest.raises(BackendError) as e:
            await link.fill(DOC.uri, FillRequest("x = ", "\n", 4))
        await link.close()
        return e.value

    return ui, asyncio.run(go())


async def wait_for(event: threading.Event) -> bool:
    return await asyncio.get_running_loop().run_in_executor(None, event.wait, WAIT)


def test_a_completion_through_the_remote_backend(api):
    api.script.append(ok("os.getcwd()\nmore"))
    completer, link, ui = make_completer(api)

    async def go():
        try:
            return await completer.complete(DOC, 1, 0, UTF16)
        finally:
            await link.close()

    assert asyncio.run(go()) == Candidate.at(DOC.text.index("\n") + 1, "os.getcwd()", Source.MODEL)  # at (1, 0)
    body = api.got[0][2]
    assert body["prompt"].endswith("import os\n") and body["suffix"].startswith("\nprint(os.sep)")
    assert body["stop"] == ["\n"] and body["model"] == "mercury-edit"
    assert completer.stats.model_calls == 1 and ui.shown == []


@pytest.mark.parametrize("how", ["cancel", "supersede"])
def test_cancelling_or_superseding_a_completion_drops_its_http_request(api, how):
    api.script.append("hang")
    completer, link, _ = make_completer(api)

    async def go():
        task = asyncio.ensure_future(completer.complete(DOC, 1, 0, UTF16))
        assert await wait_for(api.hanging)
        if how == "cancel":
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        else:
            newer = Document(DOC.uri, "import os\nx\nprint(os.sep)\n", "python")
            answer = await completer.complete(newer, 1, 1, UTF16)
            assert await task is None and answer is not None
        dropped = await wait_for(api.dropped)
        await link.close()
        return dropped

    assert asyncio.run(go())
    assert completer.stats.cancelled + completer.stats.superseded == 1


def test_remote_failures_are_shown_once_per_kind_and_never_hold_the_key(api, caplog):
    caplog.set_level(logging.DEBUG)
    api.default = (401, {"error": {"message": f"who is {KEY}?"}})
    completer, link, ui = make_completer(api)
    order = FillRequest("x = ", "\n", 4)

    async def go():
        for _ in range(2):
            with pytest.raises(BackendError, match=r"refused the key in \$TEST_KEY") as e:
                await link.fill(DOC.uri, order)
            assert e.value.kind is Failure.UNAVAILABLE
            assert_no_key(*chain(e.value))
        answers = [await completer.complete(DOC, 1, 0, UTF16)]
        api.default = ok("1")
        answers.append(await link.fill(DOC.uri, order))
        api.default = (401, {})
        with pytest.raises(BackendError):
            await link.fill(DOC.uri, order)
        await link.close()
        return answers

    answers = asyncio.run(go())
    assert answers[0] is None and answers[1].text == "1" and answers[1].confidence == [1.0]
    assert len(ui.shown) == 2  # once, then again after a fill succeeded in between
    assert len([m for kind, m in ui.logged if kind == "error"]) == 4
    assert_no_key(ui.shown, ui.logged, caplog.text, completer.stats.report(worker=link.describe()), link.describe())


def test_a_fill_past_the_deadline_is_unavailable(api):
    api.script.append("hang")
    completer, link, ui = make_completer(api)
    link.configure(link.settings, True, 0.2)

    async def go():
        with pytest.raises(BackendError, match="fillTimeoutS") as e:
            await link.fill(DOC.uri, FillRequest("x = ", "\n", 4))
        assert e.value.kind is Failure.TIMEOUT
        await link.close()

    asyncio.run(go())
    assert link.counts["fill_timeouts"] == 1 and api.dropped.wait(WAIT)
    # shown to the user once, as every other failure is (it was only logged: the README says shown)
    assert ui.shown == [("error", "diffusion-lsp: the remote API gave no fill within worker.fillTimeoutS (0.2 s)")]


@pytest.mark.parametrize("echo", [str.upper, lambda k: k[::-1], lambda k: k[5:19], lambda k: f"Bearer{k}!"])
def test_a_key_the_api_echoes_changed_is_never_shown(api, echo):
    """Only the exact key was scrubbed: an API that echoed it upper-cased or reversed got it printed."""
    api.default = (401, {"error": {"message": f"the key {echo(KEY)} is not valid"}})
    ui, error = failed_fill(api)
    assert "is not valid" in ui.shown[0][1] and "[key]" in ui.shown[0][1]
    text = repr((ui.shown, ui.logged, str(error))).lower()
    assert echo(KEY).lower() not in text and KEY[5:13].lower() not in text and KEY[::-1][5:13].lower() not in text


def test_a_missing_key_variable_is_shown_once(api, monkeypatch):
    monkeypatch.delenv(ENV)
    completer, link, ui = make_completer(api)

    async def go():
        for _ in range(2):
            with pytest.raises(BackendError, match="not set"):
                await link.fill(DOC.uri, FillRequest("x = ", "\n", 4))

    asyncio.run(go())
    assert len(ui.shown) == 1 and "$TEST_KEY" in ui.shown[0][1] and api.got == []


def test_the_session_picks_and_switches_the_backend_from_model_backend(api, monkeypatch, tmp_path):
    from diffusion_lsp.model.families.claims import read_claims
    from diffusion_lsp.server import notice
    from diffusion_lsp.engine import DEFAULT_MODEL
    from diffusion_lsp.server.session import ServeOptions, Session

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))  # the demo model has not been named yet

    async def go():
        ui = RecordingUi()
        session = Session(ServeOptions(), ui, {}.get)
        assert isinstance(session.backend, WorkerLink)
        raw = {"model": {"backend": "openai", "baseUrl": api.base, "remoteModel": "m", "apiKeyEnv": ENV}}
        session.configure(raw)
        remote = session.backend
        assert isinstance(remote, RemoteBackend) and session.completer.backend is remote
        assert (await remote.fill(DOC.uri, FillRequest("x = ", "\n", 4))).text == "x = 1"
        report = session.report()
        assert report["worker"]["backend"] == "openai" and report["worker"]["requests"] == 1
        assert_no_key(report)
        session.configure({"model": {**raw["model"], "remoteModel": "m2"}})  # another client, same backend
        assert session.backend is remote and remote.client is None
        await remote.fill(DOC.uri, FillRequest("x = ", "\n", 4))
        assert api.got[-1][2]["model"] == "m2"
        session.configure({"model": {"baseUrl": api.base}})  # backend local again (its default)
        assert isinstance(session.backend, WorkerLink) and session.completer.backend is session.backend
        await asyncio.sleep(0)  # one loop turn: the old backend's close runs
        assert remote.client is None
        assert ui.shown == [("info", notice.demo_message(read_claims(DEFAULT_MODEL)))]  # back to the demo: said once
        await session.close()

    asyncio.run(go())
