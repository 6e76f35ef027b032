"""Next-edit records (data/edits.py): hunks of two releases -> records, synthetic edits, the manifest's
pinned previous releases. No network: archives are made here."""

from __future__ import annotations

import hashlib
import json
import random
import zipfile

import pytest

from diffusion_lsp.context.tokens import approx_tokens
from diffusion_lsp.data import edits, synthetic_edits
from diffusion_lsp.data.manifest import load_manifest, parse_manifest
from diffusion_lsp.nextedit.history import diffs_between

OLD = "".join(f"def f{i}(x):\n    return x + {i}\n\n\n" for i in range(12))


def _new(changes: dict[int, str]) -> str:
    lines = OLD.splitlines(keepends=True)
    for i, line in changes.items():
        lines[i] = line
    return "".join(lines)


def _whole(rec: edits.EditRecord) -> str:
    return rec.before + rec.old_region + rec.after


def test_hunks_apply_one_at_a_time_like_diffs_between():
    new = _new({1: "    return x - 1\n", 9: "    return x * 2\n", 25: "    return -x\n"})
    groups = edits.hunks(OLD, new)
    assert len(groups) == 3 == len(diffs_between("m.py", OLD, new))
    assert edits.apply_hunks(OLD, new, groups, 0) == OLD and edits.apply_hunks(OLD, new, groups, 3) == new
    one = edits.apply_hunks(OLD, new, groups, 1)
    assert "x - 1" in one and "x * 2" not in one and "-x\n" not in one


def test_mined_rows_have_the_history_so_far_and_the_next_hunk_as_target():
    new = _new({1: "    return x - 1\n", 5: "    return x - 1\n", 25: "    return x - 1\n"})
    recs = list(edits.mine_pair("pkg 1->2", "m.py", OLD, new, approx_tokens))
    first = recs[0]
    # after hunk 1 the cursor is on line 1; hunk 2 (line 5) is inside the region: an edit row
    assert first.kind == "mined" and len(first.diffs) == 1 and "+    return x - 1" in first.diffs[0]
    assert _whole(first) == edits.apply_hunks(OLD, new, edits.hunks(OLD, new), 1)
    assert first.new_region.count("x - 1") == 2 and first.old_region.count("x - 1") == 1
    # after hunk 2 the next hunk (line 25) is outside the region: no edit; the last hunk has none after it
    assert [r.kind for r in recs[1:]] == ["no_edit", "no_edit"]
    assert all(r.new_region == r.old_region for r in recs[1:]) and len(recs[2].diffs) == 3


def test_one_hunk_gives_no_rows_and_huge_hunks_are_neither_history_nor_target():
    assert list(edits.mine_pair("p", "m.py", OLD, _new({1: "    return 0\n"}), approx_tokens)) == []
    big = _new({1: "    return 0\n"}).replace("def f1(x):\n", "def f1(x):\n" + "    y = 1\n" * 40)
    recs = list(edits.mine_pair("p", "m.py", OLD, big, approx_tokens))
    assert [r.kind for r in recs] == ["no_edit"] and "y = 1" not in "".join(recs[0].diffs) + recs[0].new_region


def test_no_edit_rows_are_capped():
    def mk(kind, i):
        return edits.EditRecord(kind, "s", f"{i}.py", [], "", "", "a", "a" if kind == "no_edit" else "b")

    recs = [mk("mined", i) for i in range(8)] + [mk("no_edit", i) for i in range(10)]
    kept = edits.cap_no_edit(recs, share=0.2)
    assert sum(r.kind == "no_edit" for r in kept) == 2 and sum(r.kind == "mined" for r in kept) == 8


SOURCE = '''import os


def load(path, mode):
    handle = open(path, mode)
    data = handle.read()
    handle.close()
    return data


def run(a, b):
    x = load(a, "r")
    y = load(b, "r")
    return x, y
'''


def test_synthetic_rename_changes_the_remaining_uses_in_the_region():
    data = SOURCE.encode()
    spans = [(m, m + len(b"handle")) for m in range(len(data)) if data.startswith(b"handle", m)]
    rec = synthetic_edits._repeat_record("rename", "t", "m.py", data, spans, b"fh", 1, approx_tokens)
    assert rec.kind == "rename" and len(rec.diffs) == 1 and "+    fh = open(path, mode)" in rec.diffs[0]
    assert rec.old_region.count("handle") == 2 and "handle" not in rec.new_region and rec.new_region.count("fh") == 3
    assert _whole(rec) == SOURCE.replace("handle = open", "fh = open")


