"""What a backend failure (protocol/failure.py) is to the language server, said once: every request
it fails is answered empty and logged at one level. The backend itself has already shown the user
what needs their attention (a worker that cannot start or crashed, a key the API refused) once, and
logged its errors, so a request logs at debug; only an order that can never be done (INVALID: this
input does not fit the model) is worth an info line. A superseded one (DROPPED) is counted, not
counted, not logged. `answering` is that ladder, the one every request of the server goes through."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from ..protocol.failure import BackendError, Failure


class BadInput(Exception):
    """An expected refusal (unknown document, position past the end, ...): answered empty, logged."""


def log_level(error: BackendError) -> str:
    return "info" if error.kind is Failure.INVALID else "debug"


@contextmanager
def answering(stats, log: Callable[[str, str], None], what: str) -> Iterator[None]:
    """A request's work, with what ends it early mapped once: bad input is counted and logged at
    info, a backend failure logged at its level (a superseded request counted, not logged), a
    cancel counted and passed on, and a bug logged as an error: it costs one answer, not the
    session. `stats` counts bad_input, superseded, cancelled and errors."""
    try:
        yield
    except BadInput as e:
        stats.bad_input += 1
        log("info", f"no {what}: {e}")
    except BackendError as e:
        if e.kind is Failure.DROPPED:
            stats.superseded += 1
        else:
            log(log_level(e), f"no {what}: {e}")
    except asyncio.CancelledError:
        stats.cancelled += 1
        raise
    except Exception as e:
        stats.errors += 1
        log("error", f"{what} failed: {type(e).__name__}: {e}")
