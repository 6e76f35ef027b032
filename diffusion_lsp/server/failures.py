"""What a backend failure (protocol/failure.py) is to the language server, said once: every request
it fails is answered empty and logged at one level. The backend itself has already shown the user
what needs their attention (a worker that cannot start or crashed, a key the API refused) once, and
logged its errors, so a request logs at debug; only an order that can never be done (INVALID: this
input does not fit the model) is worth an info line. A superseded one (DROPPED) is counted, not
logged (the callers check for it first)."""

from __future__ import annotations

from ..protocol.failure import BackendError, Failure


def log_level(error: BackendError) -> str:
    return "info" if error.kind is Failure.INVALID else "debug"
