"""The one way the project runs git (context/repo.py lists a work tree's files, data/git_history.py
reads its history): on a folder someone else made, whose `.git/config` is theirs, git runs nothing
that config, the user's global or system config, or an inherited GIT_* variable names.

What git would otherwise run, and what stops it:
- the system, global and HOME-based config are not read (GIT_CONFIG_NOSYSTEM, GIT_CONFIG_GLOBAL,
  HOME and XDG_CONFIG_HOME set to /dev/null), and every GIT_* variable inherited is dropped (a
  GIT_DIR, GIT_EXTERNAL_DIFF, GIT_PAGER, GIT_SSH_COMMAND or GIT_CONFIG_PARAMETERS of the caller's);
- each setting of the repository's config that names a program or asks for a signature check is
  overridden on the command line (OVERRIDES: `-c` is read after the repository's config, so it wins):
  `log.showSignature` with a `gpg.*.program` ran that program for every commit carrying a signature;
- a partial clone fetches a missing object from its promisor remote, and the remote's URL,
  `remote.NAME.uploadpack`, `core.sshCommand` or a credential helper is the repository's choice: no
  lazy fetch (GIT_NO_LAZY_FETCH) and no transport at all (GIT_ALLOW_PROTOCOL empty allows none,
  whatever `protocol.NAME.allow` the repository sets), no prompt (GIT_TERMINAL_PROMPT=0, no askpass);
- filter, textconv and external diff drivers are named by the repository under names of its own, so
  no `-c` can reach them all: `cat-file --batch` applies no filter, every log is run with
  --no-ext-diff --no-textconv (LOG_FLAGS), and `command` refuses the flags that would apply one
  (REFUSED_FLAGS);
- an alias never replaces a builtin, and only the builtins of SUBCOMMANDS are run.
A repository owned by another user is refused by git (no `safe.directory` can come from anywhere
else now): its files are then walked as a plain folder's, and its history is not read.
What is left to the repository: its config may include a file (`include.path`), and a FIFO there,
or a FIFO as its own .gitignore or info/exclude, makes git wait for a writer; each call is stopped
after GIT_TIMEOUT_S, and its answer is none. (A FIFO as the order file, mailmap or excludes file
it names is never opened: OVERRIDES.)

Why the git binary and not a library that runs no program: on a history of 10,000 commits (200
modules, 1-3 changed a commit; packed), the newest 500 commits' modified files took git 32 ms
(pygit2 1.21 100 ms, dulwich 1.2 394 ms), all 10,000 commits 342 ms (pygit2 782 ms, dulwich 8.7 s),
and `file_pairs` (that log, then 400 pairs of blobs sized and read) 133 ms (pygit2 124 ms, dulwich
590 ms); best of 3 on a shared 2-core machine. Both libraries install from PyPI as wheels here
(pygit2 1.21.0, dulwich 1.2.21), but neither is faster, either is one more compiled dependency,
and git is needed anyway for ls-files' .gitignore rules; with the overrides above it runs nothing
of the repository's.
"""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

