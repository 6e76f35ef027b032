"""What a checkpoint claims (model/families/claims.py) and the defaults the language server takes from it:
next edits off for a model that does not claim them, completions only in its languages, and one
word, once per install, about a demo model."""

from __future__ import annotations

import asyncio
import json
import shutil

import pytest
from conftest import RecordingUi

from diffusion_lsp.protocol.capabilities import Capabilities
from diffusion_lsp.context.languages import language_for
from diffusion_lsp.context.records import Document
from diffusion_lsp.engine import DEFAULT_MODEL
from diffusion_lsp.model.families.checkpoint import CheckpointError, read_config
from diffusion_lsp.model.families.claims import GENERAL, Claims, read_claims
from diffusion_lsp.protocol.settings import LaunchSettings
from diffusion_lsp.server import notice
from diffusion_lsp.server.config import parse_config, serves_language, with_claims
from diffusion_lsp.server.session import ServeOptions, Session

PYTHON_DEMO = Claims(("python",), next_edits=False, demo=True)


def test_the_embedded_model_claims_python_only_no_next_edits_and_is_a_demo():
    assert read_claims(DEFAULT_MODEL) == PYTHON_DEMO
    read_config(DEFAULT_MODEL)  # and its loader accepts them


def test_a_folder_without_claims_or_unreadable_claims_any_language_and_no_next_edits(tmp_path, tiny_checkpoint):
    assert read_claims(tiny_checkpoint) == GENERAL  # our format, written before claims existed
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "Dream", "architectures": ["DreamModel"]}))
    assert read_claims(tmp_path) == GENERAL  # an open family: general code models
    assert read_claims(tmp_path / "missing") == GENERAL


@pytest.mark.parametrize("claims, why", [
    ({"languages": "python"}, "claims.languages should be a list"),
    ({"next_edit": True}, "unknown claims keys: next_edit"),
    ({"demo": "yes"}, "claims.demo should be true or false"),
    (["python"], "claims should be an object"),
])
def test_bad_claims_are_refused_by_the_loader_naming_the_key(tmp_path, tiny_checkpoint, claims, why):
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "claims": claims}))
    with pytest.raises(CheckpointError, match=why):
        read_config(folder)
    assert read_claims(folder) == GENERAL  # the language server falls back; the worker's load says why


def _resolved(settings: dict, claims: Claims):
    cfg, problems = parse_config(settings)
    assert problems == []
    return with_claims(cfg, claims)


def test_defaults_follow_the_claims_and_the_users_settings_win():
    cfg = _resolved({}, PYTHON_DEMO)
    assert (cfg.next_edit.enable, cfg.completion.languages) == (False, ["python"])
    cfg = _resolved({}, Claims(None, next_edits=True))
    assert (cfg.next_edit.enable, cfg.completion.languages) == (True, ["*"])
    cfg = _resolved({"nextEdit": {"enable": True}, "completion": {"languages": ["go", "typescript"]}}, PYTHON_DEMO)
    assert (cfg.next_edit.enable, cfg.completion.languages) == (True, ["go", "typescript"])
    cfg = _resolved({"nextEdit": {"enable": False}}, Claims(None, next_edits=True))
    assert cfg.next_edit.enable is False


@pytest.mark.parametrize("languages, language_id, served", [
    (["python"], "python", True),
    (["python"], "go", False),
    (["python"], "typescriptreact", False),
    (["*"], "go", True),
    (["typescript"], "typescriptreact", True),  # typescript covers tsx
    (["typescriptreact"], "typescriptreact", True),  # editor language ids are understood
    (["Go"], "go", True),
])
def test_completion_languages_name_canonical_languages_or_editor_ids(languages, language_id, served):
    cfg = _resolved({"completion": {"languages": languages}}, GENERAL)
    assert serves_language(cfg, language_for(language_id)) is served


