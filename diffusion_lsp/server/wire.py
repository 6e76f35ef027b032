"""The worker's local socket: where it lives, who may open it, and its JSON-lines messages.

The socket sits in a directory only its owner can enter (0700, under $XDG_RUNTIME_DIR or the temp
dir) and is itself 0600, so only the user who started the worker can send it code to complete.

Messages, one JSON object per line (`WIRE_VERSION` in hello; a client refuses another version):
  client -> worker  {"op": "fill", "id": 7, "key": "file:///a.py", "prefix": "...", "suffix": "...",
                     "max_tokens": 32, "sampling": {"policy": "threshold", "threshold": 0.9, ...}}
                    {"op": "cancel", "id": 7}
  worker -> client  {"event": "hello", "version": 1, "pid": 123, "state": "loading", "model": "..."}
                    {"event": "state", "state": "ready" | "failed", "error": "..."}
                    {"id": 7, "ok": true, "text": "...", "pieces": [...], "confidence": [...], "ms": 12.5}
                    {"id": 7, "ok": false, "reason": "superseded" | "cancelled" | "model" | "error",
                     "error": "..."}
A fill supersedes any older fill with the same key from the same connection."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from pathlib import Path

WIRE_VERSION = 1
MAX_LINE = 64 * 1024 * 1024  # bytes; a line longer than this closes the connection


def private_dir() -> Path:
    """A directory only this user can enter, created 0700 when missing. RuntimeError when it exists
    but someone else owns it or others can enter it (someone could swap the socket)."""
    base = os.environ.get("XDG_RUNTIME_DIR")
    if base and Path(base).is_dir():
        folder = Path(base) / "diffusion-lsp"
    else:
        folder = Path(tempfile.gettempdir()) / f"diffusion-lsp-{os.getuid()}"
    ensure_private_dir(folder)
    return folder


def ensure_private_dir(folder: Path) -> None:
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    info = folder.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        raise RuntimeError(f"{folder} must be a directory owned by uid {os.getuid()} with mode 0700 "
                           f"(found mode {stat.S_IMODE(info.st_mode):o}, uid {info.st_uid})")


def default_socket(model: str | None, device: str, precision: str = "auto") -> Path:
    """One worker per (checkpoint folder, device, precision): sessions with the same model share it."""
    model_key = str(Path(model).resolve()) if model else "<embedded>"
    digest = hashlib.sha256(f"{model_key}\0{device}\0{precision}".encode()).hexdigest()[:16]
    return private_dir() / f"worker-{digest}.sock"


def encode(message: dict) -> bytes:
    return (json.dumps(message, separators=(",", ":")) + "\n").encode()


def decode(line: bytes) -> dict:
    """One line -> a message; ValueError when it is not a JSON object."""
    message = json.loads(line)
    if not isinstance(message, dict):
        raise ValueError(f"expected a JSON object, got {type(message).__name__}")
    return message
