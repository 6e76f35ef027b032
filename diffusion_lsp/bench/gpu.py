"""`diffusion-lsp bench gpu`: the sampler and the kernels on a CUDA GPU, with nothing to download.
Prints figures side by side; asserts nothing.

- Models: a Dream-7B shaped model (ModelConfig preset "dream-7b", Qwen2.5-7B's shape: 7.6 B
  parameters) with random weights, built in bf16 straight on the GPU (15 GB; float32 on the CPU
  first would be 30 GB), and the embedded model in bf16. The embedded model's tokenizer drives both
  (its 8,192 ids are all rows of the 7B vocabulary; the special ids come from it by name). Random
  weights write meaningless text and are never confident: the figures are speed, not quality, and
  on them the threshold policy commits one token per step (forwards per token shows it), so a top-k
  row (4 per step) shows the speed of multi-token commits.
- Single stream: per model and policy, 32-token infills at line starts of real code (CPython's
  tests, data/workload.py) with `--context` tokens around them (3/4 before, 1/4 after), one-line
  and multi-line: p50/p95 ms, tokens/s, forwards per token, and the positions the model saw (the
  embedded model has 512: it sees the context cut to fit).
- Batched: 2N requests of 16, 32 and 64 tokens through N rows, continuous batching (sampler.py
  Decoding.add: before each step the free places go to the next requests) beside static batching
  (groups of N, each driven to its end): tokens/s and mean occupancy (rows per step / N).
- The output head's cost (bench/vocab_cost.py): ms per step and per fill and the head's share of a
  step, the embedded model beside a Qwen2.5-0.5B shaped one (random weights, its 151,936 rows).
- Kernels (bench/kernels.py): each Triton kernel against its PyTorch reference at the 7B head's shape.
- Peak GPU memory per section, and the goals for the 7B shape: >= 1,000 tokens/s single stream
  (best policy), 32-token one-line infill p50 <= 60 ms.

--dry-run runs the same code on the CPU in under a minute: a Dream-shaped model of dim 64 (the
preset's flags, so shifted logits, biases and the separate head are exercised, in bf16) instead of
the 7B, the embedded model in fp32, 256 tokens of context, 2 and 4 rows, and the kernels on small
shapes in Triton's interpreter."""

from __future__ import annotations

import os
import random
import statistics
import sys
import time
from dataclasses import dataclass

from .. import jsonout
from ..errors import UserError
from ..server.stats import percentile
from ..workspace_files import check_file, output_path, write_file
from ..data.workload import workload_files
from . import vocab_cost

SPAN = 32  # tokens per single-stream infill
BATCH_SPANS = (16, 32, 64)  # max_tokens of the batched requests, in turn: rows finish at different steps
GOAL_TOKENS_S, GOAL_P50_MS = 1000.0, 60.0  # the 7B shape on the GPU: single stream (best policy), one-line p50
POLICIES = {"threshold": {}, "one": {"policy": "one"}, "topk k=4": {"policy": "topk", "k": 4}}  # SamplerConfig
KINDS = {"one-line": True, "multi-line": False}  # CanvasRequest.one_line


@dataclass(frozen=True)
class Plan:
    """What a run measures: on the GPU, or the dry run's small version of it on the CPU."""

    device: str
    shape: dict  # overrides of ModelConfig.preset("dream-7b")
    embedded: str  # the embedded model's precision
    context: int
    repeat: int  # fills per single-stream row, timed calls per kernel row
    batches: tuple[int, ...]
    small_kernels: bool
    note: str = ""
    shape_name: str = "7b-shape"


GPU = Plan("cuda", {}, "bf16", 2048, 8, (8, 32), False)
DRY = Plan("cpu", dict(dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=128), "fp32", 256, 2, (2, 4), True,
           note="dry run: a dim-64 Dream-shaped model on the CPU stands in for the 7B shape; the goals are the "
                "7B's on a GPU", shape_name="tiny-shape")


