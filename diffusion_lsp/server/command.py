"""`diffusion-lsp serve`: the language server over stdio (or TCP for debugging)."""

from __future__ import annotations

import logging


def register(sub):
    p = sub.add_parser("serve", help="run the language server (inline completions) over stdio",
                       description="Language server for inline completions; the model runs in a worker process.")
    p.add_argument("--model", metavar="DIR", help="checkpoint folder (default: the embedded model); "
                   "the editor's model.path setting overrides it")
    p.add_argument("--device", default="auto", help="cpu, cuda, cuda:1, ... (default: cuda when present)")
    p.add_argument("--worker-socket", metavar="PATH",
                   help="Unix socket of a model worker to share (started when nobody serves it); default: "
                        "one per model and device in a private runtime directory")
    p.add_argument("--tcp", type=int, metavar="PORT", help="listen on 127.0.0.1:PORT instead of stdio (debugging)")
    p.add_argument("--log-level", default="WARNING", help="Python logging level on stderr (default WARNING)")
    p.set_defaults(run=run)


def run(args) -> int:
    from .server import create_server
    from .session import ServeOptions

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    server = create_server(ServeOptions(model=args.model, device=args.device, worker_socket=args.worker_socket))
    if args.tcp is not None:
        server.start_tcp("127.0.0.1", args.tcp)
    else:
        server.start_io()
    return 0
