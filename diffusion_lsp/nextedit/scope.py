"""The rest of a rename: the sites a renamed name still has in its scope, found with tree-sitter.

When the user's last change in a document swaps one identifier for another (`renamed`: a local,
a parameter or an attribute renamed where it is defined, or at one of its uses after an accepted
suggestion), the sites still holding the old name are the rest of the change:
- an attribute of `self` / `cls` (Python) or `this` (JavaScript, TypeScript, Java): its uses
  through that object anywhere in the class;
- any other name: the scope that binds the new name, the way the language scopes it. In Python the
  innermost function (or lambda, or the module) where it is a parameter or assigned, nested
  functions included unless they bind the old name themselves (a shadowing local) and without
  `nonlocal`/`global`; in the other languages the innermost function, method or closure.
A site is an identifier node, so a string or comment holding the name is never one, nor an
attribute or field of the same name (`x.q`, `{q: ...}`'s key, `f(q=1)`'s keyword), except a
renamed parameter's keyword at the calls of its function (calls.py) and, in Python, where its
function's docstring names it as a parameter (`:param q:`, `q (int):`, `q : int`, ``` `q` ```).
Sites close together are one suggestion (rules.py)."""

from __future__ import annotations

import itertools
import re
from dataclasses import dataclass

from ..candidate import Source
from ..context.languages import LanguageSpec
from .history import Step, joined, line_offset
from .names import (FUNCTIONS, SELF, binding, binds, char_offsets, field_of, is_name, is_use, names, parsed,
                    root, seen_names, spelled)
from .budget import UNBOUNDED, Budget
from .calls import keyword_parameter, keyword_sites
from .repeat import renames
from .rule import NOTHING, Change, Documents, History, Proposal, sites_of


@dataclass(frozen=True)
class Rename(Change):
    old: str
    new: str
    at: int  # an offset of the new name in the text, where the change was made

    def same(self, other: Rename, language: str | None) -> bool:
        """Whether `other` renames the same name to the same name in `language` (Python's `width` and
        `𝓌idth` are one name)."""
        return all(spelled(a.encode("utf-8"), language) == spelled(b.encode("utf-8"), language)
                   for a, b in ((self.old, other.old), (self.new, other.new)))


class Renamed:
    """A renamed name at its next sites in its scope: the newest step's rename, where the name is
    defined, or at a use while a rename this document began there goes on (`History.following`)."""

    source, whole_step = Source.RENAME, True

    def __call__(self, documents: Documents, history: History) -> Proposal:
        text, spec, budget = documents.text, documents.spec, history.budget
        steps = history.of(documents.uri)
        change = last_rename(steps, text) if steps else None
        if change is None:
            return NOTHING
        going_on = history.going_on(documents.uri)
        begun = isinstance(going_on, Rename) and going_on.same(change, spec.name)
        found = sites(text, spec, change, not begun, budget) or (from_binding(text, spec, change, budget=budget)
                                                                 if begun else [])
        return Proposal(sites_of([(s, e, change.new) for s, e in found], self.source), change)


def renamed(old_text: str, new_text: str, at: int) -> Rename | None:
    """The rename a change made: old_text became new_text (the changed lines, starting at offset
    `at` of the document) by swapping one identifier for another, each place the same way."""
    swaps = renames(old_text, new_text)
    if not swaps or len(swaps) != 1:
        return None
    (old, new), = swaps.items()
    if not (is_name(old) and is_name(new)):
        return None
    found = re.search(r"(?<!\w)" + re.escape(new) + r"(?!\w)", new_text)
    return Rename(old, new, at + found.start()) if found else None


def _scope(node, name: bytes, spec: LanguageSpec):
    """The node whose subtree is `name`'s scope, seen from its occurrence `node`."""
    functions = FUNCTIONS.get(spec.name, set())
    n = node.parent
    if spec.name != "python":
        while n is not None and n.type not in functions:
            n = n.parent
        return n if n is not None else root(node)
    definer = node.parent if node.parent is not None and node.parent.type in ("function_definition", "class_definition") \
        and field_of(node) == "name" else None
    if definer is not None:  # a function's or class's own name belongs to the scope around it
        n = definer.parent
    while n is not None:
        if n.type in functions and binds(n, name, functions):
            return n
        n = n.parent
    return root(node)


def _attribute_sites(node, old: bytes, language: str) -> list | None:
    """`self.old` in the class around `node` (a `self.new` attribute), or None when node is no such attribute."""
    parent, old = node.parent, spelled(old, language)
    if parent is None or parent.type not in ("attribute", "member_expression", "field_access"):
        return None
    obj = parent.child_by_field_name("object")
    if obj is None or obj.text.decode("utf-8", "replace") not in SELF or field_of(node) not in ("attribute", "property", "field"):
        return None
    cls = parent
    while cls is not None and cls.type not in ("class_definition", "class_declaration", "class_body", "class"):
        cls = cls.parent
    out, stack = [], [cls or root(parent)]
    while stack:
        n = stack.pop()
        if n.type == parent.type:
            o, a = n.child_by_field_name("object"), next((c for c in n.children if field_of(c) in
                                                           ("attribute", "property", "field")), None)
            if o is not None and a is not None and o.text == obj.text and spelled(a.text, language) == old:
                out.append(a)
        stack.extend(reversed(n.children))
    return out


