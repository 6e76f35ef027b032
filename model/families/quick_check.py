"""Will a checkpoint folder of our format load? Answered without torch and without reading the
weights, so that the language server can choose between an adapted model and its base before the
worker tries (`diffusion-lsp adapt` writes one into a workspace; a copy cut short, a disk that
filled up or a hand-edited config.json must not leave the user with no completions).

What it reads: config.json (format, version, the model's sizes, the special tokens, the claims),
tokenizer.json (parsed), and the safetensors header: its JSON, that every tensor's bytes lie
inside the file and the file ends where the last one does (a truncated copy), and that the embedding
and the layer count agree with config.json. A tensor whose bytes were overwritten in place still
passes: only loading it would tell.
Adapters: lora.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..network.config import (ADAPTER_FORMAT, ADAPTER_META, CHECKPOINT_FORMAT, CHECKPOINT_VERSION, ModelConfig, SpecialTokens,
                     adapter_base, read_json, regular_file)
from .hf_tokenizer import read_tokenizer_json

FORMAT, FORMAT_VERSION = CHECKPOINT_FORMAT, CHECKPOINT_VERSION
MAX_HEADER = 100 << 20  # safetensors' own bound on its JSON header
DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1,
               "F8_E4M3": 1, "F8_E5M2": 1}


def _tensors(path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape from a safetensors header; ValueError when the header or the file's
    length is wrong."""
    size = regular_file(path)
    with path.open("rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise ValueError(f"{path.name} is {size} bytes, shorter than a safetensors header")
        n = int.from_bytes(head, "little")
        if n > min(MAX_HEADER, size - 8):
            raise ValueError(f"{path.name}: its header says {n:,} bytes, more than the file holds")
        try:
            header = json.loads(f.read(n))
        except (ValueError, RecursionError):
            raise ValueError(f"{path.name}: its header is not JSON") from None
    if not isinstance(header, dict):
        raise ValueError(f"{path.name}: its header is not a JSON object")
    shapes, end = {}, 0
    for name, info in header.items():
        if name == "__metadata__":
            continue
        try:
            start, stop = info["data_offsets"]
            shape = [int(d) for d in info["shape"]]
            want = math.prod(shape) * DTYPE_BYTES[info["dtype"]]
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"{path.name}: tensor {name!r} has a malformed entry") from None
        if not (isinstance(start, int) and isinstance(stop, int) and 0 <= start <= stop) or stop - start != want:
            raise ValueError(f"{path.name}: tensor {name!r} has offsets that do not fit its shape")
        shapes[name], end = shape, max(end, stop)
    if 8 + n + end != size:
        raise ValueError(f"{path.name} is {size:,} bytes but its tensors need {8 + n + end:,} (cut short?)")
    return shapes


def adapter_problem(folder: Path) -> str | None:
    """The same for a folder of low-rank adapters: adapter.json, the adapter weights'
    header, and the base model it names (ours checked as above; a Hugging Face one for its config)."""
    try:
        meta = read_json(folder / ADAPTER_META)
        if not isinstance(meta, dict) or meta.get("format") != ADAPTER_FORMAT:
            return f"{ADAPTER_META} is not a {ADAPTER_FORMAT} file"
        shapes = _tensors(folder / "adapter.safetensors")
    except ValueError as e:
        return str(e)
    base = adapter_base(folder)
    if base is None or not (base / "config.json").is_file():
        return f"its base model {base} is not there"
    if not shapes or not all(name.endswith((".lora_a", ".lora_b")) for name in shapes):
        return "adapter.safetensors holds no adapters"
    try:
        ours = "format" in read_json(base / "config.json")
    except (ValueError, TypeError):
        return f"its base model's config.json ({base}) cannot be read"
    return problem(base) if ours else None  # a Hugging Face base: its loader checks it


def problem(folder: str | Path) -> str | None:
    """Why `folder` would not load as our checkpoint (or as adapters on a base), in one line; None
    when it would."""
    folder = Path(folder)
    if (folder / ADAPTER_META).is_file():
        return adapter_problem(folder)
    try:
        config = read_json(folder / "config.json")
        if not isinstance(config, dict) or config.get("format") != FORMAT:
            return f"config.json is not a {FORMAT} config"
        if config.get("format_version") != FORMAT_VERSION:
            return f"config.json has format_version {config.get('format_version')!r}, this build reads {FORMAT_VERSION}"
        from .claims import Claims

        Claims.from_dict(config.get("claims", {}))
        cfg = ModelConfig.from_dict(config["model"])
        SpecialTokens.from_dict(config.get("special_tokens", {}))
        read_tokenizer_json(folder / "tokenizer.json")
        shapes = _tensors(folder / "model.safetensors")
    except (KeyError, TypeError):
        return "config.json has no model sizes"
    except ValueError as e:
        return str(e)
    layers = sum(1 for name in shapes if name.endswith(".input_norm.weight"))
    if shapes.get("embed.weight") != [cfg.vocab_size, cfg.dim] or layers != cfg.n_layers:
        return (f"the weights do not match config.json (embedding {shapes.get('embed.weight')}, {layers} layers; "
                f"config.json says [{cfg.vocab_size}, {cfg.dim}], {cfg.n_layers} layers)")
    return None
