"""Next edits judged against the rest of real commits: the material `calibrate --edits` fits the
next-edit acceptance model on, and `eval edits` reports.

A repository's recent commits (data/git_history.py) are replayed as a user makes them: each hunk
of a file's diff is one change, and a hunk that replaces lines one for one is made a line at a time
(a rename over three lines is typed on the first, and the next two are the next edit). After the
first k changes, with the cursor where the k-th ended, every candidate the server weighs is made
(acceptance/edits.py: the change's own sites, repeat-the-last-edit, the model's edit) and judged
against what the commit still has to do, not against its next hunk: a candidate is right when the
lines it touches read, after it, as the commit has them (those lines widened to every line the
commit changes that they touch). A commit-order label would call a right rest-of-rename wrong
whenever the commit's next hunk lies elsewhere.

Fit on repositories that no figure you report uses: the ones you calibrate on are tuning data."""

from __future__ import annotations

import dataclasses
import difflib
import sys
import random
from dataclasses import dataclass

from ..acceptance.edits import edit_features
from ..candidate import Candidate, Request, Source
from ..context.languages import language_for
from ..context.repo import repo_files
from ..data.edits import apply_hunks, hunks
from ..data.git_history import file_pairs
from ..linediff import opcodes
from ..nextedit.edits import minimal_edit
from ..nextedit.follow import follow
from ..nextedit.history import last_change_end, steps_between
from ..nextedit.repeat import offset_of, repeat_last_edit
from ..nextedit.unfinished import unfinished
from . import saved_rows

MAX_CHANGES = 40  # a file changed in more places was refactored wholesale: not a next edit
PER_COMMIT = 3  # cases from one commit's file, spread over its changes
PAIRED = 40_000  # lines of a replaced block paired by similarity up to 200 x 200: Differ is quadratic


@dataclass(frozen=True)
class EditCase:
    id: str  # commit:path#k
    repo: str
    path: str
    old: str  # the file before the commit
    current: str  # after its first k changes
    target: str  # after the commit
    cursor: tuple[int, int]  # 0-based (line, column) where the k-th change ended
    k: int = 0  # changes made (changes(old, target)[:k])

    @property
    def offset(self) -> int:
        return offset_of(self.current, self.cursor)


def changes(old: str, new: str) -> list[list[tuple]]:
    """old -> new as a user makes it: each hunk's opcodes, a one-for-one replacement line by line."""
    out = []
    for group in hunks(old, new):
        for tag, i1, i2, j1, j2 in group:
            if tag == "replace" and i2 - i1 == j2 - j1:
                out += [[(tag, i1 + k, i1 + k + 1, j1 + k, j1 + k + 1)] for k in range(i2 - i1)]
            else:
                out.append([(tag, i1, i2, j1, j2)])
    return out


def replay_cases(root: str, n: int, seed: int = 0) -> list[EditCase]:
    """Up to n cases from the recent commits of the repository at `root` (a git work tree), drawn
    at random with `seed`."""
    files, _ = repo_files(root)
    name = root.rstrip("/").rsplit("/", 1)[-1]
    out = []
    for pair in file_pairs(root, {f.path for f in files}):
        if language_for(None, pair.path) is None:
            continue
        steps = changes(pair.old, pair.new)
        if not 2 <= len(steps) <= MAX_CHANGES:
            continue
        rng = random.Random(f"{seed}:{pair.commit}:{pair.path}")
        for k in sorted(rng.sample(range(1, len(steps)), min(PER_COMMIT, len(steps) - 1))):
            current = apply_hunks(pair.old, pair.new, steps, k)
            cursor = last_change_end(pair.old, current)
            if cursor is not None and current != pair.new:
                out.append(EditCase(f"{pair.commit[:12]}:{pair.path}#{k}", name, pair.path, pair.old, current,
                                    pair.new, cursor, k))
    if len(out) > n:
        out = random.Random(seed).sample(out, n)
    return sorted(out, key=lambda c: c.id)


