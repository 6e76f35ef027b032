"""Adapting to a repository: its git history as next edits, the corpus and the run (train/adapt.py),
the `adapt` command's report, and the language server choosing the adapted model of its workspace
(server/workspace_model.py) or passing over one that would not load."""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import RecordingUi
from diffusion_lsp.cli import main
from diffusion_lsp.data.git_history import edit_steps, file_pairs
from diffusion_lsp.context.repo import ADAPTED_DIR, is_held_out
from diffusion_lsp.local_state import trust
from diffusion_lsp.model.families.quick_check import problem
from diffusion_lsp.protocol.settings import LaunchSettings
from diffusion_lsp.server.session import ServeOptions, Session
from diffusion_lsp.server.workspace_model import changed, choose

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(root), "PATH": "/usr/bin:/bin"}).stdout


def _module(n: int, names: tuple[str, ...]) -> str:
    return "".join(f"def load_{x}_{n}({x}):\n    data = read({x})\n    return parse(data, {x})\n\n\n" for x in names)


def make_repo(root: Path, files: int = 30) -> tuple[list[str], list[str]]:
    """A git repository of `files` modules and two commits: the second renames `data` to `rows` in
    every function of every module (one hunk per function) -> (all paths, held-out paths)."""
    names = ("path", "name", "url", "key", "row", "item")
    paths = [f"pkg/mod{i}.py" for i in range(files)]
    root.mkdir(parents=True, exist_ok=True)
    _git(root, "init", "-q")
    for i, p in enumerate(paths):
        (root / p).parent.mkdir(exist_ok=True)
        (root / p).write_text(_module(i, names))
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "first")
    for i, p in enumerate(paths):
        (root / p).write_text(_module(i, names).replace("data", "rows"))
    _git(root, "commit", "-qam", "rename")
    return paths, [p for p in paths if is_held_out(p)]


@needs_git
def test_the_git_history_gives_each_modified_file_before_and_after_and_its_next_hunks(tmp_path):
    paths, held = make_repo(tmp_path / "r")
    pairs = list(file_pairs(tmp_path / "r", set(held)))
    assert sorted(p.path for p in pairs) == sorted(held)
    pair = pairs[0]
    assert "data = read" in pair.old and "data" not in pair.new
    steps = edit_steps(pair, per_pair=4)
    # 6 functions, one hunk each: after hunk k the next edit is hunk k + 1; four of the five spread over them
    assert [s.id.rsplit("#", 1)[1] for s in steps] == ["1", "2", "4", "5"]
    first = steps[0]
    assert first.current.count("rows") == 2 and first.new.count("rows") == 4
    assert first.cursor[0] == 2  # the end of the first function's edit, as an editor leaves the cursor
    assert list(file_pairs(tmp_path / "r", {"pkg/none.py"})) == []


def test_no_git_history_outside_a_work_tree(tmp_path):
    (tmp_path / "a.py").write_text("x = 1\n")
    assert list(file_pairs(tmp_path, {"a.py"})) == []


def test_quick_check_refuses_what_would_not_load_without_torch(tiny_checkpoint, tmp_path):
    assert problem(tiny_checkpoint) is None
    bad = tmp_path / "bad"
    shutil.copytree(tiny_checkpoint, bad)
    data = (bad / "model.safetensors").read_bytes()
    (bad / "model.safetensors").write_bytes(data[: len(data) - 100])
    assert "cut short" in problem(bad)
    (bad / "model.safetensors").write_bytes(b"\xff" * 64)
    assert "header" in problem(bad)
    (bad / "model.safetensors").write_bytes(data)
    config = json.loads((tiny_checkpoint / "config.json").read_text())
    config["model"]["n_layers"] = 3
    (bad / "config.json").write_text(json.dumps(config))
    assert "do not match" in problem(bad)
    (bad / "config.json").write_text("{")
    assert "not valid JSON" in problem(bad)


