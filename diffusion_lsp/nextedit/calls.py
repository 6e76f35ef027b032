"""A changed signature's calls: the calls of a function found with tree-sitter in the file, and
each call's edit that passes a change of its parameters on; in Python, JavaScript and TypeScript
(`Grammar`: a def, a function declaration or a method; a call, its argument list, `self.f` /
`this.f`). Which change a step made is signature.py's.

- A parameter added without a default: each call that still has the old arity gets an argument
  for it, spelled as the parameter (`area(w, h)` -> `area(w, h, scale)`), positionally where the
  call passes its arguments so, else (Python) as a keyword (`scale=scale`). A parameter with a
  default, or TypeScript's optional `x?: T`, is not passed.
- A parameter removed: each call that still passes it loses that argument (positional or keyword).
- A parameter renamed (scope.py renames its uses in the body): each call's keyword argument of the
  old name (`f(width=3)` -> `f(max_width=3)`): `keyword_sites`, which scope.py adds to the rename's.
The calls of a function are `name(...)` where `name` resolves to the scope that defines it (no
function in between binds it); of a method, `self.name(...)` / `cls.name(...)` /
`this.name(...)` in its class; in another open Python document (imported.py), `name(...)` imported
from the module, or `module.name(...)` through it. A call with `*args`, `**kwargs` or `...spread`, a
definition with them or with a destructured parameter, or a call whose arity fits neither signature
is left alone: nothing is guessed where the call cannot be read."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from .budget import UNBOUNDED, Budget
from .names import FUNCTIONS, SELF, binding, char_offsets, names, preorder, root, scope_of, seen_names, spelled
from .rule import Change

PARAM_NODES = {"identifier", "typed_parameter", "default_parameter", "typed_default_parameter"}
SPLATS = {"list_splat_pattern", "dictionary_splat_pattern", "list_splat", "dictionary_splat", "spread_element"}


@dataclass(frozen=True)
class Grammar:
    """A language's definitions and calls, as this module reads them."""

    definitions: frozenset[str]  # node types of a named function with parameters
    call: str  # a call's node type, its "function" and "arguments" fields
    arguments: str  # the argument list's node type
    member: tuple[str, str, str]  # `self.f` / `this.f`: node type, object field, name field


PYTHON = Grammar(frozenset({"function_definition"}), "call", "argument_list", ("attribute", "object", "attribute"))
SCRIPT = Grammar(frozenset({"function_declaration", "generator_function_declaration", "method_definition"}),
                 "call_expression", "arguments", ("member_expression", "object", "property"))
GRAMMARS = {"python": PYTHON, "javascript": SCRIPT, "typescript": SCRIPT, "tsx": SCRIPT}


def grammar_of(fn) -> Grammar:
    return PYTHON if fn.type == "function_definition" else SCRIPT


@dataclass(frozen=True)
class Param:
    name: str
    default: bool
    keyword_only: bool


@dataclass(frozen=True)
class SignatureChange(Change):
    """A parameter `added` to or `removed` from a definition (index into the parameter list after /
    before, self excluded)."""

    function: str
    kind: str  # "added" or "removed"
    index: int
    param: Param
    old_params: tuple[Param, ...]

    @property
    def after(self) -> tuple[Param, ...]:
        """The parameters once the change is made."""
        old, i = self.old_params, self.index
        return old[:i] + (self.param,) + old[i:] if self.kind == "added" else old[:i] + old[i + 1:]


def parameters(fn) -> tuple[tuple[Param, ...], bool] | None:
    """(the parameters of a definition node, self/cls excluded for a Python method; whether it is a
    method), or None when it has *args, **kwargs, ...rest, a destructured parameter or anything else
    a call cannot be matched against."""
    params = fn.child_by_field_name("parameters")
    if params is None:
        return None
    if grammar_of(fn) is SCRIPT:
        found = _script_parameters(params)
        return None if found is None else (found, fn.type == "method_definition")
    out, keyword_only = [], False
    for node in params.named_children:
        if node.type == "keyword_separator":
            keyword_only = True
            continue
        if node.type == "positional_separator":
            continue
        if node.type not in PARAM_NODES:  # *args, **kwargs, an error node
            return None
        ident = node if node.type == "identifier" else (node.child_by_field_name("name") or node.named_children[0])
        out.append(Param(ident.text.decode("utf-8", "replace"), "default" in node.type, keyword_only))
    method = _class_of(fn) is not None
    if method and out and out[0].name in SELF:
        out = out[1:]
    return tuple(out), method


