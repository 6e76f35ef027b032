"""The next-edit rules, as a table: each rule is one object of one signature, `(documents, history)
-> Proposal` (rule.py), and RULES lists them in the order they are asked. Adding a rule is a module
with its class and one line here.

How the table is read (`propose`), which is how the rules have always taken precedence:
- the rules whose source is `followed` (the user's change carried on at its sites) are asked in
  order, while the budget lasts, and the first whose sites make a group near the cursor wins: its
  sites from GROUP_SPAN lines above the cursor's on, the first group that ends after the cursor,
  else (none does) from the top of the file, its first group (a jump) (`nearest`). Sites close
  together (within GROUP_LINES, at most GROUP_SITES over GROUP_SPAN lines) are one candidate;
- a rule marked `whole_step` is not asked while the document's newest step leaves its line half
  typed (`half_typed`, unfinished.py): such a step is no change to follow yet;
- every other rule's candidates are added as they are (the last edit repeated);
- a caller asks only the kinds of source it may show (`kinds`): the rules alone, with no acceptance
  model to judge, never show a repeat, so the language server asks for Kind.REPEAT only when a
  model decides (server/next_edit.py), and `eval nep` never does."""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import replace

from ..candidate import Candidate, Kind
from . import analogous, imported, repeat, scope, signature, unwrap
from .budget import GROUP_SITES, GROUP_SPAN
from .history import joined, line_offset
from .rule import NOTHING, Documents, History, Proposal, Rule
from .scope import Rename, last_rename
from .unfinished import unfinished

log = logging.getLogger(__name__)

RULES: tuple[Rule, ...] = (
    scope.Renamed(),  # a rename through its scope
    signature.Signature(),  # a changed signature reaching its calls
    analogous.Argument(),  # an argument changed at one call, at the analogous calls
    unwrap.Unwrapped(),  # a wrapper removed from an argument at one call, at the other calls
    imported.Imported(),  # a signature changed in another open document, at its calls here
    repeat.Repeat(),  # the last edit made again at its next occurrence
)

GROUP_LINES = 3  # sites at most this many lines apart are one suggestion
CODE = frozenset({Kind.CODE})  # what the rules alone may show


def propose(documents: Documents, history: History, kinds: Collection[Kind] = CODE,
            rules: Sequence[Rule] = RULES) -> Proposal:
    """The rules' candidates for `documents` (module docstring): the followed change's group first,
    then the others', in the table's order; the proposal's change is the followed one's."""
    with history.budget.applied():  # the parses below answer to it
        out, change, followed, why = [], None, False, None
        for rule in rules:
            if rule.source.kind not in kinds:
                continue
            if not rule.source.followed:
                out += rule(documents, history).candidates
                continue
            if followed or history.budget.spent():
                continue
            if rule.whole_step and why is None:
                why = half_typed(documents, history) or ""
                if why:
                    log.debug("nothing followed: %s", why)  # once, not per rule nor per pass
            if rule.whole_step and why:
                continue
            found = nearest(rule, documents, history)
            if found.candidates:
                out, change, followed = out + list(found.candidates), found.change, True
    return Proposal(tuple(out), change)


def followed_sites(documents: Documents, history: History, rules: Sequence[Rule] = RULES) -> Proposal:
    """The first followed rule's sites from history.budget.start on, every one of them, ungrouped
    (serve-api's edit route rewrites a region): `propose`'s rules without `nearest`."""
    with history.budget.applied():
        why = half_typed(documents, history)
        for rule in rules:
            if not rule.source.followed or history.budget.spent() or (rule.whole_step and why):
                continue
            found = rule(documents, history)
            if found.candidates:
                return found
    return NOTHING


def nearest(rule: Rule, documents: Documents, history: History) -> Proposal:
    """`rule`'s group to show, nearest the cursor first: its sites from GROUP_SPAN lines above the
    cursor's on, the first group after the cursor, else (none ends after it) its sites from the top
    of the file, their first group; NOTHING when it has none."""
    text, cursor = documents.text, documents.cursor
    above = line_offset(text, max(0, text.count("\n", 0, cursor) - GROUP_SPAN))
    for start in (above, 0) if above > 0 else (0,):
        found = rule(documents, history.at(start))
        group = next_group(text, found.candidates, cursor, wrap=start == 0)
        if group is not None:
            return Proposal((group,), found.change)
    return NOTHING


def next_group(text: str, sites: Sequence[Candidate], cursor: int, wrap: bool = True) -> Candidate | None:
    """The group of `sites` (in order) to suggest, as one candidate: the first group that ends at or
    after `cursor`, else (`wrap`) the first of them; None when there is none. A group is at most
    GROUP_SITES sites over GROUP_SPAN lines, each within GROUP_LINES of the one before."""
    groups: list[list[Candidate]] = []
    for site in sites:
        last = groups[-1] if groups else None
        if last and text.count("\n", last[-1].end, site.start) <= GROUP_LINES and len(last) < GROUP_SITES \
                and text.count("\n", last[0].start, site.end) < GROUP_SPAN:
            last.append(site)
        else:
            groups.append([site])
    group = next((g for g in groups if g[-1].end >= cursor), groups[0] if groups and wrap else None)
    if group is None:
        return None
    out, at = [], group[0].start
    for site in group:
        out += [text[at:site.start], site.text]
        at = site.end
    return replace(group[0], end=group[-1].end, text="".join(out))


def half_typed(documents: Documents, history: History) -> str | None:
    """Why the document's newest step is no change to follow yet (`unfinished`), or None; a site
    of the rename going on is finished, though it shortens the end of its line (`total_count` ->
    `total`)."""
    steps, text, spec = history.of(documents.uri), documents.text, documents.spec
    if not steps or (why := unfinished(joined(steps), text, spec)) is None:
        return None
    going_on = history.going_on(documents.uri)
    if not isinstance(going_on, Rename):
        return why
    change = last_rename(steps, text)
    return None if change is not None and going_on.same(change, spec.name) else why
