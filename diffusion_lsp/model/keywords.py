"""What the layout compiler (jsonschema.py) needs to know of JSON Schema's keywords, torch-free:
- `resolve`: a `$ref` followed as a JSON pointer (RFC 6901, in a URI fragment) from the root, so
  `#/$defs/a/properties/y` is that property, not a def named `y`, and `#/definitions/x` is not `#/$defs/x`;
- `merge`: two subschemas intersected, for a `$ref` and its siblings (2020-12 applies both) and for a
  union's siblings, which hold for each branch; a pair it cannot intersect is a `Cannot` naming it;
- `violation`: the keyword by which a subschema rejects a value (an `enum` / `const` option is kept
  only where its siblings accept it), the 2020-12 validation rules for the keywords the layout knows.
The caller names where in the schema (its path) a `Cannot` was met."""

from __future__ import annotations

from urllib.parse import unquote

MAX_DEPTH = 64  # subschemas followed at once (a $ref to one of its own ancestors stops here)
MAX_BOUND = 1e300  # numbers in `minimum` & co.: within a double's range, so every comparison is exact enough

ANNOTATIONS = {"title", "description", "$comment", "examples", "default", "$schema", "$id", "deprecated",
               "readOnly", "writeOnly", "$anchor", "strict", "$defs", "definitions"}
CHECKED = {"type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum", "const",
           "anyOf", "oneOf", "minLength", "maxLength", "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum",
           "$ref"}
LOWER = {"minLength": max, "minItems": max, "minimum": max, "exclusiveMinimum": max,
         "maxLength": min, "maxItems": min, "maximum": min, "exclusiveMaximum": min}  # how two bounds intersect


class Cannot(ValueError):
    """A keyword (or a pair of them) this module cannot decide: the message names it."""


def resolve(root: dict, ref) -> tuple[str, object]:
    """(the pointer, the subschema it points at) for `ref`, a `#` fragment of this schema."""
    if not (isinstance(ref, str) and ref.startswith("#")):
        raise Cannot(f"$ref {ref!r} is not a JSON pointer into this schema (#/...)")
    pointer = unquote(ref[1:])
    if pointer and not pointer.startswith("/"):
        raise Cannot(f"$ref {ref!r}: anchors are not supported, only JSON pointers (#/$defs/NAME)")
    at = root
    for part in pointer.split("/")[1:]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(at, dict) and part in at:
            at = at[part]
        elif isinstance(at, list) and part.isdigit() and (part == "0" or not part.startswith("0")) \
                and int(part) < len(at):
            at = at[int(part)]
        else:
            raise Cannot(f"$ref {ref!r} points at nothing in this schema")
    return "#" + pointer, at


def identity(v):
    """A hashable key equal for values JSON holds equal: 1 and 1.0 are, true and 1 are not (as Python
    has them), so enums intersect and test membership by hashing, not pair by pair."""
    if isinstance(v, bool) or v is None:
        return ("literal", v)
    if isinstance(v, (int, float)):
        return ("number", v)  # Python compares (and hashes) an int and a float exactly
    if isinstance(v, str):
        return ("string", v)
    if isinstance(v, list):
        return ("array", tuple(identity(x) for x in v))
    if isinstance(v, dict):
        return ("object", frozenset((k, identity(x)) for k, x in v.items()))
    raise Cannot(f"{v!r} is not a JSON value")


def same(a, b) -> bool:
    return identity(a) == identity(b)


def _members(values: list, memo: dict) -> frozenset:
    """The identities of an enum's values, computed once per list for one filtering (`memo`)."""
    hit = memo.get(id(values))
    if hit is None or hit[0] is not values:
        hit = memo[id(values)] = (values, frozenset(identity(v) for v in values))
    return hit[1]


def has_type(value, kind) -> bool:
    return (kind == "string" and isinstance(value, str)
            or kind == "integer" and is_number(value) and (isinstance(value, int) or value.is_integer())
            or kind == "number" and is_number(value)
            or kind == "boolean" and isinstance(value, bool) or kind == "null" and value is None
            or kind == "object" and isinstance(value, dict) or kind == "array" and isinstance(value, list))


def is_number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def bound(v) -> bool:
    """A number a bound may be: finite and at most MAX_BOUND in size (10**400 is neither a double nor
    answerable)."""
    return is_number(v) and (v == v) and abs(v) <= MAX_BOUND


def types_of(kind) -> list[str]:
    kinds = kind if isinstance(kind, list) else [kind]
    if not kinds or not all(isinstance(k, str) for k in kinds):
        raise Cannot(f"type must be a type name or a list of them, got {kind!r}")
    return list(dict.fromkeys(kinds))


