"""The output head and what a denoising step needs of it, fused: for each masked position, the
greedy token, its probability, the entropy (EB-sampler) and, for the probe, the probability of a
given token, under the sampler's constraints (banned ids, per-position allowed sets, no filler).

The PyTorch reference computes the logits [M, V] and reduces them. The kernel never does: each
program takes BM positions and one slice of the vocabulary, computes a [BM, BV] tile of logits at
a time (h @ W^T over D in BK steps), masks it, and folds it into running statistics (online
softmax, Milakov & Gimelshein 2018): the max m and its id, s = sum exp(l - m), t = sum exp(l - m) * l.
With few positions (a one-line step has 1-16) one program per row block would leave the GPU idle,
so the vocabulary is split across programs as flash-decoding splits keys, and the [M, splits]
partials are combined on the host side of the launch (in torch, no sync). From them:
lse = m + log s, conf = exp(m - lse) = 1 / s, entropy = lse - t / s, p(target) = exp(l_target - lse).
Dispatched by dispatch.py.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from .dispatch import choice, interpreted


@dataclass(frozen=True)
class Constraint:
    """What masked positions [M] may not predict. banned: ids banned everywhere (mask, bos);
    no_filler [M] bool: positions where filler_id is banned; allow [T, V] bool tables and
    allow_row [M] (-1: none): a position with a table may predict only the ids it allows."""

    banned: tuple[int, ...] = ()
    filler_id: int = -1
    no_filler: torch.Tensor | None = None
    allow: torch.Tensor | None = None
    allow_row: torch.Tensor | None = None


@dataclass
class HeadStats:
    pred: torch.Tensor  # [M] long: the most likely allowed id
    conf: torch.Tensor  # [M] float32: its probability
    entropy: torch.Tensor | None = None  # [M] float32, when asked for
    target_prob: torch.Tensor | None = None  # [M] float32: probability of target[i], when given


def token_stats(logits: torch.Tensor, entropy: bool = True) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """logits [..., V] -> (pred, conf, entropy or None) of the greedy prediction.

    conf = exp(max - logsumexp) needs no full softmax; the entropy (EB-sampler only) does."""
    logits = logits.float()
    best, pred = logits.max(dim=-1)
    lse = torch.logsumexp(logits, dim=-1)
    conf = (best - lse).exp()
    if not entropy:
        return pred, conf, None
    logp = logits - lse[..., None]
    h = -(logp.exp() * logp.nan_to_num(neginf=0.0)).sum(-1)
    return pred, conf, h


def constrain(logits: torch.Tensor, c: Constraint) -> torch.Tensor:
    """logits [M, V] -> float32 logits with every disallowed id at -inf (in place when already float32)."""
    logits = logits.float()
    if c.banned:
        logits[:, list(c.banned)] = float("-inf")
    if c.allow is not None:
        at = c.allow_row >= 0
        logits[at] = logits[at].masked_fill(~c.allow[c.allow_row[at]], float("-inf"))
    if c.no_filler is not None:
        logits[c.no_filler, c.filler_id] = float("-inf")
    return logits


def stats_of_logits(logits: torch.Tensor, c: Constraint, entropy: bool = False,
                    target: torch.Tensor | None = None) -> HeadStats:
    """The reference's reduction of logits [M, V] already computed (the int8 head's path too)."""
    logits = constrain(logits, c)
    if target is None:
        return HeadStats(*token_stats(logits, entropy))
    probs = torch.softmax(logits, -1)
    conf, pred = probs.max(-1)
    h = token_stats(logits, True)[2] if entropy else None
    return HeadStats(pred, conf, h, probs.gather(-1, target[:, None]).squeeze(-1))


def reference(h: torch.Tensor, weight: torch.Tensor, c: Constraint, entropy: bool = False,
              target: torch.Tensor | None = None) -> HeadStats:
    """h [M, D], weight [V, D] -> HeadStats, through the [M, V] logits."""
    return stats_of_logits(F.linear(h, weight), c, entropy, target)


def head_stats(model, h: torch.Tensor, c: Constraint, entropy: bool = False,
               target: torch.Tensor | None = None) -> HeadStats:
    """The dispatch point: the kernel on CUDA, the reference elsewhere; a head that is
    not one matrix (the int8 head of CPU inference) always takes the reference's reduction."""
    weight = model.head_weight()
    if weight is None:
        return stats_of_logits(model.logits(h), c, entropy, target)
    return (launch if choice(h) == "triton" else reference)(h, weight, c, entropy, target)


