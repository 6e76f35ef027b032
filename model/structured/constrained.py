"""Constrained decoding of a JSON layout (jsonschema.py) on the canvas after a prompt: the skeleton's
tokens (keys, brackets, quotes, commas) are on the canvas before the first step, and each step one
forward pass predicts every open value position under that position's allowed tokens.

A unit is what is committed at once:
- a position of a string slot (tokens with no quote, backslash, control character or broken UTF-8),
  of an integer's digits (the first may carry a minus sign) or of a number's fraction; a slot's
  positions past its minimum may be the filler token, and a filler fills the rest of its slot (a
  value's length adapts, as a fill's does: model/decoding/sampler.py);
- a choice (an enum, a boolean, whether an array goes on or closes, null or a value): its options
  scored whole, each by the geometric mean of its tokens' probabilities where they would stand, and
  the best placed at once. An array's "close" also turns its later items into fillers (the decision
  after an item waits for the one before it); a null turns its value's positions into fillers, and
  the value's option is fillers where the null would be.
Every unit at least `threshold` sure is committed in a step, and at least the surest one (the
threshold policy, model/decoding/policies.py). The answer is rendered from the units (a string through json.dumps),
so it parses and validates whatever the model chose."""

from __future__ import annotations

import functools
import json
import math
import re
import time
from dataclasses import dataclass, field

import torch

from ..decoding.canvas import DoesNotFit, canvas_room
from .nodes import FRACTION_TOKENS, INTEGER_TOKENS, ROOMS, Arr, Choice, Const, Nullable, Num, Obj, Str, shrink
from ..network.tokenizer import Tokenizer


STRING, DIGITS, SIGNED = range(3)  # the kinds of slot position: rows of Tables.allowed


@dataclass(frozen=True)
class Tables:
    """allowed [3, V] bool: what a string position, a digit position and an integer's first position
    where negatives are allowed ("-", "-12", or digits) may hold, fillers aside."""

    allowed: torch.Tensor


@functools.lru_cache(maxsize=4)
def tables(tok: Tokenizer, vocab: int) -> Tables:
    """Computed once per tokenizer: every token's text decoded alone."""
    texts = [tok.hf.decode([i]) for i in range(tok.vocab_size)]
    special = set(tok.special_ids) | {i for i, t in tok.hf.get_added_tokens_decoder().items() if t.special}
    string, digits, signed = (torch.zeros(vocab, dtype=torch.bool) for _ in range(3))
    for i, t in enumerate(texts[:vocab]):
        if i in special or not t:
            continue
        if '"' not in t and "\\" not in t and "\ufffd" not in t and all(ord(c) >= 0x20 and c != "\x7f" for c in t):
            string[i] = True
        if re.fullmatch(r"[0-9]+", t):
            digits[i] = True
        elif re.fullmatch(r"-[0-9]*", t):
            signed[i] = True
    return Tables(torch.stack([string, digits, digits | signed]))


@dataclass(eq=False)
class Unit:
    kind: str  # "slot" | "choice"
    cells: list[int]  # canvas indices
    allowed: list[int] = field(default_factory=list)  # slot: per position its kind (STRING, DIGITS, SIGNED)
    min_real: int = 0  # slot: leading positions that may not be the filler
    options: list[list[int]] = field(default_factory=list)  # choice: ids per option, filler-padded to len(cells)
    texts: list[str] = field(default_factory=list)  # choice: each option's JSON text
    close: int | None = None  # a decision: the option that ends what follows (an array's close, a null)
    region_end: int = 0  # a decision: the canvas index where what it ends stops
    after: Unit | None = None  # a decision: eligible once this one chose to go on
    picked: int | None = None
    dead: bool = False  # behind an array's close: filler, never decoded

    def open(self, x: torch.Tensor, mask_id: int) -> list[int]:
        return [c for c in self.cells if x[c] == mask_id]


@dataclass
class Structured:
    text: str  # the JSON, rendered from the units
    value: object  # json.loads(text)
    forwards: int
    ms: float
    canvas: int  # positions on the canvas (skeleton and slots)
    decoded: int  # of them, the positions the model decoded (the rest were the skeleton's)


