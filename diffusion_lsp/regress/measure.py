"""One `regress` run: the workload replayed through the real language server, several times, each time
in a fresh server (and worker, so no cache carries over), with this machine's speed measured beside it.

Calibration: in this process, before each repetition's server starts and again after each file (the
server idles then), a fixed matmul loop (the model's kind of work, on as many threads as the worker)
and a tree-sitter parse of a fixed 2,000-line file (the server's kind of work) are timed, each the
best of CALIBRATION_TRIES. A latency divided by the run's calibration (the fastest of them all:
compare.py) is a figure that holds across machines of one kind better than milliseconds do: the
model's latencies are read against the matmul, the server's own overhead against the parse. Many
points, because on these 2-vCPU machines the single-threaded parse is bimodal: 16-19 ms or 26-32 ms
in the same process minutes apart (measured over 63 calibrations of 21 runs: the vCPU it lands on is
shared or not), and a run whose three calibrations all read slow judged the server 1.5x faster.

A repetition yields per row (a language, and what the user did: pressed Enter in an empty body, or
typed a character of a line) the raw figures of its requests; figures.py turns repetitions into the
figures compared.
Idle cores are measured by cpus.py."""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..bench import next_edit
from ..bench.figures import Sample
from ..bench.replay import type_at
from ..nextedit.settings import NextEditSettings
from ..protocol.settings import LaunchSettings
from ..server.stats import percentile
from .workload import WorkFile, Workload

CALIBRATION_TRIES = 7
MATMUL_SIZE, MATMUL_LOOPS = 384, 32  # about 30 ms on 2 AVX2 cores: long enough that the best of 7 holds
PARSE_LINES = 2000


@dataclass
class Calibration:
    matmul_ms: float  # MATMUL_LOOPS products of two MATMUL_SIZE square fp32 matrices
    parse_ms: float  # a fresh tree-sitter parse of PARSE_LINES lines of Python


def settle(threads: int, most_s: float = 5.0) -> None:
    """Wait, at most `most_s`, until `threads` cores are idle (measured: idle_cores): the last
    repetition's worker takes a moment to exit, and a calibration beside it reads the machine slow."""
    from ..cpus import idle_cores

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    deadline = time.monotonic() + most_s
    while idle_cores(cores) < min(threads, cores) and time.monotonic() < deadline:  # each check samples 0.2 s
        continue


