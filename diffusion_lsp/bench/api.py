"""`diffusion-lsp bench api`: load and fault figures for `serve-api`, against a server it starts
(or `--url`, one already running). Prints; asserts nothing.

- Load: at each concurrency, that many clients send fill requests back to back for `--seconds`
  (prefixes and suffixes cut at fixed positions of this package's own source files): requests/s,
  tokens/s, p50/p95 latency, 429s, errors (5xx and failed connections), the mean batch the worker
  decoded each fill in (from /metrics: the mean rows of the steps that decoded it) and the occupancy
  (that over --max-batch), and the peak RSS of the server and its worker, side by side, with the
  batching gain over concurrency 1 and the goals (at 16: >= 3x the requests/s of 1 with p95 <= 4x;
  no 5xx). With continuous batching (fills join a running batch between steps, and leave it when
  done) and with static batching (a batch decodes to its end, `--static-batching`), one server
  each, then the two side by side.
- Soak (`--soak SECONDS`): concurrency 16 for that long, RSS sampled every 5 s: first, peak, last
  and the slope (MB per minute, least squares).
- Faults: malformed, binary and oversized bodies, wrong types, unknown fields, a client that
  disconnects mid-stream, and the worker killed mid-batch: what each was answered, and whether
  the server then still answers (api_faults.py).
- The engine alone: the same requests decoded in this process, batch 1 and batch 16, no HTTP and no
  worker: the batching gain the hardware allows, to read the server's against."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from .. import jsonout
from ..workspace_files import check_file, output_path, write_file
from ..server.stats import percentile
from ..worker.wire import source_folders
from .api_faults import faults, print_faults

GOAL_GAIN, GOAL_P95_RATIO, GOAL_AT = 3.0, 4.0, 16


def register(bench) -> None:
    p = bench.add_parser("api", help="serve-api under load and faults: requests/s, tokens/s, latency, RSS")
    p.add_argument("--concurrency", default="1,4,16,64", help="concurrency levels, comma-separated (default 1,4,16,64)")
    p.add_argument("--seconds", type=float, default=15.0, help="seconds per level (default 15)")
    p.add_argument("--max-tokens", type=int, default=16, help="max_tokens of each request (default 16)")
    p.add_argument("--model", help="checkpoint folder for the server it starts (default: the embedded model)")
    p.add_argument("--max-batch", type=int, default=16, help="the server's --max-batch (default 16)")
    p.add_argument("--max-in-flight", type=int, default=64, help="the server's --max-in-flight (default 64)")
    p.add_argument("--batching", default="continuous,static",
                   help="the batching of the servers it starts, comma-separated: continuous, static (default both, "
                        "side by side)")
    p.add_argument("--url", help="bench a server already running at this base URL (no RSS figures, no worker kill)")
    p.add_argument("--soak", type=float, default=0.0, metavar="SECONDS", help="then run concurrency 16 this long")
    p.add_argument("--no-faults", action="store_true", help="skip the fault checks")
    p.add_argument("--no-engine", action="store_true",
                   help="skip the engine alone (in this process, no HTTP): its own gain from batch 1 to 16")
    p.add_argument("--json", metavar="OUT", type=output_path, help="also write the figures as JSON")
    p.set_defaults(run=run)


# ---- the server and the workload ----

class Server:
    """serve-api in a subprocess on a free port of 127.0.0.1."""

    def __init__(self, args, static: bool = False):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.base = f"http://127.0.0.1:{self.port}"
        self.tmp = tempfile.TemporaryDirectory(prefix="dlsp-bench-api-")
        folder = Path(self.tmp.name)
        folder.chmod(0o700)
        cmd = [sys.executable, "-m", "diffusion_lsp", "serve-api", "--port", str(self.port), "--log-level", "warning",
               "--worker-socket", str(folder / "worker.sock"), "--max-batch", str(args.max_batch),
               "--max-in-flight", str(args.max_in_flight)]
        cmd += ["--model", args.model] if args.model else []
        cmd += ["--static-batching"] if static else []
        self.log = open(folder / "server.log", "wb")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)

    def close(self) -> None:
        stop(self.proc)
        self.log.close()
        self.tmp.cleanup()


def stop(proc: subprocess.Popen, wait_s: float = 15.0) -> None:
    """Ask a server to stop (SIGINT: uvicorn shuts down gracefully), then kill it."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()