def code_offers(path: str, old: str, current: str, cursor: tuple[int, int]) -> list[Candidate]:
    """The candidates that need no model, after the edits old -> current with the cursor at `cursor`
    (0-based line, column): the change's own next sites, repeat-the-last-edit."""
    spec, out, steps = language_for(None, path), [], steps_between(path, old, current)
    found = None if spec is None else follow(current, spec, steps, offset_of(current, cursor))
    if found is not None:
        out.append(found)
    if steps and unfinished(steps[-1], current, spec):  # as the server: a line half typed is not repeated
        return out
    repeated = repeat_last_edit(old, current, cursor)
    if repeated is not None and (e := minimal_edit(current, repeated, Source.REPEAT)) is not None:
        out.append(e)
    return out


def right(doc: str, offer: Candidate, target: str) -> bool:
    """Whether the lines `offer` touches read, after it, as in `target`: those lines, widened to
    every changed line of doc -> target that they overlap, compared whole."""
    a, t = doc.splitlines(keepends=True), target.splitlines(keepends=True)
    first = doc.count("\n", 0, offer.start)
    at_line = offer.start == offer.end and doc.rfind("\n", 0, offer.start) + 1 == offer.start
    last = first - 1 if at_line and offer.text.endswith("\n") else doc.count("\n", 0, max(offer.start, offer.end - 1))
    lo, hi = first, last + 1  # lines inserted before `first`: no line is touched, lo == hi
    ops = line_ops(a, t)
    grown = True
    while grown:
        grown = False
        for _, i1, i2, _, _ in ops:
            touches = (i1 < hi and i2 > lo) if i1 < i2 else (lo < i1 < hi or lo == hi == i1)
            if touches and (i1 < lo or i2 > hi):
                lo, hi, grown = min(lo, i1), max(hi, i2), True
    edited = offer.apply(doc)
    start, end_old = sum(map(len, a[:first])), sum(map(len, a[:last + 1]))
    mine = "".join(a[lo:first]) + edited[start:end_old + len(edited) - len(doc)] + "".join(a[last + 1:hi])
    empty = lo == hi  # what is inserted there: from before to after the lines inserted at lo
    return mine == "".join(t[_mapped(ops, lo, len(t), not empty):_mapped(ops, hi, len(t), empty)])


def line_ops(a: list[str], t: list[str]) -> list[tuple]:
    """The changed opcodes of lines a -> t, a replaced block paired line by line where a line was
    changed rather than replaced (difflib.Differ's pairing of similar lines, quadratic in the
    block: a block of more than PAIRED pairs of lines stays one replaced block)."""
    out = []
    for tag, i1, i2, j1, j2 in opcodes(a, t):
        if tag != "replace" or (i2 - i1) * (j2 - j1) > PAIRED:
            out += [] if tag == "equal" else [(tag, i1, i2, j1, j2)]
            continue
        codes = [line[:2] for line in difflib.Differ().compare(a[i1:i2], t[j1:j2]) if not line.startswith("? ")]
        i, j, k = i1, j1, 0
        while k < len(codes):
            if codes[k] == "  ":
                i, j, k = i + 1, j + 1, k + 1
            elif codes[k] == "- " and codes[k + 1:k + 2] == ["+ "]:
                out.append(("replace", i, i + 1, j, j + 1))
                i, j, k = i + 1, j + 1, k + 2
            elif codes[k] == "- ":
                out.append(("delete", i, i + 1, j, j))
                i, k = i + 1, k + 1
            else:
                out.append(("insert", i, i, j, j + 1))
                j, k = j + 1, k + 1
    return out


