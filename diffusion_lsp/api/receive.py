"""uvicorn's HTTP/1.1 protocol (h11) with a deadline on receiving each request.

uvicorn has none: a client that sends its headers or its body a byte at a time holds a connection
open for as long as it likes (60 trickling connections were all still open after 20 s), and its
keep-alive timer is reset by every byte. Here each request, headers and body, must arrive within
`receive_s` of the connection opening or of the previous response; past it the connection is closed."""

from __future__ import annotations

import asyncio

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


def with_receive_deadline(receive_s: float) -> type[H11Protocol]:
    """The protocol class to give uvicorn (`http=`), with its deadline."""
    return type("ReceiveDeadlineH11", (ReceiveDeadlineH11,), {"receive_s": receive_s})


class ReceiveDeadlineH11(H11Protocol):
    receive_s = 20.0
    _deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport) -> None:
        super().connection_made(transport)
        self._arm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self.conn.their_state is h11.IDLE:  # waiting for the next request on this connection
            self._arm()

    def handle_events(self) -> None:
        super().handle_events()
        if self.conn.their_state is not h11.IDLE and self.conn.their_state is not h11.SEND_BODY:
            self._disarm()  # the request is in (or the connection is done)

    def connection_lost(self, exc) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.receive_s, self._too_slow)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _too_slow(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            self.logger.info("closed a connection whose request took over %g s to arrive", self.receive_s)
            self.transport.close()
