"""`diffusion-lsp bench structured`: JSON asked of the model with and without constraints, side by
side in one run, on random schemas (bench/schemas.py): how many answers parse and validate, and what
they cost (forwards, ms, tokens per forward and per second). Free: the schema in the prompt, the
answer a fill of as many tokens as the constrained layout has positions, read as the first JSON value
in it. Constrained: model/structured/constrained.py, the skeleton on the canvas. Prints figures; asserts nothing."""

from __future__ import annotations

import json
import random
import statistics
import time

from ..options import add_launch_args, engine_for, launch_settings
from .schemas import random_schema


def register(bench) -> None:
    s = bench.add_parser("structured", help="JSON answers with and without constraints: validity and cost",
                         description="Random JSON schemas answered twice by the model: as free text asked for JSON, "
                                     "and decoded under the schema's constraints (the skeleton on the canvas).")
    s.add_argument("--schemas", type=int, default=40, help="schemas (default 40)")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--threshold", type=float, default=0.9, help="the threshold policy's, for both (default 0.9)")
    add_launch_args(s)
    s.set_defaults(run=run)


def _first_json(text: str):
    """The first JSON value in a free answer (after any prose), or raise ValueError."""
    decoder = json.JSONDecoder()
    for i, ch in enumerate(text):
        if ch in "{[\"-0123456789tfn":
            try:
                return decoder.raw_decode(text, i)[0]
            except json.JSONDecodeError:
                continue
    raise ValueError("no JSON value")


def run(args) -> int:
    import jsonschema  # the reference validator (the test extra)

    from ..model.decoding.canvas import DoesNotFit, CanvasRequest
    from ..model.structured.jsonschema import compile_schema
    from ..protocol.settings import SamplerConfig
    from ..model.structured.constrained import Layout, tables

    engine = engine_for(launch_settings(args))
    model, tok = engine.model, engine.tokenizer
    cfg = SamplerConfig(threshold=args.threshold)
    rng = random.Random(args.seed)
    tables(tok, model.config.vocab_size)  # built once per tokenizer, before anything is timed
    rows = {"free": [], "constrained": []}
    skipped = 0
    for _ in range(args.schemas):
        schema = random_schema(rng)
        ask = f"Answer with only a JSON value that matches this JSON Schema:\n{json.dumps(schema, ensure_ascii=False)}"
        messages = [{"role": "user", "content": ask}]
        prompt = (engine.chat_format.prompt(messages) if engine.chat_format is not None
                  else tok.encode(f"# {ask}\nvalue = "))
        layout = Layout(tok, model.config.vocab_size)
        render = layout.build(compile_schema(schema))
        try:
            t0 = time.perf_counter()
            r = layout.decode(model, prompt, render, args.threshold)
            ms = (time.perf_counter() - t0) * 1e3
        except DoesNotFit:
            skipped += 1
            continue
        jsonschema.validate(r.value, schema)
        rows["constrained"].append((True, True, r.forwards, ms, len(tok.encode(r.text))))
        t0 = time.perf_counter()
        (fill,) = engine.fill([CanvasRequest("", "", len(layout.ids), id=0, prompt_ids=prompt)], cfg)
        ms = (time.perf_counter() - t0) * 1e3
        try:
            value, parsed = _first_json(fill.text), True
            valid = jsonschema.Draft202012Validator(schema).is_valid(value)
        except ValueError:
            parsed = valid = False
        rows["free"].append((parsed, valid, fill.forwards, ms, len(fill.token_ids)))
    print(f"bench structured: {args.schemas} random schemas (seed {args.seed}), model "
          f"{engine.meta.get('family') or 'ours'}, threshold {args.threshold}, "
          f"{'its chat template' if engine.chat_format is not None else 'a plain prompt (no chat template)'}"
          + (f"; {skipped} laid out past the model's positions, left out of both" if skipped else ""))
    print(f"{'':12} {'parses':>7} {'validates':>9} {'forwards':>9} {'ms':>8} {'tokens':>7} {'tok/fwd':>8} "
          f"{'tok/s':>8}")
    for name, got in rows.items():
        if not got:
            continue
        n = len(got)
        forwards, ms, tokens = (sum(g[k] for g in got) for k in (2, 3, 4))
        print(f"{name:12} {100 * sum(g[0] for g in got) / n:6.1f}% {100 * sum(g[1] for g in got) / n:8.1f}% "
              f"{statistics.mean(g[2] for g in got):9.1f} {statistics.median(g[3] for g in got):8.1f} "
              f"{statistics.mean(g[4] for g in got):7.1f} {tokens / max(forwards, 1):8.2f} "
              f"{tokens / max(ms / 1e3, 1e-9):8.0f}")
    print("forwards, ms (median), tokens: per schema; tokens: of the JSON answer (free: of the whole fill)")
    return 0
