"""`diffusion-lsp bench lsp`: inline-completion latency through the real server over stdio.

Replays a typing session over real code: a real file (by default a CPython test module, code the
embedded model was not trained on; `--file` replaces it) and a 5,000-line file of stdlib modules.
At each block opener picked, the body is removed; the "user" presses Enter (the cursor lands in an
empty body: a multi-line completion), then types the body's first characters one at a time, asking
for a completion after each keystroke (single-line completions), one request at a time as an editor
with no debounce would. For each kind it prints p50/p95 of the end-to-end latency the client saw,
the model's time (the worker's own figure) and the server's overhead (tree-sitter, context,
post-processing: the server's time minus waiting for the worker), from the per-request timings of
`diffusionLsp/stats`, with the goals beside them; and what the user saw: the share of requests
with a suggestion, and the edit similarity to the real line of what was typed plus the
suggestion's first line (what accepting it gives). Prints figures; asserts nothing."""

from __future__ import annotations

import asyncio
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .engine import PRECISIONS
from .errors import UserError

GOAL_P50_MS, GOAL_P95_MS, GOAL_OVERHEAD_MS = 100.0, 250.0, 5.0  # single-line latency; overhead on 5,000 lines
BIG_LINES = 5000
_OPENER = re.compile(r"\s*(async\s+)?(def|class|if|elif|else|for|while|with|try|except|finally)\b.*:\s*(#.*)?$")


def register(bench) -> None:
    p = bench.add_parser("lsp", help="inline-completion latency through the real server over stdio",
                         description=__doc__.splitlines()[0])
    p.add_argument("--model", metavar="DIR", help="checkpoint folder (default: the embedded model)")
    p.add_argument("--file", metavar="PATH", help="Python file to type in (default: a CPython test module); "
                   f"a {BIG_LINES:,}-line file of stdlib modules is replayed after it")
    p.add_argument("--requests", type=int, default=200, help="completion requests per file (default 200)")
    p.add_argument("--chars", type=int, default=6,
                   help="characters typed into each body, one request each (default 6)")
    p.add_argument("--context", type=int, default=512, help="context tokens (completion.maxContextTokens)")
    p.add_argument("--device", default="auto")
    p.add_argument("--threads", type=int, help="the worker's torch threads (model.threads; default: torch's)")
    p.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="the worker's weights (model.precision; auto: int8 on CPU)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(run=run)


# ---- the typing session, without LSP ----

@dataclass(frozen=True)
class Site:
    """A block opener whose body the replay removes and then types again."""

    line: int  # the opener's line (0-based)
    last: int  # the body's last non-blank line
    indent: str  # the first body line's indentation
    first: str  # the first body line, without it


def _indent(line: str) -> str:
    return line[: len(line) - len(line.lstrip())]


def find_sites(lines: list[str]) -> list[Site]:
    """Block openers (`def`, `if`, `for`, ... ending with ":") followed by an indented body."""
    sites = []
    for i, line in enumerate(lines):
        if not _OPENER.match(line):
            continue
        width, last = len(_indent(line).expandtabs(4)), None
        for j in range(i + 1, len(lines)):
            if lines[j].strip():
                if len(_indent(lines[j]).expandtabs(4)) <= width:
                    break
                last = j
        if last is not None:
            first = next(lines[j] for j in range(i + 1, last + 1) if lines[j].strip())
            sites.append(Site(i, last, _indent(first), first.strip()))
    return sites


def big_file(lines: int = BIG_LINES) -> str:
    from .context.bench import big_file

    return big_file(lines)


def default_file() -> Path:
    from .bench import workload_files

    files = workload_files()
    if not files:
        raise UserError("no workload files in the Python standard library; pass --file PATH")
    return files[0]


# ---- figures ----

@dataclass
class Sample:
    e2e_ms: float  # request sent -> answer received, on the client
    timing: dict | None  # the server's Timing for it (diffusion_lsp.server.stats)
    shown: str = ""  # the suggestion's text ("" for none)
    typed: str = ""  # what the user had typed of the line
    line: str = ""  # the line the user goes on to type (stripped)

    @property
    def similarity(self) -> float:
        """Edit similarity of what the line would be with the suggestion's first line accepted."""
        from .evals.heldout import edit_similarity

        return edit_similarity(self.typed + self.shown.split("\n", 1)[0], self.line)

    @property
    def row(self) -> str:
        t = self.timing
        if t is None or t["source"] == "none":
            return "no model call"
        if t["source"] == "cache":
            return "cache hits"
        return "multi-line" if t["kind"] == "block" else "single-line"


