"""The model worker process (`python -m diffusion_lsp.worker --socket PATH [--model DIR]`: __main__.py).

It owns the model (and the GPU), so the language server's event loop never blocks on it and
several editor sessions can share one loaded model. The socket side is listener.py; here, one model
thread: fills queued at the same time with the same sampling settings are decoded as one batch, and
with continuous batching (the default) a fill that arrives while a batch decodes joins it at the
next step, and a finished fill is answered at once and leaves its place to the next.
A newer fill for the same document (key) supersedes older ones: a queued one is answered at once, a
running one is abandoned between denoising steps (the engine's batch, engine/batch.py, is given every
job's stop flag); a structured answer, a rewrite or an edit from an instruction is given its job's stop
flag and ends at its next step or forward (model/decoding/stop.py; a probe, a few forwards, runs to its end). A
fill whose settings are bad is refused on arrival, alone, before it can join (and fail) a batch; an
order that fails in the model fails alone or with its batch, never the model thread. A ping says how
long the model thread has held an order that was stopped and not let it go, or that the thread is gone:
its clients restart such a worker (link.py). A model that has not loaded within `load_timeout_s` is
"failed", with that reason. Protocol: wire.py.
Single orders: model/decoding/probe.py, model/structured/constrained.py, formats/instruct.py, model/families/native.py."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..lifecycle import Latest
from ..protocol.failure import BackendError, Failure, Stop
from ..protocol.requests import (FillRequest, InstructRequest, ProbeRequest, RewriteRequest, StructuredRequest,
                                 max_tokens_refusal)
from ..model.decoding.canvas import DoesNotFit
from ..protocol.settings import LaunchSettings
from ..model.decoding.stop import OrderStopped
from .listener import Conn
from .spec import LOAD_TIMEOUT_S, MAX_BATCH
from .wire import WIRE_VERSION, build_id, model_name, weights_id

log = logging.getLogger("diffusion-lsp.worker")
WARM_UP = FillRequest("def f(x):\n", "\n", 4)  # first-call kernel set-up, before the worker says ready
ORDERS = {"fill": FillRequest, "probe": ProbeRequest, "rewrite": RewriteRequest, "structured": StructuredRequest,
          "instruct": InstructRequest}  # by their op


def unloaded(error: str | None) -> BackendError:
    """Every request while the model failed to load: the user's next step is in `error`."""
    return BackendError(Failure.UNAVAILABLE, f"the model failed to load: {error}")


class ModelMissing(Exception):
    """No checkpoint where the launch settings point: the message says where."""


class LoadFailed(Exception):
    """The model could not be loaded; the message is for the user."""


@dataclass(eq=False)
class Job:
    conn: Conn
    id: object
    key: str
    order: FillRequest | ProbeRequest | RewriteRequest
    stop: threading.Event = field(default_factory=threading.Event)
    reason: Stop = Stop.CANCELLED  # why `stop` was set
    stopped_at: float | None = None  # monotonic, when `stop` was set
    let_go: bool = False  # the model thread is done with it (answered, or its row stopped)


