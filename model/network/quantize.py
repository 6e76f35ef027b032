"""Int8 weights for CPU inference.

A denoising step runs a few positions through every weight matrix, so on a CPU it is bound by
reading the weights, not by arithmetic: the output head alone (vocabulary x dim floats) is half of
what a step of the embedded model reads. Dynamic int8 quantization (PyTorch's fbgemm/x86 kernels:
int8 weights with one scale per output row, activations quantized per call) reads a quarter of the
bytes. The checkpoint stays as it is; only a loaded model is converted, in place, and only on CPU.

Memory: the conversion goes one matrix at a time and drops each float matrix as its int8 copy
replaces it, so it never holds the float model and the int8 one together. Peak RSS of an int8 load
of a Qwen2.5-Coder-0.5B shaped checkpoint (bf16 on disk, `bench pretrained`): 3553 MB when the
whole float32 model was loaded and `quantize_dynamic` then made the head (a randomly initialised
float32 head, then a deep copy of it: 2 x 545 MB); 2230 MB loading bf16 and converting here.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn

from .transformer import MoE

WIDENED = (torch.bfloat16, torch.float16)  # loaded as stored, widened to float32 here one tensor at a time


def int8_available() -> bool:
    return any(e in torch.backends.quantized.supported_engines for e in ("x86", "fbgemm"))


def int8_linear(weight: torch.Tensor, bias: torch.Tensor | None = None) -> nn.Module:
    """A dynamically quantized Linear (per-output-row int8 weight scales) computing x @ weight.T + bias
    in float32. Holds no reference to `weight`: only its int8 copy (bf16/fp16 weights are widened
    first, which is exact, so the int8 values are those of the float32 weights)."""
    from torch.ao.nn.quantized.dynamic import Linear as Int8Linear
    from torch.ao.quantization import per_channel_dynamic_qconfig

    with torch.device("meta"):  # a shell: no float matrix is allocated or initialised for it
        shell = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None)
    shell.weight = nn.Parameter(weight.detach().float(), requires_grad=False)  # float32 in: no copy
    if bias is not None:
        shell.bias = nn.Parameter(bias.detach().float(), requires_grad=False)
    shell.qconfig = per_channel_dynamic_qconfig
    with warnings.catch_warnings():  # eager-mode quantization is deprecated in favour of torchao
        warnings.simplefilter("ignore")
        return Int8Linear.from_float(shell)


def _widen(module: nn.Module) -> None:
    """Every bf16/fp16 parameter of `module` -> float32, one at a time (the 16-bit one is dropped)."""
    for m in module.modules():
        for name in [n for n, p in m.named_parameters(recurse=False) if p.dtype in WIDENED]:
            setattr(m, name, nn.Parameter(getattr(m, name).detach().float(), requires_grad=False))


def quantize_int8(model) -> None:
    """Replace every Linear of the transformer blocks, and the output head, by an int8 Linear, in
    place. For inference only: the model cannot be trained or saved afterwards. A model loaded in
    bf16/fp16 comes out computing in float32 (embedding and norms widened) with exactly the int8
    weights of its float32 load. An untied model's float head is dropped (`int8_head` replaces it);
    a tied one keeps the embedding, which the input still needs."""
    if not int8_available():
        raise RuntimeError("this PyTorch build has no int8 CPU kernels (quantized engine x86 or fbgemm)")
    for block in model.layers:
        # (parent, name) pairs, not the Linears: a list of them would keep every float matrix alive
        # a mixture of experts' router stays float: it scores experts in float32, as LLaDA2's gate does
        targets = [(p, name) for p in block.modules() for name, c in p.named_children()
                   if type(c) is nn.Linear and not (isinstance(p, MoE) and c is p.router)]
        for parent, name in targets:
            linear = getattr(parent, name)
            setattr(parent, name, int8_linear(linear.weight, linear.bias))
            del linear  # its last reference: the float matrix is freed here
    # Widen the rest before the head: a tied head is then quantized from the float32 embedding
    # itself (no temporary float32 copy of the 136 M-entry matrix beside the bf16 one).
    _widen(model)
    head = model.embed.weight if model.lm_head is None else model.lm_head.weight
    model.int8_head = int8_linear(head)
    model.lm_head = None
