"""How sure the model is of tokens that are already there: the first half of remask-and-refine.

A next edit starts from the region as it stands. To find what should change, the region's tokens
are probed in `stride` interleaved passes: pass j masks every token i with i % stride == j and reads
the model's probability of the original token at each masked position, so every token is judged
with (stride - 1) / stride of its neighbours visible, exactly the kind of question masked diffusion
training asks. The passes share one batched forward, but each is a forward pass and is counted as
one. Pass 0 runs in full; the others run only the middle against its keys/values (as the sampler's
cached steps do), so the probe costs about one full pass plus (stride - 1) passes over the middle.
Tokens the model doubts are then re-masked and denoised (diffusion_lsp/nextedit/suggest.py);
the rest stay as they are (the remasking idea of ReMDM, Wang et al. 2025, applied to an edit).
The context is kept by reuse.py."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from ...kernels.vocab_stats import Constraint, head_stats
from ..network.tokenizer import Tokenizer, decode_pieces, fit_context
from .canvas import DoesNotFit
from .reuse import ContextMemo, Entry
from ..network.transformer import KVCache


@dataclass
class Probe:
    pieces: list[str]  # per middle token, the text it adds ("".join(pieces) == the middle)
    prob: list[float]  # per middle token, the model's probability of it with it masked
    best: list[float]  # per middle token, the probability of the model's own first choice there
    forwards: int
    ms: float


@dataclass(frozen=True)
class ScoreRow:
    """A row to score: its ids (context and middle), and where the `length` middle tokens start."""

    ids: list[int]
    start: int
    length: int


@torch.inference_mode()
def score_rows(model, tok: Tokenizer, rows: list[ScoreRow], stride: int) -> tuple[torch.Tensor, torch.Tensor, KVCache]:
    """Each row's middle scored in `stride` interleaved passes, all rows in one batch ->
    (prob [R, n], best [R, n], pass 0's cache, per layer [R, Hkv, S + 1, D]); n is the longest middle,
    and a row's entries past its own middle are 0. Each row has one spare column past its ids (the
    sampler's `junk`): window slots past a shorter middle point there."""
    R, S = len(rows), max(len(r.ids) for r in rows)
    n = max(r.length for r in rows)
    shift = int(model.config.shift_logits)
    device = next(model.parameters()).device
    x = torch.full((R, S + 1), tok.mask_id, dtype=torch.long)  # on the host, then one copy (as the sampler)
    key_mask = torch.zeros(R, S + 1, dtype=torch.bool)
    for i, r in enumerate(rows):
        x[i, :len(r.ids)] = torch.tensor(r.ids)
        key_mask[i, :len(r.ids)] = True
    x, key_mask = x.to(device, non_blocking=True), key_mask.to(device, non_blocking=True)
    start = torch.tensor([r.start for r in rows], device=device)  # [R]
    length = torch.tensor([r.length for r in rows], device=device)  # [R]
    at = torch.arange(n, device=device)
    in_mid = at[None, :] < length[:, None]  # [R, n]
    mid_idx = torch.where(in_mid, start[:, None] + at, S)  # [R, n] absolute index of each middle token
    mid = x.gather(1, mid_idx)  # [R, n]
    # pass 0 runs in full and fills the cache; passes 1.. run only the middle against it (the
    # context's keys/values are pass 0's: the Fast-dLLM dual-cache approximation the sampler makes)
    first = x.scatter(1, mid_idx, torch.where(in_mid & (at % stride == 0), tok.mask_id, mid))
    positions = torch.arange(S + 1, device=device).expand(R, S + 1)
    h0, cache = model.hidden(first, positions, key_mask)  # [R, S + 1, D]
    out_idx = (mid_idx - shift).clamp(min=0)  # [R, n] the output that predicts each middle token
    hidden = h0.gather(1, out_idx[..., None].expand(R, n, h0.shape[-1]))  # [R, n, D]
    if stride > 1:
        P = stride - 1
        cols = torch.arange(-shift, n, device=device)  # [W]
        idx = torch.where(cols[None, :] < length[:, None], start[:, None] + cols, S).repeat(P, 1)  # [P * R, W]
        passes = torch.arange(1, stride, device=device).repeat_interleave(R)  # [P * R] pass of each row
        toks = x.repeat(P, 1).gather(1, idx)
        toks[:, shift:] = torch.where(in_mid.repeat(P, 1) & (at % stride == passes[:, None]), tok.mask_id,
                                      toks[:, shift:])
        # each pass row its own copy of pass 0's cache (.repeat copies): its window is written into it in place
        ctx = KVCache([k.repeat(P, 1, 1, 1) for k in cache.keys], [v.repeat(P, 1, 1, 1) for v in cache.values],
                      key_mask.repeat(P, 1), dense=all(len(r.ids) == S for r in rows),
                      positions=None if cache.positions is None else cache.positions.repeat(P, 1))
        h, _ = model.hidden(toks, idx, idx != S, ctx.at(idx))  # [P * R, W, D]: output w predicts middle token w
        h = h[:, :n].reshape(P, R, n, -1)
        pick = (at % stride)[None, :].expand(R, n)  # [R, n] the pass that masked each middle token
        for j in range(1, stride):
            hidden = torch.where((pick == j)[..., None], h[j - 1], hidden)
    banned = tuple(i for i in (tok.mask_id, tok.bos_id) if i is not None)
    stats = head_stats(model, hidden.reshape(R * n, -1), Constraint(banned), target=mid.reshape(R * n))
    prob = stats.target_prob.view(R, n) * in_mid
    best = stats.conf.view(R, n) * in_mid
    return prob, best, cache


def probe(model, tok: Tokenizer, prefix: str, middle: str, suffix: str, stride: int = 4,
          memo: ContextMemo | None = None, doc: str | None = None) -> Probe:
    """Probabilities of `middle`'s tokens between `prefix` and `suffix`, `stride` passes. With a
    memo, pass 0's keys/values are remembered under `doc`: the fill that follows (the doubted span
    re-masked, the same context) starts from them instead of a full pass."""
    if stride < 1:
        raise ValueError(f"stride must be at least 1, got {stride}")
    t0 = time.perf_counter()
    mid = tok.encode(middle)
    if not mid:
        return Probe([], [], [], 0, 0.0)
    bos = [] if tok.bos_id is None else [tok.bos_id]
    room = model.config.max_seq_len - len(bos) - len(mid)
    if room < 0:
        raise DoesNotFit(f"a region of {len(mid)} tokens does not fit the model's {model.config.max_seq_len} positions")
    pre, suf = fit_context(tok.encode(prefix), tok.encode(suffix), room)
    ids = bos + pre + mid + suf
    start, n = len(bos) + len(pre), len(mid)
    stride = min(stride, n)
    prob, best, cache = score_rows(model, tok, [ScoreRow(ids, start, n)], stride)
    if memo is not None and doc:
        S = len(ids)
        memo.put(doc, Entry(ids, start, n, [k[0, :, :S] for k in cache.keys], [v[0, :, :S] for v in cache.values], 0))
    return Probe(decode_pieces(tok, mid)[0], prob[0].tolist(), best[0].tolist(), stride,
                 (time.perf_counter() - t0) * 1e3)
