"""`diffusion-lsp serve-api`: the OpenAI/Mercury-compatible API on uvicorn, the model in a worker."""

from __future__ import annotations

import ipaddress
import logging
import os
import sys

from ..errors import UserError
from ..protocol.settings import LaunchSettings, SamplerConfig, add_args, from_args
from ..worker.spec import API_IDLE_EXIT_S, API_MAX_BATCH, LOAD_TIMEOUT_S, WorkerSpec

DEFAULT_MODEL_NAME = "diffusion-lsp"


def register(sub) -> None:
    p = sub.add_parser("serve-api", help="serve the model as an OpenAI/Mercury-compatible HTTP API",
                       description="Serve the model over HTTP: OpenAI-compatible fills on /v1/completions and "
                                   "/v1/fim/completions, chat on /v1/chat/completions (tools and JSON answers constrained), next "
                                   "edits on /v1/edit/completions (Mercury's request), "
                                   "and /v1/models, /health and /metrics. The model runs in a worker process; "
                                   "requests are decoded in one batch that they join and leave between "
                                   "denoising steps (continuous batching).")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8000, help="port (default 8000)")
    add_args(p, LaunchSettings, only=("path", "device", "threads", "precision", "chat_template"))
    add_args(p, SamplerConfig)  # how every fill is decoded
    p.add_argument("--api-key-env", metavar="VAR",
                   help="environment variable holding the API key that clients must send as a bearer token")
    p.add_argument("--served-model-name", action="append", metavar="NAME",
                   help=f"model name clients ask for (repeatable; default {DEFAULT_MODEL_NAME})")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds a request may take (default 30)")
    p.add_argument("--load-timeout", type=float, default=LOAD_TIMEOUT_S,
                   help=f"seconds the model may take to load; past it /health and every request say it failed "
                        f"(default {LOAD_TIMEOUT_S:g})")
    p.add_argument("--receive-timeout", type=float, default=20.0,
                   help="seconds a request's headers and body may take to arrive; past it the connection is "
                        "closed (default 20)")
    p.add_argument("--max-in-flight", type=int, default=64,
                   help="requests admitted at once; past it: 429 with Retry-After (default 64)")
    p.add_argument("--max-batch", type=int, default=API_MAX_BATCH,
                   help=f"most fills decoded together (default {API_MAX_BATCH})")
    p.add_argument("--static-batching", action="store_true",
                   help="no continuous batching: each batch decodes to its end before the next starts, and its "
                        "fills are answered together (for comparison, as `bench api` does)")
    p.add_argument("--max-tokens", type=int, default=512,
                   help="largest max_tokens a request may ask (default 512); the model's own canvas bounds it too "
                        "(511 for the embedded model)")
    p.add_argument("--max-body-bytes", type=int, default=1 << 20, help="largest request body (default 1 MiB)")
    p.add_argument("--next-edit", metavar="JSON", default="{}",
                   help='next-edit settings for /v1/edit/completions, as the editors\' nextEdit.* settings, '
                        'e.g. \'{"mode": "full", "maxSpanLines": 1}\'')
    p.add_argument("--worker-socket", metavar="PATH",
                   help="the model worker's Unix socket (default: one for this model in a private runtime directory)")
    p.add_argument("--log-level", default="INFO", help="Python logging level (default INFO)")
    p.set_defaults(run=run)


def _loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def listen_check(host: str, port: int) -> None:
    """UserError when the API could not listen on host:port (no such address, the port taken): one
    line now, not uvicorn's log and exit status 3 after the model has started loading."""
    import socket

    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except (socket.gaierror, UnicodeError) as e:
        raise UserError(f"--host {host}: not an address this machine has ({e})") from None
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn binds
        try:
            probe.bind(address)
        except OSError as e:
            raise UserError(f"cannot listen on {host}:{port}: {e.strerror}") from None