def register(bench) -> None:
    p = bench.add_parser("gpu", help="a Dream-7B shaped model and the embedded one on a CUDA GPU: fills, batching, "
                         "kernels (no download)",
                         description="Single-stream and batched fills of a Dream-7B shaped model (random bf16 "
                         "weights, built on the GPU) and of the embedded model, per policy; continuous vs static "
                         "batching; each Triton kernel vs its reference at the 7B head's shape; peak GPU memory; "
                         "the goals. --dry-run: the same code on the CPU with a tiny model.")
    p.add_argument("--dry-run", action="store_true", help="run on the CPU with a tiny model instead of the 7B shape")
    p.add_argument("--repeat", type=int, help=f"fills per single-stream row (default {GPU.repeat}, dry run "
                   f"{DRY.repeat})")
    p.add_argument("--context", type=int, help=f"tokens of context around each infill (default {GPU.context}, dry "
                   f"run {DRY.context})")
    p.add_argument("--seed", type=int, default=0)
    vocab_cost.add_shapes_arg(p, None, "default embedded,qwen2.5-0.5b; in the dry run embedded: the 0.5B shape's "
                              "row adds about a minute on two CPU cores")
    p.add_argument("--json", metavar="OUT", type=output_path, help="also write every figure as JSON")
    p.set_defaults(run=run)


def run(args) -> int:
    if args.json:  # refused before minutes of measuring
        check_file(args.json, "--json")
    plan = DRY if args.dry_run else GPU
    if args.dry_run and os.environ.get("TRITON_INTERPRET") != "1" and "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"  # read when triton is imported (loading a model imports it)
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        raise UserError("bench gpu needs a CUDA device, and torch sees none here; --dry-run runs the same code on "
                        "the CPU with a tiny model")
    repeat = plan.repeat if args.repeat is None else args.repeat
    context = plan.context if args.context is None else args.context
    if repeat < 1 or context < 4 * SPAN:
        raise UserError(f"--repeat must be at least 1 and --context at least {4 * SPAN}, got {repeat} and {context}")
    out = {"device": torch.cuda.get_device_name() if plan.device == "cuda" else "cpu", "dry_run": args.dry_run,
           "context": context, "repeat": repeat, "models": {}}
    engines = load_models(plan, out)
    tok = engines["embedded"].tokenizer
    spots = positions(tok, max(repeat + 1, 2 * max(plan.batches)), context, args.seed)
    for name, engine in engines.items():
        out["models"][name]["single"] = single_rows(engine, spots[:repeat + 1], plan.device)
        out["models"][name]["batched"] = batched_rows(engine, spots, plan)
    print_single(out)
    print_batched(out)
    out["vocab_cost"] = head_cost(args, engines["embedded"], spots[0], repeat)
    out["kernels"] = kernel_rows(tok, plan, repeat)
    out["goals"] = goals(out["models"][plan.shape_name], plan)
    if args.json:
        write_file(args.json, jsonout.dumps(out, indent=2), "--json")
    return 0


# ---- the models ----

