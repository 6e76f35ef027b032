"""Synthetic next-edit records, derived with tree-sitter from corpus files: the same identifier (or
literal) used several times in a function, its first uses changed (the history), the target
changes the remaining uses in the region; a new parameter added to a def and one call updated, the
target updates the other calls in the region. Records as in edits.py."""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Iterator

from ..context.languages import language_for, parser_for
from ..nextedit.history import last_change_end
from ..nextedit.region import editable_region
from .edits import KEEP, MAX_LINES, MAX_TOKENS, PARAMETERS, Count, EditRecord, make_record


def _walk(node):
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(reversed(n.children))


def _is_use(node) -> bool:
    """An identifier that names a variable (not `x.attr`'s attr, not a keyword argument's name)."""
    p = node.parent
    if p is None:
        return False
    if p.type == "attribute" and p.child_by_field_name("attribute") == node:
        return False
    if p.type == "keyword_argument" and p.child_by_field_name("name") == node:
        return False
    return True


def _binds(node) -> bool:
    """The first use of a local: a parameter or an assignment target."""
    p = node.parent
    return p is not None and (p.type in PARAMETERS or p.type == "assignment" and p.child_by_field_name("left") == node)


def renamed(name: str, rng: random.Random) -> str:
    """A plausible new name for an identifier."""
    parts = [p for p in name.split("_") if p]
    choices = [f"{name}s" if not name.endswith("s") else name[:-1] or "x", f"new_{name}", f"{name}_value",
               "_".join(reversed(parts)) if len(parts) > 1 else f"{name}_", name.upper() if len(name) < 3 else name[:3]]
    new = rng.choice(choices)
    return new if new != name and new.isidentifier() else f"{name}2"


def changed_literal(value: str, rng: random.Random) -> str:
    if value.lstrip("-").isdigit():
        n = int(value)
        return str(rng.choice([n + 1, n * 2, n * 10, max(n - 1, 0) if n != 1 else 2]))
    q = value[-1]
    body = value[value.index(q) + 1:-1] if value.count(q) >= 2 else ""
    new = rng.choice([body.upper(), body + "_v2", body.replace("_", "-"), "new_" + body, body[:1] + body])
    new = new if new != body else body + "2"
    return value[: value.index(q) + 1] + new + q


def _replace(data: bytes, spans: list[tuple[int, int]], new: bytes) -> bytes:
    out, i = [], 0
    for s, e in sorted(spans):
        out += [data[i:s], new]
        i = e
    return b"".join(out + [data[i:]])


def _repeat_record(kind: str, source: str, path: str, data: bytes, spans: list[tuple[int, int]], new: bytes,
                   done: int, count: Count) -> EditRecord | None:
    """spans[:done] changed to `new` (the history), the remaining spans inside the region are the target."""
    text = data.decode()
    current = _replace(data, spans[:done], new).decode()
    end = last_change_end(text, current)
    if end is None:
        return None
    region = editable_region(current, end[0], language_for("python"), count, MAX_LINES, MAX_TOKENS)
    shift = done * (len(new) - (spans[0][1] - spans[0][0]))  # all spans hold the same old text
    lo, hi = len(current[:region.start_offset].encode()), len(current[:region.end_offset].encode())
    rest = [s for s in spans[done:] if lo <= s[0] + shift and s[1] + shift <= hi]
    if not rest:
        return None
    target = _replace(data, spans[:done] + rest, new).decode()
    return make_record(kind, source, path, text, current, target, count)


def _occurrences(root, data: bytes) -> Iterator[tuple[str, list[tuple[int, int]]]]:
    """(kind, spans) candidates: a local's uses within one function, repeated literals within one
    function, and calls of a def of the same file."""
    defs: dict[bytes, object] = {}
    calls: dict[bytes, list] = {}
    for node in _walk(root):
        if node.type == "function_definition":
            defs[data[node.child_by_field_name("name").start_byte:node.child_by_field_name("name").end_byte]] = node
            uses: dict[bytes, list] = {}
            lits: dict[bytes, list] = {}
            for n in (n for part in ("parameters", "body") for n in _walk(node.child_by_field_name(part))):
                if n.type == "identifier" and _is_use(n):
                    uses.setdefault(data[n.start_byte:n.end_byte], []).append(n)
                elif n.type in ("integer", "string") and n.end_byte - n.start_byte <= 40:
                    lits.setdefault(data[n.start_byte:n.end_byte], []).append(n)
            for name, ns in uses.items():
                if len(ns) >= 2 and name.decode() not in KEEP and _binds(ns[0]):
                    yield "rename", [(n.start_byte, n.end_byte) for n in ns]
            for value, ns in lits.items():
                v = value.decode()
                plain_string = v[:1] in "\"'" and len(v) > 3 and "\\" not in v and "\n" not in v  # no escapes
                if len(ns) >= 2 and (v.isdigit() or plain_string):
                    yield "literal", [(n.start_byte, n.end_byte) for n in ns]
        elif node.type == "call":
            f = node.child_by_field_name("function")
            if f.type == "attribute":
                f = f.child_by_field_name("attribute")
            if f is not None and f.type == "identifier":
                calls.setdefault(data[f.start_byte:f.end_byte], []).append(node)
    for name, cs in calls.items():
        d = defs.get(name)
        if d is not None and len(cs) >= 2:
            yield "param", [d] + cs


