"""A JSON Schema as the layout of a canvas (constrained.py decodes it): the keys, brackets, commas and
quotes the schema fixes are placed before the first step, and only the values are left to denoise,
each in a slot of bounded length whose tokens are constrained. The answer is rendered from what the
slots hold (a string slot's text through json.dumps), so it parses and validates by construction.

Satisfiable and exact: what a subschema's layout can produce is a subset of what the subschema
accepts, and not empty. Every keyword is enforced by the layout or refused, naming it and where it
is, so a caller is never given output the schema does not describe:
- `type` object (`properties` in their order, `required`, `additionalProperties`: no key beyond the
  properties is ever written, and every property is), array (`items`, `minItems`, `maxItems`),
  string (`minLength`, `maxLength`), integer and number (`minimum`, `maximum`,
  `exclusiveMinimum`, `exclusiveMaximum`, finite and at most MAX_BOUND in size), boolean, null;
- `enum` and `const` of any JSON values, kept where their sibling keywords accept them
  (keywords.violation); none kept is a refusal naming the keywords that rejected them;
- `$ref`: a JSON pointer into this schema (`#/$defs/...`, `#/definitions/...`, any path), not
  recursive; its siblings hold too (2020-12), intersected with the target (keywords.merge);
- a value or null: `anyOf` / `oneOf` of one schema and `{"type": "null"}` (Pydantic's Optional), or
  `type: [T, "null"]`; the model chooses null or the value (other unions are refused); the union's
  siblings hold for the value, and null is offered only where they accept it;
- annotations (`title`, `description`, `default`, `examples`, ...) are ignored.
Bounds: a string slot is at most MAX_STRING_TOKENS tokens (DEFAULT_STRING_TOKENS without a
maxLength), an array without `maxItems` has at most max(minItems, DEFAULT_MAX_ITEMS) items and at
least one unless maxItems is 0, an integer has at most INTEGER_TOKENS digit tokens (a value past
the schema's bounds is clamped to them when rendered). A whole layout is within a budget
(nodes.py: slots, positions, options, bytes), counted on the nodes before anything is laid out.

Torch-free: the API refuses a schema (400) before anything reaches the worker."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

from .keywords import ANNOTATIONS, MAX_BOUND, TYPES, Cannot, bound, escape, merge, resolve, types_of, violation, walk
from .nodes import (MAX_ITEMS, MAX_OPTIONS, MAX_STRING_TOKENS, Arr, Choice, Const, Node, Nullable, Num, Obj, Str,
                    measure, over_budget)

DEFAULT_STRING_TOKENS = 12
DEFAULT_MAX_ITEMS = 3
MAX_NODES = 2000  # subschemas compiled for one layout: a schema past it is refused
MAX_DEPTH = 24

KNOWN = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum", "const",
         "anyOf", "oneOf",
         "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "$defs",
         "definitions", "$ref", "strict"}


class Unsupported(ValueError):
    """A schema this layout cannot express: the message names each keyword and where it is."""


def compile_schema(schema) -> Node:
    """The layout of `schema`; Unsupported naming every keyword it cannot express (all of them at
    once), what makes the schema itself invalid or unsatisfiable, or a layout past the budget
    (checked on the nodes, before anything is laid out)."""
    problems: list[str] = []
    if not isinstance(schema, dict):
        raise Unsupported(f"a schema must be an object, got {type(schema).__name__}")
    try:  # what the answer would write must be JSON that UTF-8 can carry
        json.dumps(schema, ensure_ascii=False, allow_nan=False).encode()
    except ValueError as e:  # UnicodeEncodeError is one
        raise Unsupported(f"the schema is not JSON that UTF-8 can write (NaN, Infinity or a lone surrogate): {e}") \
            from None
    except RecursionError:
        raise Unsupported("the schema is nested too deeply") from None
    bad, places = walk(schema)
    if bad:  # a broken schema: said whole, before anything below reads its keywords
        raise Unsupported(_said(bad))
    try:
        node = _compile(schema, "#", _Context(schema, places, problems))
    except RecursionError:  # a const or enum value nested past the interpreter's stack
        raise Unsupported("the schema is nested too deeply") from None
    if not problems:
        problems += over_budget(measure(node))
    if problems:
        raise Unsupported(_said(problems))
    return node


def _said(problems: list[str], most: int = 8) -> str:
    """The problems in one line: each once, the first `most` of them."""
    unique = list(dict.fromkeys(problems))
    more = f"; and {len(unique) - most} more" if len(unique) > most else ""
    return "; ".join(unique[:most]) + more


@dataclass
class _Context:
    root: dict  # what $ref pointers resolve in
    places: set[str]  # the pointers of its subschemas: what a $ref may point at
    problems: list[str]
    refs: tuple[str, ...] = ()  # the $refs being followed (a repeat is recursion)
    parts: int = 0  # subschemas compiled so far (MAX_NODES)
    options: int = 0  # enum and const values met so far (MAX_OPTIONS)


def _compile(s, path: str, cx: _Context) -> Node:
    if not _admit(s, path, cx):
        return Const("null")
    if "$ref" in s:
        return _reference(s, path, cx)
    for union in ("anyOf", "oneOf"):
        if union in s:
            return _nullable_union(s, union, path, cx)
    kind = s.get("type")
    if isinstance(kind, list):
        node = _type_list(s, kind, path, cx)
        if node is not None:  # None: a const or enum, whose values the list filters (_values)
            return node
    if "const" in s or "enum" in s:
        return _values(s, path, cx)
    if kind is None and "properties" in s:
        kind = "object"
    if kind not in TYPES:
        cx.problems.append(f"{path}: type must be one of {', '.join(TYPES)}"
                           + ("" if kind is None else f", got {kind!r}"))
        return Const("null")
    if kind == "null":
        return Const("null")
    if kind == "boolean":
        return Choice(("true", "false"))
    if kind == "string":
        return _string(s, path, cx.problems)
    if kind in ("integer", "number"):
        return _number(s, path, cx.problems, kind == "integer")
    if kind == "array":
        return _array(s, path, cx)
    return _object(s, path, cx)


def _admit(s, path: str, cx: _Context) -> bool:
    """Counts `s` as one more part; False (the problem noted) past MAX_NODES or MAX_DEPTH, or for a
    schema that is not an object. Each keyword it does not know is noted, and the compile goes on, so
    that all of them are said at once."""
    cx.parts += 1
    if cx.parts > MAX_NODES or len(cx.refs) + path.count("/") > MAX_DEPTH * 2:
        cx.problems.append(f"{path}: the schema is too large or too deep (at most {MAX_NODES} parts)")
        return False
    if not isinstance(s, dict):
        cx.problems.append(f"{path}: a schema must be an object" + (" (true/false schemas are not supported)"
                                                                    if isinstance(s, bool) else ""))
        return False
    for key in s:
        if key not in KNOWN and key not in ANNOTATIONS:
            cx.problems.append(f"{path}: {key} is not supported")
    return True


def _reference(s: dict, path: str, cx: _Context) -> Node:
    """A `$ref`: the target and the siblings both hold (2020-12), so their intersection is compiled,
    at the target's pointer when there are no siblings; a pointer being followed is recursion."""
    problems = cx.problems
    try:
        pointer, target = resolve(cx.root, s["$ref"])
    except Cannot as e:
        problems.append(f"{path}: {e}")
        return Const("null")
    if pointer not in cx.places:  # a keyword's value (#/properties/a/const/0), not a subschema
        problems.append(f"{path}: $ref {s['$ref']!r} points at a value, not a subschema")
        return Const("null")
    if pointer in cx.refs:
        problems.append(f"{path}: $ref {s['$ref']!r} is recursive (not supported)")
        return Const("null")
    rest = {k: v for k, v in s.items() if k != "$ref" and k not in ANNOTATIONS}
    try:
        merged = merge(target, rest, cx.root) if rest else target
    except Cannot as e:
        problems.append(f"{path}: $ref {s['$ref']!r} and its sibling keywords: {e}")
        return Const("null")
    cx.refs += (pointer,)
    try:
        return _compile(merged, pointer if not rest else f"{path}/$ref", cx)
    finally:
        cx.refs = cx.refs[:-1]


