"""Masked-diffusion infilling of spans of unknown length, several requests batched together.

Each request becomes a row `prefix | N x mask | suffix` (canvas.py). `Decoding` is a thin loop around
`_step`, one denoising step for the batch (the shape of gpt-fast's `decode_one_token`): one forward
pass predicts the open block's masked positions of every unfinished row, an unmasking policy
(policies.py) commits some of them, and the step says which rows are done. The loop keeps one record
per request (`Decoded`) and drops done rows from the batch; its caller drives it step by step (the
drafts after each step come back to it, it stops the requests nobody waits for any more, and it may
add requests, which join the batch after their own first pass: continuous batching); `fill` drives
it to the end. The output head's statistics come from kernels/vocab_stats.py (fused on a GPU).

The model writes real tokens followed by filler tokens; fillers are stripped, so the fill's length
adapts up to N. As in training, a fill is at least one real token and fillers only ever trail it:
committing one at position k commits fillers at every later position, and neither position 0 nor
one before a committed real token may become one. A one-line request is done as soon as a committed
newline has no masked position before it, and its result is the first line without the line break;
with `stop_below`, any request is done once a token committed below that confidence has none before
it (a caller that drops the tail from such a token has its answer). With the context cache
(Fast-dLLM dual cache) a step after the first full pass recomputes only a window of the canvas, the
open block and the one before it, and each layer writes the window's keys/values into the cache in
place; the prefix, the suffix and the rest of the canvas come from the cache. Only the open block's
masked positions go through the output head. A result's per-token pieces are made once, in `_result`,
by incremental decoding minus the healed text (results.py). A request with drafts
(FillRequest.candidates) has a step 0 first: the drafts are scored and what the model believes of
them is committed (verify.py).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch

from .canvas import FillRequest, Row, build_row, newline_first_table
from .decoding import run
from ..kernels.vocab_stats import Constraint, head_stats
from .policies import block_eligible, select
from .reuse import ContextMemo, Entry, Plan, warm_row
from .settings import SamplerConfig
from .results import MASK_GLYPH, Decoded, Draft, FillResult, result_of, unhealed
from .tokenizer import Tokenizer
from .transformer import KVCache
from .verify import verify


_FIXED = {"fixed": True}  # a _Batch field that is not one entry per batch row: keep() leaves it


@dataclass(eq=False)
class _Batch:
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
    rows: list[Row] = field(default_factory=list, metadata=_FIXED)  # per request, as built
    plans: list[Plan] | None = field(default=None, metadata=_FIXED)  # per request: first pass from earlier fills
    dense: bool = field(default=False, metadata=_FIXED)  # no row shorter than S: only junk is left out

    @property
    def junk(self) -> int:
        return self.x.shape[1] - 1

    @classmethod
    def build(cls, rows: list[Row], one_line: list[bool], tok: Tokenizer, vocab_size: int, shift: int,
              device) -> _Batch:
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
        for f in dataclasses.fields(self):
            if not f.metadata.get("fixed"):
                setattr(self, f.name, _take(getattr(self, f.name), kept))

    def joined(self, other: _Batch) -> _Batch:
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
        return _Batch(**fields, newline=self.newline if self.newline is not None else other.newline,
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


def _constraint(rows, cols, batch: _Batch, tok: Tokenizer, cur: torch.Tensor, trailing: bool) -> Constraint:
    """What the masked positions (rows, cols) may predict: never mask/bos; with token healing,
    canvas[0] must start with the typed text; with trailing fillers, no filler before a committed
    real token (cur: canvas ids [B, N]), nor at canvas[0] (training never has an empty middle)."""
    banned = tuple(i for i in (tok.mask_id, tok.bos_id) if i is not None)
    allow = allow_row = no_filler = None
    if batch.allowed_first.shape[1]:
        allow = batch.allowed_first
        allow_row = torch.where((cols == 0) & batch.allowed_first.any(-1)[rows], rows, -1)
    if trailing:
        real = ~batch.masked & batch.canvas_valid & (cur != tok.filler_id)
        at = torch.arange(real.shape[1], device=real.device)
        last_real = torch.where(real, at, -1).max(-1).values
        no_filler = (cols < last_real[rows]) | (cols == 0)
    return Constraint(banned, tok.filler_id, no_filler, allow, allow_row)


def _cached_pass(model, batch: _Batch, idx: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Run positions idx [B, W] against the cache -> hidden [B, W, D]. Each layer writes their keys/values
    into the cache in place (invalid slots at the junk column) and attends to every token of the row."""
    h, _ = model.hidden(batch.x.gather(1, idx), idx, valid, batch.cache.at(idx))
    return h


