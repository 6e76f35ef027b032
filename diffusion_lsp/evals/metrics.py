"""Line scores the evaluations and `bench lsp` share: exact match and edit similarity; and the rows
of the tables of what is shown (shares of cases, precision) that calibrate, eval repo and eval
edits print."""

from __future__ import annotations

import difflib


def exact_match(guess: str, line: str) -> float:
    return float(guess.strip() == line.strip())


def edit_similarity(guess: str, line: str) -> float:
    """Character-level similarity in [0, 1] (difflib ratio) of the stripped lines, the soft score
    code-completion benchmarks report beside exact match (CodeXGLUE line completion)."""
    a, b = guess.strip(), line.strip()
    return 1.0 if a == b else difflib.SequenceMatcher(None, a, b).ratio()


def mean_score(score, guesses: list[str], lines: list[str]) -> float:
    return sum(score(g, x) for g, x in zip(guesses, lines)) / max(len(lines), 1)


def rates_head(width: int, columns: tuple[str, ...]) -> str:
    """The head of a table of rates: `columns` right-aligned after a name column of `width`."""
    return f"{'':{width}} " + " ".join(f"{c:>{max(len(c), 7)}}" for c in columns)


def rates_row(name: str, r: dict, width: int, columns: tuple[str, ...]) -> str:
    """One row of it: r[column] as a percentage, '-' where it is None (a precision of nothing shown)."""
    return f"{name:{width}} " + " ".join(f"{'-':>{max(len(c), 7)}}" if r[c] is None else f"{r[c]:{max(len(c), 7)}.1%}"
                                         for c in columns)
