"""The bounds of one chat-template render (sandbox.py's environment checks them): a wall-clock
budget and a size budget, so that a template cannot hold the thread that renders it, nor fill its
memory.

Every step a template can repeat or grow through passes a check of the render's `Budget`: `tick`
checks the clock (each item of a `for` loop and of a `range`, each operator, call, filter, attribute
and item lookup), `spend` counts what the render outputs toward MAX_WORK characters. A value an
operator, a call or a filter builds is refused past MAX_VALUE items before it is built where its size
is known in advance (`foresee`: `*`, `**`, widths, `replace`, `join`), else after (`sized`). A render
past a bound is `TemplateBound` (a jinja2 SecurityError: one line naming the bound)."""

from __future__ import annotations

import contextlib
import re
import threading
import time

import jinja2

BUDGET_S = 2.0  # wall-clock seconds of one render: the published templates render in milliseconds
MAX_VALUE = 1 << 22  # items of any one string or list a template builds (a 1 MiB request's text is 1 << 20)
MAX_WORK = 1 << 25  # characters a render may output in all, its `{% set %}` blocks and macros included
MAX_RANGE = 100_000  # items of one `range` (jinja2's sandbox's own MAX_RANGE)
MAX_POWER_BITS = 1 << 16  # bits of an integer `**` may make
MAX_INDENT = 16  # tojson's indent: the published templates use none, 2 or 4
_WIDTH = re.compile(r"%[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?|\{[^{}]*?:[^{}\d]*(\d+)(?:\.(\d+))?[^{}]*\}")


class TemplateBound(jinja2.exceptions.SecurityError):
    """A render that broke one of the bounds; its message names it."""


class Budget:
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


def current() -> Budget:
    """The budget of the render under way in this thread."""
    budget = getattr(_local, "budget", None)
    return Budget(BUDGET_S) if budget is None else budget  # None: outside `render` (a constant folded)


def sized(value):
    """`value`, refused when it is a string or a list past MAX_VALUE items."""
    if isinstance(value, (str, list, tuple, dict)) and len(value) > MAX_VALUE:
        raise TemplateBound(f"it builds a value of {len(value)} items (at most {MAX_VALUE})")
    return value


def length(value) -> int:
    """The items of a string or a list (what `spend` counts of a value built), else 0."""
    return len(value) if isinstance(value, (str, list, tuple)) else 0


def text_size(value, limit: int = MAX_WORK) -> int:
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


def small_int(value, what: str) -> None:
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_VALUE:
        raise TemplateBound(f"it asks {what} of {value} (at most {MAX_VALUE})")


def _int(value) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def check_widths(fmt: str, args=()) -> None:
    """A %- or {}-format whose width or precision is past MAX_VALUE (also one given as `*`)."""
    for m in _WIDTH.finditer(fmt):
        for width in m.groups():
            if width == "*":
                for a in args if isinstance(args, tuple) else (args,):
                    small_int(a, "a format width")
            elif width:
                small_int(int(width), "a format width")


def foresee(name: str, value, args: tuple, kwargs: dict, method: bool = False):
    """Refuse the filter or str method `name` on `value` when what it would make is past MAX_VALUE,
    before it is made: a width or count argument past it, and the ones whose size multiplies (replace,
    join, indent, wordwrap, expandtabs, translate, a format's widths). `value` back, an iterator given
    to a join listed first (with the clock checked). method: `value` is the str a method is called on
    ('sep'.join(items)), else a filter's value (items | join(sep))."""
    for a in (*args, *kwargs.values()):
        small_int(a, f"'{name}'")
    if name == "join":  # the filter's value is the items (separator `d`), the method's the separator
        sep, items = (value, args[0] if args else ()) if method else (args[0] if args else kwargs.get("d", ""), value)
        if not isinstance(items, (str, list, tuple, dict)):  # a range, an iterator: its items, listed first
            items = list(iterate(items))
        if isinstance(sep, str) and isinstance(items, str):  # its characters joined
            small_int((len(sep) + 1) * len(items), "a join")
        elif isinstance(sep, str) and isinstance(items, (list, tuple)):
            size = len(sep) * max(len(items) - 1, 0)
            for x in items:
                size += len(x) if isinstance(x, str) else text_size(x)
                small_int(size, "a join")
        return value if method else items
    if not isinstance(value, str):
        return value
    if name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        old, new = args[:2]
        n = value.count(old) if old else len(value) + 1
        if len(args) > 2 and isinstance(args[2], int) and args[2] >= 0:
            n = min(n, args[2])
        small_int(len(value) + n * max(len(new) - len(old), 0), "a replace")
    elif name == "indent":  # indent(width=4, first=False, blank=False): width an int or a string
        w = args[0] if args else kwargs.get("width", 4)
        small_int(len(value) + (value.count("\n") + 1) * (len(w) if isinstance(w, str) else _int(w)), "an indent")
    elif name == "wordwrap":  # wordwrap(width=79, break_long_words=True, wrapstring=None, ...)
        wrap = kwargs.get("wrapstring") or (args[2] if len(args) > 2 else None) or "\n"
        width = max(_int(args[0] if args else kwargs.get("width", 79)), 1)
        small_int(len(value) + (len(value) // width + 1) * len(str(wrap)), "a wordwrap")
    elif name == "expandtabs":
        small_int(len(value) + value.count("\t") * _int(args[0] if args else kwargs.get("tabsize", 8)),
                   "an expandtabs")
    elif name == "translate" and args and isinstance(args[0], dict):
        small_int(len(value) * max((len(v) for v in args[0].values() if isinstance(v, str)), default=1),
                   "a translate")
    elif name == "format":  # the filter: the value is the format
        check_widths(value, args)
    return value


class Range:
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
        return iterate(self._r)

    def __reversed__(self):
        return iterate(reversed(self._r))

    def __repr__(self):
        return repr(self._r)


def iterate(items):
    """`items`, checking the clock at each one (every `for` loop's iterable passes here)."""
    budget = current()
    for item in items:
        budget.tick()
        yield item


@contextlib.contextmanager
def rendering():
    """A fresh budget of BUDGET_S seconds for one render in this thread, the one before it back after it."""
    outer = getattr(_local, "budget", None)
    _local.budget = budget = Budget(BUDGET_S)
    try:
        yield budget
    finally:
        _local.budget = outer
