"""The chat-template environment, bounded: transformers' (jinja2's ImmutableSandboxedEnvironment with
its `tojson`, `raise_exception`, `strftime_now`, `dict`, `namespace` and `{% generation %}`), with a
wall-clock budget and a size budget on every render, so that a template from a checkpoint folder or
`--chat-template FILE` (or a message it is given) cannot hold the thread that renders it, nor fill its
memory.

The sandbox alone stops a template from reaching Python; it does not stop `range(10**5)` nested
twice, `'x' * 10**10`, `messages * 10**9`, `tojson(indent=10**9)`, `lipsum(n=10**6)` or
`10**(10**8)`. Here every step a template can repeat or grow through passes a check of the render's
budget (template_bounds.py: the bounds and the checks): each item of a `for` loop (and of a `range`),
each operator (`call_binop`/`call_unop`), call, filter, attribute and item lookup checks the clock;
what an operator, a call, a filter, a `~` or a `namespace` assignment builds is refused past MAX_VALUE
items; and every piece a template outputs (`{{ }}` and its literal text, also inside `{% set %}`
blocks and macros) counts toward MAX_WORK characters. `lipsum` is gone, `tojson`'s indent is at most
MAX_INDENT. A render past a bound is `TemplateBound` (a jinja2 SecurityError: one line naming the
bound)."""

from __future__ import annotations

import functools
import json

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

from .template_bounds import (MAX_INDENT, MAX_POWER_BITS, MAX_VALUE, Range, TemplateBound, check_widths, current,
                              foresee, iterate, length, rendering, sized, small_int, text_size)


@jinja2.pass_context  # as the filters below: never folded into a constant when the template compiles
def _emit(context, value):
    """One piece of a template's output, counted."""
    current().spend(len(value) if isinstance(value, str) else text_size(value) if value is not None else 0)
    return value


@jinja2.pass_context
def _loop_items(context, items):
    return iterate(items)


@jinja2.pass_context
def _sized_join(context, value):
    return sized(value)


def _bounded_filter(name: str, f):
    """A filter that checks the clock, refuses what it would make past MAX_VALUE (`foresee`), and whose
    result is sized (an iterator: iterated with the clock checked)."""
    passed = 1 if hasattr(f, "jinja_pass_arg") else 0

    @functools.wraps(f)
    def bounded(*args, **kwargs):
        budget = current()
        budget.tick()
        value, rest = (args[passed] if len(args) > passed else None), args[passed + 1:]
        args = (*args[:passed], foresee(name, value, rest, kwargs), *rest)
        out = f(*args, **kwargs)
        if hasattr(out, "__next__"):
            return iterate(out)
        budget.spend(length(out))
        return sized(out)
    return bounded


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """ImmutableSandboxedEnvironment whose operators, calls, lookups and loops check the render's budget
    (the module docstring)."""

    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})
    intercepted_unops = frozenset({"+", "-"})

    def call_binop(self, context, operator, left, right):
        budget = current()
        budget.tick()
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                    small_int(len(seq) * n, "a repetition ('*')")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
            if right * abs(left).bit_length() > MAX_POWER_BITS:
                raise TemplateBound(f"it asks a power of {MAX_POWER_BITS}+ bits ('**')")
        elif operator == "%" and isinstance(left, str):
            check_widths(left, right)
        out = super().call_binop(context, operator, left, right)
        budget.spend(length(out))
        return sized(out)

    def call_unop(self, context, operator, arg):
        current().tick()
        return super().call_unop(context, operator, arg)

    def getattr(self, obj, attribute):
        current().tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj, argument):
        current().tick()
        return super().getitem(obj, argument)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja2's signature
        budget = current()
        budget.tick()
        for a in (*args, *kwargs.values()):
            sized(a)  # a macro's argument too: no value doubles past the bound through recursion
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, (str, list, tuple, dict)):  # a method of a value: 'x'.center(n), 'x'.replace(a, b)
            name = getattr(__obj, "__name__", "a method")
            if name == "join" and args and hasattr(args[0], "__next__"):
                args = (list(args[0]), *args[1:])
            foresee(name, owner, args, kwargs, method=True)
        out = super().call(__context, __obj, *args, **kwargs)
        budget.spend(length(out))
        return sized(out)

    def wrap_str_format(self, value):
        wrapped = super().wrap_str_format(value)
        if wrapped is not None:
            check_widths(value.__self__)
        return wrapped

    def _parse(self, source, name, filename):
        """The template's tree with every `for` loop's iterable through `iterate`, every `~` through
        `sized` (its pieces counted by `_emit` first) and every output piece through `_emit` (as
        filters: no sandbox call per piece)."""
        tree = super()._parse(source, name, filename)
        for loop in tree.find_all(nodes.For):
            loop.iter = nodes.Filter(loop.iter, "_loop_items", [], [], None, None, lineno=loop.lineno)
        for concat in list(tree.find_all(nodes.Concat)):  # each piece counted before the pieces are joined
            pieces = [nodes.Filter(child, "_emit", [], [], None, None, lineno=child.lineno) for child in concat.nodes]
            concat.nodes = [nodes.Filter(nodes.Concat(pieces, lineno=concat.lineno), "_sized_join", [], [], None,
                                         None, lineno=concat.lineno)]
        for output in tree.find_all(nodes.Output):
            output.nodes = [nodes.Filter(child, "_emit", [], [], None, None, lineno=child.lineno)
                            for child in output.nodes]
        return tree