def _class_of(fn):
    """The Python class whose body defines `fn`, decorated or not; None for a function."""
    n = fn.parent
    n = n.parent if n is not None and n.type == "decorated_definition" else n
    return n.parent if n is not None and n.type == "block" and n.parent is not None \
        and n.parent.type == "class_definition" else None


def _script_parameters(params) -> tuple[Param, ...] | None:
    """JavaScript's and TypeScript's parameters: `x`, `x = 1`, `x: T`, `x?: T`, `x: T = 1`."""
    out = []
    for node in params.named_children:
        if node.type == "comment":
            continue
        ident, default = node, False
        if node.type == "assignment_pattern":
            ident, default = node.child_by_field_name("left"), True
        elif node.type in ("required_parameter", "optional_parameter"):
            ident = node.child_by_field_name("pattern")
            default = node.type == "optional_parameter" or node.child_by_field_name("value") is not None
        if ident is None or ident.type != "identifier" or ident.text == b"this":
            return None  # ...rest, {destructured}, [destructured]
        out.append(Param(ident.text.decode("utf-8", "replace"), default, False))
    return tuple(out)


def calls(fn, method: bool, budget: Budget = UNBOUNDED, lo: int = 0) -> Iterator:
    """The argument lists of the calls of definition `fn` in its file, from byte `lo` on, in order
    (until `budget` is spent)."""
    g, name = grammar_of(fn), fn.child_by_field_name("name").text
    if not method:
        scope, functions = fn.parent, FUNCTIONS["python" if g is PYTHON else "javascript"]
        while scope is not None and scope.type not in functions:
            scope = scope.parent
        yield from named_calls(scope if scope is not None else root(fn), name, g, budget, lo)
        return
    cls = _class_of(fn) if g is PYTHON else fn.parent.parent
    first = fn.child_by_field_name("parameters").named_children[:1]  # a def with no self, called bare in the class
    bare = g is PYTHON and not (first and first[0].text.split(b":")[0].split(b"=")[0].strip().decode() in SELF)
    for n in preorder(cls, lo, budget):  # the class
        callee = n.child_by_field_name("function") if n.type == g.call else None
        if callee is not None and callee.type == g.member[0]:
            obj, attr = callee.child_by_field_name(g.member[1]), callee.child_by_field_name(g.member[2])
            if obj is not None and attr is not None and obj.text.decode() in SELF and attr.text == name:
                yield from _arguments(n, g)
        elif bare and callee is not None and callee.type == "identifier" and callee.text == name and scope_of(n) == cls:
            yield from _arguments(n, g)  # fractions' `__add__, __radd__ = _operator_fallbacks(_add, operator.add)`


def named_calls(scope, name: bytes, g: Grammar = PYTHON, budget: Budget = UNBOUNDED, lo: int = 0) -> Iterator:
    """The argument lists of the calls `name(...)` in `scope` where `name` is the scope's own (no
    function in between binds it), from byte `lo` on, in order."""
    for ident in seen_names(scope, name, "python" if g is PYTHON else None, True, budget, lo):
        call = ident.parent
        if call is not None and call.type == g.call and call.child_by_field_name("function") == ident:
            yield from _arguments(call, g)


def _arguments(call, g: Grammar) -> list:
    args = call.child_by_field_name("arguments")
    return [args] if args is not None and args.type == g.arguments else []


def edits_of(calls_args: Iterable, change: SignatureChange, data: bytes,
             budget: Budget = UNBOUNDED) -> list[tuple[int, int, str]]:
    """(start, end, new text), character offsets, of the calls (argument nodes) the change reaches: budget.most."""
    chars, out = char_offsets(data), []
    for args in calls_args:
        if budget.full(len(out)):
            break
        if (edit := _rewrite(args, change)) is not None:
            out.append((chars(edit[0]), chars(edit[1]), edit[2]))
    return out


