"""The chat-template environment, bounded: transformers' (jinja2's ImmutableSandboxedEnvironment with
its `tojson`, `raise_exception`, `strftime_now`, `dict`, `namespace` and `{% generation %}`), with a
wall-clock budget and a size budget on every render, so that a template from a checkpoint folder or
`--chat-template FILE` (or a message it is given) cannot hold the thread that renders it, nor fill its
memory.

The sandbox alone stops a template from reaching Python; it does not stop `range(10**5)` nested
twice, `'x' * 10**10`, `messages * 10**9`, `tojson(indent=10**9)`, `lipsum(n=10**6)` or
`10**(10**8)`. Here every step a template can repeat or grow through passes a check of the render's
`_Budget`: each item of a `for` loop (and of a `range`), each operator (`call_binop`/`call_unop`),
call, filter, attribute and item lookup checks the clock; what an operator, a call, a filter, a
`~` or a `namespace` assignment builds is refused past MAX_VALUE items before it is built where its
size is known in advance (`*`, `**`, widths, `replace`, `join`), else after; and every piece a template
outputs (`{{ }}` and its literal text, also inside `{% set %}` blocks and macros) counts toward
MAX_WORK characters. `lipsum` is gone, `tojson`'s indent is at most MAX_INDENT. A render past a bound
is `TemplateBound` (a jinja2 SecurityError: one line naming the bound)."""

from __future__ import annotations

import functools
import json
import re
import threading
import time

import jinja2
import jinja2.ext
from jinja2 import nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment

BUDGET_S = 2.0  # wall-clock seconds of one render: the published templates render in milliseconds
MAX_VALUE = 1 << 22  # items of any one string or list a template builds (a 1 MiB request's text is 1 << 20)
MAX_WORK = 1 << 25  # characters a render may output in all, its `{% set %}` blocks and macros included
MAX_RANGE = 100_000  # items of one `range` (jinja2's sandbox's own MAX_RANGE)
MAX_POWER_BITS = 1 << 16  # bits of an integer `**` may make
MAX_INDENT = 16  # tojson's indent: the published templates use none, 2 or 4
_WIDTH = re.compile(r"%[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?|\{[^{}]*?:[^{}\d]*(\d+)(?:\.(\d+))?[^{}]*\}")


class TemplateBound(jinja2.exceptions.SecurityError):
    """A render that broke one of the bounds; its message names it."""


class _Budget:
    """One render's clock and output count (thread-local: renders run in several threads)."""

    def __init__(self, budget_s: float):
        self.deadline = time.monotonic() + budget_s
        self.budget_s = budget_s
        self.work = 0

    def tick(self) -> None:
        if time.monotonic() > self.deadline:
            raise TemplateBound(f"it ran past its {self.budget_s:g} s budget")

    def spend(self, n: int) -> None:
        self.work += n
        if self.work > MAX_WORK:
            raise TemplateBound(f"it writes more than {MAX_WORK} characters")
        self.tick()


_local = threading.local()


def _budget() -> _Budget:
    budget = getattr(_local, "budget", None)
    return _Budget(BUDGET_S) if budget is None else budget  # None: outside `render` (a constant folded)


def _sized(value):
    """`value`, refused when it is a string or a list past MAX_VALUE items."""
    if isinstance(value, (str, list, tuple, dict)) and len(value) > MAX_VALUE:
        raise TemplateBound(f"it builds a value of {len(value)} items (at most {MAX_VALUE})")
    return value


def _count(value) -> int:
    return len(value) if isinstance(value, (str, list, tuple)) else 0


def _text_size(value, limit: int = MAX_WORK) -> int:
    """About how many characters str(value) makes, counted without making it (a list of 10^5 references
    to one 4 Mi string prints 4 * 10^11), and no further than past `limit`."""
    n, stack = 0, [value]
    while stack and n <= limit:
        x = stack.pop()
        if isinstance(x, str):
            n += len(x) + 2
        elif isinstance(x, (list, tuple, set, frozenset)):
            n += 2 + 2 * len(x)
            stack.extend(x)
        elif isinstance(x, dict):
            n += 2 + 4 * len(x)
            stack.extend(x.keys())
            stack.extend(x.values())
        elif isinstance(x, int) and not isinstance(x, bool):
            n += x.bit_length() * 31 // 100 + 2
        else:
            n += 16
    return n


