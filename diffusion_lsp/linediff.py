"""Line diffs with a bounded cost: the one line differ of the package (history hunks, mined edits,
replayed commits, next-edit rules).

difflib's SequenceMatcher (autojunk=False, so the hunks do not depend on a file's length) gives the
diffs every measured figure was made with, but its cost grows with the product of the counts of
each repeated line: 2,000 lines of 3 repeated values took 9.8 s, 5,000 took 159 s, 6,000 lines of
`}` 8.6 s. So difflib runs under a budget of comparisons (`BUDGET`, counted before each longest-match
search as an upper bound of its inner loop); an ordinary edit stays far below it and gets exactly
difflib's answer. Past the budget the pair is diffed in near-linear time instead: the common prefix
and suffix lines are stripped, the middle is split at lines that occur once on each side
(patience diff, Bram Cohen), and each gap between anchors is diffed again the same way, with
difflib on a gap whose cost fits the budget left; a gap with no such line by Myers' O((N+M)D)
algorithm while its edits are few enough for that budget, else it stays one replaced block."""

from __future__ import annotations

import bisect
import difflib
import logging
from collections import Counter

BUDGET = 4_000_000  # difflib inner-loop steps per pair: 0.4-1.3 s; typing.py 3.12 -> 3.13 takes 2.0M (0.2 s)
DEPTH = 12  # patience levels at most: every level costs one pass over its gaps
log = logging.getLogger(__name__)


class _OverBudget(Exception):
    pass


class LineMatcher(difflib.SequenceMatcher):
    """difflib's SequenceMatcher over lines, its matching blocks found under a budget of
    comparisons; `fast` tells whether the budget ran out (and the near-linear path gave them)."""

    def __init__(self, a: list[str], b: list[str], budget: int = BUDGET):
        super().__init__(None, a, b, autojunk=False)
        self._at: dict[str, list[int]] = {}  # line -> where it stands in b, ascending
        for j, x in enumerate(b):
            self._at.setdefault(x, []).append(j)
        self.budget, self.spent, self.fast, self._blocks = budget, 0, False, None

    def find_longest_match(self, alo=0, ahi=None, blo=0, bhi=None):
        ahi, bhi = len(self.a) if ahi is None else ahi, len(self.b) if bhi is None else bhi
        at = self._at  # difflib's inner loop visits the places of a[i] in b up to bhi, one more to stop
        cost = sum(bisect.bisect_left(at.get(x, ()), bhi) + 1 for x in self.a[alo:ahi])
        if self.spent + cost > self.budget:
            raise _OverBudget
        self.spent += cost
        return super().find_longest_match(alo, ahi, blo, bhi)

    def exact(self) -> list:
        """difflib's own matching blocks; _OverBudget past the budget."""
        return super().get_matching_blocks()

    def get_matching_blocks(self):
        if self._blocks is None:
            try:
                self._blocks = self.exact()
            except _OverBudget:
                self.fast = True
                left = [self.budget]  # the budget again, shared by every gap's difflib
                found = _merged(_patience(self.a, self.b, 0, len(self.a), 0, len(self.b), DEPTH, left))
                self._blocks = [difflib.Match(*m) for m in found] + [difflib.Match(len(self.a), len(self.b), 0)]
                log.info("line diff of %d -> %d lines past its budget: diffed by unique lines instead",
                         len(self.a), len(self.b))
        return self._blocks


def opcodes(a: list[str], b: list[str]) -> list[tuple]:
    """difflib's opcodes of lines a -> b, at a bounded cost (see the module docstring)."""
    return LineMatcher(a, b).get_opcodes()


def grouped_opcodes(a: list[str], b: list[str], context: int) -> list[list[tuple]]:
    """difflib's grouped opcodes of lines a -> b (`context` equal lines around each change)."""
    return list(LineMatcher(a, b).get_grouped_opcodes(context))


def _patience(a, b, alo, ahi, blo, bhi, depth, left) -> list[tuple[int, int, int]]:
    """Matching blocks (i, j, size) of a[alo:ahi] -> b[blo:bhi]: common prefix and suffix, then
    the longest increasing run of lines unique on both sides as anchors, each gap the same way."""
    pre = 0
    while alo + pre < ahi and blo + pre < bhi and a[alo + pre] == b[blo + pre]:
        pre += 1
    suf = 0
    while ahi - suf > alo + pre and bhi - suf > blo + pre and a[ahi - suf - 1] == b[bhi - suf - 1]:
        suf += 1
    head = [(alo, blo, pre)] if pre else []
    tail = [(ahi - suf, bhi - suf, suf)] if suf else []
    alo, blo, ahi, bhi = alo + pre, blo + pre, ahi - suf, bhi - suf
    if alo == ahi or blo == bhi:
        return head + tail
    return head + _middle(a, b, alo, ahi, blo, bhi, depth, left) + tail


