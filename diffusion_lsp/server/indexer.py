"""Work on open documents that no request waits for, debounced after didOpen and didChange: other
documents' definitions indexed (context/index.py) and an opened document's line tokens counted.

Cross-file context looks indexes up and never builds one on the request path (`index.indexed`):
indexing a 2 MB document takes hundreds of milliseconds, and with 32 documents open a request
would pay for every one that had changed (`bench lsp`'s crowded replay: 0.9 s at p95). The work itself runs in a child process at idle
priority (`ChildProcess`): tree-sitter holds the GIL while it parses, so a thread of this process
would stall the event loop (measured: a 15,000-line file's parse delays a 1 ms timer by up to
50 ms), and on a 2-core machine the model worker's threads stall badly when anything else takes a
core (the worker's fill p95 went from 47 to 217 ms while 30 opened documents were counted at
normal priority). A thread of this process only waits for the child and stores what it returns."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path

from ..context.cutting import MemoCounter
from ..context.index import INDEXES, DocIndex, build_index
from ..context.languages import language_for
from ..context.tokens import model_token_counter
from ..context.records import Document

log = logging.getLogger("diffusion-lsp.indexer")
DEBOUNCE_S = 1.0  # typing in a document re-indexes it once the user pauses (definitions rarely move)
Run = Callable[..., object]  # run(fn, *args) -> fn(*args), somewhere else


def _child_start(parent: int) -> None:
    """The child's set-up: idle priority, and it dies with the server (a server killed with -9 left
    its indexing child, and so multiprocessing's resource tracker, running for good)."""
    _idle_priority()
    threading.Thread(target=_exit_with, args=(parent,), daemon=True, name="diffusion-lsp-parent").start()


def _exit_with(parent: int, every_s: float = 0.5) -> None:
    """Exit once `parent` is gone: this process is then re-parented, so getppid() changes."""
    while os.getppid() == parent:
        time.sleep(every_s)
    os._exit(0)


def _idle_priority() -> None:
    """Only the CPU time nothing else wants: SCHED_IDLE where there is one, else nice 19."""
    try:
        os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
    except (AttributeError, OSError):
        try:
            os.nice(19)
        except OSError:
            pass


def index_of(doc: Document) -> DocIndex | None:
    spec = language_for(doc.language_id, doc.uri)
    return None if spec is None else build_index(doc, spec)


_COUNTERS: dict[str, Callable] = {}


def count_lines(model: str, lines: list[str]) -> list[int]:
    """Token counts of `lines` with a model folder's tokenizer (loaded once per child process)."""
    count = _COUNTERS.get(model) or _COUNTERS.setdefault(model, model_token_counter(model))
    many = getattr(count, "many", None)
    return many(lines) if many else [count(s) for s in lines]


class ChildProcess:
    """`run(fn, *args)` in one child process at idle priority, spawned on first use. When the child
    dies twice (or cannot be spawned), the work runs in the calling thread from then on."""

    def __init__(self):
        self.pool: ProcessPoolExecutor | None = None
        self.failures = 0

    def __call__(self, fn, *args):
        if self.failures >= 2:
            return fn(*args)
        if self.pool is None:
            self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                            initializer=_child_start, initargs=(os.getpid(),))
        try:
            return self.pool.submit(fn, *args).result()
        except BrokenProcessPool:
            self.failures += 1
            log.warning("the indexing process died (%d); %s", self.failures,
                        "starting another" if self.failures < 2 else "working in a thread from now on")
            self.pool = None
            return fn(*args)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


class Indexer:
    """`schedule(uri)` on the event loop; `get(uri)` returns the document's current snapshot (or None
    once it is closed) when the work starts, so a burst of edits is indexed once, at its end."""

    def __init__(self, get: Callable[[str], Document | None], run: Run | None = None, debounce_s: float = DEBOUNCE_S):
        self.get, self.debounce_s = get, debounce_s
        self.run = run if run is not None else ChildProcess()
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="diffusion-lsp-index")
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._running: set[asyncio.Future] = set()

    def schedule(self, uri: str, counts: tuple[MemoCounter, Path] | None = None, now: bool = False) -> None:
        """Index `uri` after the debounce (at once with `now`: a document just opened); with
        `counts` (the memo and the model folder whose tokenizer counts), also count its lines' tokens ahead."""
        if (timer := self._timers.pop(uri, None)) is not None:
            timer.cancel()
        loop = asyncio.get_running_loop()
        self._timers[uri] = loop.call_later(0 if now else self.debounce_s, self._start, uri, counts)

    def _start(self, uri: str, counts) -> None:
        self._timers.pop(uri, None)
        doc = self.get(uri)
        if doc is None or INDEXES.is_current(doc) and counts is None:
            return
        fut = asyncio.get_running_loop().run_in_executor(self.thread, self._work, doc, counts)
        self._running.add(fut)
        fut.add_done_callback(self._running.discard)

    def _work(self, doc: Document, counts) -> None:
        try:
            INDEXES.put(doc, self.run(index_of, doc))
            if counts is not None:
                memo, model = counts
                todo = memo.missing(doc.text)
                memo.keep_many(todo, self.run(count_lines, str(model), todo))
        except RuntimeError as e:  # the server is shutting down under it (its executors are closed)
            log.info("indexing %s stopped: %s", doc.uri, e)
        except Exception:  # an optimisation only: a request does without it
            log.exception("indexing %s failed", doc.uri)

    async def idle(self) -> None:
        """Wait until nothing is scheduled or running (for tests and shutdown)."""
        while self._timers or self._running:
            if self._running:
                await asyncio.wait(set(self._running))
            else:
                await asyncio.sleep(self.debounce_s / 4)

    def close(self) -> None:
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self.thread.shutdown(wait=False, cancel_futures=True)
        if isinstance(self.run, ChildProcess):
            self.run.close()
