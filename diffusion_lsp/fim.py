"""`diffusion-lsp fim`: headless fill-in-the-middle at one position of a file; `--batch` hands a
JSONL batch to fim_batch.py."""

from __future__ import annotations

import asyncio
import re
import sys

from . import jsonout
from .protocol.failure import BackendError
from .protocol.answers import Fill
from .protocol.requests import FillRequest
from .errors import UserError
from .fim_batch import result_record, run_batch
from .input_files import InputFile
from .options import add_fill_args, command_backend, context_cutter, launch_settings, read_source, sampler_config


def register(sub):
    p = sub.add_parser("fim", help="fill in the middle of a file at a position, or a JSONL batch",
                       description="Print the text the model would insert at a position of FILE.")
    p.add_argument("file", nargs="?", metavar="FILE", type=InputFile.or_stdin, help="source file, or - for stdin")
    p.add_argument("--at", metavar="LINE:COL", help="1-based line and column (in characters) of the cursor")
    p.add_argument("--batch", metavar="IN.jsonl", type=InputFile.or_stdin, help="one request per line: id, prefix, suffix, max_tokens")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of the bare text")
    p.add_argument("--one-line", action="store_true", help="stop once the fill's first line is written")
    add_fill_args(p)
    p.set_defaults(run=run)


def split_at(text: str, at: str) -> tuple[str, str]:
    """Split text at a 1-based LINE:COL (columns count characters) into prefix and suffix."""
    try:
        line, col = (int(v) for v in at.split(":"))
    except ValueError:
        raise UserError(f"--at expects LINE:COL, got {at!r}") from None
    # lines end at \n, \r\n or \r only, as in the language server (str.splitlines also breaks at
    # form feeds and U+2028, so a column there was "past the end of its line")
    lines = re.findall(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+$", text) or [""]
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
    cfg, launch = sampler_config(args), launch_settings(args)
    if args.batch:
        if args.file or args.at:
            raise UserError("--batch takes no FILE or --at")
        return run_batch(args, cfg, launch)
    if not args.file or not args.at:
        raise UserError("fim needs FILE and --at LINE:COL (or --batch IN.jsonl)")
    if args.max_tokens < 1:
        raise UserError(f"--max-tokens must be at least 1, got {args.max_tokens}")
    prefix, suffix = context_cutter(args, launch)(*split_at(read_source(args.file), args.at))
    backend = command_backend(launch)
    fill = asyncio.run(fill_one(backend, FillRequest(prefix, suffix, args.max_tokens, args.one_line, cfg)))
    if args.json:
        print(jsonout.dumps(result_record(fill, with_confidence=True)))
    else:
        sys.stdout.write(fill.text)
        sys.stdout.flush()
    return 0


async def fill_one(backend, order: FillRequest) -> Fill:
    """One fill; every failure is a UserError (one line)."""
    try:
        return await backend.fill("", order)
    except BackendError as e:
        raise UserError(str(e)) from None
    finally:
        await backend.close()
