"""Names in a tree-sitter tree: which identifier nodes are uses of a name, which bind it, which
function scopes bind it (Python's rules: parameters and assignment targets, `nonlocal`/`global`),
and the character offsets of nodes. scope.py (renames), calls.py (signatures) and analogous.py
(arguments) stand on these, and parse a text through `parsed`: one follow asks each of them in
turn about the same document and the same document before the step, parsed once each."""

from __future__ import annotations

import functools
import keyword
import unicodedata

from ..context.languages import LanguageSpec, parser_for

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


def root(node):
    while node.parent is not None:
        node = node.parent
    return node


def field_of(node) -> str | None:
    parent = node.parent
    for i, child in enumerate(parent.children if parent is not None else ()):
        if child.id == node.id:
            return parent.field_name_for_child(i)
    return None


def is_use(node) -> bool:
    return node.type in NAMES and node.parent is not None and (node.parent.type, field_of(node)) not in NOT_A_USE


def is_name(word: str) -> bool:
    """Whether `word` is an identifier and no keyword: a letter or `_` of any script, then letters,
    digits and marks (XID_Start, XID_Continue: str.isidentifier), as Python, JavaScript, Rust and Go
    take them; `πw`, `𠀀x`, `é`, `𝓌idth` are names, which an ASCII pattern missed."""
    return word.isidentifier() and not keyword.iskeyword(word)


# how a language compares names: Python's NFKC (PEP 3131: `𝓌idth` is `width`), Rust's NFC; the
# others code point by code point
FOLD = {"python": "NFKC", "rust": "NFC"}


def spelled(name: bytes, language: str | None) -> bytes:
    """`name` (UTF-8) as `language` compares it."""
    form = FOLD.get(language or "")
    return name if form is None or name.isascii() else \
        unicodedata.normalize(form, name.decode("utf-8", "replace")).encode("utf-8")


def names(node, name: bytes, language: str | None = None):
    """Every identifier node under `node` that is `name` in `language` (spelled; None: spelled
    alike), in order."""
    want, stack = spelled(name, language), [node]
    while stack:
        n = stack.pop()
        if n.type in NAMES and (n.text == want or language in FOLD and not n.text.isascii()
                                and spelled(n.text, language) == want):
            yield n
        stack.extend(reversed(n.children))


def binds(scope, name: bytes, functions: set[str]) -> bool:
    """Whether a Python function binds `name` itself: a parameter, or a target it assigns, not
    declared nonlocal or global."""
    params = scope.child_by_field_name("parameters")
    if params is not None and any(True for _ in names(params, name, "python")):
        return True
    body = scope.child_by_field_name("body")
    stack, bound = [body] if body is not None else [], False
    while stack:
        n = stack.pop()
        if n.type in ("nonlocal_statement", "global_statement") and any(True for _ in names(n, name, "python")):
            return False
        if n.type in functions or n.type == "class_definition":
            continue
        if n.type in ("assignment", "augmented_assignment", "for_statement", "for_in_clause", "as_pattern",
                      "with_item", "named_expression"):
            target = n.child_by_field_name("left") or n.child_by_field_name("name") or n.child_by_field_name("alias")
            if target is not None and any(is_use(x) for x in names(target, name, "python")):
                bound = True
        stack.extend(n.children)
    return bound


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
    return (parent.type, None) in BINDINGS or (parent.type, field_of(n)) in BINDINGS


def python_sees(node, scope, old: bytes) -> bool:
    """Whether a use of `old` resolves to `scope`: no function between them binds it."""
    functions = FUNCTIONS["python"]
    n = node.parent
    while n is not None and n != scope:
        if n.type in functions and binds(n, old, functions):
            return False
        n = n.parent
    return True


def script_sees(node, scope, name: bytes) -> bool:
    """JavaScript's and TypeScript's python_sees: no function between them has a parameter `name` or
    declares it in its body (`let`/`const`/`var name`, `function name`)."""
    n = node.parent
    while n is not None and n != scope:
        if n.type in FUNCTIONS["javascript"] and _script_binds(n, name):
            return False
        n = n.parent
    return True


def _script_binds(fn, name: bytes) -> bool:
    params = fn.child_by_field_name("parameters") or fn.child_by_field_name("parameter")
    if params is not None and any(binding(x) for x in names(params, name)):
        return True
    body = fn.child_by_field_name("body")
    for stmt in body.named_children if body is not None else ():
        declared = [d.child_by_field_name("name") for d in stmt.named_children if d.type == "variable_declarator"] \
            if stmt.type in ("lexical_declaration", "variable_declaration") else [stmt.child_by_field_name("name")]
        if any(d is not None and d.text == name for d in declared):
            return True
    return False


def char_offsets(data: bytes):
    def chars(byte: int) -> int:
        return len(data[:byte].decode("utf-8", "replace"))
    return chars


@functools.lru_cache(maxsize=8)
def parsed(spec: LanguageSpec, text: str):
    """(the tree of `text`, its UTF-8 bytes), or None for a language without a parser."""
    parser = parser_for(spec)
    if parser is None:
        return None
    data = text.encode("utf-8")
    return parser.parse(data), data
