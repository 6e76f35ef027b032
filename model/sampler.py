"""Masked-diffusion infilling of spans of unknown length, several requests batched together.

Each request becomes a row `prefix | N x mask | suffix`. Every step runs one forward pass for all
unfinished rows, predicts every masked canvas position, and an unmasking policy (policies.py)
commits some of them. The model writes real tokens followed by filler tokens; fillers are
stripped, so the fill's length adapts up to N. With the context cache (Fast-dLLM dual cache) only
the canvas is recomputed between refreshes; the prefix and suffix keys/values are reused.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from .canvas import FillRequest, Row, build_row
from .policies import POLICIES, block_eligible, select, token_stats
from .tokenizer import Tokenizer


@dataclass
class SamplerConfig:
    policy: str = "threshold"
    threshold: float = 0.9  # threshold policy: commit every position at least this confident
    k: int = 2  # topk policy: positions committed per step
    gamma: float = 0.5  # eb policy: entropy budget per step (nats)
    block_size: int | None = None  # semi-autoregressive blocks; None: the whole canvas is one block
    use_cache: bool = True  # reuse prefix/suffix keys and values across steps
    refresh_every: int | None = None  # recompute the whole context every k steps; None: never
    time_budget_ms: float | None = None  # past this, commit every remaining position greedily
    heal: bool = True  # token healing at the cursor

    def __post_init__(self):
        if self.policy not in POLICIES:
            raise ValueError(f"unknown unmasking policy {self.policy!r}; choose from {', '.join(POLICIES)}")
        if not 0.0 < self.threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {self.threshold}")
        if self.k < 1 or (self.block_size is not None and self.block_size < 1):
            raise ValueError("k and block_size must be at least 1")
        if self.refresh_every is not None and self.refresh_every < 1:
            raise ValueError(f"refresh_every must be at least 1, got {self.refresh_every}")


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
    canvas: list[int] = field(default_factory=list, repr=False)  # all canvas ids, fillers included


class _Batch:
    """Tensors for the rows still decoding; shrinks as rows finish."""

    def __init__(self, rows: list[Row], pad_id: int, shift: int, device):
        B, N = len(rows), max(r.length for r in rows)
        # wide enough that every row's active block [start - shift, start + N) stays inside it
        S = max(max(len(r.ids) for r in rows), max(r.start for r in rows) + N)
        self.index = torch.arange(B, device=device)  # which request each batch row is
        self.x = torch.full((B, S), pad_id, dtype=torch.long, device=device)
        self.key_mask = torch.zeros(B, S, dtype=torch.bool, device=device)
        self.canvas_valid = torch.zeros(B, N, dtype=torch.bool, device=device)
        starts = torch.tensor([r.start for r in rows], device=device)
        for i, r in enumerate(rows):
            self.x[i, : len(r.ids)] = torch.tensor(r.ids)
            self.key_mask[i, : len(r.ids)] = True
            self.canvas_valid[i, : r.length] = True
        j = torch.arange(N + shift, device=device)
        # active block: canvas positions, plus the one before them when logits are shifted
        self.active_idx = starts[:, None] - shift + j  # [B, N + shift]
        self.active_valid = torch.cat([torch.ones(B, shift, dtype=torch.bool, device=device), self.canvas_valid], 1)
        self.canvas_idx = self.active_idx[:, shift:]  # [B, N]
        self.logit_idx = self.active_idx[:, :N]  # outputs that predict the canvas
        self.positions = torch.arange(S, device=device).expand(B, S)
        self.masked = self.canvas_valid.clone()
        self.conf = torch.zeros(B, N, device=device)
        self.allowed_first = torch.zeros(B, 0, dtype=torch.bool, device=device)
        self.cache = None
        self.context_mask = self.key_mask.clone()  # what the active block sees in the cache
        for i, r in enumerate(rows):
            self.context_mask[i, r.start - shift : r.start + r.length] = False

    def keep(self, rows: torch.Tensor):
        for name in ("index", "x", "key_mask", "canvas_valid", "active_idx", "active_valid", "canvas_idx",
                     "logit_idx", "positions", "masked", "conf", "context_mask", "allowed_first"):
            setattr(self, name, getattr(self, name)[rows])
        if self.cache is not None:
            self.cache.keys = [k[rows] for k in self.cache.keys]
            self.cache.values = [v[rows] for v in self.cache.values]
            self.cache.key_mask = self.cache.key_mask[rows]


def _constrain(logits: torch.Tensor, batch: _Batch, tok: Tokenizer) -> torch.Tensor:
    """Never predict mask/bos; with token healing, canvas[0] must start with the typed text."""
    logits = logits.float()
    banned = [i for i in (tok.mask_id, tok.bos_id) if i is not None]
    logits[..., banned] = float("-inf")
    if batch.allowed_first.shape[1]:
        healing = batch.allowed_first.any(-1)
        logits[:, 0] = logits[:, 0].masked_fill(healing[:, None] & ~batch.allowed_first, float("-inf"))
    return logits


def _canvas_logits(model, batch: _Batch, cfg: SamplerConfig, step: int) -> torch.Tensor:
    """One forward pass -> logits for every canvas position [B, N, V]."""
    refresh = batch.cache is None or (cfg.refresh_every and step % cfg.refresh_every == 0)
    if not cfg.use_cache or refresh:
        h, cache = model.hidden(batch.x, batch.positions, batch.key_mask)
        if cfg.use_cache:
            batch.cache = cache.masked(batch.context_mask)
        h = h.gather(1, batch.logit_idx[..., None].expand(-1, -1, h.shape[-1]))
    else:
        tokens = batch.x.gather(1, batch.active_idx)
        h, _ = model.hidden(tokens, batch.active_idx, batch.active_valid, batch.cache)
        h = h[:, : batch.logit_idx.shape[1]]
    return model.logits(h)


@torch.inference_mode()
def fill(model, tok: Tokenizer, requests: list[FillRequest], cfg: SamplerConfig | None = None,
         should_stop: Callable[[int], bool] | None = None) -> list[FillResult]:
    """Infill every request; the batch runs one forward pass per step for all unfinished rows.

    should_stop(i) is asked between denoising steps for each unfinished request i; when it says
    True, the request is abandoned (result.cancelled) and the rest of the batch goes on."""
    cfg = cfg or SamplerConfig()
    t0 = time.perf_counter()
    if not requests:
        return []
    shift = int(model.config.shift_logits)
    if shift and tok.bos_id is None:
        raise ValueError("a model with shifted logits needs a tokenizer with a bos token")
    device = next(model.parameters()).device
    rows = [build_row(r, tok, model.config.max_seq_len, cfg.heal) for r in requests]
    batch = _Batch(rows, tok.filler_id, shift, device)
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
    step = 0
    while len(batch.index):
        logits = _constrain(_canvas_logits(model, batch, cfg, step), batch, tok)
        step += 1
        pred, p, entropy = token_stats(logits, entropy=cfg.policy == "eb")
        eligible = block_eligible(batch.masked, cfg.block_size)
        commit = select(cfg.policy, p, entropy, eligible, tau=cfg.threshold, k=cfg.k, gamma=cfg.gamma)
        out_of_time = cfg.time_budget_ms is not None and (time.perf_counter() - t0) * 1e3 > cfg.time_budget_ms
        if out_of_time:
            commit = batch.masked
        cur = batch.x.gather(1, batch.canvas_idx)
        batch.x.scatter_(1, batch.canvas_idx, torch.where(commit, pred, cur))
        batch.conf = torch.where(commit, p, batch.conf)
        batch.masked &= ~commit
        finished = ~batch.masked.any(-1)
        now = (time.perf_counter() - t0) * 1e3
        for b, (i, done) in enumerate(zip(batch.index.tolist(), finished.tolist())):
            forwards[i] += 1
            if done:
                n = rows[i].length
                canvas[i] = batch.x[b].gather(0, batch.canvas_idx[b, :n]).tolist()
                conf[i] = batch.conf[b, :n].tolist()
                done_ms[i], budget_hit[i] = now, out_of_time
        if should_stop is not None:
            for b, i in enumerate(batch.index.tolist()):
                if not finished[b] and should_stop(i):
                    cancelled[i], done_ms[i], finished[b] = True, now, True
        if finished.any():
            batch.keep((~finished).nonzero().squeeze(-1))
    results = [_result(req, row, tok, canvas[i], conf[i], forwards[i], done_ms[i], budget_hit[i])
               for i, (req, row) in enumerate(zip(requests, rows))]
    for r, c in zip(results, cancelled):
        r.cancelled = c
    return results


def _result(req, row: Row, tok: Tokenizer, ids, conf, forwards, ms, budget_hit) -> FillResult:
    keep = [(t, c) for t, c in zip(ids, conf) if t != tok.filler_id]
    kept_ids = [t for t, _ in keep]
    text = tok.decode(kept_ids)
    if row.healed:
        text = text[len(row.healed):] if text.startswith(row.healed) else text
    n_real = len(kept_ids) - (1 if row.healed and kept_ids else 0)
    return FillResult(id=req.id, text=text, token_ids=kept_ids, confidence=[c for _, c in keep],
                      forwards=forwards, tokens=n_real, ms=ms, budget_hit=budget_hit, canvas=ids)
