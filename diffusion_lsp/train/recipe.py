"""`diffusion-lsp train-recipe`: one command that trains a bigger embedded model on one GPU in a
fixed time, from a token pack that travelled with the working tree (data/pack.py), and writes a
checkpoint in our format small enough to come back.

It unpacks the corpus, measures the training throughput of each candidate shape (a few steps of a
fresh model, data pipeline included: train/loop.py measure_rate), and takes the largest one that
(a) fits what may come back (its bf16 weights under `--max-mb`) and (b) sees at least
TOKENS_PER_PARAM tokens per parameter in the time left (Hoffmann et al. 2022's ~20 for
compute-optimal training; diffusion LMs keep gaining from repeated data well past one epoch, Prabhudesai
et al. 2025, so epochs over the pack are allowed). It then trains that shape with the objective of the
embedded model's last stages (half fill-in-the-middle, block noise on half the canvases, 512
positions), and saves the checkpoint in bf16, split into parts of at most `--split-mb` when asked
(the device returns files of up to 16 MiB; `cat model.safetensors.part* > model.safetensors` joins
them). `recipe.json` records the candidates' rates, the choice and the result. `--dry-run` does all
of it on the CPU with tiny shapes, in about a minute: what a test runs."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import UserError
from ..input_files import InputFile

TOKENS_PER_PARAM = 20


@dataclass(frozen=True)
class Shape:
    dim: int
    layers: int
    heads: int
    kv_heads: int
    hidden_dim: int

    def overrides(self) -> dict:
        return {"dim": self.dim, "n_layers": self.layers, "n_heads": self.heads, "n_kv_heads": self.kv_heads,
                "hidden_dim": self.hidden_dim, "max_seq_len": 512}


# smallest first; head_dim 64 (the embedded model's is 32 at dim 192), SwiGLU hidden ~ 8/3 dim rounded to 64
GPU_SHAPES = (Shape(256, 6, 4, 2, 704), Shape(384, 8, 6, 2, 1024), Shape(512, 8, 8, 4, 1408),
              Shape(640, 10, 10, 5, 1728), Shape(768, 12, 12, 4, 2048))
DRY_SHAPES = (Shape(32, 1, 2, 1, 64), Shape(64, 2, 2, 1, 128))


def register(sub) -> None:
    p = sub.add_parser("train-recipe",
                       help="train a bigger embedded model on one GPU in a fixed time, from a token pack",
                       description="Train a bigger embedded model on one GPU in a fixed time, from a token pack "
                       "(`diffusion-lsp data pack`): the throughput of five shapes is measured, the largest that "
                       "fits --max-mb in bf16 and sees 20 tokens per parameter is trained, and saved in bf16.")
    p.add_argument("--pack", required=True, metavar="FILE", type=InputFile, help="token pack from `diffusion-lsp data pack`")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="folder for the unpacked corpus, the run, the bf16 checkpoint (its model folder) and recipe.json")
    p.add_argument("--minutes", type=float, default=8.0, help="the whole budget, measuring included (default 8)")
    p.add_argument("--max-mb", type=float, default=60.0, help="largest bf16 checkpoint to choose (default 60)")
    p.add_argument("--split-mb", type=float, default=0.0, metavar="MB",
                   help="split model.safetensors into parts of at most this size (default 0: whole)")
    p.add_argument("--batch-size", type=int, default=128, help="rows of 512 tokens per step (default 128)")
    p.add_argument("--lr", type=float, default=2e-3, help="peak learning rate (default 2e-3)")
    p.add_argument("--dry-run", action="store_true", help="on the CPU, tiny shapes, about a minute")
    p.set_defaults(run=run)


def _config(corpus: Path, out: Path, shape: Shape, args, **budget):
    from .config import TrainConfig
    from .objective import ObjectiveConfig

    return TrainConfig(corpus=str(corpus), out=str(out), preset="small", model=shape.overrides(),
                       seq_len=128 if args.dry_run else 512, batch_size=4 if args.dry_run else args.batch_size,
                       lr=args.lr, warmup_steps=5 if args.dry_run else 200, eval_every=0 if args.dry_run else 500,
                       save_every_minutes=2.0, device="cpu" if args.dry_run else "auto", autocast="auto",
                       objective=ObjectiveConfig(fim_rate=0.5, block_noise=0.5), **budget)


def choose(rates: list[dict], seconds_left: float, max_mb: float) -> int:
    """Index of the largest candidate that fits `max_mb` in bf16 and sees TOKENS_PER_PARAM tokens per
    parameter in `seconds_left`; the smallest when none does."""
    fits = [i for i, r in enumerate(rates) if 2 * r["params"] / 2**20 <= max_mb
            and r["tokens_per_s"] * seconds_left >= TOKENS_PER_PARAM * r["params"]]
    return max(fits, key=lambda i: rates[i]["params"]) if fits else 0


def _split(path: Path, mb: float) -> list[str]:
    """path -> path.part00, part01, ... of at most mb each (the whole file removed)."""
    size, data, parts = int(mb * 2**20), path.read_bytes(), []
    for k in range(0, len(data), size):
        part = path.with_name(f"{path.name}.part{k // size:02d}")
        part.write_bytes(data[k:k + size])
        parts.append(part.name)
    path.unlink()
    return parts


def run(args) -> int:
    t0 = time.perf_counter()
    import torch

    from ..data.pack import unpack
    from ..data.token_files import PackError
    from ..model.families.checkpoint import load_checkpoint, save_checkpoint
    from .loop import measure_rate, train
    from .state import TrainError

    if not args.dry_run and not torch.cuda.is_available():
        raise UserError("train-recipe trains on a CUDA GPU; this machine has none (--dry-run runs it on the CPU)")
    out = Path(args.out)
    try:
        meta = unpack(args.pack, out / "corpus")
    except (PackError, OSError) as e:
        raise UserError(str(e)) from None
    budget_s = 60 * args.minutes
    shapes = DRY_SHAPES if args.dry_run else GPU_SHAPES
    rates = []
    try:
        for shape in shapes:
            r = measure_rate(_config(out / "corpus", out / "probe", shape, args, steps=1),
                             steps=3 if args.dry_run else 12, skip=1 if args.dry_run else 4)
            rates.append({**shape.__dict__, **r})
            print(f"candidate {shape}: {r['params'] / 1e6:.1f} M params, {r['tokens_per_s']:,.0f} tokens/s", flush=True)
        left = budget_s - (time.perf_counter() - t0) - 30  # the save, the bf16 copy and the split
        pick = choose(rates, left, args.max_mb)
        shape = shapes[pick]
        print(f"chosen: {shape} ({rates[pick]['params'] / 1e6:.1f} M params) for {left / 60:.1f} minutes", flush=True)
        summary = train(_config(out / "corpus", out / "run", shape, args, minutes=max(left, 1) / 60),
                        progress_bar=not args.dry_run)
    except (TrainError, ValueError) as e:
        raise UserError(str(e)) from None
    model, tok, config = load_checkpoint(out / "run" / "checkpoint")
    extra = {"claims": config.get("claims"), "train": config.get("train"),  # what the trainer wrote, as it wrote it
             "recipe": {"pack_train_tokens": meta["train_tokens"], "shape": shape.__dict__}}
    folder = save_checkpoint(out / "model", model, tok, dtype=torch.bfloat16, extra=extra)
    parts = _split(folder / "model.safetensors", args.split_mb) if args.split_mb else ["model.safetensors"]
    record = {"candidates": rates, "chosen": pick, "summary": summary, "pack": meta, "parts": parts,
              "seconds": round(time.perf_counter() - t0, 1), "device": torch.cuda.get_device_name() if
              torch.cuda.is_available() and not args.dry_run else "cpu"}
    (out / "recipe.json").write_text(json.dumps(record, indent=2) + "\n")
    print(f"{folder}: {summary.get('tokens', 0):,} tokens in {summary.get('elapsed_s', 0):.0f} s, "
          f"val loss {summary.get('val_loss', float('nan')):.3f}; parts {', '.join(parts)}; "
          f"{record['seconds']:.0f} s in all")
    return 0
