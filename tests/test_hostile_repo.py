"""A repository is someone else's data. Its files are read by one reader (context/repo.py, for `adapt`,
`eval repo` and `regress --repo`) that never follows a symlink out of the repository, opens only
regular files and reads at most a capped number of bytes; `adapt` never writes through a symlink the
repository brought; and a model folder the repository ships is not used by the language server
unless this machine's `adapt` wrote it for that workspace (local_state.py) or the user names it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import RecordingUi
from diffusion_lsp.cli import main
from diffusion_lsp.context.repo import ADAPTED_DIR, MAX_FILE_BYTES, read_file, repo_files
from diffusion_lsp.local_state import trust, trusted
from diffusion_lsp.protocol.settings import LaunchSettings
from diffusion_lsp.regress.workload import repository_files, sample
from diffusion_lsp.server import notice
from diffusion_lsp.server.session import ServeOptions, Session
from diffusion_lsp.server.workspace_model import choose

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
SECRET = "def secret():\n    if True:\n        return 'TOP-SECRET-do-not-train'\n"  # a block to type into, too
BODY = "def load(path):\n    if path:\n        return open(path).read()\n    return None\n"


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True,
                          env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                               "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(root), "PATH": "/usr/bin:/bin"}).stdout


def hostile_repo(tmp_path: Path, git: bool = True) -> Path:
    """A repository of real modules beside symlinks that lead out of it (absolute, relative, to
    /etc/passwd), one that stays inside (to a module it has), and a secret file next to it."""
    (tmp_path / "secret").write_text(SECRET)
    root = tmp_path / "repo"
    (root / "pkg").mkdir(parents=True)
    for i in range(12):
        (root / "pkg" / f"mod{i}.py").write_text(BODY.replace("load", f"load_{i}"))
    (root / "leak.py").symlink_to(tmp_path / "secret")
    (root / "pkg" / "leak_rel.py").symlink_to(Path("..") / ".." / "secret")
    (root / "passwd.py").symlink_to("/etc/passwd")
    (root / "inside.py").symlink_to(Path("pkg") / "mod0.py")
    if git:
        _git(root, "init", "-q")
        _git(root, "add", ".")
        _git(root, "commit", "-qm", "symlinks")
    return root


def _texts(files) -> str:
    return "".join(f.text for f in files)


@needs_git
def test_committed_symlinks_out_of_the_repository_are_not_read_and_one_inside_is_read_once(tmp_path):
    root = hostile_repo(tmp_path)
    files, skipped = repo_files(root)
    assert [f.path for f in files] == [f"pkg/mod{i}.py" for i in sorted(range(12), key=str)]
    assert "TOP-SECRET" not in _texts(files) and "root:x:0:0" not in _texts(files)
    assert skipped == {"outside the repository": 3, "duplicate": 1}  # inside.py is pkg/mod0.py, read once


@needs_git
def test_listing_runs_no_program_the_repository_configured(tmp_path):
    root = hostile_repo(tmp_path)  # a folder that came with its .git, and a .git/config of its choosing
    hook = tmp_path / "hook.sh"
    hook.write_text(f"#!/bin/sh\ntouch {tmp_path / 'ran'}\nexit 1\n")
    hook.chmod(0o755)
    _git(root, "config", "core.fsmonitor", str(hook))
    assert len(repo_files(root)[0]) == 12
    assert not (tmp_path / "ran").exists()


def test_a_plain_folder_neither_reads_a_link_out_nor_enters_a_linked_folder(tmp_path):
    root = hostile_repo(tmp_path, git=False)
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "private.py").write_text(SECRET)
    (root / "outdir").symlink_to(tmp_path / "elsewhere")
    files, skipped = repo_files(root)
    assert len(files) == 12 and "TOP-SECRET" not in _texts(files)
    assert not any(f.path.startswith("outdir/") for f in files)
    assert skipped["outside the repository"] == 3


@needs_git
def test_a_link_to_dev_zero_is_no_regular_file_and_nothing_is_read_past_the_cap(tmp_path):
    root = hostile_repo(tmp_path)
    (root / "zero.py").symlink_to("/dev/zero")
    _git(root, "add", "zero.py")
    _git(root, "commit", "-qm", "zero")
    files, skipped = repo_files(root)  # before: read /dev/zero until MemoryError
    assert skipped["outside the repository"] == 4 and len(files) == 12
    real = root.resolve()
    assert read_file(Path("/"), "dev/zero") == ("dev/zero", None, "not a regular file")
    (root / "big.py").write_text("x = 1\n" * (MAX_FILE_BYTES // 6 + 1))
    assert read_file(real, "big.py")[1:] == (None, "huge")


@needs_git
def test_a_link_to_a_fifo_is_skipped_without_waiting_for_a_writer(tmp_path):
    root = hostile_repo(tmp_path)
    os.mkfifo(root / "pipe")  # git lists no FIFO, but a committed link to one is followed
    (root / "pipe.py").symlink_to("pipe")
    _git(root, "add", "pipe.py")
    _git(root, "commit", "-qm", "a link to a fifo")
    files, skipped = repo_files(root)  # before: the read waited for a writer for ever
    assert len(files) == 12 and skipped["not a regular file"] == 1


@needs_git
def test_regress_repo_stores_no_text_from_outside_the_repository_in_its_workload(tmp_path):
    root = hostile_repo(tmp_path)
    workload = sample(repository_files(str(root)), f"repository {root}", requests=400, chars=4, renames=0,
                      max_files=20, seed=0)
    wire = json.dumps(workload.to_wire())
    assert workload.files and "TOP-SECRET" not in wire and "root:x:0:0" not in wire


@needs_git
def test_eval_repo_measures_no_text_from_outside_the_repository(tiny_checkpoint, tmp_path, capsys):
    root = hostile_repo(tmp_path)
    assert main(["eval", "repo", str(root), "--model", str(tiny_checkpoint), "--lines", "2", "--no-next-edits",
                 "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert (result["files"], result["held_out_files"]) == (12, 1)  # pkg/mod2.py
    assert result["skipped"] == {"outside the repository": 3, "duplicate": 1}


def _adapt(root: Path, tiny_checkpoint: Path, *extra: str) -> int:
    return main(["adapt", str(root), "--model", str(tiny_checkpoint), "--steps", "1", "--no-eval", "--no-progress",
                 "--json", *extra])


@pytest.fixture
def state(monkeypatch, tmp_path) -> Path:
    """A state folder of this test's own (what was said, what adapt wrote)."""
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    return tmp_path / "state"


