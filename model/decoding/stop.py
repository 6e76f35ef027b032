"""An order's stop flag where the model runs: a loop that drives the model itself (a structured
answer's, model/structured/constrained.py) ends at its next forward once its order is stopped (cancelled,
superseded, its client gone), as the sampler's rows end between steps (Decoding.stop). The flag is a
threading.Event set by whoever owns the order (the worker's socket thread, the in-process backend); the
model's thread only reads it."""

from __future__ import annotations

import threading


class OrderStopped(Exception):
    """The order was stopped before it was done; the message says how far it got."""


class Watched:
    """The model (DiffusionTransformer) for one order: each forward first looks at `stop`, and raises
    OrderStopped once it is set. `forwards` counts the passes the order made."""

    def __init__(self, model, stop: threading.Event):
        self.model, self.stop, self.forwards = model, stop, 0

    @property
    def config(self):
        return self.model.config

    def parameters(self):
        return self.model.parameters()

    def logits(self, h):
        return self.model.logits(h)

    def hidden(self, *args, **kwargs):
        if self.stop.is_set():
            raise OrderStopped(f"stopped after {self.forwards} forward{'s' * (self.forwards != 1)}")
        self.forwards += 1
        return self.model.hidden(*args, **kwargs)


def watched(model, stop: threading.Event | None):
    """`model` as an order with `stop` sees it (the model itself without one)."""
    return model if stop is None else Watched(model, stop)