def _param_record(source: str, path: str, data: bytes, nodes: list, count: Count,
                  rng: random.Random) -> EditRecord | None:
    """A parameter appended to a def and to its first call (the history); the target appends it to the
    other calls in the region. Only defs without defaults or star parameters (so the new one needs none)."""
    d, calls = nodes[0], nodes[1:]
    params = d.child_by_field_name("parameters")
    if any(c.type not in ("identifier", "typed_parameter", "(", ")", ",") for c in params.children):
        return None
    if any(c.type == "typed_parameter" and c.children[0].type != "identifier" for c in params.children):
        return None
    names = [data[c.start_byte:c.end_byte].decode() for c in params.children if c.type == "identifier"]
    new = rng.choice(["timeout", "context", "strict", "verbose", "encoding", "options", "limit", "name"])
    if new in names:
        return None
    def_edit = (params.end_byte - 1, params.end_byte - 1, (", " if names else "") + new)
    call_edits = []
    for c in calls:
        args = c.child_by_field_name("arguments")
        if args is None or args.type != "argument_list" or data[args.end_byte - 1:args.end_byte] != b")":
            return None
        has = any(a.type not in ("(", ")", ",", "comment") for a in args.children)
        call_edits.append((args.end_byte - 1, args.end_byte - 1, (", " if has else "") + new))
    first_call = rng.randrange(len(call_edits) - 1)  # at least one call left for the target
    history = [def_edit, call_edits[first_call]]
    text = data.decode()
    current = _apply(data, history)
    end = last_change_end(text, current)
    if end is None:
        return None
    region = editable_region(current, end[0], language_for("python"), count, MAX_LINES, MAX_TOKENS)
    lo, hi = len(current[:region.start_offset].encode()), len(current[:region.end_offset].encode())

    def moved(pos: int) -> int:  # a byte offset of `data` in `current` (history edits are insertions)
        return pos + sum(len(e[2].encode()) for e in history if e[0] < pos)

    rest = [e for e in call_edits if e not in history and lo <= moved(e[0]) < hi]
    if not rest:
        return None
    return make_record("param", source, path, text, current, _apply(data, history + rest), count)


def _apply(data: bytes, edits: list[tuple[int, int, str]]) -> str:
    out, i = [], 0
    for s, e, new in sorted(edits):
        out += [data[i:s], new.encode()]
        i = e
    return b"".join(out + [data[i:]]).decode()


def synthesize(source: str, path: str, text: str, count: Count, rng: random.Random,
               per_file: int = 4) -> list[EditRecord]:
    """Up to `per_file` synthetic records from one corpus file."""
    parser = parser_for(language_for("python"))
    data = text.encode()
    if parser is None or len(data) > 200_000:
        return []
    found = list(_occurrences(parser.parse(data).root_node, data))
    rng.shuffle(found)
    out: list[EditRecord] = []
    for kind, spans in found:
        if len(out) >= per_file:
            break
        if kind == "param":
            rec = _param_record(source, path, data, spans, count, rng)
        else:
            old = data[spans[0][0]:spans[0][1]].decode()
            new = renamed(old, rng) if kind == "rename" else changed_literal(old, rng)
            rec = _repeat_record(kind, source, path, data, spans, new.encode(),
                                 rng.randint(1, len(spans) - 1), count)
        if rec is not None and rec.new_region != rec.old_region:
            out.append(rec)
    return out


def synthetic_records(corpus_file, rate: float, count: Count, per_file: int, seed: int = 0) -> Iterator[EditRecord]:
    """Synthetic records from a deterministic `rate` sample of a corpus split's files."""
    with open(corpus_file, encoding="utf-8") as f:
        for line in f:
            r = json.loads(line)
            key = f"{r['package']}/{r['path']}"
            if zlib.crc32(key.encode()) >= rate * 2**32:
                continue
            yield from synthesize(r["package"], r["path"], r["text"], count, random.Random(f"{seed}/{key}"), per_file)
