"""Edits from a repository's own git history (`adapt`, `eval repo`): each recent commit that
modified a source file gives the file before and after it, and those pairs become next-edit
material the way two releases of a package do (data/edits.py): after hunks 1..k of the commit,
the next edit is hunk k + 1.

Only paths the repository has now are read (context/repo.py lists them, and its held-out split says
which side a path is on), so an older version of a held-out file never becomes training material.
Blobs are sized before they are read: one `git cat-file --batch-check` gives each version's object
id and size, and per chunk of pairs one `--batch` then reads, by id, only the blobs of at most
MAX_FILE_BYTES (each once, however many versions share it). A 42 MB file's 16 versions are never
read: `eval edits` on such a repository peaked at 2.6 GB of memory (21 s) when the blobs were read,
then sized, and at 33 MB (2.6 s) since. git is run by gitrun.py, which runs nothing the repository's config names.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..context.languages import language_for
from ..nextedit.history import last_change_end
from .edits import apply_hunks, hunks
from ..context.repo import MAX_FILE_BYTES
from ..gitrun import run

MAX_COMMITS = 500  # the newest commits looked at
MAX_PAIRS = 400  # (commit, file) pairs read
CHUNK = 50  # pairs per `git cat-file --batch`
OBJECT_ID = re.compile(rb"[0-9a-f]{40}([0-9a-f]{24})?")  # SHA-1 or SHA-256


@dataclass(frozen=True)
class FilePair:
    commit: str  # the commit's full hash
    path: str  # relative to the repository, '/'-separated
    old: str  # the file in the commit's first parent
    new: str  # the file in the commit


def modified(root: Path, paths: set[str], max_commits: int = MAX_COMMITS) -> list[tuple[str, str]]:
    """(commit, path) for each of `paths` modified (not added, deleted or renamed) by one of the
    newest non-merge commits of HEAD, newest first; [] outside a git work tree."""
    out = run(root, "log", "--no-merges", "--diff-filter=M", "--no-renames", "--format=@%H", "--name-only",
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


def _sizes(root: Path, names: list[str]) -> list[tuple[bytes, int] | None]:
    """(object id, size) of the blob each `rev:path` names, in order; None for a missing one, one
    that is no blob, and a name of several lines (one line is one name to cat-file)."""
    asked = [n for n in names if "\n" not in n]
    out = run(root, "cat-file", "--batch-check=%(objectname) %(objecttype) %(objectsize)",
              data="".join(n + "\n" for n in asked).encode())
    lines = out.split(b"\n") if out is not None else []
    found = {}
    for name, line in zip(asked, lines):
        head = line.split(b" ")
        if len(head) == 3 and OBJECT_ID.fullmatch(head[0]) and head[1] == b"blob" and head[2].isdigit():
            found[name] = head[0], int(head[2])
    return [found.get(n) for n in names]


def _read(root: Path, objects: dict[bytes, int]) -> dict[bytes, bytes]:
    """The contents of blobs by object id -> their size; git's answer is read up to the bytes those
    sizes make, and what does not match them is dropped."""
    ids = sorted(objects)
    expected = sum(len(b"%s blob %d\n" % (oid, objects[oid])) + objects[oid] + 1 for oid in ids)
    out = run(root, "cat-file", "--batch", data=b"".join(oid + b"\n" for oid in ids), limit=expected)
    read, i = {}, 0
    for oid in ids:
        head = b"%s blob %d\n" % (oid, objects[oid])
        if out is None or not out.startswith(head, i):
            break
        i += len(head)
        read[oid] = out[i:i + objects[oid]]
        i += objects[oid] + 1  # the content, then a newline
    return read


def _blobs(root: Path, sized: list[tuple[bytes, int] | None], cap: int = MAX_FILE_BYTES) -> list[bytes | None]:
    """The blobs _sizes found, in order: None for a missing one and for one over `cap`, never read."""
    fit = {oid: size for oid, size in filter(None, sized) if size <= cap}
    read = _read(root, fit) if fit else {}
    return [read.get(s[0]) if s is not None else None for s in sized]


def file_pairs(root: str | Path, paths: set[str], max_pairs: int = MAX_PAIRS) -> Iterator[FilePair]:
    """The before/after texts of the newest modifications of `paths` (UTF-8 text files only)."""
    root = Path(root)
    changes = modified(root, paths)[:max_pairs]
    sized = _sizes(root, [name for commit, path in changes for name in (f"{commit}^:{path}", f"{commit}:{path}")])
    for c in range(0, len(changes), CHUNK):
        part = changes[c:c + CHUNK]
        blobs = _blobs(root, sized[2 * c:2 * (c + CHUNK)])
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
