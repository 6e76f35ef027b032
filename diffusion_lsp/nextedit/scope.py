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
attribute or field of the same name (`x.q`, `{q: ...}`'s key, `f(q=1)`'s keyword). Sites close
together (within GROUP_LINES) are one suggestion; the next one after the cursor comes first, then
the first in the file (a jump)."""

from __future__ import annotations

import keyword
import re
from dataclasses import dataclass

from ..context.languages import LanguageSpec, parser_for
from .history import Step
from .repeat import renames

GROUP_LINES = 3  # sites at most this many lines apart are one suggestion
IDENT = re.compile(r"[A-Za-z_]\w*\Z")
NAMES = {"identifier", "shorthand_property_identifier"}  # a name's own use; property and field names are other types
FUNCTIONS = {
    "python": {"function_definition", "lambda"},
    "javascript": {"function_declaration", "function_expression", "arrow_function", "method_definition",
                   "generator_function_declaration", "function"},
    "go": {"function_declaration", "method_declaration", "func_literal"},
    "rust": {"function_item", "closure_expression"},
    "java": {"method_declaration", "constructor_declaration", "lambda_expression"},
    "c": {"function_definition"},
    "cpp": {"function_definition", "lambda_expression"},
}
FUNCTIONS["typescript"] = FUNCTIONS["tsx"] = FUNCTIONS["javascript"]
NOT_A_USE = {("attribute", "attribute"), ("keyword_argument", "name"), ("field_access", "field"),
             ("method_invocation", "name"), ("pair_pattern", "key")}  # (parent type, field): another namespace
SELF = {"self", "cls", "this"}
# (parent type, field or None for any child): where a name is bound, not only used
BINDINGS = {("parameters", None), ("lambda_parameters", None), ("default_parameter", "name"),
            ("typed_parameter", None), ("typed_default_parameter", "name"), ("assignment", "left"),
            ("augmented_assignment", "left"), ("pattern_list", None), ("tuple_pattern", None),
            ("for_statement", "left"), ("for_in_clause", "left"), ("as_pattern_target", None),
            ("function_definition", "name"), ("class_definition", "name"), ("named_expression", "name"),
            ("formal_parameters", None), ("required_parameter", "pattern"), ("optional_parameter", "pattern"),
            ("variable_declarator", "name"), ("parameter_declaration", "name"), ("short_var_declaration", "left"),
            ("expression_list", None), ("var_spec", "name"), ("parameter", "pattern"), ("let_declaration", "pattern"),
            ("parameter_declaration", "declarator"), ("pointer_declarator", "declarator"),
            ("list_splat_pattern", None), ("dictionary_splat_pattern", None),
            ("closure_parameters", None), ("formal_parameter", "name"), ("init_declarator", "declarator"),
            ("function_declaration", "name"), ("method_declaration", "name"), ("function_item", "name")}


@dataclass(frozen=True)
class Rename:
    old: str
    new: str
    at: int  # an offset of the new name in the text, where the change was made


def renamed(old_text: str, new_text: str, at: int) -> Rename | None:
    """The rename a change made: old_text became new_text (the changed lines, starting at offset
    `at` of the document) by swapping one identifier for another, each place the same way."""
    swaps = renames(old_text, new_text)
    if not swaps or len(swaps) != 1:
        return None
    (old, new), = swaps.items()
    if not (IDENT.match(old) and IDENT.match(new)) or keyword.iskeyword(old) or keyword.iskeyword(new):
        return None
    found = re.search(r"(?<!\w)" + re.escape(new) + r"(?!\w)", new_text)
    return Rename(old, new, at + found.start()) if found else None


def _root(node):
    while node.parent is not None:
        node = node.parent
    return node


def _field(node) -> str | None:
    parent = node.parent
    for i, child in enumerate(parent.children if parent is not None else ()):
        if child.id == node.id:
            return parent.field_name_for_child(i)
    return None


def _is_use(node) -> bool:
    return node.type in NAMES and node.parent is not None and (node.parent.type, _field(node)) not in NOT_A_USE


def _names(node, name: bytes):
    """Every identifier node under `node` spelled `name`, in order."""
    stack = [node]
    while stack:
        n = stack.pop()
        if n.type in NAMES and n.text == name:
            yield n
        stack.extend(reversed(n.children))


def _binds(scope, name: bytes, functions: set[str]) -> bool:
    """Whether a Python function binds `name` itself: a parameter, or a target it assigns, not
    declared nonlocal or global."""
    params = scope.child_by_field_name("parameters")
    if params is not None and any(True for _ in _names(params, name)):
        return True
    body = scope.child_by_field_name("body")
    stack, bound = [body] if body is not None else [], False
    while stack:
        n = stack.pop()
        if n.type in ("nonlocal_statement", "global_statement") and any(True for _ in _names(n, name)):
            return False
        if n.type in functions or n.type == "class_definition":
            continue
        if n.type in ("assignment", "augmented_assignment", "for_statement", "for_in_clause", "as_pattern",
                      "with_item", "named_expression"):
            target = n.child_by_field_name("left") or n.child_by_field_name("name") or n.child_by_field_name("alias")
            if target is not None and any(_is_use(x) for x in _names(target, name)):
                bound = True
        stack.extend(n.children)
    return bound


def _scope(node, name: bytes, spec: LanguageSpec):
    """The node whose subtree is `name`'s scope, seen from its occurrence `node`."""
    functions = FUNCTIONS.get(spec.name, set())
    n = node.parent
    if spec.name != "python":
        while n is not None and n.type not in functions:
            n = n.parent
        return n if n is not None else _root(node)
    definer = node.parent if node.parent is not None and node.parent.type in ("function_definition", "class_definition") \
        and _field(node) == "name" else None
    if definer is not None:  # a function's or class's own name belongs to the scope around it
        n = definer.parent
    while n is not None:
        if n.type in functions and _binds(n, name, functions):
            return n
        n = n.parent
    return _root(node)