def test_synthetic_param_updates_the_other_calls():
    recs = [r for seed in range(20) for r in synthetic_edits.synthesize("t", "m.py", SOURCE, approx_tokens, random.Random(seed))
            if r.kind == "param"]
    assert recs
    rec = recs[0]
    (new,) = {line.split(", ")[-1].rstrip("):\n") for line in rec.diffs[0].splitlines() if line.startswith("+def load")}
    assert rec.new_region.count(f", {new})") == 2 and rec.old_region.count(f", {new})") == 1
    for r in synthetic_edits.synthesize("t", "m.py", SOURCE, approx_tokens, random.Random(3), per_file=10):
        assert r.new_region != r.old_region and r.diffs and compile(r.before + r.new_region + r.after, "m", "exec")


def _wheel(folder, name, version, files, license="MIT"):
    path = folder / f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name}-{version}.dist-info/METADATA",
                   f"Metadata-Version: 2.4\nName: {name}\nVersion: {version}\nLicense-Expression: {license}\n\n")
        for rel, text in files.items():
            z.writestr(rel, text)
    return path, hashlib.sha256(path.read_bytes()).hexdigest()


def _manifest(entry: dict) -> dict:
    val = dict(name="valpkg", version="1", license="MIT", file="valpkg-1-py3-none-any.whl", sha256="0" * 64,
               split="val")
    return {"format": 1, "stdlib": None, "packages": [entry, val]}


def test_previous_release_is_validated():
    base = dict(name="toolz", version="2.0", license="MIT", file="toolz-2.0-py3-none-any.whl", sha256="a" * 64)
    prev = dict(version="1.0", file="toolz-1.0-py3-none-any.whl", sha256="b" * 64)
    m = parse_manifest(_manifest({**base, "previous": prev}))
    pkg = m.packages[0]
    assert pkg.previous.version == "1.0" and pkg.release(pkg.previous).file == prev["file"]
    bad = [({**prev, "sha256": "xyz"}, "sha256"), ({**prev, "version": "2.0"}, "differ"),
           ({**prev, "extra": 1}, "unknown keys"), ({"version": "1.0"}, "previous")]
    for p, why in bad:
        with pytest.raises(ValueError, match=why):
            parse_manifest(_manifest({**base, "previous": p}))
    with pytest.raises(ValueError, match="only train"):
        parse_manifest(_manifest({**base, "split": "val", "previous": prev}))


def test_shipped_manifest_pins_previous_releases_of_train_packages_only():
    m = load_manifest()
    with_prev = [p for p in m.packages if p.previous is not None]
    assert len(with_prev) >= 10 and all(p.split == "train" for p in with_prev)


def test_mined_records_read_both_pinned_releases(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    new = _new({1: "    return x - 1\n", 5: "    return x - 1\n"})
    old_path, old_sha = _wheel(cache, "toy", "1.0", {"toy/m.py": OLD, "toy/same.py": "x = 1\n"})
    new_path, new_sha = _wheel(cache, "toy", "2.0", {"toy/m.py": new, "toy/same.py": "x = 1\n"})
    entry = dict(name="toy", version="2.0", license="MIT", file=new_path.name, sha256=new_sha,
                 previous=dict(version="1.0", file=old_path.name, sha256=old_sha))
    manifest = parse_manifest(_manifest(entry))
    fetch = lambda pkg, c: c / pkg.file  # noqa: E731  (already in the cache)
    recs = [r for r, _ in edits.mined_records(manifest, cache, fetch, approx_tokens)]
    assert [r.kind for r in recs] == ["mined", "no_edit"] and {r.source for r in recs} == {"toy 1.0->2.0"}
    assert json.loads(recs[0].to_json())["path"] == "toy/m.py"
    bad = dict(entry, previous=dict(entry["previous"], sha256="c" * 64))
    with pytest.raises(RuntimeError, match="sha256"):
        list(edits.mined_records(parse_manifest(_manifest(bad)), cache, fetch, approx_tokens))


def test_synthetic_literals_skip_escapes_and_stay_valid_python():
    src = 'def show(rows):\n    print("a\\n", "name")\n    print("a\\n", "name")\n    return 1024 + 1024\n'
    recs = [r for seed in range(30) for r in synthetic_edits.synthesize("t", "m.py", src, approx_tokens, random.Random(seed))
            if r.kind == "literal"]
    assert recs and all("a\\n" in r.new_region for r in recs)  # the escaped string is never the changed one
    for r in recs:
        compile(r.before + r.new_region + r.after, "m.py", "exec")
