"""The Backend's fill orders decoded as one batch for a caller that answers each order as it ends: the
worker (worker/process.py), which streams the drafts, answers a finished order at once and lets queued
orders join while there is room (continuous batching). It steps no sampler itself: each turn of the batch
is one step of the engine's decoding (model/decoding/drive.py), driven with the orders' stop flags.
The orders are protocol/requests.py's FillRequest."""

from __future__ import annotations

from collections.abc import Iterator

from ..protocol.answers import Draft, Fill
from ..model.decoding.drive import steps


class FillBatch:
    """Fill orders (FillRequest, one sampling config for all) decoding together. Each turn
    of `for drafts in batch` is one step and gives (order index, Draft) for the orders that asked
    (FillRequest.drafts); `finished()` gives the orders that ended since it was last asked, each with its
    Fill (None: stopped); `join` adds orders between turns where the decoding `joins`. stops[i] is order
    i's stop flag (a threading.Event): once it is set, the order gets no more drafts and is stopped
    before the next step."""

    def __init__(self, engine, orders, keys, stops):
        """keys[i] names order i's document (its context is remembered for its next fill)."""
        self.engine, self.stops = engine, list(stops)
        self.decoding = engine.decode_orders(orders, keys)

    @property
    def joins(self) -> bool:
        return self.decoding.joins

    def active(self) -> int:
        """Orders neither finished nor stopped yet."""
        return self.decoding.active()

    def join(self, orders, keys, stops) -> None:
        """Orders that join between turns (the same sampling); their indices follow every earlier order's."""
        self.engine.join(self.decoding, orders, keys)
        self.stops += stops

    def __iter__(self) -> Iterator[list[tuple[int, Draft]]]:
        return steps(self.decoding, self.stops)

    def finished(self) -> list[tuple[int, Fill | None]]:
        return [(i, self.engine.answer_of(self.decoding, i)) for i in self.decoding.take_finished()]