def rss_mb(pid: int | None) -> float:
    if not pid:
        return 0.0
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def workload_files() -> list[Path]:
    """The package's source files over 2 KB, the model's and the kernels' included wherever they live."""
    return sorted(p for folder in source_folders() for p in folder.rglob("*.py") if p.stat().st_size > 2000)


def workload(n: int = 200, seed: int = 0) -> list[dict]:
    """Fill requests cut at fixed positions of this package's own source files."""
    files = workload_files()
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        text = rng.choice(files).read_text()
        lines = text.split("\n")
        i = rng.randrange(5, len(lines) - 5)
        col = len(lines[i]) - len(lines[i].lstrip())
        before = "\n".join(lines[:i]) + "\n" + lines[i][:col]
        after = lines[i][col:] if rng.random() < 0.3 else ""
        out.append({"prompt": before[-1500:], "suffix": (after + "\n" + "\n".join(lines[i + 1:]))[:500]})
    return out


async def _health(http, base: str, wait_s: float = 180.0) -> dict:
    deadline = time.monotonic() + wait_s
    while True:
        try:
            r = await http.get(base + "/health")
            if r.status_code == 200:
                return r.json()
        except Exception:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{base} did not get ready in {wait_s:.0f} s")
        await asyncio.sleep(0.2)


async def _batch_stats(http, base: str) -> tuple[float, float]:
    """(sum, count) of the batch-size histogram."""
    text = (await http.get(base + "/metrics")).text
    values = {}
    for line in text.splitlines():
        for name in ("diffusion_lsp_api_batch_size_sum", "diffusion_lsp_api_batch_size_count"):
            if line.startswith(name + " "):
                values[name] = float(line.split()[1])
    return values.get("diffusion_lsp_api_batch_size_sum", 0.0), values.get("diffusion_lsp_api_batch_size_count", 0.0)


# ---- load ----

async def level(http, base: str, concurrency: int, seconds: float, max_tokens: int, requests: list[dict],
                pids: list[int]) -> dict:
    lat, statuses, tokens = [], {}, 0
    errors = 0
    stop_at = time.monotonic() + seconds
    peak = 0.0
    s0, c0 = await _batch_stats(http, base)

    async def client(k: int) -> None:
        nonlocal tokens, errors
        i = k
        while time.monotonic() < stop_at:
            body = {**requests[i % len(requests)], "max_tokens": max_tokens, "model": "diffusion-lsp"}
            i += concurrency
            t0 = time.perf_counter()
            try:
                r = await http.post(base + "/v1/completions", json=body)
            except Exception:
                errors += 1
                continue
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            if r.status_code == 200:
                lat.append((time.perf_counter() - t0) * 1e3)
                tokens += r.json()["usage"]["completion_tokens"]
            elif r.status_code == 429:
                await asyncio.sleep(float(r.headers.get("retry-after", "1")))

    async def sample() -> None:
        nonlocal peak
        while time.monotonic() < stop_at:
            peak = max(peak, sum(rss_mb(p) for p in pids))
            await asyncio.sleep(0.25)

    t0 = time.monotonic()
    await asyncio.gather(sample(), *(client(k) for k in range(concurrency)))
    wall = time.monotonic() - t0
    s1, c1 = await _batch_stats(http, base)
    ok = statuses.get(200, 0)
    return {"concurrency": concurrency, "seconds": wall, "ok": ok, "rps": ok / wall, "tokens_s": tokens / wall,
            "p50_ms": percentile(lat, 50), "p95_ms": percentile(lat, 95), "429": statuses.get(429, 0),
            "5xx": sum(n for s, n in statuses.items() if s >= 500), "errors": errors + sum(
                n for s, n in statuses.items() if 400 <= s < 500 and s != 429),
            "mean_batch": (s1 - s0) / (c1 - c0) if c1 > c0 else None, "peak_rss_mb": peak or None}


