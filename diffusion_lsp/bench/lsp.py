"""`diffusion-lsp bench lsp`: inline-completion latency through the real server over stdio.

Replays a typing session (replay.py) over real code: a real file (by default a CPython test module,
code the embedded model was not trained on; `--file` replaces it), a 5,000-line file of stdlib
modules, and that file again while 30 other large documents are open (`--open-docs`), some of them
edited between the replay's sites. For each kind of request it prints p50/p95 of the end-to-end
latency the client saw, the model's time (the worker's own figure) and the server's overhead
(tree-sitter, context, post-processing: the server's time minus waiting for the worker), from the
per-request timings of `diffusionLsp/stats`, with the goals beside them; and what the user saw:
the share of requests with a suggestion, and the edit similarity to the real line of what was
typed plus the suggestion's first line (what accepting it gives). `--typing-seconds` instead types
for that long with a completion and a next edit after each key (typing_load.py), and prints their
latency and the server's and worker's memory, beside a `--baseline` tree's. Prints figures; asserts
nothing."""

from __future__ import annotations

import asyncio
import random
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from .. import engine
from ..errors import UserError
from ..input_files import InputFile
from ..protocol.settings import LaunchSettings
from ..options import add_launch_args, launch_settings
from .figures import MODEL_ROWS, print_figures, summarise
from .next_edit import find_sites, print_next_edits
from .next_edit import replay as replay_next_edits
from .replay import Crowd, replay
from ..data.workload import BIG_LINES, big_file, open_documents, workload_files

OPEN_DOCS = 30  # within the 32 other open documents the server hands the cross-file context
OPEN_DOCS_REQUESTS = 100  # the crowded replay's default at most: it keeps the whole default run short
EDITED_DOCS = 10  # of the open documents, those edited during the replay; the others' indexes stay valid


def register(bench) -> None:
    p = bench.add_parser("lsp", help="inline-completion latency through the real server over stdio",
                         description="Inline-completion latency through the real language server over stdio: "
                                     "a typing session replayed over real code, with p50/p95 of where the time "
                                     "goes and what the user would have seen. Prints figures; asserts nothing.")
    p.add_argument("--file", metavar="PATH", type=InputFile, help="Python file to type in (default: a CPython test module); "
                   f"a {BIG_LINES:,}-line file of stdlib modules is replayed after it, alone and with others open")
    p.add_argument("--requests", type=int, default=200, help="completion requests per file (default 200)")
    p.add_argument("--chars", type=int, default=6,
                   help="characters typed into each body, one request each (default 6)")
    p.add_argument("--context", type=int, default=512, help="context tokens (completion.maxContextTokens)")
    p.add_argument("--open-docs", type=int, default=OPEN_DOCS, metavar="N",
                   help=f"other large documents open during the last replay (default {OPEN_DOCS}; 0: no such replay)")
    p.add_argument("--open-docs-requests", type=int, metavar="N",
                   help=f"requests of that replay (default: --requests, at most {OPEN_DOCS_REQUESTS})")
    p.add_argument("--next-edits", type=int, default=30, metavar="N",
                   help="next-edit sites in the first file, each asked in both decoding modes (default 30; 0: none)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-drafts", action="store_true",
                   help="completion.drafts off: no drafts from the file verified before a fill (compare the runs)")
    p.add_argument("--typing-seconds", type=float, default=0, metavar="S",
                   help=f"instead of the replays: type into the {BIG_LINES:,}-line file for S seconds with --open-docs "
                        "others open, a completion and a next edit awaited after each key; prints their p50/p95 "
                        "and the server's and worker's memory at the start and the end (0: off)")
    p.add_argument("--key-ms", type=float, default=30.0, metavar="MS",
                   help="with --typing-seconds: at most one key per MS milliseconds (default 30)")
    p.add_argument("--baseline", metavar="DIR",
                   help="with --typing-seconds: the same session first against the server of the source tree DIR "
                        "(e.g. a `git worktree` of an older commit), printed side by side")
    add_launch_args(p)  # the worker's: serve --model/--device, model.threads/model.precision
    p.set_defaults(run=run)


@dataclass
class Scenario:
    """One replay: type in `text` under `uri`, with a crowd of other documents open or not."""

    title: str
    uri: str
    text: str
    requests: int
    crowd: Crowd | None = None
    big: bool = False  # the big file: the server-overhead goal applies


def _check_model(path: str | None) -> None:
    folder = Path(path) if path else engine.DEFAULT_MODEL
    if not (folder / "config.json").is_file():
        what = "the embedded default model is missing" if path is None else "no checkpoint at"
        raise UserError(f"{what} {folder} (no config.json); pass --model DIR, e.g. runs/NAME/checkpoint")