def _small_int(value, what: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_VALUE:
        raise TemplateBound(f"it asks {what} of {value} (at most {MAX_VALUE})")


def _int(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _check_widths(fmt: str, args=()) -> None:
    """A %- or {}-format whose width or precision is past MAX_VALUE (also one given as `*`)."""
    for m in _WIDTH.finditer(fmt):
        for width in m.groups():
            if width == "*":
                for a in args if isinstance(args, tuple) else (args,):
                    _small_int(a, "a format width")
            elif width:
                _small_int(int(width), "a format width")


def _foresee(name: str, value, args: tuple, kwargs: dict, method: bool = False):
    """Refuse the filter or str method `name` on `value` when what it would make is past MAX_VALUE,
    before it is made: a width or count argument past it, and the ones whose size multiplies (replace,
    join, indent, wordwrap, expandtabs, translate, a format's widths). `value` back, an iterator given
    to a join listed first (with the clock checked). method: `value` is the str a method is called on
    ('sep'.join(items)), else a filter's value (items | join(sep))."""
    for a in (*args, *kwargs.values()):
        _small_int(a, f"'{name}'")
    if name == "join":  # the filter's value is the items (separator `d`), the method's the separator
        sep, items = (value, args[0] if args else ()) if method else (args[0] if args else kwargs.get("d", ""), value)
        if not isinstance(items, (str, list, tuple, dict)):  # a range, an iterator: its items, listed first
            items = list(_iterate(items))
        if isinstance(sep, str) and isinstance(items, str):  # its characters joined
            _small_int((len(sep) + 1) * len(items), "a join")
        elif isinstance(sep, str) and isinstance(items, (list, tuple)):
            size = len(sep) * max(len(items) - 1, 0)
            for x in items:
                size += len(x) if isinstance(x, str) else _text_size(x)
                _small_int(size, "a join")
        return value if method else items
    if not isinstance(value, str):
        return value
    if name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        old, new = args[:2]
        n = value.count(old) if old else len(value) + 1
        if len(args) > 2 and isinstance(args[2], int) and args[2] >= 0:
            n = min(n, args[2])
        _small_int(len(value) + n * max(len(new) - len(old), 0), "a replace")
    elif name == "indent":  # indent(width=4, first=False, blank=False): width an int or a string
        w = args[0] if args else kwargs.get("width", 4)
        _small_int(len(value) + (value.count("\n") + 1) * (len(w) if isinstance(w, str) else _int(w)), "an indent")
    elif name == "wordwrap":  # wordwrap(width=79, break_long_words=True, wrapstring=None, ...)
        wrap = kwargs.get("wrapstring") or (args[2] if len(args) > 2 else None) or "\n"
        width = max(_int(args[0] if args else kwargs.get("width", 79)), 1)
        _small_int(len(value) + (len(value) // width + 1) * len(str(wrap)), "a wordwrap")
    elif name == "expandtabs":
        _small_int(len(value) + value.count("\t") * _int(args[0] if args else kwargs.get("tabsize", 8)),
                   "an expandtabs")
    elif name == "translate" and args and isinstance(args[0], dict):
        _small_int(len(value) * max((len(v) for v in args[0].values() if isinstance(v, str)), default=1),
                   "a translate")
    elif name == "format":  # the filter: the value is the format
        _check_widths(value, args)
    return value


class _Range:
    """`range` with at most MAX_RANGE items whose iteration checks the clock."""

    def __init__(self, *args):
        self._r = range(*args)
        if len(self._r) > MAX_RANGE:
            raise TemplateBound(f"it asks a range of {len(self._r)} items (at most {MAX_RANGE})")

    def __len__(self):
        return len(self._r)

    def __getitem__(self, i):
        return self._r[i]

    def __contains__(self, x):
        return x in self._r

    def __iter__(self):
        return _iterate(self._r)

    def __reversed__(self):
        return _iterate(reversed(self._r))

    def __repr__(self):
        return repr(self._r)


def _iterate(items):
    """`items`, checking the clock at each one (every `for` loop's iterable passes here)."""
    budget = _budget()
    for item in items:
        budget.tick()
        yield item


@jinja2.pass_context  # as the filters below: never folded into a constant when the template compiles
def _emit(context, value):
    """One piece of a template's output, counted."""
    _budget().spend(len(value) if isinstance(value, str) else _text_size(value) if value is not None else 0)
    return value


@jinja2.pass_context
def _loop_items(context, items):
    return _iterate(items)


@jinja2.pass_context
def _sized_join(context, value):
    return _sized(value)


def _bounded_filter(name: str, f):
    """A filter that checks the clock, refuses what it would make past MAX_VALUE (`_foresee`), and whose
    result is sized (an iterator: iterated with the clock checked)."""
    passed = 1 if hasattr(f, "jinja_pass_arg") else 0

    @functools.wraps(f)
    def bounded(*args, **kwargs):
        budget = _budget()
        budget.tick()
        value, rest = (args[passed] if len(args) > passed else None), args[passed + 1:]
        args = (*args[:passed], _foresee(name, value, rest, kwargs), *rest)
        out = f(*args, **kwargs)
        if hasattr(out, "__next__"):
            return _iterate(out)
        budget.spend(_count(out))
        return _sized(out)
    return bounded


class BoundedSandbox(ImmutableSandboxedEnvironment):
    """ImmutableSandboxedEnvironment whose operators, calls, lookups and loops check the render's budget
    (the module docstring)."""

    intercepted_binops = frozenset({"+", "-", "*", "/", "//", "%", "**"})
    intercepted_unops = frozenset({"+", "-"})

    def call_binop(self, context, operator, left, right):
        budget = _budget()
        budget.tick()
        if operator == "*":
            for seq, n in ((left, right), (right, left)):
                if isinstance(seq, (str, list, tuple)) and isinstance(n, int):
                    _small_int(len(seq) * n, "a repetition ('*')")
        elif operator == "**" and isinstance(left, int) and isinstance(right, int) and abs(left) > 1 and right > 0:
            if right * abs(left).bit_length() > MAX_POWER_BITS:
                raise TemplateBound(f"it asks a power of {MAX_POWER_BITS}+ bits ('**')")
        elif operator == "%" and isinstance(left, str):
            _check_widths(left, right)
        out = super().call_binop(context, operator, left, right)
        budget.spend(_count(out))
        return _sized(out)

    def call_unop(self, context, operator, arg):
        _budget().tick()
        return super().call_unop(context, operator, arg)

    def getattr(self, obj, attribute):
        _budget().tick()
        return super().getattr(obj, attribute)

    def getitem(self, obj, argument):
        _budget().tick()
        return super().getitem(obj, argument)

    def call(__self, __context, __obj, *args, **kwargs):  # noqa: N805 - jinja2's signature
        budget = _budget()
        budget.tick()
        for a in (*args, *kwargs.values()):
            _sized(a)  # a macro's argument too: no value doubles past the bound through recursion
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, (str, list, tuple, dict)):  # a method of a value: 'x'.center(n), 'x'.replace(a, b)
            name = getattr(__obj, "__name__", "a method")
            if name == "join" and args and hasattr(args[0], "__next__"):
                args = (list(args[0]), *args[1:])
            _foresee(name, owner, args, kwargs, method=True)
        out = super().call(__context, __obj, *args, **kwargs)
        budget.spend(_count(out))
        return _sized(out)

    def wrap_str_format(self, value):
        wrapped = super().wrap_str_format(value)
        if wrapped is not None:
            _check_widths(value.__self__)
        return wrapped

    def _parse(self, source, name, filename):
        """The template's tree with every `for` loop's iterable through `_iterate`, every `~` through
        `_sized` (its pieces counted by `_emit` first) and every output piece through `_emit` (as
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

    _check_widths(format)
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
            _sized(value)
        jinja2.utils.Namespace.__init__(self, attrs)

    def __setitem__(self, name, value):
        _check_name(name)
        _sized(value)
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
        env.globals.update(range=_Range, raise_exception=_raise_exception, strftime_now=_strftime_now,
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
    outer = getattr(_local, "budget", None)
    _local.budget = budget = _Budget(BUDGET_S)
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
    finally:
        _local.budget = outer
