"""Our checkpoint format: a folder with config.json (format version, model config, special token
names), model.safetensors and tokenizer.json. Loading never unpickles and never runs checkpoint code.

Both loaders (this one and pretrained.py's) check config.json's sizes against the safetensors headers
before any module is built (check_sizes), and read every small file through config.read_text: a
FIFO, a folder, a device or an oversized file in a checkpoint is one error, never a hang."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from .claims import Claims
from ..network.config import (CHECKPOINT_FORMAT, CHECKPOINT_VERSION, ModelConfig, SpecialTokens, read_json, regular_file,
                     size_problem)
from .hf_tokenizer import read_tokenizer_json
from ..network.tokenizer import Tokenizer
from ..network.transformer import DiffusionTransformer

FORMAT, FORMAT_VERSION = CHECKPOINT_FORMAT, CHECKPOINT_VERSION
FILES = ("config.json", "model.safetensors", "tokenizer.json")


class CheckpointError(ValueError):
    """A checkpoint folder that is missing, incomplete or corrupt."""


def save_checkpoint(folder: str | Path, model: DiffusionTransformer, tokenizer: Tokenizer,
                    dtype: torch.dtype = torch.float32, extra: dict | None = None) -> Path:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "model": model.config.to_dict(),
        "special_tokens": asdict(tokenizer.special),
        "dtype": str(dtype).removeprefix("torch."),
        **(extra or {}),
    }
    state = {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"))
    tokenizer.hf.save(str(folder / "tokenizer.json"))
    (folder / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return folder


def read_config(folder: str | Path) -> dict:
    folder = Path(folder)
    if not folder.is_dir():
        raise CheckpointError(f"checkpoint folder not found: {folder}")
    missing = [f for f in FILES if not (folder / f).exists()]  # a FIFO or a folder by these names: refused on reading
    if missing:
        raise CheckpointError(f"checkpoint {folder} is missing {', '.join(missing)}")
    try:
        config = read_json(folder / "config.json")
    except ValueError as e:
        raise CheckpointError(f"checkpoint {folder}: {e}") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        raise CheckpointError(f"checkpoint {folder}: config.json is not a {FORMAT} config")
    version = config.get("format_version")
    if version != FORMAT_VERSION:
        raise CheckpointError(f"checkpoint {folder}: format_version {version!r} is not supported "
                              f"(this build reads {FORMAT_VERSION})")
    if "claims" in config:
        try:
            Claims.from_dict(config["claims"])
        except ValueError as e:
            raise CheckpointError(f"checkpoint {folder}: bad config.json ({e})") from None
    return config


def tensor_shapes(folder: Path, path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape, from a safetensors file's header alone (no tensor is read)."""
    try:
        regular_file(path)
    except ValueError as e:
        raise CheckpointError(f"checkpoint {folder}: {e}") from None
    try:
        with safe_open(str(path), framework="pt") as f:
            return {name: f.get_slice(name).get_shape() for name in f.keys()}
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint {folder}: {path.name} is corrupt ({e})") from None


def check_bounds(read: dict[str, tuple[str, object]], folder: Path) -> None:
    """Each size config.json gives within config.size_problem's bounds; read: a ModelConfig field ->
    (the config.json key it was read from, its value). Run first: a float, a negative or a billion
    is the config's fault whatever the weights hold."""
    for field, (key, value) in read.items():
        problem = None if value is None else size_problem(field, value)
        if problem:
            raise CheckpointError(f"checkpoint {folder}: config.json {key} {problem}")


# The largest weight a checkpoint may hold: float16's largest, which no checkpoint meant to run in half
# precision passes. A finite 3e38 loaded, then overflowed the int8 quantizer's activations at the first
# fill (a "ChooseQuantizationParams" traceback), or gave NaN confidences in fp32.
MAX_WEIGHT = 65504.0


def weight_problem(t: torch.Tensor) -> tuple[str, str] | None:
    """(what a floating tensor holds that weights may not, the rule) for NaN or ±inf or a value past
    MAX_WEIGHT, or None; other dtypes hold none. One pass, no mask, never overflowing (torch.aminmax
    propagates NaN; measured on 10^8 float32: 11.5 ms, as a sum, against 270 ms for isfinite in chunks)."""
    if not t.is_floating_point() or t.numel() == 0:
        return None
    lo, hi = (float(v) for v in torch.aminmax(t))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return "NaN or infinite values", "weights must be finite numbers"
    if max(-lo, hi) > MAX_WEIGHT:
        return f"values as large as {max(-lo, hi):.3g}", f"weights must be at most {MAX_WEIGHT:g} in size: float16's range"
    return None


def finite(t: torch.Tensor) -> bool:
    """Every element of a floating tensor is a number (no NaN, no ±inf); other dtypes always are."""
    return not t.is_floating_point() or t.numel() == 0 or all(math.isfinite(float(v)) for v in torch.aminmax(t))


def check_finite(name: str, t: torch.Tensor, where: str) -> None:
    """CheckpointError naming the tensor when its values are not weights (weight_problem; where:
    "checkpoint F: model.safetensors"). Checked once the tensor is in its loaded dtype: a float32 value
    past float16's range is inf there."""
    problem = weight_problem(t)
    if problem is not None:
        raise CheckpointError(f"{where} holds {problem[0]} in {name} ({problem[1]})")


# The tensors whose shapes pin config.json's sizes down: our name -> per dimension, the ModelConfig fields
# whose product it is. A tensor the files do not hold is left for the name check once the model is built.
SIZED = {
    "embed.weight": (("vocab_size",), ("dim",)),
    "layers.0.mlp.gate_proj.weight": (("hidden_dim",), ("dim",)),
    "layers.0.attn.q_norm.weight": (("head_dim",),),
    "layers.0.attn.q_proj.weight": (("n_heads", "head_dim"), ("dim",)),
    "layers.0.attn.k_proj.weight": (("n_kv_heads", "head_dim"), ("dim",)),
}


