"""One request's life, the same for an inline completion, a next edit and an HTTP request: a newer
request for the same document supersedes it (`Tickets`), it may wait for typing to pause first
(`Ticket.quiet`), and its work races whatever ends it early -- a newer request, the client leaving,
a shutdown (`first`). The work itself is a coroutine that calls down (a pipeline over a Backend);
it is cancelled, never called back, when it loses the race, and cancelling it cancels the order in
the backend."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TypeVar

from .protocol.failure import BackendError, Failure

T = TypeVar("T")


class Stopped(Exception):
    """Something that ends the request came before its work's answer; the work was cancelled."""


async def first(work: Awaitable[T], *stops: Awaitable) -> T:
    """`work`'s result, unless one of `stops` completes first: then `work` is cancelled and Stopped
    raised. Cancelling this coroutine cancels `work` too. A stop given as a coroutine is cancelled
    when this returns; one given as a future (a watch the caller reuses) is left running."""
    task = asyncio.ensure_future(work)
    waiters = [asyncio.ensure_future(s) for s in stops]
    owned = [w for w, s in zip(waiters, stops) if not isinstance(s, asyncio.Future)]
    try:
        await asyncio.wait({task, *waiters}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in owned:
            w.cancel()
        if not task.done():  # cancelled, and let it unwind before this returns: a generator it was
            task.cancel()    # stepping (a stream's next item) is then closed, not still running
            await asyncio.wait({task})
    if task.cancelled():
        raise Stopped()
    return task.result()


@dataclass
class Ticket:
    """One request's place: `superseded` is set when a newer request for its key arrives."""

    key: str
    superseded: asyncio.Event = field(default_factory=asyncio.Event)

    async def quiet(self, seconds: float) -> bool:
        """The debounce: wait `seconds`; False when a newer request came meanwhile."""
        if seconds <= 0:
            return not self.superseded.is_set()
        try:
            await asyncio.wait_for(self.superseded.wait(), seconds)
            return False
        except asyncio.TimeoutError:
            return True

    async def run(self, work: Awaitable[T]) -> T:
        """`work`'s result; BackendError(DROPPED) when a newer request supersedes this one first."""
        if self.superseded.is_set():
            if asyncio.iscoroutine(work):
                work.close()
            raise BackendError(Failure.DROPPED, "superseded by a newer request")
        try:
            return await first(work, self.superseded.wait())
        except Stopped:
            raise BackendError(Failure.DROPPED, "superseded by a newer request") from None


class Tickets:
    """At most one live request per key: taking a ticket supersedes the key's older one."""

    def __init__(self):
        self._latest: dict[str, Ticket] = {}

    @contextmanager
    def take(self, key: str) -> Iterator[Ticket]:
        ticket = Ticket(key)
        if (old := self._latest.get(key)) is not None:
            old.superseded.set()
        self._latest[key] = ticket
        try:
            yield ticket
        finally:
            if self._latest.get(key) is ticket:
                del self._latest[key]
