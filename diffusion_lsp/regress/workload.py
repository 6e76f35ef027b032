"""The workload `regress` replays: which files, where the user types, which renames ask for a next edit.

A workload is sampled once, when a baseline is saved, and stored in it whole: the files' texts, the
typing sites (a block opener whose body is removed and typed again, bench/replay.py) and the renames
(bench/next_edit.py). A compare replays the baseline's own workload, so a pull request that changes the
repository's code still measures the model and server on the code the baseline measured; asked for a
workload of its own (`--repo`, `--seed`, ...), it samples one and refuses a baseline whose workload is
not the same (exit 3).

Sampling is deterministic: the same files, seed and counts give the same workload on every machine.
Files are taken in turn from each language the repository has (so a Go and TypeScript repository is
measured on both), and the requests are dealt to the files in turn, one site at a time."""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict, dataclass
from pathlib import Path

from ..bench import next_edit, replay
from ..data.workload import workload_files
from ..context.languages import language_for
from ..context.repo import SourceFile, repo_files
from ..errors import UserError

MAX_WORKLOAD_BYTES = 4 << 20  # the stored texts: a baseline stays a file a CI cache or a commit holds


@dataclass(frozen=True)
class WorkFile:
    path: str  # relative to the repository ('/'-separated), or the stdlib module's
    language: str  # languages' canonical name
    text: str
    sites: tuple[replay.Site, ...]  # typed at, in order
    renames: tuple[tuple[str, tuple[int, int], tuple[int, int]], ...]  # (name, first use, next use)

    def requests(self, chars: int) -> int:
        """Completion requests its sites ask: one after Enter, one per character typed."""
        return sum(1 + min(chars, len(s.first)) for s in self.sites)

    def rename_sites(self) -> list[next_edit.Site]:
        lines = self.text.splitlines(keepends=True)
        return [next_edit.rename_site(lines, name, first, second) for name, first, second in self.renames]


@dataclass(frozen=True)
class Workload:
    source: str  # where the files came from, for the report ("repository /src/app", "the Python stdlib")
    seed: int
    chars: int  # characters typed into each body, one request each
    files: tuple[WorkFile, ...]

    @property
    def requests(self) -> int:
        return sum(f.requests(self.chars) for f in self.files)

    @property
    def renames(self) -> int:
        return sum(len(f.renames) for f in self.files)

    @property
    def languages(self) -> list[str]:
        return sorted({f.language for f in self.files})

    def fingerprint(self) -> str:
        """A hash of what is replayed (not of where it came from)."""
        body = json.dumps([self.chars, [_file_wire(f) for f in self.files]], sort_keys=True)
        return hashlib.sha256(body.encode("utf-8")).hexdigest()[:16]

    def to_wire(self) -> dict:
        return {"source": self.source, "seed": self.seed, "chars": self.chars,
                "files": [_file_wire(f) for f in self.files], "fingerprint": self.fingerprint()}

    @classmethod
    def from_wire(cls, raw: dict) -> Workload:
        """ValueError when the stored workload is malformed or its texts were changed by hand."""
        try:
            files = tuple(WorkFile(f["path"], f["language"], f["text"],
                                   tuple(replay.Site(s["line"], s["last"], s["indent"], s["first"]) for s in f["sites"]),
                                   tuple((r[0], tuple(r[1]), tuple(r[2])) for r in f["renames"]))
                          for f in raw["files"])
            out = cls(raw["source"], int(raw["seed"]), int(raw["chars"]), files)
        except (KeyError, TypeError, IndexError, ValueError) as e:
            raise ValueError(f"the baseline's workload is malformed ({type(e).__name__}: {e})") from None
        if raw.get("fingerprint") != out.fingerprint():
            raise ValueError("the baseline's workload does not match its fingerprint (edited by hand?)")
        for f in out.files:
            _check_sites(f)
        return out


