"""What a backend failure (backend/failure.py) is to the language server, said once: every request
it fails is answered empty, and logged at this level. The backend itself has already shown the
user what needs their attention (a worker that cannot start, a key the API refused) once, so a
request only logs; a superseded one (DROPPED) is counted, not logged."""

from __future__ import annotations

from ..backend.failure import BackendError, Failure

LEVELS = {
    Failure.DROPPED: "debug",
    Failure.OFF: "debug",
    Failure.STARTING: "debug",  # the progress report says the model is loading
    Failure.LOST: "debug",  # the backend showed the crash and restarts the worker
    Failure.UNAVAILABLE: "debug",  # shown once by the backend
    Failure.TIMEOUT: "debug",  # the backend logs a slow or hung worker
    Failure.BUSY: "debug",
    Failure.REFUSED: "debug",  # the backend logged the error
    Failure.INVALID: "info",  # this input cannot be done: worth a line in the log
}


def log_level(error: BackendError) -> str:
    return LEVELS[error.kind]
