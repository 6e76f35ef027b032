"""Keys/values of recent fills, reused by the next fill of the same document.

While the user types, consecutive requests for a document share almost all their context: the
same prefix tokens at the same positions, and the same suffix tokens shifted by what was typed.
The first step of the next fill then recomputes only what changed (the end of the prefix, the
canvas, the unmatched end of the suffix) against the stored keys/values of the rest, instead of a
full pass over every position. Suffix keys move to their new positions by one rotation (RoPE
rotations compose). Like the dual cache itself this is an approximation: the reused entries were
computed beside a slightly different canvas. Each reuse ages them; past `max_age` the next fill
of that document runs a full pass again.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import torch

from ..network.transformer import apply_rope, rope_cos_sin


@dataclass
class Entry:
    ids: list[int]  # the row as built: prefix, canvas masks, suffix
    start: int  # first canvas position
    length: int  # canvas length
    keys: list[torch.Tensor]  # per layer [Hkv, len(ids), D], RoPE applied at the row's positions
    values: list[torch.Tensor]
    age: int  # fills since the last full pass


@dataclass
class Plan:
    """How a new row lines up with an entry: its first `prefix` tokens are the entry's, and so are
    `suffix` tokens after its canvas, `shift` positions further along."""

    entry: Entry
    prefix: int
    suffix: int
    shift: int

    def reused(self) -> int:
        return self.prefix + self.suffix


def _common(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class ContextMemo:
    """The last fill's entry per document, at most `max_entries` documents (least recent dropped)."""

    def __init__(self, max_entries: int = 4, max_age: int = 8, min_share: float = 0.5):
        self.max_entries, self.max_age, self.min_share = max_entries, max_age, min_share
        self.entries: OrderedDict[str, Entry] = OrderedDict()

    def plan(self, doc: str | None, ids: list[int], start: int, length: int) -> Plan | None:
        """A plan when `doc` has a young entry that shares at least min_share of the new row."""
        entry = self.entries.get(doc) if doc else None
        if entry is None or entry.age >= self.max_age:
            return None
        self.entries.move_to_end(doc)
        prefix = _common(entry.ids[: entry.start], ids[:start])
        old_end, new_end = entry.start + entry.length, start + length
        suffix = _common(entry.ids[old_end:], ids[new_end:])
        plan = Plan(entry, prefix, suffix, new_end - old_end)
        return plan if plan.reused() >= self.min_share * len(ids) else None

    def put(self, doc: str | None, entry: Entry) -> None:
        if not doc:
            return
        self.entries[doc] = entry
        self.entries.move_to_end(doc)
        while len(self.entries) > self.max_entries:
            self.entries.popitem(last=False)


def warm_row(plan: Plan, layer: int, kind: str, size: int, start: int, length: int, theta: float) -> torch.Tensor:
    """[Hkv, size, D] keys (kind "keys", rotated by the shift) or values of one layer for the new
    row: the entry's prefix and suffix where they line up, zeros elsewhere (recomputed first)."""
    old = getattr(plan.entry, kind)[layer]
    out = old.new_zeros(old.shape[0], size, old.shape[2])
    out[:, : plan.prefix] = old[:, : plan.prefix]
    old_end, new_end = plan.entry.start + plan.entry.length, start + length
    moved = old[:, old_end : old_end + plan.suffix]
    if kind == "keys" and plan.shift:
        cos, sin = rope_cos_sin(torch.tensor([[plan.shift]], device=old.device), old.shape[-1], theta)
        moved = apply_rope(moved, cos[0, 0], sin[0, 0])
    out[:, new_end : new_end + plan.suffix] = moved
    return out