def binding(node) -> bool:
    """Whether this occurrence of a name defines it (a parameter, an assignment's target, a definition's
    name) rather than uses it; `self.x = ...` defines the attribute x."""
    n = node
    if n.parent is not None and n.parent.type in ("attribute", "member_expression", "field_access"):
        n = n.parent
    parent = n.parent
    if parent is None:
        return False
    if parent.type == "expression_list" and (parent.parent is None or parent.parent.type != "short_var_declaration"):
        return False
    return (parent.type, None) in BINDINGS or (parent.type, _field(n)) in BINDINGS


def _attribute_sites(node, old: bytes) -> list | None:
    """`self.old` in the class around `node` (a `self.new` attribute), or None when node is no such attribute."""
    parent = node.parent
    if parent is None or parent.type not in ("attribute", "member_expression", "field_access"):
        return None
    obj = parent.child_by_field_name("object")
    if obj is None or obj.text.decode("utf-8", "replace") not in SELF or _field(node) not in ("attribute", "property", "field"):
        return None
    cls = parent
    while cls is not None and cls.type not in ("class_definition", "class_declaration", "class_body", "class"):
        cls = cls.parent
    out, stack = [], [cls or _root(parent)]
    while stack:
        n = stack.pop()
        if n.type == parent.type:
            o, a = n.child_by_field_name("object"), next((c for c in n.children if _field(c) in
                                                           ("attribute", "property", "field")), None)
            if o is not None and a is not None and o.text == obj.text and a.text == old:
                out.append(a)
        stack.extend(reversed(n.children))
    return out


