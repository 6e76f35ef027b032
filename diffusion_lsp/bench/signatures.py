"""`bench renames`' parameter kind: a parameter added to a function that has calls in its file, and
Python's own judgement of each call afterwards.

The parameter (`extra_2`) is added where a user would type it: before the first parameter with a
default, else after the last positional one. The calls that must pass it are those Python resolves
to the function: `name(...)` in a scope where `name` is not a local of its own (symtable), or
`self.name(...)` in the method's class; a call with `*args`/`**kwargs` is not counted, as it may
pass anything. A call is right when `inspect.Signature.bind` binds its arguments under the new
signature to what they bound under the old one, and the new parameter to the name `extra_2`;
nothing outside those calls' arguments may change. This says nothing of how the server finds them
(tree-sitter, nextedit/calls.py)."""

from __future__ import annotations

import ast
import copy
import inspect
import symtable
from dataclasses import dataclass

NEW = "extra_2"


@dataclass(frozen=True)
class Added:
    kind = "argument"
    name: str  # the function
    line: int  # where the parameter is typed (0-based line, column)
    col: int
    insert: str  # what is typed there
    method: bool
    calls: int  # calls that must pass it

    @property
    def size(self) -> int:
        """Sites: the definition and its calls."""
        return 1 + self.calls


def _signature(fn: ast.FunctionDef, method: bool) -> inspect.Signature:
    params = fn.args.posonlyargs + fn.args.args
    first_default = len(params) - len(fn.args.defaults)
    out = [inspect.Parameter(a.arg, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                             default=None if i >= first_default else inspect.Parameter.empty)
           for i, a in enumerate(params)][1 if method else 0:]
    out += [inspect.Parameter(a.arg, inspect.Parameter.KEYWORD_ONLY,
                              default=None if d is not None else inspect.Parameter.empty)
            for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults)]
    return inspect.Signature(out)


def _calls(tree: ast.AST, fn_name: str, method: bool, top: symtable.SymbolTable, cls: str | None) -> list[ast.Call]:
    """The calls Python resolves to the function, in order of position."""
    out = []
    if method:
        for c in ast.walk(tree):
            if isinstance(c, ast.ClassDef) and c.name == cls:
                out += [n for n in ast.walk(c) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
                        and isinstance(n.func.value, ast.Name) and n.func.value.id == "self" and n.func.attr == fn_name]
    else:
        local_in = {(t.get_lineno(), t.get_name()) for t in _tables(top)
                    if t.get_type() == "function" and fn_name in t.get_identifiers() and t.lookup(fn_name).is_local()}
        scopes = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))]
        for scope in [tree] + scopes:
            if scope is not tree and (scope.lineno, getattr(scope, "name", "lambda")) in local_in:
                continue
            out += [n for n in _own(scope) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)
                    and n.func.id == fn_name]
    return sorted({id(c): c for c in out}.values(), key=lambda c: (c.lineno, c.col_offset))


def column(lines: list[str], line: int, offset: int) -> int:
    """The character column of ast's `col_offset` (UTF-8 bytes, not characters: a `'😀'` earlier on
    the line counts 4) on 0-based `line` of `lines`."""
    return len(lines[line].encode("utf-8")[:offset].decode("utf-8", "replace"))


def keyword_sites(tree: ast.Module, top: symtable.SymbolTable, fn: ast.AST, param: str,
                  lines: list[str]) -> list[tuple[int, int]]:
    """(line, character column), 0-based, of `param=` at the calls Python resolves to `fn` (a def in
    the module or a method), whose text is `lines`: renamed with the parameter."""
    if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return []
    cls = next((c for c in ast.walk(tree) if isinstance(c, ast.ClassDef) and fn in c.body), None)
    if cls is None and fn not in tree.body:
        return []
    calls = _calls(tree, fn.name, cls is not None, top, cls.name if cls else None)
    return [(k.lineno - 1, column(lines, k.lineno - 1, k.col_offset)) for c in calls for k in c.keywords
            if k.arg == param]


