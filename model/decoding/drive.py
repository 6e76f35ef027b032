"""What every decoding is, and the one loop that drives one to its end.

Three decodings share one shape: sampler.py's `Decoding` (our models, batched, requests may join),
model/families/dreamon.py's `VariableDecoding` (DreamOn's span that grows and shrinks, one request after another) and
model/families/native.py's `NativeDecoding` (transformers' own generation, a step at a time). `Decoding` below declares
it. Its caller drives it a step per turn and nothing is called back: between turns the caller stops
requests, asks which ended, and (where `joins`) adds more.

`steps` is the turn loop with stop flags (model/decoding/stop.py's threading.Event, set by whoever owns a
request: the worker's socket thread, the in-process backend); `run` drives a decoding to its end."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # torch: imported with the model, not with this module
    from .canvas import CanvasRequest
    from ...protocol.answers import Draft
    from .results import FillResult

# None: nothing stops; an Event: every request once it is set; a sequence: request i's is stop[i] (one
# that joined past the sequence's end has none). Read between steps, so a step always finishes.
Stop = threading.Event | Sequence[threading.Event] | None


class Decoding(Protocol):
    """A batch of requests decoded step by step. Each turn of `for drafts in decoding` is one step
    and gives (request index, Draft) for the unfinished requests that asked (CanvasRequest.drafts)."""

    joins: bool  # add() is allowed

    def __iter__(self) -> Iterator[list[tuple[int, Draft]]]: ...

    def __len__(self) -> int:
        """The requests, joined ones included (request indices are 0 .. len - 1)."""

    def stop(self, i: int) -> None:
        """Abandon request i before the next step (its result is cancelled); stopping an ended one does nothing."""

    def take_finished(self) -> list[int]:
        """The requests that ended (done or stopped) since the last call, each said once."""

    def active(self) -> int:
        """Requests neither finished nor stopped yet."""

    def add(self, requests: list[CanvasRequest]) -> list[int]:
        """Requests that join between steps -> their indices; ValueError where `joins` is False."""

    def result(self, i: int) -> FillResult: ...

    def results(self) -> list[FillResult]: ...


class Turns:
    """The bookkeeping every decoding shares: its requests' records (`fills`, one per request index),
    the ones that ended since it was last asked (`finished`), and their results (`result`, each
    decoding's own). A decoding whose batch is fixed at its start says so with `joins = False`."""

    joins = True
    fills: list
    finished: list[int]

    def __len__(self) -> int:
        return len(self.fills)

    def take_finished(self) -> list[int]:
        done, self.finished = self.finished, []
        return done

    def add(self, requests: list[CanvasRequest]) -> list[int]:
        raise ValueError(f"{type(self).__name__} cannot be joined: its batch is fixed at its start")

    def result(self, i: int) -> FillResult:
        raise NotImplementedError

    def results(self) -> list[FillResult]:
        return [self.result(i) for i in range(len(self))]


def stopped(stop: Stop, decoding: Decoding) -> list[int]:
    """The requests of `decoding` whose stop flag is set."""
    if stop is None:
        return []
    if isinstance(stop, threading.Event):
        return list(range(len(decoding))) if stop.is_set() else []
    return [i for i, s in enumerate(stop) if s.is_set()]


def steps(decoding: Decoding, stop: Stop = None) -> Iterator[list[tuple[int, Draft]]]:
    """The decoding's turns, without the drafts of requests whose flag is set; after each turn (so
    the first step always runs) the requests whose flag is set are stopped, before the next step. A
    sequence of flags may grow while it runs (requests joining)."""
    for drafts in decoding:
        gone = set(stopped(stop, decoding))
        yield [(i, d) for i, d in drafts if i not in gone]
        for i in stopped(stop, decoding):
            decoding.stop(i)


def run(decoding: Decoding, stop: Stop = None) -> int:
    """Drive `decoding` to its end, stopping requests as their flags are set -> the turns it took."""
    turns = 0
    for _ in steps(decoding, stop):
        turns += 1
    return turns