def sites(text: str, spec: LanguageSpec, rename: Rename, at_binding: bool = True,
          budget: Budget = UNBOUNDED) -> list[tuple[int, int]]:
    """(start, end) offsets of every site in `text` still spelled rename.old in the renamed name's
    scope (its uses from budget.start on, at most budget.most), in order; [] when the change is not
    a rename tree-sitter can place. `at_binding`: only when the change renamed the name where it is
    defined (one name swapped for another at a use is an argument changed, unless a rename begun at
    its definition goes on)."""
    if (found := parsed(spec, text)) is None:
        return []
    (tree, data), byte_at = found, len(text[:rename.at].encode("utf-8"))
    node = tree.root_node.named_descendant_for_byte_range(byte_at, byte_at + len(rename.new.encode("utf-8")))
    if node is None or node.text != rename.new.encode("utf-8") or \
            spelled(node.text, spec.name) == spelled(rename.old.encode("utf-8"), spec.name):
        return []  # not the name, or a spelling of the same name (Python's NFKC)
    if spec.name == "python" and not at_binding and (param := keyword_parameter(node)) is not None:
        node = param  # a call's keyword renamed as a parameter's rename goes on: its parameter's sites
    if at_binding and not binding(node):
        return []
    old, param = rename.old.encode("utf-8"), None
    found = _attribute_sites(node, old, spec.name)
    if found is None:
        if not is_use(node):
            return []
        scope = _scope(node, rename.new.encode("utf-8"), spec)
        lo = len(text[:budget.start].encode("utf-8"))
        uses = seen_names(scope, old, spec.name, spec.name == "python", budget, lo)
        found = list(itertools.islice((n for n in uses if is_use(n)), budget.most))
        params = scope.child_by_field_name("parameters") if spec.name == "python" else None
        param = next((n for n in names(params, rename.new.encode("utf-8"), spec.name) if binding(n)), None) \
            if params else None
        if param is not None:  # a parameter's keyword at the calls of its function
            found += keyword_sites(param, old, budget)
    chars = char_offsets(data)
    spans = {(chars(n.start_byte), chars(n.end_byte)) for n in found}
    if param is not None:  # and where its function's docstring names it
        spans |= docstring_sites(scope, rename.old, chars)
    return sorted(spans)


def from_binding(text: str, spec: LanguageSpec, rename: Rename, most: int = 20,
                 budget: Budget = UNBOUNDED) -> list[tuple[int, int]]:
    """The sites of a rename going on whose last step renamed what `sites` cannot place (a mention
    in a docstring), seen from the nearest binding of the new name before it (the parameter in the def)."""
    before = list(re.finditer(r"(?<!\w)" + re.escape(rename.new) + r"(?!\w)", text[:rename.at]))
    for m in reversed(before[-most:]):
        if budget.spent():
            break
        if found := sites(text, spec, Rename(rename.old, rename.new, m.start()), budget=budget):
            return found
    return []


# a parameter named in its function's docstring: reST fields (:param x:, :type x:), a Google or NumPy
# entry (a line that starts with the name, or a bullet and the name, an optional (type), then a
# colon), and `x` / ``x``
DOC_MENTIONS = (r":(?:param|parameter|arg|argument|key|keyword|type)(?:\s+[^:\s]+)?\s+({name})\s*:",
                r"(?m)^\s*(?:[-*]\s+)?({name})(?:\s*\([^)\n]*\))?\s*:", r"(?<!`)``?({name})``?(?!`)")


def docstring_sites(fn, old: str, chars) -> set[tuple[int, int]]:
    """(start, end) of each structured mention of parameter `old` in the docstring of function `fn`."""
    body = fn.child_by_field_name("body")
    first = body.named_children[0] if body is not None and body.named_children else None
    doc = first.named_children[0] if first is not None and first.type == "expression_statement" \
        and first.named_children else None
    if doc is None or doc.type != "string":
        return set()
    text, at = doc.text.decode("utf-8", "replace"), chars(doc.start_byte)
    return {(at + m.start(1), at + m.end(1)) for pattern in DOC_MENTIONS
            for m in re.finditer(pattern.format(name=re.escape(old)), text)}


def last_rename(steps: list[Step], text: str) -> Rename | None:
    """The rename the newest of a document's steps (oldest first) made, with the steps just before it
    on the same lines (a name typed with pauses is several steps); None when it is no rename."""
    newest = joined(steps)
    if text.count("\n") < newest.first:
        return None
    return renamed("".join(newest.old), "".join(newest.new), line_offset(text, newest.first))