class RefusingBackend:
    """A backend that fails the test if the model is asked: the language filter must come first."""

    capabilities = Capabilities(probe=True)

    def configure(self, *args):
        pass

    async def fill(self, key, order):
        raise AssertionError("the model was asked for a language it does not write")

    probe = fill


def _session(monkeypatch, tmp_path, model: str | None = None) -> tuple[Session, RecordingUi]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    ui = RecordingUi()
    session = Session(ServeOptions(LaunchSettings(path=model), worker_socket=str(tmp_path / "w.sock")), ui, {}.get)
    session.configure(None)
    return session, ui


def test_the_embedded_model_answers_nothing_in_go_and_no_next_edit_without_asking_the_model(monkeypatch, tmp_path):
    session, _ = _session(monkeypatch, tmp_path)
    session.completer.backend = session.next_edit.backend = RefusingBackend()
    go = Document("file:///m.go", "package main\n\nfunc main() {\n\tx := \n}\n", "go", 1)
    py = Document("file:///m.py", "def f(x):\n    return x\n", "python", 1)

    async def go_():
        return (await session.completer.complete(go, 3, 6, "utf-16"),
                await session.next_edit.suggest(py, 1, 1, 4, "utf-16", "m.py"))

    assert asyncio.run(go_()) == (None, None)
    ne = session.stats.next_edit  # a rename would still be followed (nextEdit.follow): the model is never asked
    assert session.stats.bad_input == 1 and (ne.requests, ne.answered, ne.errors) == (1, 0, 0)
    report = session.report()["model"]
    assert report == {"claims": PYTHON_DEMO.to_dict(), "languages": ["python"], "next_edits": False, "path": None,
                      "source": "embedded", "answers": "the embedded model", "adapted": None, "refused": None,
                      "untrusted": None}


def test_the_demo_notice_is_said_once_per_install_with_the_way_to_a_real_model(monkeypatch, tmp_path):
    _, ui = _session(monkeypatch, tmp_path)
    [(kind, message)] = ui.shown
    assert kind == "info" and "a small offline demo model (Python only, no next edits of its own: the rest of your change (a rename, a signature, an edit repeated) is still proposed);" in message
    assert message.endswith("#use-a-real-model)") and "[Use a real model](file://" in message  # a link in VS Code
    assert json.loads(notice.state_file().read_text()) == {notice.DEMO: True}
    session, again = _session(monkeypatch, tmp_path)  # the next start, and a settings change
    session.configure({"completion": {"debounceMs": 10}})
    assert again.shown == []


def test_no_notice_for_a_model_that_is_not_a_demo(monkeypatch, tmp_path, tiny_checkpoint):
    _, ui = _session(monkeypatch, tmp_path, str(tiny_checkpoint))
    assert ui.shown == [] and not notice.state_file().exists()


def test_a_fifo_in_place_of_config_json_neither_hangs_the_server_nor_its_socket_name(tmp_path, tiny_checkpoint):
    """The language server read config.json for the claims, and the worker's socket name read it for
    the weights' fingerprint: both opened a FIFO there and waited for a writer forever."""
    import os

    from diffusion_lsp.worker.wire import weights_id

    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, folder)
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")
    import threading

    got = {}

    def read():  # in a daemon thread: were it to hang, the test fails instead of hanging the run
        got["claims"] = read_claims(folder)
        got["weights"] = weights_id(LaunchSettings(path=str(folder)))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    assert got.get("claims") == GENERAL  # the worker's load says what is wrong
    assert got.get("weights") not in (None, weights_id(LaunchSettings(path=str(tiny_checkpoint))))


def test_the_demo_notice_is_said_once_a_session_when_its_state_cannot_be_written(monkeypatch, tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("XDG_STATE_HOME", str(blocked))  # no folder can be made under a file
    ui = RecordingUi()
    session = Session(ServeOptions(LaunchSettings(), worker_socket=str(tmp_path / "w.sock")), ui, {}.get)
    session.configure(None)
    session.configure({"completion": {"debounceMs": 10}})
    assert [kind for kind, _ in ui.shown] == ["info"]
