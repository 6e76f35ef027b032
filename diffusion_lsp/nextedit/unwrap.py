"""A wrapper removed from an argument, at the other calls: the user turned `f(float(value))` into
`f(value)` at one call, so the calls of `f` in the file that pass a call of the same wrapper, in
the same place (its position; in Python a keyword's name), are proposed the same unwrapping
(`f(float(price))` -> `f(price)`), found with tree-sitter in every language the server parses.

Precision first: the same function (the call's text before its arguments, as analogous.py reads
it: `self.f` is not `f`), the same wrapper (its call's text before its arguments: `float`, not
`int`, nor `np.float64`), the same argument's place, and a wrapper called with exactly one
argument, no spread (`int(x, 16)` is not unwrapped to `x`). The wrapped expression may differ
from the one the user unwrapped: the change is the wrapper's removal at `f`'s calls, whatever each
passes through it; a call passing the very same `float(value)` is unwrapped the same way.
analogous.py's argument rule does not see this step: the wrapper's own call is gone from it, so
the step's calls do not pair one to one."""

from __future__ import annotations

from dataclasses import dataclass

from ..candidate import Source
from ..context.languages import LanguageSpec
from .analogous import CALLS, callee, calls_over, changed_slot, slot_edits, slots
from .budget import UNBOUNDED, Budget
from .history import Step
from .names import step_parses
from .rule import NOTHING, Change, Documents, History, Proposal, sites_of

SPREADS = {"list_splat", "dictionary_splat", "spread_element", "splat_argument", "hash_splat_argument"}


@dataclass(frozen=True)
class Unwrap(Change):
    callee: str  # the call's text before its arguments, without spaces
    slot: int | str  # the argument's position, or its keyword
    wrapper: str  # the removed wrapper call's text before its arguments, without spaces


class Unwrapped:
    """A wrapper removed from one call's argument, removed at the other calls that pass it."""

    source, whole_step = Source.UNWRAP, True

    def __call__(self, documents: Documents, history: History) -> Proposal:
        change = unwrap_change(history.of(documents.uri), documents.text, documents.spec)
        if change is None:
            return NOTHING
        return Proposal(sites_of(unwrap_edits(documents.text, documents.spec, change, history.budget),
                                 self.source), change)


def wrapped(node) -> tuple[str, object] | None:
    """(the wrapper, the one argument it is called with) when `node` is a call of one argument, no
    keyword and no spread; else None."""
    if node is None or node.type not in CALLS or (wrapper := callee(node)) is None:
        return None
    args = slots(node)
    inner = args.get(0)
    if len(args) != 1 or inner is None or inner.type in SPREADS:
        return None
    return wrapper, inner


def unwrap_change(steps: list[Step], text: str, spec: LanguageSpec) -> Unwrap | None:
    """The wrapper the newest step removed from one argument of one call (of nested calls, the
    innermost), or None: the call keeps its function and its other arguments, and the argument is
    now what the wrapper was called with."""
    if (p := step_parses(steps, text, spec)) is None:
        return None
    was = {c.start_byte: c for c in calls_over(p.then[0].root_node, p.lo, p.then_hi)}
    found = []
    for new in calls_over(p.now[0].root_node, p.lo, p.now_hi):
        old = was.get(new.start_byte)  # a call that starts before the step starts at the same byte after it
        slot = None if old is None else changed_slot(old, new)
        inner = None if slot is None else wrapped(slots(old)[slot])
        if inner is not None and inner[1].text == slots(new)[slot].text:
            found.append((len(new.text), Unwrap(callee(new), slot, inner[0])))
    return min(found, key=lambda f: f[0])[1] if found else None


def unwrap_edits(text: str, spec: LanguageSpec, change: Unwrap,
                 budget: Budget = UNBOUNDED) -> list[tuple[int, int, str]]:
    """(start, end, what the wrapper was called with) of the argument at every call of
    change.callee that passes a call of change.wrapper in change.slot, from budget.start on (at
    most budget.most), in order."""
    def unwrapped(arg, chars) -> str | None:
        inner = wrapped(arg)
        if inner is None or inner[0] != change.wrapper:
            return None
        return text[chars(inner[1].start_byte):chars(inner[1].end_byte)]
    return slot_edits(text, spec, change.callee, change.slot, budget, unwrapped)
