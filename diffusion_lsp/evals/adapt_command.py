r"""Adapt the model to a repository: fine-tune it on the repository's own files for a few minutes on
this machine, and measure it on files held out from that training, before and after.

examples:
  diffusion-lsp adapt                      the repository in the current folder, 10 minutes
  diffusion-lsp adapt ~/src/myproject --minutes 30

The source files are the ones git lists (tracked, and untracked ones .gitignore does not exclude;
binary, generated, vendored and huge files skipped, and symlinks that lead out of the repository),
in every language the server knows. A fifth of them, chosen by a hash of their path, is held out:
never trained on, only measured. The adapted model goes to REPO/.diffusion-lsp/model (--out; a
symlink there is refused), where the language server finds it and uses it for that workspace
without a setting, because this machine recorded that it made it (a model a repository ships is
used only when model.path names it). Rerunning continues an interrupted run; once the files
changed it adapts the base model again. Nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import os
from pathlib import Path

from .. import jsonout
from ..errors import UserError


def register(sub) -> None:
    from ..options import add_launch_args

    p = sub.add_parser("adapt", help="fine-tune the model on a repository's own code, measured before and after",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("repo", metavar="REPO", nargs="?", default=".", help="the repository (default: this folder)")
    p.add_argument("--minutes", type=float, default=10.0, help="training time, a total over reruns (default 10)")
    p.add_argument("--steps", type=int, help="a budget in optimizer steps instead of minutes")
    p.add_argument("--lr", type=float, default=1e-3, help="peak learning rate (default 1e-3)")
    p.add_argument("--lora-rank", type=int, metavar="R",
                   help="train low-rank adapters of rank R on the frozen model instead of its whole weights "
                        "(default: 16 for a Hugging Face checkpoint, whole weights for this project's own)")
    p.add_argument("--out", metavar="DIR", help="where the adapted model goes (default REPO/.diffusion-lsp/model)")
    p.add_argument("--fresh", action="store_true", help="start again from the base model, not from the run in --out")
    p.add_argument("--lines", type=int, default=200, help="held-out lines completed before and after (default 200)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-eval", action="store_true", help="train only: no measurement before and after")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--json", action="store_true", help="print the report as one JSON object")
    add_launch_args(p)  # --model: the base model
    p.set_defaults(run=run)


def run(args) -> int:
    from ..context.tokens import model_token_counter
    from ..context.repo import repo_files
    from ..engine import model_folder
    from .repo import acceptance_of, compare, material, print_report
    from ..options import engine_for, launch_settings
    from ..context.repo import ADAPTED_DIR
    from ..local_state import REPORT
    from ..train.adapt import Plan, adapt, base_config, default_out

    launch = launch_settings(args)
    if launch.backend != "local":
        raise UserError("adapt trains a local model (--model DIR), not an API")
    repo = Path(args.repo)
    base = model_folder(launch.path)
    out = Path(args.out) if args.out else default_out(repo)
    if out.resolve() == base.resolve():
        raise UserError(f"--out {out} is the base model's folder; adapt writes a new one")
    plan = Plan(repo, base, out, args.minutes, args.steps, fresh=args.fresh, lora_rank=args.lora_rank, lr=args.lr, threads=launch.threads or 0,
                device=launch.device)
    files, skipped = repo_files(repo)
    base_config(base)  # refuses a base that cannot be adapted before minutes of measuring
    say = (lambda *a: None) if args.json else print
    bar = not (args.no_progress or args.json)
    m = None if args.no_eval else material(repo, files, args.lines, args.seed)
    held = sum(f.held_out for f in files)
    say(f"{repo}: {len(files)} source files ({', '.join(sorted({f.language for f in files})) or 'none'}), "
        f"{held} held out" + ("" if m is None else f"; measuring on {len(m.cases)} lines and {len(m.steps)} "
                              "next edits from their git history"))
    count = model_token_counter(base)
    before = None
    if m is not None:
        say("measuring the base model ...")
        before = compare(m, [("base", functools.partial(engine_for, launch), count, acceptance_of(base, None))],
                         progress=bar)
    budget = f"{args.steps} steps" if args.steps else f"{args.minutes:g} minutes"
    say(f"adapting {base} for {budget} on {len(files) - held} files ...")
    place = functools.partial(written, repo, out, inside=not args.out)
    info = carry_acceptance(base, place, out, repo, adapt(plan, files, progress=bar))
    report = {"repo": str(repo), "files": len(files), "held_out_files": held, "skipped": skipped,
              "adapted": info, "out": str(out)}
    if m is not None:
        after = compare(m, [("adapted", functools.partial(engine_for, dataclasses.replace(launch, path=str(out))),
                             count, acceptance_of(out, None))], progress=bar)
        merged = {key: {**before[key], **{k: v for k, v in after[key].items() if k not in before[key]}}
                  for key in before}
        report |= {"lines": len(m.cases), "next_edit_cases": len(m.steps), **merged, "gain": gain(merged)}
    place(REPORT, jsonout.dumps(report, indent=2) + "\n")
    if args.json:
        print(jsonout.dumps(report))
        return 0
    if m is not None:
        print_report(f"\n{repo}: before (base) and after (adapted), on the held-out files", m, report)
        g = report["gain"]
        print(f"edit similarity with drafts {g['before']:.1%} -> {g['after']:.1%} ({100 * g['points']:+.1f} points)")
    where = ("the language server uses it in this repository"
             if out.resolve() == (repo / ADAPTED_DIR).resolve() and info["trusted"]
             else f"use it with --model {out} or the model.path setting")
    print(f"adapted model: {out} ({info['steps']} steps); {where}. Report: {out / REPORT}")
    return 0


def written(repo: Path, out: Path, name: str, data: bytes | str, inside: bool) -> Path:
    """One of adapt's files written into OUT through workspace_files: inside the repository (the
    default OUT) with every folder below it checked, else where --out says."""
    from ..context.repo import ADAPTED_DIR
    from ..workspace_files import write_file, write_in

    return write_in(repo, ADAPTED_DIR / name, data) if inside else write_file(out / name, data)


def carry_acceptance(base: Path, place, out: Path, repo: Path, info: dict) -> dict:
    """The base model's acceptance model goes along to the adapted one (the server then decides what
    to show the same way), written by `place` (`written`); `diffusion-lsp calibrate REPO --held-out
    --model OUT --out OUT/acceptance.json` refits it for the adapted model."""
    from ..acceptance.model import FILE
    from ..input_files import InputFile
    from ..local_state import MAX_STATE_BYTES, trust

    if (base / FILE).exists() and not os.path.lexists(out / FILE):
        place(FILE, InputFile(str(base / FILE)).read_bytes(MAX_STATE_BYTES))
        info["trusted"] = info["trusted"] and trust(out, repo)  # its files changed: recorded again, once written
    return info


def gain(result: dict) -> dict:
    """The headline: single-line edit similarity of the model with drafts, base and adapted."""
    b, a = (result["rows"][f"{n} + drafts"]["edit_similarity"] for n in ("base", "adapted"))
    return {"before": b, "after": a, "points": a - b}