# --- the kernel ----------------------------------------------------------------------------------

@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def head_stats_kernel(h_ptr, w_ptr, banned_ptr, no_filler_ptr, allow_ptr, allow_row_ptr, target_ptr,
                          m_ptr, arg_ptr, s_ptr, t_ptr, tgt_ptr,
                          M, V, D, chunk, filler_id, stride_h, stride_w, stride_allow, splits,
                          ENTROPY: tl.constexpr, TARGET: tl.constexpr, NO_FILLER: tl.constexpr,
                          ALLOW: tl.constexpr, PRECISION: tl.constexpr, UPCAST: tl.constexpr,
                          BM: tl.constexpr, BV: tl.constexpr, BK: tl.constexpr):
        pid_m, pid_s = tl.program_id(0), tl.program_id(1)
        rm = pid_m * BM + tl.arange(0, BM)
        row_ok = rm < M
        m_run = tl.full([BM], float("-inf"), tl.float32)
        arg = tl.zeros([BM], tl.int32)
        s = tl.zeros([BM], tl.float32)
        t = tl.zeros([BM], tl.float32)
        tgt = tl.full([BM], float("-inf"), tl.float32)
        if NO_FILLER:
            nf = tl.load(no_filler_ptr + rm, mask=row_ok, other=0) != 0
        if ALLOW:
            ar = tl.load(allow_row_ptr + rm, mask=row_ok, other=-1)
        if TARGET:
            tg = tl.load(target_ptr + rm, mask=row_ok, other=-1)
        v_start = pid_s * chunk
        for v0 in range(v_start, v_start + chunk, BV):
            rv = v0 + tl.arange(0, BV)
            v_ok = rv < V
            acc = tl.zeros([BM, BV], tl.float32)
            for k0 in range(0, D, BK):
                rk = k0 + tl.arange(0, BK)
                k_ok = rk < D
                a = tl.load(h_ptr + rm[:, None] * stride_h + rk[None, :], mask=row_ok[:, None] & k_ok[None, :],
                            other=0.0)
                b = tl.load(w_ptr + rv[None, :].to(tl.int64) * stride_w + rk[:, None],  # V x D may pass 2^31
                            mask=v_ok[None, :] & k_ok[:, None], other=0.0)
                if UPCAST:  # the interpreter's tl.dot is wrong on bf16 (Triton 3.9: off by 1e10 on 16 x 16)
                    a, b = a.to(tl.float32), b.to(tl.float32)
                acc = tl.dot(a, b, acc, input_precision=PRECISION)
            bad = (tl.load(banned_ptr + rv, mask=v_ok, other=1) != 0)[None, :] | (rm[:, None] < 0)
            if NO_FILLER:
                bad = bad | (nf[:, None] & (rv[None, :] == filler_id))
            if ALLOW:
                ok = tl.load(allow_ptr + ar[:, None] * stride_allow + rv[None, :],
                             mask=(ar[:, None] >= 0) & v_ok[None, :], other=1)
                bad = bad | (ok == 0)
            logit = tl.where(bad, float("-inf"), acc)
            finite = tl.where(bad, 0.0, acc)  # p * logit would be 0 * -inf at banned ids
            tile_max = tl.max(logit, 1)
            arg = tl.where(tile_max > m_run, tl.argmax(logit, 1).to(tl.int32) + v0, arg)  # earliest id on ties
            new_m = tl.maximum(m_run, tile_max)
            m_safe = tl.where(new_m == float("-inf"), 0.0, new_m)
            alpha = tl.exp(m_run - m_safe)
            p = tl.exp(logit - m_safe[:, None])
            s = s * alpha + tl.sum(p, 1)
            if ENTROPY:
                t = t * alpha + tl.sum(p * finite, 1)
            if TARGET:
                tgt = tl.maximum(tgt, tl.max(tl.where(rv[None, :] == tg[:, None], logit, float("-inf")), 1))
            m_run = new_m
        out = rm * splits + pid_s
        tl.store(m_ptr + out, m_run, mask=row_ok)
        tl.store(arg_ptr + out, arg, mask=row_ok)
        tl.store(s_ptr + out, s, mask=row_ok)
        if ENTROPY:
            tl.store(t_ptr + out, t, mask=row_ok)
        if TARGET:
            tl.store(tgt_ptr + out, tgt, mask=row_ok)

    return head_stats_kernel


