"""The output head's cost at a real vocabulary, for `bench sampler` and `bench gpu`: the embedded
model's rows beside a model of Qwen2.5-0.5B's shape (ModelConfig preset "qwen2.5-0.5b": dim 896,
24 layers, its 151,936 rows), built with random weights. Random weights are fine for timing (the
same matrices are multiplied whatever they hold) and write meaningless text: the figures are speed.

Per row, for one real span's row (its canvas all masked):
- ms per step without the cache, a denoising step as model/decoding/denoise.py runs it: the body
  (model.hidden) over the whole row, then head_stats over the masked positions (the output
  projection and its reduction: the dispatch's kernel or reference);
- ms of the head alone on the same hidden states, and its share of that step;
- the same share of a step with the cache (the body over the masked positions alone, against the
  row's keys and values: the sampler's later steps), where the body is smallest;
- ms and forwards per fill (Engine.fill of the span, the caller's sampler settings).
The embedded tokenizer drives every row: its ids are all rows of the larger vocabulary, and its
special ids come from it by name. The arithmetic: at dim 896 the head is 2 * 151,936 * 896 = 0.27
GFLOP per masked position, the body about 0.72 GFLOP per position it runs over (0.36 B parameters
outside the embedding), so the head weighs most where the body runs over few positions."""

from __future__ import annotations

import time

SHAPES = ("qwen2.5-0.5b",)  # ModelConfig presets a row can take, beside the embedded model
EMBEDDED = "embedded"


def add_shapes_arg(parser, default: tuple[str, ...] | None, said: str) -> None:
    """--shapes: the rows of the head's cost section; `said`: the help's words on the default (None:
    the command picks it)."""
    choices = (EMBEDDED, *SHAPES)
    parser.add_argument("--shapes", default=None if default is None else ",".join(default),
                        type=lambda s: _shapes(s, choices),
                        help=f"rows of the output head's cost section, comma separated, from {', '.join(choices)} "
                        f"({said}); a shape is built with random weights; 'none' skips the section")


def _shapes(text: str, choices: tuple[str, ...]) -> tuple[str, ...]:
    import argparse

    names = tuple(n.strip() for n in text.split(",") if n.strip() and n.strip() != "none")
    bad = [n for n in names if n not in choices]
    if bad:
        raise argparse.ArgumentTypeError(f"unknown shape {bad[0]!r}: choose from {', '.join(choices)}, or none")
    return names


def shaped_engine(name: str, embedded, device: str, dtype):
    """An Engine of preset `name`'s shape with random weights in `dtype` on `device`, driven by the
    embedded engine's tokenizer."""
    import torch

    from ..engine import Engine
    from ..model.network.config import ModelConfig
    from ..model.network.transformer import DiffusionTransformer

    tok = embedded.tokenizer
    cfg = ModelConfig.preset(name)
    if cfg.shift_logits and tok.bos_id is None:  # a shifted model's first output predicts after a bos
        cfg = ModelConfig.preset(name, shift_logits=False)
    if tok.vocab_size > cfg.vocab_size:
        raise ValueError(f"the embedded tokenizer's {tok.vocab_size} ids do not fit the {cfg.vocab_size} rows")
    torch.manual_seed(0)
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device(device):  # made in place: no float32 copy first
            model = DiffusionTransformer(cfg).eval()
    finally:
        torch.set_default_dtype(default)
    return Engine(model, tok, meta={})