def _type_list(s: dict, kind: list, path: str, cx: _Context) -> Node | None:
    """`type` as a list: one type, or one and null; None where a const or enum is there to be filtered
    by the list (the values of the types listed are kept)."""
    problems = cx.problems
    try:
        kinds = types_of(kind)
    except Cannot as e:
        problems.append(f"{path}: {e}")
        return Const("null")
    if len(kinds) < len(kind):  # the meta-schema's uniqueItems
        problems.append(f"{path}: type lists a type twice ({kind})")
        return Const("null")
    if "integer" in kinds and "number" in kinds:  # every integer is a number
        kinds.remove("integer")
    if len(kinds) == 1:
        return _compile({**s, "type": kinds[0]}, path, cx)
    if "const" in s or "enum" in s:  # the values are filtered by the list
        return None
    if len(kinds) == 2 and "null" in kinds:
        other = next(t for t in kinds if t != "null")
        return Nullable(_compile({**s, "type": other}, path, cx))
    problems.append(f"{path}: type as a list ({kind}) is not supported: give one type, or one and null")
    return Const("null")


def _array(s: dict, path: str, cx: _Context) -> Node:
    """An array of one schema for every item, minItems to maxItems of them (at least one unless
    maxItems is 0; at most max(minItems, DEFAULT_MAX_ITEMS) without a maxItems)."""
    problems = cx.problems
    lo, hi = _count(s, "minItems", 0, path, problems), _count(s, "maxItems", None, path, problems)
    if hi is None:
        hi = max(lo, DEFAULT_MAX_ITEMS)
    if hi > MAX_ITEMS or lo > hi:
        problems.append(f"{path}: items must be between minItems and maxItems, at most {MAX_ITEMS}")
        return Const("[]")
    if "items" not in s or not isinstance(s["items"], dict):
        problems.append(f"{path}: an array needs items (one schema for every item)")
        return Const("[]")
    item = _compile(s["items"], f"{path}/items", cx)
    return Arr(item, lo if hi == 0 else max(lo, 1), hi)


