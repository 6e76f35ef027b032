"""Low-rank adapters (LoRA, Hu et al. 2021, arXiv 2106.09685) on the attention and MLP projections of
a DiffusionTransformer, for adapting a model too large to fine-tune whole (`diffusion-lsp adapt
--lora-rank R` on a Hugging Face checkpoint): W x + (alpha / r) B A x, with A [r, in] and B [out, r],
B zero at the start so training starts from the base model exactly.

On disk an adapter is a folder of its own, a small file beside a reference to its base model:
  adapter.json          {"format": "diffusion-lsp-adapter", "format_version", "base": the base
                        folder, "base_id": a fingerprint of its config and weight headers, "rank",
                        "alpha", "targets", and what `adapt` adds ("adapted", "train")}
  adapter.safetensors   "layers.{i}.{attn|mlp}.{name}.lora_a" / ".lora_b" per adapted projection
Loading one (`load_adapted`, what model/families/pretrained.py load_folder does for such a folder) loads the
base, checks the fingerprint and merges B A into each weight, so inference runs the base model's
code path at the base model's speed (and int8 quantizes the merged weights).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from .checkpoint import finite, weight_problem
from ..network.config import ADAPTER_FORMAT, ADAPTER_META, ADAPTER_VERSION, read_json, regular_file

FORMAT, FORMAT_VERSION = ADAPTER_FORMAT, ADAPTER_VERSION
META, WEIGHTS = ADAPTER_META, "adapter.safetensors"
TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# The most alpha / rank may scale an update by (`adapt` writes 2; LoRA papers use 1 to 4 and rsLoRA's
# alpha / sqrt(r) stays below 64 for r <= 4096): a larger one is a corrupt file, not a training choice
MAX_SCALE = 64


class LoRALinear(nn.Module):
    """A frozen nn.Linear plus its trainable low-rank update."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float):
        super().__init__()
        self.base, self.scale = base, alpha / rank
        base.weight.requires_grad_(False)
        if base.bias is not None:
            base.bias.requires_grad_(False)
        w = base.weight
        self.lora_a = nn.Parameter(torch.empty(rank, w.shape[1], device=w.device, dtype=torch.float32))
        self.lora_b = nn.Parameter(torch.zeros(w.shape[0], rank, device=w.device, dtype=torch.float32))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))  # as nn.Linear initializes its weight

    def forward(self, x):  # x [..., in] -> [..., out]
        return self.base(x) + ((x.to(self.lora_a.dtype) @ self.lora_a.T) @ self.lora_b.T * self.scale).to(x.dtype)

    def merged(self) -> nn.Linear:
        with torch.no_grad():
            w = self.base.weight
            self.base.weight.copy_((w.float() + self.scale * self.lora_b @ self.lora_a).to(w.dtype))
        return self.base


def _projections(model: nn.Module, targets=TARGETS):
    """(parent module, attribute, its nn.Linear) for each target projection of each layer."""
    for layer in model.layers:
        for part in (layer.attn, layer.mlp):
            for name in targets:
                lin = getattr(part, name, None)
                if isinstance(lin, (nn.Linear, LoRALinear)):
                    yield part, name, lin


def add_adapters(model: nn.Module, rank: int, alpha: float | None = None, targets=TARGETS) -> nn.Module:
    """Freeze `model` and wrap its target projections with adapters of `rank` (alpha: 2 * rank)."""
    if rank < 1:
        raise ValueError(f"the adapter rank must be >= 1, got {rank}")
    for p in model.parameters():
        p.requires_grad_(False)
    for part, name, lin in list(_projections(model, targets)):
        setattr(part, name, LoRALinear(lin, rank, float(alpha or 2 * rank)))
    return model


def adapter_state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().float().contiguous() for k, v in model.state_dict().items() if ".lora_" in k}


def base_id(folder: Path) -> str:
    """A fingerprint of a base model folder: its config.json and each weight file's name, size and
    safetensors header (the first MiB), so an adapter is never merged into another model."""
    h = hashlib.sha256()
    for path in sorted([*folder.glob("*.safetensors"), folder / "config.json"]):
        if path.is_file():
            h.update(f"{path.name}\0{path.stat().st_size}\0".encode())
            with path.open("rb") as f:
                h.update(f.read(1 << 20))
    return h.hexdigest()[:16]