def _file_wire(f: WorkFile) -> dict:
    return {"path": f.path, "language": f.language, "text": f.text, "sites": [asdict(s) for s in f.sites],
            "renames": [[n, list(a), list(b)] for n, a, b in f.renames]}


def _check_sites(f: WorkFile) -> None:
    lines, keep = f.text.split("\n"), f.text.splitlines(keepends=True)
    for s in f.sites:
        if not (0 <= s.line < s.last < len(lines)):
            raise ValueError(f"the baseline's site at {f.path}:{s.line + 1} is outside the file")
    for name, *uses in f.renames:
        for line, col in uses:
            if not (0 <= line < len(keep) and keep[line][col:col + len(name)] == name):
                raise ValueError(f"the baseline's rename of {name} at {f.path}:{line + 1} is not in the file")


def sample(files: list[SourceFile], source: str, requests: int, chars: int, renames: int, max_files: int,
           seed: int) -> Workload:
    """A workload of about `requests` completion requests and `renames` next-edit requests over at
    most `max_files` of `files`, taken in turn from each language (see the module doc)."""
    rng = random.Random(seed)
    by_language: dict[str, list[SourceFile]] = {}
    for f in sorted(files, key=lambda f: f.path):
        by_language.setdefault(f.language, []).append(f)
    candidates = {}  # language -> its files, in a drawn order
    for language, group in sorted(by_language.items()):
        rng.shuffle(group)
        candidates[language] = group
    picked: list[tuple[SourceFile, list[replay.Site], list[next_edit.Site]]] = []
    size = 0
    while len(picked) < max_files and any(candidates.values()):
        for language in sorted(candidates):
            if len(picked) >= max_files or not candidates[language]:
                continue
            f = candidates[language].pop()
            sites = replay.find_sites(f.text.split("\n"), f.language)
            if not sites or size + len(f.text) > MAX_WORKLOAD_BYTES:
                continue
            rng.shuffle(sites)
            picked.append((f, sites, next_edit.find_sites(f.text, renames, rng, f.language)))
            size += len(f.text)
    if not picked:
        raise UserError(f"no file in {source} has a block to type into (a Python block opener, or a line "
                        "ending with '{' in a brace language, with an indented body)")
    chosen = _deal([sites for _, sites, _ in picked], requests, lambda s: 1 + min(chars, len(s.first)))
    kept_renames = _deal([found for _, _, found in picked], renames, lambda _: 1)
    out = tuple(WorkFile(f.path, f.language, f.text, tuple(chosen[i]),
                         tuple((r.name, r.first, r.second) for r in kept_renames[i]))
                for i, (f, _, _) in enumerate(picked) if chosen[i] or kept_renames[i])
    return Workload(source, seed, chars, out)


def _deal(pools: list[list], budget: int, cost) -> list[list]:
    """The first items of each pool, taken one pool after the other in turn until their summed
    `cost` reaches `budget` (the last item taken may pass it) or the pools are used up."""
    taken: list[list] = [[] for _ in pools]
    spent, progress = 0, True
    while spent < budget and progress:
        progress = False
        for pool, mine in zip(pools, taken):
            if spent < budget and len(mine) < len(pool):
                mine.append(pool[len(mine)])
                spent += cost(mine[-1])
                progress = True
    return taken


def repository_files(root: str) -> list[SourceFile]:
    """A repository's source files (what git lists, no generated or huge file)."""
    files, _ = repo_files(root)
    if not files:
        raise UserError(f"no source files in a language the server knows under {root}")
    return files


def stdlib_files() -> list[SourceFile]:
    """The default workload's files: the CPython test modules `bench lsp` types in (code the
    embedded model was not trained on)."""
    out = []
    for path in workload_files():
        spec = language_for(None, path.name)
        out.append(SourceFile(f"stdlib/{path.parent.name}/{path.name}", _read(path), spec.name))
    return out


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").replace("\r\n", "\n")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {path}: {e}") from None
