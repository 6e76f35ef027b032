"""`bench gpu`'s kernel rows, and the device clock and memory counters the whole benchmark reads.

Each Triton kernel (kernels/) against its PyTorch reference on the same inputs, called directly
(`launch` / `reference`, not through the dispatch): at the Dream-7B head's shape (D 3584, V 152,064)
in bf16, head_stats at 32 positions (a step of one or two rows) and 512 (a batch of 32 rows' open
blocks), the fused loss forward and backward at 4,096 positions (a training micro-batch). Per row:
ms (median after warm-up, synchronized around each call), the speedup, the largest difference of
what the caller reads (conf; the loss and dL/dh), how often the greedy id agrees, and each one's peak
memory beyond its inputs. In bf16 the reference rounds every logit to bf16 (F.linear) and the kernel
accumulates in fp32 (tests/test_kernels.py), so most of a difference is the reference's rounding.
On the CPU (--dry-run) the kernels run in Triton's interpreter on small shapes: those figures say
that the code path runs, not how fast it is. Prints; asserts nothing."""

from __future__ import annotations

import statistics
import time

import torch

from ..kernels import dispatch, linear_ce, vocab_stats
from ..kernels.vocab_stats import Constraint

HEAD = dict(D=3584, V=152064, positions=(32, 512), loss_positions=4096)  # Dream-7B (Qwen2.5-7B)
SMALL = dict(D=64, V=1000, positions=(4, 32), loss_positions=64)  # the interpreter's: seconds, not hours


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def reset_peak(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak_mb(device: str) -> float | None:
    """The most memory allocated on the GPU since reset_peak; None on the CPU (no such counter)."""
    return torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else None


def timed(fn, device: str, repeat: int, warmup: int) -> tuple[object, float, float | None]:
    """fn() `warmup` times, then `repeat` times synchronized -> (its last result, median ms, peak MB
    it allocated beyond what was allocated before it ran; None on the CPU)."""
    for _ in range(warmup):  # the first call compiles the kernel (Triton) or picks the GEMM (cuBLAS)
        fn()
    sync(device)
    before = torch.cuda.memory_allocated() if device == "cuda" else 0
    reset_peak(device)
    ms, out = [], None
    for _ in range(repeat):
        sync(device)
        t0 = time.perf_counter()
        out = fn()
        sync(device)
        ms.append((time.perf_counter() - t0) * 1e3)
    peak = peak_mb(device)
    return out, statistics.median(ms), None if peak is None else peak - before / 2**20


def skipped(device: str) -> str | None:
    """Why the kernel rows cannot run here, or None when they can."""
    if not dispatch.triton_importable():
        return "triton is not installed (pip install triton)"
    if device != "cuda" and not dispatch.interpreted():
        return "on the CPU they need TRITON_INTERPRET=1 set before triton is imported, and triton was imported first"
    return None


def compare(tok, device: str, small: bool, repeat: int, warmup: int) -> list[dict]:
    """Every kernel row: head_stats at each number of positions, then the fused loss."""
    shape = SMALL if small else HEAD
    D, V = shape["D"], shape["V"]
    gen = torch.Generator(device=device).manual_seed(0)
    weight = torch.randn(V, D, generator=gen, device=device, dtype=torch.bfloat16) * 0.02  # [V, D]
    banned = tuple(i for i in (tok.mask_id, tok.bos_id) if i is not None)  # the sampler's, by name
    rows = []
    for M in shape["positions"]:
        h = torch.randn(M, D, generator=gen, device=device, dtype=torch.bfloat16)  # [M, D]
        c = Constraint(banned, tok.filler_id, no_filler=torch.arange(M, device=device) % 2 == 0)  # [M]
        got, k_ms, k_mb = timed(lambda: vocab_stats.launch(h, weight, c), device, repeat, warmup)
        want, r_ms, r_mb = timed(lambda: vocab_stats.reference(h, weight, c), device, repeat, warmup)
        rows.append(dict(kernel="head_stats", M=M, D=D, V=V, triton_ms=k_ms, torch_ms=r_ms, speedup=r_ms / k_ms,
                         errors={"conf": (got.conf - want.conf).abs().max().item()},
                         same_id=(got.pred == want.pred).float().mean().item(), triton_mb=k_mb, torch_mb=r_mb))
    rows.append(_loss_row(weight, shape["loss_positions"], gen, device, repeat, warmup))
    return rows


def _loss_row(weight: torch.Tensor, M: int, gen, device: str, repeat: int, warmup: int) -> dict:
    """The fused linear cross-entropy against the reference, forward and backward into h and the head."""
    V, D = weight.shape
    h = torch.randn(M, D, generator=gen, device=device, dtype=torch.bfloat16).requires_grad_()
    w = weight.requires_grad_()  # the head rows are done with it
    targets = torch.randint(0, V, (M,), generator=gen, device=device)
    weights = 1.0 / torch.rand(M, generator=gen, device=device).clamp(min=0.05)  # LLaDA's 1/t

    def step(fn):
        h.grad = w.grad = None
        loss = fn(h, w, targets, weights, M)
        loss.backward()
        return loss.detach().float(), h.grad

    (k_loss, k_dh), k_ms, k_mb = timed(lambda: step(linear_ce.launch), device, repeat, warmup)
    (r_loss, r_dh), r_ms, r_mb = timed(lambda: step(linear_ce.reference), device, repeat, warmup)
    errors = {"loss": (k_loss - r_loss).abs().item(), "dL/dh": (k_dh.float() - r_dh.float()).abs().max().item()}
    return dict(kernel="linear_ce fwd+bwd", M=M, D=D, V=V, triton_ms=k_ms, torch_ms=r_ms, speedup=r_ms / k_ms,
                errors=errors, same_id=None, triton_mb=k_mb, torch_mb=r_mb)


def print_rows(rows: list[dict], device: str, repeat: int, warmup: int) -> None:
    where = "compiled on the GPU" if device == "cuda" else "in Triton's interpreter on the CPU (not a speed)"
    print(f"\nkernels vs their PyTorch references, bf16, D {rows[0]['D']}, V {rows[0]['V']:,}, {where}; "
          f"median of {repeat} after {warmup} warm-up")
    print(f"{'kernel':<18}{'M':>6}{'triton ms':>11}{'torch ms':>10}{'speedup':>9}{'same id':>9}{'triton MB':>11}"
          f"{'torch MB':>10}  largest difference")
    for r in rows:
        same = "-" if r["same_id"] is None else f"{r['same_id']:.1%}"
        k_mb, r_mb = ("-" if x is None else f"{x:.0f}" for x in (r["triton_mb"], r["torch_mb"]))
        print(f"{r['kernel']:<18}{r['M']:>6}{r['triton_ms']:>11.2f}{r['torch_ms']:>10.2f}{r['speedup']:>8.2f}x"
              f"{same:>9}{k_mb:>11}{r_mb:>10}  " + ", ".join(f"{k} {v:.1e}" for k, v in r["errors"].items()))
