"""Saving and resuming a run folder.

RUN_DIR/checkpoint/       our model format (model/families/checkpoint.py), loadable by `load_checkpoint`, or
                          for a run of low-rank adapters (lora_rank) an adapter folder (model/families/lora.py)
                          naming the base model; its config.json (adapter.json) carries
                          {"train": {"step": ...}} to pair it with:
RUN_DIR/train_state.pt    optimizer state, step, elapsed seconds, tokens seen, the TrainConfig;
                          plain tensors and containers, read with torch.load(weights_only=True).

Both are written to temporary names first and then renamed, so an interrupted save leaves the
previous pair usable.
Claims: model/families/claims.py; the corpus: data/build.py.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch

from diffusion_lsp.model.families import lora
from diffusion_lsp.model.families.checkpoint import load_checkpoint, save_checkpoint

# what a model trained by these commands may claim: the corpus is Python files only
# (the corpus build reads .py files), and no run measures next edits as right, so none is claimed
TRAINED_CLAIMS = {"languages": ["python"], "next_edits": False}

STATE_VERSION = 1


class TrainError(ValueError):
    """An expected failure the user can fix (missing corpus, mismatched run folder)."""


@dataclass
class Progress:
    step: int = 0
    elapsed_s: float = 0.0  # training time over all runs (the --minutes budget)
    tokens: int = 0  # positions processed over all ranks
    val_loss: float | None = None


def save_run(out: Path, model, tokenizer, optimizer, progress: Progress, config: dict, world_size: int):
    out.mkdir(parents=True, exist_ok=True)
    ckpt, tmp, old = out / "checkpoint", out / "checkpoint.tmp", out / "checkpoint.old"
    shutil.rmtree(tmp, ignore_errors=True)
    train = {"step": progress.step, "tokens": progress.tokens, "elapsed_s": progress.elapsed_s,
             "val_loss": progress.val_loss}
    if config.get("lora_rank"):  # the adapters alone, beside the name of the frozen base
        lora.save_adapter(tmp, model, Path(config["init"]), extra={"train": train})
    else:
        save_checkpoint(tmp, model, tokenizer, extra={"claims": TRAINED_CLAIMS, "train": train})
    state = {
        "format_version": STATE_VERSION, "step": progress.step, "elapsed_s": progress.elapsed_s,
        "tokens": progress.tokens, "val_loss": progress.val_loss, "world_size": world_size,
        "config": config, "optimizer": optimizer.state_dict(),
    }
    torch.save(state, out / "train_state.pt.tmp")
    shutil.rmtree(old, ignore_errors=True)
    if ckpt.exists():
        ckpt.rename(old)
    tmp.rename(ckpt)
    os.replace(out / "train_state.pt.tmp", out / "train_state.pt")
    shutil.rmtree(old, ignore_errors=True)


def has_run(out: Path) -> bool:
    return (out / "train_state.pt").is_file()


def load_run(out: Path, device: torch.device):
    """-> (model in train mode, tokenizer, train_state dict, Progress)."""
    state = torch.load(out / "train_state.pt", map_location="cpu", weights_only=True)
    if state.get("format_version") != STATE_VERSION:
        raise TrainError(f"{out}/train_state.pt has format_version {state.get('format_version')!r}; "
                         f"this build reads {STATE_VERSION}")
    model, tokenizer, config = load_trainable(out / "checkpoint", device)
    ckpt_step = config.get("train", {}).get("step")
    if ckpt_step != state["step"]:
        raise TrainError(f"{out}: checkpoint is at step {ckpt_step} but train_state.pt at step {state['step']} "
                         "(interrupted save?); remove one of them to continue")
    progress = Progress(state["step"], state["elapsed_s"], state["tokens"], state.get("val_loss"))
    return model.train(), tokenizer, state, progress


def load_trainable(folder: Path, device) -> tuple:
    """A saved model to train on: our checkpoint, or an adapter folder's base with its adapters
    attached, unmerged and trainable -> (model, tokenizer, config.json or adapter.json)."""
    if lora.is_adapter_folder(folder):
        from diffusion_lsp.model.families.pretrained import load_folder

        meta = lora.read_meta(folder)
        model, tokenizer, _ = load_folder(Path(meta["base"]), device, frozen_dtype(device))
        return lora.attach(model, folder), tokenizer, meta
    return load_checkpoint(folder, device=device)


def frozen_dtype(device) -> torch.dtype | None:
    """The dtype of the frozen base under adapters: float32 on a CPU, the checkpoint's own (bf16)
    elsewhere, where a 7B base in float32 would take twice the memory for nothing."""
    return torch.float32 if torch.device(device).type == "cpu" else None
