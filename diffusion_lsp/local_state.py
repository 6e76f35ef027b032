"""What this machine keeps outside every repository, in $XDG_STATE_HOME/diffusion-lsp
(~/.local/state when unset): what the server has said once (server/notice.py), and which workspace
models this machine adapted.

A repository is someone else's: a clone that ships its own `.diffusion-lsp/model` (our format,
claiming Go and next edits, say) must not choose the model that answers the user. So `adapt`
records each model folder it writes (`trust`), and the language server uses a workspace's model
without a setting only when it is recorded for that workspace with the same files (`trusted`);
anything else needs the user's model.path. The record, trusted-models.json, maps the resolved
folder to the resolved workspace it was adapted for and a fingerprint of the folder's files (each
one's name, size and mtime), which changes when any is replaced, added or removed."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

from .input_files import Refused, read_json

REPORT = "adapt.json"  # adapt's figures beside the model, written after it: no part of what loads
TRUST_FILE = "trusted-models.json"
TRUST_FORMAT = 1


def state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "diffusion-lsp"


def fingerprint(folder: Path) -> str | None:
    """A digest of (name, size, mtime) of every file directly in `folder` but REPORT and hidden
    ones (a rename's leftovers); None when the folder cannot be listed."""
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
        stats = [(e.name, st.st_size, st.st_mtime_ns) for e in entries
                 if e.name != REPORT and not e.name.startswith(".") and not e.is_dir(follow_symlinks=False)
                 for st in (e.stat(follow_symlinks=False),)]
    except OSError:
        return None
    return hashlib.sha256(json.dumps(stats).encode()).hexdigest()[:32]


MAX_STATE_BYTES = 1 << 20  # a state file is a few hundred bytes a model or notice


def read_state(path: Path):
    """The JSON in one of the state folder's files, or None when input_files refuses it: missing, not a
    regular file (a FIFO there kept the language server from answering initialize: opened without
    blocking, then checked), more than MAX_STATE_BYTES, not JSON, too deep or not finite."""
    try:
        return read_json(str(path), MAX_STATE_BYTES)
    except Refused:
        return None


def _record() -> dict:
    raw = read_state(state_dir() / TRUST_FILE)
    models = raw.get("models") if isinstance(raw, dict) and raw.get("format") == TRUST_FORMAT else None
    return models if isinstance(models, dict) else {}


def trust(folder: Path, workspace: Path) -> bool:
    """Record that this machine wrote the model in `folder`, adapted for `workspace`; False when the
    state cannot be written (the server then needs model.path for it)."""
    stamp = fingerprint(folder)
    if stamp is None:
        return False
    models = {k: v for k, v in _record().items() if os.path.isdir(k)}  # folders removed since are forgotten
    models[str(folder.resolve())] = {"workspace": str(workspace.resolve()), "files": stamp}
    path = state_dir() / TRUST_FILE
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{TRUST_FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"format": TRUST_FORMAT, "models": models}, indent=2) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except OSError:
        return False
    return True


def trusted(folder: Path, workspace: Path) -> bool:
    """Whether `adapt` on this machine wrote `folder` for `workspace`, and its files are the ones it wrote."""
    try:
        entry = _record().get(str(folder.resolve()))
        root = str(workspace.resolve())
    except (OSError, RuntimeError):
        return False
    return isinstance(entry, dict) and entry.get("workspace") == root and \
        entry.get("files") is not None and entry.get("files") == fingerprint(folder)