def _middle(a, b, alo, ahi, blo, bhi, depth, left) -> list[tuple[int, int, int]]:
    """Matching blocks of a middle with no common first or last line: difflib's when they fit in
    the budget `left` ([steps]), else split at anchors; a gap with none is diffed by Myers'
    algorithm while its edits are few, else it is one replaced block."""
    gap = LineMatcher(a[alo:ahi], b[blo:bhi], budget=left[0])
    try:
        return [(alo + i, blo + j, n) for i, j, n in gap.exact()]
    except _OverBudget:
        pass
    finally:
        left[0] = max(0, left[0] - gap.spent)
    anchors = _anchors(a, b, alo, ahi, blo, bhi) if depth > 0 else []
    if not anchors:
        return _myers(a, b, alo, ahi, blo, bhi, left)
    out, i, j = [], alo, blo
    for x, y in anchors:
        out += _patience(a, b, i, x, j, y, depth - 1, left) if i < x and j < y else []
        out.append((x, y, 1))
        i, j = x + 1, y + 1
    return out + (_patience(a, b, i, ahi, j, bhi, depth - 1, left) if i < ahi and j < bhi else [])


def _myers(a, b, alo, ahi, blo, bhi, left) -> list[tuple[int, int, int]]:
    """Matching blocks of a shortest edit script of a[alo:ahi] -> b[blo:bhi] (Myers 1986, "An O(ND)
    difference algorithm"), O((N + M) D): tried for at most as many edits D as the budget left
    allows, so a repetitive gap with a few changes (a file of many alike methods) keeps its hunks."""
    n, m = ahi - alo, bhi - blo
    most = min(n + m, left[0] // max(1, n + m))
    v, trace = {1: 0}, []  # v[k]: the furthest x on diagonal k = x - y
    for d in range(most + 1):
        trace.append(dict(v))
        for k in range(-d, d + 1, 2):
            x = v[k + 1] if k == -d or (k != d and v[k - 1] < v[k + 1]) else v[k - 1] + 1
            y = x - k
            while x < n and y < m and a[alo + x] == b[blo + y]:
                x, y = x + 1, y + 1
            v[k] = x
            if x >= n and y >= m:
                left[0] = max(0, left[0] - (d + 1) * (n + m))
                return [(alo + i, blo + j, size) for i, j, size in _path(trace, n, m)]
    left[0] = max(0, left[0] - (most + 1) * (n + m))
    return []


def _path(trace: list[dict], x: int, y: int) -> list[tuple[int, int, int]]:
    """The diagonal runs (i, j, size) of the path Myers' search ended at (x, y), walked back."""
    out = []
    for d in range(len(trace) - 1, 0, -1):
        v, k = trace[d], x - y
        down = k == -d or (k != d and v[k - 1] < v[k + 1])
        px = v[k + 1] if down else v[k - 1]
        py = px - (k + 1 if down else k - 1)
        mx, my = (px, py + 1) if down else (px + 1, py)
        if x > mx:
            out.append((mx, my, x - mx))
        x, y = px, py
    if x > 0:
        out.append((0, 0, x))
    return out[::-1]


def _anchors(a, b, alo, ahi, blo, bhi) -> list[tuple[int, int]]:
    """(i, j) of the lines that occur once in a[alo:ahi] and once in b[blo:bhi], the longest run
    of them in the same order on both sides (patience sorting, O(n log n))."""
    ca, cb = Counter(a[alo:ahi]), Counter(b[blo:bhi])
    at_b = {b[j]: j for j in range(blo, bhi) if cb[b[j]] == 1}
    pairs = [(i, at_b[a[i]]) for i in range(alo, ahi) if ca[a[i]] == 1 and a[i] in at_b]
    tops, links, back = [], [], []  # tops: the smallest j ending a run of each length
    for k, (_, j) in enumerate(pairs):
        n = bisect.bisect_left(tops, j)
        tops[n:n + 1] = [j]
        links[n:n + 1] = [k]
        back.append(links[n - 1] if n else -1)
    run, k = [], links[-1] if links else -1
    while k >= 0:
        run.append(pairs[k])
        k = back[k]
    return run[::-1]


def _merged(blocks: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """Adjacent blocks joined, as difflib gives them."""
    out = []
    for i, j, n in sorted(blocks):
        if out and out[-1][0] + out[-1][2] == i and out[-1][1] + out[-1][2] == j:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + n)
        elif n:
            out.append((i, j, n))
    return out
