"""The one definition of a model worker: which model it loads and how (model.*), where it listens,
how many fills it decodes together and when it exits. `WorkerSpec` is the only source of the
worker's command line (`command`) and of its socket's default name; the language server and
serve-api each derive theirs from their settings, and the worker process parses its flags back
into one (`from_args`). Every default of a worker is written here once (the deadline of an
order, every backend's, in protocol/backend.py)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..protocol.settings import LaunchSettings, add_args, from_args
from .wire import default_socket

IDLE_EXIT_S = 600.0  # an editors' worker outlives a session, for the next one (and other editors) to share
MAX_BATCH = 8  # an editors' worker: a few documents at a time
# serve-api's own worker ends with the API: it exits at its first look (every second) with no client left, which
# is once serve-api is gone, however it ended (SIGTERM, or SIGKILL: the kernel closes its connection). Only a
# worker serve-api starts has this; one it finds serving its socket already (an editors' worker given with
# --worker-socket) keeps its own idle exit
API_IDLE_EXIT_S = 0.0
# the embedded model loads and warms up in 3 s here (2 busy cores); a large checkpoint read from a slow disk and
# quantized to int8 on the CPU may take minutes: past this, a model still loading is failed, not "loading" for good
LOAD_TIMEOUT_S = 300.0
API_MAX_BATCH = 16  # serve-api's: a team's requests at once (batch 16 measured 1.8x batch 1's requests/s here)


@dataclass(frozen=True)
class WorkerSpec:
    socket: Path
    model: LaunchSettings = field(default_factory=LaunchSettings)
    idle_exit_s: float = IDLE_EXIT_S
    max_batch: int = MAX_BATCH
    continuous: bool = True  # fills join a running batch and leave it as they finish (False: for comparison)
    load_timeout_s: float = LOAD_TIMEOUT_S  # the model loads (and warms up) within this, or the worker says it failed

    @classmethod
    def of(cls, model: LaunchSettings, socket: str | Path | None = None, prefix: str = "worker", **spec) -> WorkerSpec:
        """The spec for `model`; without a socket, the default one for this install, model and
        launch settings (wire.default_socket: sessions with the same ones share the worker)."""
        made = cls(Path(socket or "."), model, **spec)
        return made if socket else replace(made, socket=default_socket(model, prefix, made.batching_argv()))

    def batching_argv(self) -> tuple[str, ...]:
        """The flags that decide how the worker batches (part of its default socket's name)."""
        return ("--max-batch", str(self.max_batch), *(() if self.continuous else ("--static-batching",)))

    def command(self) -> list[str]:
        return [sys.executable, "-m", "diffusion_lsp.worker", "--socket", str(self.socket),
                "--idle-exit", str(self.idle_exit_s), "--load-timeout", str(self.load_timeout_s), *self.batching_argv(),
                *self.model.to_argv()]

    @staticmethod
    def add_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--socket", required=True)
        add_args(p, LaunchSettings)
        p.add_argument("--idle-exit", type=float, default=IDLE_EXIT_S,
                       help=f"seconds without clients before exiting (default {IDLE_EXIT_S:g})")
        p.add_argument("--load-timeout", type=float, default=LOAD_TIMEOUT_S,
                       help=f"seconds the model may take to load before the worker says it failed (default "
                            f"{LOAD_TIMEOUT_S:g})")
        p.add_argument("--max-batch", type=int, default=MAX_BATCH,
                       help=f"most fills decoded together (default {MAX_BATCH})")
        p.add_argument("--static-batching", action="store_true",
                       help="decode each batch to its end before the next one starts, and answer its fills "
                            "together (the batching before continuous batching; for comparison)")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> WorkerSpec:
        """ValueError naming a bad flag."""
        if not args.load_timeout > 0:  # not `<=`: NaN is no number of seconds either
            raise ValueError(f"--load-timeout must be positive, got {args.load_timeout}")
        return cls(Path(args.socket), from_args(LaunchSettings, args), args.idle_exit, max(1, args.max_batch),
                   not args.static_batching, args.load_timeout)