class _Generation(jinja2.ext.Extension):
    # transformers' AssistantTracker: `{% generation %}...{% endgeneration %}` marks the assistant's
    # tokens for return_assistant_tokens_mask; rendering a prompt, the block is its body
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


def _raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    if isinstance(indent, int) and not isinstance(indent, bool) and indent > MAX_INDENT:
        raise TemplateBound(f"it asks tojson an indent of {indent} (at most {MAX_INDENT})")
    if isinstance(indent, str) and len(indent) > MAX_INDENT:
        raise TemplateBound(f"it asks tojson an indent of {len(indent)} characters "
                            f"(at most {MAX_INDENT})")
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(format):
    from datetime import datetime

    check_widths(format)
    return datetime.now().strftime(format)


class _TemplateDict:  # `dict(...)` builds a dict; no attribute of the type itself is reachable
    def __call__(self, *args, **kwargs):
        return dict(*args, **kwargs)

    def fromkeys(self, *args, **kwargs):
        return dict.fromkeys(*args, **kwargs)


def _check_name(name):
    if isinstance(name, str) and name.startswith("_"):
        raise jinja2.exceptions.SecurityError(
            f"Chat templates cannot store underscore-prefixed attributes on a namespace, but got {name!r}. "
            "Please rename the attribute.")


class _TemplateNamespace(jinja2.utils.Namespace):
    """A namespace that takes no underscore-prefixed name nor a value past MAX_VALUE (a namespace is the
    one thing a template can grow across a loop's iterations)."""

    def __init__(*args, **kwargs):
        self, args = args[0], args[1:]
        attrs = dict(*args, **kwargs)
        for name, value in attrs.items():
            _check_name(name)
            sized(value)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _check_name(name)
        sized(value)
        jinja2.utils.Namespace.__setitem__(self, name, value)


def chat_environment() -> BoundedSandbox:
    """transformers' chat-template environment on the bounded sandbox, built once."""
    global _ENV
    if _ENV is None:
        env = BoundedSandbox(trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, jinja2.ext.loopcontrols])
        env.filters["tojson"] = _tojson
        env.filters = {name: _bounded_filter(name, f) for name, f in env.filters.items()}
        env.filters.update(_loop_items=_loop_items, _sized_join=_sized_join, _emit=_emit)
        env.globals.pop("lipsum", None)
        env.globals.update(range=Range, raise_exception=_raise_exception, strftime_now=_strftime_now,
                           dict=_TemplateDict(), namespace=_TemplateNamespace)
        _ENV = env
    return _ENV


_ENV = None  # chat_environment's, once built


def compiled(template: str):
    """The template compiled in the chat environment, kept for the last few template texts (transformers'
    `_cached_compile_jinja_template`). jinja2.TemplateError when it does not compile."""
    found = _COMPILED.get(template)
    if found is None:
        found = chat_environment().from_string(template)
        if len(_COMPILED) >= 16:
            _COMPILED.clear()
        _COMPILED[template] = found
    return found


_COMPILED: dict = {}  # compiled's, by template text


def render(template: str, **variables) -> str:
    """`template` rendered with `variables` within BUDGET_S seconds and MAX_WORK characters of output
    (checked per piece, as it is generated). jinja2.TemplateError (TemplateBound past a bound) when
    it fails."""
    with rendering() as budget:
        try:
            pieces, size = [], 0
            for piece in compiled(template).generate(**variables):
                size += len(piece)
                if size > MAX_VALUE:
                    raise TemplateBound(f"its rendering is past {MAX_VALUE} characters")
                budget.tick()
                pieces.append(piece)
            return "".join(pieces)
        except MemoryError:
            raise TemplateBound("it needs more memory than there is") from None
