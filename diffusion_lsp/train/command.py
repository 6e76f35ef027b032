r"""Train or resume a masked-diffusion model on a corpus folder made by `diffusion-lsp data`.

examples:
  diffusion-lsp train --corpus data/corpus --out runs/small --preset small --minutes 5
  torchrun --nproc_per_node 4 -m diffusion_lsp.cli train --corpus data/corpus \
      --out runs/base --preset base --minutes 60

Rerunning the same command continues the run in --out (step, optimizer, elapsed time:
--minutes and --steps are totals over all restarts).
"""

from __future__ import annotations

import argparse
import os

from ..errors import UserError

# CLI flag -> ModelConfig field (overrides of the preset)
MODEL_FLAGS = {"dim": "dim", "layers": "n_layers", "heads": "n_heads", "kv_heads": "n_kv_heads",
               "hidden_dim": "hidden_dim", "max_seq_len": "max_seq_len"}


def register(sub) -> None:
    p = sub.add_parser("train", help="train or resume a masked-diffusion model",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", required=True, help="folder with train.jsonl, val.jsonl, tokenizer.json")
    p.add_argument("--out", required=True, help="run folder (checkpoint/, train_state.pt, log.jsonl)")
    p.add_argument("--init", metavar="DIR",
                   help="start a new run from this checkpoint (weights and tokenizer; fresh optimizer); "
                        "ignored when --out already holds a run")
    p.add_argument("--edits", metavar="DIR", help="next-edit records (train.jsonl, val.jsonl) from `data edits`")
    p.add_argument("--edit-rate", type=float, default=0.0, help="fraction of next-edit rows (default 0)")
    p.add_argument("--block-noise", type=float, default=0.0,
                   help="fraction of FIM and edit rows noised block by block, as the sampler decodes (default 0)")
    p.add_argument("--preset", default="small", help="model size: tiny, small or base (default small)")
    for flag in MODEL_FLAGS:
        p.add_argument(f"--{flag.replace('_', '-')}", dest=flag, type=int, help="override the preset")
    budget = p.add_argument_group("budget (at least one; totals over restarts)")
    budget.add_argument("--minutes", type=float, help="training-time budget")
    budget.add_argument("--steps", type=int, help="optimizer steps")
    p.add_argument("--seq-len", type=int, default=256)
    p.add_argument("--batch-size", type=int, default=32, help="rows per process per step")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--warmup-steps", type=int, default=100)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--grad-clip", type=float, default=1.0)
    p.add_argument("--fim-rate", type=float, default=0.5, help="fraction of fill-in-the-middle rows")
    p.add_argument("--text-lines", type=float, default=0.5,
                   help="fraction of whole-line FIM middles cut at text line starts (default 0.5)")
    p.add_argument("--max-span", type=int, default=64, help="longest FIM middle in tokens")
    p.add_argument("--eval-every", type=int, default=200, help="steps between validation losses (0: never)")
    p.add_argument("--eval-batches", type=int, default=4)
    p.add_argument("--save-every-minutes", type=float, default=10.0)
    p.add_argument("--autocast", choices=("auto", "bf16", "off"), default="auto",
                   help="auto: bf16 on CUDA and on CPUs with native bf16 (AVX512-BF16/AMX), else fp32")
    p.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1")
    p.add_argument("--threads", type=int, default=0, help="torch threads per process (0: cores / processes)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(run=run)


def run(args) -> int:
    # torch and numpy: kept off --help
    from ..model.families.checkpoint import CheckpointError
    from .config import TrainConfig
    from .loop import train
    from .objective import ObjectiveConfig
    from .state import TrainError

    try:
        cfg = TrainConfig(
            corpus=args.corpus, out=args.out, preset=args.preset, init=args.init, edits=args.edits,
            edit_rate=args.edit_rate,
            model={f: getattr(args, flag) for flag, f in MODEL_FLAGS.items() if getattr(args, flag) is not None},
            seq_len=args.seq_len, batch_size=args.batch_size, lr=args.lr, warmup_steps=args.warmup_steps,
            weight_decay=args.weight_decay, grad_clip=args.grad_clip, minutes=args.minutes, steps=args.steps,
            eval_every=args.eval_every, eval_batches=args.eval_batches, save_every_minutes=args.save_every_minutes,
            autocast=args.autocast, seed=args.seed, threads=args.threads, device=args.device,
            objective=ObjectiveConfig(fim_rate=args.fim_rate, max_span=args.max_span,
                                      text_lines=args.text_lines, block_noise=args.block_noise),
        )
    except ValueError as e:  # bad flag values
        raise UserError(str(e)) from None
    try:
        summary = train(cfg, progress_bar=not args.no_progress)
    except (TrainError, CheckpointError) as e:
        raise UserError(str(e)) from None
    if os.environ.get("RANK", "0") == "0":
        fields = (f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in summary.items() if k != "event")
        print(" ".join(fields))
    return 0