def _mapped(ops: list[tuple], x: int, n_t: int, low: bool) -> int:
    """Line x of doc as a line of target (`low`: after any lines inserted at x; else before them).
    `ops`: doc -> target's changed opcodes."""
    shift = 0
    for _, i1, i2, j1, j2 in ops:
        if i2 < x or (i2 == x and (i1 < i2 or low)):
            shift = j2 - i2
        elif i1 <= x < i2:  # at an op's start (one the widening left out), or, never after it, within
            return j1 if x == i1 else j2
        else:
            break
    return min(x + shift, n_t)


@dataclass
class JudgedEdit:
    """One case's candidates, their features and labels."""

    case_id: str
    repo: str
    offers: list[Candidate]
    feats: list[dict]
    right: list[bool]

    def to_json(self) -> dict:
        return {"id": self.case_id, "repo": self.repo, "right": self.right, "feats": self.feats,
                "offers": [[o.source.value, o.start, o.end, o.text, o.confidence] for o in self.offers]}

    @classmethod
    def from_json(cls, raw: dict) -> JudgedEdit:
        """ValueError saying which field is wrong (the saved_rows checks)."""
        offers = saved_rows.listed(raw, "offers")
        n = len(offers)
        return cls(saved_rows.text(raw, "id"), saved_rows.text(raw, "repo"), [_offer(o) for o in offers],
                   saved_rows.features(raw, n), saved_rows.flags(raw, "right", n))


def _offer(o) -> Candidate:
    """An offer saved as [source, start, end, text, conf], its source one of Request.EDIT's."""
    if not (isinstance(o, list) and len(o) == 5 and isinstance(o[0], str) and isinstance(o[3], str)
            and all(isinstance(x, int) and not isinstance(x, bool) and 0 <= x for x in o[1:3]) and o[1] <= o[2]):
        raise ValueError("each offer must be [source, start, end, text, conf] with 0 <= start <= end")
    source = next((s for s in Request.EDIT.sources if s.value == o[0]), None)
    if source is None:
        raise ValueError(f"an offer's source must be one of {', '.join(s.value for s in Request.EDIT.sources)}, "
                         f"not {o[0][:40]!r}")
    return Candidate(o[1], o[2], o[3], source,
                     confidence=None if o[4] is None else saved_rows.number(o[4], "an offer's conf"))


def judged(case: EditCase, offers: list[Candidate]) -> JudgedEdit:
    steps = len(steps_between(case.path, case.old, case.current))
    feats = [edit_features(o, case.current, case.offset, steps, [x for x in offers if x is not o]) for o in offers]
    return JudgedEdit(case.id, case.repo, offers, feats, [right(case.current, o, case.target) for o in offers])


async def model_offer(backend, case: EditCase, count, settings) -> Candidate | None:
    """The next-edit pipeline's edit at the case (predict_file, as `eval nep` asks it, at
    `settings` with follow off: the change's sites are code_offers'), or None (also when the
    backend refuses it: a region that does not fit the model, as the language server answers)."""
    from ..nextedit.run import predict_file  # the model's libraries: only here
    from ..protocol.failure import BackendError

    try:
        out = (await predict_file(backend, case.path, case.old, case.current, case.cursor,
                                  language_for(None, case.path), count, dataclasses.replace(settings, follow=False)))
    except BackendError:
        return None
    e = out.outcome.edit  # the model's, or a draft it preferred
    return None if e is None else dataclasses.replace(e, confidence=round(e.confidence, 4))


async def judge_cases(cases: list[EditCase], backend=None, count=None, settings=None,
                      progress: bool = False) -> list[JudgedEdit]:
    """Every case's candidates (the model's too when `backend` is given), judged."""
    from tqdm import tqdm  # kept off --help

    out = []
    for case in tqdm(cases, desc="next edits", unit="case", disable=not progress, file=sys.stderr):
        offers = code_offers(case.path, case.old, case.current, case.cursor)
        if backend is not None and (got := await model_offer(backend, case, count, settings)) is not None:
            offers.append(got)
        out.append(judged(case, offers))
    return out