def check_sizes(cfg: ModelConfig, shapes: dict[str, list[int]], name: Callable[[str], str | None],
                key: Callable[[str], str], folder: Path) -> None:
    """config.json's sizes against what the weights hold, before any module is built: a config.json that
    says a million layers would otherwise build a million of them on the meta device (memory climbing
    ~25 MB/s) before the first tensor is compared. shapes: the files' tensor name -> shape (headers
    only); name: our tensor name -> the files' (None: the layout has none); key: a ModelConfig field ->
    the config.json key it was read from, which the error names."""

    def mismatch(what: str):
        return CheckpointError(f"checkpoint {folder}: config.json and the weights do not match ({what})")

    layers = 0  # layers 0, 1, ... that the files hold, counted by the norm every block has
    while name(f"layers.{layers}.input_norm.weight") in shapes:
        layers += 1
    if cfg.n_layers != layers:
        raise mismatch(f"{key('n_layers')} is {cfg.n_layers}, but the weights hold {layers} layers")
    for ours, dims in SIZED.items():
        theirs = name(ours)
        if theirs not in shapes:
            continue
        got = list(shapes[theirs])
        want = [math.prod(getattr(cfg, f) for f in fields) for fields in dims]
        if len(got) != len(want):
            raise mismatch(f"{theirs} is {got}, but config.json gives {want}")
        for fields, w, g in zip(dims, want, got):
            if w != g:
                values = " × ".join(str(getattr(cfg, f)) for f in fields) + (f" = {w}" if len(fields) > 1 else "")
                raise mismatch(f"{' × '.join(map(key, fields))} is {values}, but {theirs} is {got}")
    if cfg.n_experts:
        _check_experts(cfg, shapes, name, key, mismatch)


def _check_experts(cfg: ModelConfig, shapes, name, key, mismatch) -> None:
    """A mixture of experts' counts against its first sparse layer's tensors: n_experts experts (and as many
    router rows), each moe_hidden_dim wide, shared experts moe_hidden_dim × n_shared_experts wide; the
    other layers are compared tensor by tensor once the model is built (a million experts never are)."""
    layer = f"layers.{cfg.n_dense_layers}.mlp"
    experts = 0
    while name(f"{layer}.experts.{experts}.gate_proj.weight") in shapes:
        experts += 1
    if experts != cfg.n_experts:
        raise mismatch(f"{key('n_experts')} is {cfg.n_experts}, but layer {cfg.n_dense_layers} of the weights "
                       f"holds {experts} experts")
    sized = {f"{layer}.router.weight": [cfg.n_experts, cfg.dim],
             f"{layer}.experts.0.gate_proj.weight": [cfg.moe_hidden_dim, cfg.dim]}
    if cfg.n_shared_experts:
        sized[f"{layer}.shared.gate_proj.weight"] = [cfg.moe_hidden_dim * cfg.n_shared_experts, cfg.dim]
    for ours, want in sized.items():
        theirs = name(ours)
        if theirs in shapes and list(shapes[theirs]) != want:
            raise mismatch(f"{key('n_experts')}, {key('moe_hidden_dim')} and {key('n_shared_experts')} give "
                           f"{want} for {theirs}, which is {list(shapes[theirs])}")


def load_checkpoint(folder: str | Path, device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32) -> tuple[DiffusionTransformer, Tokenizer, dict]:
    """(model, tokenizer, config.json) with every weight in `dtype` (float32 by default, whatever the
    file stores: config.json's "dtype" says what `save_checkpoint` wrote)."""
    folder = Path(folder)
    config = read_config(folder)
    if isinstance(config.get("model"), dict):
        check_bounds({field: (f"model.{field}", value) for field, value in config["model"].items()}, folder)
    try:
        model_config = ModelConfig.from_dict(config["model"])
        special = SpecialTokens.from_dict(config.get("special_tokens", {}))
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {folder}: bad config.json ({e})") from None
    try:
        hf = read_tokenizer_json(folder / "tokenizer.json")
    except ValueError as e:
        raise CheckpointError(f"checkpoint {folder}: {e}") from None
    try:
        tokenizer = Tokenizer(hf, special)
    except ValueError as e:
        raise CheckpointError(f"checkpoint {folder}: bad tokenizer.json ({e})") from None
    if tokenizer.vocab_size > model_config.vocab_size:
        raise CheckpointError(f"checkpoint {folder}: tokenizer has {tokenizer.vocab_size} tokens but the "
                              f"model only {model_config.vocab_size}")
    path = folder / "model.safetensors"
    check_sizes(model_config, tensor_shapes(folder, path), lambda ours: ours, lambda field: f"model.{field}", folder)
    try:  # one tensor at a time, cast on its way to `device`: the peak is the model in `dtype` plus one
        # stored tensor, not a whole float32 copy beside it (on a GPU, in its memory)
        with safe_open(str(path), framework="pt") as f:
            state = {name: f.get_tensor(name).to(device=device, dtype=dtype) for name in f.keys()}
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint {folder}: model.safetensors is corrupt ({e})") from None
    for name, t in state.items():
        check_finite(name, t, f"checkpoint {folder}: model.safetensors")
    with torch.device("meta"):
        model = DiffusionTransformer(model_config)
    try:
        model.load_state_dict(state, strict=True, assign=True)
    except RuntimeError as e:
        first = " ".join(str(e).split())[:300]
        raise CheckpointError(f"checkpoint {folder}: weights do not match config.json ({first})") from None
    return model.eval(), tokenizer, config
