"""Line scores the evaluations and `bench lsp` share: exact match and edit similarity."""

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
