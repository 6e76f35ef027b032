"""`diffusion-lsp bench retype FOLDER...`: what a user is shown, measured through the real language
server: lines of the folders are retyped (evals/retype.py: the cursor at the line's indentation or
after a word of it, the rest of the line taken out, the rest of the file there), one inline
completion asked at each with the default settings (no debounce: the replay is not a typist), and
what comes back is counted: shown, exactly right (the rest of the line), partly right (the line
starts with it), wrong shown, and the client's p50 latency. `--beside-rules` runs the same lines a
second time with `completion.acceptance: false` (the model's cut fill, as before the acceptance
model) and prints both side by side, with the server's own account of what the acceptance model
chose (`diffusionLsp/stats`). Prints figures; asserts nothing."""

from __future__ import annotations

import asyncio
import random
import statistics
import sys
import tempfile
from pathlib import Path

from .. import jsonout
from ..context.repo import repo_files
from ..errors import UserError
from ..evals.retype import Case, exact, partly, pick
from ..options import add_launch_args, launch_settings
from ..protocol.settings import LaunchSettings

SETTINGS = {"completion": {"debounceMs": 0}, "worker": {"idleExitS": 0}}


def register(bench) -> None:
    r = bench.add_parser("retype", help="what a user is shown: lines of your folders retyped through the real server")
    r.add_argument("folders", nargs="+", metavar="FOLDER", help="source folders whose lines are retyped")
    r.add_argument("--lines", type=int, default=60, help="lines per folder (default 60)")
    r.add_argument("--seed", type=int, default=0)
    r.add_argument("--beside-rules", action="store_true",
                   help="also run the lines with completion.acceptance false (the rules before it)")
    r.add_argument("--json", action="store_true", help="print one JSON object")
    add_launch_args(r)
    r.set_defaults(run=run)


def score(cases: list[Case], shown: list[str], ms: list[float]) -> dict:
    n = max(len(cases), 1)
    said = [s for s in shown if s.strip()]
    right = sum(bool(s.strip()) and exact(s, c.truth) for s, c in zip(shown, cases))
    return {"requests": len(cases), "shown": len(said) / n, "exact": right / n,
            "precision": right / len(said) if said else None,
            "partly": sum(bool(s.strip()) and partly(s, c.truth) for s, c in zip(shown, cases)) / n,
            "wrong": (len(said) - right) / n, "p50_ms": statistics.median(ms) if ms else None}


async def one_pass(launch: LaunchSettings, cases: list[Case], settings: dict) -> tuple[list[str], list[float], dict]:
    from .lsp_client import BenchClient  # pygls and lsprotocol: kept off --help

    with tempfile.TemporaryDirectory(prefix="diffusion-lsp-retype-", ignore_cleanup_errors=True) as tmp:
        cmd = [sys.executable, "-m", "diffusion_lsp", "serve", "--worker-socket", str(Path(tmp) / "w.sock")]
        shown, ms = [], []
        async with BenchClient(cmd + launch.to_argv(), settings) as lsp:
            await lsp.wait_for_model(local=launch.backend == "local")
            for k, c in enumerate(cases):
                uri = f"file:///retype/{k}/{Path(c.doc.uri).name}"
                text = c.doc.text
                start = text.rfind("\n", 0, c.offset) + 1
                lsp.open(uri, text)
                took, got = await lsp.complete(uri, text.count("\n", 0, c.offset), text[start:c.offset])
                lsp.close(uri)
                shown.append(got)
                ms.append(took)
            stats = await lsp.stats()
    return shown, ms, stats


def run(args) -> int:
    if args.lines < 1:
        raise UserError("--lines must be at least 1")
    launch = launch_settings(args)
    cases = []
    for k, folder in enumerate(args.folders):
        files, _ = repo_files(folder)
        if not files:
            raise UserError(f"{folder}: no source files to retype")
        cases += pick(files, args.lines, random.Random(args.seed + k), Path(folder).name)
    passes = {"acceptance": SETTINGS}
    if args.beside_rules:
        passes["rules"] = {**SETTINGS, "completion": {**SETTINGS["completion"], "acceptance": False}}
    groups = {p: [i for i, c in enumerate(cases) if c.package == p] for p in dict.fromkeys(c.package for c in cases)}
    groups["all"] = list(range(len(cases)))
    result = {}
    for name, settings in passes.items():
        shown, ms, stats = asyncio.run(one_pass(launch, cases, settings))
        result[name] = {"rows": {g: score([cases[i] for i in ix], [shown[i] for i in ix], [ms[i] for i in ix])
                                 for g, ix in groups.items()},
                        "acceptance": stats.get("acceptance"), "shown": shown}
    if args.json:
        print(jsonout.dumps({k: {**v, "shown": None} for k, v in result.items()}))
        return 0
    print_result(result, cases)
    return 0


def print_result(result: dict, cases: list[Case]) -> None:
    print(f"{len(cases)} lines retyped through the language server (default settings, no debounce)")
    print(f"{'':28} {'requests':>8} {'shown':>7} {'exact':>7} {'precision':>10} {'partly':>7} {'wrong':>7} {'p50 ms':>7}")
    for name, got in result.items():
        for group, r in got["rows"].items():
            prec = f"{r['precision']:10.1%}" if r["precision"] is not None else f"{'-':>10}"
            print(f"{name + ': ' + group:28} {r['requests']:8d} {r['shown']:7.1%} {r['exact']:7.1%} {prec} "
                  f"{r['partly']:7.1%} {r['wrong']:7.1%} {r['p50_ms'] or 0:7.0f}")
    for name, got in result.items():
        a = got["acceptance"] or {}
        mean = a.get("mean_p_shown")
        print(f"{name}: {a.get('model')}; shown share of judged {a.get('shown_share')}, mean P of what is shown "
              f"{'-' if mean is None else f'{mean:.2f}'}, won {a.get('won')}")
    first = next(iter(result.values()))["shown"]
    wrong = [(c, s) for c, s in zip(cases, first) if s.strip() and not exact(s, c.truth)][:4]
    right = [(c, s) for c, s in zip(cases, first) if s.strip() and exact(s, c.truth)][:4]
    for tag, group in (("right", right), ("wrong", wrong)):
        for c, s in group:
            print(f"  {tag}: {c.doc.uri.rsplit('/', 1)[-1]}: typed {c.typed!r}|, shown {s!r}, the line goes on {c.truth!r}")
