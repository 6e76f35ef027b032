"""Next-edit training records: real edit sequences mined from two pinned releases of a package, and
synthetic ones derived from corpus files with tree-sitter.

A record is one prompt the model should answer (formats/edit_prompt.py lays it out; train/edit_rows.py
tokenizes it): the edits made so far (`diffs`, unified diffs oldest first), the file as it is now cut
into `before` + `old_region` + `after` (the region from nextedit/region.py around the cursor, which
sits where the last edit ended), and `new_region`, the region after the next edit. When the next
edit lies outside the region the answer is the unchanged region ("no edit" rows, kept to a minority).

Mined (Zeta-style, from consecutive releases): a file's hunks are applied one at a time in file order;
after hunk k the history is the diffs of hunks 1..k and the target applies hunk k+1.
Synthetic ones are derived with tree-sitter in synthetic_edits.py.
Hunks are split as nextedit/history.py splits them.
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

from ..context.languages import language_for
from ..nextedit.history import diffs_between, hunk_groups, last_change_end
from ..nextedit.region import editable_region
from .build import clean, package_files, parses, path_reason

RECORD_FORMAT = 1
MAX_LINES, MAX_TOKENS = 12, 100  # the embedded model's region (512 positions)
MAX_STEPS = 5  # diffs kept in a record (the prompt's max_steps)
KEEP_BEFORE, KEEP_AFTER = 4000, 2000  # characters of file context stored; the prompt keeps far less
MAX_HUNK_LINES = 30  # a hunk with more old or new lines is a rewrite, not a next edit
MAX_HUNKS = 60  # a file changed in more places was refactored wholesale
MAX_FILE_ROWS = 24  # rows from one file pair, spread over its hunks
NO_EDIT_SHARE = 0.2  # at most this fraction of mined rows keep the region unchanged
KEEP = frozenset({"self", "cls", "_", "__class__"})  # names never renamed
PARAMETERS = frozenset({"parameters", "default_parameter", "typed_parameter", "typed_default_parameter"})

Count = Callable[[str], int]


@dataclass(frozen=True)
class EditRecord:
    kind: str  # mined, no_edit, rename, literal, param
    source: str  # package and versions, or the corpus file's package
    path: str
    diffs: list[str]
    before: str
    after: str
    old_region: str
    new_region: str

    def to_json(self) -> str:
        return json.dumps(asdict(self), ensure_ascii=False)


def _clip(before: str, after: str) -> tuple[str, str]:
    """Keep the lines nearest the region: the prompt never shows more than a few hundred tokens."""
    if len(before) > KEEP_BEFORE:
        cut = before.find("\n", len(before) - KEEP_BEFORE)
        before = before[cut + 1:] if cut >= 0 else ""
    if len(after) > KEEP_AFTER:
        cut = after.rfind("\n", 0, KEEP_AFTER)
        after = after[:cut + 1] if cut >= 0 else ""
    return before, after


def make_record(kind: str, source: str, path: str, old: str, current: str, target: str,
                count: Count) -> EditRecord | None:
    """The record for a file that was `old`, is now `current` (the history is old -> current, the cursor
    where it ends) and should next become `target`. None when the edit to `target` reaches outside the
    region around the cursor (callers that want a no-edit row pass target=current)."""
    end = last_change_end(old, current)
    if end is None:
        return None
    region = editable_region(current, end[0], language_for("python"), count, MAX_LINES, MAX_TOKENS)
    a, b = region.start_offset, region.end_offset
    grow = len(target) - len(current)
    if not (target[:a] == current[:a] and target[b + grow:] == current[b:] and b + grow >= a):
        return None
    diffs = diffs_between(path, old, current)[-MAX_STEPS:]
    before, after = _clip(current[:a], current[b:])
    new_kind = kind if target != current else "no_edit"
    return EditRecord(new_kind, source, path, diffs, before, after, current[a:b], target[a:b + grow])


# ---- mined: hunks of two releases of one file


def hunks(old: str, new: str) -> list[list[tuple]]:
    """The changed opcodes of old -> new (over lines), in the hunks `diffs_between` renders
    (hunk_groups, the one splitter)."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    return [[op for op in group if op[0] != "equal"] for group in hunk_groups(a, b)]


def apply_hunks(old: str, new: str, groups: list[list[tuple]], k: int) -> str:
    """`old` with the first k hunks of old -> new applied."""
    a, b = old.splitlines(keepends=True), new.splitlines(keepends=True)
    out, i = [], 0
    for _, i1, i2, j1, j2 in (op for g in groups[:k] for op in g):
        out += a[i:i1] + b[j1:j2]
        i = i2
    return "".join(out + a[i:])


def _small(group: list[tuple]) -> bool:
    return all(i2 - i1 <= MAX_HUNK_LINES and j2 - j1 <= MAX_HUNK_LINES for _, i1, i2, j1, j2 in group)


def mine_pair(source: str, path: str, old: str, new: str, count: Count) -> Iterator[EditRecord]:
    """Rows from one file in two releases: after hunks 1..k, the region around where hunk k ended."""
    groups = hunks(old, new)
    if len(groups) < 2 or len(groups) > MAX_HUNKS:
        return
    steps = list(range(1, len(groups) + 1))
    if len(steps) > MAX_FILE_ROWS:
        steps = sorted(random.Random(f"{source}/{path}").sample(steps, MAX_FILE_ROWS))
    for k in steps:
        if not _small(groups[k - 1]):
            continue
        current = apply_hunks(old, new, groups, k)
        rec = None
        if k < len(groups) and _small(groups[k]):
            rec = make_record("mined", source, path, old, current, apply_hunks(old, new, groups, k + 1), count)
        if rec is None:
            rec = make_record("mined", source, path, old, current, current, count)
        if rec is not None:
            yield rec


def cap_no_edit(records: list[EditRecord], share: float = NO_EDIT_SHARE, seed: int = 0) -> list[EditRecord]:
    """Drop no-edit rows at random until they are at most `share` of the rows."""
    edits = [r for r in records if r.kind != "no_edit"]
    none = [r for r in records if r.kind == "no_edit"]
    room = int(share * len(edits) / (1 - share)) if share < 1 else len(none)
    if len(none) > room:
        keep = set(random.Random(seed).sample(range(len(none)), room))
        none = [r for i, r in enumerate(none) if i in keep]
    return edits + none


# ---- synthetic: the same change repeated at several places


def held_out(source: str, path: str, every: int = 20) -> bool:
    """A stable 1-in-`every` choice of files, for the validation records."""
    return zlib.crc32(f"{source}/{path}".encode()) % every == 0


# ---- building data/edits from the manifest's previous releases and the corpus


def release_files(pkg, cache, fetch) -> dict[str, str]:
    """path -> normalized text of the kept .py files of one pinned release (sha256 and licence checked)."""
    out = {}
    for path, data in package_files(pkg, cache, fetch):
        text, _ = clean(data) if path_reason(path) is None else (None, None)
        if text is not None and parses(text, path):
            out[path] = text
    return out


def mined_records(manifest, cache, fetch, count: Count) -> Iterator[tuple[EditRecord, bool]]:
    """(record, held out) for every package that pins a previous release."""
    for pkg in manifest.packages:
        if pkg.previous is None:
            continue
        old, new = release_files(pkg.release(pkg.previous), cache, fetch), release_files(pkg, cache, fetch)
        source = f"{pkg.name} {pkg.previous.version}->{pkg.version}"
        for path in sorted(old.keys() & new.keys()):
            if old[path] != new[path]:
                for rec in mine_pair(source, path, old[path], new[path], count):
                    yield rec, held_out(pkg.name, path)
