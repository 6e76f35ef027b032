"""The model worker process: `python -m diffusion_lsp.server.worker --socket PATH [--model DIR]`.

It owns the model (and the GPU), so the language server's event loop never blocks on it and
several editor sessions can share one loaded model. The socket side is listener.py; here, one model
thread: fills queued at the same time with the same sampling settings are decoded as one batch.
A newer fill for the same document (key) supersedes older ones: a queued one is answered at once,
a running one is abandoned between denoising steps (sampler `should_stop`). Protocol: wire.py."""

from __future__ import annotations

import argparse
import logging
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..model.settings import LaunchSettings, SamplerConfig, add_args, from_args
from .listener import Conn, bind, serve
from .wire import WIRE_VERSION

log = logging.getLogger("diffusion-lsp.worker")


def token_pieces(tok, ids: list[int], text: str) -> list[str]:
    """Per-token text whose concatenation is `text`: incremental decoding (a multi-byte character
    split across tokens lands on the token that completes it), minus the token-healing prefix the
    sampler removed from `text`."""
    pieces, prev = [], ""
    for k in range(1, len(ids) + 1):
        cur = tok.decode(ids[:k])
        if cur.endswith("\ufffd") and k < len(ids):
            pieces.append("")
            continue
        pieces.append(cur[len(prev):] if cur.startswith(prev) else cur)
        prev = cur
    drop = len("".join(pieces)) - len(text)
    for i in range(len(pieces)):
        if drop <= 0:
            break
        cut = min(drop, len(pieces[i]))
        pieces[i], drop = pieces[i][cut:], drop - cut
    return pieces if "".join(pieces) == text else [text] + [""] * (len(ids) - 1)


@dataclass(eq=False)
class Job:
    conn: Conn
    id: object
    key: str
    request: object  # FillRequest
    sampling: SamplerConfig
    stop: threading.Event = field(default_factory=threading.Event)
    reason: str = "cancelled"


