"""git runs nothing a repository's config names (diffusion_lsp/gitrun.py): a real repository in a
temporary folder sets one key to a program that writes a marker file, a commit or a missing object
would make git run it, the project's readers (context/repo.py's listing, data/git_history.py's
`modified` and `file_pairs`) read the repository, and the marker is never written. Blobs over the
size cap are sized and never read.

The signature programs, the partial clone's lazy fetch (ssh command, upload-pack, ext:: transport,
credential helper, askpass), a patch's textconv driver, the user's global config and the caller's
GIT_* variables ran their program before the runner; the fsmonitor hook, hooks, pagers, aliases,
filters and external diff commands did not (ls-files had its own fsmonitor override; the commands
run are given no terminal, run no hook, never let an alias replace a builtin, apply no filter, and
a log runs no external diff unless asked to), and their tests keep it so."""

from __future__ import annotations

import ast
import hashlib
import os
import shutil
import subprocess
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from diffusion_lsp import gitrun
from diffusion_lsp.context.repo import MAX_FILE_BYTES, repo_files
from diffusion_lsp.data import git_history
from diffusion_lsp.data.git_history import file_pairs, modified

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
PACKAGE = Path(__file__).resolve().parent.parent / "diffusion_lsp"
OLD = "def f(x):\n    return x + 1\n\n\ndef g(x):\n    return x - 1\n"
NEW = "def f(x):\n    return x + 2\n\n\ndef g(x):\n    return x - 2\n"
SIGNATURES = {"openpgp": "PGP SIGNATURE", "x509": "SIGNED MESSAGE", "ssh": "SSH SIGNATURE"}


def _git(root: Path, *args: str, data: bytes | None = None) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(root), "PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", "-C", str(root), *args], input=data, check=True, capture_output=True,
                          env=env).stdout.decode().strip()


@pytest.fixture
def marker(tmp_path) -> Path:
    """A program that notes it ran (in marker.ran) and fails."""
    program = tmp_path / "marker"
    program.write_text(f"#!/bin/sh\necho \"$0 $*\" >> {tmp_path / 'marker.ran'}\nexit 1\n")
    program.chmod(0o755)
    return program


def _ran(marker: Path) -> bool:
    return marker.with_suffix(".ran").exists()


def make_repo(root: Path, signature: str | None = None) -> Path:
    """a.py in two commits, the second changing it in two places; signed with a `gpgsig` header of
    the kind SIGNATURES names when `signature` is given (a hand-written commit object: nothing here
    signs anything)."""
    root.mkdir()
    _git(root, "init", "-q")
    (root / "a.py").write_text(OLD)
    _git(root, "add", "a.py")
    _git(root, "commit", "-qm", "one")
    (root / "a.py").write_text(NEW)
    _git(root, "add", "a.py")
    if signature is None:
        _git(root, "commit", "-qm", "two")
        return root
    head = SIGNATURES[signature]
    body = (f"tree {_git(root, 'write-tree')}\nparent {_git(root, 'rev-parse', 'HEAD')}\n"
            f"author t <t@t> 1 +0000\ncommitter t <t@t> 1 +0000\n"
            f"gpgsig -----BEGIN {head}-----\n \n c2lnbmF0dXJl\n -----END {head}-----\n\ntwo\n")
    commit = _git(root, "hash-object", "-t", "commit", "-w", "--stdin", "--literally", data=body.encode())
    _git(root, "update-ref", "HEAD", commit)
    return root


def _read(root: Path) -> list[git_history.FilePair]:
    """The repository read the way `adapt`, `eval repo` and `eval edits` read it."""
    files, _ = repo_files(root)
    assert [f.path for f in files] == ["a.py"]
    modified(root, {"a.py"})
    return list(file_pairs(root, {"a.py"}))


@pytest.mark.parametrize("signature, settings", [
    ("openpgp", {"gpg.program": "MARKER"}),
    ("openpgp", {"gpg.openpgp.program": "MARKER"}),
    ("x509", {"gpg.x509.program": "MARKER"}),
    ("ssh", {"gpg.ssh.program": "MARKER", "gpg.ssh.allowedSignersFile": "ALLOWED"}),
], ids=["gpg.program", "gpg.openpgp.program", "gpg.x509.program", "gpg.ssh.program+allowedSignersFile"])
def test_a_signed_commit_runs_no_signature_program(tmp_path, marker, signature, settings):
    root = make_repo(tmp_path / "r", signature)
    _git(root, "config", "log.showSignature", "true")
    for key, value in settings.items():
        _git(root, "config", key, value.replace("MARKER", str(marker)).replace("ALLOWED", str(tmp_path / "allowed")))
    pairs = _read(root)
    assert [(p.old, p.new) for p in pairs] == [(OLD, NEW)]  # the signed commit is read, its signature is not
    assert not _ran(marker)
    assert gitrun.run(root, "log", "--format=%G? %GS", "-n1") is not None  # a format that asks for it
    assert not _ran(marker)


