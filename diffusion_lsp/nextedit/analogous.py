"""The rest of an argument change: the user changed one argument of a call (a literal, a name, an
expression), so the calls of the same function in the file that pass the same old argument in the
same place (its position; in Python a keyword's name) are proposed the same change, found with
tree-sitter in every language the server parses. Names swapped for names are not such a change
(`f(a)` -> `f(b)`, `f(self.a)` -> `f(self.b)`: a rename's step at a use, or another variable
passed): scope.py's to follow.

The call is the one the newest step (with the steps typed just before it on its lines) changed in
exactly one argument, keeping its function and its other arguments; of nested calls, the innermost.
Its "function" is the call's text before its arguments (`self.assertEqual`, `fmt.Println`), so a
method of another object is another function. An argument that merely holds the old text inside a
longer one is not the same argument."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ..candidate import Source
from ..context.languages import LanguageSpec
from .budget import UNBOUNDED, Budget
from .history import Step
from .names import char_offsets, parsed, preorder, step_parses
from .rule import NOTHING, Change, Documents, History, Proposal, sites_of

CALLS = {"call", "call_expression", "method_invocation"}
NAME_LEAVES = {"identifier", "property_identifier", "field_identifier", "shorthand_property_identifier", "type_identifier"}


@dataclass(frozen=True)
class ArgChange(Change):
    callee: str  # the call's text before its arguments, without spaces
    slot: int | str  # the argument's position, or its keyword
    old: str
    new: str


class Argument:
    """An argument changed at one call, changed at the analogous calls in the document."""

    source, whole_step = Source.ARGUMENT, True

    def __call__(self, documents: Documents, history: History) -> Proposal:
        change = arg_change(history.of(documents.uri), documents.text, documents.spec)
        if change is None:
            return NOTHING
        return Proposal(sites_of(analogous_edits(documents.text, documents.spec, change, history.budget),
                                 self.source), change)


def callee(call) -> str | None:
    """A call's text before its arguments, without spaces (`self.assertEqual`); None: no arguments."""
    args = call.child_by_field_name("arguments")
    if args is None:
        return None
    return re.sub(r"\s+", "", call.text[:args.start_byte - call.start_byte].decode("utf-8", "replace"))


def slots(call) -> dict:
    """{position or keyword: the argument's value node} of a call."""
    items = [c for c in call.child_by_field_name("arguments").named_children if c.type != "comment"]
    out = {}
    for i, item in enumerate(items):
        if item.type == "keyword_argument" and (key := item.child_by_field_name("name")) is not None:
            out[key.text.decode("utf-8", "replace")] = item.child_by_field_name("value")
        else:
            out[i] = item
    return out


def calls_over(root, lo: int, hi: int, budget: Budget = UNBOUNDED) -> Iterator:
    """The calls whose arguments overlap bytes lo..hi, in order of position (until `budget` is spent)."""
    for n in preorder(root, lo, budget, hi):
        args = n.child_by_field_name("arguments") if n.type in CALLS else None
        if args is not None and args.start_byte < hi and lo < args.end_byte:
            yield n


def arg_change(steps: list[Step], text: str, spec: LanguageSpec) -> ArgChange | None:
    """The one argument the newest step changed in one call, or None."""
    if (p := step_parses(steps, text, spec)) is None:
        return None
    now = list(calls_over(p.now[0].root_node, p.lo, p.now_hi))
    was = list(calls_over(p.then[0].root_node, p.lo, p.then_hi))
    if len(now) != len(was):
        return None
    found = []
    for old, new in zip(was, now):
        if (slot := changed_slot(old, new)) is not None and not _names_only(slots(old)[slot], slots(new)[slot]):
            found.append((len(new.text), ArgChange(callee(new), slot, slots(old)[slot].text.decode("utf-8", "replace"),
                                                   slots(new)[slot].text.decode("utf-8", "replace"))))
    if not found:
        return None
    change = min(found, key=lambda f: f[0])[1]  # of nested calls, the innermost
    return change if change.old.strip() and change.new.strip() else None


def changed_slot(old, new) -> int | str | None:
    """The one argument (its position or keyword) in which call `old` became call `new`, keeping its
    function and its other arguments; None: not such a change."""
    if old.text == new.text or callee(old) != callee(new):
        return None
    a, b = slots(old), slots(new)
    diff = [k for k in a if a[k] is not None and b.get(k) is not None and a[k].text != b[k].text]
    return diff[0] if a.keys() == b.keys() and len(diff) == 1 else None


def _leaves(node) -> list:
    stack, out = [node], []
    while stack:
        n = stack.pop()
        if n.child_count == 0:
            out.append(n)
        stack.extend(reversed(n.children))
    return out


def _names_only(old, new) -> bool:
    """Whether two arguments differ in names alone (`a` -> `b`, `self.a` -> `self.b`, `**kw` -> `**kw2`):
    a rename's step at a use, or another variable passed; not followed."""
    x, y = _leaves(old), _leaves(new)
    return len(x) == len(y) and all(m.type == n.type and (m.text == n.text or m.type in NAME_LEAVES) for m, n in zip(x, y))


def analogous_edits(text: str, spec: LanguageSpec, change: ArgChange,
                    budget: Budget = UNBOUNDED) -> list[tuple[int, int, str]]:
    """(start, end, new text) of the argument at every call of change.callee still passing change.old
    in change.slot, from budget.start on (at most budget.most), in order."""
    return slot_edits(text, spec, change.callee, change.slot, budget,
                      lambda arg, _: change.new if arg.text.decode("utf-8", "replace") == change.old else None)


def slot_edits(text: str, spec: LanguageSpec, function: str, slot: int | str, budget: Budget,
               rewrite: Callable[[object, Callable[[int], int]], str | None]) -> list[tuple[int, int, str]]:
    """(start, end, what it becomes) of the argument in `slot` at every call of `function` for which
    `rewrite(argument node, byte offset -> str offset)` gives a text, from budget.start on (at most
    budget.most), in order."""
    if (found := parsed(spec, text)) is None:
        return []
    (tree, data), out = found, []
    chars = char_offsets(data)
    for call in calls_over(tree.root_node, len(text[:budget.start].encode("utf-8")), len(data), budget):
        if budget.full(len(out)):
            break
        arg = slots(call).get(slot) if callee(call) == function else None
        if arg is not None and (new := rewrite(arg, chars)) is not None:
            out.append((chars(arg.start_byte), chars(arg.end_byte), new))
    return sorted(out)
