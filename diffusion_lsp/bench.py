"""`diffusion-lsp bench sampler`: forward passes and milliseconds per span, threshold vs
one-token-per-step decoding, with and without the context cache, and on CPU int8 vs float32
weights, measured side by side in one run. Prints figures and ratios; asserts nothing."""

from __future__ import annotations

import random
import statistics
import sysconfig
import time
from pathlib import Path

from .model.settings import PRECISIONS, LaunchSettings, SamplerConfig
from .errors import UserError

# Real code the embedded model was not trained on: CPython's own test suite (the training corpus
# excludes test/); falls back to library modules where a distribution strips the tests.
WORKLOAD_FILES = ["test/test_heapq.py", "test/test_textwrap.py", "test/test_bisect.py", "test/test_shlex.py",
                  "test/test_fractions.py", "test/test_statistics.py"]
FALLBACK_FILES = ["heapq.py", "textwrap.py", "bisect.py", "shlex.py", "fractions.py", "statistics.py"]
SPAN_LENGTHS = (8, 32, 64)
CONFIGS = [("threshold", True), ("threshold", False), ("one", True), ("one", False)]


def register(sub):
    p = sub.add_parser("bench", help="benchmarks that print figures side by side")
    bench = p.add_subparsers(dest="bench", required=True, metavar="BENCH")
    s = bench.add_parser("sampler", help="forward passes and ms per span: threshold vs one-per-step, cache on/off")
    s.add_argument("--model", metavar="DIR", help="checkpoint folder (default: the embedded model)")
    s.add_argument("--spans", type=int, default=6, help="spans per length (default 6)")
    s.add_argument("--context", type=int, default=256, help="prefix tokens; the suffix gets half (default 256)")
    s.add_argument("--threshold", type=float, default=0.9)
    s.add_argument("--device", default="auto")
    s.add_argument("--precision", choices=PRECISIONS, default="auto",
                   help="weights of the main rows (auto: int8 on CPU); on CPU the other one gets a row too")
    s.add_argument("--seed", type=int, default=0)
    s.set_defaults(run=run)
    from . import bench_lsp

    bench_lsp.register(bench)  # `bench lsp`: latency through the real server


def workload_files() -> list[Path]:
    lib = Path(sysconfig.get_paths()["stdlib"])
    files = [lib / f for f in WORKLOAD_FILES if (lib / f).is_file()]
    return files or [lib / f for f in FALLBACK_FILES if (lib / f).is_file()]


def make_spans(tok, n_per_length: int, context: int, seed: int):
    """-> {length: [FillRequest]}: spans of exactly `length` tokens starting at a line start."""
    from .model.canvas import FillRequest

    rng = random.Random(seed)
    docs = [tok.encode(p.read_text()) for p in workload_files()]
    newline_ids = {i for d in docs for i in set(d) if tok.decode([i]).endswith("\n")}
    spans = {}
    for length in SPAN_LENGTHS:
        spans[length] = []
        while len(spans[length]) < n_per_length:
            doc = rng.choice(docs)
            starts = [i + 1 for i in range(context, len(doc) - length - context // 2) if doc[i] in newline_ids]
            s = rng.choice(starts)
            req = FillRequest(tok.decode(doc[s - context : s]), tok.decode(doc[s + length : s + length + context // 2]),
                              max_tokens=length, id=tok.decode(doc[s : s + length]))
            spans[length].append(req)
    return spans


def run(args) -> int:
    from .engine import load_engine, pick_device
    from .model.quantize import int8_available
    from .model.checkpoint import CheckpointError

    try:
        launch = LaunchSettings(path=args.model, device=args.device, precision=args.precision)
        engine = load_engine(launch)
        other = None
        if args.precision != "fp32" and engine.model.int8_head is not None:
            other = ("fp32", load_engine(launch.replace(precision="fp32")))
        elif pick_device(args.device) == "cpu" and int8_available():
            other = ("int8", load_engine(launch.replace(device="cpu", precision="int8")))
    except (CheckpointError, ValueError) as e:
        raise UserError(str(e)) from None
    if not workload_files():
        raise UserError("no workload files found in the Python standard library")
    spans = make_spans(engine.tokenizer, args.spans, args.context, args.seed)
    main = "int8" if engine.model.int8_head is not None else "fp32"
    engines = {main: engine} | (dict([other]) if other else {})
    for e in engines.values():
        e.fill([spans[SPAN_LENGTHS[0]][0]])  # warm-up
    print(f"model: {args.model or 'embedded default'}  spans/length: {args.spans}  context: {args.context} tokens  "
          f"weights: {main}")
    header = (f"{'span':>5} {'policy':>10} {'cache':>5} {'weights':>7} {'fwd/span':>9} {'ms/span':>8} {'tok/s':>7} "
              f"{'exact':>6}")
    print(header)
    print("-" * len(header))
    rows = [(policy, cache, main) for policy, cache in CONFIGS] + [("threshold", True, w) for w in engines if w != main]
    for length, reqs in spans.items():
        figures = {}
        for policy, cache, weights in rows:
            cfg = SamplerConfig(policy=policy, threshold=args.threshold, use_cache=cache, heal=False)
            fwd, ms, toks, exact = [], [], [], 0
            for req in reqs:
                t0 = time.perf_counter()
                (res,) = engines[weights].fill([req], cfg)
                ms.append((time.perf_counter() - t0) * 1e3)
                fwd.append(res.forwards)
                toks.append(res.tokens)
                exact += res.text.strip() == str(req.id).strip()
            f = figures[policy, cache, weights] = (statistics.mean(fwd), statistics.mean(ms))
            tps = sum(toks) / (sum(ms) / 1e3)
            print(f"{length:>5} {policy:>10} {'on' if cache else 'off':>5} {weights:>7} {f[0]:>9.1f} {f[1]:>8.1f} "
                  f"{tps:>7.0f} {exact:>3}/{len(reqs)}")
        (f_t, ms_t), (f_o, ms_o) = figures["threshold", True, main], figures["one", True, main]
        line = (f"{'':>5} ratios: one/threshold forwards {f_o / f_t:.2f}x, ms {ms_o / ms_t:.2f}x; "
                f"no-cache/cache ms: threshold {figures['threshold', False, main][1] / ms_t:.2f}x, "
                f"one {figures['one', False, main][1] / ms_o:.2f}x")
        if other:
            ms_fp32, ms_int8 = (figures["threshold", True, w][1] for w in ("fp32", "int8"))
            line += f"; fp32/int8 ms {ms_fp32 / ms_int8:.2f}x"
        print(line)
    return 0
