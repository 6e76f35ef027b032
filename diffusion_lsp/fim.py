"""`diffusion-lsp fim`: headless fill-in-the-middle, one position of a file or a JSONL batch."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .errors import UserError
from .model.settings import LaunchSettings, SamplerConfig, add_args, from_args

# the sampler fields a command line sets (stop_below and reuse_context are the server's)
SAMPLER_FLAGS = ("policy", "threshold", "k", "gamma", "block_size", "use_cache", "refresh_every", "time_budget_ms",
                 "heal", "trailing_fillers")


def register(sub):
    p = sub.add_parser("fim", help="fill in the middle of a file at a position, or a JSONL batch",
                       description="Print the text the model would insert at a position of FILE.")
    p.add_argument("file", nargs="?", metavar="FILE", help="source file, or - for stdin")
    p.add_argument("--at", metavar="LINE:COL", help="1-based line and column (in characters) of the cursor")
    p.add_argument("--batch", metavar="IN.jsonl", help="one request per line: id, prefix, suffix, max_tokens")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the bare text")
    p.add_argument("--one-line", action="store_true", help="stop once the fill's first line is written")
    add_sampler_args(p)
    p.set_defaults(run=run)


def add_sampler_args(p):
    """Model and sampler options shared by fim, bench and eval: flags made from the settings' fields."""
    add_args(p, LaunchSettings)
    p.add_argument("--max-tokens", type=int, default=32, metavar="N", help="canvas size (default 32)")
    add_args(p, SamplerConfig, only=tuple(f for f in SAMPLER_FLAGS))
    p.add_argument("--batch-size", type=int, default=8, help="requests decoded together in --batch mode")


def sampler_config(args) -> SamplerConfig:
    try:
        return from_args(SamplerConfig, args)
    except ValueError as e:
        raise UserError(str(e)) from None


def engine_from_args(args, **launch):
    from .engine import load_engine
    from .model.checkpoint import CheckpointError

    try:
        return load_engine(from_args(LaunchSettings, args, **launch))
    except (CheckpointError, ValueError) as e:
        raise UserError(str(e)) from None


def read_source(file: str) -> str:
    """The file's text; binary or non-UTF-8 input is an error, an empty file is fine."""
    try:
        data = sys.stdin.buffer.read() if file == "-" else Path(file).read_bytes()
    except OSError as e:
        raise UserError(f"cannot read {file}: {e.strerror}") from None
    name = "stdin" if file == "-" else file
    if b"\x00" in data:
        raise UserError(f"{name} looks binary (it contains NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{name} is not UTF-8 (bad byte at offset {e.start})") from None


def split_at(text: str, at: str) -> tuple[str, str]:
    """Split text at a 1-based LINE:COL (columns count characters) into prefix and suffix."""
    try:
        line, col = (int(v) for v in at.split(":"))
    except ValueError:
        raise UserError(f"--at expects LINE:COL, got {at!r}") from None
    lines = text.splitlines(keepends=True) or [""]
    if text.endswith(("\n", "\r")):
        lines.append("")  # the empty line after a final newline is a valid cursor line
    if not 1 <= line <= len(lines):
        raise UserError(f"line {line} is past the end of the file ({len(lines)} lines)")
    body = lines[line - 1].rstrip("\r\n")
    if not 1 <= col <= len(body) + 1:
        raise UserError(f"column {col} is past the end of line {line} ({len(body)} characters)")
    offset = sum(len(s) for s in lines[: line - 1]) + col - 1
    return text[:offset], text[offset:]


def run(args) -> int:
    if args.batch:
        if args.file or args.at:
            raise UserError("--batch takes no FILE or --at")
        from .fim_batch import run_batch

        return run_batch(args)
    if not args.file or not args.at:
        raise UserError("fim needs FILE and --at LINE:COL (or --batch IN.jsonl)")
    if args.max_tokens < 1:
        raise UserError(f"--max-tokens must be at least 1, got {args.max_tokens}")
    prefix, suffix = split_at(read_source(args.file), args.at)
    cfg = sampler_config(args)
    engine = engine_from_args(args)
    from .model.canvas import FillRequest

    try:
        (res,) = engine.fill([FillRequest(prefix, suffix, args.max_tokens, one_line=args.one_line)], cfg)
    except ValueError as e:
        raise UserError(str(e)) from None
    if args.json:
        print(json.dumps(result_record(res, with_confidence=True)))
    else:
        sys.stdout.write(res.text)
        sys.stdout.flush()
    return 0


def result_record(res, with_confidence: bool = False) -> dict:
    out = {"text": res.text, "tokens": res.tokens, "forwards": res.forwards, "ms": round(res.ms, 2)}
    if with_confidence:
        out["confidence"] = [round(c, 4) for c in res.confidence]
        out["budget_hit"] = res.budget_hit
    return out