def _adapted(tiny_checkpoint, root: Path) -> Path:
    """A copy of the tiny checkpoint where the server looks in `root`, marked adapted and recorded
    as `adapt` records what it wrote on this machine."""
    folder = root / ADAPTED_DIR
    shutil.copytree(tiny_checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    config["adapted"] = {"repo": str(root), "base": str(tiny_checkpoint), "minutes": 2, "steps": 7}
    (folder / "config.json").write_text(json.dumps(config))
    assert trust(folder, root)
    return folder


def test_the_workspace_model_is_chosen_unless_the_settings_name_one(tiny_checkpoint, tmp_path):
    assert choose(LaunchSettings(), str(tmp_path)).source == "embedded"
    folder = _adapted(tiny_checkpoint, tmp_path)
    got = choose(LaunchSettings(), str(tmp_path))
    assert (got.path, got.source, got.adapted["steps"]) == (str(folder), "workspace", 7)
    assert "adapted for 2 minutes (7 steps)" in got.describe()
    assert choose(LaunchSettings(path="/elsewhere"), str(tmp_path)).path == "/elsewhere"
    assert choose(LaunchSettings(), None).source == "embedded"
    assert not changed(got, str(tmp_path))
    (folder / "config.json").write_text((folder / "config.json").read_text() + " ")
    assert changed(got, str(tmp_path))
    assert trust(folder, tmp_path) and choose(LaunchSettings(), str(tmp_path)).source == "workspace"


def _session(monkeypatch, tmp_path, root: Path) -> tuple[Session, RecordingUi]:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    ui = RecordingUi()
    session = Session(ServeOptions(LaunchSettings(), worker_socket=str(tmp_path / "w.sock")), ui, {}.get)
    session.root = str(root)
    return session, ui


def test_the_log_says_which_model_answers_once_per_choice(monkeypatch, tmp_path):
    session, ui = _session(monkeypatch, tmp_path, tmp_path / "empty")
    session.configure(None)
    session.configure(None)
    assert [m for kind, m in ui.logged if m.startswith("model: ")] == ["model: the embedded model"]
    session.indexer.close()


def test_the_server_answers_with_the_adapted_model_and_falls_back_when_it_is_corrupt(monkeypatch, tiny_checkpoint,
                                                                                    tmp_path):
    root = tmp_path / "ws"
    session, ui = _session(monkeypatch, tmp_path, root)  # its state folder first: the trust record is there
    folder = _adapted(tiny_checkpoint, root)
    session.configure(None)
    model = session.report()["model"]
    assert (model["path"], model["source"], model["adapted"]["minutes"]) == (str(folder), "workspace", 2)
    assert session.backend.spec.model.path == str(folder)
    assert any(kind == "info" and m.startswith("model: the workspace's adapted model") for kind, m in ui.logged)
    assert not [s for s in ui.shown if s[0] == "warning"]

    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])  # a copy cut short
    (folder / "config.json").write_text((folder / "config.json").read_text() + "\n")  # and newly written
    assert trust(folder, root)  # by adapt on this machine: trusted, and still it would not load

    async def no_worker():  # the worker is not what this test is about
        pass
    monkeypatch.setattr(session.backend, "start", no_worker)
    async def opened():
        await session.opened(_doc())
    asyncio.run(opened())
    model = session.report()["model"]
    assert (model["path"], model["source"]) == (None, "embedded") and "cut short" in model["refused"]
    assert session.backend.spec.model.path is None
    warnings = [m for kind, m in ui.shown if kind == "warning"]
    assert len(warnings) == 1 and "adapted model cannot be used" in warnings[0] and "diffusion-lsp adapt" in warnings[0]
    session.configure(None)  # the same settings again: said once
    assert len([m for kind, m in ui.shown if kind == "warning"]) == 1
    session.indexer.close()


def _doc():
    from diffusion_lsp.context.records import Document

    return Document("file:///ws/a.py", "x = 1\n", "python", 1)