class Layout:
    """The canvas of one node: its ids (masks at open positions), its units, and how to render it."""

    def __init__(self, tok: Tokenizer, vocab: int, lead: list[int] = (), trail: list[int] = ()):
        self.tok, self.t = tok, tables(tok, vocab)
        self.ids: list[int] = list(lead)
        self.units: list[Unit] = []
        self._fixed = ""
        self._trail = list(trail)

    def build(self, node) -> callable:
        render = self._node(node)
        self._flush()
        self.ids += self._trail
        return render

    # --- laying out ----------------------------------------------------------------------------

    def _text(self, text: str) -> None:
        self._fixed += text

    def _flush(self) -> None:
        if self._fixed:
            self.ids += self.tok.encode(self._fixed)
            self._fixed = ""

    def _cells(self, n: int) -> list[int]:
        self._flush()
        start = len(self.ids)
        self.ids += [self.tok.mask_id] * n
        return list(range(start, start + n))

    def _slot(self, n: int, allowed: list[int], min_real: int) -> Unit:
        unit = Unit("slot", self._cells(n), allowed, min_real)
        self.units.append(unit)
        return unit

    def _choice(self, texts: list[str]) -> Unit:
        options = [self.tok.encode(t) for t in texts]
        n = max(len(o) for o in options)
        unit = Unit("choice", self._cells(n), options=[o + [self.tok.filler_id] * (n - len(o)) for o in options],
                    texts=list(texts))
        self.units.append(unit)
        return unit

    def _node(self, node):
        if isinstance(node, Const):
            self._text(node.text)
            return lambda: node.text
        if isinstance(node, Choice):
            unit = self._choice(list(node.options))
            return lambda: unit.texts[unit.picked]
        if isinstance(node, Str):
            self._text('"')
            unit = self._slot(node.tokens, [STRING] * node.tokens, node.min_len)
            self._text('"')
            return lambda: json.dumps(self._value_text(unit)[: node.max_len], ensure_ascii=False)
        if isinstance(node, Num):
            first = SIGNED if node.negative else DIGITS
            whole = self._slot(INTEGER_TOKENS, [first] + [DIGITS] * (INTEGER_TOKENS - 1), 1)
            frac = None
            if not node.integer:
                self._text(".")
                frac = self._slot(FRACTION_TOKENS, [DIGITS] * FRACTION_TOKENS, 0)
            return lambda: _number(node, self._value_text(whole), self._value_text(frac) if frac else "")
        if isinstance(node, Nullable):
            self._flush()
            d = self._choice(["null", ""])  # "": fillers, and the value after them
            value = self._node(node.value)
            self._flush()
            d.close, d.region_end = 0, len(self.ids)
            return lambda: "null" if d.picked == 0 else value()
        if isinstance(node, Obj):
            self._text("{")
            parts = []
            for i, (key, value) in enumerate(node.entries):
                self._text((", " if i else "") + json.dumps(key, ensure_ascii=False) + ": ")
                parts.append((key, self._node(value)))
            self._text("}")
            return lambda: "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {r()}" for k, r in parts) + "}"
        if isinstance(node, Arr):
            return self._array(node)
        raise TypeError(f"not a layout node: {node!r}")

    def _array(self, node: Arr):
        opening, closing = ("{", "}") if node.key is not None else ("[", "]")
        self._text(opening)
        items, decisions, previous = [], [], None
        for k in range(node.max_items):
            if k:
                if k < node.min_items:
                    self._text(", ")
                else:
                    self._flush()
                    d = self._choice([", ", closing])
                    d.close, d.after, previous = 1, previous, d
                    decisions.append((k, d))
            key = None
            if node.key is not None:
                key = self._node(node.key)
                self._text(": ")
            items.append((key, self._node(node.item)))
        self._text(closing)
        self._flush()
        for _, d in decisions:
            d.region_end = len(self.ids)

        def render():
            n = next((k for k, d in decisions if d.picked == d.close), node.max_items)
            parts = [(f"{key()}: " if key else "") + value() for key, value in items[:n]]
            return opening + ", ".join(parts) + closing
        return render

    def _value_text(self, unit: Unit) -> str:
        return self.tok.decode([self.x[c] for c in unit.cells if self.x[c] != self.tok.filler_id])

    # --- decoding ------------------------------------------------------------------------------

    def decode(self, model, prompt: list[int], render, threshold: float) -> Structured:
        tok = self.tok
        t0 = time.perf_counter()
        head, max_seq_len = _head(tok, prompt), model.config.max_seq_len
        if len(head) + len(self.ids) > max_seq_len:
            raise DoesNotFit(f"the prompt ({len(head)} tokens) and the answer's layout ({len(self.ids)} positions) "
                             f"do not fit the model's {max_seq_len} positions")
        device = next(model.parameters()).device
        row = torch.tensor(head + self.ids, device=device)
        offset, shift = len(head), int(model.config.shift_logits)
        canvas = row[offset:]
        positions = torch.arange(len(row), device=device)[None]
        key_mask = torch.ones(1, len(row), dtype=torch.bool, device=device)
        forwards, filler, mask = 0, tok.filler_id, tok.mask_id
        with torch.inference_mode():
            while True:
                live = [u for u in self.units if not u.dead and u.picked is None and u.open(canvas, mask)
                        and (u.after is None or u.after.picked not in (None, u.after.close))]
                if not live:
                    break
                cells = sorted({c for u in live for c in u.open(canvas, mask)})
                h, _ = model.hidden(row[None], positions, key_mask)
                forwards += 1
                out = torch.tensor([offset + c - shift for c in cells], device=device).clamp(min=0)
                logp = torch.log_softmax(model.logits(h[0, out]).float(), dim=-1)
                logp[:, [i for i in (mask, tok.bos_id) if i is not None]] = -math.inf
                at = {c: j for j, c in enumerate(cells)}
                moves = self._slot_moves([u for u in live if u.kind == "slot"], canvas, logp, at, filler, mask)
                moves += [self._choice_move(u, logp, at) for u in live if u.kind == "choice"]
                best = max(m[0] for m in moves)
                for conf, unit, action in moves:
                    if conf >= threshold or conf == best:
                        self._commit(unit, action, canvas, filler, mask)
                        if conf == best:
                            best = math.inf  # one surest move, not every tie
        self.x = canvas.tolist()  # what rendering reads
        text = render()
        decoded = sum(len(u.cells) for u in self.units if not u.dead)
        return Structured(text, json.loads(text), forwards, (time.perf_counter() - t0) * 1e3, len(self.ids),
                          decoded)

    @staticmethod
    def _choice_move(u: Unit, logp, at: dict) -> tuple:
        """(confidence, unit, option): the option whose tokens are likeliest where they would stand, by
        the geometric mean of their probabilities."""
        rows = torch.tensor([at[c] for c in u.cells], device=logp.device)
        options = torch.tensor(u.options, device=logp.device)  # [O, n]
        scores = logp[rows[None, :].expand_as(options), options].mean(-1)  # [O]
        k = int(scores.argmax())
        return math.exp(scores[k].item()), u, k

    def _slot_moves(self, units: list[Unit], canvas, logp, at: dict, filler: int, mask: int) -> list:
        """(confidence, unit, (position, token)) for every open position of the slots: its best allowed
        token, the filler allowed past the slot's minimum and after its last committed real token."""
        open_, kinds, filler_ok = [], [], []
        for u in units:
            last_real = max((j for j, c in enumerate(u.cells) if canvas[c] != mask and canvas[c] != filler),
                            default=-1)
            for j, c in enumerate(u.cells):
                if canvas[c] == mask:
                    open_.append((u, j, c))
                    kinds.append(u.allowed[j])
                    filler_ok.append(j >= u.min_real and j > last_real)
        if not open_:
            return []
        device = logp.device
        allowed = self.t.allowed.to(device)[torch.tensor(kinds, device=device)]  # [C, V]
        allowed[:, filler] = torch.tensor(filler_ok, device=device)
        rows = torch.tensor([at[c] for _, _, c in open_], device=device)
        p, ids = logp[rows].masked_fill(~allowed, -math.inf).max(dim=-1)
        return [(conf, u, (j, t)) for (u, j, _), conf, t in zip(open_, p.exp().tolist(), ids.tolist())]

    def _commit(self, u: Unit, action, canvas, filler: int, mask: int) -> None:
        if u.kind == "choice":
            if u.picked is not None:
                return
            u.picked = action
            for c, t in zip(u.cells, u.options[action]):
                canvas[c] = t
            if action == u.close:  # the array ends here, or the value is null: what follows, to its end, is filler
                end = u.cells[-1] + 1
                for v in self.units:
                    if v.cells[0] >= end and v.cells[-1] < u.region_end:
                        v.dead = True
                canvas[end:u.region_end] = filler
            return
        j, t = action
        if canvas[u.cells[j]] != mask:
            return
        canvas[u.cells[j]] = t
        if t == filler:
            for c in u.cells[j + 1:]:
                if canvas[c] == mask:
                    canvas[c] = filler