def _default_file() -> Path:
    files = workload_files()
    if not files:
        raise UserError("no workload files in the Python standard library; pass --file PATH")
    return files[0]


def scenarios(args) -> list[Scenario]:
    file = args.file or InputFile(str(_default_file()))
    text = file.read_text().replace("\r\n", "\n")  # Refused names the file: no FIFO, no device, bounded
    big = big_file()
    out = [Scenario(f"{file} ({text.count(chr(10)):,} lines)", "file:///bench/" + file.name, text, args.requests),
           Scenario(f"{BIG_LINES:,} lines of stdlib modules ({big.count(chr(10)):,} lines)",
                    "file:///bench/stdlib_5000.py", big, args.requests, big=True)]
    docs = open_documents(args.open_docs)
    if docs:
        crowd = Crowd(dict(docs), edited=min(EDITED_DOCS, len(docs)))
        requests = args.open_docs_requests or min(args.requests, OPEN_DOCS_REQUESTS)
        out.append(Scenario(f"{BIG_LINES:,} lines of stdlib modules while {len(docs)} large documents open "
                            f"({big.count(chr(10)):,} lines; {crowd.lines:,} in the others)",
                            "file:///bench/busy/stdlib_5000.py", big, requests, crowd, big=True))
    return out


def run(args) -> int:
    if (args.requests < 1 or args.chars < 0 or args.open_docs < 0 or (args.open_docs_requests or 1) < 1
            or args.next_edits < 0):
        raise UserError("--requests and --open-docs-requests must be at least 1, --chars, --open-docs and "
                        "--next-edits at least 0")
    launch = launch_settings(args)
    _check_model(launch.path)
    if args.typing_seconds:
        return asyncio.run(_typing(args, launch))
    return asyncio.run(_run(args, launch, scenarios(args)))


async def _typing(args, launch: LaunchSettings) -> int:
    """`--typing-seconds`: the typing session, against the baseline's server first if one is given."""
    from .lsp_client import BenchClient  # pygls and lsprotocol: kept off --help
    from .typing_load import print_sessions, server_command, type_for

    baseline = Path(args.baseline) if args.baseline else None
    if baseline is not None and not (baseline / "diffusion_lsp" / "__init__.py").is_file():
        raise UserError(f"--baseline {baseline}: not a source tree (no diffusion_lsp/__init__.py in it)")
    if not (args.typing_seconds > 0 and args.key_ms >= 0):
        raise UserError("--typing-seconds must be positive and --key-ms at least 0")
    big, docs, sessions = big_file(), open_documents(args.open_docs), {}
    for name, tree in ([(f"baseline {baseline}", baseline)] if baseline else []) + [("this tree", None)]:
        with tempfile.TemporaryDirectory(prefix="diffusion-lsp-bench-", ignore_cleanup_errors=True) as tmp:
            cmd, options = server_launch(launch, args.context, Path(tmp) / "worker.sock", drafts=not args.no_drafts)
            async with BenchClient(server_command(cmd, tree), {**options, "nextEdit": {"enable": True}}) as lsp:
                await lsp.wait_for_model()
                crowd = Crowd(dict(docs), edited=min(EDITED_DOCS, len(docs))) if docs else None
                sessions[name] = await type_for(lsp, "file:///bench/typing/stdlib_5000.py", big, crowd,
                                                args.typing_seconds, args.key_ms, random.Random(args.seed))
    print_sessions(f"typing for {args.typing_seconds:g} s at most a key per {args.key_ms:g} ms into "
                   f"{BIG_LINES:,} lines of stdlib modules, {len(docs)} other documents open, next edits on", sessions)
    return 0


def print_drafts(before: dict, after: dict) -> None:
    """The drafts verified between two `diffusionLsp/stats` counts, and the fills' forwards per token."""
    d = {k: after[k] - before[k] for k in ("drafts_offered", "drafts_whole", "drafts_part", "drafts_rejected",
                                           "forwards", "fill_tokens")}
    per_token = f"{d['forwards'] / d['fill_tokens']:.2f}" if d["fill_tokens"] else "-"
    print(f"  drafts: {d['drafts_offered']} fills given drafts: {d['drafts_whole']} kept whole, {d['drafts_part']} "
          f"in part, {d['drafts_rejected']} rejected; forwards per token written {per_token} "
          f"({d['forwards']} forwards, {d['fill_tokens']} tokens)")