def load_models(plan: Plan, out: dict) -> dict:
    """{name: Engine}: the Dream-7B shape (random weights) and the embedded model; their figures go to out."""
    import torch

    from ..engine import Engine, load_engine
    from ..kernels import dispatch
    from ..model.network.config import ModelConfig
    from ..protocol.settings import LaunchSettings
    from .kernels import peak_mb, reset_peak, sync

    reset_peak(plan.device)
    t0 = time.perf_counter()
    embedded = load_engine(LaunchSettings(device=plan.device, precision=plan.embedded))
    sync(plan.device)
    load_s, load_mb = time.perf_counter() - t0, peak_mb(plan.device)
    tok = embedded.tokenizer
    overrides = dict(plan.shape)
    if plan.shape:  # the small stand-in: the tokenizer's ids and 64 rows it has no token for, as the 7B has
        overrides["vocab_size"] = -(-tok.vocab_size // 64) * 64 + 64
    shift_note = ""
    if tok.bos_id is None:  # a shifted model's first output predicts after a bos (sampler.Decoding refuses)
        overrides["shift_logits"] = False
        shift_note = "  (shift_logits off: the embedded tokenizer has no bos token)"
    cfg = ModelConfig.preset("dream-7b", **overrides)
    if tok.vocab_size > cfg.vocab_size:
        raise ValueError(f"the embedded tokenizer's {tok.vocab_size} ids do not fit the {cfg.vocab_size} rows")
    reset_peak(plan.device)
    t0 = time.perf_counter()
    shaped = random_model(cfg, plan.device, torch.bfloat16)
    sync(plan.device)
    engines = {plan.shape_name: Engine(shaped, tok, meta={}), "embedded": embedded}
    times = {plan.shape_name: (time.perf_counter() - t0, peak_mb(plan.device)), "embedded": (load_s, load_mb)}
    note = plan.note or "random weights: the text is meaningless, the figures are speed"
    print(f"bench gpu on {out['device']}: {note}")
    for name, engine in engines.items():
        m = engine.model
        weight = next(m.parameters())
        c = m.config
        out["models"][name] = {"params": sum(p.numel() for p in m.parameters()), "dtype": str(weight.dtype),
                               "config": c.to_dict(), "build_s": times[name][0], "build_peak_mb": times[name][1],
                               "head": dispatch.choice(weight)}
        print(f"  {name:<11} {out['models'][name]['params'] / 1e9:.3f} B params, {weight.dtype}, dim {c.dim}, "
              f"{c.n_layers} layers, {c.n_heads}/{c.n_kv_heads} heads, vocab {c.vocab_size:,}, max {c.max_seq_len:,} "
              f"positions, shift_logits {c.shift_logits}; ready in {times[name][0]:.1f} s, peak "
              f"{_mb(times[name][1])} MB; head_stats: {out['models'][name]['head']}"
              + (shift_note if name == plan.shape_name else ""))
    print(f"  tokenizer: the embedded one, {tok.vocab_size:,} ids (mask {tok.mask_id}, filler {tok.filler_id}, "
          f"bos {tok.bos_id})")
    return engines


def random_model(cfg, device: str, dtype):
    """DiffusionTransformer(cfg) with random weights, every tensor made on `device` in `dtype` (no
    float32 copy anywhere: the 7B shape's would be 30 GB)."""
    import torch

    from ..model.network.transformer import DiffusionTransformer

    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):
            model = DiffusionTransformer(cfg)
    finally:
        torch.set_default_dtype(default)
    return model.eval()


def head_cost(args, embedded, spot: tuple[str, str], repeat: int) -> dict:
    """The output head's cost section (vocab_cost.section) for one SPAN-token infill at `spot`: the
    embedded model beside the real vocabulary's shapes, which the dry run leaves to --shapes."""
    from ..model.decoding.canvas import CanvasRequest
    from ..protocol.settings import SamplerConfig

    shapes = args.shapes
    if shapes is None:
        shapes = (vocab_cost.EMBEDDED,) if args.dry_run else (vocab_cost.EMBEDDED, *vocab_cost.SHAPES)
    return vocab_cost.section(shapes, embedded, CanvasRequest(*spot, SPAN), SamplerConfig(), steps=repeat,
                              fills=1 if args.dry_run else repeat)


# ---- the workload ----

def positions(tok, n: int, context: int, seed: int) -> list[tuple[str, str]]:
    """n (prefix, suffix) pairs at line starts of real code: 3/4 of `context` tokens before the
    cursor, 1/4 after the SPAN tokens that really follow it (the infill's place)."""
    rng = random.Random(seed)
    before = context * 3 // 4
    after = context - before
    docs = [tok.encode(p.read_text()) for p in workload_files()]
    newline = {i for d in docs for i in set(d) if tok.decode([i]).endswith("\n")}
    starts = [(d, [s for s in range(before, len(d) - SPAN - after) if d[s - 1] in newline]) for d in docs]
    starts = [(d, s) for d, s in starts if s]
    if not starts:
        raise UserError(f"no workload file in the Python standard library has {context} tokens; "
                        "try a shorter --context")
    out = []
    while len(out) < n:
        doc, at = rng.choice(starts)
        s = rng.choice(at)
        out.append((tok.decode(doc[s - before:s]), tok.decode(doc[s + SPAN:s + SPAN + after])))
    return out