class Worker:
    """`load()` returns an engine (diffusion_lsp.engine: `batch`, `answer_probe`, ...) or raises;
    LoadFailed and ModelMissing carry a message for the user, anything else is shown with its type."""

    def __init__(self, load: Callable[[], object], launch: LaunchSettings = LaunchSettings(),
                 max_batch: int = MAX_BATCH, continuous: bool = True, load_timeout_s: float = LOAD_TIMEOUT_S):
        self._load, self.max_batch, self.continuous = load, max_batch, continuous
        self.load_timeout_s = load_timeout_s
        self.model, self.weights = model_name(launch), weights_id(launch)  # said in hello
        self.state, self.error, self.engine = "loading", None, None
        self.cond = threading.Condition()
        self.queue: list[Job] = []
        self.jobs: dict[tuple[int, object], Job] = {}  # queued and running, by (conn, request id)
        self.latest = Latest(supersede=lambda job: self._stop(job, Stop.SUPERSEDED))  # by (conn, key)
        self.conns: set[Conn] = set()
        self.busy_since: float | None = None  # monotonic start of the batch being decoded
        self.running: list[Job] = []  # the batch's jobs (joiners too), until it ends
        self.died: str | None = None  # why the model thread ended, if it did

    def hello(self) -> dict:
        return {**self._state(), "event": "hello", "version": WIRE_VERSION, "pid": os.getpid(), "model": self.model,
                "build": build_id(), "weights": self.weights}

    def has_clients(self) -> bool:
        with self.cond:
            return bool(self.conns)

    def connect(self, conn: Conn) -> None:
        with self.cond:
            self.conns.add(conn)
            conn.send(self.hello())

    def disconnect(self, conn: Conn) -> None:
        with self.cond:
            self.conns.discard(conn)
            for job in [j for j in self.jobs.values() if j.conn is conn]:
                self._stop(job, Stop.CANCELLED, reply=False)

    def handle(self, conn: Conn, msg: dict) -> None:
        """One message from a client: an order is queued for the model thread (a newer one for the same
        key supersedes it), a cancel stops one, a ping is answered at once."""
        op, rid = msg.get("op"), msg.get("id")
        if op in ORDERS:
            try:
                order = ORDERS[op].from_message(msg)
            except ValueError as e:
                conn.send(BackendError(Failure.REFUSED, f"bad {op} request: {e}").message(rid))
                return
            job = Job(conn, rid, str(msg.get("key", "")), order)
            with self.cond:
                if self.state == "failed":
                    conn.send(unloaded(self.error).message(rid))
                    return
                self.latest.claim((conn.id, job.key), job)
                self.jobs[(conn.id, rid)] = job
                self.queue.append(job)
                self.cond.notify()
        elif op == "cancel":
            with self.cond:
                if (job := self.jobs.get((conn.id, rid))) is not None:
                    self._stop(job, Stop.CANCELLED)
        elif op == "ping":
            since, now = self.busy_since, time.monotonic()
            conn.send({"id": rid, "ok": True, "pong": True,
                       "busy_s": 0.0 if since is None else round(now - since, 3),
                       **({} if (stuck := self.stuck_s(now)) is None else {"stuck_s": round(stuck, 3)}),
                       **({"dead": self.died} if self.died else {})})
        else:
            conn.send(BackendError(Failure.REFUSED, f"unknown op {op!r}").message(rid))

    def stuck_s(self, now: float) -> float | None:
        """How long the model thread has held a job that was stopped and not let it go (None when none):
        a healthy one lets go at its next step or forward. Without the lock, as the ping's busy_s: the
        socket thread answers a ping at once, whatever holds the lock."""
        return max((now - j.stopped_at for j in list(self.running) if j.stopped_at is not None and not j.let_go),
                   default=None)

    def _stop(self, job: Job, reason: Stop, reply: bool = True) -> None:
        """Call with the lock held. Queued: answered now; running: the model loop answers."""
        job.reason = reason
        if not job.stop.is_set():
            job.stop.set()
            job.stopped_at = time.monotonic()
        if job in self.queue:
            self.queue.remove(job)
            self._forget(job)
            if reply:
                job.conn.send(BackendError.dropped(reason).message(job.id))

    def _forget(self, job: Job) -> None:
        job.let_go = True
        self.jobs.pop((job.conn.id, job.id), None)
        self.latest.release((job.conn.id, job.key), job)

    def _state(self) -> dict:
        """The state event; once loaded, with the largest canvas a fill may ask for (max_tokens)."""
        more = ({"max_tokens": self.engine.max_tokens(), "capabilities": self.engine.capabilities.message()}
                if self.state == "ready" else {})
        return {"event": "state", "state": self.state, "error": self.error, **more}

    def _set_state(self, state: str, error: str | None = None) -> None:
        with self.cond:
            self.state, self.error = state, error
            for conn in list(self.conns):
                conn.send(self._state())
            if state == "failed":
                for job in list(self.queue):
                    self.queue.remove(job)
                    self._forget(job)
                    job.conn.send(unloaded(error).message(job.id))

    def load_overdue(self) -> None:
        """The load deadline (a timer `start` sets): a model still loading is "failed", with the reason,
        rather than "loading" for good; if it loads later it stays failed (the deadline has been said)."""
        with self.cond:
            if self.state != "loading":
                return
            log.error("the model did not load within %g s", self.load_timeout_s)
            self._set_state("failed", f"the model did not load within {self.load_timeout_s:g} s (its load timeout: "
                                      "worker.loadTimeoutS in the editor, --load-timeout for serve-api)")

    def run(self) -> None:
        """The model thread: load and warm up, then take the queue's orders, a batch at a time, forever."""
        if not self._start():
            return
        try:
            while True:
                batch = self._take()
                try:
                    if isinstance(batch[0].order, FillRequest):
                        self._decode(batch)
                    else:
                        self._single(batch[0])
                except Exception as e:  # a failure the order's own handling missed fails its batch, not the thread
                    log.exception("a batch failed")
                    self._fail(self.running, f"{type(e).__name__}: {e}")
                finally:
                    with self.cond:
                        self.busy_since, self.running = None, []
        except BaseException as e:  # not an order's failure (those are answered): the thread is gone, and pings say so
            log.exception("the model thread died")
            with self.cond:
                self.died = f"{type(e).__name__}: {e}"
                self.cond.notify_all()
            raise

    def _start(self) -> bool:
        """Load the model and warm it up -> whether it is ready (else the state says why)."""
        try:
            self.engine = self._load()
            self.engine.answer([WARM_UP], [""])
        except Exception as e:
            log.exception("model failed to load")
            expected = isinstance(e, (LoadFailed, ModelMissing, ValueError))  # the message says it all
            with self.cond:
                if self.state == "loading":
                    self._set_state("failed", str(e) if expected else f"{type(e).__name__}: {e}")
            return False
        with self.cond:
            if self.state != "loading":  # past its deadline (load_overdue)
                log.warning("the model loaded after its load timeout; it stays failed")
                return False
            self._set_state("ready")
        return True

    def _take(self) -> list[Job]:
        """The next batch off the queue (waiting for one): one probe, rewrite, instruct or structured
        order alone, or fills with equal (frozen) settings, which decode together."""
        with self.cond:
            while not self.queue:
                self.cond.wait()
            first = self.queue[0].order
            batch = self._fills(first.sampling, self.max_batch) if isinstance(first, FillRequest) else [self.queue[0]]
            for job in batch:
                self.queue.remove(job)
            self.busy_since, self.running = time.monotonic(), list(batch)
        return batch

    def _fail(self, jobs: list[Job], why: str) -> None:
        """Answer "error" to each of `jobs` not answered yet."""
        with self.cond:
            for job in jobs:
                if self.jobs.get((job.conn.id, job.id)) is job:
                    self._forget(job)
                    job.conn.send(BackendError(Failure.REFUSED, why).message(job.id))

    def _admit(self, jobs: list[Job]) -> list[Job]:
        """The jobs whose canvas fits the model; the others are answered "invalid" (the same on every try)."""
        limit = self.engine.max_tokens()
        refused = [(j, max_tokens_refusal(j.order.max_tokens, limit), "max_tokens")
                   for j in jobs if j.order.max_tokens > limit]
        failed = []
        for job in jobs:
            if job.order.chat and not any(j is job for j, _, _ in refused):
                try:  # a conversation the template fails on, or too long, fails alone, not its batch
                    self.engine.chat_prompt(job.order.chat, job.order.max_tokens)
                except ValueError as e:
                    refused.append((job, str(e), "messages"))
                except Exception as e:  # not the conversation's fault as far as we know (RecursionError, a bug)
                    log.exception("a conversation's prompt failed")
                    failed.append(job)
                    self._fail([job], f"{type(e).__name__}: {e}")
        with self.cond:
            for job, why, param in refused:
                self._forget(job)
                job.conn.send(BackendError(Failure.INVALID, why, param).message(job.id))
        dropped = {id(j) for j, _, _ in refused} | {id(j) for j in failed}
        return [j for j in jobs if id(j) not in dropped]

    def _fills(self, sampling, n: int) -> list[Job]:
        """Up to n queued fills with these (frozen) settings, oldest first; call with the lock held."""
        return [j for j in self.queue if isinstance(j.order, FillRequest) and j.order.sampling == sampling][:n]

    def _joiners(self, sampling, room: int) -> list[Job]:
        """Queued fills that may join the running batch (continuous batching): the same sampling, up
        to `room`, and only while the oldest queued job is one of them, so a probe or a fill with
        other settings waits for this batch to drain, not for a stream of newcomers to stop."""
        with self.cond:
            if room <= 0 or not self.queue:
                return []
            head = self.queue[0].order
            if not isinstance(head, FillRequest) or head.sampling != sampling:
                return []
            jobs = self._fills(sampling, room)
            for job in jobs:
                self.queue.remove(job)
        return self._admit(jobs)

    def _decode(self, batch: list[Job]) -> None:
        """Decode `batch` through the engine (its FillBatch), step by step; between steps, stopped jobs
        leave, finished ones are answered at once, and queued ones with the same settings join while there
        is room."""
        jobs = self._admit(batch)  # jobs[i] is the decoding's request i
        if not jobs:
            return
        sampling, answered = jobs[0].order.sampling, set()

        def reply(i: int, message: dict) -> None:
            answered.add(i)
            with self.cond:
                self._forget(jobs[i])
                jobs[i].conn.send(message)

        def answer_finished() -> None:
            for i, fill in fills.finished():
                job = jobs[i]
                reply(i, BackendError.dropped(job.reason).message(job.id) if fill is None or job.stop.is_set()
                      else fill.message(job.id))

        try:
            fills = self.engine.batch([j.order for j in jobs], [j.key for j in jobs], [j.stop for j in jobs])
            for drafts in fills:  # one denoising step each
                for i, d in drafts:
                    jobs[i].conn.send(d.message(jobs[i].id))
                if self.continuous:
                    answer_finished()
                for job in jobs:  # superseded, cancelled or disconnected meanwhile: stopped before the next step
                    if job.stop.is_set():
                        job.let_go = True
                room = self.max_batch - fills.active()
                if self.continuous and fills.joins and (new := self._joiners(sampling, room)):
                    with self.cond:
                        self.running += new
                    fills.join([j.order for j in new], [j.key for j in new], [j.stop for j in new])
                    jobs += new
            answer_finished()
        except Exception as e:  # a request the checks let through fails its batch, not the worker
            log.exception("fill failed")
            for i, job in enumerate(jobs):
                if i not in answered:
                    reply(i, BackendError(Failure.REFUSED, f"{type(e).__name__}: {e}").message(job.id))

    def _single(self, job: Job) -> None:
        """A probe, a structured answer, an edit from an instruction or a rewrite (a model asked through
        its prompt)."""
        try:
            if isinstance(job.order, ProbeRequest):
                answer = self.engine.answer_probe(job.order, job.key)
            elif isinstance(job.order, StructuredRequest):
                answer = self.engine.answer_structured(job.order, job.stop)
            elif isinstance(job.order, InstructRequest):
                answer = self.engine.answer_instruct(job.order, job.stop)
            else:
                answer = self.engine.answer_rewrite(job.order, job.stop)
            reply = (answer if not job.stop.is_set() else BackendError.dropped(job.reason)).message(job.id)
        except OrderStopped as e:  # cancelled, superseded or its client gone, at its next step or forward
            log.info("%s %s: %s (%s)", type(job.order).__name__, job.id, job.reason.value, e)
            reply = BackendError.dropped(job.reason).message(job.id)
        except DoesNotFit as e:  # the same on every try
            reply = BackendError(Failure.INVALID, str(e),
                                 e.param or ("middle" if isinstance(job.order, ProbeRequest) else "messages")).message(job.id)
        except ValueError as e:  # an order this model cannot answer (no probe, no rewrite): the same on every try
            reply = BackendError(Failure.INVALID, str(e)).message(job.id)
        except Exception as e:
            log.exception("%s failed", type(job.order).__name__)
            reply = BackendError(Failure.REFUSED, f"{type(e).__name__}: {e}").message(job.id)
        with self.cond:
            self._forget(job)
            job.conn.send(reply)


def start(worker: Worker) -> None:
    """The worker's model thread, and the deadline of its load (Worker.load_overdue)."""
    threading.Thread(target=worker.run, daemon=True, name="model").start()
    deadline = threading.Timer(worker.load_timeout_s, worker.load_overdue)
    deadline.daemon = True
    deadline.start()


def load_model(launch: LaunchSettings):
    # fail fast, before importing torch; exists, not is_file: a FIFO or a folder there is the loader's error
    if launch.path and not (Path(launch.path) / "config.json").exists():
        raise ModelMissing(f"no checkpoint at {launch.path} (config.json is missing)")
    from ..engine import load_engine
    from ..model.families.checkpoint import CheckpointError

    try:
        return load_engine(launch)
    except CheckpointError as e:
        raise LoadFailed(str(e)) from None