def _tables(t: symtable.SymbolTable):
    yield t
    for c in t.get_children():
        yield from _tables(c)


def _own(scope: ast.AST):
    """The nodes of `scope` outside its nested functions."""
    stack = list(ast.iter_child_nodes(scope))
    while stack:
        n = stack.pop()
        yield n
        if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(n))


def _bound(sig: inspect.Signature, call: ast.Call) -> dict | None:
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return None
    try:
        return dict(sig.bind(*[ast.dump(a) for a in call.args], **{k.arg: ast.dump(k.value) for k in call.keywords})
                    .arguments)
    except TypeError:
        return None


def targets(text: str, tree: ast.Module, top: symtable.SymbolTable) -> list[Added]:
    """Every function with a fixed parameter list and at least one call that fits it."""
    out, lines = [], text.split("\n")
    for cls in [None] + [c for c in ast.walk(tree) if isinstance(c, ast.ClassDef)]:
        body = tree.body if cls is None else cls.body
        for fn in body:
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.args.vararg or fn.args.kwarg:
                continue
            method = cls is not None
            params = fn.args.posonlyargs + fn.args.args
            if method and (not params or params[0].arg not in ("self", "cls")) or fn.decorator_list:
                continue
            sig = _signature(fn, method)
            calls = [c for c in _calls(tree, fn.name, method, top, cls.name if cls else None) if _bound(sig, c)]
            if not calls:
                continue
            first_default = len(params) - len(fn.args.defaults)
            if first_default < len(params):
                at, insert = params[first_default], f"{NEW}, "
                line, col = at.lineno - 1, at.col_offset
            elif len(params) > (1 if method else 0):
                line, col, insert = params[-1].end_lineno - 1, params[-1].end_col_offset, f", {NEW}"
            else:
                continue  # no parameter to type it beside
            out.append(Added(fn.name, line, column(lines, line, col), insert, method, len(calls)))
    return out


def judge(before: str, after: str, target: Added) -> tuple[bool, bool]:
    """(every call passes the new parameter rightly, nothing is wrong so far): `after` is `before`
    with the parameter added and some edits applied."""
    try:
        old_tree, new_tree = ast.parse(before), ast.parse(after)
    except SyntaxError:
        return False, False
    top = symtable.symtable(after, "<file>", "exec")
    fn = next((f for f in ast.walk(new_tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))
               and f.name == target.name and NEW in {a.arg for a in f.args.posonlyargs + f.args.args}), None)
    if fn is None:  # an edit undid the parameter, or renamed the function
        return False, False
    cls = next((c.name for c in ast.walk(new_tree) if isinstance(c, ast.ClassDef) and fn in c.body), None)
    new_sig = _signature(fn, target.method)
    old_sig = inspect.Signature([p for p in new_sig.parameters.values() if p.name != NEW])
    old_calls = _calls(old_tree, target.name, target.method, symtable.symtable(before, "<file>", "exec"), cls)
    new_calls = _calls(new_tree, target.name, target.method, top, cls)
    if len(old_calls) != len(new_calls) or _stripped(old_tree, old_calls) != _stripped(new_tree, new_calls):
        return False, False
    done, right = True, True
    for old, new in zip(old_calls, new_calls):
        was = _bound(old_sig, old)
        if was is None:
            right &= ast.dump(old) == ast.dump(new)
            continue
        now = _bound(new_sig, new)
        ok = now == {**was, NEW: ast.dump(ast.Name(NEW, ast.Load()))} if now is not None else False
        unchanged = ast.dump(old) == ast.dump(new)
        done &= ok
        right &= ok or unchanged
    return done, right


def _stripped(tree: ast.AST, calls: list[ast.Call]) -> str:
    """The tree's dump with those calls' arguments taken out."""
    tree = copy.deepcopy(tree)
    spots = {(c.lineno, c.col_offset) for c in calls}
    for n in ast.walk(tree):
        if isinstance(n, ast.Call) and (n.lineno, n.col_offset) in spots:
            n.args, n.keywords = [], []
    return ast.dump(tree)
