"""The rows a batch decodes, as tensors (sampler.py's Decoding holds one `Batch`): built once from the
requests' rows (canvas.py), shrunk as rows finish (`keep`), grown as requests join (`joined`), and the
window of canvas positions a cached step recomputes (`window`, Fast-dLLM's dual cache: the open block and
the one before it)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import torch

from .canvas import Row, newline_first_table
from .reuse import Plan
from ..network.tokenizer import Tokenizer
from ..network.transformer import KVCache


_FIXED = {"fixed": True}  # a Batch field that is not one entry per batch row: keep() leaves it
_LISTED = {"fixed": True, "listed": True}  # one entry per batch row, a list: keep() takes its entries too


@dataclass(eq=False)
class Batch:
    """The rows still decoding; shrinks as rows finish. Every field not marked _FIXED is per batch
    row and `keep` indexes them all. Each row has one spare column past its tokens (`junk`), never
    attended to: window slots beyond a row's canvas point there."""

    index: torch.Tensor  # [B] which request each batch row is
    x: torch.Tensor  # [B, S + 1] token ids
    key_mask: torch.Tensor  # [B, S + 1] the row's own tokens
    positions: torch.Tensor  # [B, S + 1]
    start: torch.Tensor  # [B] first canvas position
    length: torch.Tensor  # [B] canvas length
    canvas_valid: torch.Tensor  # [B, N] canvas column inside the row's canvas
    canvas_idx: torch.Tensor  # [B, N] absolute index of each canvas column (junk past the canvas)
    masked: torch.Tensor  # [B, N]
    conf: torch.Tensor  # [B, N] probability of each committed token when it was committed
    one_line: torch.Tensor  # [B]
    allowed_first: torch.Tensor  # [B, V] healed rows: the ids allowed at canvas[0]; [B, 0] without healing
    newline_first: torch.Tensor  # [B, V] one-line rows: ids at canvas[0] that end the line; [B, 0] without
    cache: KVCache | None = None  # per layer [B, Hkv, S + 1, D]
    newline: torch.Tensor | None = field(default=None, metadata=_FIXED)  # [V] with one-line rows
    shift: int = field(default=0, metadata=_FIXED)  # 1 when output i predicts position i + 1
    # per batch row, as built (a row that left took its own along: a first pass after a row was stopped
    # lines up only the rows still there)
    rows: list[Row] = field(default_factory=list, metadata=_LISTED)
    plans: list[Plan] | None = field(default=None, metadata=_LISTED)  # per batch row: first pass from earlier fills
    dense: bool = field(default=False, metadata=_FIXED)  # no row shorter than S: only junk is left out

    @property
    def junk(self) -> int:
        return self.x.shape[1] - 1

    @classmethod
    def build(cls, rows: list[Row], one_line: list[bool], tok: Tokenizer, vocab_size: int, shift: int,
              device) -> Batch:
        B, N, S = len(rows), max(r.length for r in rows), max(len(r.ids) for r in rows)
        # built on the host and copied once: a copy per row was B small uploads to a GPU
        x = torch.full((B, S + 1), tok.filler_id, dtype=torch.long)
        key_mask = torch.zeros(B, S + 1, dtype=torch.bool)
        allowed_first = torch.zeros(B, vocab_size if any(r.healed for r in rows) else 0, dtype=torch.bool)
        for i, r in enumerate(rows):
            x[i, : len(r.ids)] = torch.tensor(r.ids)
            key_mask[i, : len(r.ids)] = True
            if r.healed:
                allowed_first[i, r.first_allowed] = True
        x, key_mask, allowed_first = (t.to(device, non_blocking=True) for t in (x, key_mask, allowed_first))
        newline, newline_first = None, torch.zeros(B, 0, dtype=torch.bool, device=device)
        if any(one_line):
            newline = torch.zeros(vocab_size, dtype=torch.bool, device=device)
            newline[tok.newline_ids] = True
            newline_first = newline_first_table(tok, rows, newline)
        start = torch.tensor([r.start for r in rows], device=device)
        length = torch.tensor([r.length for r in rows], device=device)
        at = torch.arange(N, device=device)
        valid = at < length[:, None]
        return cls(index=torch.arange(B, device=device), x=x, key_mask=key_mask,
                   positions=torch.arange(S + 1, device=device).expand(B, S + 1), start=start, length=length,
                   canvas_valid=valid, canvas_idx=torch.where(valid, start[:, None] + at, S), masked=valid.clone(),
                   conf=torch.zeros(B, N, device=device), allowed_first=allowed_first, newline_first=newline_first,
                   one_line=torch.tensor(one_line, dtype=torch.bool, device=device), newline=newline, shift=shift,
                   rows=rows, dense=all(len(r.ids) == S for r in rows))

    def keep(self, kept: torch.Tensor) -> None:
        """Only batch rows `kept` [B'] stay, in every per-row field."""
        rows = kept.tolist()
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.metadata.get("listed") and value is not None:
                setattr(self, f.name, [value[b] for b in rows])
            elif not f.metadata.get("fixed"):
                setattr(self, f.name, _take(value, kept))

    def joined(self, other: Batch) -> Batch:
        """This batch and `other` (rows that joined, their first pass done) as one: both padded to
        the longer row and the wider canvas, the junk column kept last (STYLE: a new row's first
        pass is its own, every later step is shared)."""
        S, N = max(self.junk, other.junk), max(self.masked.shape[1], other.masked.shape[1])
        vocab = max(self.allowed_first.shape[1], other.allowed_first.shape[1])
        vocab_nl = max(self.newline_first.shape[1], other.newline_first.shape[1])
        parts = [b._padded(S, N, vocab, vocab_nl) for b in (self, other)]
        fields = {f.name: _cat(parts[0][f.name], parts[1][f.name]) for f in dataclasses.fields(self)
                  if not f.metadata.get("fixed")}
        dense = self.dense and other.dense and self.junk == other.junk
        if self.cache is None or other.cache is None:  # the next step is a full pass for every row
            fields["cache"] = None
        else:
            fields["cache"] = dataclasses.replace(fields["cache"], dense=dense)
        return Batch(**fields, newline=self.newline if self.newline is not None else other.newline,
                      shift=self.shift, rows=self.rows + other.rows, dense=dense)

    def _padded(self, S: int, N: int, vocab: int, vocab_nl: int) -> dict:
        """Every per-row field, as if the batch had been built with rows of S tokens and canvases of N."""
        B, junk, n = self.x.shape[0], self.junk, self.masked.shape[1]

        def cols(t):  # [B, junk + 1, ...] -> [B, S + 1, ...]: the row's columns, then the junk one repeated
            out = t[:, junk:junk + 1].expand(B, S + 1, *t.shape[2:]).clone()
            out[:, :junk] = t[:, :junk]
            return out

        def canvas(t, value):  # [B, n] -> [B, N]
            return torch.cat([t, t.new_full((B, N - n), value)], 1)

        def table(t, width):  # [B, V or 0] -> [B, width]
            return t if t.shape[1] == width else t.new_zeros(B, width)

        cache = None
        if self.cache is not None:
            def keys(t):  # [B, H, junk + 1, D] -> [B, H, S + 1, D]
                return cols(t.transpose(1, 2)).transpose(1, 2)
            cache = KVCache([keys(k) for k in self.cache.keys], [keys(v) for v in self.cache.values],
                            cols(self.cache.key_mask), positions=None if self.cache.positions is None
                            else torch.arange(S + 1, device=self.x.device).expand(B, S + 1))
        return dict(index=self.index, x=cols(self.x), key_mask=cols(self.key_mask),
                    positions=torch.arange(S + 1, device=self.x.device).expand(B, S + 1), start=self.start,
                    length=self.length, canvas_valid=canvas(self.canvas_valid, False),
                    canvas_idx=canvas(torch.where(self.canvas_idx == junk, S, self.canvas_idx), S),
                    masked=canvas(self.masked, False), conf=canvas(self.conf, 0.0), one_line=self.one_line,
                    allowed_first=table(self.allowed_first, vocab), newline_first=table(self.newline_first, vocab_nl),
                    cache=cache)

    def window(self, block_size: int, whole: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The canvas positions a cached step recomputes: the open block and the one before it (its
        last commits were still masks when its keys/values were cached); the whole canvas without
        blocks. Returns (first canvas column [B], absolute indices [B, W + shift], valid [B, W + shift]);
        with shifted logits the position before the window comes first, since it predicts the first."""
        B, N = self.masked.shape
        at = torch.arange(N, device=self.x.device)
        if not block_size or whole:
            first_col, width = torch.zeros(B, dtype=torch.long, device=self.x.device), N
            own = torch.full((B,), N, device=self.x.device)
        else:
            block = torch.where(self.masked, at, N).min(-1).values // block_size
            back = torch.where(block > 0, block_size, 0)  # [B] the first block has none before it
            first_col = (block * block_size - back).clamp(min=0)
            # on a GPU every row's window is two blocks wide (a few more positions, and no read of
            # back.max() to the host each step); on the CPU, where positions cost, as wide as needed
            width = min(N, 2 * block_size if self.x.is_cuda else block_size + int(back.max()))
            own = block_size + back  # [B] a row's own window: what it recomputes alone, whatever its batch-mates'
        cols = first_col[:, None] + torch.arange(-self.shift, width, device=self.x.device)
        valid = (cols < self.length[:, None]) & (cols < (first_col + own)[:, None])
        return first_col, torch.where(valid, self.start[:, None] + cols, self.junk), valid


def _cat(a, b):
    if isinstance(a, KVCache):
        return KVCache([torch.cat(p) for p in zip(a.keys, b.keys)], [torch.cat(p) for p in zip(a.values, b.values)],
                       torch.cat([a.key_mask, b.key_mask]), positions=_cat(a.positions, b.positions))
    return None if a is None or b is None else torch.cat([a, b])


def _take(value, kept: torch.Tensor):
    if isinstance(value, KVCache):  # fewer rows of a dense batch are dense
        return KVCache([k[kept] for k in value.keys], [v[kept] for v in value.values], value.key_mask[kept],
                       value.dense, _take(value.positions, kept))
    return None if value is None else value[kept]
