"""One writer for every file a command writes in a workspace (diffusion_lsp/workspace_files.py):
`adapt`, `calibrate` and `calibrate --edits` refuse a symlinked `.diffusion-lsp`, a symlinked
`.diffusion-lsp/acceptance`, and a target that is a symlink or a FIFO, in one line (exit 2), write
nothing outside the workspace and record nothing as trusted; a link swapped in while a command
works is refused when it writes; what is written is replaced atomically and recorded only then."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

from diffusion_lsp.acceptance.edits import EDIT_FEATURES
from diffusion_lsp.acceptance.model import AcceptanceModel
from diffusion_lsp.cli import main
from diffusion_lsp.candidate import Candidate, Source
from diffusion_lsp.context.records import Document
from diffusion_lsp.errors import UserError
from diffusion_lsp.evals import calibrate, edits_command
from diffusion_lsp.evals.edit_replay import JudgedEdit
from diffusion_lsp.evals.retype import Case, Judged
from diffusion_lsp.local_state import trusted
from diffusion_lsp.workspace_files import check_in, write_in, write_trusted

TARGETS = {"adapt": ".diffusion-lsp/model/adapt.json", "calibrate": ".diffusion-lsp/acceptance/acceptance.json",
           "edits": ".diffusion-lsp/acceptance/edit_acceptance.json"}


@pytest.fixture
def state(monkeypatch, tmp_path) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


def argv(command: str, ws: Path) -> list[str]:
    return {"adapt": ["adapt", str(ws), "--steps", "1", "--no-eval"], "calibrate": ["calibrate", str(ws), "--lines", "1"],
            "edits": ["calibrate", "--edits", str(ws), "--edit-cases", "1"]}[command]


def outside(tmp_path: Path) -> tuple[Path, dict]:
    victim = tmp_path / "victim"
    (victim / "acceptance").mkdir(parents=True)
    (victim / "model").mkdir()
    (victim / "keep.txt").write_text("mine\n")
    return victim, snapshot(victim)


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() if p.is_file() else None for p in folder.rglob("*")}


def one_line(capsys) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("diffusion-lsp: error: "), err
    return err


@pytest.mark.parametrize("command", ["adapt", "calibrate", "edits"])
@pytest.mark.parametrize("link", ["top", "acceptance", "target", "fifo"])
def test_every_command_refuses_a_link_or_a_fifo_where_it_writes_in_one_line_before_it_works(
        tmp_path, state, capsys, command, link):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "mod.py").write_text("def f(x):\n    return x\n")
    victim, before = outside(tmp_path)
    if link == "top":
        (ws / ".diffusion-lsp").symlink_to(victim)
    elif link == "acceptance":
        (ws / ".diffusion-lsp").mkdir()
        (ws / ".diffusion-lsp" / "acceptance").symlink_to(victim / "acceptance")
    else:
        (ws / TARGETS[command]).parent.mkdir(parents=True)
        if link == "target":
            (ws / TARGETS[command]).symlink_to(victim / "keep.txt")
        else:
            os.mkfifo(ws / TARGETS[command])
    assert main(argv(command, ws)) == 2  # before a model is loaded or a line retyped
    err = one_line(capsys)
    assert ("symlink" in err or "FIFO" in err) and "--out" in err
    assert snapshot(victim) == before and not (state / "diffusion-lsp").exists()


def judged_rows(n: int = 60) -> list[Judged]:
    rng = random.Random(3)
    out = []
    for _ in range(n):
        x = rng.random()
        out.append(Judged(Case(Document("", "", ""), 0, "t", "", "pkg"), [Candidate.at(0, "t", Source.MODEL)],
                          [{"bias": 1.0, "conf_first": x}], [x > 0.5], [x > 0.5]))
    return out


def judged_edits(n: int = 60) -> list[JudgedEdit]:
    rng = random.Random(4)
    out = []
    for i in range(n):
        x = rng.random()
        feats = {name: 0.0 for name in EDIT_FEATURES} | {"bias": 1.0, "conf": x}
        out.append(JudgedEdit(f"c{i}", "repo", [Candidate(0, 1, "y", Source.RENAME, confidence=x)], [feats], [x > 0.5]))
    return out


@pytest.mark.parametrize("command", ["calibrate", "edits"])
def test_a_link_swapped_in_while_calibrate_works_is_refused_when_it_writes(tmp_path, state, capsys, monkeypatch,
                                                                           command):
    ws = tmp_path / "ws"
    (ws / ".diffusion-lsp").mkdir(parents=True)
    victim, before = outside(tmp_path)

    def collect(args, launch, cases=None):  # minutes of retyping, meanwhile the folder becomes a link
        (ws / ".diffusion-lsp").rmdir()
        (ws / ".diffusion-lsp").symlink_to(victim)
        return judged_edits() if command == "edits" else judged_rows()

    monkeypatch.setattr(edits_command if command == "edits" else calibrate, "collect", collect)
    assert main(argv(command, ws)) == 2
    assert "symlink" in one_line(capsys)
    assert snapshot(victim) == before and not (state / "diffusion-lsp").exists()


@pytest.mark.parametrize("command", ["calibrate", "edits"])
def test_calibrate_writes_into_the_workspace_and_records_it_only_then(tmp_path, state, capsys, monkeypatch, command):
    ws = tmp_path / "ws"
    ws.mkdir()
    rows = judged_edits() if command == "edits" else judged_rows()
    monkeypatch.setattr(edits_command if command == "edits" else calibrate, "collect", lambda *a, **k: rows)
    assert main(argv(command, ws) + ["--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    path = ws / TARGETS[command]
    assert got["out"] == str(path) and got["trusted"] is True and trusted(path.parent, ws)
    model = AcceptanceModel.load(path, "edit" if command == "edits" else "completion")
    assert model.weights == pytest.approx(got["weights"], abs=1e-6)
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temporary file left beside it


def test_the_writer_creates_real_folders_replaces_atomically_and_refuses_links_below_the_workspace(tmp_path, state):
    ws = tmp_path / "ws"
    ws.mkdir()
    path, recorded = write_trusted(ws, Path("a") / "b" / "m.json", "{}\n")
    assert path == ws.resolve() / "a" / "b" / "m.json" and path.read_text() == "{}\n" and recorded
    assert write_in(ws, "a/b/m.json", b"[]\n").read_text() == "[]\n"  # replaced
    os.link(path, tmp_path / "hard")  # a replaced file is a new inode: a hard link elsewhere keeps the old
    write_in(ws, "a/b/m.json", "{}\n")
    assert (tmp_path / "hard").read_text() == "[]\n"
    (ws / "a" / "c").symlink_to(tmp_path)
    for rel in ("a/c/m.json", "a/c"):
        with pytest.raises(UserError, match="symlink"):
            write_in(ws, rel, "x")
    with pytest.raises(UserError, match="not a folder"):
        write_in(ws, "a/b/m.json/x", "x")
    with pytest.raises(UserError, match="a folder"):
        write_in(ws, "a/b", "x")
    with pytest.raises(ValueError):
        write_in(ws, "../escape", "x")
    assert check_in(ws, "new/never/made.json") == ws.resolve() / "new" / "never" / "made.json"
    assert not (ws / "new").exists()  # a check writes nothing


def test_adapt_refuses_to_publish_through_a_link_swapped_in_while_it_trained(tiny_checkpoint, tmp_path, state, capsys,
                                                                             monkeypatch):
    """The checks before the run pass; during the minutes of training the model folder becomes a link
    out of the repository: the model is not written through it, nor recorded."""
    import shutil

    from diffusion_lsp.train import loop

    ws = tmp_path / "ws"
    ws.mkdir()
    for k in range(12):
        (ws / f"mod{k}.py").write_text(f"def f{k}(x):\n    return x + {k}\n")
    victim = tmp_path / "victim"

    def train(cfg, progress_bar=True):
        ckpt = Path(cfg.out) / "checkpoint"
        ckpt.mkdir(parents=True)
        for f in tiny_checkpoint.iterdir():
            if f.is_file():
                shutil.copyfile(f, ckpt / f.name)
        model = ws / ".diffusion-lsp" / "model"
        model.rename(victim)
        model.symlink_to(victim)
        return {"elapsed_s": 1.0, "step": 1, "tokens": 10}

    monkeypatch.setattr(loop, "train", train)
    assert main(["adapt", str(ws), "--model", str(tiny_checkpoint), "--steps", "1", "--no-eval", "--json"]) == 2
    assert "symlink" in one_line(capsys)
    assert not (victim / "config.json").exists() and not (state / "diffusion-lsp").exists()


@pytest.mark.parametrize("argv", [["calibrate", "WS", "--save-cases", "LINK"],
                                  ["calibrate", "--edits", "WS", "--save-edits", "LINK"],
                                  ["eval", "edits", "WS", "--save-edits", "LINK"], ["calibrate", "WS", "--out", "LINK"]])
def test_a_file_the_user_names_to_write_is_never_written_through_a_link_and_refused_before_the_work(
        tmp_path, state, capsys, argv):
    ws = tmp_path / "ws"
    ws.mkdir()
    victim, before = outside(tmp_path)
    (tmp_path / "link.jsonl").symlink_to(victim / "keep.txt")
    assert main([a.replace("WS", str(ws)).replace("LINK", str(tmp_path / "link.jsonl")) for a in argv]) == 2
    assert "symlink" in one_line(capsys)
    assert snapshot(victim) == before
