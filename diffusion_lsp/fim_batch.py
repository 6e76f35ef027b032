"""`diffusion-lsp fim --batch IN.jsonl`: the path every evaluation uses.

Each input line is one request {id, prefix, suffix, max_tokens?, one_line?}; each output line is one result
{id, text, tokens, forwards, ms}, or {id, error} for a bad line, in input order. Requests are
decoded `--batch-size` at a time, one forward pass per step for the whole batch."""

from __future__ import annotations

import json
import sys
import time

from .errors import UserError
from .model.settings import LaunchSettings, SamplerConfig
from .options import context_cutter, engine_for, read_bytes


def parse_request(line: str, lineno: int, default_max: int):
    """-> FillRequest, or an error record for a bad line."""
    from .model.canvas import FillRequest  # the tokenizers library: kept off --help

    try:
        obj = json.loads(line)
    except json.JSONDecodeError as e:
        return {"id": None, "line": lineno, "error": f"line {lineno}: not valid JSON ({e.msg})"}
    except RecursionError:
        return {"id": None, "line": lineno, "error": f"line {lineno}: not valid JSON (nested too deeply)"}
    if not isinstance(obj, dict):
        return {"id": None, "line": lineno, "error": f"line {lineno}: expected a JSON object"}
    rid = obj.get("id", lineno)
    prefix, suffix, max_tokens = obj.get("prefix"), obj.get("suffix", ""), obj.get("max_tokens", default_max)
    if not isinstance(prefix, str) or not isinstance(suffix, str):
        return {"id": rid, "line": lineno, "error": f"line {lineno}: 'prefix' and 'suffix' must be strings"}
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        return {"id": rid, "line": lineno, "error": f"line {lineno}: 'max_tokens' must be a positive integer"}
    one_line = obj.get("one_line", False)
    if not isinstance(one_line, bool):
        return {"id": rid, "line": lineno, "error": f"line {lineno}: 'one_line' must be true or false"}
    return FillRequest(prefix=prefix, suffix=suffix, max_tokens=max_tokens, id=rid, one_line=one_line)


def run_batch(args, cfg: SamplerConfig, launch: LaunchSettings) -> int:
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {args.batch_size}")
    lines = read_bytes(args.batch).decode("utf-8", errors="replace").splitlines()
    cut = context_cutter(args, launch)
    items = [parse_request(s, n, args.max_tokens) for n, s in enumerate(lines, 1) if s.strip()]
    for item in items:
        if not isinstance(item, dict):
            item.prefix, item.suffix = cut(item.prefix, item.suffix)
    engine = engine_for(launch)
    errors = 0
    for record in fill_records(engine, items, cfg, args.batch_size):
        errors += "error" in record
        sys.stdout.write(json.dumps(record) + "\n")
        sys.stdout.flush()
    if errors:
        print(f"diffusion-lsp: {errors} of {len(items)} requests failed", file=sys.stderr)
    return 0


def result_record(res, with_confidence: bool = False) -> dict:
    """The JSON record of one FillResult: what `fim --json` prints and each `--batch` line holds."""
    out = {"text": res.text, "tokens": res.tokens, "forwards": res.forwards, "ms": round(res.ms, 2)}
    if with_confidence:
        out["confidence"] = [round(c, 4) for c in res.confidence]
        out["budget_hit"] = res.budget_hit
    return out


def decode_all(engine, requests, cfg, batch_size: int, desc: str) -> tuple[list[dict], float]:
    """Every request through the batch path -> (records, wall seconds): what the evaluations time."""
    t0 = time.perf_counter()
    records = list(fill_records(engine, requests, cfg, batch_size, desc=desc))
    return records, time.perf_counter() - t0


def fill_records(engine, items, cfg, batch_size: int, desc: str = "fim"):
    """Yield one result record per item (FillRequest or error record), in order, batch by batch,
    with a progress bar on stderr."""
    from tqdm import tqdm  # kept off --help

    with tqdm(total=len(items), desc=desc, unit="req", file=sys.stderr, disable=None) as bar:
        for i in range(0, len(items), batch_size):
            chunk = items[i : i + batch_size]
            results = iter(fill_each(engine, [r for r in chunk if not isinstance(r, dict)], cfg))
            for item in chunk:
                yield item if isinstance(item, dict) else next(results)
            bar.update(len(chunk))


def fill_each(engine, requests, cfg) -> list[dict]:
    """Fill a batch; if the batch as a whole is rejected, retry one by one so only bad ones fail."""
    if not requests:
        return []
    try:
        return [{"id": r.id, **result_record(res)} for r, res in zip(requests, engine.fill(requests, cfg))]
    except ValueError:
        if len(requests) == 1:
            raise
    out = []
    for r in requests:
        try:
            out.extend(fill_each(engine, [r], cfg))
        except ValueError as e:
            out.append({"id": r.id, "error": str(e)})
    return out
