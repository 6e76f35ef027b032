"""One request's life, written once for the language server, serve-api and the backends: a newer
request for the same key supersedes it (`Latest`: its holder's flag is set), it may wait for typing
to pause first (`Ticket.debounce`), its work races whatever ends it early -- a newer request, the
client leaving, a shutdown (`race`) -- and it has a deadline (`deadline`). The work itself is a
coroutine that calls down (a pipeline over a Backend); it is cancelled, never called back, when it
loses the race, and cancelling it cancels the request in the backend. How it ended is a
BackendError of protocol/failure.py: DROPPED (Stop.SUPERSEDED) when superseded, TIMEOUT past its
deadline."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

from .protocol.failure import BackendError, Failure, Stop

T = TypeVar("T")


class Stopped(Exception):
    """Something that ends the request came before its work's answer; the work was cancelled."""


async def race(work: Awaitable[T], *stops: Awaitable) -> T:
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


@asynccontextmanager
async def deadline(seconds: float, message: str, on_timeout: Callable[[], None] = lambda: None) -> AsyncIterator[None]:
    """`async with deadline(...)`: the body is cancelled once `seconds` pass, and BackendError(TIMEOUT,
    message) raised (`on_timeout` told first: a count, a report). The body's work is awaited in
    the caller's own task: no task of its own to start and schedule."""
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError:
        on_timeout()
        raise BackendError(Failure.TIMEOUT, message) from None


class Flag(Protocol):
    """What a superseded request is told through: an asyncio.Event, a threading.Event (the model's
    thread reads it between steps), a Ticket."""

    def set(self) -> None: ...


F = TypeVar("F", bound=Flag)


class Latest(Generic[F]):
    """At most one live request per key: a request that claims a key supersedes the one that held
    it (`supersede`, by default setting its flag). An empty key supersedes nothing and is superseded
    by nothing. `take` holds a key for a block; `claim` and `release` for a request whose life ends
    elsewhere (the worker's queue)."""

    def __init__(self, make: Callable[[Hashable], F] | None = None,
                 supersede: Callable[[F], None] = lambda flag: flag.set()):
        self._make, self._supersede = make, supersede
        self._latest: dict[Hashable, F] = {}

    def claim(self, key: Hashable, flag: F) -> None:
        if key:
            if (old := self._latest.get(key)) is not None:
                self._supersede(old)
            self._latest[key] = flag

    def release(self, key: Hashable, flag: F) -> None:
        if key and self._latest.get(key) is flag:
            del self._latest[key]

    def supersede_all(self) -> None:
        """Every live request is superseded (a shutdown); the keys are free again."""
        for flag in list(self._latest.values()):
            self._supersede(flag)
        self._latest.clear()

    @contextmanager
    def take(self, key: Hashable) -> Iterator[F]:
        flag = self._make(key)
        self.claim(key, flag)
        try:
            yield flag
        finally:
            self.release(key, flag)


@dataclass
class Ticket:
    """One request's place: `superseded` is set when a newer request for its key arrives."""

    key: str
    superseded: asyncio.Event = field(default_factory=asyncio.Event)

    def set(self) -> None:
        """A newer request for the key arrived."""
        self.superseded.set()

    async def debounce(self, seconds: float) -> bool:
        """Wait `seconds` for typing to pause; False when a newer request came meanwhile."""
        if seconds <= 0:
            return not self.superseded.is_set()
        try:
            await asyncio.wait_for(self.superseded.wait(), seconds)
            return False
        except asyncio.TimeoutError:
            return True

    async def pause(self, seconds: float) -> None:
        """The debounce of a request that ends when it is superseded meanwhile: BackendError(DROPPED,
        SUPERSEDED) then."""
        if not await self.debounce(seconds):
            raise BackendError.dropped(Stop.SUPERSEDED, "superseded while waiting for typing to pause")

    async def run(self, work: Awaitable[T]) -> T:
        """`work`'s result; BackendError(DROPPED, SUPERSEDED) when a newer request supersedes this one
        first: then `work` is cancelled at once (in the backend too), and its answer, even one that
        came anyway in the same turn as the newer request, is never returned."""
        if self.superseded.is_set():
            if asyncio.iscoroutine(work):
                work.close()
            raise BackendError.dropped(Stop.SUPERSEDED)
        try:
            result = await race(work, self.superseded.wait())
        except Stopped:
            raise BackendError.dropped(Stop.SUPERSEDED) from None
        if self.superseded.is_set():  # both ended in one turn: the race gave the work's answer
            raise BackendError.dropped(Stop.SUPERSEDED)
        return result


def tickets() -> Latest[Ticket]:
    """The language server's requests, one live Ticket per document."""
    return Latest(Ticket)