def _nullable_union(s: dict, union: str, path: str, cx: _Context) -> Node:
    """anyOf / oneOf of one schema and null: the siblings hold for both branches, so they are merged
    into the value's, and null is offered only where they accept it (a sibling `type` may not)."""
    branches = s[union]
    nulls = [b for b in branches if _is_null(b)] if isinstance(branches, list) else []
    if not (isinstance(branches, list) and len(branches) == 2 and len(nulls) == 1):
        cx.problems.append(f"{path}: {union} is supported only as one schema or null")
        return Const("null")
    other = next(b for b in branches if b is not nulls[0])
    rest = {k: v for k, v in s.items() if k != union and k not in ANNOTATIONS}
    null_ok = False
    try:
        if union == "oneOf" and violation(None, other, cx.root) is None:
            cx.problems.append(f"{path}: oneOf: both schemas accept null, so a null would match two of them")
            return Const("null")
        null_ok = violation(None, rest, cx.root) is None
        merged = merge(other, rest, cx.root) if rest else other
    except Cannot as e:
        if null_ok:  # the value's branch and the siblings have nothing in common: null is what is left
            return Const("null")
        cx.problems.append(f"{path}: {union} and its sibling keywords: {e}")
        return Const("null")
    value = _compile(merged, f"{path}/{union}", cx)
    return Nullable(value) if null_ok else value


def _values(s: dict, path: str, cx: _Context) -> Node:
    """`const` / `enum`: the values its sibling keywords accept, each chosen whole; none is a refusal
    naming the keywords that rejected them."""
    key = "const" if "const" in s else "enum"
    values = [s["const"]] if key == "const" else s["enum"]
    if not isinstance(values, list) or not values:
        cx.problems.append(f"{path}: enum must be a non-empty list")
        return Const("null")
    cx.options += len(values)
    if len(values) > MAX_OPTIONS:
        cx.problems.append(f"{path}: enum has {len(values)} values, at most {MAX_OPTIONS}")
        return Const("null")
    if cx.options > MAX_OPTIONS:  # a bound on the work too: every value is checked against its siblings
        cx.problems.append(f"the answer's layout would have more than {MAX_OPTIONS} enum options")
        return Const("null")
    siblings = {k: v for k, v in s.items() if k != key}
    kept, why, memo = [], [], {}
    for v in values:
        try:
            bad = violation(v, siblings, cx.root, memo=memo)
        except Cannot as e:
            cx.problems.append(f"{path}: {e}")
            return Const("null")
        (why if bad else kept).append(bad or v)
    if not kept:
        cx.problems.append(f"{path}: no {key} value satisfies its sibling keywords ({', '.join(dict.fromkeys(why))})")
        return Const("null")
    options = tuple(dict.fromkeys(_dumps(v) for v in kept))
    return Const(options[0]) if len(options) == 1 else Choice(options)