ROWS = ("single-line", "multi-line", "cache hits", "no model call")
MODEL_ROWS = ROWS[:2]


def _pct(values: list[float], q: int) -> float | None:
    from .server.stats import percentile

    return percentile(values, q)


def summarise(samples: list[Sample]) -> dict[str, dict[str, float | None]]:
    """Row -> n and p50/p95 (ms) of: e2e; model (the worker's fill time); overhead (the server's own
    work: cache, context, post-processing); context; post; ipc (the worker socket and queue); lsp
    (JSON-RPC, document sync and the handler around the completer)."""
    out = {}
    for row in ROWS:
        mine = [s for s in samples if s.row == row]
        if not mine:
            continue
        t = [s.timing or {} for s in mine]
        total = [x.get("total_ms", 0.0) for x in t]
        series = {"e2e": [s.e2e_ms for s in mine], "model": [x.get("worker_ms", 0.0) for x in t],
                  "overhead": [tt - x.get("model_ms", 0.0) - x.get("wait_ms", 0.0) for tt, x in zip(total, t)],
                  "context": [x.get("context_ms", 0.0) for x in t], "post": [x.get("post_ms", 0.0) for x in t],
                  "ipc": [x.get("model_ms", 0.0) - x.get("worker_ms", 0.0) for x in t],
                  "lsp": [s.e2e_ms - tt for s, tt in zip(mine, total)]}
        if row not in MODEL_ROWS:  # no context, model or post-processing to measure
            series = {k: v for k, v in series.items() if k in ("e2e", "overhead", "lsp")}
        figures = {"n": len(mine), "shown": sum(bool(s.shown.strip()) for s in mine) / len(mine),
                   "similarity": sum(s.similarity for s in mine) / len(mine)}
        for name in ("e2e", "model", "overhead", "context", "post", "ipc", "lsp"):
            values = series.get(name, [])
            figures[f"{name}50"], figures[f"{name}95"] = _pct(values, 50), _pct(values, 95)
        out[row] = figures
    return out


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def _goal(value: float | None, goal: float) -> str:
    return f"{_ms(value)} ms (goal <= {goal:g}: {'n/a' if value is None else 'met' if value <= goal else 'missed'})"


def print_figures(name: str, n_lines: int, rows: dict, big: bool) -> None:
    columns = [("e2e", 50), ("e2e", 95), ("model", 50), ("model", 95), ("overhead", 50), ("overhead", 95),
               ("context", 95), ("post", 95), ("ipc", 50), ("lsp", 50)]
    print(f"\n{name} ({n_lines:,} lines)")
    print(f"{'':14}{'n':>5} {'end-to-end':^15} {'model':^15} {'server overhead':^15}"
          f" {'context':>7} {'post':>7} {'ipc':>7} {'lsp':>7}")
    print(f"{'':19}" + "".join(f" {'p' + str(q):>7}" for _, q in columns) + "   shown  line sim")
    for row, f in rows.items():
        print(f"{row:14}{f['n']:>5}" + "".join(f" {_ms(f[f'{c}{q}']):>7}" for c, q in columns)
              + f" {f['shown']:>7.0%} {f['similarity']:>9.1%}")
    single = rows.get("single-line", {})
    print(f"  goals: single-line p50 {_goal(single.get('e2e50'), GOAL_P50_MS)}, "
          f"p95 {_goal(single.get('e2e95'), GOAL_P95_MS)}")
    if big:
        model_rows = [f for r, f in rows.items() if r in MODEL_ROWS]
        worst = max((f["overhead95"] for f in model_rows), default=None)
        print(f"  goal on the {BIG_LINES:,}-line file: server overhead p95 {_goal(worst, GOAL_OVERHEAD_MS)}")


# ---- the run ----

def _check_model(model: str | None) -> None:
    from . import engine

    folder = Path(model) if model else engine.DEFAULT_MODEL
    if not (folder / "config.json").is_file():
        what = "the embedded default model is missing" if model is None else "no checkpoint at"
        raise UserError(f"{what} {folder} (no config.json); pass --model DIR, e.g. runs/NAME/checkpoint")