def print_acceptance(before: dict, after: dict) -> None:
    """What the acceptance model decided between two `diffusionLsp/stats` reports."""
    judged = after["counts"]["judged"] - before["counts"]["judged"]
    if not judged:
        print(f"  acceptance: {after['acceptance']['model'] or 'none'}")
        return
    shown = after["counts"]["judged_shown"] - before["counts"]["judged_shown"]
    won = {k: v - before["acceptance"]["won"].get(k, 0) for k, v in after["acceptance"]["won"].items()}
    mean = after["acceptance"]["mean_p_shown"]
    print(f"  acceptance: shown {shown} of {judged} judged ({shown / judged:.0%}); mean P of what is shown "
          f"{'-' if mean is None else f'{mean:.2f}'} (the session's); won: "
          + (", ".join(f"{k} {v}" for k, v in sorted(won.items()) if v) or "none"))


def _print_header(launch: LaunchSettings, args, worker: dict, ready_s: float) -> None:
    print(f"model: {launch.path or 'embedded default'}  device: {launch.device}  "
          f"threads: {launch.threads or 'default'}  precision: {launch.precision}  worker pid {worker['pid']} "
          f"ready in {ready_s:.1f} s  context: {args.context} tokens  requests per file: {args.requests}")
    print("Times are in ms. The columns: model is the worker's fill time; server overhead is the server's own "
          "work (cache, tree-sitter and context, post-processing); ipc is the worker socket and queue; lsp is "
          "JSON-RPC, document sync and the handler around the completer.")


def server_launch(launch: LaunchSettings, context: int, socket: Path, drafts: bool = True) -> tuple[list[str], dict]:
    """The `serve` command line and initializationOptions that start the server with these launch
    settings (--model and --device on its command line, model.threads and model.precision in its
    settings), no debounce, the model's next edits on whatever it claims (they are measured; a rename's
    sites are not followed here: `bench renames` measures that), and a worker of its own that exits
    with it."""
    cmd = [sys.executable, "-m", "diffusion_lsp", "serve", "--device", launch.device, "--worker-socket", str(socket)]
    options = {"completion": {"maxContextTokens": context, "debounceMs": 0, "drafts": drafts},
               "worker": {"idleExitS": 0},
               "model": {"threads": launch.threads, "precision": launch.precision},
               "nextEdit": {"enable": True, "follow": False, "acceptance": False}}  # the model's
    # decoding modes, as the model edits (bench renames: the rename's sites; eval edits: what is shown)
    return cmd + (["--model", launch.path] if launch.path else []), options


async def _run(args, launch: LaunchSettings, plays: list[Scenario]) -> int:
    from .lsp_client import BenchClient  # pygls and lsprotocol: kept off --help

    with tempfile.TemporaryDirectory(prefix="diffusion-lsp-bench-", ignore_cleanup_errors=True) as tmp:
        cmd, options = server_launch(launch, args.context, Path(tmp) / "worker.sock", drafts=not args.no_drafts)
        t0 = time.perf_counter()
        async with BenchClient(cmd, options) as lsp:
            worker = await lsp.wait_for_model()
            _print_header(launch, args, worker, time.perf_counter() - t0)
            rng = random.Random(args.seed)
            for play in plays:
                before_all = await lsp.stats()
                before = before_all["counts"]
                if play.crowd is not None:
                    play.crowd.open(lsp)
                samples = await replay(lsp, play.uri, play.text, play.requests, args.chars, rng, play.crowd)
                print_figures(play.title, summarise(samples), big_lines=BIG_LINES if play.big else None)
                after_all = await lsp.stats()
                after = after_all["counts"]
                calls, rejects, reused = (after[k] - before[k] for k in ("model_calls", "parse_rejects",
                                                                          "reused_fills"))
                asked = sum(s.row in MODEL_ROWS for s in samples)
                print(f"  model calls: {calls} for {asked} completions ({rejects} fills broke the parse: "
                      f"re-sampled once, shorter); {reused} started from the document's last fill")
                print_drafts(before, after)
                print_acceptance(before_all, after_all)
                if play.crowd is not None:
                    print(f"  other documents: {len(play.crowd.docs)} open, {play.crowd.edits} edits to "
                          f"{play.crowd.edited_docs} of them between the replay's sites")
                    play.crowd.close(lsp)
            if args.next_edits:
                first = plays[0]
                sites = find_sites(first.text, args.next_edits, random.Random(args.seed))
                records = await replay_next_edits(lsp, first.text, sites, options)
                print_next_edits(f"next edits: {len(sites)} renames in {first.title}, each mode on the same sites",
                                 records)
    return 0