def _rewrite(args, change: SignatureChange) -> tuple[int, int, str] | None:
    """The call's edit (start byte, end byte, new text), the smallest that passes the change on and
    keeps the call's layout, or None when it needs none or cannot be read."""
    items = args.named_children
    if any(a.type in SPLATS or a.type == "comment" for a in items):
        return None
    positional = [a for a in items if a.type != "keyword_argument"]
    keywords = {a.child_by_field_name("name").text.decode(): a for a in items if a.type == "keyword_argument"}
    if items[len(positional):] != [a for a in items if a.type == "keyword_argument"]:
        return None  # a positional argument after a keyword: not Python we can read
    p, name = change.param, change.param.name
    old, new = change.old_params, change.after
    if not _fits(old, len(items), keywords):
        return None  # written for another signature: updated already, or another function
    if _fits(new, len(items), keywords) and (change.kind == "removed" or name in keywords or (
            change.index < len(positional) and positional[change.index].text.decode("utf-8", "replace") == name)):
        return None  # fits the new one too, and passes the new parameter by its name already
    if change.kind == "removed":
        gone = keywords.get(name) or (positional[change.index] if len(positional) > change.index else None)
        if gone is None:
            return None
        i = items.index(gone)
        if i + 1 < len(items):  # up to the next argument
            return gone.start_byte, items[i + 1].start_byte, ""
        return (items[i - 1].end_byte if i else gone.start_byte), gone.end_byte, ""
    if p.default or name in keywords:
        return None
    arg = name if not p.keyword_only and change.index == len(positional) else f"{name}={name}"
    if not p.keyword_only and change.index < len(items) and change.index <= len(positional):
        at, indent = items[change.index], _own_line(args, items[change.index])
        return at.start_byte, at.start_byte, f"{name}, " if indent is None else f"{name},\n{indent}"
    if not items:
        return args.start_byte + 1, args.start_byte + 1, arg
    last = items[-1]
    rest = args.text[last.end_byte - args.start_byte:]
    if rest.lstrip(b" \t").startswith(b","):  # a trailing comma: the new argument after it, as the others stand
        comma = last.end_byte + rest.index(b",") + 1
        indent = _own_line(args, last)
        return comma, comma, f" {arg}," if indent is None else f"\n{indent}{arg},"
    return last.end_byte, last.end_byte, f", {arg}"


def _own_line(args, node) -> str | None:
    """The indentation before `node` when it starts a line of a call's arguments, else None."""
    head = args.text[:node.start_byte - args.start_byte]
    if b"\n" not in head or head.rsplit(b"\n", 1)[1].strip(b" \t"):
        return None
    return head.rsplit(b"\n", 1)[1].decode("utf-8", "replace")


def _fits(params: tuple[Param, ...], n: int, keywords) -> bool:
    """Whether a call of n arguments, `keywords` among them, can bind to `params`."""
    return sum(not p.default for p in params) <= n <= len(params) and all(k in {p.name for p in params} for k in keywords)


def keyword_sites(node, old: bytes, budget: Budget = UNBOUNDED) -> list:
    """The keyword-argument names spelled `old` at the calls of the function whose parameter `node`
    (an identifier, just renamed) is; [] when it is no parameter of a Python def."""
    fn = node.parent
    while fn is not None and fn.type not in ("parameters", "function_definition", "lambda_parameters"):
        fn = fn.parent
    if fn is None or fn.type != "parameters" or not binding(node):
        return []
    fn = fn.parent
    found = parameters(fn) if fn.type == "function_definition" else None
    if found is None:
        return []
    out = []
    for args in calls(fn, found[1], budget):
        for a in args.named_children:
            key = a.child_by_field_name("name") if a.type == "keyword_argument" else None
            if key is not None and spelled(key.text, "python") == spelled(old, "python"):
                out.append(key)
    return out


def keyword_parameter(node):
    """The parameter (its identifier in the def) that `node`, a keyword argument's name at a call,
    names; None when it is none or the call's function is not defined in the file."""
    arg = node.parent
    if arg is None or arg.type != "keyword_argument" or arg.child_by_field_name("name") != node:
        return None
    args, name = arg.parent, node.text
    stack = [root(node)]
    while stack:
        n = stack.pop()
        stack.extend(n.children)
        if n.type != "function_definition" or (found := parameters(n)) is None:
            continue
        params = n.child_by_field_name("parameters")
        ident = next((x for x in names(params, name) if binding(x)), None)
        if ident is not None and any(a == args for a in calls(n, found[1])):
            return ident
    return None