class Worker:
    def __init__(self, load: Callable[[], object], model: str = "", max_batch: int = 8):
        self._load, self.model, self.max_batch = load, model, max_batch
        self.state, self.error, self.engine = "loading", None, None
        self.cond = threading.Condition()
        self.queue: list[Job] = []
        self.jobs: dict[tuple[int, object], Job] = {}  # queued and running, by (conn, request id)
        self.latest: dict[tuple[int, str], Job] = {}  # by (conn, key)
        self.conns: set[Conn] = set()

    def hello(self) -> dict:
        return {"event": "hello", "version": WIRE_VERSION, "pid": os.getpid(), "state": self.state,
                "error": self.error, "model": self.model}

    def connect(self, conn: Conn) -> None:
        with self.cond:
            self.conns.add(conn)
            conn.send(self.hello())

    def disconnect(self, conn: Conn) -> None:
        with self.cond:
            self.conns.discard(conn)
            for job in [j for j in self.jobs.values() if j.conn is conn]:
                self._stop(job, "cancelled", reply=False)

    def handle(self, conn: Conn, msg: dict) -> None:
        op = msg.get("op")
        if op == "fill":
            self._submit(conn, msg)
        elif op == "cancel":
            with self.cond:
                if (job := self.jobs.get((conn.id, msg.get("id")))) is not None:
                    self._stop(job, "cancelled")
        else:
            conn.send({"id": msg.get("id"), "ok": False, "reason": "error", "error": f"unknown op {op!r}"})

    def _submit(self, conn: Conn, msg: dict) -> None:
        from ..model.canvas import FillRequest

        rid, key = msg.get("id"), str(msg.get("key", ""))
        prefix, suffix, n, sampling = (msg.get(k) for k in ("prefix", "suffix", "max_tokens", "sampling"))
        one_line = msg.get("one_line", False)
        if not (isinstance(prefix, str) and isinstance(suffix, str) and isinstance(n, int) and n >= 1
                and isinstance(one_line, bool)):
            conn.send({"id": rid, "ok": False, "reason": "error", "error": "bad fill request"})
            return
        try:
            sampling = SamplerConfig.from_wire(sampling)
        except ValueError as e:  # refused for this request alone, before it can join a batch
            conn.send({"id": rid, "ok": False, "reason": "error", "error": f"bad sampling settings: {e}"})
            return
        job = Job(conn, rid, key, FillRequest(prefix, suffix, n, id=rid, one_line=one_line, doc=key), sampling)
        with self.cond:
            if self.state == "failed":
                conn.send({"id": rid, "ok": False, "reason": "model", "error": self.error})
                return
            if (old := self.latest.get((conn.id, key))) is not None:
                self._stop(old, "superseded")
            self.latest[(conn.id, key)] = self.jobs[(conn.id, rid)] = job
            self.queue.append(job)
            self.cond.notify()

    def _stop(self, job: Job, reason: str, reply: bool = True) -> None:
        """Call with the lock held. Queued: answered now; running: the model loop answers."""
        job.reason = reason
        job.stop.set()
        if job in self.queue:
            self.queue.remove(job)
            self._forget(job)
            if reply:
                job.conn.send({"id": job.id, "ok": False, "reason": reason})

    def _forget(self, job: Job) -> None:
        self.jobs.pop((job.conn.id, job.id), None)
        if self.latest.get((job.conn.id, job.key)) is job:
            del self.latest[(job.conn.id, job.key)]

    def _set_state(self, state: str, error: str | None = None) -> None:
        with self.cond:
            self.state, self.error = state, error
            for conn in list(self.conns):
                conn.send({"event": "state", "state": state, "error": error})
            if state == "failed":
                for job in list(self.queue):
                    self.queue.remove(job)
                    self._forget(job)
                    job.conn.send({"id": job.id, "ok": False, "reason": "model", "error": error})

    def run(self) -> None:
        """The model thread: load, warm up, then decode batches forever."""
        try:
            self.engine = self._load()
            from ..model.canvas import FillRequest

            self.engine.fill([FillRequest("def f(x):\n", "\n", 4)])  # first-call kernel set-up, off the clock
        except Exception as e:
            log.exception("model failed to load")
            expected = type(e).__name__ in ("CheckpointError", "ModelMissing", "ValueError")  # the message says it
            self._set_state("failed", str(e) if expected else f"{type(e).__name__}: {e}")
            return
        self._set_state("ready")
        while True:
            with self.cond:
                while not self.queue:
                    self.cond.wait()
                first = self.queue[0].sampling
                batch = [j for j in self.queue if j.sampling == first][: self.max_batch]
                for job in batch:
                    self.queue.remove(job)
            self._decode(batch)

    def _decode(self, batch: list[Job]) -> None:
        try:
            results = self.engine.fill([j.request for j in batch], batch[0].sampling,
                                       should_stop=lambda i: batch[i].stop.is_set())
            replies = [self._reply(j, r) for j, r in zip(batch, results)]
        except Exception as e:  # a bad request (e.g. sampling values) fails its batch, not the worker
            log.exception("fill failed")
            replies = [{"id": j.id, "ok": False, "reason": "error", "error": f"{type(e).__name__}: {e}"}
                       for j in batch]
        with self.cond:
            for job, reply in zip(batch, replies):
                self._forget(job)
                job.conn.send(reply)

    def _reply(self, job: Job, r) -> dict:
        if job.stop.is_set() or r.cancelled:
            return {"id": job.id, "ok": False, "reason": job.reason}
        return {"id": job.id, "ok": True, "text": r.text, "confidence": r.confidence, "ms": r.ms,
                "pieces": token_pieces(self.engine.tokenizer, r.token_ids, r.text), "forwards": r.forwards,
                "reused": r.reused}


class ModelMissing(Exception):
    pass


def load_model(launch: LaunchSettings):
    if launch.path and not (Path(launch.path) / "config.json").is_file():  # fail fast, before importing torch
        raise ModelMissing(f"no checkpoint at {launch.path} (config.json is missing)")
    from ..engine import load_engine

    return load_engine(launch)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m diffusion_lsp.server.worker")
    p.add_argument("--socket", required=True)
    add_args(p, LaunchSettings)
    p.add_argument("--idle-exit", type=float, default=600.0, help="seconds without clients before exiting")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s worker %(process)d %(levelname)s %(message)s")
    path = Path(args.socket)
    bound = bind(path)
    if bound is None:
        print("busy", flush=True)  # the spawner connects to the worker that holds the lock
        return 0
    listener, _lock = bound
    launch = from_args(LaunchSettings, args)
    worker = Worker(lambda: load_model(launch), str(launch.path or "<embedded>"))
    print(f"ready {os.getpid()}", flush=True)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)  # whoever read that line may be gone
    threading.Thread(target=worker.run, daemon=True).start()
    log.info("serving %s (model %s)", path, worker.model)
    try:
        serve(listener, worker, args.idle_exit)
    finally:
        path.unlink(missing_ok=True)
    log.info("no client for %.0f s, exiting", args.idle_exit)
    return 0


if __name__ == "__main__":
    code = main()
    logging.shutdown()
    os._exit(code)  # not sys.exit: the model thread may be inside torch, which aborts on finalization
