"""`diffusion-lsp` command line. Each subcommand lives in its own module with `register(subparsers)`
and `run(args) -> int`; modules import torch lazily so `--help` stays fast."""

from __future__ import annotations

import argparse
import importlib
import sys

from .errors import UserError

# subcommand -> module whose register(subparsers) adds its parsers, each with a run(args) -> exit code
COMMANDS = {
    "fim": "diffusion_lsp.fim",
    "bench": "diffusion_lsp.bench",
    "data": "diffusion_lsp.data.command",
    "train": "diffusion_lsp.train.command",
    "eval": "diffusion_lsp.evals.command",
    "serve": "diffusion_lsp.server.command",
    "serve-api": "diffusion_lsp.api.command",
    "model": "diffusion_lsp.model_check",
    "settings-schema": "diffusion_lsp.server.schema",
}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="diffusion-lsp", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, module in COMMANDS.items():
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return args.run(args)
    except UserError as e:
        print(f"diffusion-lsp: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("diffusion-lsp: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
