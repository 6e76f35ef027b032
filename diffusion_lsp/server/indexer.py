"""Work on open documents that no request waits for: other documents' definitions indexed
(context/index.py) and an opened document's line tokens counted, debounced after didOpen and
didChange, in a background thread of its own.

Cross-file context looks indexes up and never builds one on the request path (`index.indexed`):
indexing a 2 MB document takes hundreds of milliseconds, and with 32 documents open a request
used to pay for every one that had changed. The index itself is built in a child process at low
priority (`build_elsewhere`): tree-sitter holds the GIL while it parses, so a thread of this
process would stall the event loop (measured: a 15,000-line file's parse delays a 1 ms timer by
up to 50 ms), and on a 2-core machine the model worker should get the cores first."""

from __future__ import annotations

import asyncio
import logging
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from ..context.index import INDEXES, DocIndex, build_index
from ..context.languages import language_for
from ..context.types import Document

log = logging.getLogger("diffusion-lsp.indexer")
DEBOUNCE_S = 0.3  # typing in a document re-indexes it once the user pauses


def _lower_priority() -> None:
    try:
        os.nice(10)
    except OSError:
        pass


def _build(doc: Document) -> DocIndex | None:
    spec = language_for(doc.language_id, doc.uri)
    return None if spec is None else build_index(doc, spec)


class ProcessBuilder:
    """Builds an index in a child process (spawned on first use, niced) and caches it here. When
    the child cannot run (it died, or cannot be spawned), the index is built in this thread."""

    def __init__(self):
        self.pool: ProcessPoolExecutor | None = None
        self.failures = 0

    def __call__(self, doc: Document) -> DocIndex | None:
        if language_for(doc.language_id, doc.uri) is None:
            return None
        if self.failures >= 2:
            return INDEXES.put(doc, _build(doc))
        if self.pool is None:
            self.pool = ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                            initializer=_lower_priority)
        try:
            index = self.pool.submit(_build, doc).result()
        except BrokenProcessPool:
            self.failures += 1
            log.warning("the indexing process died (%d); %s", self.failures,
                        "starting another" if self.failures < 2 else "indexing in a thread from now on")
            self.pool = None
            return INDEXES.put(doc, _build(doc))
        return INDEXES.put(doc, index)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


class Indexer:
    """`schedule(uri)` on the event loop; `get(uri)` returns the document's current snapshot (or None
    once it is closed) when the work starts, so a burst of edits is indexed once, at its end.
    `build(doc)` indexes one document and `prime(text)` counts its tokens (both in the thread)."""

    def __init__(self, get: Callable[[str], Document | None], build: Callable[[Document], object] | None = None,
                 debounce_s: float = DEBOUNCE_S):
        self.get, self.debounce_s = get, debounce_s
        self.build = build if build is not None else ProcessBuilder()
        self.thread = ThreadPoolExecutor(1, thread_name_prefix="diffusion-lsp-index")
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._running: set[asyncio.Future] = set()

    def schedule(self, uri: str, prime: Callable[[str], object] | None = None, now: bool = False) -> None:
        """Index `uri` after the debounce (at once with `now`: a document just opened); with
        `prime`, also count its tokens ahead."""
        if (timer := self._timers.pop(uri, None)) is not None:
            timer.cancel()
        loop = asyncio.get_running_loop()
        self._timers[uri] = loop.call_later(0 if now else self.debounce_s, self._start, uri, prime)

    def _start(self, uri: str, prime) -> None:
        self._timers.pop(uri, None)
        doc = self.get(uri)
        if doc is None or INDEXES.is_current(doc) and prime is None:
            return
        fut = asyncio.get_running_loop().run_in_executor(self.thread, self._work, doc, prime)
        self._running.add(fut)
        fut.add_done_callback(self._running.discard)

    def _work(self, doc: Document, prime) -> None:
        try:
            self.build(doc)
            if prime is not None:
                prime(doc.text)
        except Exception:  # an optimisation only: a request does without the index
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
        if isinstance(self.build, ProcessBuilder):
            self.build.close()
