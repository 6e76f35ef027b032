"""Command-line pieces the model commands share (fim, bench, eval): their model/launch and sampler
flags, made from the one definition of those settings (protocol/settings.py), the settings built back
from the parsed flags (a bad value is a UserError: commands build them before any other work), the
backend they describe (protocol/backend.py), and reading an input file or stdin. Torch-free, so `--help` stays fast.
The backends: backend/factory.py, backend/api_client.py."""

from __future__ import annotations

import argparse
import functools
import logging
import textwrap
from collections.abc import Callable

from .context.cutting import cut_around
from .context.tokens import model_token_counter
from .engine import Engine, load_engine, model_folder
from .protocol.request_knobs import CONTEXT_TOKENS
from .errors import UserError
from .input_files import MAX_BYTES, InputFile
from .protocol.settings import LaunchSettings, SamplerConfig, add_args, from_args

# the sampler fields a command line sets (confidence_cut and reuse_context are the server's)
SAMPLER_FLAGS = ("policy", "threshold", "k", "gamma", "block_size", "use_cache", "refresh_every", "time_budget_ms",
                 "heal", "trailing_fillers")


def add_launch_args(p: argparse.ArgumentParser) -> None:
    """--model, --device, --threads, --precision; --backend openai with --base-url, --remote-model
    and --api-key-env for an OpenAI-compatible FIM API."""
    add_args(p, LaunchSettings)


def add_sampler_args(p: argparse.ArgumentParser, only: tuple[str, ...] = SAMPLER_FLAGS,
                     defaults: SamplerConfig | None = None) -> None:
    """--policy, --threshold, ... (the fields in `only`)."""
    add_args(p, SamplerConfig, defaults, only)


def add_fill_args(p: argparse.ArgumentParser) -> None:
    """Everything a command that fills requests takes: the launch and sampler flags, the canvas size
    and how many requests decode together."""
    add_launch_args(p)
    p.add_argument("--max-tokens", type=int, default=32, metavar="N", help="canvas size (default 32)")
    add_sampler_args(p)
    p.add_argument("--batch-size", type=int, default=8, help="requests decoded together in --batch mode")
    p.add_argument("--context-tokens", type=int, default=CONTEXT_TOKENS, metavar="T",
                   help=f"keep this many tokens of context around the cursor, cut at whole lines as the language "
                        f"server does (default {CONTEXT_TOKENS}, its completion.maxContextTokens; 0: all of it)")


def context_cutter(args: argparse.Namespace, launch: LaunchSettings) -> Callable[[str, str], tuple[str, str]]:
    """(prefix, suffix) -> the part the language server would keep (--context-tokens), counted with
    the model's own tokenizer where the folder has one."""
    if args.context_tokens < 0:
        raise UserError(f"--context-tokens must be at least 0, got {args.context_tokens}")
    count = model_token_counter(model_folder(launch.path))
    return lambda prefix, suffix: cut_around(prefix, suffix, args.context_tokens, count)


def launch_settings(args: argparse.Namespace, **overrides) -> LaunchSettings:
    try:
        return from_args(LaunchSettings, args, **overrides)
    except ValueError as e:
        raise UserError(str(e)) from None


def sampler_config(args: argparse.Namespace, **overrides) -> SamplerConfig:
    try:
        return from_args(SamplerConfig, args, **overrides)
    except ValueError as e:
        raise UserError(str(e)) from None


def engine_for(launch: LaunchSettings) -> Engine:
    """The model loaded in this process, or a UserError naming a missing or corrupt checkpoint or a
    bad setting (for the evaluations that read the model itself: `eval heldout`'s loss)."""
    if launch.backend == "openai":
        raise UserError("this command needs a local model (--model DIR), not --backend openai")
    from .model.families.checkpoint import CheckpointError  # imports torch

    try:
        return load_engine(launch)
    except (CheckpointError, ValueError) as e:
        raise UserError(str(e)) from None


def command_backend(launch: LaunchSettings):
    """The Backend a command's flags describe (backend_for): the model in this process, or
    with --backend openai the API (no model is loaded; a missing key variable is a UserError now,
    before any input is read). Its failures are the caller's to say: it reports nothing itself."""
    from .backend.api_client import RemoteError, read_key  # httpx: kept off --help
    from .backend.factory import backend_for
    from .protocol.backend import LogReporter

    if launch.backend == "openai":
        try:
            read_key(launch.api_key_env)
        except RemoteError as e:
            raise UserError(str(e)) from None
    quiet = logging.getLogger("diffusion-lsp.command-line")
    if not quiet.handlers:  # once: every evaluation that makes a backend asks again
        quiet.addHandler(logging.NullHandler())
    quiet.propagate = False
    return backend_for(launch, LogReporter(quiet), 120.0, load=functools.partial(engine_for, launch))


def ended_run(error) -> bool:
    """A backend failure that ends a command-line run (no model, no API, a refused key) rather than
    one request (INVALID or REFUSED: `fim --batch` records it and goes on)."""
    from .protocol.failure import Failure

    return error.kind not in (Failure.INVALID, Failure.REFUSED)


MAX_SOURCE = MAX_BYTES  # bytes: past any source file; /dev/zero read on until memory ran out


def read_source(file: InputFile) -> str:
    """The file's text (stdin's for "-"), read by input_files (no FIFO, device or folder, at most
    MAX_SOURCE bytes); binary or non-UTF-8 input is an error, an empty file is fine."""
    data = file.read_bytes(MAX_SOURCE)
    name = "stdin" if file.stdin and file.path == "-" else file.path
    if b"\x00" in data:
        raise UserError(f"{name} looks binary (it contains NUL bytes)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UserError(f"{name} is not UTF-8 (bad byte at offset {e.start})") from None


def paragraphs(*texts: str) -> str:
    """A description for argparse.RawDescriptionHelpFormatter: each text a paragraph filled to 79
    columns, never broken inside a URL or a path (argparse's own filling breaks them at hyphens)."""
    return "\n\n".join(textwrap.fill(t, 79, break_on_hyphens=False, break_long_words=False) for t in texts)