def measure(engine, request, cfg, device: str, steps: int, fills: int) -> dict:
    """One row's figures: the step of `request`'s row (its whole canvas masked) `steps` times after a
    warm-up, the head alone as often, then `fills` fills of it (no warm-up: the step warmed the body)."""
    import torch

    from ..kernels.vocab_stats import Constraint, head_stats
    from ..model.decoding.canvas import build_row
    from .kernels import sync, timed

    model, tok = engine.model, engine.tokenizer
    ids = build_row(request, tok, model.config.max_seq_len, cfg.heal).ids
    tokens = torch.tensor([ids], device=device)  # [1, S]
    positions = torch.arange(len(ids), device=device)[None]  # [1, S]
    key_mask = torch.ones_like(tokens, dtype=torch.bool)
    masked = (tokens[0] == tok.mask_id).nonzero().squeeze(1)  # [M]
    banned = Constraint(banned=tuple(sorted(tok.special_ids - {tok.filler_id})), filler_id=tok.filler_id)

    def body():
        return model.hidden(tokens, positions, key_mask)[0][0, masked]  # [M, D]

    def window(cache):  # a cached step: the masked positions alone, against the row's keys/values
        return model.hidden(tokens[:, masked], masked[None], key_mask[:, masked], cache.at(masked[None]))[0][0]

    with torch.inference_mode():
        _, step_ms, _ = timed(lambda: head_stats(model, body(), banned), device, steps, 1)
        h, cache = model.hidden(tokens, positions, key_mask)
        _, cached_ms, _ = timed(lambda: head_stats(model, window(cache), banned), device, steps, 1)
        h = h[0, masked]
        _, head_ms, _ = timed(lambda: head_stats(model, h, banned), device, steps, 1)
    fill_ms, forwards = [], []
    for _ in range(fills):
        sync(device)
        t0 = time.perf_counter()
        (res,) = engine.fill([request], cfg)
        sync(device)
        fill_ms.append((time.perf_counter() - t0) * 1e3)
        forwards.append(res.forwards)
    c = model.config
    return {"vocab": c.vocab_size, "dim": c.dim, "layers": c.n_layers, "params": c.num_params(),
            "positions": len(ids), "masked": len(masked), "step_ms": step_ms, "head_ms": head_ms,
            "head_share": head_ms / step_ms, "cached_ms": cached_ms,
            "cached_share": head_ms / cached_ms, "fill_ms": sum(fill_ms) / fills, "forwards": sum(forwards) / fills,
            "steps": steps, "fills": fills}


def section(shapes: tuple[str, ...], embedded, request, cfg, steps: int, fills: int, label: str = EMBEDDED) -> dict:
    """{row: figures} for each of `shapes` ("embedded": the given engine, the bench's own model, printed
    as `label`; the others in its dtype on its device), measured one after another and printed side by side."""
    rows = {}
    weight = next(embedded.model.parameters())
    for name in shapes:
        engine = embedded if name == EMBEDDED else shaped_engine(name, embedded, weight.device.type, weight.dtype)
        rows[name] = measure(engine, request, cfg, weight.device.type, steps, fills)
        del engine  # the next shape is built with this one's memory free
    print_rows(rows, str(weight.dtype).removeprefix("torch."), weight.device.type, label)
    return rows


def print_rows(rows: dict, dtype: str, device: str, label: str = EMBEDDED) -> None:
    if not rows:
        return
    first = next(iter(rows.values()))
    print(f"\noutput head's cost ({device}, {dtype}; shapes other than {label} have random weights: speed, "
          f"not text), one {first['masked']}-token span: a step without the cache over the row's positions "
          f"(each model's own cut) and the head alone (median of {first['steps']}), the head's share of it and of a step with "
          f"the cache (cached: the masked positions alone), ms per fill (mean of {first['fills']})")
    print(f"{'shape':<14}{'vocab':>9}{'dim':>6}{'layers':>7}{'params':>9}{'positions':>10}{'ms/step':>9}{'head ms':>9}"
          f"{'head %':>8}{'cached':>8}{'head %':>8}{'ms/fill':>9}{'fwd/fill':>9}")
    for name, r in rows.items():
        print(f"{(label if name == EMBEDDED else name)[:13]:<14}{r['vocab']:>9,}{r['dim']:>6}{r['layers']:>7}"
              f"{r['params'] / 1e9:>8.3f}B{r['positions']:>10}{r['step_ms']:>9.1f}{r['head_ms']:>9.1f}{r['head_share']:>8.0%}"
              f"{r['cached_ms']:>8.1f}{r['cached_share']:>8.0%}{r['fill_ms']:>9.1f}{r['forwards']:>9.1f}")
    if EMBEDDED in rows and len(rows) > 1:
        base = rows[EMBEDDED]
        print(f"{'':<14}" + "; ".join(
            f"{n}/{label}: step {r['step_ms'] / base['step_ms']:.1f}x, head {r['head_ms'] / base['head_ms']:.1f}x, "
            f"fill {r['fill_ms'] / base['fill_ms']:.1f}x" for n, r in rows.items() if n != EMBEDDED))
