"""A JSON Schema as the layout of a canvas (structured.py decodes it): the keys, brackets, commas and
quotes the schema fixes are placed before the first step, and only the values are left to denoise,
each in a slot of bounded length whose tokens are constrained. The answer is rendered from what the
slots hold (a string slot's text through json.dumps), so it parses and validates by construction.

Supported (anything else is refused, naming the keyword and where it is, so that a caller is never
given output the schema does not describe):
- `type` object (`properties` in their order, `required`, `additionalProperties`: no key beyond the
  properties is ever written, and every property is), array (`items`, `minItems`, `maxItems`),
  string (`minLength`, `maxLength`, `enum`), integer and number (`minimum`, `maximum`,
  `exclusiveMinimum`, `exclusiveMaximum`), boolean, null;
- `enum` and `const` of any JSON values; `$ref` to `#/$defs/...` or `#/definitions/...` (not recursive);
- a value or null: `anyOf` / `oneOf` of one schema and `{"type": "null"}` (Pydantic's Optional), or
  `type: [T, "null"]`; the model chooses null or the value (other unions are refused);
- annotations (`title`, `description`, `default`, `examples`, ...) are ignored.
Bounds: a string slot is at most MAX_STRING_TOKENS tokens (DEFAULT_STRING_TOKENS without a
maxLength), an array without `maxItems` has at most max(minItems, DEFAULT_MAX_ITEMS) items and at
least one unless maxItems is 0, an integer has at most INTEGER_TOKENS digit tokens (a value past
the schema's bounds is clamped to them when rendered).

Torch-free: the API refuses a schema (400) before anything reaches the worker."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

DEFAULT_STRING_TOKENS = 12
MAX_STRING_TOKENS = 64
DEFAULT_MAX_ITEMS = 3
MAX_ITEMS = 32
INTEGER_TOKENS = 4  # digit tokens: "12345678" is 2-4 of them in a code tokenizer
FRACTION_TOKENS = 2
MAX_NODES = 2000  # slots and fixed pieces in one layout: a schema past it is refused
MAX_DEPTH = 24

ANNOTATIONS = {"title", "description", "$comment", "examples", "default", "$schema", "$id", "deprecated",
               "readOnly", "writeOnly", "$anchor"}
KNOWN = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum", "const",
         "anyOf", "oneOf",
         "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "$defs",
         "definitions", "$ref", "strict"}
TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")


class Unsupported(ValueError):
    """A schema this layout cannot express: the message names each keyword and where it is."""


@dataclass(frozen=True)
class Const:
    """Fixed JSON text (null, a const, an enum of one)."""

    text: str


@dataclass(frozen=True)
class Choice:
    """One of a few JSON texts (enum, boolean), chosen whole."""

    options: tuple[str, ...]


@dataclass(frozen=True)
class Str:
    min_len: int
    max_len: int | None
    tokens: int  # slot positions


@dataclass(frozen=True)
class Num:
    integer: bool
    minimum: float | None = None  # inclusive bounds (exclusive ones moved in: integer +-1, number nextafter)
    maximum: float | None = None

    def clamp(self, value):
        if self.minimum is not None and value < self.minimum:
            value = self.minimum
        if self.maximum is not None and value > self.maximum:
            value = self.maximum
        return int(value) if self.integer else value

    @property
    def negative(self) -> bool:
        """Whether a value below zero is allowed."""
        return self.minimum is None or self.minimum < 0


@dataclass(frozen=True)
class Nullable:
    """null, or `value`: the model chooses."""

    value: object


@dataclass(frozen=True)
class Obj:
    entries: tuple[tuple[str, object], ...]


@dataclass(frozen=True)
class Arr:
    """A list of `item`s; with `key`, an object of `key: item` entries (json_object's)."""

    item: object
    min_items: int
    max_items: int
    key: Str | None = None


Node = Const | Choice | Str | Num | Nullable | Obj | Arr


def compile_schema(schema) -> Node:
    """The layout of `schema`; Unsupported naming every keyword it cannot express (all of them at
    once), or what makes the schema itself invalid."""
    problems: list[str] = []
    if not isinstance(schema, dict):
        raise Unsupported(f"a schema must be an object, got {type(schema).__name__}")
    defs = {**_object(schema.get("definitions")), **_object(schema.get("$defs"))}
    counter = [0]
    node = _compile(schema, "#", defs, problems, (), counter)
    if problems:
        raise Unsupported("; ".join(dict.fromkeys(problems)))
    return node


def _object(v) -> dict:
    return v if isinstance(v, dict) else {}


def _compile(s, path: str, defs: dict, problems: list[str], refs: tuple[str, ...], counter: list[int]) -> Node:
    counter[0] += 1
    if counter[0] > MAX_NODES or len(refs) + path.count("/") > MAX_DEPTH * 2:
        problems.append(f"{path}: the schema is too large or too deep (at most {MAX_NODES} parts)")
        return Const("null")
    if not isinstance(s, dict):
        problems.append(f"{path}: a schema must be an object" + (" (true/false schemas are not supported)"
                                                                 if isinstance(s, bool) else ""))
        return Const("null")
    for key in s:
        if key not in KNOWN and key not in ANNOTATIONS:
            problems.append(f"{path}: {key} is not supported")
    if "$ref" in s:
        ref = s["$ref"]
        name = ref.split("/")[-1] if isinstance(ref, str) else None
        if not (isinstance(ref, str) and ref.startswith(("#/$defs/", "#/definitions/")) and name in defs):
            problems.append(f"{path}: $ref {ref!r} is not a reference to #/$defs/NAME in this schema")
            return Const("null")
        if ref in refs:
            problems.append(f"{path}: $ref {ref!r} is recursive (not supported)")
            return Const("null")
        return _compile(defs[name], ref, defs, problems, (*refs, ref), counter)
    for union in ("anyOf", "oneOf"):
        if union in s:
            branches = s[union]
            nulls = [b for b in branches if _is_null(b)] if isinstance(branches, list) else []
            if not (isinstance(branches, list) and len(branches) == 2 and len(nulls) == 1):
                problems.append(f"{path}: {union} is supported only as one schema or null")
                return Const("null")
            other = next(b for b in branches if b is not nulls[0])
            rest = {k: v for k, v in s.items() if k != union}  # sibling keywords hold for the value too
            merged = {**rest, **other} if isinstance(other, dict) else other
            return Nullable(_compile(merged, f"{path}/{union}", defs, problems, refs, counter))
    if isinstance(s.get("type"), list) and len(s["type"]) == 2 and "null" in s["type"] and "enum" not in s \
            and "const" not in s:
        other = next(t for t in s["type"] if t != "null")
        return Nullable(_compile({**s, "type": other}, path, defs, problems, refs, counter))
    if "const" in s:
        return Const(_dumps(s["const"]))
    if "enum" in s:
        values = s["enum"]
        if not isinstance(values, list) or not values:
            problems.append(f"{path}: enum must be a non-empty list")
            return Const("null")
        options = tuple(dict.fromkeys(_dumps(v) for v in values if _fits_type(v, s.get("type"))))
        if not options:
            problems.append(f"{path}: no enum value has the schema's type")
            return Const("null")
        return Const(options[0]) if len(options) == 1 else Choice(options)
    kind = s.get("type")
    if kind is None and "properties" in s:
        kind = "object"
    if isinstance(kind, list):
        problems.append(f"{path}: type as a list ({kind}) is not supported: give one type")
        return Const("null")
    if kind not in TYPES:
        problems.append(f"{path}: type must be one of {', '.join(TYPES)}" + ("" if kind is None else f", got {kind!r}"))
        return Const("null")
    if kind == "null":
        return Const("null")
    if kind == "boolean":
        return Choice(("true", "false"))
    if kind == "string":
        return _string(s, path, problems)
    if kind in ("integer", "number"):
        return _number(s, path, problems, kind == "integer")
    if kind == "array":
        lo, hi = _count(s, "minItems", 0, path, problems), _count(s, "maxItems", None, path, problems)
        if hi is None:
            hi = max(lo, DEFAULT_MAX_ITEMS)
        if hi > MAX_ITEMS or lo > hi:
            problems.append(f"{path}: items must be between minItems and maxItems, at most {MAX_ITEMS}")
            return Const("[]")
        if "items" not in s or not isinstance(s["items"], dict):
            problems.append(f"{path}: an array needs items (one schema for every item)")
            return Const("[]")
        item = _compile(s["items"], f"{path}/items", defs, problems, refs, counter)
        return Arr(item, lo if hi == 0 else max(lo, 1), hi)
    props = s.get("properties", {})
    if not isinstance(props, dict):
        problems.append(f"{path}: properties must be an object")
        return Const("{}")
    required = s.get("required", [])
    if not isinstance(required, list) or any(r not in props for r in required if isinstance(r, str)):
        missing = [r for r in required if r not in props] if isinstance(required, list) else required
        problems.append(f"{path}: required names properties the schema does not have: {missing}")
    extra = s.get("additionalProperties", True)
    if not isinstance(extra, (bool, dict)):
        problems.append(f"{path}: additionalProperties must be a boolean or a schema")
    return Obj(tuple((k, _compile(v, f"{path}/properties/{k}", defs, problems, refs, counter))
                     for k, v in props.items()))


def _is_null(s) -> bool:
    return isinstance(s, dict) and (s.get("type") == "null" or ("const" in s and s["const"] is None)) and not (
        set(s) - ANNOTATIONS - {"type", "const"})


def _fits_type(value, kind) -> bool:
    if kind is None:
        return True
    if isinstance(kind, list):
        return any(_fits_type(value, k) for k in kind)
    return (kind == "string" and isinstance(value, str)
            or kind == "integer" and isinstance(value, int) and not isinstance(value, bool)
            or kind == "number" and isinstance(value, (int, float)) and not isinstance(value, bool)
            or kind == "boolean" and isinstance(value, bool) or kind == "null" and value is None
            or kind == "object" and isinstance(value, dict) or kind == "array" and isinstance(value, list))


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
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            problems.append(f"{path}: {key} must be a finite number")
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
    return json.dumps(value, ensure_ascii=False)


def for_object() -> Node:
    """`response_format: json_object` without a schema: an object of up to DEFAULT_MAX_ITEMS entries,
    each a short string key and a string value, the model choosing the keys (structured.py
    renders it)."""
    return Arr(Str(0, None, DEFAULT_STRING_TOKENS), 1, DEFAULT_MAX_ITEMS, key=Str(1, None, 6))


def tool_call(name: str, parameters: dict | None) -> Node:
    """A function call in the OpenAI shape {"name": ..., "arguments": {...}}, the arguments laid out
    from the function's parameters schema (none: an object with no properties)."""
    params = compile_schema(parameters) if parameters else Obj(())
    if not isinstance(params, Obj):
        raise Unsupported(f"function {name}: its parameters schema must describe an object")
    return Obj((("name", Const(_dumps(name))), ("arguments", params)))
