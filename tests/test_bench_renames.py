"""`bench renames`: its oracle for an added parameter (bench/signatures.py) judges calls as Python
binds them, whatever their layout, and fails a wrong or missing argument; the bench itself runs
through the real server."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import symtable

import pytest

from diffusion_lsp.bench import signatures

SOURCE = '''def area(w, h, unit="m"):
    return w * h


def scaled(area):
    return area(2)  # a parameter: not a call of the def


print(area(3, 4), area(w=1, h=2))
'''


def test_the_added_parameter_is_typed_before_the_first_default_and_its_calls_are_counted():
    (target,) = signatures.targets(SOURCE, ast.parse(SOURCE), symtable.symtable(SOURCE, "<f>", "exec"))
    assert (target.name, target.line, target.col, target.insert, target.calls) == ("area", 0, 15, "extra_2, ", 2)


@pytest.mark.parametrize("calls, done, right", [
    ("area(3, 4)", False, True),  # not yet: nothing wrong either
    ("area(3, 4, extra_2)", True, True),
    ("area(3, 4,\n     extra_2)", True, True),  # another layout: the same binding
    ("area(3, extra_2, 4)", False, False),  # binds h to extra_2
    ("area(3, 4, extra_2=extra_2)", True, True),
    ("area(3, 4, 0)", False, False),  # another value
])
def test_a_call_is_right_when_python_binds_it_as_before_plus_the_new_parameter(calls, done, right):
    before = 'def area(w, h, extra_2, unit="m"):\n    return w * h\n\nprint(area(3, 4))\n'
    target = signatures.Added("area", 0, 15, "extra_2, ", False, 1)
    assert signatures.judge(before, before.replace("print(area(3, 4))", f"print({calls})"), target) == (done, right)
    assert signatures.judge(before, before.replace("w * h", "w * h + 1"), target) == (False, False)  # not a call
    assert signatures.judge(before, before.replace("extra_2, ", ""), target) == (False, False)  # the parameter undone


@pytest.mark.slow
def test_the_bench_finishes_renames_and_added_parameters_through_the_server(tmp_path):
    path = tmp_path / "shapes.py"
    path.write_text(SOURCE + "\n\ndef total(xs):\n    acc = 0\n    for x in xs:\n        acc += area(x, x)\n    return acc\n")
    out = subprocess.run([sys.executable, "-m", "diffusion_lsp", "bench", "renames", str(path), "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["rows"]
    assert rows["argument"] == {**rows["argument"], "renames": 1, "sites": 4, "done": 1.0}  # area's def and 3 calls
    assert rows["local"]["done"] == 1.0 and rows["all"]["wrong_shown"] == 0


WIDE = '''class Box:
    def __init__(self, n):
        self.size = n

    def grow(self, delta):
        """Grow it by `delta`."""
        label = '😀😀'; total = self.size + delta
        print('é€', label, total, self.size)
        try:
            pass
        except ValueError as err:
            print('😀', err, err)
        return total


def draw(box, scale=1):
    return box


print('😀😀', draw(Box(1), scale=2), draw(Box(2)))
'''


def test_sites_after_non_ascii_text_are_character_columns_so_a_right_rename_is_judged_right():
    """ast's col_offset counts UTF-8 bytes: after '😀😀' on a line, a site taken as a character column
    lands 12 characters too far right, and the expected text, built from it, is wrong."""
    import random

    from diffusion_lsp.bench.renames import targets

    found = {(t.kind, t.name): t for t in targets(WIDE, random.Random(0), 20)}
    assert {("local", "total"), ("local", "label"), ("local", "err"), ("parameter", "delta"), ("parameter", "scale"),
            ("attribute", "size"), ("argument", "draw")} <= set(found)
    for (kind, name), t in found.items():
        if name == "self":
            continue  # a local of each method
        if kind == "argument":
            line = WIDE.split("\n")[t.line]
            assert line[t.col:].startswith(("scale", ")")), (line, t.col)  # typed before the default
            continue
        lines = WIDE.split("\n")
        assert all(lines[row][col:col + len(name)] == name for row, col in t.sites), (name, t.sites)
        renamed = t.renamed(WIDE, name + "_2")
        assert renamed == _renamed_by_python(WIDE, name, name + "_2"), name  # the right edit, as a user makes it


def _renamed_by_python(text: str, old: str, new: str) -> str:
    """Every whole-word `old` renamed (WIDE names each renamed name nowhere else)."""
    import re

    return re.sub(rf"(?<![\w.]){old}\b" if old != "size" else rf"(?<=self\.){old}\b", new, text)
