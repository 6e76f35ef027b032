"""Masked-diffusion infilling of spans of unknown length, several requests batched together.

Each request becomes a row `prefix | N x mask | suffix`. Every step runs one forward pass for all
unfinished rows, predicts every masked canvas position, and an unmasking policy (policies.py)
commits some of them. The model writes real tokens followed by filler tokens; fillers are
stripped, so the fill's length adapts up to N. As in training, a fill is at least one real token
and fillers only ever trail it: committing one at position k commits fillers at every later
position, and neither position 0 nor one before a committed real token may become one. A one-line
request is done as soon as a committed newline has no masked position before it; with
`stop_below`, any request is done once a token committed below that confidence has none before it
(a caller that drops the tail from such a token has its answer). With the context
cache (Fast-dLLM dual cache) a step after the first full pass recomputes only a window of the
canvas, the open block and the one before it, and writes the window's keys/values back; the
prefix, the suffix and the rest of the canvas are reused from the cache. Only the open block's
masked positions go through the output head.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .canvas import FillRequest, Row, build_row
from .policies import block_eligible, select, token_stats
from .reuse import ContextMemo, Entry, Plan, warm_row
from .settings import SamplerConfig
from .tokenizer import Tokenizer
from .transformer import KVCache


@dataclass
class FillResult:
    id: object
    text: str
    token_ids: list[int]
    confidence: list[float]  # per emitted token, probability when it was committed
    forwards: int  # forward passes this request took part in
    tokens: int  # real (non-filler) tokens committed
    ms: float
    budget_hit: bool = False
    cancelled: bool = False  # abandoned between steps because should_stop said so; text is empty
    reused: int = 0  # positions whose keys/values came from the document's last fill (reuse.py)
    canvas: list[int] = field(default_factory=list, repr=False)  # all canvas ids, fillers included


class _Batch:
    """Tensors for the rows still decoding; shrinks as rows finish. Each row has one spare column
    past its tokens (`junk`), never attended to: window slots beyond a row's canvas point there."""

    def __init__(self, rows: list[Row], one_line: list[bool], pad_id: int, shift: int, device):
        B, N = len(rows), max(r.length for r in rows)
        S = max(len(r.ids) for r in rows)
        self.shift, self.junk = shift, S
        self.index = torch.arange(B, device=device)  # which request each batch row is
        self.x = torch.full((B, S + 1), pad_id, dtype=torch.long, device=device)
        self.key_mask = torch.zeros(B, S + 1, dtype=torch.bool, device=device)
        for i, r in enumerate(rows):
            self.x[i, : len(r.ids)] = torch.tensor(r.ids)
            self.key_mask[i, : len(r.ids)] = True
        self.start = torch.tensor([r.start for r in rows], device=device)
        self.length = torch.tensor([r.length for r in rows], device=device)
        self.canvas_valid = torch.arange(N, device=device) < self.length[:, None]  # [B, N]
        self.canvas_idx = torch.where(self.canvas_valid, self.start[:, None] + torch.arange(N, device=device), S)
        self.positions = torch.arange(S + 1, device=device).expand(B, S + 1)
        self.one_line = torch.tensor(one_line, dtype=torch.bool, device=device)
        self.masked = self.canvas_valid.clone()
        self.conf = torch.zeros(B, N, device=device)
        self.allowed_first = torch.zeros(B, 0, dtype=torch.bool, device=device)
        self.newline_first = torch.zeros(B, 0, dtype=torch.bool, device=device)  # [B, V] one-line rows
        self.cache = None
        self.rows, self.plans = rows, None  # with plans, the first pass starts from earlier fills (reuse.py)

    def keep(self, rows: torch.Tensor):
        for name in ("index", "x", "key_mask", "start", "length", "canvas_valid", "canvas_idx", "positions",
                     "one_line", "masked", "conf", "allowed_first", "newline_first"):
            setattr(self, name, getattr(self, name)[rows])
        if self.cache is not None:
            self.cache.keys = [k[rows] for k in self.cache.keys]
            self.cache.values = [v[rows] for v in self.cache.values]

    def window(self, block_size: int | None, whole: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The canvas positions a cached step recomputes: the open block and the one before it (its
        last commits were still masks when its keys/values were cached); the whole canvas without
        blocks. Returns (first canvas column [B], absolute indices [B, W + shift], valid [B, W + shift]);
        with shifted logits the position before the window comes first, since it predicts the first."""
        B, N = self.masked.shape
        at = torch.arange(N, device=self.x.device)
        if not block_size or whole:
            first_col, width = torch.zeros(B, dtype=torch.long, device=self.x.device), N
        else:
            block = torch.where(self.masked, at, N).min(-1).values // block_size
            back = block_size if bool((block > 0).any()) else 0
            first_col = (block * block_size - back).clamp(min=0)
            width = min(N, block_size + back)
        cols = first_col[:, None] + torch.arange(-self.shift, width, device=self.x.device)
        valid = cols < self.length[:, None]
        return first_col, torch.where(valid, self.start[:, None] + cols, self.junk), valid


def _constrain(logits: torch.Tensor, rows, cols, batch: _Batch, tok: Tokenizer, trailing: bool) -> torch.Tensor:
    """logits [M, V] of the masked positions (rows, cols): never predict mask/bos; with token
    healing, canvas[0] must start with the typed text; with trailing fillers, no filler before a
    committed real token, nor at canvas[0] (training never has an empty middle)."""
    logits = logits.float()
    banned = [i for i in (tok.mask_id, tok.bos_id) if i is not None]
    logits[:, banned] = float("-inf")
    if batch.allowed_first.shape[1]:
        at0 = (cols == 0) & batch.allowed_first.any(-1)[rows]
        logits[at0] = logits[at0].masked_fill(~batch.allowed_first[rows[at0]], float("-inf"))
    if trailing:
        cur = batch.x.gather(1, batch.canvas_idx)
        real = ~batch.masked & batch.canvas_valid & (cur != tok.filler_id)
        at = torch.arange(real.shape[1], device=real.device)
        last_real = torch.where(real, at, -1).max(-1).values
        logits[(cols < last_real[rows]) | (cols == 0), tok.filler_id] = float("-inf")
    return logits


def _cached_pass(model, batch: _Batch, idx: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Run positions idx [B, W] against the cache, write their keys/values back -> hidden [B, W, D]."""
    batch.cache.key_mask = batch.key_mask.scatter(1, idx, False)  # these are attended fresh
    h, fresh = model.hidden(batch.x.gather(1, idx), idx, valid, batch.cache)
    for cached, new in zip(batch.cache.keys + batch.cache.values, fresh.keys + fresh.values):
        cached.scatter_(2, idx[:, None, :, None].expand_as(new), new)
    return h


def _warm_start(model, batch: _Batch) -> tuple[torch.Tensor, torch.Tensor]:
    """The first pass from the documents' last fills: the cache is their lined-up keys/values and
    only the rest of each row runs. -> (hidden [B, W, D], slot of each position in it [B, S + 1])."""
    plans, rows = batch.plans, batch.rows
    size, theta = batch.x.shape[1], model.config.rope_theta
    layers = len(plans[0].entry.keys)
    keys, values = ([torch.stack([warm_row(p, i, kind, size, r.start, r.length, theta) for p, r in zip(plans, rows)])
                     for i in range(layers)] for kind in ("keys", "values"))
    batch.cache = KVCache(keys, values, batch.key_mask)
    todo = [list(range(min(p.prefix, r.start - batch.shift), r.start + r.length))
            + list(range(r.start + r.length + p.suffix, len(r.ids))) for p, r in zip(plans, rows)]
    width = max(len(t) for t in todo)
    idx = torch.tensor([t + [batch.junk] * (width - len(t)) for t in todo], device=batch.x.device)
    h = _cached_pass(model, batch, idx, idx != batch.junk)
    slot = torch.zeros_like(batch.x).scatter_(1, idx, torch.arange(width, device=idx.device).expand_as(idx))
    return h, slot


def _hidden_at(model, batch: _Batch, cfg: SamplerConfig, step: int, rows, cols, whole: bool) -> torch.Tensor:
    """One forward pass -> hidden states [M, D] of the outputs that predict canvas positions (rows, cols).

    Full pass: every position, and the cache is (re)filled. Cached step: the window only; it sees
    the cache everywhere else, and its fresh keys/values are written back into the cache."""
    at = batch.start[rows] + cols - batch.shift
    if batch.cache is None and batch.plans:
        h, slot = _warm_start(model, batch)
        return h[rows, slot[rows, at]]
    refresh = batch.cache is None or (cfg.refresh_every and step % cfg.refresh_every == 0)
    if not cfg.use_cache or refresh:
        h, cache = model.hidden(batch.x, batch.positions, batch.key_mask)
        if cfg.use_cache:
            batch.cache = cache
        return h[rows, at]
    first_col, idx, valid = batch.window(cfg.block_size, whole)
    h = _cached_pass(model, batch, idx, valid)
    return h[rows, cols - first_col[rows]]


def _predict(model, batch: _Batch, cfg: SamplerConfig, step: int, tok: Tokenizer, eligible: torch.Tensor,
             whole: bool):
    """One denoising step's prediction, as [B, N] (pred, conf, entropy) at the eligible positions
    (zeros elsewhere); only they need logits."""
    rows, cols = eligible.nonzero(as_tuple=True)
    h = _hidden_at(model, batch, cfg, step, rows, cols, whole)
    logits = _constrain(model.logits(h), rows, cols, batch, tok, cfg.trailing_fillers)
    pred_m, p_m, h_m = token_stats(logits, entropy=cfg.policy == "eb")
    shape = batch.masked.shape
    pred = torch.zeros(shape, dtype=torch.long, device=h.device).index_put_((rows, cols), pred_m)
    conf = torch.zeros(shape, device=h.device).index_put_((rows, cols), p_m)
    entropy = None if h_m is None else torch.zeros(shape, device=h.device).index_put_((rows, cols), h_m)
    return pred, conf, entropy


def _commit(batch: _Batch, commit: torch.Tensor, pred: torch.Tensor, p: torch.Tensor, filler: int,
            trailing: bool) -> None:
    cur = batch.x.gather(1, batch.canvas_idx)
    new = torch.where(commit, pred, cur)
    batch.conf = torch.where(commit, p, batch.conf)
    batch.masked &= ~commit
    if trailing:
        seen = ((~batch.masked & batch.canvas_valid & (new == filler)).cumsum(-1) > 0) & batch.masked
        new = torch.where(seen, filler, new)
        batch.masked &= ~seen
    batch.x.scatter_(1, batch.canvas_idx, new)


def _newline_first(tok: Tokenizer, rows: list[Row], newline: torch.Tensor) -> torch.Tensor:
    """[B, V]: which tokens at canvas[0] end the first line. A healed row's first token starts with
    the prefix's last token (maybe "\n\n"): only a newline after that text counts."""
    table = newline.expand(len(rows), -1).clone()
    for i, r in enumerate(rows):
        if r.healed:
            table[i] = False
            table[i, [t for t in r.first_allowed if "\n" in tok.decode([t])[len(r.healed):]]] = True
    return table


def _settled(batch: _Batch, hit: torch.Tensor) -> torch.Tensor:
    """[B] bool: rows whose first committed canvas position where `hit` [B, N] holds has no masked
    position before it, so nothing decoded later can change the fill up to there."""
    n = hit.shape[1]
    at = torch.arange(n, device=hit.device)
    first_hit = torch.where(hit & ~batch.masked & batch.canvas_valid, at, n).min(-1).values
    return first_hit < torch.where(batch.masked, at, n).min(-1).values


def _line_written(batch: _Batch, cur: torch.Tensor, newline: torch.Tensor) -> torch.Tensor:
    """[B] bool: one-line rows whose first line is written (cur: the canvas ids [B, N])."""
    is_nl = newline[cur]
    is_nl[:, 0] = batch.newline_first.gather(1, cur[:, :1]).squeeze(1)
    return batch.one_line & _settled(batch, is_nl)


def _first_line(ids: list[int], newline: set[int], filler: int, first_ends_line: bool) -> list[int]:
    """Everything after the first newline token becomes filler (also positions left masked)."""
    k = 0 if first_ends_line else next((j for j, t in enumerate(ids) if j and t in newline), len(ids))
    return ids[: k + 1] + [filler] * (len(ids) - k - 1)


@torch.inference_mode()
def fill(model, tok: Tokenizer, requests: list[FillRequest], cfg: SamplerConfig | None = None,
         should_stop: Callable[[int], bool] | None = None, memo: ContextMemo | None = None) -> list[FillResult]:
    """Infill every request; the batch runs one forward pass per step for all unfinished rows.

    should_stop(i) is asked between denoising steps for each unfinished request i; when it says
    True, the request is abandoned (result.cancelled) and the rest of the batch goes on. With a
    memo, each finished row is remembered under its request's `doc`, and when every request of
    the batch lines up with its document's last fill, the first pass starts from those."""
    cfg = cfg or SamplerConfig()
    t0 = time.perf_counter()
    if not requests:
        return []
    shift = int(model.config.shift_logits)
    if shift and tok.bos_id is None:
        raise ValueError("a model with shifted logits needs a tokenizer with a bos token")
    device = next(model.parameters()).device
    rows = [build_row(r, tok, model.config.max_seq_len, cfg.heal) for r in requests]
    batch = _Batch(rows, [r.one_line for r in requests], tok.filler_id, shift, device)
    if any(r.healed for r in rows):
        batch.allowed_first = torch.zeros(len(rows), model.config.vocab_size, dtype=torch.bool, device=device)
        for i, r in enumerate(rows):
            batch.allowed_first[i, r.first_allowed] = True
    forwards = [0] * len(rows)
    done_ms = [0.0] * len(rows)
    budget_hit = [False] * len(rows)
    cancelled = [False] * len(rows)
    canvas = [[] for _ in rows]
    conf = [[] for _ in rows]
    newline, newline_ids = None, set(tok.newline_ids) if any(r.one_line for r in requests) else set()
    if newline_ids:
        newline = torch.zeros(model.config.vocab_size, dtype=torch.bool, device=device)
        newline[tok.newline_ids] = True
        batch.newline_first = _newline_first(tok, rows, newline)
    reuse = memo is not None and cfg.use_cache and cfg.reuse_context
    if reuse:
        plans = [memo.plan(req.doc, r.ids, r.start, r.length) for req, r in zip(requests, rows)]
        batch.plans = plans if all(plans) else None
    step = 0
    while len(batch.index):
        out_of_time = cfg.time_budget_ms is not None and (time.perf_counter() - t0) * 1e3 > cfg.time_budget_ms
        eligible = batch.masked if out_of_time else block_eligible(batch.masked, cfg.block_size)
        pred, p, entropy = _predict(model, batch, cfg, step, tok, eligible, out_of_time)
        step += 1
        commit = eligible if out_of_time else select(cfg.policy, p, entropy, eligible, tau=cfg.threshold, k=cfg.k,
                                                      gamma=cfg.gamma)
        _commit(batch, commit, pred, p, tok.filler_id, cfg.trailing_fillers)
        finished = ~batch.masked.any(-1)
        cur = batch.x.gather(1, batch.canvas_idx)
        if newline is not None:
            finished |= _line_written(batch, cur, newline)
        if cfg.stop_below > 0:  # a real token below stop_below: the caller drops the fill from it
            finished |= _settled(batch, (cur != tok.filler_id) & (batch.conf < cfg.stop_below))
        now = (time.perf_counter() - t0) * 1e3
        for b, (i, done) in enumerate(zip(batch.index.tolist(), finished.tolist())):
            forwards[i] += 1
            if done:
                n = rows[i].length
                canvas[i] = [tok.filler_id if t == tok.mask_id else t  # left masked after an early stop
                             for t in batch.x[b].gather(0, batch.canvas_idx[b, :n]).tolist()]
                if requests[i].one_line:
                    ends = bool(batch.newline_first[b, canvas[i][0]])
                    canvas[i] = _first_line(canvas[i], newline_ids, tok.filler_id, ends)
                conf[i] = batch.conf[b, :n].tolist()
                done_ms[i], budget_hit[i] = now, out_of_time
                if reuse and requests[i].doc:
                    _remember(memo, requests[i].doc, rows[i], batch, b, batch.plans and batch.plans[i])
        if should_stop is not None:
            for b, i in enumerate(batch.index.tolist()):
                if not finished[b] and should_stop(i):
                    cancelled[i], done_ms[i], finished[b] = True, now, True
        if finished.any():
            batch.keep((~finished).nonzero().squeeze(-1))
    results = [_result(req, row, tok, canvas[i], conf[i], forwards[i], done_ms[i], budget_hit[i])
               for i, (req, row) in enumerate(zip(requests, rows))]
    for i, (r, c) in enumerate(zip(results, cancelled)):
        r.cancelled, r.reused = c, batch.plans[i].reused() if batch.plans else 0
    return results


def _remember(memo: ContextMemo, doc: str | None, row: Row, batch: _Batch, b: int, plan: Plan | None) -> None:
    n = len(row.ids)
    keys, values = ([t[b, :, :n].clone() for t in tensors] for tensors in (batch.cache.keys, batch.cache.values))
    memo.put(doc, Entry(row.ids, row.start, row.length, keys, values, plan.entry.age + 1 if plan else 0))


def _result(req, row: Row, tok: Tokenizer, ids, conf, forwards, ms, budget_hit) -> FillResult:
    keep = [(t, c) for t, c in zip(ids, conf) if t != tok.filler_id]
    kept_ids = [t for t, _ in keep]
    text = tok.decode(kept_ids)
    if row.healed:
        text = text[len(row.healed):] if text.startswith(row.healed) else text
    n_real = len(kept_ids) - (1 if row.healed and kept_ids else 0)
    return FillResult(id=req.id, text=text, token_ids=kept_ids, confidence=[c for _, c in keep],
                      forwards=forwards, tokens=n_real, ms=ms, budget_hit=budget_hit, canvas=ids)
