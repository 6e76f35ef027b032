"""The layout of a JSON answer as nodes (what jsonschema.py compiles a schema to and constrained.py lays
out on the canvas), how big a layout is (`measure`, counted on the nodes before anything is laid
out, against the budget) and how it narrows to fit max_tokens (`shrink` to a Room) while every
answer still validates. Torch-free."""

from __future__ import annotations

import json
from dataclasses import dataclass

MAX_STRING_TOKENS = 64
MAX_ITEMS = 32
INTEGER_TOKENS = 4  # digit tokens: "12345678" is 2-4 of them in a code tokenizer
FRACTION_TOKENS = 2
# the budget of one layout (Size), checked on its nodes before the worker lays anything out. Measured with the
# embedded model's tokenizer on a 2-core CPU: near the limits (700 slots and 5,900 positions; an enum of 2,040
# options of 120 bytes) a layout is built in under 0.1 s; the 4-deep arrays of 32 it refuses were 10**6 slots
MAX_SLOTS = 1024
MAX_POSITIONS = 8192
MAX_OPTIONS = 2048
MAX_BYTES = 1 << 18


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


@dataclass(frozen=True)
class Size:
    """What a layout would hold, counted on its nodes before anything is laid out: slots (units the
    model decodes: a string, a number's parts, a choice), positions (at most: a fixed text or an
    option takes at most a token per UTF-8 byte), options (of every choice) and bytes (the fixed
    text, and each choice's options padded to its longest: the [options, positions] table it scores)."""

    slots: int = 0
    positions: int = 0
    options: int = 0
    bytes: int = 0

    def __add__(self, o: Size) -> Size:
        return Size(self.slots + o.slots, self.positions + o.positions, self.options + o.options,
                    self.bytes + o.bytes)

    def __mul__(self, n: int) -> Size:
        return Size(self.slots * n, self.positions * n, self.options * n, self.bytes * n)


def _text(text: str) -> Size:
    n = len(text.encode())
    return Size(0, n, 0, n)


def _choice(options) -> Size:
    longest = max(len(o.encode()) for o in options)
    return Size(1, longest, len(options), longest * len(options))


def measure(node: Node) -> Size:
    """The Size of `node`'s layout (the decoding lays it out the same way)."""
    if isinstance(node, Const):
        return _text(node.text)
    if isinstance(node, Choice):
        return _choice(node.options)
    if isinstance(node, Str):
        return Size(1, node.tokens) + _text('""')
    if isinstance(node, Num):
        return Size(1, INTEGER_TOKENS) + (Size() if node.integer else Size(1, FRACTION_TOKENS) + _text("."))
    if isinstance(node, Nullable):
        return _choice(("null", "")) + measure(node.value)
    if isinstance(node, Obj):
        return sum((_text(f", {json.dumps(k, ensure_ascii=False)}: ") + measure(v) for k, v in node.entries),
                   _text("{}"))
    if isinstance(node, Arr):
        item = measure(node.item) + (measure(node.key) + _text(": ") if node.key is not None else Size())
        decisions = max(0, node.max_items - max(node.min_items, 1))
        return item * node.max_items + _choice((", ", "]")) * decisions + _text("[]") + _text(", ") * node.max_items
    raise TypeError(f"not a layout node: {node!r}")


def over_budget(size: Size) -> list[str]:
    """Why a layout of `size` is refused (none: it is not)."""
    limits = (("value slots", size.slots, MAX_SLOTS), ("positions", size.positions, MAX_POSITIONS),
              ("enum options", size.options, MAX_OPTIONS), ("bytes", size.bytes, MAX_BYTES))
    return [f"the answer's layout would have {n} {what}, at most {most} (fewer maxItems, a shorter maxLength, "
            f"fewer or shorter enum values)" for what, n, most in limits if n > most]


@dataclass(frozen=True)
class Room:
    """How far a layout may be shrunk to fit max_tokens (the decoding tries ROOMS in turn): a string
    slot to at most `string_tokens` positions and an array to at most `items` items, never below
    the schema's own minLength and minItems, so the answer still validates."""

    string_tokens: int
    items: int


ROOMS = (Room(MAX_STRING_TOKENS, MAX_ITEMS), Room(16, 4), Room(8, 2), Room(4, 1), Room(2, 1), Room(1, 1),
         Room(0, 1))


def shrink(node: Node, room: Room) -> Node:
    """`node` with its slots and arrays at most `room` (a string slot of no positions: "")."""
    if isinstance(node, Str):
        tokens = max(node.min_len, min(node.tokens, room.string_tokens))
        return Str(node.min_len, node.max_len, tokens) if tokens else Const('""')
    if isinstance(node, Nullable):
        return Nullable(shrink(node.value, room))
    if isinstance(node, Obj):
        return Obj(tuple((k, shrink(v, room)) for k, v in node.entries))
    if isinstance(node, Arr):
        return Arr(shrink(node.item, room), node.min_items, max(node.min_items, min(node.max_items, room.items)),
                   None if node.key is None else shrink(node.key, room))
    return node