def _number(node: Num, whole: str, frac: str) -> str:
    sign = -1 if whole.startswith("-") else 1
    digits = whole.lstrip("-") or "0"
    value = sign * int(digits) if node.integer or not frac else sign * float(f"{digits}.{frac}")
    value = node.clamp(value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return json.dumps(int(value)) if node.integer else json.dumps(value)
    return json.dumps(value)


def decode_json(model, tok: Tokenizer, prompt: list[int], node, threshold: float = 0.9,
                lead: str = "", trail: str = "", limit: int | None = None) -> Structured:
    """`node` (compiled from a schema) decoded on the canvas after `prompt`; `lead` / `trail`: markup on the
    canvas around the JSON (a template's <tool_call> tags). The layout is the widest of
    nodes.ROOMS that takes at most `limit` positions (the request's max_tokens; None: no limit)
    and fits the model after the prompt; DoesNotFit naming what to change where none does
    (`param`: max_tokens, messages, or None for the schema itself)."""
    vocab, positions = model.config.vocab_size, model.config.max_seq_len
    head = _head(tok, prompt)
    room = positions - len(head) if limit is None else min(limit, positions - len(head))
    lead_ids, trail_ids = tok.encode_markup(lead), tok.encode_markup(trail)
    for r in ROOMS:
        layout = Layout(tok, vocab, lead_ids, trail_ids)
        render = layout.build(shrink(node, r))
        if len(layout.ids) <= room:
            return layout.decode(model, prompt, render, threshold)
    n = len(layout.ids)
    if limit is not None and n <= positions - len(head):
        raise DoesNotFit(f"the answer's layout takes at least {n} positions: more than max_tokens={limit}",
                         "max_tokens")
    raise DoesNotFit(f"the prompt ({len(head)} tokens) and the answer's layout (at least {n} positions) "
                     f"do not fit the model's {positions} positions", "messages" if n <= canvas_room(tok, positions)
                     else None)


def _head(tok: Tokenizer, prompt: list[int]) -> list[int]:
    """The row before the canvas: the fixed first token (unless the prompt, a chat template's, starts
    with it), then the prompt (canvas.build_row's rule)."""
    return ([] if tok.bos_id is None or prompt[:1] == [tok.bos_id] else [tok.bos_id]) + list(prompt)


def opens_with(model, tok: Tokenizer, prompt: list[int], first: list[int], n: int) -> tuple[bool, int, float]:
    """Whether the model's first choice at the start of a masked canvas of n after `prompt` is one of
    `first` (a tool call's opening token: tool choice "auto") -> (it is, forwards, ms)."""
    t0 = time.perf_counter()
    head = _head(tok, prompt)
    n = max(1, min(n, model.config.max_seq_len - len(head)))
    device = next(model.parameters()).device
    row = torch.tensor(head + [tok.mask_id] * n, device=device)
    with torch.inference_mode():
        h, _ = model.hidden(row[None], torch.arange(len(row), device=device)[None],
                            torch.ones(1, len(row), dtype=torch.bool, device=device))
        logits = model.logits(h[0, len(head) - int(model.config.shift_logits)][None]).float()[0]
        logits[[i for i in (tok.mask_id, tok.bos_id, tok.filler_id) if i is not None]] = -math.inf
        return int(logits.argmax()) in set(first), 1, (time.perf_counter() - t0) * 1e3