class _Unauthorized(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(401)
        self.send_header("WWW-Authenticate", 'Basic realm="r"')
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args):
        pass


@pytest.fixture
def http_url():
    """A server (a thread of this process) that asks every request for a user name and password."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Unauthorized)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/r"
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("settings", [
    {"remote.origin.url": "ssh://example.invalid/r", "core.sshCommand": "MARKER"},
    {"remote.origin.url": "SELF", "remote.origin.uploadpack": "MARKER"},
    {"remote.origin.url": "ext::MARKER", "protocol.ext.allow": "always"},
    {"remote.origin.url": "HTTP", "credential.helper": "MARKER"},
    {"remote.origin.url": "HTTP", "core.askPass": "MARKER"},
], ids=["core.sshCommand", "uploadpack", "ext-transport", "credential.helper", "core.askPass"])
def test_a_partial_clone_fetches_nothing_from_its_promisor_remote(tmp_path, marker, http_url, settings):
    root = make_repo(tmp_path / "r")
    blob = _git(root, "rev-parse", "HEAD:a.py")
    (root / ".git" / "objects" / blob[:2] / blob[2:]).unlink()  # as a blobless clone would lack it
    _git(root, "config", "core.repositoryformatversion", "1")
    _git(root, "config", "extensions.partialClone", "origin")
    _git(root, "config", "remote.origin.promisor", "true")
    for key, value in settings.items():
        value = {"SELF": str(root), "HTTP": http_url}.get(value, value)
        _git(root, "config", key, value.replace("MARKER", str(marker)))
    assert _read(root) == []  # the missing version is missing, not fetched
    assert not _ran(marker)


def _hooks(tmp_path: Path, marker: Path) -> Path:
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("post-index-change", "reference-transaction", "post-checkout", "pre-auto-gc", "fsmonitor-watchman"):
        (hooks / name).symlink_to(marker)
    return hooks


@pytest.mark.parametrize("key", ["core.fsmonitor", "core.hooksPath", "core.pager", "pager.log", "pager.cat-file",
                                 "alias.log", "alias.cat-file", "alias.ls-files"])
def test_no_fsmonitor_hook_pager_or_alias_runs(tmp_path, marker, key):
    root = make_repo(tmp_path / "r")
    value = {"core.hooksPath": str(_hooks(tmp_path, marker))}.get(key, str(marker))
    _git(root, "config", key, f"!{value}" if key.startswith("alias.") else value)
    (root / "b.txt").write_text("untracked\n")
    assert [(p.old, p.new) for p in _read(root)] == [(OLD, NEW)]
    assert not _ran(marker)


@pytest.mark.parametrize("key", ["diff.external", "diff.drv.textconv", "diff.drv.command", "filter.drv.clean",
                                 "filter.drv.smudge", "filter.drv.process"])
def test_no_diff_driver_or_filter_runs_even_for_a_patch(tmp_path, marker, key):
    root = make_repo(tmp_path / "r")
    (root / ".gitattributes").write_text("* diff=drv filter=drv\n")
    _git(root, "config", key, str(marker))
    assert [(p.old, p.new) for p in _read(root)] == [(OLD, NEW)]
    patch = gitrun.run(root, "log", "-p", "-n1")  # a patch would run the diff drivers
    assert patch is not None and b"+    return x + 2" in patch
    assert not _ran(marker)


def test_the_users_global_config_names_nothing(tmp_path, marker, monkeypatch):
    root = make_repo(tmp_path / "r", "openpgp")
    home = tmp_path / "home"
    (home / ".config" / "git").mkdir(parents=True)
    global_config = f"[log]\n\tshowSignature = true\n[gpg]\n\tprogram = {marker}\n[diff]\n\texternal = {marker}\n"
    (home / ".gitconfig").write_text(global_config)
    (home / ".config" / "git" / "config").write_text(global_config)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    assert [(p.old, p.new) for p in _read(root)] == [(OLD, NEW)]
    assert not _ran(marker)


def test_the_callers_git_variables_name_nothing(tmp_path, marker, monkeypatch):
    root = make_repo(tmp_path / "r", "openpgp")
    for name in ("GIT_EXTERNAL_DIFF", "GIT_PAGER", "GIT_SSH_COMMAND", "GIT_ASKPASS"):
        monkeypatch.setenv(name, str(marker))
    monkeypatch.setenv("GIT_CONFIG_PARAMETERS", f"'log.showsignature'='true' 'gpg.program'='{marker}'")
    assert [(p.old, p.new) for p in _read(root)] == [(OLD, NEW)]
    assert gitrun.run(root, "log", "-p", "-n1") is not None
    assert not _ran(marker)
    monkeypatch.setenv("GIT_DIR", str(tmp_path / "elsewhere"))  # the caller's repository is not the one asked
    assert [(p.old, p.new) for p in _read(root)] == [(OLD, NEW)]


@pytest.mark.parametrize("key", ["diff.orderFile", "mailmap.file", ".mailmap", "core.excludesFile"])
def test_a_fifo_the_repository_names_for_a_file_holds_no_call(tmp_path, monkeypatch, key):
    """A file git would read for the log (its order file, the mailmap: `log.mailmap` is on by default,
    so a FIFO `.mailmap` in the work tree needs no setting) or for the listing (excludes) held each
    call until the timeout when it was a FIFO: 'no commit to replay' after a minute per call."""
    root = make_repo(tmp_path / "r")
    fifo = root / ".mailmap" if key == ".mailmap" else tmp_path / "fifo"
    os.mkfifo(fifo)
    if key != ".mailmap":
        _git(root, "config", key, str(fifo))
    _git(root, "config", "log.mailmap", "true")
    monkeypatch.setattr(gitrun, "GIT_TIMEOUT_S", 3)
    assert [(p.old, p.new) for p in _read(root)] == [(OLD, NEW)]
    assert gitrun.run(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard") is not None


def test_the_runner_runs_builtins_only_and_refuses_flags_that_apply_a_repository_driver(tmp_path):
    for args in [("cat-file", "--batch", "--filters"), ("cat-file", "--textconv", "HEAD:a.py"),
                 ("log", "--ext-diff"), ("log", "--show-signature"), ("config", "-l"), ("fetch",), ("lg",)]:
        with pytest.raises(ValueError):
            gitrun.command(tmp_path, *args)
    argv = gitrun.command(tmp_path, "log", "-p")
    assert argv[argv.index("log"):] == ["log", "--no-ext-diff", "--no-textconv", "-p"]
    overridden = {argv[i + 1].split("=", 1)[0] for i, a in enumerate(argv) if a == "-c"}
    assert {"gpg.program", "gpg.openpgp.program", "gpg.x509.program", "gpg.ssh.program", "gpg.ssh.allowedSignersFile",
            "log.showSignature", "core.fsmonitor", "core.hooksPath", "core.pager", "core.sshCommand", "diff.external",
            "credential.helper", "core.askPass"} <= overridden
    assert "--no-optional-locks" in argv


def test_every_git_call_of_the_package_goes_through_the_runner():
    """A command line written as a list or tuple starting with "git", or a process started with
    "git" as its program, anywhere but gitrun.py bypasses the runner."""
    starts = {"run", "Popen", "call", "check_call", "check_output", "create_subprocess_exec", "spawnlp", "execvp"}
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name == "gitrun.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            first = None
            if isinstance(node, (ast.List, ast.Tuple)) and node.elts:
                first = node.elts[0]
            elif isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) in starts:
                first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and first.value in ("git", b"git"):
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    assert found == []


def _fake_blob(root: Path, label: str, claimed: int) -> str:
    """A loose object whose header says it is a blob of `claimed` bytes, holding a few: sizing it
    costs nothing, reading it is what the reader must never do."""
    oid = hashlib.sha1(label.encode()).hexdigest()
    folder = root / ".git" / "objects" / oid[:2]
    folder.mkdir(exist_ok=True)
    (folder / oid[2:]).write_bytes(zlib.compress(b"blob %d\0" % claimed + b"x = 1\n" * 10))
    return oid


def test_an_oversized_blob_is_sized_and_never_read(tmp_path, monkeypatch):
    root = tmp_path / "r"
    root.mkdir()
    _git(root, "init", "-q")
    big = [_fake_blob(root, f"big {k}", 50_000_000) for k in range(2)]  # 50 MB each, by their headers
    small = [_git(root, "hash-object", "-w", "--stdin", data=text.encode()) for text in (OLD, NEW)]
    parent = None
    for k in range(2):
        tree = _git(root, "mktree", data=f"100644 blob {big[k]}\tbig.py\n100644 blob {small[k]}\tsmall.py\n".encode())
        parent = _git(root, "commit-tree", tree, "-m", f"c{k}", *(["-p", parent] if parent else []))
    _git(root, "update-ref", "HEAD", parent)
    asked = []

    def recording(root, subcommand, *args, data=None, **kw):
        asked.append((subcommand, args, data or b"", kw.get("limit")))
        return gitrun.run(root, subcommand, *args, data=data, **kw)

    monkeypatch.setattr(git_history, "run", recording)
    pairs = list(file_pairs(root, {"big.py", "small.py"}))
    assert [(p.path, p.old, p.new) for p in pairs] == [("small.py", OLD, NEW)]
    batches = [(data, limit) for subcommand, args, data, limit in asked if args == ("--batch",)]
    assert batches and all(oid.encode() not in data for data, _ in batches for oid in big)
    assert all(limit <= 2 * (MAX_FILE_BYTES + 64) for _, limit in batches)  # what is read is what was sized
    assert any(args[0].startswith("--batch-check") and b":big.py\n" in data for _, args, data, _ in asked)
