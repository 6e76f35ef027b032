"""Random JSON Schemas within what model/structured/jsonschema.py supports (nested objects, arrays with bounds,
enums, numbers with bounds, strings with lengths; keys and values with quotes, backslashes, tabs,
newlines and unicode): the workload of `bench structured` and of the tests that every answer
validates. Each schema is satisfiable."""

from __future__ import annotations

import random

KEYS = ["name", "id", 'say "hi"', "ключ", "a\\b", "emoji 🎉", "x y", "tab\tkey", "count", "items"]
WORDS = ["red", 'quo"te', "naïve", "日本", "back\\slash", "new\nline", "", "ok"]


def random_schema(rng: random.Random, depth: int = 0) -> dict:
    kinds = ["string", "integer", "number", "boolean", "null", "enum", "const"]
    if depth < 3:
        kinds += ["object", "object", "array"]
    kind = rng.choice(kinds)
    if rng.random() < 0.1:  # a value or null, as Pydantic writes Optional
        inner = random_schema(rng, depth + 1)
        return inner if inner.get("type") == "null" or ("const" in inner and inner["const"] is None) \
            else {"anyOf": [inner, {"type": "null"}]}
    if kind == "object":
        keys = rng.sample(KEYS, rng.randint(1, 4))
        props = {k: random_schema(rng, depth + 1) for k in keys}
        return {"type": "object", "properties": props, "required": rng.sample(keys, rng.randint(0, len(keys))),
                "additionalProperties": False}
    if kind == "array":
        lo = rng.randint(0, 2)
        s = {"type": "array", "items": random_schema(rng, depth + 1), "minItems": lo}
        if rng.random() < 0.7:
            s["maxItems"] = lo + rng.randint(0, 3)
        return s
    if kind == "string":
        s = {"type": "string"}
        if rng.random() < 0.5:
            s["minLength"] = rng.randint(0, 3)
        if rng.random() < 0.5:
            s["maxLength"] = s.get("minLength", 0) + rng.randint(0, 8)
        if rng.random() < 0.2:
            s = {"type": "string", "enum": rng.sample(WORDS, rng.randint(1, 4))}
        return s
    if kind in ("integer", "number"):
        s = {"type": kind}
        lo = rng.choice([None, -1000, -5, 0, 3])
        if lo is not None:
            s["exclusiveMinimum" if rng.random() < 0.3 else "minimum"] = lo
        if rng.random() < 0.6:
            hi = (lo or 0) + rng.choice([3, 7, 20, 100000])  # room for an integer inside exclusive bounds
            s["exclusiveMaximum" if rng.random() < 0.3 else "maximum"] = hi
        return s
    if kind == "boolean":
        return {"type": "boolean"}
    if kind == "null":
        return {"type": "null"}
    if kind == "enum":
        return {"enum": rng.sample([1, 2.5, "a", 'b"c', None, True, "ü", {"k": [1]}], rng.randint(1, 4))}
    return {"const": rng.choice(["fixed", 7, None, [1, "x"], {"a": "b"}])}
