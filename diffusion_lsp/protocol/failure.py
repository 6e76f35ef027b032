"""The one failure type that crosses the Backend: why a backend gave no answer, as a kind from one
vocabulary, and for an order let go before its answer (DROPPED) why it was stopped, from another
(`Stop`), the same on both sides of the worker's socket. Each caller maps a kind once: the language
server to a log level and an empty answer (server/failures.py), serve-api to an HTTP status
(api/service.py)."""

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


class Stop(enum.Enum):
    """Why an order was stopped before its answer (its failure is DROPPED): said where it is stopped
    (the lifecycle's ticket, a backend, the worker) and carried over the worker's wire by its value."""

    SUPERSEDED = "superseded"  # a newer order for the same key came
    CANCELLED = "cancelled"  # whoever waited for it stopped waiting: a cancel, a missed deadline, its client gone

    @property
    def said(self) -> str:
        """For a person, when the stopper has nothing more precise to say."""
        return "superseded by a newer request" if self is Stop.SUPERSEDED else self.value

    @classmethod
    def of(cls, value) -> Stop:
        """The member a peer named; ValueError naming the value and the known ones, never a guess."""
        try:
            return cls(value)
        except ValueError:
            raise ValueError(f"unknown stop reason {value!r} (known: {', '.join(s.value for s in cls)})") from None


class BackendError(Exception):
    """A backend gave no answer: `kind` says why, the message says it for a person (one line, no
    secrets), `param` names the order's field at fault for an INVALID one, `stop` why a DROPPED one was
    stopped (`dropped` makes one; a DROPPED error without it, or another with it, is a ValueError)."""

    def __init__(self, kind: Failure, message: str = "", param: str | None = None, stop: Stop | None = None):
        if (kind is Failure.DROPPED) != (stop is not None):
            raise ValueError(f"a {kind.value} failure with stop {stop}: a stop reason goes with DROPPED alone")
        super().__init__(message or (stop.said if stop is not None else kind.value))
        self.kind, self.param, self.stop = kind, param, stop

    @classmethod
    def dropped(cls, stop: Stop, message: str = "") -> BackendError:
        """An order let go before its answer, and why (the message, when given, says more)."""
        return cls(Failure.DROPPED, message, stop=stop)

    def message(self, rid) -> dict:
        """The worker's "no" to a request, in the wire form `from_message` reads back."""
        msg = {"id": rid, "ok": False, "failure": self.kind.value, "error": str(self)}
        if self.param is not None:
            msg["param"] = self.param
        if self.stop is not None:
            msg["stop"] = self.stop.value
        return msg

    @classmethod
    def from_message(cls, msg: dict) -> BackendError:
        """A "no" (ok: false) as the failure it names; a failure kind this side does not know is
        REFUSED. A dropped one names its stop reason, and one this side does not know (or none) is a
        ValueError saying so: the peer speaks another protocol."""
        try:
            kind = Failure(msg.get("failure"))
        except ValueError:
            kind = Failure.REFUSED
        stop = Stop.of(msg.get("stop")) if kind is Failure.DROPPED else None
        error, param = msg.get("error"), msg.get("param")
        return cls(kind, error if isinstance(error, str) and error else f"the worker said {kind.value}",
                   param if isinstance(param, str) else None, stop)

    @property
    def retryable(self) -> bool:
        """Asking again later may succeed (the same order never does when it is INVALID or REFUSED)."""
        return self.kind in (Failure.STARTING, Failure.LOST, Failure.TIMEOUT, Failure.BUSY)
