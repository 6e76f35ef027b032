"""JSON the command line prints, or writes for another program to read (`--json`, `fim --batch`, the
evaluations' and benchmarks' results, a `regress` baseline): strict JSON (RFC 8259), which has no NaN
or Infinity. Python's json writes them as the bare words `NaN` and `Infinity`, which jq, JavaScript's
JSON.parse and most other parsers refuse: a fill whose confidence was NaN (a model whose logits
overflowed) made `fim --json` print a line no one could read. A float that is not finite is written
as null; `allow_nan=False` proves that none is left."""

from __future__ import annotations

import json
import math


def finite(value):
    """`value` with every float that is not finite, at any depth of dicts, lists and tuples, made None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def dumps(value, **options) -> str:
    """json.dumps of `value` as strict JSON (see the module doc); `options` as json.dumps takes them."""
    return json.dumps(finite(value), allow_nan=False, **options)
