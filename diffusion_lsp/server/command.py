"""`diffusion-lsp serve`: the language server over stdio (or TCP for debugging)."""

from __future__ import annotations

import logging
import sys

from ..errors import UserError
from ..protocol.settings import LaunchSettings, add_args, from_args


# The event loop shares the GIL with the context thread and the stdin reader: at Python's default
# 5 ms a loop woken by I/O waits up to 5 ms for a thread in pure-Python work to let go.
SWITCH_INTERVAL_S = 0.0005


def register(sub):
    p = sub.add_parser("serve", help="run the language server (inline completions, next edits) over stdio",
                       description="The language server your editor starts: inline completions and next-edit "
                                   "suggestions over stdio. The model runs in a worker process; the editor's "
                                   "diffusionLsp.model.* settings override these flags.")
    add_args(p, LaunchSettings)  # defaults that the editor's model.* settings override
    p.add_argument("--worker-socket", metavar="PATH",
                   help="Unix socket of a model worker to share (started when nobody serves it); default: "
                        "one per model and device in a private runtime directory")
    p.add_argument("--tcp", type=int, metavar="PORT", help="listen on 127.0.0.1:PORT instead of stdio (debugging)")
    p.add_argument("--stdio", action="store_true",
                   help="speak LSP over stdio: the default, accepted for clients that pass it (vscode-languageclient)")
    p.add_argument("--log-level", default="WARNING", help="Python logging level on stderr (default WARNING)")
    p.set_defaults(run=run)


def run(args) -> int:
    from .server import create_server  # pygls: not for --help
    from .session import ServeOptions

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        launch = from_args(LaunchSettings, args)
    except ValueError as e:
        raise UserError(str(e)) from None
    server = create_server(ServeOptions(launch=launch, worker_socket=args.worker_socket))
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    if args.tcp is not None:
        return server.start_tcp("127.0.0.1", args.tcp)
    return server.start_io()  # 0 after shutdown and exit, 1 for an exit without shutdown (LSP spec)