def violation(value, s, root: dict, depth: int = 0, memo: dict | None = None) -> str | None:
    """The keyword of `s` that rejects `value` (None: accepted); Cannot for a keyword it cannot check.
    `memo`: the enums' identities, shared by the calls that filter one enum's values."""
    memo = {} if memo is None else memo
    if depth > MAX_DEPTH:
        raise Cannot(f"the schema is nested (or refers to itself) more than {MAX_DEPTH} deep")
    if s is True or s is False:
        return None if s else "false"
    if not isinstance(s, dict):
        raise Cannot("a schema must be an object")
    unknown = [k for k in s if k not in CHECKED and k not in ANNOTATIONS]
    if unknown:
        raise Cannot(f"{unknown[0]} is not supported")
    if "$ref" in s and (bad := violation(value, resolve(root, s["$ref"])[1], root, depth + 1, memo)):
        return bad
    if "type" in s and not any(has_type(value, k) for k in types_of(s["type"])):
        return "type"
    if "const" in s and not same(value, s["const"]):
        return "const"
    if "enum" in s:
        if not isinstance(s["enum"], list):
            raise Cannot("enum must be a list")
        if identity(value) not in _members(s["enum"], memo):
            return "enum"
    for key, size, of in (("minLength", len, str), ("maxLength", len, str), ("minItems", len, list),
                          ("maxItems", len, list)):
        if key in s and isinstance(value, of):
            n = s[key]
            if not (isinstance(n, int) and not isinstance(n, bool) and n >= 0):
                raise Cannot(f"{key} must be a non-negative integer")
            if (size(value) < n) if key.startswith("min") else (size(value) > n):
                return key
    if is_number(value):
        for key, ok in (("minimum", lambda b: value >= b), ("maximum", lambda b: value <= b),
                        ("exclusiveMinimum", lambda b: value > b), ("exclusiveMaximum", lambda b: value < b)):
            if key in s:
                if not bound(s[key]):
                    raise Cannot(f"{key} must be a finite number of at most {MAX_BOUND:g} in size")
                if not ok(s[key]):
                    return key
    if isinstance(value, list) and "items" in s:
        for item in value:
            if bad := violation(item, s["items"], root, depth + 1, memo):
                return f"items/{bad}"
    if isinstance(value, dict):
        props = s.get("properties", {})
        if not isinstance(props, dict):
            raise Cannot("properties must be an object")
        required = s.get("required", [])
        if not (isinstance(required, list) and all(isinstance(r, str) for r in required)):
            raise Cannot("required must be a list of property names")
        if any(r not in value for r in required):
            return "required"
        extra = s.get("additionalProperties", True)
        for k, v in value.items():
            if bad := violation(v, props[k] if k in props else extra, root, depth + 1, memo):
                return f"properties/{k}/{bad}" if k in props else "additionalProperties"
    for union in ("anyOf", "oneOf"):
        if union in s:
            if not (isinstance(s[union], list) and s[union]):
                raise Cannot(f"{union} must be a non-empty list")
            n = sum(violation(value, b, root, depth + 1, memo) is None for b in s[union])
            if n == 0 or union == "oneOf" and n > 1:
                return union
    return None


def merge(a, b, root: dict) -> dict:
    """A subschema accepting what both `a` and `b` accept, in the keywords the layout knows: bounds
    the tighter, types and enums the values in both, required and properties the union (a property
    of one that the other's additionalProperties: false excludes is left out, and refused where
    required); Cannot naming a pair it does not intersect (two unions, two $refs)."""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        raise Cannot("a schema must be an object (true/false schemas are not supported)")
    out = {k: v for k, v in a.items() if k not in ("$defs", "definitions")}
    for k, v in b.items():
        if k in ("$defs", "definitions") or k in ("enum", "const"):
            continue
        if k not in out or same(out[k], v) or k in ANNOTATIONS:
            out.setdefault(k, v)
        elif k in LOWER:
            if not (bound(out[k]) and bound(v)):
                raise Cannot(f"{k} must be a finite number")
            out[k] = LOWER[k](out[k], v)
        elif k == "type":
            out[k] = _common_types(out[k], v)
        elif k == "required":
            if not (isinstance(out[k], list) and isinstance(v, list)):
                raise Cannot("required must be a list of property names")
            out[k] = list(dict.fromkeys([*out[k], *v]))
        elif k == "items":
            out[k] = merge(out[k], v, root)
        elif k == "additionalProperties":
            out[k] = False if out[k] is False or v is False else v if out[k] is True else out[k] if v is True \
                else merge(out[k], v, root)
        elif k != "properties":
            raise Cannot(f"{k} on both sides cannot be combined")
    if "properties" in a or "properties" in b:
        out["properties"] = _properties(a, b, root)
    values = [_values(s) for s in (a, b) if "enum" in s or "const" in s]
    if values:
        others = [frozenset(identity(w) for w in other) for other in values[1:]]
        kept = [v for v in values[0] if all(identity(v) in other for other in others)]
        if not kept:
            raise Cannot("enum / const: no value is allowed by both")
        out.pop("const", None)
        out["enum"] = kept
    return out


def _values(s: dict) -> list:
    """The values a subschema's const and enum allow (both, where it has both)."""
    if "enum" in s and not isinstance(s["enum"], list):
        raise Cannot("enum must be a list")
    if "const" in s:
        return [s["const"]] if "enum" not in s or identity(s["const"]) in {identity(v) for v in s["enum"]} else []
    return s["enum"]


def _common_types(x, y):
    xs, ys = types_of(x), types_of(y)
    both = [t for t in xs if t in ys or t == "integer" and "number" in ys] + \
        [t for t in ys if t == "integer" and "number" in xs and t not in xs]
    if not both:
        raise Cannot(f"type: {x!r} and {y!r} have no type in common")
    return both[0] if len(both) == 1 else both


def _properties(a: dict, b: dict, root: dict) -> dict:
    pa, pb = a.get("properties", {}), b.get("properties", {})
    if not (isinstance(pa, dict) and isinstance(pb, dict)):
        raise Cannot("properties must be an object")
    required = {r for s in (a, b) if isinstance(s.get("required"), list) for r in s["required"] if isinstance(r, str)}
    out = {}
    for k in dict.fromkeys([*pa, *pb]):
        schema = merge(pa[k], pb[k], root) if k in pa and k in pb else pa.get(k, pb.get(k))
        for side, props in ((a, pa), (b, pb)):  # a property the other side does not declare meets its extra
            extra = side.get("additionalProperties", True)
            if k in props or extra is True:
                continue
            if extra is False:
                if k in required:
                    raise Cannot(f"additionalProperties: false excludes the required property {k!r}")
                schema = None
                break
            schema = merge(schema, extra, root)
        if schema is not None:
            out[k] = schema
    return out

