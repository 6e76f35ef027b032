"""The one switch between a kernel and its PyTorch reference.

`choice()` is "triton" or "torch" for a tensor: "auto" (the default) runs Triton on CUDA tensors
when triton imports, and the reference everywhere else (CPU, MPS, no triton). The override,
`DIFFUSION_LSP_KERNELS=torch|triton|auto` or `with kernels.override("triton"):`, is how tests run the
kernels on CPU tensors under TRITON_INTERPRET=1 and how a GPU run is compared with the reference.
triton is imported here, lazily, and only when a kernel is about to run: the language server
never imports it (nor torch)."""

from __future__ import annotations

import contextlib
import functools
import os

CHOICES = ("auto", "triton", "torch")
_forced: list[str] = []  # innermost override last


def setting() -> str:
    name = _forced[-1] if _forced else os.environ.get("DIFFUSION_LSP_KERNELS", "auto")
    if name not in CHOICES:
        raise ValueError(f"DIFFUSION_LSP_KERNELS={name!r}: choose from {', '.join(CHOICES)}")
    return name


@contextlib.contextmanager
def override(name: str):
    """Within the block every dispatch point answers `name`."""
    if name not in CHOICES:
        raise ValueError(f"unknown kernel choice {name!r}: choose from {', '.join(CHOICES)}")
    _forced.append(name)
    try:
        yield
    finally:
        _forced.pop()


@functools.cache
def triton_importable() -> bool:
    try:
        import triton  # noqa: F401
    except ImportError:
        return False
    return True


def interpreted() -> bool:
    """Kernels run by Triton's CPU interpreter (slow; for tests), set before triton is imported."""
    return os.environ.get("TRITON_INTERPRET") == "1"


def choice(tensor) -> str:
    """Which implementation runs for inputs on `tensor`'s device: "triton" or "torch"."""
    name = setting()
    if name == "torch":
        return "torch"
    usable = triton_importable() and (tensor.is_cuda or interpreted())
    if name == "triton":
        if not usable:
            why = "triton is not installed" if not triton_importable() else \
                f"tensors on {tensor.device} need TRITON_INTERPRET=1 (set before triton is imported)"
            raise RuntimeError(f"DIFFUSION_LSP_KERNELS=triton, but {why}")
        return "triton"
    return "triton" if usable and tensor.is_cuda else "torch"