# ---- single stream ----

def single_rows(engine, spots, device: str) -> list[dict]:
    """A row per policy and kind: spots[0] warms up, the rest are timed one fill at a time."""
    from ..model.decoding.canvas import CanvasRequest, build_row
    from ..protocol.settings import SamplerConfig
    from .kernels import peak_mb, reset_peak, sync

    rows = []
    for policy, changes in POLICIES.items():
        cfg = SamplerConfig(**changes)
        for kind, one_line in KINDS.items():
            reqs = [CanvasRequest(p, s, SPAN, one_line=one_line) for p, s in spots]
            seen = statistics.mean(len(build_row(r, engine.tokenizer, engine.model.config.max_seq_len, cfg.heal).ids)
                                   for r in reqs[1:])
            engine.fill(reqs[:1], cfg)
            reset_peak(device)
            ms, tokens, forwards = [], 0, 0
            for req in reqs[1:]:
                sync(device)
                t0 = time.perf_counter()
                (res,) = engine.fill([req], cfg)
                sync(device)
                ms.append((time.perf_counter() - t0) * 1e3)
                tokens, forwards = tokens + res.tokens, forwards + res.forwards
            seconds = sum(ms) / 1e3
            rows.append({"policy": policy, "kind": kind, "fills": len(ms), "positions": seen, "tokens": tokens,
                         "forwards": forwards, "seconds": seconds, "p50_ms": percentile(ms, 50),
                         "p95_ms": percentile(ms, 95), "tokens_s": tokens / seconds,
                         "forwards_per_token": forwards / tokens if tokens else None, "peak_mb": peak_mb(device)})
    return rows


def single_stream(rows: list[dict]) -> dict[str, float]:
    """Tokens/s per policy over both kinds of fill (the single-stream figure)."""
    out = {}
    for policy in POLICIES:
        mine = [r for r in rows if r["policy"] == policy]
        out[policy] = sum(r["tokens"] for r in mine) / sum(r["seconds"] for r in mine)
    return out


# ---- batched ----

def batched_rows(engine, spots, plan: Plan) -> list[dict]:
    """Per batch size N: 2N requests, continuous then static batching, after a warm-up at N rows."""
    from ..model.decoding.canvas import CanvasRequest

    rows = []
    for n in plan.batches:
        reqs = [CanvasRequest(p, s, BATCH_SPANS[i % len(BATCH_SPANS)], one_line=i % 2 == 0)
                for i, (p, s) in enumerate(spots[:2 * n])]
        engine.fill(reqs[:n])
        rows += [batched(engine, reqs, n, continuous, plan.device) for continuous in (True, False)]
    return rows


def batched(engine, requests, n: int, continuous: bool, device: str) -> dict:
    """Every request through at most n rows at a time (the default sampler settings) -> tokens/s and
    occupancy. Static: groups of n, each driven to its end. Continuous: n start, and before every
    step the free places go to the next requests (Decoding.add), as the worker does with its queue."""
    from .kernels import peak_mb, reset_peak, sync

    queue, results, occupied = list(requests), [], []  # occupied: the rows of each step
    reset_peak(device)
    t0 = time.perf_counter()
    while queue:
        decoding = engine.decoding(queue[:n])
        del queue[:n]
        occupied.append(decoding.active())
        for _ in decoding:
            free = n - decoding.active()
            if continuous and queue and free:
                decoding.add(queue[:free])
                del queue[:free]
            if decoding.active():
                occupied.append(decoding.active())
        results += decoding.results()
    sync(device)
    seconds = time.perf_counter() - t0
    tokens = sum(r.tokens for r in results)
    return {"rows": n, "mode": "continuous" if continuous else "static", "requests": len(results), "tokens": tokens,
            "seconds": seconds, "tokens_s": tokens / seconds, "steps": len(occupied),
            "occupancy": statistics.mean(occupied) / n, "peak_mb": peak_mb(device)}


# ---- kernels and goals ----