def print_load(rows: list[dict], max_batch: int) -> None:
    base = rows[0]
    print(f"{'concurrency':>11}{'req/s':>8}{'tok/s':>8}{'p50 ms':>8}{'p95 ms':>8}{'429s':>6}{'5xx':>5}{'errors':>7}"
          f"{'batch':>7}{'occup.':>8}{'peak RSS MB':>13}{'gain':>7}")
    for r in rows:
        gain = r["rps"] / base["rps"] if base["rps"] else float("nan")
        batch = f"{r['mean_batch']:.1f}" if r["mean_batch"] else "-"
        occupancy = f"{r['mean_batch'] / max_batch:.0%}" if r["mean_batch"] else "-"
        rss = f"{r['peak_rss_mb']:.0f}" if r["peak_rss_mb"] else "-"
        print(f"{r['concurrency']:>11}{r['rps']:>8.1f}{r['tokens_s']:>8.0f}{r['p50_ms'] or 0:>8.0f}"
              f"{r['p95_ms'] or 0:>8.0f}"
              f"{r['429']:>6}{r['5xx']:>5}{r['errors']:>7}{batch:>7}{occupancy:>8}{rss:>13}{gain:>6.2f}x")
    at = next((r for r in rows if r["concurrency"] == GOAL_AT), None)
    if at and base["rps"] and base["p95_ms"]:
        gain, ratio = at["rps"] / base["rps"], at["p95_ms"] / base["p95_ms"]
        print(f"goal: at concurrency {GOAL_AT}, requests/s >= {GOAL_GAIN:g}x concurrency 1: {gain:.2f}x "
              f"({'met' if gain >= GOAL_GAIN else 'MISSED'}); p95 <= {GOAL_P95_RATIO:g}x: {ratio:.2f}x "
              f"({'met' if ratio <= GOAL_P95_RATIO else 'MISSED'})")
    total_5xx = sum(r["5xx"] for r in rows)
    print(f"goal: no 5xx under load: {total_5xx} ({'met' if total_5xx == 0 else 'MISSED'})")


# ---- soak ----

async def soak(http, base: str, seconds: float, max_tokens: int, requests: list[dict], pids: list[int]) -> dict:
    samples: list[tuple[float, float]] = []
    stop_at = time.monotonic() + seconds
    t_start = time.monotonic()
    done = {"ok": 0, "5xx": 0}

    async def client(k: int) -> None:
        i = k
        while time.monotonic() < stop_at:
            body = {**requests[i % len(requests)], "max_tokens": max_tokens}
            i += GOAL_AT
            try:
                r = await http.post(base + "/v1/completions", json=body)
                key = "ok" if r.status_code == 200 else "5xx" if r.status_code >= 500 else "other"
                done[key] = done.get(key, 0) + 1
            except Exception:
                done["5xx"] += 1

    async def sample() -> None:
        while time.monotonic() < stop_at:
            samples.append((time.monotonic() - t_start, sum(rss_mb(p) for p in pids)))
            await asyncio.sleep(5.0)

    await asyncio.gather(sample(), *(client(k) for k in range(GOAL_AT)))
    xs, ys = [s[0] for s in samples], [s[1] for s in samples]
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    var = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var * 60 if var else 0.0
    return {"seconds": seconds, "first_mb": ys[0], "peak_mb": max(ys), "last_mb": ys[-1], "slope_mb_min": slope,
            "samples": n, **done}


def print_batching(by_mode: dict[str, list[dict]], max_batch: int) -> None:
    """Continuous beside static batching, level by level."""
    cont, stat = by_mode["continuous"], by_mode["static"]
    print(f"continuous vs static batching (--max-batch {max_batch}):")
    print(f"{'concurrency':>11}{'req/s static':>14}{'continuous':>12}{'gain':>7}{'p95 static':>12}{'continuous':>12}"
          f"{'occup. static':>15}{'continuous':>12}")
    for c, s in zip(cont, stat):
        gain = c["rps"] / s["rps"] if s["rps"] else float("nan")
        occ = [f"{r['mean_batch'] / max_batch:.0%}" if r["mean_batch"] else "-" for r in (s, c)]
        print(f"{c['concurrency']:>11}{s['rps']:>14.1f}{c['rps']:>12.1f}{gain:>6.2f}x{s['p95_ms'] or 0:>12.0f}"
              f"{c['p95_ms'] or 0:>12.0f}{occ[0]:>15}{occ[1]:>12}")


