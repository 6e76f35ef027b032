"""`diffusion-lsp model check PATH [--json]`: is my checkpoint loaded right?

Loads the folder as every command does and prints its family, parameters, weights' dtype, special
tokens, memory and load time; then, where transformers is installed and the folder is a Hugging Face
one, our logits beside transformers' own forward under full bidirectional attention on a sample of
code (model/reference.py): the largest absolute difference and how often the argmax agrees. A
correctly loaded float32 checkpoint differs by ~1e-5 (tiny random checkpoints); a wrong tensor name,
RoPE base or logit shift shows as differences of the logits' own size."""

from __future__ import annotations

import json
import resource
import sys
import time
from pathlib import Path

from .errors import UserError

SAMPLE = '''def mean(values):
    """The arithmetic mean of a non-empty list."""
    total = sum(values)
    return total / len(values)
'''


def register(sub):
    p = sub.add_parser("model", help="inspect a checkpoint folder")
    model = p.add_subparsers(dest="model_command", required=True, metavar="COMMAND")
    c = model.add_parser("check", help="family, sizes, special tokens, and our logits beside transformers'",
                         description="Is a checkpoint loaded right? Loads the folder as every command does and "
                                     "prints its family, parameters, dtype, special tokens, memory and load time; "
                                     "for a Hugging Face folder, where transformers is installed, also how far "
                                     "our logits are from transformers' own on a sample of code.")
    c.add_argument("path", metavar="PATH", help="checkpoint folder (ours or a Hugging Face one)")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.add_argument("--no-reference", action="store_true", help="skip the comparison with transformers")
    c.set_defaults(run=run)


def check(path: Path, reference: bool = True) -> dict:
    """The figures `model check` prints. CheckpointError when the folder does not load."""
    import torch

    from .model.pretrained import PretrainedLM, is_hf_folder, load_folder  # raises CheckpointError

    t0 = time.perf_counter()
    model, tok, meta = load_folder(path, "cpu")
    load_ms = (time.perf_counter() - t0) * 1e3
    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    hf = is_hf_folder(path)
    out = {
        "path": str(path), "format": "huggingface" if hf else "diffusion-lsp",
        "family": meta.get("family", "diffusion-lsp"),
        "parameters": params, "dtype_on_disk": meta.get("torch_dtype") or meta.get("dtype") or "float32",
        "dtype_loaded": str(next(model.parameters()).dtype).replace("torch.", ""),
        "shift_logits": model.config.shift_logits, "vocab_size": tok.vocab_size,
        "special_tokens": {"mask": tok.mask_id, "filler": tok.filler_id, "bos": tok.bos_id,
                           **{role: tok.id_of(role) for role in tok.special.extra}},
        "memory_mb": {"weights": round(weight_bytes / 2**20, 1),
                      "peak_rss": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)},
        "load_ms": round(load_ms, 1), "reference": None,
    }
    if not reference:
        out["reference"] = {"skipped": "--no-reference"}
    elif not hf:
        out["reference"] = {"skipped": "our own format has no transformers reference"}
    else:
        try:
            from .model.reference import reference_logits, reference_model

            ref = reference_model(path)
        except ImportError:
            out["reference"] = {"skipped": "transformers is not installed (pip install transformers)"}
            return out
        ids = torch.tensor([tok.encode(SAMPLE)])
        with torch.inference_mode():
            ours = PretrainedLM(model)(ids).float()
        theirs = reference_logits(ref, ids)
        out["reference"] = {
            "tokens": ids.shape[1], "max_abs_diff": float((ours - theirs).abs().max()),
            "logit_std": float(theirs.std()),
            "argmax_agreement": float((ours.argmax(-1) == theirs.argmax(-1)).float().mean()),
        }
    return out


def run(args) -> int:
    from .model.checkpoint import CheckpointError

    path = Path(args.path)
    if not (path / "config.json").exists():  # not is_file(): a FIFO or a folder by that name is the loader's error
        raise UserError(f"no checkpoint at {path} (config.json is missing)")
    try:
        report = check(path, reference=not args.no_reference)
    except (CheckpointError, ValueError) as e:
        raise UserError(str(e)) from None
    if args.json:
        print(json.dumps(report))
        return 0
    ref = report["reference"]
    lines = [f"{report['path']}: {report['format']} checkpoint, family {report['family']}",
             f"  {report['parameters']:,} parameters, {report['dtype_on_disk']} on disk, loaded as "
             f"{report['dtype_loaded']}; logits {'shifted' if report['shift_logits'] else 'in place'}",
             f"  vocab {report['vocab_size']:,}; "
             + ", ".join(f"{role} {i}" for role, i in report["special_tokens"].items()),
             f"  weights {report['memory_mb']['weights']:,} MB, peak RSS {report['memory_mb']['peak_rss']:,} MB, "
             f"loaded in {report['load_ms']:,.0f} ms"]
    if "skipped" in ref:
        lines.append(f"  transformers reference: skipped ({ref['skipped']})")
    else:
        lines.append(f"  beside transformers on {ref['tokens']} tokens: max |diff| {ref['max_abs_diff']:.3g} "
                     f"(logit std {ref['logit_std']:.3g}), argmax agrees on {ref['argmax_agreement']:.1%}")
    print("\n".join(lines))
    sys.stdout.flush()
    return 0