async def replay(lsp, uri: str, text: str, args, rng: random.Random) -> list[Sample]:
    """Type at block openers until `args.requests` requests were answered; see the module doc."""
    lines = text.split("\n")
    sites = find_sites(lines)
    rng.shuffle(sites)
    lsp.open(uri, text)
    samples: list[Sample] = []
    seq = (await lsp.stats())["counts"]["requests"]  # the server numbers requests: ours are seq + 1, ...
    for site in sites:
        if len(samples) >= args.requests:
            break
        opener, end = lines[site.line], lines[site.last]
        lsp.change(uri, (site.line, opener), (site.last, end), "")  # the body is gone
        typed = site.indent
        lsp.change(uri, (site.line, opener), (site.line, opener), "\n" + typed)  # Enter, auto-indented
        answers = [(await lsp.complete(uri, site.line + 1, typed), "")]
        for ch in site.first[: max(0, min(args.chars, args.requests - len(samples) - 1))]:
            lsp.change(uri, (site.line + 1, typed), (site.line + 1, typed), ch)
            typed += ch
            answers.append((await lsp.complete(uri, site.line + 1, typed), typed[len(site.indent):]))
        lsp.replace_all(uri, text)
        report = await lsp.stats()
        timings = {t["seq"]: t for t in report["timings"]}
        samples += [Sample(ms, timings.get(seq + 1 + i), shown, before, site.first)
                    for i, ((ms, shown), before) in enumerate(answers)]
        seq = report["counts"]["requests"]
    lsp.close(uri)
    return samples


def run(args) -> int:
    if args.requests < 1 or args.chars < 0:
        raise UserError("--requests must be at least 1 and --chars at least 0")
    _check_model(args.model)
    path = Path(args.file) if args.file else default_file()
    try:
        text = path.read_text(encoding="utf-8").replace("\r\n", "\n")
    except (OSError, UnicodeDecodeError) as e:
        raise UserError(f"cannot read {path}: {e}") from None
    files = [(str(path), "file:///bench/" + path.name, text),
             (f"{BIG_LINES:,} lines of stdlib modules", "file:///bench/stdlib_5000.py", big_file())]
    return asyncio.run(_run(args, files))


async def _run(args, files: list[tuple[str, str, str]]) -> int:
    from .bench_lsp_client import BenchClient

    options = {"completion": {"maxContextTokens": args.context, "debounceMs": 0}, "worker": {"idleExitS": 0},
               "model": {"threads": args.threads, "precision": args.precision}}
    with tempfile.TemporaryDirectory(prefix="diffusion-lsp-bench-", ignore_cleanup_errors=True) as tmp:
        cmd = [sys.executable, "-m", "diffusion_lsp", "serve", "--device", args.device,
               "--worker-socket", str(Path(tmp) / "worker.sock")] + (["--model", args.model] if args.model else [])
        t0 = time.perf_counter()
        async with BenchClient(cmd, options) as lsp:
            worker = await lsp.wait_for_model()
            print(f"model: {args.model or 'embedded default'}  device: {args.device}  "
                  f"threads: {args.threads or 'default'}  precision: {args.precision}  worker pid {worker['pid']} "
                  f"ready in {time.perf_counter() - t0:.1f} s  context: {args.context} tokens  "
                  f"requests per file: {args.requests}")
            print("ms. model: the worker's fill time; server overhead: the server's own work (cache, tree-sitter "
                  "and context, post-processing); ipc: the worker socket and queue; lsp: JSON-RPC, document sync "
                  "and the handler around the completer")
            rng = random.Random(args.seed)
            for i, (name, uri, text) in enumerate(files):
                before = (await lsp.stats())["counts"]
                samples = await replay(lsp, uri, text, args, rng)
                print_figures(name, text.count("\n"), summarise(samples), big=i == len(files) - 1)
                after = (await lsp.stats())["counts"]
                calls, rejects, reused = (after[k] - before[k] for k in ("model_calls", "parse_rejects",
                                                                          "reused_fills"))
                asked = sum(s.row in MODEL_ROWS for s in samples)
                print(f"  model calls: {calls} for {asked} completions ({rejects} fills broke the parse: "
                      f"re-sampled once, shorter); {reused} started from the document's last fill")
    return 0
