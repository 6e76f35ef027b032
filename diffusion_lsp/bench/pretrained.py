"""`diffusion-lsp bench pretrained`: is a 0.5 B Hugging Face checkpoint a practical CPU model? Load
time, peak RSS, weights and single-line fill time of the embedded model and of a Qwen2.5-Coder-0.5B
shaped Dream folder, each in float32 and int8, side by side in one run. Prints figures and ratios;
asserts nothing.

Without --folder the 0.5 B folder is written here, once, with random weights (no such checkpoint
ships with the package, and none can be downloaded on the machines this runs on): the published
tensor names and shapes of Qwen/Qwen2.5-Coder-0.5B (tied embeddings, q/k/v biases, bf16
safetensors), config.json rewritten to Dream's model_type as tests/test_pretrained.py does, and a
small byte-level BPE with the family's special tokens (the model's 151,936 rows hold more than the
tokenizer's tokens, as Dream's do). Random weights make the text meaningless: the figures are
about speed and memory.

Each (model, weights) configuration runs in a fresh interpreter (`python -m
-c` calling `child`), so ru_maxrss is that configuration's own peak.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..protocol.request_knobs import CONTEXT_TOKENS  # the server's completion.maxContextTokens
from ..errors import UserError
from ..data.workload import workload_files

CACHE = Path(tempfile.gettempdir()) / "diffusion-lsp-bench" / "qwen2.5-coder-0.5b-shaped-v1"  # v1: the format
DONE = ".complete"  # written last: a folder without it was interrupted and is written again
# Qwen/Qwen2.5-Coder-0.5B config.json (the shapes; the rest is Dream's)
QWEN_05B = dict(hidden_size=896, num_hidden_layers=24, num_attention_heads=14, num_key_value_heads=2,
                intermediate_size=4864, vocab_size=151936, rope_theta=1000000.0, rms_norm_eps=1e-6,
                max_position_embeddings=32768, tie_word_embeddings=True, hidden_act="silu", use_sliding_window=False)
GOAL_MS = 1000.0  # single-line fill p50 with int8 weights


def register(bench) -> None:
    p = bench.add_parser("pretrained", help="load time, peak RSS and fill time: a 0.5 B checkpoint vs the embedded "
                         "model, float32 vs int8",
                         description="Is a 0.5 B Hugging Face checkpoint a practical CPU model? Load time, peak "
                                     "RSS, weights and single-line fill time of the embedded model and of a "
                                     "Qwen2.5-Coder-0.5B shaped Dream folder, each in float32 and int8, side by "
                                     "side in one run. Prints figures and ratios; asserts nothing.")
    p.add_argument("--folder", help="a Hugging Face folder to measure (default: write a Qwen2.5-Coder-0.5B shaped "
                   f"one with random weights into {CACHE})")
    p.add_argument("--out", help="where to write that folder instead")
    p.add_argument("--keep", action="store_true", help="keep the written folder for the next run (it is 1 GB)")
    p.add_argument("--fills", type=int, default=20, help="code positions, each filled fresh and then reused "
                   "(default 20)")
    p.add_argument("--threads", type=int, default=None, help="torch threads (default: every core of this process)")
    p.set_defaults(run=run)


# ----------------------------------------------------------------------------------------------- the folder
def qwen_tensors(c: dict) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape of a Qwen2 checkpoint with tied embeddings (no lm_head.weight)."""
    d, kv = c["hidden_size"], c["num_key_value_heads"] * (c["hidden_size"] // c["num_attention_heads"])
    out = {"model.embed_tokens.weight": (c["vocab_size"], d), "model.norm.weight": (d,)}
    for i in range(c["num_hidden_layers"]):
        p = f"model.layers.{i}."
        out |= {p + "input_layernorm.weight": (d,), p + "post_attention_layernorm.weight": (d,),
                p + "self_attn.q_proj.weight": (d, d), p + "self_attn.q_proj.bias": (d,),
                p + "self_attn.k_proj.weight": (kv, d), p + "self_attn.k_proj.bias": (kv,),
                p + "self_attn.v_proj.weight": (kv, d), p + "self_attn.v_proj.bias": (kv,),
                p + "self_attn.o_proj.weight": (d, d),
                p + "mlp.gate_proj.weight": (c["intermediate_size"], d), p + "mlp.up_proj.weight": (c["intermediate_size"], d),
                p + "mlp.down_proj.weight": (d, c["intermediate_size"])}
    return out


def write_folder(folder: Path, shapes: dict = QWEN_05B, tokenizer_vocab: int = 4096, seed: int = 0) -> Path:
    """A Dream-format folder with random bf16 weights of `shapes`, written tensor by tensor with
    safetensors (building the 0.5 B transformers model in float32 and saving it would take 2 GB and
    most of a minute for weights nobody reads)."""
    import torch
    from safetensors.torch import save_file

    from ..model.network.config import SpecialTokens
    from ..model.network.tokenizer import train_bpe

    folder.mkdir(parents=True, exist_ok=True)
    (folder / DONE).unlink(missing_ok=True)
    special = SpecialTokens(mask="<|mask|>", filler="<|endoftext|>", bos="<|beginoftext|>",
                            extra={"im_start": "<|im_start|>", "im_end": "<|im_end|>"})
    tok = train_bpe([p.read_text() for p in workload_files()], tokenizer_vocab, special)
    tok.hf.save(str(folder / "tokenizer.json"))
    gen = torch.Generator().manual_seed(seed)
    state = {}
    for name, shape in qwen_tensors(shapes).items():  # Qwen2's init: normal(0, 0.02), norms 1, biases 0
        t = torch.ones(shape) if "norm" in name else torch.randn(shape, generator=gen) * (0.02 if len(shape) > 1 else 0)
        state[name] = t.to(torch.bfloat16)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = {**shapes, "model_type": "Dream", "architectures": ["DreamModel"], "torch_dtype": "bfloat16",
              "mask_token_id": tok.mask_id, "bos_token_id": tok.bos_id, "eos_token_id": tok.filler_id}
    (folder / "config.json").write_text(json.dumps(config, indent=2))
    (folder / DONE).touch()
    return folder


# ----------------------------------------------------------------------------------------------- one configuration
def positions(n: int) -> list[tuple[str, str, str]]:
    """n (prefix, suffix, line) at real code, as `eval typing` types them: the cursor after a line's
    indentation with the line not typed yet; the next keystroke types its first character."""
    import random

    rng = random.Random(0)
    texts = [p.read_text() for p in workload_files()]
    out = []
    while len(out) < n:
        lines = rng.choice(texts).split("\n")
        i = rng.randrange(len(lines) // 4, len(lines))
        content = lines[i].strip()
        if len(content) < 8:
            continue
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        out.append(("\n".join(lines[:i]) + "\n" + indent, "\n" + "\n".join(lines[i + 1 :]), content))
    return out


def measure(folder: str | None, precision: str, threads: int, fills: int) -> dict:
    """In this process: load, then per position a fresh fill (no earlier fill of the document) and the
    next keystroke's fill (one more character typed) reusing it."""
    import resource

    from ..context.cutting import cut_around
    from ..context.spans import CANVAS_TOKENS, SpanKind
    from ..context.tokens import model_token_counter
    from ..engine import load_engine, model_folder
    from ..model.decoding.canvas import CanvasRequest
    from ..protocol.settings import LaunchSettings, SamplerConfig

    import torch  # noqa: F401 (imported before the clock starts: the load time is the checkpoint's)

    from ..model.families import pretrained  # noqa: F401

    t0 = time.perf_counter()
    engine = load_engine(LaunchSettings(folder, device="cpu", threads=threads, precision=precision))
    load_s = time.perf_counter() - t0
    load_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    count = model_token_counter(model_folder(folder))
    cfg, n = SamplerConfig(use_cache=True, reuse_context=True), CANVAS_TOKENS[SpanKind.REST_OF_LINE]
    spots = [(*cut_around(p, s, CONTEXT_TOKENS, count), typed) for p, s, typed in positions(fills + 1)]
    engine.fill([CanvasRequest(*spots[-1][:2], n, one_line=True)], cfg)  # warm-up
    fresh, reuse, forwards, reused = [], [], [], []
    for i, (prefix, suffix, line) in enumerate(spots[:-1]):
        (a,) = engine.fill([CanvasRequest(prefix, suffix, n, one_line=True, doc=f"doc-{i}")], cfg)
        (b,) = engine.fill([CanvasRequest(prefix + line[0], suffix, n, one_line=True, doc=f"doc-{i}")], cfg)
        fresh.append(a.ms), reuse.append(b.ms), forwards.append((a.forwards, b.forwards)), reused.append(b.reused)
    return {"load_s": load_s, "load_rss_mb": load_rss, "weights_mb": weights_mb(engine.model),
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, "fresh_ms": fresh,
            "reuse_ms": reuse, "forwards": forwards, "reused": reused, "params": params(engine.model)}


def _int8_weights(model):
    """The int8 Linears' weights and biases (float32)."""
    from torch.ao.nn.quantized.dynamic import Linear as Int8Linear

    linears = [m for m in model.modules() if isinstance(m, Int8Linear)]
    return [m.weight() for m in linears] + [m.bias() for m in linears if m.bias() is not None]


def params(model) -> int:
    """Parameters of the model as published: float ones plus int8 matrices, a tied head counted once."""
    tied_head = model.int8_head.weight().numel() if model.int8_head is not None and model.config.tie_embeddings else 0
    return sum(p.numel() for p in model.parameters()) + sum(w.numel() for w in _int8_weights(model)) - tied_head


def weights_mb(model) -> float:
    """Bytes of the float parameters plus the int8 Linears' (weights 1 byte each, scales not counted)."""
    tensors = list(model.parameters()) + _int8_weights(model)
    return sum(t.numel() * (1 if t.is_quantized else t.element_size()) for t in tensors) / 2**20


# ----------------------------------------------------------------------------------------------- the run
def _child(folder: str | None, precision: str, threads: int, fills: int) -> dict:
    arg = json.dumps({"folder": folder, "precision": precision, "threads": threads, "fills": fills})
    code = "import sys; from diffusion_lsp.bench.pretrained import child; child(sys.argv[1])"
    done = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True)
    if done.returncode != 0:
        raise UserError(f"the {precision} run of {folder or 'the embedded model'} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _pct(values: list[float], q: int) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[q - 1] if len(values) > 1 else values[0]


def run(args) -> int:
    if args.fills < 1:
        raise UserError(f"--fills must be at least 1, got {args.fills}")
    threads = args.threads or len(os.sched_getaffinity(0))
    written = None
    if args.folder:
        folder = Path(args.folder)
    else:
        folder = Path(args.out) if args.out else CACHE
        if not (folder / DONE).is_file():
            print(f"writing a Qwen2.5-Coder-0.5B shaped Dream folder with random weights to {folder} ...", flush=True)
            t0 = time.perf_counter()
            write_folder(folder)
            print(f"  written in {time.perf_counter() - t0:.1f} s", flush=True)
        written = folder
    print(f"random weights: the fills' text is meaningless; the figures are about speed and memory.\n"
          f"folder: {folder}  threads: {threads}  fills: {args.fills} positions x (fresh, next keystroke reusing it)"
          f"  context: {CONTEXT_TOKENS} tokens (cut_around)  canvas: 16 tokens, one line, cache on")
    try:
        rows = {(name, w): _child(path, w, threads, args.fills)
                for name, path in (("embedded", None), ("0.5B random" if written else folder.name[:12], str(folder)))
                for w in ("fp32", "int8")}
    finally:
        if written is not None and not args.keep:
            shutil.rmtree(written, ignore_errors=True)
    print_table(rows)
    return 0


def print_table(rows: dict) -> None:
    header = (f"{'model':<13}{'weights':>8}{'params':>10}{'load s':>8}{'peak RSS MB':>13}{'weights MB':>11}"
              f"{'fresh p50':>10}{'p95':>8}{'reuse p50':>10}{'p95':>8}{'fwd':>9}")
    print(header)
    print("-" * len(header))
    for (name, w), r in rows.items():
        fwd = statistics.mean(a for a, _ in r["forwards"]), statistics.mean(b for _, b in r["forwards"])
        print(f"{name:<13}{w:>8}{r['params'] / 1e6:>9.1f}M{r['load_s']:>8.2f}{r['rss_mb']:>13.0f}{r['weights_mb']:>11.0f}"
              f"{_pct(r['fresh_ms'], 50):>10.0f}{_pct(r['fresh_ms'], 95):>8.0f}{_pct(r['reuse_ms'], 50):>10.0f}"
              f"{_pct(r['reuse_ms'], 95):>8.0f}{fwd[0]:>5.1f}/{fwd[1]:<3.1f}")
    print("  (ms per fill; peak RSS over load and fills, of that configuration's own process; fwd: forward passes "
          "fresh/reuse)")
    big = next(name for name, _ in rows if name != "embedded")
    for name in ("embedded", big):
        f, i = rows[name, "fp32"], rows[name, "int8"]
        print(f"ratios {name}: int8/fp32 ms fresh {_ratio(i, f, 'fresh_ms')}, reuse {_ratio(i, f, 'reuse_ms')}; "
              f"peak RSS {i['rss_mb'] / f['rss_mb']:.2f}x; reuse/fresh int8 {_ratio(i, i, 'reuse_ms', 'fresh_ms')}")
    for w in ("fp32", "int8"):
        b, e = rows[big, w], rows["embedded", w]
        print(f"ratios {w}: {big}/embedded ms fresh {_ratio(b, e, 'fresh_ms')}, reuse {_ratio(b, e, 'reuse_ms')}; "
              f"peak RSS {b['rss_mb'] / e['rss_mb']:.1f}x")
    p50 = {k: _pct(rows[big, "int8"][k], 50) for k in ("fresh_ms", "reuse_ms")}
    verdict = lambda ms: "met" if ms <= GOAL_MS else "missed"  # noqa: E731
    print(f"goal: p50 <= 1 s with int8 ({big}): fresh {p50['fresh_ms']:.0f} ms {verdict(p50['fresh_ms'])}, "
          f"reusing the last fill {p50['reuse_ms']:.0f} ms {verdict(p50['reuse_ms'])}")


def _ratio(a: dict, b: dict, key: str, key_b: str | None = None) -> str:
    return f"{_pct(a[key], 50) / _pct(b[key_b or key], 50):.2f}x"


def child(arg: str) -> None:
    """One configuration, in its own process (`_child` starts it): its figures as one JSON line."""
    spec = json.loads(arg)
    print(json.dumps(measure(spec["folder"], spec["precision"], spec["threads"], spec["fills"])))
