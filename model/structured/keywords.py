"""What the layout compiler (jsonschema.py) needs to know of JSON Schema's keywords, torch-free:
- `resolve`: a `$ref` followed as a JSON pointer (RFC 6901, in a URI fragment) from the root, so
  `#/$defs/a/properties/y` is that property, not a def named `y`, and `#/definitions/x` is not `#/$defs/x`;
- `merge`: two subschemas intersected, for a `$ref` and its siblings (2020-12 applies both) and for a
  union's siblings, which hold for each branch; a pair it cannot intersect is a `Cannot` naming it;
- `violation`: the keyword by which a subschema rejects a value (an `enum` / `const` option is kept
  only where its siblings accept it), the 2020-12 validation rules for the keywords the layout knows.
- `walk`: every subschema's pointer, and the keywords whose values are not of the form the 2020-12
  meta-schema gives them (`malformed`), so that a broken schema is refused whole before it is compiled.
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
TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
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


def escape(key: str) -> str:
    """`key` as one token of a JSON pointer (RFC 6901: ~ as ~0, / as ~1; what `resolve` reads back)."""
    return key.replace("~", "~0").replace("/", "~1")


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
    return (_kind_violation(value, s, memo) or _size_violation(value, s) or _bound_violation(value, s)
            or _items_violation(value, s, root, depth, memo) or _properties_violation(value, s, root, depth, memo)
            or _union_violation(value, s, root, depth, memo))


def _kind_violation(value, s: dict, memo: dict) -> str | None:
    """`type`, `const` or `enum`, the first that rejects `value`."""
    if "type" in s and not any(has_type(value, k) for k in types_of(s["type"])):
        return "type"
    if "const" in s and not same(value, s["const"]):
        return "const"
    if "enum" in s:
        if not isinstance(s["enum"], list):
            raise Cannot("enum must be a list")
        if identity(value) not in _members(s["enum"], memo):
            return "enum"
    return None


def _size_violation(value, s: dict) -> str | None:
    """The length bound of a string or the item bound of an array that `value` is past."""
    for key, size, of in (("minLength", len, str), ("maxLength", len, str), ("minItems", len, list),
                          ("maxItems", len, list)):
        if key in s and isinstance(value, of):
            n = s[key]
            if not (isinstance(n, int) and not isinstance(n, bool) and n >= 0):
                raise Cannot(f"{key} must be a non-negative integer")
            if (size(value) < n) if key.startswith("min") else (size(value) > n):
                return key
    return None


def _bound_violation(value, s: dict) -> str | None:
    """The bound (`minimum` & co.) a number is outside of."""
    if not is_number(value):
        return None
    for key, ok in (("minimum", lambda b: value >= b), ("maximum", lambda b: value <= b),
                    ("exclusiveMinimum", lambda b: value > b), ("exclusiveMaximum", lambda b: value < b)):
        if key in s:
            if not bound(s[key]):
                raise Cannot(f"{key} must be a finite number of at most {MAX_BOUND:g} in size")
            if not ok(s[key]):
                return key
    return None


def _items_violation(value, s: dict, root: dict, depth: int, memo: dict) -> str | None:
    if isinstance(value, list) and "items" in s:
        for item in value:
            if bad := violation(item, s["items"], root, depth + 1, memo):
                return f"items/{bad}"
    return None


def _properties_violation(value, s: dict, root: dict, depth: int, memo: dict) -> str | None:
    """An object's `required` property missing, or the first property its schema (or
    `additionalProperties`) rejects."""
    if not isinstance(value, dict):
        return None
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
    return None


def _union_violation(value, s: dict, root: dict, depth: int, memo: dict) -> str | None:
    """`anyOf` no branch of which accepts `value`, or `oneOf` where not exactly one does."""
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


COUNTS = ("minLength", "maxLength", "minItems", "maxItems")
BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")


def malformed(s: dict) -> list[str]:
    """The keywords whose values are not of the form the 2020-12 meta-schema gives them, whatever
    type of value they would apply to (a `minItems: [1]` beside `type: string` is a broken schema)."""
    bad = []
    for key, v in s.items():
        if key in COUNTS and not (isinstance(v, int) and not isinstance(v, bool) and v >= 0):
            bad.append(f"{key} must be a non-negative integer")
        elif key in BOUNDS and not bound(v):
            bad.append(f"{key} must be a finite number of at most {MAX_BOUND:g} in size")
        elif key == "required" and not (isinstance(v, list) and all(isinstance(r, str) for r in v)
                                        and len(set(v)) == len(v)):
            bad.append("required must be a list of distinct property names")
        elif key in ("properties", "$defs", "definitions") and not (
                isinstance(v, dict) and all(isinstance(x, (bool, dict)) for x in v.values())):
            bad.append(f"{key} must be an object of schemas")
        elif key in ("additionalProperties", "items") and not isinstance(v, (bool, dict)):
            bad.append(f"{key} must be a boolean or a schema")
        elif key == "enum" and not isinstance(v, list):
            bad.append("enum must be a non-empty list")
        elif key in ("anyOf", "oneOf") and not (isinstance(v, list) and v and all(isinstance(x, (bool, dict))
                                                                                  for x in v)):
            bad.append(f"{key} must be a non-empty list of schemas")
        elif key == "$ref" and not isinstance(v, str):
            bad.append("$ref must be a string (a JSON pointer)")
        elif key == "type" and not (isinstance(v, str) and v in TYPES or isinstance(v, list) and v and all(
                isinstance(t, str) and t in TYPES for t in v)):
            bad.append(f"type must be one of {', '.join(TYPES)} or a list of them, got {v!r}")
    return bad


def walk(schema: dict) -> tuple[list[str], set[str]]:
    """(malformed for every subschema, those no value reaches too: the `properties` of a string, an
    unused def; the pointers of the subschemas). A broken schema is refused whole."""
    bad, places, stack = [], set(), [("#", schema)]
    while stack:
        path, s = stack.pop()
        places.add(path)
        if not isinstance(s, dict):
            continue
        bad += (f"{path}: {why}" for why in malformed(s))
        for key in ("properties", "$defs", "definitions"):
            if isinstance(s.get(key), dict):
                stack += ((f"{path}/{key}/{escape(k)}", v) for k, v in s[key].items())
        for key in ("anyOf", "oneOf"):
            if isinstance(s.get(key), list):
                stack += ((f"{path}/{key}/{i}", v) for i, v in enumerate(s[key]))
        stack += ((f"{path}/{key}", s[key]) for key in ("items", "additionalProperties") if key in s)
    return bad, places