def save_adapter(folder: Path, model: nn.Module, base: Path, extra: dict | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    wrapped = [lin for _, _, lin in _projections(model) if isinstance(lin, LoRALinear)]
    if not wrapped:
        raise ValueError("the model has no adapters to save")
    names = sorted({name for _, name, lin in _projections(model) if isinstance(lin, LoRALinear)})
    meta = {"format": FORMAT, "format_version": FORMAT_VERSION, "base": str(Path(base).resolve()),
            "base_id": base_id(Path(base)), "rank": wrapped[0].lora_a.shape[0],
            "alpha": wrapped[0].scale * wrapped[0].lora_a.shape[0], "targets": names, **(extra or {})}
    save_file(adapter_state(model), str(folder / WEIGHTS))
    (folder / META).write_text(json.dumps(meta, indent=2) + "\n")
    return folder


def is_adapter_folder(folder: Path) -> bool:
    return (Path(folder) / META).is_file()


def read_meta(folder: Path) -> dict:
    """adapter.json, checked; ValueError naming what is wrong."""
    meta = read_json(Path(folder) / META)
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ValueError(f"{META} is not a {FORMAT} file")
    if meta.get("format_version") != FORMAT_VERSION:
        raise ValueError(f"{META} has format_version {meta.get('format_version')!r}; this build reads {FORMAT_VERSION}")
    rank, targets = meta.get("rank"), meta.get("targets")
    if type(rank) is not int or not 1 <= rank <= 4096 or not isinstance(meta.get("base"), str) or \
            not isinstance(targets, list) or not set(targets) <= set(TARGETS):
        raise ValueError(f"{META} needs base (a folder), rank (1-4096) and targets among {', '.join(TARGETS)}")
    alpha = meta.get("alpha")
    if alpha is not None and (type(alpha) not in (int, float) or not 0 < alpha <= MAX_SCALE * rank):
        raise ValueError(f"{META} alpha should be a positive number of at most {MAX_SCALE} × rank = "
                         f"{MAX_SCALE * rank}, got {alpha!r}")  # json reads NaN and Infinity as floats
    return meta


def attach(model: nn.Module, folder: Path) -> nn.Module:
    """Wrap `model` (the base, loaded) with the adapters saved in `folder`, trainable (a resumed run)."""
    meta = read_meta(folder)
    add_adapters(model, meta["rank"], meta.get("alpha"), tuple(meta["targets"]))
    path = Path(folder) / WEIGHTS
    regular_file(path)  # a FIFO would block the open below until a writer comes
    try:  # names and shapes from the header first: a tensor the base has no room for is never read
        with safe_open(str(path), framework="pt") as f:
            shapes = {name: f.get_slice(name).get_shape() for name in f.keys()}
    except (SafetensorError, OSError) as e:
        raise ValueError(f"{WEIGHTS} is corrupt or missing ({e})") from None
    own = {k: list(v.shape) for k, v in model.state_dict().items() if ".lora_" in k}
    if {k: list(v) for k, v in shapes.items()} != own:
        raise ValueError(f"{WEIGHTS} does not fit its base model (other layers, rank or targets)")
    try:
        state = load_file(str(path))
    except (SafetensorError, OSError) as e:
        raise ValueError(f"{WEIGHTS} is corrupt or missing ({e})") from None
    for k in sorted(state):
        if (problem := weight_problem(state[k])) is not None:
            raise ValueError(f"{WEIGHTS} holds {problem[0]} in {k} ({problem[1]})")
    model.load_state_dict(state, strict=False)
    for name, p in model.named_parameters():
        p.requires_grad_(".lora_" in name)
    return model


def merge(model: nn.Module) -> nn.Module:
    """Each adapted projection back to one nn.Linear with B A added: inference as fast as the base."""
    names = {id(m): n for n, m in model.named_modules()}
    for part, name, lin in list(_projections(model)):
        if isinstance(lin, LoRALinear):
            merged = lin.merged()
            if not finite(merged.weight):  # finite parts whose sum leaves the weights' dtype (fp16 past 65504)
                raise ValueError(f"merging the adapter into {names[id(lin)]}.weight gives values past "
                                 f"{str(merged.weight.dtype).removeprefix('torch.')}'s range (alpha / rank = "
                                 f"{lin.scale:g})")
            setattr(part, name, merged)
    return model
