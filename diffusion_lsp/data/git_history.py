"""Edits from a repository's own git history (`adapt`, `eval repo`): each recent commit that
modified a source file gives the file before and after it, and those pairs become next-edit
material the way two releases of a package do (data/edits.py): after hunks 1..k of the commit,
the next edit is hunk k + 1.

Only paths the repository has now are read (context/repo.py lists them, and its held-out split says
which side a path is on), so an older version of a held-out file never becomes training material.
Blobs are read with one `git cat-file --batch` per chunk of pairs, not one process per file.
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..context.languages import language_for
from ..nextedit.history import last_change_end
from .edits import apply_hunks, hunks
from ..context.repo import MAX_FILE_BYTES

MAX_COMMITS = 500  # the newest commits looked at
MAX_PAIRS = 400  # (commit, file) pairs read
CHUNK = 50  # pairs per `git cat-file --batch`
GIT_TIMEOUT_S = 60


@dataclass(frozen=True)
class FilePair:
    commit: str  # the commit's full hash
    path: str  # relative to the repository, '/'-separated
    old: str  # the file in the commit's first parent
    new: str  # the file in the commit


def _git(root: Path, *args: str, data: bytes | None = None) -> bytes | None:
    """git's stdout, or None when git is missing, fails or the folder is no work tree."""
    try:
        done = subprocess.run(["git", "-C", str(root), *args], input=data, capture_output=True,
                              timeout=GIT_TIMEOUT_S)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def modified(root: Path, paths: set[str], max_commits: int = MAX_COMMITS) -> list[tuple[str, str]]:
    """(commit, path) for each of `paths` modified (not added, deleted or renamed) by one of the
    newest non-merge commits of HEAD, newest first; [] outside a git work tree."""
    out = _git(root, "log", "--no-merges", "--diff-filter=M", "--no-renames", "--format=@%H", "--name-only",
               "-z", f"-n{max_commits}", "HEAD")
    if out is None:
        return []
    found, commit = [], None
    for field in out.decode("utf-8", "replace").replace("\n", "\0").split("\0"):
        if field.startswith("@"):
            commit = field[1:]
        elif field and commit is not None and field in paths:
            found.append((commit, field))
    return found


def _blobs(root: Path, names: list[str]) -> list[bytes | None]:
    """The objects `rev:path` names, in order (None for a missing or oversized one)."""
    out = _git(root, "cat-file", "--batch", data="".join(n + "\n" for n in names).encode())
    if out is None:
        return [None] * len(names)
    blobs, i = [], 0
    for _ in names:
        end = out.find(b"\n", i)
        if end < 0:
            break
        head = out[i:end].split()
        if len(head) != 3 or head[1] != b"blob":  # "<name> missing", or not a file
            blobs.append(None)
            i = end + 1
            continue
        size = int(head[2])
        blobs.append(out[end + 1:end + 1 + size] if size <= MAX_FILE_BYTES else None)
        i = end + 1 + size + 1  # the content, then a newline
    return blobs + [None] * (len(names) - len(blobs))


def file_pairs(root: str | Path, paths: set[str], max_pairs: int = MAX_PAIRS) -> Iterator[FilePair]:
    """The before/after texts of the newest modifications of `paths` (UTF-8 text files only)."""
    root = Path(root)
    changes = modified(root, paths)[:max_pairs]
    for c in range(0, len(changes), CHUNK):
        part = changes[c:c + CHUNK]
        blobs = _blobs(root, [name for commit, path in part for name in (f"{commit}^:{path}", f"{commit}:{path}")])
        for (commit, path), old, new in zip(part, blobs[0::2], blobs[1::2]):
            if old is None or new is None or b"\0" in old or b"\0" in new:
                continue
            try:
                pair = FilePair(commit, path, old.decode("utf-8"), new.decode("utf-8"))
            except UnicodeDecodeError:
                continue
            if pair.old != pair.new:
                yield pair


@dataclass(frozen=True)
class EditStep:
    """One next edit within a commit: the file was `old`, the user has made the commit's first k
    hunks (`current`, the cursor where the k-th ended) and the next one makes it `new`."""

    id: str
    path: str
    old: str
    current: str
    new: str
    cursor: tuple[int, int]  # 0-based (line, character) in current


def edit_steps(pair: FilePair, per_pair: int = 4) -> list[EditStep]:
    """Up to `per_pair` steps of one commit's file, spread over its hunks (a commit of one hunk has no
    next edit to predict)."""
    groups = hunks(pair.old, pair.new)
    ks = list(range(1, len(groups)))
    if len(ks) > per_pair:
        ks = [ks[round(i * (len(ks) - 1) / (per_pair - 1))] for i in range(per_pair)] if per_pair > 1 else ks[:1]
    steps = []
    for k in ks:
        current = apply_hunks(pair.old, pair.new, groups, k)
        cursor = last_change_end(pair.old, current)
        if cursor is not None and language_for(None, pair.path) is not None:
            steps.append(EditStep(f"{pair.commit[:12]}:{pair.path}#{k}", pair.path, pair.old, current,
                                  apply_hunks(pair.old, pair.new, groups, k + 1), cursor))
    return steps