BV, BK = 128, 64


def _block_m(M: int) -> int:
    """Positions per program: 16 (tl.dot's smallest tile) for a decode step's few; more for a probe's
    or a batch's hundreds, since every row block reads the whole head once (at M = 512 and BM = 16,
    32 reads of a 7B's 1.1 GB head)."""
    return 16 if M <= 16 else 32 if M <= 64 else 64


@functools.cache
def _banned_table(vocab: int, banned: tuple[int, ...], device) -> torch.Tensor:
    table = torch.zeros(vocab, dtype=torch.uint8, device=device)
    table[list(banned)] = 1
    return table


def _splits(m_blocks: int, v_tiles: int, device: torch.device) -> int:
    """Vocabulary slices per row block: enough programs to fill the GPU twice over."""
    if device.type != "cuda":  # the interpreter: few programs, and every split path still runs
        return min(v_tiles, 3)
    sms = torch.cuda.get_device_properties(device).multi_processor_count
    return max(1, min(v_tiles, -(-2 * sms // m_blocks)))


def launch(h: torch.Tensor, weight: torch.Tensor, c: Constraint, entropy: bool = False,
           target: torch.Tensor | None = None) -> HeadStats:
    """The kernel's launcher, the reference's signature: h [M, D], weight [V, D] (one dtype)."""
    if h.dim() != 2 or weight.dim() != 2 or h.shape[1] != weight.shape[1]:
        raise ValueError(f"head_stats: h {tuple(h.shape)} and weight {tuple(weight.shape)} do not multiply")
    if h.dtype != weight.dtype:
        raise ValueError(f"head_stats: h is {h.dtype}, weight {weight.dtype}")
    M, D = h.shape
    V = weight.shape[0]
    dev = h.device
    h, weight = h.contiguous(), weight.contiguous()
    BM = _block_m(M)
    m_blocks, v_tiles = -(-M // BM), -(-V // BV)
    splits = _splits(max(m_blocks, 1), v_tiles, dev)
    chunk = -(-v_tiles // splits) * BV
    splits = -(-V // chunk)
    part = torch.empty(M, splits, dtype=torch.float32, device=dev)
    m, s = part, torch.empty_like(part)
    t = torch.empty_like(part) if entropy else s
    tgt = torch.empty_like(part) if target is not None else s
    arg = torch.empty(M, splits, dtype=torch.int32, device=dev)
    if M == 0:
        return _combine(m, arg, s, t if entropy else None, tgt if target is not None else None)
    banned = _banned_table(V, tuple(sorted(set(c.banned))), dev)
    no_filler = c.no_filler.to(torch.uint8) if c.no_filler is not None else banned
    allow = c.allow.to(torch.uint8) if c.allow is not None else banned
    allow_row = c.allow_row.to(torch.int32) if c.allow is not None else banned
    tgt_ids = target.to(torch.int32) if target is not None else banned
    _kernel()[(m_blocks, splits)](
        h, weight, banned, no_filler, allow, allow_row, tgt_ids, m, arg, s, t, tgt,
        M, V, D, chunk, c.filler_id, h.stride(0), weight.stride(0), allow.stride(0) if c.allow is not None else 0,
        splits, ENTROPY=entropy, TARGET=target is not None, NO_FILLER=c.no_filler is not None,
        ALLOW=c.allow is not None, PRECISION="ieee" if h.dtype == torch.float32 or interpreted() else "tf32",
        UPCAST=interpreted(),
        BM=BM, BV=BV, BK=BK)
    return _combine(m, arg, s, t if entropy else None, tgt if target is not None else None)


def _combine(m, arg, s, t, tgt) -> HeadStats:
    """The [M, splits] partials -> HeadStats; the first slice holding the max gives the id (ties)."""
    top = m.max(-1).values  # [M]
    first = (m == top[:, None]).int().argmax(-1, keepdim=True)  # argmax returns the first maximal index
    scale = torch.exp(m - top[:, None]).nan_to_num(0.0)  # slices that saw only banned ids: exp(-inf) = 0
    s_all = (s * scale).sum(-1)
    lse = top + s_all.log()
    entropy = None if t is None else lse - (t * scale).sum(-1) / s_all
    target_prob = None if tgt is None else torch.exp(tgt.max(-1).values - lse)
    return HeadStats(arg.gather(1, first).squeeze(1).long(), torch.exp(top - lse), entropy, target_prob)