def _next_edit_settings(raw: str):
    import json

    from ..protocol.settings import parse_tree
    from ..nextedit.settings import NextEditSettings

    try:
        value = json.loads(raw)
    except ValueError as e:
        raise UserError(f"--next-edit is not JSON: {e}") from None
    if not isinstance(value, dict):
        raise UserError(f"--next-edit should be a JSON object, got {raw!r}")
    problems: list[str] = []
    settings = parse_tree(NextEditSettings, value, NextEditSettings(), "nextEdit.", problems)
    if problems:
        raise UserError("--next-edit: " + "; ".join(problems))
    return settings


def _chat_template(launch: LaunchSettings):
    """The chat template conversations are put in (launch_template), rendered by the API;
    UserError when it, or the folder's own one (the prompt of a family asked in a chat turn), cannot be
    read or breaks a bound on a short conversation: one line now, not a worker that never loads."""
    from ..engine import model_folder
    from ..model.chat.conversation import launch_template
    from ..model.network.config import adapter_base
    from ..model.chat.prompting import chat_template

    folder = model_folder(launch.path)
    try:
        if launch.chat_template and folder.is_dir():
            chat_template(adapter_base(folder) or folder)
        return launch_template(folder, launch.chat_template)
    except ValueError as e:
        raise UserError(f"chat template: {e}") from None


def run(args) -> int:
    import uvicorn

    from ..protocol.requests import MAX_TOKENS
    from ..worker.wire import check_socket_path
    from .app import create_app
    from .metrics import Metrics
    from .receive import with_receive_deadline
    from .service import Service

    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(name)s %(levelname)s %(message)s")
    try:
        launch = from_args(LaunchSettings, args)
        sampling = from_args(SamplerConfig, args)
    except ValueError as e:
        raise UserError(str(e)) from None
    from ..model.families.table import NATIVE_INT8, is_native_folder  # torch-free

    if launch.precision == "int8" and launch.path and is_native_folder(launch.path):
        raise UserError(f"--precision int8: {NATIVE_INT8}")  # the worker would fail to load it, after the start
    day = 86_400  # a deadline of inf is none (the editor's worker.loadTimeoutS stops at a day too)
    for name, value, low, high in (("--timeout", args.timeout, 0.1, day),
                                   ("--receive-timeout", args.receive_timeout, 0.1, day),
                                   ("--load-timeout", args.load_timeout, 1, day),
                                   ("--max-in-flight", args.max_in_flight, 1, None),
                                   ("--max-batch", args.max_batch, 1, None), ("--max-tokens", args.max_tokens, 1, None),
                                   ("--max-body-bytes", args.max_body_bytes, 1024, None)):
        if not value >= low:  # not `<`: NaN is no number of seconds either
            raise UserError(f"{name} must be at least {low}, got {value}")
        if high is not None and value > high:
            raise UserError(f"{name} must be at most {high} (a day), got {value}")
    next_edit = _next_edit_settings(args.next_edit)
    chat = _chat_template(launch)
    listen_check(args.host, args.port)
    key = None
    if args.api_key_env:
        key = os.environ.get(args.api_key_env)
        if not key:
            raise UserError(f"--api-key-env {args.api_key_env}: that environment variable is not set or empty")
    elif not _loopback(args.host):
        print(f"diffusion-lsp: warning: serving on {args.host} with no API key: anyone who can reach it can use "
              "it (set --api-key-env)", file=sys.stderr)
    spec = WorkerSpec.of(launch, args.worker_socket, prefix="api", idle_exit_s=API_IDLE_EXIT_S,
                         max_batch=args.max_batch, continuous=not args.static_batching,
                         load_timeout_s=args.load_timeout)
    try:  # a folder others can enter would be refused at every request, for good: say it now
        check_socket_path(spec.socket)
    except (OSError, RuntimeError) as e:
        raise UserError(f"--worker-socket: {e}") from None
    service = Service(spec, Metrics(),
                      timeout_s=args.timeout, max_in_flight=args.max_in_flight, sampling=sampling,
                      next_edit=next_edit, chat=chat)
    app = create_app(service, models=args.served_model_name or [DEFAULT_MODEL_NAME], api_key=key,
                     max_body_bytes=args.max_body_bytes, max_tokens=min(args.max_tokens, MAX_TOKENS))
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level.lower(), access_log=False,
                timeout_graceful_shutdown=5, http=with_receive_deadline(args.receive_timeout))
    return 0