def kernel_rows(tok, plan: Plan, repeat: int) -> dict:
    from . import kernels

    why = kernels.skipped(plan.device)
    if why:
        print(f"\nkernel rows skipped: {why}")
        return {"skipped": why, "rows": []}
    warmup = 1 if plan.small_kernels else 3
    rows = kernels.compare(tok, plan.device, plan.small_kernels, max(repeat, 5), warmup)
    kernels.print_rows(rows, plan.device, max(repeat, 5), warmup)
    return {"skipped": None, "rows": rows}


def goals(shape: dict, plan: Plan) -> list[dict]:
    per_policy = single_stream(shape["single"])
    best = max(per_policy, key=per_policy.get)
    one_line = [r for r in shape["single"] if r["kind"] == "one-line"]
    fastest = min(one_line, key=lambda r: r["p50_ms"])
    out = [{"goal": f"single-stream tokens/s >= {GOAL_TOKENS_S:,.0f}", "value": per_policy[best], "policy": best,
            "met": per_policy[best] >= GOAL_TOKENS_S},
           {"goal": f"{SPAN}-token one-line infill p50 <= {GOAL_P50_MS:g} ms", "value": fastest["p50_ms"],
            "policy": fastest["policy"], "met": fastest["p50_ms"] <= GOAL_P50_MS}]
    print(f"\ngoals for the {plan.shape_name}" + (f" ({plan.note})" if plan.note else " on the GPU") + ":")
    for g in out:
        print(f"  {g['goal']}: {g['value']:,.1f} with {g['policy']} ({'met' if g['met'] else 'MISSED'})")
    return out


# ---- printing ----

def _mb(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def print_single(out: dict) -> None:
    print(f"\nsingle stream: {SPAN}-token infills at line starts with {out['context']:,} tokens of context "
          f"(3/4 before), {out['repeat']} fills per row after one warm-up; positions: what the model saw")
    print(f"{'model':<11}{'policy':<11}{'kind':<11}{'positions':>10}{'p50 ms':>9}{'p95 ms':>9}{'tok/s':>9}"
          f"{'fwd/tok':>9}{'tokens':>8}{'peak MB':>9}")
    for name, m in out["models"].items():
        for r in m["single"]:
            fpt = "-" if r["forwards_per_token"] is None else f"{r['forwards_per_token']:.2f}"
            print(f"{name:<11}{r['policy']:<11}{r['kind']:<11}{r['positions']:>10.0f}{r['p50_ms']:>9.1f}"
                  f"{r['p95_ms']:>9.1f}{r['tokens_s']:>9.0f}{fpt:>9}{r['tokens']:>8}{_mb(r['peak_mb']):>9}")
        per_policy = single_stream(m["single"])
        print(f"{'':<11}single-stream tokens/s: " + ", ".join(f"{p} {v:,.0f}" for p, v in per_policy.items())
              + f"; one/threshold {per_policy['one'] / per_policy['threshold']:.2f}x, topk k=4/threshold "
              f"{per_policy['topk k=4'] / per_policy['threshold']:.2f}x")


def print_batched(out: dict) -> None:
    print(f"\nbatched: 2N requests of {'/'.join(map(str, BATCH_SPANS))} tokens (one-line and multi-line in turn) "
          f"through N rows, threshold policy; occupancy: rows per step / N")
    print(f"{'model':<11}{'N':>4}  {'mode':<11}{'requests':>9}{'tokens':>8}{'seconds':>9}{'tok/s':>9}"
          f"{'occupancy':>10}{'steps':>7}{'peak MB':>9}")
    for name, m in out["models"].items():
        rows = m["batched"]
        for r in rows:
            print(f"{name:<11}{r['rows']:>4}  {r['mode']:<11}{r['requests']:>9}{r['tokens']:>8}{r['seconds']:>9.2f}"
                  f"{r['tokens_s']:>9.0f}{r['occupancy']:>10.0%}{r['steps']:>7}{_mb(r['peak_mb']):>9}")
        print(f"{'':<11}continuous/static tokens/s: " + ", ".join(
            f"N={c['rows']} {c['tokens_s'] / s['tokens_s']:.2f}x" for c, s in zip(rows[::2], rows[1::2])))
