"""Triton kernels for the GPU hot paths (importable as diffusion_lsp.kernels).

Every kernel has the same shape (STYLE.md 5): a private `@triton.jit` kernel, a host launcher, a
PyTorch reference with the same signature used on CPU, and one dispatch function that tests can
override. Tests compare kernel and reference on irregular shapes; on CPU they run under
TRITON_INTERPRET=1. No kernel has landed yet: every path currently runs its PyTorch code."""
