"""`diffusion-lsp` command line. Each subcommand lives in its own module with `register(subparsers)`
and `run(args) -> int`; modules import torch lazily so `--help` stays fast."""

from __future__ import annotations

import argparse
import importlib
import sys

from . import __version__
from .errors import UserError
from .input_files import Refused

# subcommand -> module whose register(subparsers) adds its parsers, each with a run(args) -> exit code
COMMANDS = {  # in the order `--help` lists them: using the model first, making one last
    "fim": "diffusion_lsp.fim",
    "serve": "diffusion_lsp.server.command",
    "serve-api": "diffusion_lsp.api.command",
    "settings-schema": "diffusion_lsp.server.schema",
    "model": "diffusion_lsp.model_check",
    "eval": "diffusion_lsp.evals.command",
    "bench": "diffusion_lsp.bench",
    "regress": "diffusion_lsp.regress",
    "adapt": "diffusion_lsp.evals.adapt_command",
    "calibrate": "diffusion_lsp.evals.calibrate",
    "data": "diffusion_lsp.data.command",
    "train": "diffusion_lsp.train.command",
    "train-recipe": "diffusion_lsp.train.recipe",
}


DESCRIPTION = """\
Code completion from a masked diffusion language model: the model fills the gap
at the cursor in parallel, from the code before and after it. Use it as a
language server in your editor (inline completions and next-edit suggestions),
as an OpenAI-compatible HTTP API, or from the command line. A small code model
is built in; --model DIR takes another checkpoint."""

EPILOG = """\
examples:
  diffusion-lsp fim mycode.py --at 12:8
      print what the model would insert at line 12, column 8 of mycode.py
  diffusion-lsp serve
      the language server: the command your editor starts

Each command has its own --help. The README of diffusion-lsp tells more:
set-up, the editors' settings and every command."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="diffusion-lsp", description=DESCRIPTION, epilog=EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"diffusion-lsp {__version__}")
    sub = parser.add_subparsers(title="commands", dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except (UserError, Refused) as e:  # Refused: a file given to read, refused by input_files
        print(f"diffusion-lsp: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("diffusion-lsp: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
