"""Unmasking policies: which masked canvas positions to commit after a denoising step.

Each policy is a pure function of per-position statistics of the current prediction:
conf [B, N] (probability of the argmax token), entropy [B, N], and eligible [B, N] (still masked
and inside the current semi-autoregressive block). It returns commit [B, N] bool, with at least one
committed position in every row that has an eligible one, so decoding always progresses.
"""

from __future__ import annotations

import torch

from ...kernels.vocab_stats import token_stats  # noqa: F401  (the statistics the policies read)
from ...protocol.settings import POLICIES


def _ranks(score: torch.Tensor, eligible: torch.Tensor, descending: bool) -> torch.Tensor:
    """Rank of each eligible position by score within its row (0 = best); ineligible rank last."""
    fill = float("-inf") if descending else float("inf")
    order = score.masked_fill(~eligible, fill).argsort(dim=-1, descending=descending, stable=True)
    return order.argsort(dim=-1)


def top_k(conf: torch.Tensor, eligible: torch.Tensor, k: int | torch.Tensor) -> torch.Tensor:
    """LLaDA low-confidence remasking: commit the k most confident eligible positions per row."""
    return eligible & (_ranks(conf, eligible, descending=True) < k)


def threshold(conf: torch.Tensor, eligible: torch.Tensor, tau: float) -> torch.Tensor:
    """Fast-dLLM parallel decoding (Wu et al. 2025): commit every eligible position whose
    confidence is at least tau, and the single most confident one if none is."""
    return (eligible & (conf >= tau)) | top_k(conf, eligible, 1)


def entropy_bounded(entropy: torch.Tensor, eligible: torch.Tensor, gamma: float) -> torch.Tensor:
    """EB-sampler (Ben-Hamu et al. 2025): sort eligible positions by entropy and commit the largest
    prefix U of that order with sum(H_U) - max(H_U) <= gamma, i.e. the error bound of unmasking U
    together stays below gamma. The lowest-entropy position is always committed."""
    rank = _ranks(entropy, eligible, descending=False)
    h_sorted = entropy.masked_fill(~eligible, 0.0).gather(-1, rank.argsort(dim=-1))  # ascending
    before = h_sorted.cumsum(-1) - h_sorted  # entropy of the positions ranked ahead of each
    allowed = (before <= gamma).gather(-1, rank)
    return eligible & (allowed | (rank == 0))


def block_eligible(masked: torch.Tensor, block_size: int | None) -> torch.Tensor:
    """Semi-autoregressive blocks: only the first block that still has masked positions is open."""
    if not block_size:
        return masked
    n = masked.shape[-1]
    block_of = torch.arange(n, device=masked.device) // block_size  # [N]
    first = torch.where(masked, block_of, n).min(dim=-1, keepdim=True).values  # [B, 1]
    return masked & (block_of == first)


def select(policy: str, conf, entropy, eligible, *, tau: float, k: int, gamma: float) -> torch.Tensor:
    if policy == "threshold":
        return threshold(conf, eligible, tau)
    if policy == "topk":
        return top_k(conf, eligible, k)
    if policy == "eb":
        return entropy_bounded(entropy, eligible, gamma)
    if policy == "one":
        return top_k(conf, eligible, 1)
    raise ValueError(f"unknown unmasking policy {policy!r}; choose from {', '.join(POLICIES)}")
