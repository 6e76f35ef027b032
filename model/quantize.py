"""Int8 weights for CPU inference.

A denoising step runs a few positions through every weight matrix, so on a CPU it is bound by
reading the weights, not by arithmetic: the output head alone (vocabulary x dim floats) is half of
what a step of the embedded model reads. Dynamic int8 quantization (PyTorch's fbgemm/x86 kernels:
int8 weights with one scale per output row, activations quantized per call) reads a quarter of the
bytes. The checkpoint stays float32; only a loaded model is converted, in place, and only on CPU.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn


def int8_available() -> bool:
    return any(e in torch.backends.quantized.supported_engines for e in ("x86", "fbgemm"))


def quantize_int8(model) -> None:
    """Replace every Linear of the transformer blocks, and the output head, by a dynamically
    quantized int8 Linear (per-channel weight scales). For inference only: the model cannot be
    trained or saved afterwards."""
    from torch.ao.quantization import per_channel_dynamic_qconfig, quantize_dynamic

    if not int8_available():
        raise RuntimeError("this PyTorch build has no int8 CPU kernels (quantized engine x86 or fbgemm)")
    cfg = model.config
    weight = model.embed.weight if model.lm_head is None else model.lm_head.weight
    head = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)
    head.weight = nn.Parameter(weight.detach(), requires_grad=False)  # shared: quantizing makes the int8 copy
    with warnings.catch_warnings():  # eager-mode quantization is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        spec = {nn.Linear: per_channel_dynamic_qconfig}
        quantize_dynamic(model.layers, spec, dtype=torch.qint8, inplace=True)
        model.int8_head = quantize_dynamic(nn.Sequential(head), spec, dtype=torch.qint8)[0]
