"""The worker's local socket: where it lives, who may open it, and how its JSON-lines messages are framed.

The socket sits in a directory only its owner can enter (0700, under $XDG_RUNTIME_DIR or the temp
dir) and is itself 0600, so only the user who started the worker can send it code to complete.

Messages, one JSON object per line (`WIRE_VERSION` in hello; a client refuses another version):
  client -> worker  {"op": "fill", "id": 7, "key": "file:///a.py", "prefix": "...", "suffix": "...",
                     "max_tokens": 32, "one_line": true, "sampling": SamplerConfig.to_wire(),
                     "drafts": true (optional: the draft after every denoising step, as below)}
                    {"op": "cancel", "id": 7}
                    {"op": "ping", "id": 8}
  worker -> client  {"event": "hello", "version": 5, "pid": 123, "state": "loading", "model": "...",
                     "build": "0.1.0+3f2a...", "weights": "9c1e..."} (a client refuses another build
                     or other weights: the worker runs other code, or an older copy of the model)
                    {"event": "state", "state": "ready" | "failed", "error": "...", "max_tokens": 511}
                     (max_tokens, once ready: the largest canvas a fill may ask for)
                    {"id": 7, "draft": "def f(x): \u2592\u2592", "committed": "def f(x): ", "step": 2,
                     "masked": 2}  (only for a fill with drafts, before its answer)
                    {"id": 7, "ok": true, "text": "...", "pieces": [...], "confidence": [...], "ms": 12.5,
                     "forwards": 3, "reused": 120, "batch": 4}
                    {"id": 7, "ok": false, "failure": "dropped" | "unavailable" | "refused" | "invalid" | ...,
                     "error": "...", "param": "max_tokens", "stop": "superseded" | "cancelled"}
                     (protocol/failure.py BackendError.message: the Failure vocabulary itself; invalid: the
                     same on every try; param: its field; stop, with dropped alone: why, a Stop's value; a
                     client refuses a stop it does not know, as an unusable answer)
                    {"id": 8, "ok": true, "pong": true, "busy_s": 0.4, "stuck_s": 0.0, "dead": "..."}
                     (answered by the socket thread, so a worker whose model thread is busy still answers;
                     one that is stopped does not. stuck_s, only while the model thread holds an order
                     that was stopped: for how long; dead, only when the model thread has ended)
A fill supersedes any older fill with the same key from the same connection. The orders and answers
are protocol/requests.py and protocol/answers.py, in their wire form, and a "no" is the Backend's
failure (protocol/failure.py BackendError) in its own."""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import stat
import tempfile
from pathlib import Path

from .. import __version__
from ..engine import model_folder
from ..model.network.config import regular_file
from ..protocol.settings import LaunchSettings

WIRE_VERSION = 5  # 5: a dropped order says why (its stop)
MAX_LINE = 64 * 1024 * 1024  # bytes; a line longer than this closes the connection


def private_dir() -> Path:
    """Where the default sockets live: a folder only this user can enter, under $XDG_RUNTIME_DIR or
    the temp dir. Created and checked (ensure_private_dir) when a socket in it is used."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and Path(base).is_dir():
        return Path(base) / "diffusion-lsp"
    return Path(tempfile.gettempdir()) / f"diffusion-lsp-{os.getuid()}"


def ensure_private_dir(folder: Path) -> None:
    """Create `folder` (and missing parents) 0700, or check an existing one: a real directory (not
    a symlink) owned by this user that nobody else can enter. RuntimeError saying what is wrong."""
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise RuntimeError(f"{folder} must be a directory owned by uid {os.getuid()} with mode 0700 "
                           f"(found mode {stat.S_IMODE(info.st_mode):o}, uid {info.st_uid})")


def default_socket(launch: LaunchSettings, prefix: str = "worker", batching: tuple[str, ...] = ()) -> Path:
    """One worker per (install, model, launch settings, batching): sessions with the same ones share
    it, and a new or upgraded install, changed weights, or other batching flags (a serve-api with
    --static-batching beside one without) never reach another's worker (worker_key)."""
    return private_dir() / f"{prefix}-{worker_key(launch, batching)}.sock"


def worker_key(launch: LaunchSettings, batching: tuple[str, ...] = ()) -> str:
    """What must match for a worker to serve a session: this install's code (build_id), the model
    folder and its weights (weights_id), the launch settings that shape the worker, and its
    batching flags (WorkerSpec: --max-batch, --static-batching)."""
    parts = [build_id(), model_name(launch), weights_id(launch), *launch.to_argv(), *batching]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


@functools.cache
def build_id() -> str:
    """This install's code: its version, where it lives, and its newest source file (an upgrade or
    an edited checkout is another build). Stats the package's ~200 files once per process."""
    package = Path(__file__).resolve().parents[1]
    newest = max((p.stat().st_mtime_ns for folder in source_folders() for p in folder.rglob("*.py")), default=0)
    digest = hashlib.sha256(f"{package}\0{newest}".encode()).hexdigest()[:12]
    return f"{__version__}+{digest}"


def source_folders() -> list[Path]:
    """The folders of the package's code: this package's own, and those of diffusion_lsp.model and
    diffusion_lsp.kernels where they are elsewhere (a checkout keeps them at its top, pyproject's
    package-dir maps them; an installed wheel has them inside the package). Found without importing them."""
    package = Path(__file__).resolve().parents[1]
    found = [package]
    for name in ("diffusion_lsp.model", "diffusion_lsp.kernels"):
        for where in importlib.util.find_spec(name).submodule_search_locations:
            if not (folder := Path(where).resolve()).is_relative_to(package):
                found.append(folder)
    return found


def weights_id(launch: LaunchSettings) -> str:
    """A fingerprint of the model folder's config and weights: each file's name, size, mtime and
    its first MiB (the safetensors header and the first tensors) -- not the whole file, which for a
    7B checkpoint would take seconds at every start. Empty for a remote backend or a missing folder."""
    if launch.backend != "local":
        return ""
    folder = model_folder(launch.path)
    h = hashlib.sha256()
    for path in sorted([*folder.glob("*.safetensors"), folder / "config.json", folder / "adapter.json"]):
        try:
            regular_file(path)  # a FIFO would hang the open; the loader says what is wrong with it
            info = path.stat()
            with path.open("rb") as f:
                head = f.read(1 << 20)
        except (OSError, ValueError):
            continue
        h.update(f"{path.name}\0{info.st_size}\0{info.st_mtime_ns}\0".encode())
        h.update(head)
    return h.hexdigest()[:16]


def model_name(launch: LaunchSettings) -> str:
    """How a worker names its model in hello, so that a client can tell it serves another one."""
    return str(Path(launch.path).resolve()) if launch.path else "<embedded>"


def encode(message: dict) -> bytes:
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> dict:
    """One line -> a message; ValueError when it is not a JSON object."""
    message = json.loads(line)
    if not isinstance(message, dict):
        raise ValueError(f"expected a JSON object, got {type(message).__name__}")
    return message


def check_socket_path(path: Path) -> None:
    """A socket path we may connect to: in a private folder (created when missing), and, when it
    exists, a socket owned by this user (not a symlink or a file someone planted)."""
    ensure_private_dir(path.parent)
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode) or info.st_uid != os.getuid():
        raise RuntimeError(f"{path} is not a socket owned by uid {os.getuid()} (found mode "
                           f"{stat.filemode(info.st_mode)}, uid {info.st_uid}); remove it or choose another worker.socket")


