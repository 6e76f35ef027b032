"""Next-edit prediction scores, as the benchmark defines them (Lu et al. 2025, arXiv 2508.10074),
and the rates this project adds beside them.

Copied from the benchmark's own scorer, lurf21/NextEditPrediction `evaluate/evaluate.py` @ 2c08fba
(`split_diff_into_chunks`, `is_empty_line_modification`, `partial_match`, `position_match` and the
exact-match test in `main`), with `current_contents` as the original and `new_contents` as the
reference:

- chunks(a, b): `difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm='')` (3 context lines),
  cut at every `@@` line into hunks, each hunk a list of lines that starts with its `@@ -l,n +l,n @@`
  header (so line numbers are part of a hunk); hunks whose every `+`/`-` line is blank after
  `.strip()` are dropped.
- exact match: predicted == new, the whole file as a string.
- partial match: the reference's first hunk, header included, is one of the predicted hunks
  (list equality: same lines, same context, same line numbers).
- position match: the context lines (those starting with a space) of the reference's first hunk
  are the context lines of one of the predicted hunks.

One extension: when the reference has no hunk (no edit is right, or only blank lines change) the
scorer raises IndexError; here partial and position match then hold when the prediction has no hunk
either. Every nep_test record has exactly one reference hunk, so no benchmark figure changes.

Added: edit rate (share of records where the prediction differs from the current file), wrong-edit
rate (among those, the share without a partial match), noise rate (among records where
current == new, the share where an edit was suggested; None when the file has no such record)."""

from __future__ import annotations

import difflib
import statistics
from dataclasses import dataclass


def chunks(original: str, modified: str) -> list[list[str]]:
    """The unified-diff hunks of original -> modified, blank-line-only hunks dropped."""
    diff = list(difflib.unified_diff(original.splitlines(), modified.splitlines(), lineterm=""))
    starts = [i for i, line in enumerate(diff) if line.startswith("@@")]
    hunks = [diff[a:b] for a, b in zip(starts, starts[1:] + [len(diff)])]
    return [h for h in hunks if not _blank_only(h)]


def _blank_only(hunk: list[str]) -> bool:
    return all(line[1:].strip() == "" for line in hunk if line.startswith(("+", "-")))


def _context(hunk: list[str]) -> list[str]:
    return [line for line in hunk if line.startswith(" ")]


def partial_match(current: str, new: str, predicted: str) -> bool:
    ref, got = chunks(current, new), chunks(current, predicted)
    return ref[0] in got if ref else not got


def position_match(current: str, new: str, predicted: str) -> bool:
    ref, got = chunks(current, new), chunks(current, predicted)
    return _context(ref[0]) in [_context(h) for h in got] if ref else not got


@dataclass(frozen=True)
class Score:
    """One record's scores for one predictor."""
    exact: bool
    partial: bool
    position: bool
    edited: bool  # the prediction differs from the current file
    needs_edit: bool  # current != new
    ms: float
    forwards: int | None = None


def score(current: str, new: str, predicted: str | None, ms: float = 0.0, forwards: int | None = None) -> Score:
    """`predicted`: the whole file after the suggested edit; None means no edit."""
    p = current if predicted is None else predicted
    return Score(p == new, partial_match(current, new, p), position_match(current, new, p), p != current,
                 current != new, ms, forwards)


def _share(flags: list[bool]) -> float | None:
    return sum(flags) / len(flags) if flags else None


def summarize(name: str, scores: list[Score], languages: list[str] | None = None) -> dict:
    """The table row: shares in [0, 1] (None where nothing was counted), p50 time, mean forwards,
    and partial match per language when `languages` (one label per score) is given."""
    edited = [s for s in scores if s.edited]
    no_edit_right = [s for s in scores if not s.needs_edit]
    fwd = [s.forwards for s in scores if s.forwards is not None]
    row = {
        "name": name, "n": len(scores),
        "exact": _share([s.exact for s in scores]),
        "partial": _share([s.partial for s in scores]),
        "position": _share([s.position for s in scores]),
        "edit_rate": _share([s.edited for s in scores]),
        "wrong_edit_rate": _share([not s.partial for s in edited]),
        "noise_rate": _share([s.edited for s in no_edit_right]),
        "no_edit_records": len(no_edit_right),
        "p50_ms": statistics.median(s.ms for s in scores) if scores else None,
        "forwards": sum(fwd) / len(fwd) if fwd else None,
    }
    if languages is not None:
        by: dict[str, list[bool]] = {}
        for lang, s in zip(languages, scores, strict=True):
            by.setdefault(lang, []).append(s.partial)
        row["partial_by_language"] = {k: {"n": len(v), "partial": _share(v)} for k, v in by.items()}
    return row
