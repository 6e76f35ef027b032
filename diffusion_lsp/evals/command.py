"""`diffusion-lsp eval`: every report puts a trivial baseline and the one-token-per-step policy
beside the policy under test, so each number means something."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from .. import jsonout
from ..errors import UserError
from ..fim_batch import Item, decode_all
from ..options import add_fill_args, command_backend, launch_settings, paragraphs, sampler_config
from . import confidence, edits_command, heldout, humaneval, nep, repo, typing_session
from .execute import run_all


def register(sub):
    raw = argparse.RawDescriptionHelpFormatter
    p = sub.add_parser("eval", help="quality evaluations: HumanEval infilling, held-out code, next edits",
                       formatter_class=raw, description=paragraphs(
                           "Quality evaluations of the model.",
                           f"humaneval-infill reads {humaneval.SOURCE}.",
                           f"nep reads {nep.SOURCE}.",
                           f"Both look in {humaneval.data_root()} (${humaneval.DATA_ENV} when set, else shared/data "
                           "beside the checkout) for human-eval-infilling/ and next-edit-prediction/, unless --data "
                           "says where. That data is for measuring: never train on it.",
                           "heldout and typing read the held-out split (val.jsonl) of the training corpus that "
                           "`diffusion-lsp data build` writes."))
    ev = p.add_subparsers(dest="eval", required=True, metavar="EVAL")
    h = ev.add_parser("humaneval-infill", help="pass@1 on HumanEval infilling", formatter_class=raw,
                      description=paragraphs("pass@1 on HumanEval infilling: fill each task's gap, run its tests.",
                                             f"The data: {humaneval.SOURCE}."))
    h.add_argument("--split", default="single-line",
                   choices=("single-line", "multi-line", "random-span", "random-span-light"))
    h.add_argument("--limit", type=int, default=None, help="first N tasks only")
    h.add_argument("--sample", type=int, default=None, metavar="N",
                   help="N tasks spread evenly over the split (a quicker estimate over every function)")
    h.add_argument("--data", default=None, metavar="DIR",
                   help=f"folder with the HumanEval-*Infilling.jsonl.gz files (default: {humaneval.default_data_dir()},"
                        f" from ${humaneval.DATA_ENV} when set)")
    h.add_argument("--timeout", type=float, default=3.0, help="seconds per program (default 3)")
    h.add_argument("--json", action="store_true", help="print one JSON object")
    h.add_argument("--no-baselines", action="store_true", help="skip the empty and one-per-step rows")
    add_fill_args(h)
    h.set_defaults(run=run_humaneval, max_tokens=None)
    heldout.register(ev)
    typing_session.register(ev)
    nep.register(ev)
    edits_command.register(ev)
    repo.register(ev)
    confidence.register(ev)


def summarize(name: str, passed: list[bool], records: list[dict] | None, wall: float) -> dict:
    n = len(passed)
    row = {"name": name, "n": n, "pass@1": sum(passed) / n if n else 0.0}
    if records is not None:
        tokens = sum(r.get("tokens", 0) for r in records)
        row["forwards_per_token"] = sum(r.get("forwards", 0) for r in records) / max(tokens, 1)
        row["ms_per_task"] = wall * 1e3 / max(n, 1)
    return row


def run_humaneval(args) -> int:
    cfg, launch = sampler_config(args), launch_settings(args)
    try:
        tasks = humaneval.load_split(args.split, Path(args.data) if args.data else None, args.limit,
                                     args.sample)
    except (FileNotFoundError, ValueError) as e:
        raise UserError(str(e)) from None
    backend = command_backend(launch)
    max_tokens = args.max_tokens or humaneval.CANVAS[args.split]
    one_line = args.split == "single-line"
    requests = [Item(t["task_id"], t["prompt"], t["suffix"], max_tokens, one_line) for t in tasks]

    def score(records):
        completions = [humaneval.postprocess(args.split, r.get("text", "")) for r in records]
        return run_all([humaneval.program(t, c) for t, c in zip(tasks, completions)], args.timeout)

    runs = [(args.policy, cfg)]
    if not args.no_baselines and args.policy != "one":
        runs.append(("one", replace(cfg, policy="one")))
    rows = []
    for name, run_cfg in runs:
        records, wall = decode_all(backend, requests, run_cfg, args.batch_size, desc=name)
        rows.append(summarize(name, score(records), records, wall))
    if not args.no_baselines:
        empty = [{"text": ""} for _ in tasks]
        rows.append(summarize("empty", score(empty), None, 0.0))
    main = rows[0]
    if args.json:
        out = {"split": args.split, "n": main["n"], "pass@1": main["pass@1"],
               "forwards_per_token": main["forwards_per_token"], "ms_per_task": main["ms_per_task"],
               "policy": args.policy, "max_tokens": max_tokens, "rows": rows}
        print(jsonout.dumps(out))
    else:
        print_table(f"HumanEval infilling, {args.split}: {main['n']} tasks, canvas {max_tokens} tokens", rows)
    return 0


def print_table(title: str, rows: list[dict], file=sys.stdout):
    print(title, file=file)
    print(f"{'run':>10} {'pass@1':>7} {'fwd/token':>9} {'ms/task':>8}", file=file)
    for r in rows:
        fpt = f"{r['forwards_per_token']:.3f}" if "forwards_per_token" in r else "-"
        ms = f"{r['ms_per_task']:.0f}" if "ms_per_task" in r else "-"
        print(f"{r['name']:>10} {100 * r['pass@1']:>6.1f}% {fpt:>9} {ms:>8}", file=file)
