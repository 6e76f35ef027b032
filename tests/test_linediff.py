"""Line diffs have a bounded cost and, on ordinary edits, exactly difflib's hunks (linediff)."""

import difflib
import random
from pathlib import Path

import pytest

from diffusion_lsp.data.edits import hunks
from diffusion_lsp.evals.edit_replay import line_ops
from diffusion_lsp.nextedit.history import hunk_groups, last_change_end

LIMIT = 10_000_000  # line comparisons allowed for one diff: difflib alone needs 29M before its first answer


@pytest.fixture
def comparisons(monkeypatch):
    """Counts the line comparisons of every longest-match search difflib makes (the places in
    b[blo:bhi] of each line of a[alo:ahi]) and stops the diff past LIMIT."""
    spent = [0]
    search = difflib.SequenceMatcher.find_longest_match

    def counted(self, alo=0, ahi=None, blo=0, bhi=None):
        ahi, bhi = len(self.a) if ahi is None else ahi, len(self.b) if bhi is None else bhi
        places = {}
        for x in self.b[blo:bhi]:
            places[x] = places.get(x, 0) + 1
        spent[0] += sum(places.get(x, 0) + 1 for x in self.a[alo:ahi])
        if spent[0] > LIMIT:
            raise AssertionError(f"more than {LIMIT:,} line comparisons")
        return search(self, alo, ahi, blo, bhi)

    monkeypatch.setattr(difflib.SequenceMatcher, "find_longest_match", counted)
    return spent


def every_tenth_changed(lines):
    return [s.rstrip("\n") + " + 1\n" if i % 10 == 0 else s for i, s in enumerate(lines)]


REPEATED = {"braces": ["}\n"] * 6000, "three values": [f"x = {i % 3}\n" for i in range(6000)],
            "pass and blank": ["    pass\n" if i % 2 else "\n" for i in range(6000)]}


@pytest.mark.parametrize("name", sorted(REPEATED))
def test_thousands_of_repeated_lines_are_diffed_in_a_bounded_number_of_comparisons(comparisons, name):
    a = REPEATED[name]
    b = every_tenth_changed(a)
    groups = hunk_groups(a, b)
    assert apply(a, b, [op for g in groups for op in g if op[0] != "equal"]) == b
    assert hunks("".join(a), "".join(b)) == [[op for op in g if op[0] != "equal"] for g in groups]
    assert apply(a, b, line_ops(a, b)) == b
    assert last_change_end("".join(a), "".join(b))[0] == 5990  # the last changed line
    assert comparisons[0] <= LIMIT  # (the fixture stops a diff past it)
    from diffusion_lsp import linediff

    differ = linediff.LineMatcher(a, b)
    differ.get_opcodes()
    assert differ.fast and differ.spent <= linediff.BUDGET


def apply(a, b, changed):
    """b rebuilt from a and the changed opcodes a -> b (each an equal stretch between them)."""
    out, i = [], 0
    for _, i1, i2, j1, j2 in changed:
        out += a[i:i1] + b[j1:j2]
        i = i2
    return out + a[i:]


def realistic_edits():
    """(name, old lines, new lines): edits of a real module, stdlib difflib.py, as commits make them."""
    src = Path(difflib.__file__).read_text().splitlines(keepends=True)
    start = next(i for i, s in enumerate(src) if s.startswith("class Differ"))
    body = next(i for i, s in enumerate(src) if s.startswith("    def _qformat"))
    yield "a method inserted", src, src[:body] + ["    def helper(self):\n", "        return 1\n", "\n"] + src[body:]
    yield "a class deleted", src, src[:start] + src[body + 40:]
    yield "a name renamed on many lines", src, [s.replace("self.b", "self.seq_b") for s in src]
    yield "lines reindented", src, [("    " + s if 300 < i < 400 and s.strip() else s) for i, s in enumerate(src)]
    yield "blocks moved", src, src[:100] + src[500:600] + src[100:500] + src[600:]
    # a prefix and suffix stripped first would put this insertion a line lower than difflib does
    yield "a block inserted among blank lines", ["x\n", "\n", "y\n", "w\n"], ["x\n", "\n", "z\n", "\n", "y\n", "w\n"]


@pytest.mark.parametrize("name,a,b", list(realistic_edits()), ids=lambda v: v if isinstance(v, str) else "")
def test_ordinary_edits_get_exactly_difflibs_hunks(name, a, b):
    from diffusion_lsp import linediff

    want = [g for g in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(1)]
    assert hunk_groups(a, b) == [g for g in want if any(op[0] != "equal" for op in g)]
    assert linediff.opcodes(a, b) == difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
    differ = linediff.LineMatcher(a, b)
    differ.get_opcodes()
    assert not differ.fast and differ.spent <= linediff.BUDGET


def test_past_the_budget_the_diff_is_still_a_diff_and_keeps_unique_lines_matched():
    from diffusion_lsp import linediff

    rng = random.Random(7)
    for _ in range(300):
        a = [f"{rng.choice('abcdefg')}{rng.randint(0, 30)}\n" for _ in range(rng.randint(0, 80))]
        b = list(a)
        for _ in range(rng.randint(0, 6)):
            k = rng.randint(0, len(b))
            b[k:k + rng.randint(0, 3)] = [f"{rng.choice('xyz')}{rng.randint(0, 9)}\n" for _ in range(rng.randint(0, 3))]
        differ = linediff.LineMatcher(a, b, budget=0)
        ops = differ.get_opcodes()
        assert apply(a, b, [op for op in ops if op[0] != "equal"]) == b
        assert all(a[i1:i2] == b[j1:j2] for tag, i1, i2, j1, j2 in ops if tag == "equal")
    lines = [f"line {i}\n" for i in range(1000)]
    forced = linediff.LineMatcher(lines, lines[:500] + ["new\n"] + lines[500:], budget=0)
    assert forced.get_opcodes() == [("equal", 0, 500, 0, 500), ("insert", 500, 500, 500, 501),
                                    ("equal", 500, 1000, 501, 1001)]
    assert forced.fast


def test_a_file_of_many_alike_methods_keeps_each_change_its_own_hunk(comparisons):
    a = ["class A:\n"] + ["    def f(self):\n", "        pass\n", "\n"] * 2000
    b = list(a)
    b[101], b[4001] = "        return 1\n", "        return 2\n"
    b.insert(5000, "    # note\n")
    assert [[op for op in g if op[0] != "equal"] for g in hunk_groups(a, b)] == [
        [("replace", 101, 102, 101, 102)], [("replace", 4001, 4002, 4001, 4002)], [("insert", 5000, 5000, 5000, 5001)]]
    assert comparisons[0] <= LIMIT
