"""Loading a checkpoint and running fills: the one entry point the CLI, benchmarks and the language
server's worker use."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_MODEL = Path(__file__).parent / "checkpoints" / "default"


@dataclass
class Engine:
    model: object  # DiffusionTransformer
    tokenizer: object  # diffusion_lsp.model.tokenizer.Tokenizer
    meta: dict  # the checkpoint's config.json

    def fill(self, requests, cfg=None, should_stop=None):
        from .model.sampler import fill

        return fill(self.model, self.tokenizer, requests, cfg, should_stop)


def pick_device(name: str = "auto") -> str:
    import torch

    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return name


def load_engine(path: str | Path | None = None, device: str = "auto", threads: int | None = None) -> Engine:
    """Load a checkpoint folder (default: the embedded model). Raises CheckpointError when the
    folder is missing or corrupt."""
    import torch

    from .model.checkpoint import CheckpointError, load_checkpoint

    if threads:
        torch.set_num_threads(threads)
    folder = Path(path) if path else DEFAULT_MODEL
    if path is None and not (folder / "config.json").exists():
        raise CheckpointError(f"the embedded default model is missing ({folder}); pass --model DIR")
    model, tokenizer, meta = load_checkpoint(folder, device=pick_device(device))
    return Engine(model, tokenizer, meta)
