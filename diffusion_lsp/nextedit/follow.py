"""The rest of the user's last change, from the code alone: a rename's remaining sites in the name's
scope (scope.py), else a changed signature's calls (calls.py), else an argument changed at one
call made again at the analogous calls (analogous.py), in this document; else the calls of a
signature changed in another open document that this one imports from. Sites close together (within
GROUP_LINES, at most GROUP_SITES over GROUP_SPAN lines) are one suggestion; the first group after the
cursor comes first, then the first in the file (a jump); the walks start a few lines above the
cursor and stop within their budget (budget.py), answering with what they have. The language server proposes it before asking a model (server/next_edit.py),
and so does `eval nep`'s predictor. Nothing is followed from a step that leaves its line half
typed (unfinished.py)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass

from ..context.languages import LanguageSpec
from .analogous import ArgChange, analogous_edits, arg_change
from .calls import Change, call_edits, pending
from .imported import imported_edits
from .budget import FOLLOW_MS, GROUP_SITES, GROUP_SPAN, UNBOUNDED, Budget
from .history import Step, joined, line_offset
from .scope import Rename, from_binding, last_rename, sites
from .unfinished import unfinished

log = logging.getLogger(__name__)

GROUP_LINES = 3  # sites at most this many lines apart are one suggestion


@dataclass(frozen=True)
class Followed:
    change: Rename | Change | ArgChange  # what is being followed
    start: int  # the span the suggestion replaces (character offsets) and what it becomes
    end: int
    text: str
    source: str = "rename"  # rename, signature, argument or imported (the acceptance model's names)
    origin: str = ""  # imported: the document the change was made in (Elsewhere.uri)


def next_group(text: str, edits: list[tuple[int, int, str]], cursor: int,
               wrap: bool = True) -> tuple[int, int, str] | None:
    """(start, end, what that span becomes) for the group of edits (start, end, new text; in order)
    to suggest: the first group that ends at or after `cursor`, else (`wrap`) the first of them; None
    when there is none. A group is at most GROUP_SITES sites over GROUP_SPAN lines."""
    groups: list[list[tuple[int, int, str]]] = []
    for edit in edits:
        last = groups[-1] if groups else None
        if last and text.count("\n", last[-1][1], edit[0]) <= GROUP_LINES and len(last) < GROUP_SITES \
                and text.count("\n", last[0][0], edit[1]) < GROUP_SPAN:
            last.append(edit)
        else:
            groups.append([edit])
    group = next((g for g in groups if g[-1][1] >= cursor), groups[0] if groups and wrap else None)
    if group is None:
        return None
    start, end, out, at = group[0][0], group[-1][1], [], group[0][0]
    for s, e, new in group:
        out += [text[at:s], new]
        at = e
    return start, end, "".join(out)


def follow(text: str, spec: LanguageSpec, steps: list[Step], cursor: int,
           going_on: Rename | Change | None = None, budget: Budget | None = None) -> Followed | None:
    """The next group of the last change's remaining sites, or None. `going_on`: a change this
    document began (a rename at a definition, a signature), whose next step may be at one of its
    sites. `budget`: the rules' bounds (None: MOST_SITES sites, no clock)."""
    with (budget or Budget()).applied() as budget:  # the parses below answer to it
        if steps and (why := half_typed(text, spec, steps, going_on)) is not None:
            log.debug("nothing followed: %s", why)  # once, not per pass of `nearest`
            return None
        found = nearest(text, cursor, budget, lambda b: followed_edits(text, spec, steps, going_on, b))
    return None if found is None else Followed(found[0], *found[1], found[2])


def nearest(text: str, cursor: int, budget: Budget, edits_from: Callable[[Budget], tuple | None]) -> tuple | None:
    """(what `edits_from` found, the group to suggest) with the nearest sites first: the sites from
    GROUP_SPAN lines above the cursor's on, else (none ends after the cursor) from the top of the file.
    `edits_from(budget)`: (change, edits, ...) or None, the edits from budget.start on."""
    above = line_offset(text, max(0, text.count("\n", 0, cursor) - GROUP_SPAN))
    for start in (above, 0) if above > 0 else (0,):
        found = edits_from(budget.at(start))
        group = None if found is None else next_group(text, found[1], cursor, wrap=start == 0)
        if group is not None:
            return found[0], group, *found[2:]
    return None


