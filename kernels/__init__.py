"""Triton kernels for the GPU hot paths (importable as diffusion_lsp.kernels).

Every kernel has the same shape (STYLE.md 5): a private `@triton.jit` kernel, a host launcher
(`launch`), a PyTorch reference with the same signature (`reference`, what runs on CPU), and one
dispatch function that the model code calls; dispatch.py is the one switch (DIFFUSION_LSP_KERNELS,
`dispatch.override`). Tests compare kernel and reference on irregular shapes; on CPU they run
under TRITON_INTERPRET=1 (tests/test_kernels.py), compiled on CUDA in tests/test_gpu.py.

- vocab_stats.py `head_stats`: the output head fused with what a denoising step reads of it
  (greedy id, its probability, entropy, a given id's probability; banned ids and per-position
  allowed sets), streamed over vocabulary tiles with no [positions, vocab] tensor; the sampler's
  step and the probe's softmax-gather.
- linear_ce.py `masked_cross_entropy`: the training loss (LLaDA eq. 3, 1/t weights) fused with the
  head, forward and backward, in chunks that bound the logits' memory.
"""
