"""The worker's local socket: where it lives, who may open it, and its JSON-lines messages.

The socket sits in a directory only its owner can enter (0700, under $XDG_RUNTIME_DIR or the temp
dir) and is itself 0600, so only the user who started the worker can send it code to complete.

Messages, one JSON object per line (`WIRE_VERSION` in hello; a client refuses another version):
  client -> worker  {"op": "fill", "id": 7, "key": "file:///a.py", "prefix": "...", "suffix": "...",
                     "max_tokens": 32, "one_line": true, "sampling": SamplerConfig.to_wire(),
                     "drafts": true (optional: the draft after every denoising step, as below)}
                    {"op": "cancel", "id": 7}
                    {"op": "ping", "id": 8}
  worker -> client  {"event": "hello", "version": 3, "pid": 123, "state": "loading", "model": "...",
                     "build": "0.1.0+3f2a...", "weights": "9c1e..."} (a client refuses another build
                     or other weights: the worker runs other code, or an older copy of the model)
                    {"event": "state", "state": "ready" | "failed", "error": "...", "max_tokens": 511}
                     (max_tokens, once ready: the largest canvas a fill may ask for)
                    {"id": 7, "draft": "def f(x): \u2592\u2592", "committed": "def f(x): ", "step": 2,
                     "masked": 2}  (only for a fill with drafts, before its answer)
                    {"id": 7, "ok": true, "text": "...", "pieces": [...], "confidence": [...], "ms": 12.5,
                     "forwards": 3, "reused": 120, "batch": 4}
                    {"id": 7, "ok": false, "reason": "superseded" | "cancelled" | "model" | "error" | "invalid",
                     "error": "...", "param": "max_tokens"} (invalid: the same on every try; param: its field)
                    {"id": 8, "ok": true, "pong": true, "busy_s": 0.4}  (answered by the socket thread,
                     so a worker whose model thread is busy still answers; one that is stopped does not)
A fill supersedes any older fill with the same key from the same connection. `FillOrder` and
`Fill` are the two typed ends of a fill; both sides speak only through them."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from .. import __version__
from ..engine import model_folder
from ..model.config import regular_file
from ..model.settings import LaunchSettings, SamplerConfig

WIRE_VERSION = 3
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


def default_socket(launch: LaunchSettings, prefix: str = "worker") -> Path:
    """One worker per (install, model, launch settings): sessions with the same ones share it, and
    a new or upgraded install, or changed weights, never reach an older worker (worker_key)."""
    return private_dir() / f"{prefix}-{worker_key(launch)}.sock"


def worker_key(launch: LaunchSettings) -> str:
    """What must match for a worker to serve a session: this install's code (build_id), the model
    folder and its weights (weights_id), and the launch settings that shape the worker."""
    parts = [build_id(), model_name(launch), weights_id(launch), *launch.to_argv()]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


@functools.cache
def build_id() -> str:
    """This install's code: its version, where it lives, and its newest source file (an upgrade or
    an edited checkout is another build). Stats the package's ~200 files once per process."""
    package = Path(__file__).resolve().parents[1]
    newest = max((p.stat().st_mtime_ns for p in package.rglob("*.py")), default=0)
    digest = hashlib.sha256(f"{package}\0{newest}".encode()).hexdigest()[:12]
    return f"{__version__}+{digest}"


def weights_id(launch: LaunchSettings) -> str:
    """A fingerprint of the model folder's config and weights: each file's name, size, mtime and
    its first MiB (the safetensors header and the first tensors) -- not the whole file, which for a
    7B checkpoint would take seconds at every start. Empty for a remote backend or a missing folder."""
    if launch.backend != "local":
        return ""
    folder = model_folder(launch.path)
    h = hashlib.sha256()
    for path in sorted([*folder.glob("*.safetensors"), folder / "config.json"]):
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


@dataclass(frozen=True)
class FillOrder:
    """What the language server asks the worker to fill."""

    prefix: str
    suffix: str
    max_tokens: int
    one_line: bool = False  # the caller keeps the first line only: the worker stops once it is written
    sampling: SamplerConfig = field(default_factory=SamplerConfig)
    drafts: bool = False  # the worker sends the draft after every denoising step (serve-api's streams)

    def message(self, rid: int, key: str) -> dict:
        msg = {"op": "fill", "id": rid, "key": key, "prefix": self.prefix, "suffix": self.suffix,
               "max_tokens": self.max_tokens, "one_line": self.one_line, "sampling": self.sampling.to_wire()}
        if self.drafts:
            msg["drafts"] = True
        return msg

    @classmethod
    def from_message(cls, msg: dict) -> FillOrder:
        """ValueError naming what is wrong with a fill message."""
        prefix, suffix, n = (msg.get(k) for k in ("prefix", "suffix", "max_tokens"))
        one_line = msg.get("one_line", False)
        if not isinstance(prefix, str) or not isinstance(suffix, str):
            raise ValueError("prefix and suffix must be strings")
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 4096:
            raise ValueError(f"max_tokens must be an integer between 1 and 4096, got {n!r}")
        drafts = msg.get("drafts", False)
        if not isinstance(one_line, bool) or not isinstance(drafts, bool):
            raise ValueError(f"one_line and drafts must be true or false, got {one_line!r} and {drafts!r}")
        return cls(prefix, suffix, n, one_line, SamplerConfig.from_wire(msg.get("sampling", {})), drafts)


