"""The calls in another open document of a function whose signature the user changed in the
document that defines it (calls.py finds the change): imported from it (`from pkg.module import
function [as f]`: `f(...)`), or through the module (`import pkg.module [as m]`, `from pkg import
module [as m]`: `pkg.module.function(...)`, `m.function(...)`). Python only: an import says where
a name comes from. The other documents are asked in their order (the most recently edited first);
the first whose change has calls here is followed."""

from __future__ import annotations

import heapq
import re
from collections.abc import Iterator

from ..candidate import Source
from ..context.languages import LanguageSpec
from .budget import UNBOUNDED, Budget
from .calls import SignatureChange, edits_of, named_calls
from .history import joined
from .names import parsed, preorder
from .rule import NOTHING, Documents, History, Other, Proposal, sites_of
from .signature import pending
from .unfinished import unfinished


class Imported:
    """A signature changed in another open document, at its calls in this one. A document's step
    that leaves its line half typed is no change yet: the change it followed before still is."""

    source, whole_step = Source.IMPORTED, False

    def __call__(self, documents: Documents, history: History) -> Proposal:
        budget = history.budget
        for other in documents.others:
            if budget.spent():
                break
            change = self._change(documents, history, other)
            found = [] if change is None else imported_edits(documents.text, documents.spec, change, other.module,
                                                             budget)
            if found:
                return Proposal(sites_of(found, self.source, other.uri), change)
            if change is not None and budget.start > 0 and imported_edits(
                    documents.text, documents.spec, change, other.module, budget.at(0)):
                return Proposal((), change)  # its calls lie above the walk's start: this document's, from the top
        return NOTHING

    @staticmethod
    def _change(documents: Documents, history: History, other: Other) -> SignatureChange | None:
        """The signature change `other` made that documents.text may call, or None."""
        spec, text = documents.spec, documents.text
        if spec.name != "python" or not re.search(r"(?<!\w)" + re.escape(other.module) + r"(?!\w)", text):
            return None  # an import names its module: a document never spelling it is not parsed (nor its own)
        steps = history.of(other.uri)
        steps = [] if steps and unfinished(joined(steps), other.text, spec) else steps  # half typed
        going_on = history.going_on(other.uri)
        return pending(steps, other.text, spec, going_on if isinstance(going_on, SignatureChange) else None)


def imported_edits(text: str, spec: LanguageSpec, change: SignatureChange, module: str,
                   budget: Budget = UNBOUNDED) -> list[tuple[int, int, str]]:
    """(start, end, new text) of the calls in `text` (another document) of change.function defined in
    `module` (the defining file's name without .py): imported from it (`from pkg.module import
    function [as f]`: `f(...)`), or through the module (`import pkg.module [as m]`, `from pkg import
    module [as m]`: `pkg.module.function(...)`, `m.function(...)`)."""
    if spec.name != "python" or (found := parsed(spec, text)) is None:
        return []
    (tree, data), local, through = found, None, set()
    for stmt in tree.root_node.children:
        if stmt.type not in ("import_from_statement", "import_statement"):
            continue
        src = stmt.child_by_field_name("module_name")
        from_module = src is not None and src.text.decode("utf-8", "replace").rsplit(".", 1)[-1] == module
        for i, child in enumerate(stmt.children):
            if stmt.field_name_for_child(i) != "name":
                continue
            name = child.child_by_field_name("name") if child.type == "aliased_import" else child
            alias = child.child_by_field_name("alias") if child.type == "aliased_import" else None
            spelled = "" if name is None else name.text.decode("utf-8", "replace")
            if from_module and spelled == change.function:
                local = (alias or name).text
            elif spelled.rsplit(".", 1)[-1] == module and (stmt.type == "import_statement" or src is not None):
                through.add((alias or name).text)
    lo = len(text[:budget.start].encode("utf-8"))
    named = named_calls(tree.root_node, local, budget=budget, lo=lo) if local is not None else iter(())
    through_module = _module_calls(tree.root_node, through, change.function.encode(), budget, lo)
    return edits_of(heapq.merge(named, through_module, key=lambda a: a.start_byte), change, data, budget)


def _module_calls(node, modules: set[bytes], function: bytes, budget: Budget, lo: int) -> Iterator:
    """The argument lists of the calls `module.function(...)` under `node`, for each of `modules`,
    from byte `lo` on, in order."""
    for n in preorder(node, lo, budget) if modules else ():
        callee = n.child_by_field_name("function") if n.type == "call" else None
        if callee is not None and callee.type == "attribute":
            obj, attr = callee.child_by_field_name("object"), callee.child_by_field_name("attribute")
            args = n.child_by_field_name("arguments")
            if obj is not None and attr is not None and obj.text in modules and attr.text == function \
                    and args is not None and args.type == "argument_list":
                yield args