def sites(text: str, spec: LanguageSpec, rename: Rename, at_binding: bool = True) -> list[tuple[int, int]]:
    """(start, end) offsets of every site in `text` still spelled rename.old in the renamed name's
    scope, in order; [] when the change is not a rename tree-sitter can place. `at_binding`: only when
    the change renamed the name where it is defined (one name swapped for another at a use is an
    argument changed, unless a rename begun at its definition goes on)."""
    parser = parser_for(spec)
    if parser is None:
        return []
    data = text.encode("utf-8")
    byte_at = len(text[:rename.at].encode("utf-8"))
    tree = parser.parse(data)
    node = tree.root_node.named_descendant_for_byte_range(byte_at, byte_at + len(rename.new.encode("utf-8")))
    if node is None or node.text != rename.new.encode("utf-8"):
        return []
    if at_binding and not binding(node):
        return []
    old = rename.old.encode("utf-8")
    found = _attribute_sites(node, old)
    if found is None:
        if not _is_use(node):
            return []
        scope = _scope(node, rename.new.encode("utf-8"), spec)
        found = [n for n in _names(scope, old) if _is_use(n)
                 and (spec.name != "python" or _python_sees(n, scope, old))]
    chars = _char_offsets(data)
    return sorted({(chars(n.start_byte), chars(n.end_byte)) for n in found})


def _python_sees(node, scope, old: bytes) -> bool:
    """Whether a use of `old` resolves to `scope`: no function between them binds it."""
    functions = FUNCTIONS["python"]
    n = node.parent
    while n is not None and n != scope:
        if n.type in functions and _binds(n, old, functions):
            return False
        n = n.parent
    return True


def _char_offsets(data: bytes):
    def chars(byte: int) -> int:
        return len(data[:byte].decode("utf-8", "replace"))
    return chars


def next_group(text: str, found: list[tuple[int, int]], cursor: int, new: str) -> tuple[int, int, str] | None:
    """(start, end, what that span becomes) for the group of sites to suggest: the first group that
    ends at or after `cursor`, else the first in the file; None when there are no sites."""
    if not found:
        return None
    groups: list[list[tuple[int, int]]] = []
    for site in found:
        if groups and text.count("\n", groups[-1][-1][1], site[0]) <= GROUP_LINES:
            groups[-1].append(site)
        else:
            groups.append([site])
    group = next((g for g in groups if g[-1][1] >= cursor), groups[0])
    start, end, out, at = group[0][0], group[-1][1], [], group[0][0]
    for s, e in group:
        out += [text[at:s], new]
        at = e
    return start, end, "".join(out)


def last_rename(steps: list[Step], text: str) -> Rename | None:
    """The rename the newest of a document's steps (oldest first) made, with the steps just before it
    on the same lines (a name typed with pauses is several steps); None when it is no rename."""
    newest = steps[-1]
    old = newest.old
    for step in reversed(steps[:-1]):
        if step.first != newest.first or step.new != old:
            break
        old = step.old
    start = 0
    for _ in range(newest.first):
        start = text.find("\n", start) + 1
        if start == 0:
            return None
    return renamed("".join(old), "".join(newest.new), start)


def follow(text: str, spec: LanguageSpec, steps: list[Step], cursor: int,
           going_on: tuple[str, str] | None = None) -> tuple[Rename, tuple[int, int, str]] | None:
    """(the last rename, the next group of its remaining sites: next_group), or None. `going_on`: the
    (old, new) of a rename this document began at a definition, whose next step may be at a use."""
    rename = last_rename(steps, text) if steps else None
    if rename is None:
        return None
    found = sites(text, spec, rename, at_binding=(rename.old, rename.new) != going_on)
    group = next_group(text, found, cursor, rename.new)
    return None if group is None else (rename, group)


def follow_rename(current: str, spec: LanguageSpec, steps: list[Step], cursor: tuple[int, int]) -> str | None:
    """The whole file with the next group of the last rename's sites renamed, or None: `eval nep`'s
    view of `follow`. `cursor`: 0-based (line, index in the line)."""
    lines = current.splitlines(keepends=True)
    found = follow(current, spec, steps, sum(map(len, lines[:cursor[0]])) + cursor[1])
    if found is None:
        return None
    _, (start, end, text) = found
    return current[:start] + text + current[end:]
