"""A saved baseline read back: its JSON, and its structure checked whole before anything is measured.

`check` walks every field the compare reads (command.py's model check and header, compare.py's
judge, report.py's formatting, workload.py's from_wire) against SCHEMA, and refuses the first one
that is missing, of another type or empty where the compare needs a value, naming it:
`baseline: figures must be an object`. Before it, a baseline without `machine`, with `model` as a
string, `figures` as a list or an empty calibration ended in a KeyError, AttributeError or
ValueError traceback, three of them after the whole run had been measured. Numbers must be finite
(json reads NaN and Infinity, and 1e400 as inf): a NaN figure passes every comparison."""

from __future__ import annotations

import json
import math
import sys
from collections.abc import Callable

from .figures import SPECS

Check = Callable[[object, str], None]  # raises ValueError naming the field (`where`) when the value is wrong


MAX_DEPTH = 64  # a baseline is 5 deep (workload.files[i].renames[j][k]); a settings value a few more


def parse(data: bytes) -> object:
    """The JSON of a baseline (or of --settings); ValueError when it is not JSON or is nested deeper
    than MAX_DEPTH (json itself reads about 990 levels, and a compare of two such values near the
    limit is a RecursionError)."""
    try:
        value = json.loads(data)
    except RecursionError:
        raise ValueError("nested too deeply") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(str(e)) from None
    except ValueError:  # int(): Python's limit on an integer's digits (its message advises a setting)
        raise ValueError(f"a number has more than {sys.get_int_max_str_digits()} digits") from None
    stack = [(value, 1)]
    while stack:  # no recursion: the depth is what is being checked
        item, depth = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if depth + 1 > MAX_DEPTH:
                    raise ValueError(f"nested too deeply (more than {MAX_DEPTH} levels)")
                stack.append((child, depth + 1))
    return value


def _fail(where: str, what: str):
    raise ValueError(f"baseline: {where or 'the file'} must be {what}")


def _string(value, where: str) -> None:
    if not isinstance(value, str):
        _fail(where, "a string")


def _finite(value) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # an integer past what a float holds
        return False


def _number(value, where: str) -> None:
    if not _finite(value):
        _fail(where, "a finite number")


def _positive(value, where: str) -> None:
    if not _finite(value) or value <= 0:
        _fail(where, "a number above 0")


def _count(value, where: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        _fail(where, "an integer, 0 or more")


def _figure_name(value, where: str) -> None:
    if not isinstance(value, str) or value not in SPECS:
        _fail(where, f"one of {', '.join(SPECS)}")


def _any(value, where: str) -> None:
    pass


def obj(**fields: Check) -> Check:
    """An object holding at least these fields (others are left alone)."""
    def check(value, where: str) -> None:
        if not isinstance(value, dict):
            _fail(where, "an object")
        for name, field in fields.items():
            at = f"{where}.{name}" if where else name
            if name not in value:
                raise ValueError(f"baseline: {at} is missing")
            field(value[name], at)
    return check


def all_of(*checks: Check) -> Check:
    def check(value, where: str) -> None:
        for c in checks:
            c(value, where)
    return check


def items(field: Check, nonempty: bool = True) -> Check:
    """A list (`nonempty`: of one item or more), each item passing `field`."""
    def check(value, where: str) -> None:
        if not isinstance(value, list) or (nonempty and not value):
            _fail(where, "a non-empty list" if nonempty else "a list")
        for i, item in enumerate(value):
            field(item, f"{where}[{i}]")
    return check


def pair(field: Check) -> Check:
    def check(value, where: str) -> None:
        if not isinstance(value, list) or len(value) != 2:
            _fail(where, "a list of two")
        for i, item in enumerate(value):
            field(item, f"{where}[{i}]")
    return check


def values(field: Check, nonempty: bool = True) -> Check:
    """An object whose every value passes `field` (`nonempty`: one or more)."""
    def check(value, where: str) -> None:
        if not isinstance(value, dict) or (nonempty and not value):
            _fail(where, "a non-empty object" if nonempty else "an object")
        for key, item in value.items():
            field(item, f"{where}[{json.dumps(key)[:80]}]")
    return check


def rename(value, where: str) -> None:
    """[name, [line, column] of the first use, [line, column] of the next]."""
    if not isinstance(value, list) or len(value) != 3:
        _fail(where, "a list of a name and two positions")
    _string(value[0], f"{where}[0]")
    for i in (1, 2):
        pair(_count)(value[i], f"{where}[{i}]")


FIGURE = obj(row=_string, figure=_figure_name, value=_number, values=items(_number), n=_count)
SITE = obj(line=_count, last=_count, indent=_string, first=_string)
WORK_FILE = obj(path=_string, language=_string, text=_string, sites=items(SITE, nonempty=False),
                renames=items(rename, nonempty=False))
SCHEMA = obj(
    created=_string,
    machine=obj(),
    model=obj(backend=_string, name=_string, fingerprint=_string),
    settings=values(values(_any, nonempty=False), nonempty=False),
    # every calibration is read (compare.run_calibration), these two by name
    calibration=all_of(obj(matmul_ms=_any, parse_ms=_any), values(items(_positive))),
    figures=values(FIGURE),
    workload=obj(source=_string, seed=_count, chars=_count, files=items(WORK_FILE), fingerprint=_string),
)


def check(base: object) -> None:
    """ValueError naming the first field of `base` that the compare could not read (see the module doc)."""
    SCHEMA(base, "")
