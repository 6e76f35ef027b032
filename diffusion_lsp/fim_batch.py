"""`diffusion-lsp fim --batch IN.jsonl`: the path every evaluation uses.

Each input line is one request {id, prefix, suffix, max_tokens?, one_line?}; each output line is one result
{id, text, tokens, forwards, ms}, or {id, error} for a bad line, in input order. Requests are
decoded `--batch-size` at a time, one forward pass per step for the whole batch."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import dataclass

from . import jsonout
from .protocol.failure import BackendError
from .protocol.answers import Fill
from .protocol.requests import FillRequest
from .errors import UserError
from .protocol.settings import LaunchSettings, SamplerConfig
from .options import MAX_SOURCE, command_backend, context_cutter, ended_run


@dataclass
class Item:
    """One request of a batch: its id and what it asks."""

    id: object
    prefix: str
    suffix: str = ""
    max_tokens: int = 32
    one_line: bool = False

    def order(self, cfg: SamplerConfig) -> FillRequest:
        return FillRequest(self.prefix, self.suffix, self.max_tokens, self.one_line, cfg)


def parse_request(line: str, lineno: int, default_max: int):
    """-> Item, or an error record for a bad line."""
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
    return Item(rid, prefix, suffix, max_tokens, one_line)


def run_batch(args, cfg: SamplerConfig, launch: LaunchSettings) -> int:
    if args.batch_size < 1:
        raise UserError(f"--batch-size must be at least 1, got {args.batch_size}")
    lines = args.batch.read_bytes(MAX_SOURCE).decode("utf-8", errors="replace").splitlines()
    cut = context_cutter(args, launch)
    items = [parse_request(s, n, args.max_tokens) for n, s in enumerate(lines, 1) if s.strip()]
    for item in items:
        if not isinstance(item, dict):
            item.prefix, item.suffix = cut(item.prefix, item.suffix)
    backend = command_backend(launch)
    errors = 0
    for record in fill_records(backend, items, cfg, args.batch_size):
        errors += "error" in record
        sys.stdout.write(jsonout.dumps(record) + "\n")
        sys.stdout.flush()
    if errors:
        print(f"diffusion-lsp: {errors} of {len(items)} requests failed", file=sys.stderr)
    return 0


def result_record(fill: Fill, with_confidence: bool = False) -> dict:
    """The JSON record of one Fill: what `fim --json` prints and each `--batch` line holds."""
    out = {"text": fill.text, "tokens": fill.tokens, "forwards": fill.forwards, "ms": round(fill.ms, 2)}
    if with_confidence:
        out["confidence"] = [round(c, 4) for c in fill.confidence]
        out["budget_hit"] = fill.budget_hit
    return out


def decode_all(backend, items, cfg, batch_size: int, desc: str) -> tuple[list[dict], float]:
    """Every request through the batch path -> (records, wall seconds): what the evaluations time."""
    t0 = time.perf_counter()
    records = list(fill_records(backend, items, cfg, batch_size, desc=desc))
    return records, time.perf_counter() - t0


def fill_records(backend, items, cfg, batch_size: int, desc: str = "fim"):
    """Yield one result record per item (Item or error record), in order, batch by batch, with a
    progress bar on stderr. A failure that ends the run (no model, no API) is a UserError. The run
    has an event loop of its own, and closes the backend's connections or thread when it ends (a
    backend makes them again for the next run)."""
    from tqdm import tqdm  # kept off --help

    with asyncio.Runner() as runner, tqdm(total=len(items), desc=desc, unit="req", file=sys.stderr,
                                          disable=None) as bar:
        try:
            for i in range(0, len(items), batch_size):
                chunk = items[i : i + batch_size]
                asked = [r for r in chunk if not isinstance(r, dict)]
                results = iter(runner.run(backend.fill_many([r.order(cfg) for r in asked])))
                for item in chunk:
                    yield item if isinstance(item, dict) else record(item, next(results))
                bar.update(len(chunk))
        finally:
            runner.run(backend.close())


def record(item: Item, answer: Fill | BackendError) -> dict:
    if isinstance(answer, Fill):
        return {"id": item.id, **result_record(answer)}
    if ended_run(answer):
        raise UserError(str(answer))
    return {"id": item.id, "error": str(answer)}
