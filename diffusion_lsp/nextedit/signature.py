"""The rest of a changed signature, as a next-edit rule: the parameters a step added to or removed
from a definition (`changed`: one parameter, nothing else; a rename is scope.py's to follow), then
the calls that change reaches in the file (calls.py finds and rewrites them), or in another open
document that imports the function (imported.py)."""

from __future__ import annotations

import logging

from ..candidate import Source
from ..context.languages import LanguageSpec
from .budget import UNBOUNDED, Budget
from .calls import GRAMMARS, Grammar, Param, SignatureChange, calls, edits_of, parameters
from .history import Step
from .names import parsed, preorder, step_parses
from .rule import NOTHING, Documents, History, Proposal, sites_of

log = logging.getLogger(__name__)


class Signature:
    """A changed signature reaching its calls in the document: the newest step's change, else the
    one this document began (`History.following`) while the step edits one of its calls."""

    source, whole_step = Source.SIGNATURE, True

    def __call__(self, documents: Documents, history: History) -> Proposal:
        going_on = history.going_on(documents.uri)
        found = call_edits(history.of(documents.uri), documents.text, documents.spec,
                           going_on if isinstance(going_on, SignatureChange) else None, history.budget)
        return NOTHING if found is None else Proposal(sites_of(found[1], self.source), found[0])


def _definitions(tree, lo: int, hi: int, grammar: Grammar) -> list:
    """The definitions whose parameters overlap bytes lo..hi, outermost first: a step over a
    decorator factory's `def` line spans the nested `def` below it too."""
    found = []
    for n in preorder(tree.root_node, lo, hi=hi):  # a cursor: a module's 100,000 statements are never listed
        params = n.child_by_field_name("parameters") if n.type in grammar.definitions else None
        if params is not None and params.start_byte < hi and lo < params.end_byte:
            found.append(n)
    return sorted(found, key=lambda n: n.start_byte)


def _paired(now: list, then: list) -> list[tuple]:
    """(a definition now, the same one before the step): the k-th of a name with the k-th of it."""
    def named(fns) -> dict:
        spelled = [fn.child_by_field_name("name").text for fn in fns]
        return {(name, spelled[:i].count(name)): fn for i, (name, fn) in enumerate(zip(spelled, fns))}
    was = named(then)
    return [(fn, was[key]) for key, fn in named(now).items() if key in was]


def changed(steps: list[Step], text: str, spec: LanguageSpec,
            going_on: SignatureChange | None = None) -> tuple[SignatureChange, object, bytes] | None:
    """(the change the newest step made to a definition's parameters, its node in `text`, the
    text's bytes), or None: one parameter added or removed, nothing else (a rename is followed as one).
    Quick edits at one spot are one step (an undo and the edit after it too): when the step's own
    before differs by more than one parameter, the def is also held against `going_on`, the change
    followed last, as it was before and after it."""
    grammar = GRAMMARS.get(spec.name)
    if grammar is None or (p := step_parses(steps, text, spec)) is None:
        return None
    tree, data = p.now
    pairs = _paired(_definitions(tree, p.lo, p.now_hi, grammar), _definitions(p.then[0], p.lo, p.then_hi, grammar))
    # the def whose parameter list the step changed (else, as it goes on, the innermost it spans)
    moved = [(fn, was) for fn, was in pairs if _moved(fn, was)]
    found = [(c, fn) for fn, was in (moved or pairs[::-1]) if (c := _change(fn, was, going_on)) is not None]
    if len(found) > 1 and moved:
        log.debug("signature not followed: one step changed the parameters of %s",
                  " and ".join(c.function for c, _ in found))
        return None
    return (found[0][0], found[0][1], data) if found else None


def _change(fn, was, going_on: SignatureChange | None) -> SignatureChange | None:
    """The one parameter added or removed at `fn` (`was` before the step), also held against
    `going_on`; None when the parameters cannot be read or changed otherwise."""
    now, then = parameters(fn), parameters(was)
    name = fn.child_by_field_name("name").text.decode("utf-8", "replace")
    if (now is None or then is None) and _moved(fn, was):
        log.debug("signature not followed: %s's parameters cannot be matched against calls (*args, **kwargs, "
                  "a destructured parameter, an error)", name)
    if now is None or then is None:
        return None
    befores = [then[0]]
    if going_on is not None and going_on.function == name:
        befores += [going_on.old_params, going_on.after]
    change = next((c for b in befores if (c := _compare(name, b, now[0])) is not None), None)
    if change is None and now[0] != then[0]:
        log.debug("signature not followed: %s's parameters changed otherwise than one added or removed", name)
    return change


def _moved(fn, was) -> bool:
    return fn.child_by_field_name("parameters").text != was.child_by_field_name("parameters").text


def _compare(function: str, old: tuple[Param, ...], new: tuple[Param, ...]) -> SignatureChange | None:
    names_old, names_new = [p.name for p in old], [p.name for p in new]
    if len(new) == len(old) + 1:
        i = next((k for k in range(len(old)) if names_old[k] != names_new[k]), len(old))
        if names_new[:i] + names_new[i + 1:] == names_old:
            return SignatureChange(function, "added", i, new[i], old)
    if len(new) == len(old) - 1:
        i = next((k for k in range(len(new)) if names_old[k] != names_new[k]), len(new))
        if names_old[:i] + names_old[i + 1:] == names_new:
            return SignatureChange(function, "removed", i, old[i], old)
    return None


def call_edits(steps: list[Step], text: str, spec: LanguageSpec, going_on: SignatureChange | None = None,
               budget: Budget = UNBOUNDED) -> tuple[SignatureChange, list[tuple[int, int, str]]] | None:
    """(the signature change, (start, end, new text) of each call it implies from budget.start on, in
    order: character offsets into `text`), or None. The change is the newest step's, else `going_on` (one
    this document began, whose calls the newest step is editing) while its def has the new parameters."""
    found = changed(steps, text, spec, going_on)
    if found is None and going_on is not None and steps \
            and going_on.function + "(" in "".join(steps[-1].new).replace(" ", ""):
        found = _still(going_on, text, spec)
    if found is None:
        return None
    change, fn, data = found
    lo = len(text[:budget.start].encode("utf-8"))
    return change, edits_of(calls(fn, parameters(fn)[1], budget, lo), change, data, budget)


def _still(change: SignatureChange, text: str, spec: LanguageSpec):
    """(change, its definition, the text's bytes) when `text` still defines change.function with the
    changed parameters, else None."""
    new, found = [p.name for p in change.after], parsed(spec, text)
    if found is None:
        return None
    data, stack = found[1], [found[0].root_node]
    while stack:
        n = stack.pop()
        stack.extend(n.children)
        if n.type in GRAMMARS[spec.name].definitions and n.child_by_field_name("name").text.decode() == change.function \
                and (found := parameters(n)) is not None and [p.name for p in found[0]] == new:
            return change, n, data
    return None


def pending(steps: list[Step], text: str, spec: LanguageSpec, going_on: SignatureChange | None) -> SignatureChange | None:
    """The signature change a document's newest step made, else `going_on` while the document still
    defines it so: what another document's calls may still need."""
    found = changed(steps, text, spec, going_on) or (_still(going_on, text, spec) if going_on is not None else None)
    return None if found is None else found[0]
