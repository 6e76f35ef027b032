"""Our checkpoint format: a folder with config.json (format version, model config, special token
names), model.safetensors and tokenizer.json. Loading never unpickles and never runs checkpoint code."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .claims import Claims
from .config import ModelConfig, SpecialTokens
from .tokenizer import Tokenizer
from .transformer import DiffusionTransformer

FORMAT = "diffusion-lsp-checkpoint"
FORMAT_VERSION = 1
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
    missing = [f for f in FILES if not (folder / f).is_file()]
    if missing:
        raise CheckpointError(f"checkpoint {folder} is missing {', '.join(missing)}")
    try:
        config = json.loads((folder / "config.json").read_text())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise CheckpointError(f"checkpoint {folder}: config.json is not valid JSON ({e})") from None
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


def load_checkpoint(folder: str | Path, device: str | torch.device = "cpu",
                    dtype: torch.dtype = torch.float32) -> tuple[DiffusionTransformer, Tokenizer, dict]:
    folder = Path(folder)
    config = read_config(folder)
    try:
        model_config = ModelConfig.from_dict(config["model"])
        special = SpecialTokens.from_dict(config.get("special_tokens", {}))
    except (KeyError, TypeError, ValueError) as e:
        raise CheckpointError(f"checkpoint {folder}: bad config.json ({e})") from None
    try:
        tokenizer = Tokenizer.from_file(folder / "tokenizer.json", special)
    except Exception as e:  # tokenizers raises a bare Exception on malformed files
        raise CheckpointError(f"checkpoint {folder}: bad tokenizer.json ({str(e).splitlines()[0]})") from None
    if tokenizer.vocab_size > model_config.vocab_size:
        raise CheckpointError(f"checkpoint {folder}: tokenizer has {tokenizer.vocab_size} tokens but the "
                              f"model only {model_config.vocab_size}")
    try:
        state = load_file(str(folder / "model.safetensors"), device=str(device))
    except (SafetensorError, OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint {folder}: model.safetensors is corrupt ({e})") from None
    with torch.device("meta"):
        model = DiffusionTransformer(model_config)
    try:
        model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=True, assign=True)
    except RuntimeError as e:
        first = " ".join(str(e).split())[:300]
        raise CheckpointError(f"checkpoint {folder}: weights do not match config.json ({first})") from None
    return model.eval(), tokenizer, config
