"""The one failure type that crosses the Backend: why a backend gave no answer, as a kind from one
vocabulary. Each caller maps a kind once: the language server to a log level and an empty answer
(server/failures.py), serve-api to an HTTP status (api/service.py)."""

from __future__ import annotations

import enum


class Failure(enum.Enum):
    DROPPED = "dropped"  # superseded by a newer order for the same key, or cancelled: nobody waits for it
    OFF = "off"  # the backend is turned off (completion.enable false, model.backend none)
    STARTING = "starting"  # the model is loading, or the worker restarting: ask again soon
    LOST = "lost"  # the worker went away during the order (killed, crashed); it restarts
    UNAVAILABLE = "unavailable"  # it cannot start, failed to load, or cannot be reached (the message says)
    TIMEOUT = "timeout"  # no answer within the deadline
    BUSY = "busy"  # the backend is overloaded or rate-limited (a remote API's 429 after its retries)
    REFUSED = "refused"  # this order failed in the backend (an error, an unusable answer); others may not
    INVALID = "invalid"  # the order can never be done (a canvas past the model's positions): `param` names why


class BackendError(Exception):
    """A backend gave no answer: `kind` says why, the message says it for a person (one line, no
    secrets), `param` names the order's field at fault for an INVALID one."""

    def __init__(self, kind: Failure, message: str = "", param: str | None = None):
        super().__init__(message or kind.value)
        self.kind, self.param = kind, param

    def message(self, rid) -> dict:
        """The worker's "no" to a request, in the wire form `from_message` reads back."""
        msg = {"id": rid, "ok": False, "failure": self.kind.value, "error": str(self)}
        if self.param is not None:
            msg["param"] = self.param
        return msg

    @classmethod
    def from_message(cls, msg: dict) -> BackendError:
        """A "no" (ok: false) as the failure it names; one this side does not know is REFUSED."""
        try:
            kind = Failure(msg.get("failure"))
        except ValueError:
            kind = Failure.REFUSED
        error, param = msg.get("error"), msg.get("param")
        return cls(kind, error if isinstance(error, str) and error else f"the worker said {kind.value}",
                   param if isinstance(param, str) else None)

    @property
    def retryable(self) -> bool:
        """Asking again later may succeed (the same order never does when it is INVALID or REFUSED)."""
        return self.kind in (Failure.STARTING, Failure.LOST, Failure.TIMEOUT, Failure.BUSY)
