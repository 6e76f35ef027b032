"""The rest of the user's last change in one document, from the code alone, as tools that see one
file ask it: the rules' table (rules.py: a rename through its scope, a changed signature's calls,
an argument or a wrapper changed at one call and at the others), with no other open document and
no acceptance model, so no repeat. `eval nep`'s predictor and edit replay ask `follow`; serve-api's
edit route asks `followed_in`. The language server asks the table itself (server/next_edit.py)."""

from __future__ import annotations

from collections.abc import Sequence

from ..candidate import Candidate
from ..context.languages import LanguageSpec
from .budget import FOLLOW_MS, Budget
from .history import Step
from .rule import Documents, History
from .rules import followed_sites, propose


def follow(text: str, spec: LanguageSpec, steps: Sequence[Step], cursor: int,
           budget: Budget | None = None) -> Candidate | None:
    """The next group of the last change's remaining sites, or None. `budget`: the rules' bounds
    (None: MOST_SITES sites, no clock)."""
    found = propose(Documents(text, spec, cursor), History.of_one(steps, budget=budget or Budget()))
    return found.candidates[0] if found.candidates else None


def follow_text(current: str, spec: LanguageSpec, steps: list[Step], cursor: tuple[int, int]) -> str | None:
    """The whole file with the next group of the last change's sites edited, or None: `eval nep`'s
    view of `follow`. `cursor`: 0-based (line, index in the line)."""
    lines = current.splitlines(keepends=True)
    found = follow(current, spec, steps, sum(map(len, lines[:cursor[0]])) + cursor[1])
    return None if found is None else found.apply(current)


def followed_in(text: str, spec: LanguageSpec, steps: list[Step], start: int, end: int) -> str | None:
    """text[start:end] with every site of the last change that lies in it edited, or None when none
    does: serve-api's view of the rules (a Mercury edit request rewrites one region; its history's
    diffs are the steps). The sites from `start` on, within a request's budget (FOLLOW_MS)."""
    found = followed_sites(Documents(text, spec, start), History.of_one(steps, budget=Budget.of(FOLLOW_MS).at(start)))
    inside = [c for c in found.candidates if start <= c.start and c.end <= end]
    if not inside:
        return None
    out, at = [], start
    for site in inside:
        out += [text[at:site.start], site.text]
        at = site.end
    return "".join(out) + text[at:end]
