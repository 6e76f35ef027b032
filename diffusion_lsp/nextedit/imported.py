"""The calls in another open document of a function whose signature the user changed in the
document that defines it (calls.py finds the change): imported from it (`from pkg.module import
function [as f]`: `f(...)`), or through the module (`import pkg.module [as m]`, `from pkg import
module [as m]`: `pkg.module.function(...)`, `m.function(...)`). Python only: an import says where
a name comes from."""

from __future__ import annotations

from ..context.languages import LanguageSpec
from .calls import Change, edits_of, named_calls
from .names import parsed


def imported_edits(text: str, spec: LanguageSpec, change: Change, module: str) -> list[tuple[int, int, str]]:
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
    out = named_calls(tree.root_node, local) if local is not None else []
    return sorted(edits_of(out + _module_calls(tree.root_node, through, change.function.encode()), change, data))


def _module_calls(node, modules: set[bytes], function: bytes) -> list:
    """The argument lists of the calls `module.function(...)` under `node`, for each of `modules`."""
    out, stack = [], [node] if modules else []
    while stack:
        n = stack.pop()
        callee = n.child_by_field_name("function") if n.type == "call" else None
        if callee is not None and callee.type == "attribute":
            obj, attr = callee.child_by_field_name("object"), callee.child_by_field_name("attribute")
            if obj is not None and attr is not None and obj.text in modules and attr.text == function:
                out.append(n.child_by_field_name("arguments"))
        stack.extend(n.children)
    return [a for a in out if a is not None and a.type == "argument_list"]