async def main(args) -> dict:
    import httpx

    levels = [int(c) for c in args.concurrency.split(",") if c.strip()]
    modes = ["as it runs"] if args.url else [m.strip() for m in args.batching.split(",") if m.strip()]
    if not modes or any(m not in ("continuous", "static", "as it runs") for m in modes):
        raise ValueError(f"--batching {args.batching!r}: continuous, static or both")
    limits = httpx.Limits(max_connections=max(levels + [GOAL_AT]) + 8, max_keepalive_connections=max(levels) + 8)
    out: dict = {"load": {}}
    for k, mode in enumerate(modes):
        first = k == 0  # the soak and the faults run on the first server only
        server = None if args.url else Server(args, static=mode == "static")
        base = args.url.rstrip("/") if args.url else server.base
        if base.endswith("/v1"):
            base = base[:-3]
        try:
            async with httpx.AsyncClient(timeout=60, limits=limits) as http:
                health = await _health(http, base)
                pids = [server.proc.pid, health["worker"]["pid"]] if server else []
                requests = workload()
                for body in requests[:4]:  # warm-up
                    await http.post(base + "/v1/completions", json={**body, "max_tokens": args.max_tokens})
                rows = []
                for c in levels:
                    rows.append(await level(http, base, c, args.seconds, args.max_tokens, requests, pids))
                out["load"][mode] = rows
                print(f"serve-api at {base}, {mode} batching: {args.seconds:g} s per level, max_tokens "
                      f"{args.max_tokens}, {os.cpu_count()} CPUs")
                print_load(rows, args.max_batch)
                if first and args.soak:
                    out["soak"] = s = await soak(http, base, args.soak, args.max_tokens, requests, pids)
                    print(f"soak: concurrency {GOAL_AT} for {s['seconds']:.0f} s, {s['ok']} answered, {s['5xx']} 5xx; "
                          f"RSS first {s['first_mb']:.0f} MB, peak {s['peak_mb']:.0f}, last {s['last_mb']:.0f}, "
                          f"slope {s['slope_mb_min']:+.2f} MB/min over {s['samples']} samples")
                if first and not args.no_faults:
                    out["faults"] = f = await faults(http, base, kill_worker=server is not None)
                    print_faults(f)
                    health = await _health(http, base, 30)
                    print(f"after the faults: /health {health['status']}, worker pid {health['worker']['pid']}")
        finally:
            if server is not None:
                server.close()
    if {"continuous", "static"} <= set(out["load"]):
        print_batching(out["load"], args.max_batch)
    return out


def engine_alone(model: str | None, max_tokens: int, seconds: float = 8.0) -> dict:
    """Requests/s of the engine in process at batch 1 and batch GOAL_AT (no HTTP, no worker)."""
    from ..engine import load_engine
    from ..model.decoding.canvas import CanvasRequest
    from ..protocol.settings import LaunchSettings

    engine = load_engine(LaunchSettings(path=model))
    requests = workload()
    out = {}
    for batch in (1, GOAL_AT):
        engine.fill([CanvasRequest(r["prompt"], r["suffix"], max_tokens) for r in requests[:batch]])  # warm-up
        done, t0, i = 0, time.perf_counter(), 0
        while time.perf_counter() - t0 < seconds:
            rows = [requests[(i + k) % len(requests)] for k in range(batch)]
            engine.fill([CanvasRequest(r["prompt"], r["suffix"], max_tokens) for r in rows])
            done, i = done + batch, i + batch
        out[batch] = done / (time.perf_counter() - t0)
    print(f"engine alone (in process, no HTTP, no worker): batch 1 {out[1]:.1f} req/s, batch {GOAL_AT} "
          f"{out[GOAL_AT]:.1f} req/s: {out[GOAL_AT] / out[1]:.2f}x")
    return {"batch_1_rps": out[1], f"batch_{GOAL_AT}_rps": out[GOAL_AT], "gain": out[GOAL_AT] / out[1]}


def run(args) -> int:
    if args.json:  # refused before the run
        check_file(args.json, "--json")
    out = asyncio.run(main(args))
    if not args.no_engine and not args.url:
        out["engine"] = engine_alone(args.model, args.max_tokens)
    if args.json:
        write_file(args.json, jsonout.dumps(out, indent=2), "--json")
    return 0