@needs_git
def test_adapt_trains_on_no_text_from_outside_and_records_its_model_for_the_workspace(tiny_checkpoint, tmp_path,
                                                                                     state, capsys):
    root = hostile_repo(tmp_path)
    assert _adapt(root, tiny_checkpoint) == 0
    report = json.loads(capsys.readouterr().out)
    corpus = root / ADAPTED_DIR / "run" / "corpus"
    text = (corpus / "train.jsonl").read_text() + (corpus / "val.jsonl").read_text()
    assert "mod1.py" in text and "TOP-SECRET" not in text and "root:x:0:0" not in text
    assert report["skipped"]["outside the repository"] == 3 and report["adapted"]["trusted"]
    got = choose(LaunchSettings(), str(root))  # the record is outside the repository
    assert (got.source, got.path, got.untrusted) == ("workspace", str(root / ADAPTED_DIR), None)
    assert (state / "diffusion-lsp" / "trusted-models.json").is_file()
    assert trusted(root / ADAPTED_DIR, root) and not trusted(root / ADAPTED_DIR, tmp_path)


def _outside(tmp_path: Path) -> Path:
    """A folder outside the repository that already holds a run and a config.json."""
    out = tmp_path / "victim"
    (out / "run").mkdir(parents=True)
    (out / "run" / "keep.txt").write_text("mine\n")
    (out / "config.json").write_text('{"mine": true}\n')
    return out


@needs_git
@pytest.mark.parametrize("link", [".diffusion-lsp", ".diffusion-lsp/model", ".diffusion-lsp/model/run",
                                  ".diffusion-lsp/model/adapt.json", ".diffusion-lsp/.gitignore"])
def test_adapt_never_writes_through_a_symlink_the_repository_brought(tiny_checkpoint, tmp_path, state, capsys, link):
    root = hostile_repo(tmp_path)
    victim = _outside(tmp_path)
    target = {"adapt.json": victim / "config.json", ".gitignore": victim / "planted"}.get(Path(link).name, victim)
    (root / link).parent.mkdir(parents=True, exist_ok=True)
    (root / link).symlink_to(target)
    _git(root, "add", "-f", link)
    _git(root, "commit", "-qm", "a link where adapt writes")
    before = {p.relative_to(victim): p.read_bytes() for p in victim.rglob("*") if p.is_file()}
    assert _adapt(root, tiny_checkpoint) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("diffusion-lsp: error: ") and "symlink" in err and "--out" in err and "\n" not in err
    assert {p.relative_to(victim): p.read_bytes() for p in victim.rglob("*") if p.is_file()} == before
    assert (root / link).is_symlink()  # left as it was: the user decides


@needs_git
def test_adapt_says_so_when_the_repository_has_a_file_where_its_folder_goes(tiny_checkpoint, tmp_path, state, capsys):
    root = hostile_repo(tmp_path)
    (root / ".diffusion-lsp").write_text("not a folder\n")
    assert _adapt(root, tiny_checkpoint) == 2  # before: a traceback from mkdir
    err = capsys.readouterr().err.strip()
    assert err.startswith("diffusion-lsp: error: ") and "not a folder" in err and "\n" not in err


