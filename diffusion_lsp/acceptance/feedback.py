"""What the user did with what was shown, kept on this machine only, to refit the acceptance model
(`diffusion-lsp calibrate --feedback`).

Each suggestion the acceptance model chose is remembered per document with its features. The
editor's accept command marks it kept; a partial accept (Copilot's didPartiallyAcceptCompletion)
marks it partly kept; the next suggestion chosen for the same document while it is still pending
marks it not kept. One JSON line per decided suggestion goes to feedback.jsonl in this machine's
state folder (local_state.py): the features and the two labels, never the text or the file's name.
Nothing is ever sent anywhere; `completion.feedback: false` turns it off. The file stops growing
at MAX_BYTES (one log line says so)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..input_files import Refused, parse_json, read_bytes
from ..local_state import state_dir
from .features import MAX_FEATURE

FEEDBACK_FILE = "feedback.jsonl"
MAX_BYTES = 8 << 20  # about 8,000 suggestions


def feedback_path() -> Path:
    return state_dir() / FEEDBACK_FILE


class Feedback:
    def __init__(self, path: Path | None = None, log=lambda kind, message: None):
        self.path, self.log = path or feedback_path(), log
        self.enabled = True
        self._pending: dict[str, dict] = {}  # uri -> the features of the suggestion shown there
        self._last: str | None = None  # the document of the latest one (a partial accept may not name it)
        self._said_full = False

    def shown(self, uri: str, feats: dict[str, float]) -> None:
        """A suggestion was chosen for `uri`: the one still pending there was not kept."""
        self._decide(uri, kept=False, partly=False)
        if self.enabled:
            self._pending[uri], self._last = feats, uri

    def accepted(self, uri: str) -> None:
        self._decide(uri, kept=True, partly=True)

    def partly_accepted(self, uri: str | None) -> None:
        """Part of it was accepted (word by word); `uri` None: the latest suggestion's document."""
        self._decide(uri or self._last or "", kept=False, partly=True)

    def _decide(self, uri: str, kept: bool, partly: bool) -> None:
        feats = self._pending.pop(uri, None)
        if feats is None or not self.enabled:
            return
        line = json.dumps({"feats": feats, "kept": kept, "partly": partly}) + "\n"
        try:
            if self.path.exists() and self.path.stat().st_size + len(line) > MAX_BYTES:
                if not self._said_full:
                    self._said_full = True
                    self.log("info", f"acceptance feedback: {self.path} is full ({MAX_BYTES >> 20} MiB); "
                                     "nothing more is kept (delete it to start again)")
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o600)
            with os.fdopen(fd, "a", encoding="utf-8") as f:
                f.write(line)
        except OSError as e:  # a read-only home: feedback is a nicety, completions go on
            if not self._said_full:
                self._said_full = True
                self.log("info", f"acceptance feedback cannot be kept ({e})")


def read_feedback(path: Path | None = None) -> list[tuple[dict, bool, bool]]:
    """(features, kept, partly) of every well-formed line of the feedback file, read by input_files (a
    FIFO or /dev/zero in its place is no file: []); a line whose features are not finite numbers of at
    most MAX_FEATURE is skipped; [] when none."""
    path = path or feedback_path()
    out = []
    try:
        lines = read_bytes(str(path), 2 * MAX_BYTES).decode("utf-8", errors="replace").splitlines()
    except Refused:
        return []
    for line in lines:
        try:
            raw = parse_json(line, str(path))
        except Refused:
            continue
        feats = raw.get("feats") if isinstance(raw, dict) else None
        if isinstance(feats, dict) and all(isinstance(v, (int, float)) and not isinstance(v, bool)
                                           and abs(v) <= MAX_FEATURE for v in feats.values()):
            out.append(({str(k): float(v) for k, v in feats.items()}, raw.get("kept") is True,
                        raw.get("partly") is True))
    return out