def _object(s: dict, path: str, cx: _Context) -> Node:
    problems = cx.problems
    props = s.get("properties", {})
    if not isinstance(props, dict):
        problems.append(f"{path}: properties must be an object of schemas")
        return Const("{}")
    required = s.get("required", [])  # its form: keywords.malformed
    missing = [r for r in required if isinstance(r, str) and r not in props] if isinstance(required, list) else []
    if missing:
        problems.append(f"{path}: required names properties the schema does not have: {missing}")
    return Obj(tuple((k, _compile(v, f"{path}/properties/{escape(k)}", cx)) for k, v in props.items()))


def _is_null(s) -> bool:
    return isinstance(s, dict) and (s.get("type") == "null" or ("const" in s and s["const"] is None)) and not (
        set(s) - ANNOTATIONS - {"type", "const"})


def _count(s: dict, key: str, default, path: str, problems: list[str]):
    v = s.get(key, default)
    if v is not None and not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
        problems.append(f"{path}: {key} must be a non-negative integer")
        return default
    return v


def _string(s: dict, path: str, problems: list[str]) -> Node:
    lo, hi = _count(s, "minLength", 0, path, problems), _count(s, "maxLength", None, path, problems)
    if hi is not None and lo > hi:
        problems.append(f"{path}: minLength is above maxLength")
        return Const('""')
    if lo > MAX_STRING_TOKENS:
        problems.append(f"{path}: minLength above {MAX_STRING_TOKENS} is not supported")
        return Const('""')
    if hi == 0:
        return Const('""')
    tokens = max(lo, min(hi if hi is not None else DEFAULT_STRING_TOKENS, MAX_STRING_TOKENS))
    return Str(lo, hi, tokens)


def _number(s: dict, path: str, problems: list[str], integer: bool) -> Node:
    bounds = {}
    for key in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
        v = s.get(key)
        if v is None:
            continue
        if not bound(v):  # 10**400 is a JSON number, but no double and no answer
            problems.append(f"{path}: {key} must be a finite number of at most {MAX_BOUND:g} in size")
            continue
        bounds[key] = v
    lo, hi = bounds.get("minimum"), bounds.get("maximum")
    if "exclusiveMinimum" in bounds:
        x = bounds["exclusiveMinimum"]
        x = math.floor(x) + 1 if integer else math.nextafter(x, math.inf)
        lo = x if lo is None else max(lo, x)
    if "exclusiveMaximum" in bounds:
        x = bounds["exclusiveMaximum"]
        x = math.ceil(x) - 1 if integer else math.nextafter(x, -math.inf)
        hi = x if hi is None else min(hi, x)
    if integer:
        lo = None if lo is None else math.ceil(lo)
        hi = None if hi is None else math.floor(hi)
    if lo is not None and hi is not None and lo > hi:
        problems.append(f"{path}: no {'integer' if integer else 'number'} is within the bounds")
        return Const("0")
    if integer and lo is not None and hi is not None and hi - lo < 16:  # a few values: chosen whole
        values = tuple(str(v) for v in range(int(lo), int(hi) + 1))
        return Const(values[0]) if len(values) == 1 else Choice(values)
    return Num(integer, lo, hi)


def _dumps(value) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


def for_object() -> Node:
    """`response_format: json_object` without a schema: an object of up to DEFAULT_MAX_ITEMS entries,
    each a short string key and a string value, the model choosing the keys (the
    decoding renders it)."""
    return Arr(Str(0, None, DEFAULT_STRING_TOKENS), 1, DEFAULT_MAX_ITEMS, key=Str(1, None, 6))


def tool_call(name: str, parameters: dict | None) -> Node:
    """A function call in the OpenAI shape {"name": ..., "arguments": {...}}, the arguments laid out
    from the function's parameters schema (none: an object with no properties)."""
    params = compile_schema(parameters) if parameters else Obj(())
    if not isinstance(params, Obj):
        raise Unsupported(f"function {name}: its parameters schema must describe an object")
    return Obj((("name", Const(_dumps(name))), ("arguments", params)))