@needs_git
def test_adapt_writes_where_the_user_says_with_out(tiny_checkpoint, tmp_path, state, capsys):
    root = hostile_repo(tmp_path)
    (root / ".diffusion-lsp").symlink_to(_outside(tmp_path))
    out = tmp_path / "mine"
    assert _adapt(root, tiny_checkpoint, "--out", str(out)) == 0
    assert (out / "config.json").is_file() and json.loads(capsys.readouterr().out)["out"] == str(out)
    assert (tmp_path / "victim" / "run" / "keep.txt").read_text() == "mine\n"


def _shipped(tiny_checkpoint: Path, root: Path) -> Path:
    """A model the repository brings in its own .diffusion-lsp/model (our format, claiming Go and
    next edits): what a clone would have."""
    folder = root / ADAPTED_DIR
    shutil.copytree(tiny_checkpoint, folder)
    config = json.loads((folder / "config.json").read_text())
    config["claims"] = {"languages": ["go"], "next_edits": True}
    config["adapted"] = {"repo": str(root), "base": "x", "minutes": 2, "steps": 7}
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def _session(tmp_path: Path, root: Path, launch: LaunchSettings = LaunchSettings()) -> tuple[Session, RecordingUi]:
    ui = RecordingUi()
    session = Session(ServeOptions(launch, worker_socket=str(tmp_path / "w.sock")), ui, {}.get)
    session.root = str(root)
    return session, ui


def test_a_model_the_repository_ships_is_not_used_and_the_user_is_told_once_what_to_set(tiny_checkpoint, tmp_path,
                                                                                        state):
    root = tmp_path / "clone"
    folder = _shipped(tiny_checkpoint, root)
    got = choose(LaunchSettings(), str(root))
    assert (got.source, got.path, got.untrusted) == ("embedded", None, str(folder))
    for _ in range(2):  # two starts of the server: told in the first only
        session, ui = _session(tmp_path, root)
        session.configure(None)
        session.configure(None)
        model = session.report()["model"]
        assert (model["source"], model["path"], model["untrusted"]) == ("embedded", None, str(folder))
        assert session.backend.spec.model.path is None and model["claims"]["languages"] != ["go"]
        session.indexer.close()
        told = [m for kind, m in ui.shown if str(folder) in m]
        if _ == 0:
            assert len(told) == 1 and "model.path" in told[0]
        else:
            assert told == []
    # the user's explicit setting wins
    named = choose(LaunchSettings(path=str(folder)), str(root))
    assert (named.source, named.path) == ("settings", str(folder))


def test_a_recorded_model_is_trusted_only_for_its_workspace_and_with_the_files_adapt_wrote(tiny_checkpoint,
                                                                                          tmp_path, state):
    root = tmp_path / "ws"
    folder = _shipped(tiny_checkpoint, root)
    assert trust(folder, root) and choose(LaunchSettings(), str(root)).source == "workspace"
    (folder / "model.safetensors").write_bytes((tiny_checkpoint / "model.safetensors").read_bytes() + b"")
    os.utime(folder / "model.safetensors", ns=(1, 1))  # the weights replaced
    assert choose(LaunchSettings(), str(root)).untrusted == str(folder)
    assert trust(folder, root) and choose(LaunchSettings(), str(root)).source == "workspace"
    # another repository whose .diffusion-lsp/model links to this machine's model for `ws`
    other = tmp_path / "other"
    (other / ".diffusion-lsp").mkdir(parents=True)
    (other / ADAPTED_DIR).symlink_to(folder)
    assert choose(LaunchSettings(), str(other)).untrusted == str(other / ADAPTED_DIR)
    assert (state / "diffusion-lsp" / "trusted-models.json").is_file()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["trusted-models.json", "said.json"])
def test_a_fifo_in_the_state_folder_is_read_as_nothing_without_waiting(tiny_checkpoint, tmp_path, state, name):
    """The re-run probe's case: with trusted-models.json a FIFO the language server never answered
    initialize (the record was opened to read, waiting for a writer). A state file that is no regular
    file is no record: the shipped model stays untrusted, the notice is said, and both are written anew."""
    root = tmp_path / "clone"
    folder = _shipped(tiny_checkpoint, root)
    (state / "diffusion-lsp").mkdir(parents=True, exist_ok=True)
    os.mkfifo(state / "diffusion-lsp" / name)
    done = subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                           "from diffusion_lsp.local_state import trusted; from diffusion_lsp.server import notice; "
                           "print(trusted(Path(sys.argv[1]), Path(sys.argv[2])), notice.already_said('x'))",
                           str(folder), str(root)], capture_output=True, text=True, timeout=60)
    assert done.stdout.split() == ["False", "False"], done.stdout + done.stderr
    assert trust(folder, root) and notice.remember("x")
    assert choose(LaunchSettings(), str(root)).source == "workspace" and notice.already_said("x")