GIT_TIMEOUT_S = 60
MAX_OUTPUT = 256 << 20  # bytes of stdout read at most (a larger answer is no answer)
NOWHERE = os.devnull  # the value of a setting that names a program or a file: none that runs
SUBCOMMANDS = frozenset({"log", "cat-file", "ls-files"})
REFUSED_FLAGS = frozenset({"--filters", "--textconv", "--path", "--ext-diff", "--show-signature"})
LOG_FLAGS = ("--no-ext-diff", "--no-textconv")  # whatever else the log is asked for, no diff driver runs
OVERRIDES = (
    ("log.showSignature", "false"),
    ("gpg.program", NOWHERE), ("gpg.openpgp.program", NOWHERE), ("gpg.x509.program", NOWHERE),
    ("gpg.ssh.program", NOWHERE), ("gpg.ssh.allowedSignersFile", NOWHERE), ("gpg.ssh.revocationFile", NOWHERE),
    ("gpg.ssh.defaultKeyCommand", NOWHERE),
    ("core.fsmonitor", "false"), ("core.hooksPath", NOWHERE), ("core.pager", "cat"), ("core.editor", NOWHERE),
    ("core.sshCommand", NOWHERE), ("core.askPass", ""), ("core.gitProxy", NOWHERE),
    ("core.alternateRefsCommand", NOWHERE), ("diff.external", NOWHERE), ("credential.helper", ""),
    ("protocol.allow", "never"),
    # files git reads by a name the repository chooses, a FIFO among them held each call until the
    # timeout: the log's order file and mailmap (on by default: a FIFO `.mailmap` needs no setting),
    # the listing's excludes file (the repository's .gitignore files and info/exclude still apply)
    ("diff.orderFile", NOWHERE), ("log.mailmap", "false"), ("core.excludesFile", NOWHERE),
    *((f"protocol.{name}.allow", "never") for name in ("file", "git", "ssh", "http", "https", "ftp", "ftps",
                                                        "ext", "fd")),
)
ENVIRONMENT = {
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": NOWHERE, "HOME": NOWHERE, "XDG_CONFIG_HOME": NOWHERE,
    "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "", "SSH_ASKPASS": "", "GIT_PAGER": "cat", "PAGER": "cat",
    "GIT_NO_LAZY_FETCH": "1", "GIT_ALLOW_PROTOCOL": "", "GIT_OPTIONAL_LOCKS": "0",
}


def environment() -> dict[str, str]:
    """The caller's environment without a GIT_* variable, plus ENVIRONMENT."""
    return {**{k: v for k, v in os.environ.items() if not k.startswith("GIT_")}, **ENVIRONMENT}


def command(root: str | Path, subcommand: str, *args: str) -> list[str]:
    """The argv that runs builtin `subcommand` in `root` with OVERRIDES in force; ValueError for a
    subcommand not in SUBCOMMANDS or a flag of REFUSED_FLAGS."""
    if subcommand not in SUBCOMMANDS:
        raise ValueError(f"git {subcommand!r} is not one of the subcommands run: {sorted(SUBCOMMANDS)}")
    if refused := [a for a in args if a.split("=", 1)[0] in REFUSED_FLAGS]:
        raise ValueError(f"git {subcommand} {refused[0]}: a flag that could run a program the repository names")
    overrides = [arg for key, value in OVERRIDES for arg in ("-c", f"{key}={value}")]
    own = LOG_FLAGS if subcommand == "log" else ()
    return ["git", "--no-pager", "--no-optional-locks", *overrides, "-C", str(root), subcommand, *own, *args]


def run(root: str | Path, subcommand: str, *args: str, data: bytes | None = None,
        limit: int = MAX_OUTPUT) -> bytes | None:
    """git's stdout, or None when git is missing, fails, runs past GIT_TIMEOUT_S or writes more than
    `limit` bytes (it is stopped then: nothing past the limit is held)."""
    argv = command(root, subcommand, *args)
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE if data is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=environment())
    except OSError:
        return None
    timer = threading.Timer(GIT_TIMEOUT_S, proc.kill)
    timer.start()
    feeder = threading.Thread(target=_feed, args=(proc, data), daemon=True) if data is not None else None
    if feeder is not None:
        feeder.start()
    try:
        out = _read_at_most(proc, limit)
        if out is None:
            proc.kill()
        proc.wait()
    finally:
        timer.cancel()
        proc.stdout.close()
    if feeder is not None:
        feeder.join()
    return out if out is not None and proc.returncode == 0 else None


def _feed(proc: subprocess.Popen, data: bytes) -> None:
    try:
        proc.stdin.write(data)
    except OSError:  # git ended first (it failed, or was stopped)
        pass
    finally:
        try:
            proc.stdin.close()
        except OSError:
            pass


def _read_at_most(proc: subprocess.Popen, limit: int) -> bytes | None:
    """All of proc's stdout, or None once it passes `limit` bytes."""
    parts, total, fd = [], 0, proc.stdout.fileno()
    while chunk := os.read(fd, 1 << 20):
        total += len(chunk)
        if total > limit:
            return None
        parts.append(chunk)
    return b"".join(parts)