def calibrate(threads: int) -> Calibration:
    import torch  # the regress command's own process: never the language server's

    from ..context.languages import language_for, parser_for

    torch.set_num_threads(threads)
    g = torch.Generator().manual_seed(0)
    a, b = (torch.randn(MATMUL_SIZE, MATMUL_SIZE, generator=g) for _ in range(2))
    parser = parser_for(language_for("python"))
    source = "".join(f"def f{i}(x, y={i}):\n    return [x * y + k for k in range({i % 7})]\n"
                     for i in range(PARSE_LINES // 2)).encode()

    def best(work) -> float:
        times = []
        for _ in range(CALIBRATION_TRIES):
            t0 = time.perf_counter()
            work()
            times.append((time.perf_counter() - t0) * 1e3)
        return min(times)

    def products():
        c = a
        for _ in range(MATMUL_LOOPS):
            c = torch.mm(c, b) * (1.0 / MATMUL_SIZE)
        return c

    parse = (lambda: parser.parse(source)) if parser is not None else (lambda: None)
    return Calibration(best(products), best(parse) if parser is not None else 0.0)


@dataclass
class RowRaw:
    """One row's requests in one repetition."""

    e2e_ms: list[float] = field(default_factory=list)
    model_ms: list[float] = field(default_factory=list)  # the worker's time, for requests that called it
    overhead_ms: list[float] = field(default_factory=list)  # the server's own work
    shown: list[bool] = field(default_factory=list)
    similarity: list[float] = field(default_factory=list)
    right: list[bool] = field(default_factory=list)  # next edits: the right edit
    wrong: list[bool] = field(default_factory=list)  # next edits: an edit, not the right one


@dataclass
class Repetition:
    calibrations: list[Calibration]  # before the server started, and after each file
    rows: dict[str, RowRaw]  # "python single-line", "python multi-line", "python next edit"
    forwards: dict[str, tuple[int, int]]  # language -> (forwards, tokens written) of its completions' fills
    failed: dict[str, tuple[int, int]]  # language -> (requests the server failed, requests)


def _row(sample: Sample) -> str:
    return "multi-line" if sample.typed == "" else "single-line"


def _add(raw: RowRaw, s: Sample) -> None:
    t = s.timing or {}
    raw.e2e_ms.append(s.e2e_ms)
    if t.get("source") == "model":
        raw.model_ms.append(t.get("worker_ms", 0.0))
    if t:
        raw.overhead_ms.append(t.get("total_ms", 0.0) - t.get("model_ms", 0.0) - t.get("wait_ms", 0.0))
    raw.shown.append(bool(s.shown.strip()))
    raw.similarity.append(s.similarity)


def server_command(launch: LaunchSettings, socket: Path) -> list[str]:
    return [sys.executable, "-m", "diffusion_lsp", "serve", "--worker-socket", str(socket)] + launch.to_argv()


async def repetition(launch: LaunchSettings, settings: dict, workload: Workload, threads: int) -> Repetition:
    from ..bench.lsp_client import BenchClient  # pygls and lsprotocol: kept off --help

    rows: dict[str, RowRaw] = {}
    forwards, failed = {}, {}
    settle(threads)
    cals = [calibrate(threads)]  # before the server: a worker that just loaded still has threads spinning
    with tempfile.TemporaryDirectory(prefix="diffusion-lsp-regress-", ignore_cleanup_errors=True) as tmp:
        async with BenchClient(server_command(launch, Path(tmp) / "worker.sock"), settings) as lsp:
            await lsp.wait_for_model(local=launch.backend == "local")
            for k, f in enumerate(workload.files):
                before = (await lsp.stats())["counts"]
                if f.sites:
                    uri = f"file:///regress/{k}/{f.path}"
                    samples = await type_at(lsp, uri, f.text, list(f.sites), f.requests(workload.chars),
                                            workload.chars, language=f.language)
                    for s in samples:
                        _add(rows.setdefault(f"{f.language} {_row(s)}", RowRaw()), s)
                if f.renames:
                    await _next_edits(lsp, f, settings, rows.setdefault(f"{f.language} next edit", RowRaw()))
                after = (await lsp.stats())["counts"]
                _tally(forwards, f.language, after["forwards"] - before["forwards"],
                       after["fill_tokens"] - before["fill_tokens"])
                _tally(failed, f.language, after["errors"] - before["errors"], after["requests"] - before["requests"])
                cals.append(calibrate(threads))  # the server idles between files
    return Repetition(cals, rows, forwards, failed)


def _tally(into: dict, language: str, a: int, b: int) -> None:
    x, y = into.get(language, (0, 0))
    into[language] = (x + a, y + b)


async def _next_edits(lsp, f: WorkFile, settings: dict, raw: RowRaw) -> None:
    mode = settings.get("nextEdit", {}).get("mode", NextEditSettings().mode)
    records = await next_edit.replay(lsp, f.text, f.rename_sites(), settings, modes=(mode,),
                                     name=f.path.rsplit("/", 1)[-1], language=f.language)
    for r in records[mode]:
        raw.e2e_ms.append(r["ms"])
        raw.model_ms.append(r.get("model_ms", 0.0))
        raw.right.append(bool(r["right"]))
        raw.wrong.append(bool(r["edit"]) and not r["right"])


def run(launch: LaunchSettings, settings: dict, workload: Workload, repeat: int, threads: int) -> list[Repetition]:
    out = []
    for i in range(repeat):
        t0 = time.perf_counter()
        rep = asyncio.run(repetition(launch, settings, workload, threads))
        e2e = [x for r in rep.rows.values() for x in r.e2e_ms]
        print(f"  repetition {i + 1}/{repeat}: {len(e2e)} requests in {time.perf_counter() - t0:.1f} s, e2e p50 "
            f"{percentile(e2e, 50) or 0:.1f} ms; calibration (fastest of {len(rep.calibrations)}) matmul "
            f"{min(c.matmul_ms for c in rep.calibrations):.1f} ms, parse {min(c.parse_ms for c in rep.calibrations):.1f} ms")
        out.append(rep)
    return out