def _keep_cache(batch: _Batch, keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
    """The batch's cache from a pass's keys/values: it attends to the rows' own tokens, unmasked
    when no row is padded (batch.dense, known on the host)."""
    batch.cache = KVCache(keys, values, batch.key_mask, batch.dense, positions=batch.positions)  # block-causal models


def _warm_start(model, batch: _Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The first pass from the documents' last fills: the cache is their lined-up keys/values and
    only the rest of each row runs. -> (hidden [B, W, D], slot of each position in it [B, S + 1])."""
    plans, rows = batch.plans, batch.rows
    size, theta = batch.x.shape[1], model.config.rope_theta
    layers = len(plans[0].entry.keys)
    keys, values = ([torch.stack([warm_row(p, i, kind, size, r.start, r.length, theta) for p, r in zip(plans, rows)])
                     for i in range(layers)] for kind in ("keys", "values"))
    _keep_cache(batch, keys, values)
    todo = [list(range(min(p.prefix, r.start - batch.shift), r.start + r.length))
            + list(range(r.start + r.length + p.suffix, len(r.ids))) for p, r in zip(plans, rows)]
    width = max(len(t) for t in todo)
    idx = torch.tensor([t + [batch.junk] * (width - len(t)) for t in todo], device=batch.x.device)
    h = _cached_pass(model, batch, idx, idx != batch.junk)
    slot = torch.zeros_like(batch.x).scatter_(1, idx, torch.arange(width, device=idx.device).expand_as(idx))
    return h, slot


def _hidden_at(model, batch: _Batch, cfg: SamplerConfig, step: int, rows, cols, whole: bool) -> torch.Tensor:
    """One forward pass -> hidden states [M, D] of the outputs that predict canvas positions (rows, cols).

    Full pass: every position, and the cache is (re)filled. Cached step: the window only; its fresh
    keys/values are written into the cache in place, and it sees the cache everywhere else."""
    at = (batch.start[rows] + cols - batch.shift).clamp(max=batch.junk)  # past a row's end: only on a GPU (_positions)
    if batch.cache is None and batch.plans:
        h, slot = _warm_start(model, batch)
        return h[rows, slot[rows, at]]
    refresh = batch.cache is None or (cfg.refresh_every and step % cfg.refresh_every == 0)
    if not cfg.use_cache or refresh:
        h, cache = model.hidden(batch.x, batch.positions, batch.key_mask)
        if cfg.use_cache:
            _keep_cache(batch, cache.keys, cache.values)
        return h[rows, at]
    first_col, idx, valid = batch.window(cfg.block_size, whole)
    h = _cached_pass(model, batch, idx, valid)
    return h[rows, cols - first_col[rows]]


STATIC_STEP: bool | None = None  # None: the static step on a GPU only; tests set True to run it on the CPU


def _positions(batch: _Batch, eligible: torch.Tensor, block_size: int | None, whole: bool):
    """The canvas positions a step runs through the output head -> (rows [M], cols [M], valid [M] or
    None). On the CPU the eligible ones (nonzero, whose count is read back to the host). On a GPU a
    set of fixed size: every row's open block (the whole canvas without blocks or past the time
    budget), the eligible ones marked valid. The head there reads its weights once whatever the
    number of positions, and the step has no shape that depends on the data and no host sync."""
    if not (batch.x.is_cuda if STATIC_STEP is None else STATIC_STEP):
        rows, cols = eligible.nonzero(as_tuple=True)
        return rows, cols, None
    B, N = eligible.shape
    at = torch.arange(N, device=eligible.device)
    if block_size and not whole:
        first = torch.where(eligible, at, N).min(-1).values  # [B] the open block's first eligible column
        start, K = first // block_size * block_size, min(block_size, N)
    else:
        start, K = torch.zeros(B, dtype=torch.long, device=eligible.device), N
    cols = start[:, None] + torch.arange(K, device=eligible.device)  # [B, K]
    inside = cols < N
    cols = cols.clamp(max=N - 1)
    valid = inside & eligible.gather(1, cols)
    rows = torch.arange(B, device=eligible.device)[:, None].expand(B, K)
    return rows.flatten(), cols.flatten(), valid.flatten()


def _predict(model, tok: Tokenizer, batch: _Batch, cfg: SamplerConfig, step: int, cur: torch.Tensor,
             eligible: torch.Tensor, whole: bool):
    """One forward pass -> [B, N] (pred, conf, entropy or None) at the eligible positions (zeros
    elsewhere); only they need logits (on a GPU, their open blocks: _positions)."""
    rows, cols, valid = _positions(batch, eligible, cfg.block_size, whole)
    h = _hidden_at(model, batch, cfg, step, rows, cols, whole)
    stats = head_stats(model, h, _constraint(rows, cols, batch, tok, cur, cfg.trailing_fillers),
                       entropy=cfg.policy == "eb")
    B, N = batch.masked.shape
    if valid is not None:  # the positions that are not eligible go to a spare column, cut off below
        cols = torch.where(valid, cols, N)
    out = (rows, cols)

    def spread(values, dtype):
        return torch.zeros(B, N + 1, dtype=dtype, device=h.device).index_put_(out, values)[:, :N]

    pred, conf = spread(stats.pred, torch.long), spread(stats.conf, torch.float32)
    return pred, conf, None if stats.entropy is None else spread(stats.entropy, torch.float32)


def _commit(batch: _Batch, cur: torch.Tensor, commit: torch.Tensor, pred: torch.Tensor, p: torch.Tensor,
            filler: int, trailing: bool) -> torch.Tensor:
    """Write the committed predictions into the rows -> the new canvas ids [B, N]. With trailing
    fillers, a committed filler also commits fillers at every later masked position."""
    new = torch.where(commit, pred, cur)
    batch.conf = torch.where(commit, p, batch.conf)
    batch.masked &= ~commit
    if trailing:
        seen = ((~batch.masked & batch.canvas_valid & (new == filler)).cumsum(-1) > 0) & batch.masked
        new = torch.where(seen, filler, new)
        batch.masked &= ~seen
    batch.x.scatter_(1, batch.canvas_idx, new)
    return new


def _settled(batch: _Batch, hit: torch.Tensor) -> torch.Tensor:
    """[B] bool: rows whose first committed canvas position where `hit` [B, N] holds has no masked
    position before it, so nothing decoded later can change the fill up to there."""
    n = hit.shape[1]
    at = torch.arange(n, device=hit.device)
    first_hit = torch.where(hit & ~batch.masked & batch.canvas_valid, at, n).min(-1).values
    return first_hit < torch.where(batch.masked, at, n).min(-1).values


def _done(batch: _Batch, cur: torch.Tensor, filler: int, stop_below: float) -> torch.Tensor:
    """[B] bool: rows with nothing masked, one-line rows whose first line is written, and rows whose
    first real token below stop_below is settled (the caller drops the fill from it). cur: [B, N]."""
    done = ~batch.masked.any(-1)
    if batch.newline is not None:
        is_nl = batch.newline[cur]
        is_nl[:, 0] = batch.newline_first.gather(1, cur[:, :1]).squeeze(1)
        done |= batch.one_line & _settled(batch, is_nl)
    if stop_below > 0:
        done |= _settled(batch, (cur != filler) & (batch.conf < stop_below))
    return done


def _step(model, tok: Tokenizer, batch: _Batch, cfg: SamplerConfig, step: int,
          greedy: torch.Tensor | None) -> torch.Tensor:
    """One denoising step for every row of the batch -> [B] bool, the rows that are done.

    The open semi-AR block's masked positions are predicted, the policy picks which to commit, and
    they are committed. greedy [B] bool (None: no row): rows past their time budget, where every
    masked position is predicted and committed."""
    eligible = block_eligible(batch.masked, cfg.block_size)  # [B, N]
    if greedy is not None:
        eligible = torch.where(greedy[:, None], batch.masked, eligible)
    cur = batch.x.gather(1, batch.canvas_idx)  # [B, N] canvas ids
    pred, p, entropy = _predict(model, tok, batch, cfg, step, cur, eligible, greedy is not None)
    commit = select(cfg.policy, p, entropy, eligible, tau=cfg.threshold, k=cfg.k, gamma=cfg.gamma)
    if greedy is not None:
        commit = torch.where(greedy[:, None], eligible, commit)
    cur = _commit(batch, cur, commit, pred, p, tok.filler_id, cfg.trailing_fillers)
    return _done(batch, cur, tok.filler_id, cfg.stop_below)


def _check_drafts(model, tok: Tokenizer, batch: _Batch, cfg: SamplerConfig, fills: list[Decoded]) -> torch.Tensor:
    """Verify the requests' drafts (verify.py) and commit each kept prefix into its row, as if decoded
    -> [B] bool, the rows that are done (a one-line draft kept through the filler that ends it)."""
    verdicts = verify(model, tok, batch.rows, [f.req.candidates for f in fills], [f.req.stops_at_line for f in fills],
                      cfg.draft_stride, cfg.draft_keep, cfg.draft_accept)
    cur = batch.x.gather(1, batch.canvas_idx)  # [B, N]
    commit = torch.zeros_like(batch.masked)
    pred, p = torch.zeros_like(cur), torch.zeros_like(batch.conf)
    for b, (f, v) in enumerate(zip(fills, verdicts)):
        f.verdict = v
        if v is not None and v.kept:
            k = len(v.kept)
            commit[b, :k] = True
            pred[b, :k] = torch.tensor(v.kept, device=pred.device)
            p[b, :k] = torch.tensor(v.conf, device=p.device)
    cur = _commit(batch, cur, commit, pred, p, tok.filler_id, cfg.trailing_fillers)
    return _done(batch, cur, tok.filler_id, cfg.stop_below)


def _draft(batch: _Batch, b: int, f: Decoded, tok: Tokenizer, step: int) -> Draft:
    ids = batch.x[b].gather(0, batch.canvas_idx[b, : f.row.length]).tolist()
    if f.req.ends:  # a chat answer ends at its end of turn
        ids = next((ids[:k] for k, t in enumerate(ids) if t in f.req.ends), ids)
    first = next((j for j, t in enumerate(ids) if t == tok.mask_id), len(ids))
    # one decode (not results.text_of's per-token pieces, quadratic in the canvas); a character whose last
    # bytes are still masked is not committed yet, so the committed text stays a prefix of the final
    committed = unhealed(tok.decode([t for t in ids[:first] if t != tok.filler_id]), f.row.healed).rstrip("\ufffd")
    parts, run = [committed], []
    for t in ids[first:]:
        if t == tok.mask_id or t == tok.filler_id:
            if run:
                parts.append(tok.decode(run))
                run = []
            parts.append(MASK_GLYPH if t == tok.mask_id else "")
        else:
            run.append(t)
    if run:
        parts.append(tok.decode(run))
    return Draft(step, committed, "".join(parts), sum(t == tok.mask_id for t in ids))


def _canvas(batch: _Batch, b: int, f: Decoded, tok: Tokenizer) -> list[int]:
    """Batch row b's canvas ids once it is done: masks left by an early stop become fillers, and in a
    one-line row so does everything after the first newline token."""
    ids = [tok.filler_id if t == tok.mask_id else t
           for t in batch.x[b].gather(0, batch.canvas_idx[b, : f.row.length]).tolist()]
    if not f.req.stops_at_line:
        return ids
    newline = set(tok.newline_ids)
    k = 0 if batch.newline_first[b, ids[0]] else next((j for j, t in enumerate(ids) if j and t in newline), len(ids))
    return ids[: k + 1] + [tok.filler_id] * (len(ids) - k - 1)


class Decoding:
    """One batch of requests being decoded (decoding.py's Decoding), driven by its caller: each turn of `for drafts in
    decoding` runs one denoising step (one forward pass for every unfinished row) and gives the
    drafts of the unfinished rows that asked for them (FillRequest.drafts) as (request index, Draft);
    `stop(i)` between steps abandons request i (its result is cancelled, the rest of the batch goes
    on); `take_finished()` says which requests ended since it was last asked, `result(i)` gives one.
    It calls nobody back: the worker asks it, step by step.

    Continuous batching: `add(requests)` between steps lets requests join a running batch. At the
    next turn their first step runs as a decoding of its own (a new row needs a full pass, or its
    drafts checked), and once they have their context cache they join the batch and step with the
    rest; a finished row leaves at once, so its place is free for the next one. With a memo, each
    finished row is remembered under its request's `doc`, and when every request of a batch lines
    up with its document's last fill, the first pass starts from those."""

    joins = True  # add() is allowed (DreamOn's VariableDecoding: False)

    def __init__(self, model, tok: Tokenizer, requests: list[FillRequest], cfg: SamplerConfig | None = None,
                 memo: ContextMemo | None = None):
        self.model, self.tok, self.cfg, self.memo = model, tok, cfg or SamplerConfig(), memo
        self.t0 = time.perf_counter()
        self.stopped: set[int] = set()
        self.fills: list[Decoded] = []
        self.started: list[float] = []  # per request: when it arrived (its time budget and ms count from it)
        self.finished: list[int] = []  # requests that ended since take_finished()
        self.pending: list[tuple[int, Decoding, Iterator]] = []  # joining: (first index, their decoding, its turns)
        if not requests:
            return
        shift = int(model.config.shift_logits)
        if shift and tok.bos_id is None:
            raise ValueError("a model with shifted logits needs a tokenizer with a bos token")
        self.device = next(model.parameters()).device
        self.fills = [Decoded(r, build_row(r, tok, model.config.max_seq_len, self.cfg.heal)) for r in requests]
        self.started = [self.t0] * len(requests)
        self.batch = _Batch.build([f.row for f in self.fills], [r.stops_at_line for r in requests], tok,
                                  model.config.vocab_size, shift, self.device)
        self.reuse = memo is not None and self.cfg.use_cache and self.cfg.reuse_context
        plans = [memo.plan(f.req.doc, f.row.ids, f.row.start, f.row.length) for f in self.fills] if self.reuse else []
        if plans and all(plans):  # every row lines up with its document's last fill
            self.batch.plans = plans
            for f, plan in zip(self.fills, plans):
                f.plan = plan

    def add(self, requests: list[FillRequest]) -> list[int]:
        """Requests that join between steps -> their indices (after every earlier request's)."""
        if not self.fills:
            raise ValueError("a decoding started without requests cannot be joined")
        first = len(self.fills)
        joining = Decoding(self.model, self.tok, requests, self.cfg, self.memo)
        self.pending.append((first, joining, iter(joining)))
        self.fills += joining.fills
        self.started += joining.started
        return list(range(first, len(self.fills)))

    def stop(self, i: int) -> None:
        """Abandon request i before the next step (between steps: a step always finishes)."""
        self.stopped.add(i)

    def take_finished(self) -> list[int]:
        """The requests that are done or stopped since the last call, each said once."""
        done, self.finished = self.finished, []
        return done

    def active(self) -> int:
        """Requests neither finished nor stopped yet, joining ones included."""
        return sum(1 for f in self.fills if not f.canvas and not f.cancelled)

    def __len__(self) -> int:
        return len(self.fills)

    @torch.inference_mode()
    def __iter__(self) -> Iterator[list[tuple[int, Draft]]]:
        if not self.fills:
            return
        model, tok, cfg, fills = self.model, self.tok, self.cfg, self.fills
        step = 0
        if any(f.req.candidates for f in fills):  # step 0: the drafts, verified
            done = _check_drafts(model, tok, self.batch, cfg, fills).tolist()
            passes = [f.verdict.passes if f.verdict else 0 for f in fills]
            yield self._settle(done, passes, step, None)
        while len(self.batch.index) or self.pending:
            drafts = self._join() if self.pending else []
            if self.stopped:
                self._drop_stopped()
            batch = self.batch
            if not len(batch.index):
                if drafts or self.pending:
                    yield drafts
                continue
            greedy = None
            if cfg.time_budget_ms is not None:
                now = time.perf_counter()
                late = [(now - self.started[i]) * 1e3 > cfg.time_budget_ms for i in batch.index.tolist()]
                greedy = torch.tensor(late, device=self.device) if any(late) else None
            done = _step(model, tok, batch, cfg, step, greedy).tolist()
            step += 1
            yield drafts + self._settle(done, [1] * len(fills), step, greedy)

    def _join(self) -> list[tuple[int, Draft]]:
        """One turn of every joining decoding; those that have their cache join the batch -> their drafts."""
        drafts, still = [], []
        for first, joining, turns in self.pending:
            for i in self.stopped & set(range(first, first + len(joining.fills))):
                joining.stop(i - first)
            turn = next(turns, None)  # None: that decoding has ended
            ended = turn is None
            drafts += [(first + i, d) for i, d in turn or ()]
            self.finished += [first + i for i in joining.take_finished()]
            batch = joining.batch
            if ended or not len(batch.index):
                continue
            if batch.cache is None and self.cfg.use_cache:  # its drafts were checked: its full pass is next
                still.append((first, joining, turns))
                continue
            batch.index = batch.index + first
            self.batch = self.batch.joined(batch) if len(self.batch.index) else batch
        self.pending = still
        return drafts

    def _settle(self, done: list[bool], passes: list[int], step: int,
                greedy: torch.Tensor | None) -> list[tuple[int, Draft]]:
        """After a step: each batch row took `passes[request]` more forward passes; the done ones are
        finished (and remembered) and leave the batch -> the drafts of the others that asked."""
        batch, fills, tok = self.batch, self.fills, self.tok
        now = time.perf_counter()
        late = [False] * len(done) if greedy is None else greedy.tolist()
        drafts = []
        for b, i in enumerate(batch.index.tolist()):
            f = fills[i]
            f.forwards += passes[i]
            f.row_steps, f.steps = f.row_steps + len(done), f.steps + 1
            if done[b]:
                f.canvas, f.conf = _canvas(batch, b, f, tok), batch.conf[b, : f.row.length].tolist()
                f.ms, f.budget_hit = (now - self.started[i]) * 1e3, late[b]
                self.finished.append(i)
                if self.reuse and f.req.doc and batch.cache is not None:  # none when its draft was the fill
                    _remember(self.memo, f, batch, b)
            elif f.req.drafts:
                drafts.append((i, _draft(batch, b, f, tok, step)))
        if any(done):
            self._keep([not d for d in done])
        return drafts

    def _drop_stopped(self) -> None:
        rows = [i for i in self.batch.index.tolist() if i in self.stopped]
        if not rows:  # stopped earlier, or still joining: nothing to drop (every field, the cache too, is re-indexed)
            return
        now = time.perf_counter()
        for i in rows:
            self.fills[i].cancelled, self.fills[i].ms = True, (now - self.started[i]) * 1e3
            self.finished.append(i)
        self._keep([i not in self.stopped for i in self.batch.index.tolist()])

    def _keep(self, keep: list[bool]) -> None:
        self.batch.keep(torch.tensor([b for b, k in enumerate(keep) if k], dtype=torch.long, device=self.device))

    def result(self, i: int) -> FillResult:
        return result_of(self.fills[i], self.tok)

    def results(self) -> list[FillResult]:
        return [result_of(f, self.tok) for f in self.fills]


@torch.inference_mode()
def fill(model, tok: Tokenizer, requests: list[FillRequest], cfg: SamplerConfig | None = None,
         memo: ContextMemo | None = None) -> list[FillResult]:
    """Infill every request to the end (Decoding, driven without stops or drafts)."""
    decoding = Decoding(model, tok, requests, cfg, memo)
    run(decoding)
    return decoding.results()


def _remember(memo: ContextMemo, f: Decoded, batch: _Batch, b: int) -> None:
    n = len(f.row.ids)
    keys, values = ([t[b, :, :n].clone() for t in tensors] for tensors in (batch.cache.keys, batch.cache.values))
    age = f.plan.entry.age + 1 if f.plan else 0
    memo.put(f.req.doc, Entry(f.row.ids, f.row.start, f.row.length, keys, values, age))


