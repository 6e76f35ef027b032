"""`diffusion-lsp bench sampler`: forward passes and milliseconds per span, threshold vs
one-token-per-step decoding, with and without the context cache, and on CPU int8 vs float32
weights, measured side by side in one run; then the output head's cost (bench/vocab_cost.py): ms per
step and per fill and the head's share of a step, for this model and, with --shapes, a model of
Qwen2.5-0.5B's shape and vocabulary. Prints figures and ratios; asserts nothing."""

from __future__ import annotations

import statistics
import time

from ..engine import pick_device
from ..errors import UserError
from ..protocol.settings import FLOAT_DTYPES, SamplerConfig
from ..options import add_launch_args, add_sampler_args, engine_for, launch_settings, sampler_config
from ..data.workload import SPAN_LENGTHS, make_spans, workload_files
from . import vocab_cost

CONFIGS = [("threshold", True), ("threshold", False), ("one", True), ("one", False)]  # (policy, cache) per row
# the sampler flags the rows leave to the command line: each row sets its policy and cache, and healing
# is off (a span starts at a line start: nothing is half-typed)
FLAGS = ("threshold", "block_size", "refresh_every", "time_budget_ms", "trailing_fillers")


def register(bench) -> None:
    s = bench.add_parser("sampler", help="forward passes and ms per span: threshold vs one-per-step, cache on/off",
                         description="Forward passes and milliseconds per span of real code, threshold vs "
                         "one-token-per-step decoding, with and without the context cache. --precision sets the "
                         "weights of the main rows (auto: int8 on CPU); on CPU the other one gets a row too. "
                         "Then the output head's cost: ms per step and per fill and the head's share of a step, "
                         "beside a Qwen2.5-0.5B shaped model with --shapes.")
    s.add_argument("--spans", type=int, default=6, help="spans per length (default 6)")
    s.add_argument("--context", type=int, default=256, help="prefix tokens; the suffix gets half (default 256)")
    s.add_argument("--seed", type=int, default=0)
    # the 0.5B shape's row takes about 40 s on two CPU cores (a step over 393 positions is 4-6 s): asked for
    vocab_cost.add_shapes_arg(s, (vocab_cost.EMBEDDED,), "default embedded; add qwen2.5-0.5b for a row at "
                              "Qwen2.5-0.5B's shape and vocabulary, about 40 s on two CPU cores")
    add_launch_args(s)
    add_sampler_args(s, only=FLAGS)
    s.set_defaults(run=run)


def _engines(launch) -> dict:
    """{weights: Engine}: the main one, and on CPU the other weights beside it."""
    from ..model.network.quantize import int8_available  # imports torch

    engine = engine_for(launch)
    dtype = str(next(engine.model.parameters()).dtype).removeprefix("torch.")  # a bf16 engine was called fp32
    named = {dt: name for name, dt in FLOAT_DTYPES.items()}
    main = "int8" if engine.model.int8_head is not None else named.get(dtype, dtype)
    engines = {main: engine}
    if main == "int8" and launch.precision != "fp32":
        engines["fp32"] = engine_for(launch.replace(precision="fp32"))
    elif pick_device(launch.device) == "cpu" and int8_available():
        engines["int8"] = engine_for(launch.replace(device="cpu", precision="int8"))
    return engines


def run(args) -> int:
    launch = launch_settings(args)
    base = sampler_config(args, heal=False)
    engines = _engines(launch)
    if not workload_files():
        raise UserError("no workload files found in the Python standard library")
    main = next(iter(engines))
    spans = make_spans(engines[main].tokenizer, args.spans, args.context, args.seed)
    for e in engines.values():
        e.fill([spans[SPAN_LENGTHS[0]][0]])  # warm-up
    print(f"model: {launch.path or 'embedded default'}  spans/length: {args.spans}  context: {args.context} tokens  "
          f"weights: {main}")
    header = (f"{'span':>5} {'policy':>10} {'cache':>5} {'weights':>7} {'fwd/span':>9} {'ms/span':>8} {'tok/s':>7} "
              f"{'exact':>6}")
    print(header)
    print("-" * len(header))
    rows = [(policy, cache, main) for policy, cache in CONFIGS] + [("threshold", True, w) for w in engines if w != main]
    for length, reqs in spans.items():
        figures = {}
        for policy, cache, weights in rows:
            cfg = base.replace(policy=policy, use_cache=cache)
            figures[policy, cache, weights] = f = _measure(engines[weights], reqs, cfg)
            print(f"{length:>5} {policy:>10} {'on' if cache else 'off':>5} {weights:>7} {f['fwd']:>9.1f} "
                  f"{f['ms']:>8.1f} {f['tok/s']:>7.0f} {f['exact']:>3}/{len(reqs)}")
        print(_ratios(figures, main, len(engines) > 1))
    if args.shapes:  # the fp32 engine beside int8 rows: the head as one matrix, as a GPU's is
        vocab_cost.section(args.shapes, engines.get("fp32", engines[main]), spans[SPAN_LENGTHS[0]][0], base,
                           steps=2, fills=1, label=vocab_cost.EMBEDDED if launch.path is None else "--model")
    return 0


def _measure(engine, reqs, cfg: SamplerConfig) -> dict:
    """Mean forwards and ms per span, tokens per second, spans filled exactly as the real code."""
    fwd, ms, toks, exact = [], [], [], 0
    for req in reqs:
        t0 = time.perf_counter()
        (res,) = engine.fill([req], cfg)
        ms.append((time.perf_counter() - t0) * 1e3)
        fwd.append(res.forwards)
        toks.append(res.tokens)
        exact += res.text.strip() == str(req.id).strip()
    return {"fwd": statistics.mean(fwd), "ms": statistics.mean(ms), "tok/s": sum(toks) / (sum(ms) / 1e3),
            "exact": exact}


def _ratios(figures: dict, main: str, both_weights: bool) -> str:
    t, o = figures["threshold", True, main], figures["one", True, main]
    line = (f"{'':>5} ratios: one/threshold forwards {o['fwd'] / t['fwd']:.2f}x, ms {o['ms'] / t['ms']:.2f}x; "
            f"no-cache/cache ms: threshold {figures['threshold', False, main]['ms'] / t['ms']:.2f}x, "
            f"one {figures['one', False, main]['ms'] / o['ms']:.2f}x")
    if both_weights:
        fp32, int8 = (figures["threshold", True, w]["ms"] for w in ("fp32", "int8"))
        line += f"; fp32/int8 ms {fp32 / int8:.2f}x"
    return line