def followed_edits(text: str, spec: LanguageSpec, steps: list[Step], going_on: Rename | Change | None = None,
                   budget: Budget = UNBOUNDED
                   ) -> tuple[Rename | Change | ArgChange, list[tuple[int, int, str]], str] | None:
    """(the change the newest step made, every site it still has from budget.start on (at most
    budget.most) as (start, end, new text) in order, its source), or None: `follow`'s rules, every
    site at once (serve-api's edit route). A step that leaves its line half typed (`unfinished`) is
    no change to follow."""
    if not steps:
        return None
    if (why := half_typed(text, spec, steps, going_on)) is not None:
        log.debug("nothing followed: %s", why)
        return None
    change, edits, source = last_rename(steps, text), [], "rename"
    if change is not None:
        begun = isinstance(going_on, Rename) and going_on.same(change, spec.name)
        found = sites(text, spec, change, not begun, budget) or (from_binding(text, spec, change, budget=budget)
                                                                 if begun else [])
        edits = [(s, e, change.new) for s, e in found]
    if not edits and not budget.spent():
        calls = call_edits(steps, text, spec, going_on if isinstance(going_on, Change) else None, budget)
        (change, edits), source = calls if calls is not None else (None, []), "signature"
    if not edits and not budget.spent() and (change := arg_change(steps, text, spec)) is not None:
        edits, source = analogous_edits(text, spec, change, budget), "argument"
    return (change, edits, source) if edits else None


def half_typed(text: str, spec: LanguageSpec, steps: list[Step], going_on: Rename | Change | None) -> str | None:
    """Why the newest of `steps` is no change to follow yet (`unfinished`), or None; a site of the
    rename `going_on` is finished, though it shortens the end of its line (`total_count` -> `total`)."""
    if (why := unfinished(joined(steps), text, spec)) is None or not isinstance(going_on, Rename):
        return why
    change = last_rename(steps, text)
    return None if change is not None and going_on.same(change, spec.name) else why


@dataclass(frozen=True)
class Elsewhere:
    """Another open document, and what this one's follow needs of it."""

    steps: list[Step]  # its steps, oldest first
    text: str
    module: str  # its file's name without .py: what an import names it by
    going_on: Rename | Change | None  # the change its own follow is following
    uri: str = ""


def follow_elsewhere(text: str, spec: LanguageSpec, cursor: int, others: list[Elsewhere],
                     budget: Budget | None = None) -> Followed | None:
    """The next group of calls in `text` that a signature change in another open document implies
    (the function imported from there), in the order of `others` (the most recently edited first)
    until `budget` is spent; or None."""
    with (budget or Budget()).applied() as budget:
        return _elsewhere(text, spec, cursor, others, budget)


def _elsewhere(text: str, spec: LanguageSpec, cursor: int, others: list[Elsewhere], budget: Budget) -> Followed | None:
    for other in others:
        if budget.spent():
            break
        if spec.name != "python" or not re.search(r"(?<!\w)" + re.escape(other.module) + r"(?!\w)", text):
            continue  # an import names its module: a document never spelling it is not parsed (nor its own)
        steps = [] if other.steps and unfinished(joined(other.steps), other.text, spec) else other.steps  # half typed
        change = pending(steps, other.text, spec, other.going_on if isinstance(other.going_on, Change) else None)
        found = nearest(text, cursor, budget, lambda b: (change, imported_edits(text, spec, change, other.module, b))) \
            if change else None
        if found is not None:
            return Followed(change, *found[1], "imported", other.uri)
    return None


def follow_text(current: str, spec: LanguageSpec, steps: list[Step], cursor: tuple[int, int]) -> str | None:
    """The whole file with the next group of the last change's sites edited, or None: `eval nep`'s
    view of `follow`. `cursor`: 0-based (line, index in the line)."""
    lines = current.splitlines(keepends=True)
    found = follow(current, spec, steps, sum(map(len, lines[:cursor[0]])) + cursor[1])
    return None if found is None else current[:found.start] + found.text + current[found.end:]


def followed_in(text: str, spec: LanguageSpec, steps: list[Step], start: int, end: int) -> str | None:
    """text[start:end] with every site of the last change that lies in it edited, or None when none
    does: serve-api's view of `follow` (a Mercury edit request rewrites one region; its history's
    diffs are the steps). The sites from `start` on, within a request's budget (FOLLOW_MS)."""
    with Budget.of(FOLLOW_MS).at(start).applied() as budget:
        found = followed_edits(text, spec, steps, budget=budget)
    inside = [(s, e, new) for s, e, new in (found[1] if found else []) if start <= s and e <= end]
    if not inside:
        return None
    out, at = [], start
    for s, e, new in inside:
        out += [text[at:s], new]
        at = e
    return "".join(out) + text[at:end]