@dataclass
class Fill:
    """The worker's answer for one canvas."""

    text: str
    pieces: list[str]  # per-token text, "".join(pieces) == text
    confidence: list[float]  # per token
    ms: float = 0.0
    forwards: int = 0
    reused: int = 0  # context positions the worker reused from this document's last fill
    end_confidence: float = 1.0  # how sure the model was that the text ends where it does
    batch: int = 1  # requests decoded in the same batch (one forward pass per step for all of them)

    def message(self, rid) -> dict:
        return {"id": rid, "ok": True, "text": self.text, "pieces": self.pieces, "confidence": self.confidence,
                "ms": self.ms, "forwards": self.forwards, "reused": self.reused, "end_confidence": self.end_confidence,
                "batch": self.batch}

    @classmethod
    def from_message(cls, msg: dict) -> Fill:
        """ValueError when an ok reply does not have the shape `message` gives it."""
        text, pieces, conf = msg.get("text"), msg.get("pieces"), msg.get("confidence")
        if not (isinstance(text, str) and isinstance(pieces, list) and isinstance(conf, list)
                and all(isinstance(p, str) for p in pieces) and "".join(pieces) == text
                and len(pieces) == len(conf) and all(isinstance(c, (int, float)) for c in conf)):
            raise ValueError("a fill reply whose text, pieces and confidence do not line up")
        ms, forwards, reused = msg.get("ms", 0.0), msg.get("forwards", 0), msg.get("reused", 0)
        end = msg.get("end_confidence", 1.0)
        end = float(end) if isinstance(end, (int, float)) and not isinstance(end, bool) else 1.0
        batch = msg.get("batch", 1)
        batch = batch if isinstance(batch, int) and not isinstance(batch, bool) and batch >= 1 else 1
        return cls(text, pieces, [float(c) for c in conf], float(ms), int(forwards), int(reused), end, batch)


@dataclass(frozen=True)
class ProbeOrder:
    """How sure the model is of `middle`'s tokens between prefix and suffix (model/probe.py)."""

    prefix: str
    middle: str
    suffix: str
    stride: int = 4  # interleaved passes: each token is judged with (stride - 1) / stride of its neighbours

    def message(self, rid: int, key: str) -> dict:
        return {"op": "probe", "id": rid, "key": key, "prefix": self.prefix, "middle": self.middle,
                "suffix": self.suffix, "stride": self.stride}

    @classmethod
    def from_message(cls, msg: dict) -> ProbeOrder:
        """ValueError naming what is wrong with a probe message."""
        texts = [msg.get(k) for k in ("prefix", "middle", "suffix")]
        stride = msg.get("stride", 4)
        if not all(isinstance(t, str) for t in texts):
            raise ValueError("prefix, middle and suffix must be strings")
        if not isinstance(stride, int) or isinstance(stride, bool) or not 1 <= stride <= 16:
            raise ValueError(f"stride must be an integer between 1 and 16, got {stride!r}")
        return cls(*texts, stride)


@dataclass
class Probed:
    """The worker's answer to a probe: per token of the middle, its text, the model's probability
    of it, and that of the model's own first choice."""

    pieces: list[str]
    prob: list[float]
    best: list[float]
    forwards: int = 0
    ms: float = 0.0

    def message(self, rid) -> dict:
        return {"id": rid, "ok": True, "pieces": self.pieces, "prob": self.prob, "best": self.best,
                "forwards": self.forwards, "ms": self.ms}

    @classmethod
    def from_message(cls, msg: dict) -> Probed:
        pieces, prob, best = msg.get("pieces"), msg.get("prob"), msg.get("best")
        if not (isinstance(pieces, list) and isinstance(prob, list) and isinstance(best, list)
                and len(pieces) == len(prob) == len(best) and all(isinstance(p, str) for p in pieces)
                and all(isinstance(x, (int, float)) for x in prob + best)):
            raise ValueError("a probe reply whose pieces and probabilities do not line up")
        return cls(pieces, [float(x) for x in prob], [float(x) for x in best], int(msg.get("forwards", 0)),
                   float(msg.get("ms", 0.0)))


@dataclass(frozen=True)
class DraftEvent:
    """A fill's draft after a denoising step (FillOrder.drafts): model/sampler.py's Draft on the wire."""

    step: int
    committed: str  # the text up to the first masked position: a prefix of the final text
    text: str  # the whole canvas, masked positions shown as a glyph
    masked: int

    def message(self, rid) -> dict:
        return {"id": rid, "draft": self.text, "committed": self.committed, "step": self.step, "masked": self.masked}

    @classmethod
    def from_message(cls, msg: dict) -> DraftEvent | None:
        text, committed, step, masked = (msg.get(k) for k in ("draft", "committed", "step", "masked"))
        if not (isinstance(text, str) and isinstance(committed, str) and isinstance(step, int)
                and isinstance(masked, int)):
            return None
        return cls(step, committed, text, masked)


class FillRefused(Exception):
    """The worker answered a fill with ok: false; `reason` is superseded, cancelled, model, error or
    invalid (the order can never be done, e.g. a canvas past the model's positions: `param` names
    the field at fault)."""

    def __init__(self, reason: str, error: str | None = None, param: str | None = None):
        super().__init__(f"{reason}: {error}" if error else reason)
        self.reason, self.error, self.param = reason, error, param
