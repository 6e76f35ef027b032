"""Training's loss, fused with the output head: LLaDA eq. 3 over the masked positions,
sum_i w_i * CE(h_i @ W^T, y_i) / n with w_i = 1 / t_i (train/objective.py), forward and backward.

The reference runs F.linear then F.cross_entropy, which keeps the [M, V] logits and the same again
for their gradient (at M = 16k masked positions and V = 152k, 10 GB in bf16 for the logits alone).
The kernel path is Liger-Kernel's fused linear cross-entropy: the positions go through in chunks
sized so a chunk's logits stay under CHUNK_ELEMS; each chunk's logits come from cuBLAS, and one
Triton program per row computes the row's log-sum-exp online (pass 1), its weighted loss, and
overwrites the logits in place with the gradient (softmax - onehot) * w / n (pass 2). The chunk's
share of dL/dh and dL/dW is then two matmuls, so the backward only scales them by the incoming
gradient. The gradients are computed in the forward: this is for training, where a backward
always follows."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from .dispatch import choice

CHUNK_ELEMS = 1 << 25  # logits per chunk: 64 MB in bf16, a few % of an H200's memory traffic per step


def reference(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor,
              n_scored: int) -> torch.Tensor:
    """h [M, D], weight [V, D], targets [M], weights [M] -> the scalar loss."""
    return weighted_ce(F.linear(h, weight), targets, weights, n_scored)


def weighted_ce(logits: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor, n_scored: int) -> torch.Tensor:
    """LLaDA eq. 3 from logits [M, V]: sum_i w_i * CE_i / n. Cross-entropy runs in fp32 whatever
    the autocast dtype."""
    ce = F.cross_entropy(logits.float(), targets, reduction="none")  # [M]
    return (ce * weights).sum() / max(n_scored, 1)


def masked_cross_entropy(model, h: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor,
                         n_scored: int) -> torch.Tensor:
    """The dispatch point: the fused kernel on CUDA, the reference elsewhere."""
    weight = model.head_weight()
    if weight is None:  # a head that is not one matrix
        return weighted_ce(model.logits(h), targets, weights, n_scored)
    return (launch if choice(h) == "triton" else reference)(h, weight, targets, weights, n_scored)


@functools.cache
def _kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def ce_grad_kernel(logits_ptr, stride, targets_ptr, weights_ptr, loss_ptr, V, scale, BV: tl.constexpr):
        row = tl.program_id(0).to(tl.int64)
        ptr = logits_ptr + row * stride
        target = tl.load(targets_ptr + row)
        w = tl.load(weights_ptr + row).to(tl.float32)
        m = float("-inf")
        d = 0.0
        for v0 in range(0, V, BV):  # pass 1: log-sum-exp, online
            rv = v0 + tl.arange(0, BV)
            x = tl.load(ptr + rv, mask=rv < V, other=float("-inf")).to(tl.float32)
            new_m = tl.maximum(m, tl.max(x, 0))
            d = d * tl.exp(m - new_m) + tl.sum(tl.exp(x - new_m), 0)
            m = new_m
        lse = m + tl.log(d)
        x_t = tl.load(ptr + target).to(tl.float32)
        tl.store(loss_ptr + row, (lse - x_t) * w)
        for v0 in range(0, V, BV):  # pass 2: d(loss * scale)/d(logits), written over the logits
            rv = v0 + tl.arange(0, BV)
            x = tl.load(ptr + rv, mask=rv < V, other=0.0).to(tl.float32)
            g = tl.exp(x - lse) - tl.where(rv == target, 1.0, 0.0)
            tl.store(ptr + rv, (g * (w * scale)).to(logits_ptr.dtype.element_ty), mask=rv < V)

    return ce_grad_kernel


BV = 1024  # the row kernel's vocabulary tile (Liger's choice is the same order: 64 KB of fp32 per pass)


class _FusedLinearCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, targets, weights, n_scored):
        with torch.autocast(h.device.type, enabled=False):
            loss, grad_h, grad_w = _forward(h, weight, targets, weights, n_scored,
                                            ctx.needs_input_grad[0], ctx.needs_input_grad[1])
        ctx.save_for_backward(grad_h, grad_w)
        return loss

    @staticmethod
    def backward(ctx, grad_loss):
        grad_h, grad_w = ctx.saved_tensors
        scaled = [(g * grad_loss).to(g.dtype) if need else None
                  for g, need in zip((grad_h, grad_w), ctx.needs_input_grad[:2])]
        return *scaled, None, None, None


def _forward(h, weight, targets, weights, n_scored, want_h: bool, want_w: bool):
    M, D = h.shape
    V = weight.shape[0]
    scale = 1.0 / max(n_scored, 1)
    loss = torch.zeros(M, dtype=torch.float32, device=h.device)
    grad_h = torch.empty_like(h) if want_h else h.new_zeros(0)
    grad_w = torch.zeros(V, D, dtype=torch.float32, device=h.device) if want_w else h.new_zeros(0)
    chunk = max(1, min(M, CHUNK_ELEMS // V))
    targets, weights = targets.contiguous(), weights.float().contiguous()
    for a in range(0, M, chunk):
        b = min(M, a + chunk)
        hc = h[a:b]
        logits = hc @ weight.T  # [c, V], h's dtype; becomes its own gradient
        _kernel()[(b - a,)](logits, logits.stride(0), targets[a:b], weights[a:b], loss[a:b], V, scale, BV=BV)
        if want_h:
            grad_h[a:b] = logits @ weight
        if want_w:  # in h's dtype on the tensor cores (fp32 accumulation inside), summed over chunks in fp32
            grad_w += (logits.T @ hc).float()
    return loss.sum() * scale, grad_h, grad_w.to(weight.dtype)


def launch(h: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, weights: torch.Tensor,
           n_scored: int) -> torch.Tensor:
    """The kernel's launcher, the reference's signature; differentiable in h and weight."""
    if h.dim() != 2 or weight.dim() != 2 or h.shape[1] != weight.shape[1]:
        raise ValueError(f"linear cross-entropy: h {tuple(h.shape)} and weight {tuple(weight.shape)} do not multiply")
    if targets.shape != h.shape[:1] or weights.shape != h.shape[:1]:
        raise ValueError(f"linear cross-entropy: {h.shape[0]} positions, targets {tuple(targets.shape)}, "
                         f"weights {tuple(weights.shape)}")
    if weight.dtype != h.dtype:
        weight = weight.to(h.dtype)  # autocast: the hidden states are bf16, the master weight fp32
    if h.shape[0] == 0:
        return (h.sum() + weight.sum()) * 0.0
    return _FusedLinearCE.apply(h.contiguous(), weight, targets, weights, n_scored)
