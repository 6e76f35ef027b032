"""The one interface every model backend gives the language server, serve-api, the command line
and the evaluations (none of them imports torch through it):

    await backend.fill(key, order)        -> Fill       a canvas filled (FillRequest)
    async for item in backend.stream(...) -> Draft*, Fill   the same, with the draft after each step
    await backend.probe(key, order)       -> Probed     how sure the model is of given tokens
    await backend.rewrite(key, order)     -> Fill       a region rewritten by an API's edit endpoint
    await backend.structured(key, order)  -> Answered   JSON or tool calls under constraints (StructuredRequest)
    await backend.instruct(key, order)    -> Fill       a region rewritten as an instruction says (InstructRequest)
    await backend.fill_many(orders)       -> [Fill | BackendError]   many at once (batched where it can)
    await backend.start()                 start loading the model, without waiting for it
    await backend.ready()                 the model is loaded (raises when it cannot be)

Every failure is a BackendError (failure.py). What a backend can do is declared in its
`capabilities`, never found by looking for a method. `key` names the document: a newer order with
the same key supersedes an older one in every backend (the older is answered BackendError(DROPPED)
and its work stopped; an empty key supersedes nothing), and a fill after a probe with the same key
starts from the probe's context. Cancelling a call cancels the order in the backend.

Three implementations: worker/link.py (the shared worker process), backend/remote.py (an
OpenAI-compatible API), backend/local.py (an engine in this process: the command line, evaluations,
tests)."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Protocol

from .answers import Answered, Draft, Fill, Probed
from .capabilities import Capabilities
from .failure import BackendError
from .requests import FillRequest, InstructRequest, ProbeRequest, RewriteRequest, StructuredRequest


FILL_TIMEOUT_S = 10.0  # every backend's default deadline for an order (worker.fillTimeoutS)


class Backend(Protocol):
    capabilities: Capabilities

    async def fill(self, key: str, order: FillRequest) -> Fill: ...
    def stream(self, key: str, order: FillRequest) -> AsyncIterator[Draft | Fill]: ...
    async def probe(self, key: str, order: ProbeRequest) -> Probed: ...
    async def rewrite(self, key: str, order: RewriteRequest) -> Fill: ...
    async def structured(self, key: str, order: StructuredRequest) -> Answered: ...
    async def instruct(self, key: str, order: InstructRequest) -> Fill: ...
    async def fill_many(self, orders: list[FillRequest]) -> list[Fill | BackendError]: ...
    async def start(self) -> None: ...
    async def ready(self) -> None: ...
    def describe(self) -> dict: ...
    async def close(self) -> None: ...


class Reporter(Protocol):
    """Where a backend tells a person what happened to it (a worker that cannot start, a key the API
    refused): the language server shows it in the editor, serve-api and the command line log it."""

    def show(self, kind: str, message: str) -> None: ...  # kind: error | warning | info | debug
    def log(self, kind: str, message: str) -> None: ...
    async def progress_begin(self, title: str, message: str) -> object: ...
    def progress_end(self, token: object, message: str) -> None: ...


LEVELS = {"error": logging.ERROR, "warning": logging.WARNING, "info": logging.INFO, "debug": logging.DEBUG}


class LogReporter:
    """A Reporter for a process with no editor to show things to: everything goes to `logger`."""

    def __init__(self, logger: logging.Logger):
        self.logger = logger

    def show(self, kind: str, message: str) -> None:
        self.log(kind, message)

    def log(self, kind: str, message: str) -> None:
        self.logger.log(LEVELS.get(kind, logging.DEBUG), message)

    async def progress_begin(self, title: str, message: str) -> object:
        self.logger.info("%s: %s", title, message)
        return None

    def progress_end(self, token: object, message: str) -> None:
        self.logger.info("%s", message)