@needs_git
def test_adapt_trains_on_the_files_it_does_not_hold_out_and_reports_both_columns(tiny_checkpoint, tmp_path, capsys):
    root = tmp_path / "r"
    paths, held = make_repo(root, files=20)
    assert held and len(held) < len(paths)
    code = main(["adapt", str(root), "--model", str(tiny_checkpoint), "--steps", "30", "--lr", "3e-3",
                 "--lines", "6", "--no-progress", "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 0
    out = root / ADAPTED_DIR
    assert problem(out) is None and json.loads((out / "adapt.json").read_text()) == report
    assert (root / ".diffusion-lsp" / ".gitignore").read_text().endswith("*\n")
    assert _git(root, "status", "--porcelain") == ""  # the adapted model never shows as untracked files
    trained = [json.loads(line)["path"] for line in (out / "run" / "corpus" / "train.jsonl").open()]
    assert sorted(trained) == sorted(set(paths) - set(held))  # held-out files were never trained on
    edits = [json.loads(line) for line in (out / "run" / "edits" / "train.jsonl").open()]
    assert edits and {e["path"] for e in edits} <= set(trained)  # nor their history
    assert report["adapted"]["steps"] == 30 and report["held_out_files"] == len(held)
    assert set(report["rows"]) == {"copy-previous-line", "drafts alone", "base", "base + drafts", "adapted",
                                   "adapted + drafts"}
    assert set(report["next_edits"]) == {"repeat last edit", "base", "adapted"}
    assert report["next_edit_cases"] > 0
    # the repository's code is learnt: the masked-token loss on held-out crops of the same shape drops
    base, adapted = report["loss"]["base"], report["loss"]["adapted"]
    assert adapted["loss@0.5"] < base["loss@0.5"] - 0.5
    assert report["gain"]["points"] == pytest.approx(report["gain"]["after"] - report["gain"]["before"])

    # a rerun with the budget spent and the same files trains no more; changed files start afresh
    assert main(["adapt", str(root), "--model", str(tiny_checkpoint), "--steps", "30", "--no-eval", "--json"]) == 0
    again = json.loads(capsys.readouterr().out)["adapted"]
    assert again["resumed"] and again["steps"] == 30
    (root / paths[0]).write_text("def changed():\n    return 1\n")
    assert main(["adapt", str(root), "--model", str(tiny_checkpoint), "--steps", "5", "--no-eval", "--json"]) == 0
    fresh = json.loads(capsys.readouterr().out)["adapted"]
    assert not fresh["resumed"] and fresh["steps"] == 5


def test_adapt_refuses_what_it_cannot_adapt(tiny_checkpoint, tmp_path, capsys):
    (tmp_path / "a.py").write_text("x = 1\n")
    assert main(["adapt", str(tmp_path / "missing"), "--model", str(tiny_checkpoint)]) == 2
    assert "is not a folder" in capsys.readouterr().err
    assert main(["adapt", str(tmp_path), "--model", str(tiny_checkpoint), "--out", str(tiny_checkpoint)]) == 2
    assert "base model's folder" in capsys.readouterr().err
    assert main(["adapt", str(tmp_path), "--model", str(tmp_path / "nothing"), "--no-eval"]) == 2
    assert "not found" in capsys.readouterr().err
    assert main(["adapt", str(tmp_path), "--model", str(tiny_checkpoint), "--minutes", "0"]) == 2
    assert "positive" in capsys.readouterr().err


def test_adapt_publishes_no_model_whose_training_diverged(tiny_checkpoint, tmp_path, capsys, monkeypatch):
    """The re-run probe's case: training that went to NaN was saved as the workspace's model, recorded as
    trusted, and failed only when it was loaded back. Weights that are no model (past float16's range
    here, at a learning rate of 10^6) are refused before anything is published."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    root = tmp_path / "repo"
    make_repo(root, files=6)
    code = main(["adapt", str(root), "--model", str(tiny_checkpoint), "--steps", "3", "--lr", "1e6", "--no-eval",
                 "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "the training diverged: its model.safetensors holds" in err, err
    assert not (root / ".diffusion-lsp" / "model" / "config.json").exists()
    assert not (tmp_path / "state" / "diffusion-lsp" / "trusted-models.json").exists()
