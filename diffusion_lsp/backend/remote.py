"""An OpenAI-compatible FIM API as a Backend (protocol/backend.py; `model.backend: "openai"`): fills through
remote.FimClient instead of a worker process, and next edits through the API's edit endpoint or, for
an instruct model, its chat (`rewrite`); an API returns text, not the model's probabilities, so it
cannot probe. What each request holds depends on model.server (backend/profiles.py).

The client is made on demand from the model.* settings (its key read from the environment variable
model.apiKeyEnv names) and made again when they change. Every fill has the worker's deadline,
worker.fillTimeoutS; cancelling a fill (the completer does, on supersession and $/cancelRequest)
closes its HTTP request. A failure is logged, and shown once per kind (refused key, unknown
endpoint, unreachable, ...) until a fill succeeds again. The key appears nowhere: not in messages,
not in `describe()`.
The formats: formats/mercury.py (a next edit), formats/instruct.py (an instruction)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable

from ..lifecycle import Latest, Stopped, deadline, race
from ..protocol.settings import LaunchSettings
from .api_client import FimClient, RemoteError
from ..protocol.backend import FILL_TIMEOUT_S, Reporter
from ..protocol.capabilities import Capabilities
from ..protocol.failure import BackendError, Failure, Stop
from ..protocol.answers import Answered, Draft, Fill, Probed
from ..protocol.requests import FillRequest, InstructRequest, ProbeRequest, RewriteRequest, StructuredRequest
from .profiles import rewrites

ClientFactory = Callable[..., FimClient]


def remote_settings(settings: LaunchSettings) -> tuple:
    """What a client is made from: another value means another client."""
    return (settings.base_url, settings.remote_model, settings.api_key_env, settings.server, settings.fim_template,
            settings.remote_format)


# how a remote failure is reported (once per RemoteError.kind) -> what it is to the Backend's callers
KINDS = {"timeout": Failure.TIMEOUT, "busy": Failure.BUSY, "rejected": Failure.REFUSED, "answer": Failure.REFUSED}


class RemoteBackend:
    def __init__(self, ui: Reporter, settings: LaunchSettings, client_factory: ClientFactory = FimClient.from_launch,
                 fill_timeout_s: float = FILL_TIMEOUT_S):
        self.ui, self.settings, self._new_client = ui, settings, client_factory
        self.enabled, self.fill_timeout_s = True, fill_timeout_s
        self.counts = {"fill_timeouts": 0}
        self.client: FimClient | None = None
        self.error: str | None = None  # the last failure, until a fill succeeds
        self._shown: set[str] = set()  # failure kinds shown since the last fill that succeeded
        self._latest = Latest(lambda key: asyncio.Event())  # by key: set when a newer order for it comes

    def configure(self, settings: LaunchSettings, enabled: bool, fill_timeout_s: float) -> None:
        """New settings; another API, model, key variable or deadline (the client's read timeout)
        means another client, made on demand."""
        changed = (remote_settings(settings) != remote_settings(self.settings)
                   or fill_timeout_s != self.fill_timeout_s)
        self.settings, self.enabled, self.fill_timeout_s = settings, enabled, fill_timeout_s
        if changed and self.client is not None:
            client, self.client = self.client, None
            self._shown.clear()
            asyncio.ensure_future(client.aclose())

    @property
    def capabilities(self) -> Capabilities:
        """Next edits where the server has an edit endpoint, or through chat (the server's profile)."""
        return Capabilities(rewrite=rewrites(self.settings.server, self.settings.remote_format))

    async def ensure(self) -> FimClient | None:
        """The client; None when completions are off or it cannot be made (reported)."""
        if not self.enabled:
            return None
        if self.client is None:
            try:
                self.client = self._new_client(self.settings, read_s=self.fill_timeout_s)
            except (RemoteError, ValueError) as e:
                kind = e.kind if isinstance(e, RemoteError) else "settings"
                self._report_failure(kind, f"cannot use the remote API: {e}")
                return None
            self.ui.log("info", f"remote FIM API {self.client.base_url} (server {self.settings.server}, "
                                f"{self.settings.remote_format}), model {self.client.model}")
        return self.client

    async def start(self) -> None:
        """Make the client (a missing key is reported now, not at the first fill)."""
        await self.ensure()

    async def ready(self) -> None:
        """The client can be made (the API is asked nothing until a fill)."""
        await self._client()

    async def fill(self, key: str, order: FillRequest) -> Fill:
        """The API's fill. Raises BackendError. Cancelling this coroutine closes the HTTP request, and
        so does a newer order with the same `key` (this one is then DROPPED)."""
        return await self._call("fill", key, lambda c: c.complete(order.prefix, order.suffix, order.max_tokens,
                                                             order.one_line))

    async def stream(self, key: str, order: FillRequest) -> AsyncIterator[Draft | Fill]:
        """No drafts (capabilities.drafts is false): the fill alone."""
        yield await self.fill(key, order)

    async def fill_many(self, orders: list[FillRequest]) -> list[Fill | BackendError]:
        """The orders sent at once; a request the API rejects fails alone (REFUSED)."""
        async def one(order: FillRequest):
            try:
                return await self.fill("", order)
            except BackendError as e:
                return e
        return list(await asyncio.gather(*map(one, orders)))

    async def rewrite(self, key: str, order: RewriteRequest) -> Fill:
        """A next edit from the API's edit endpoint, or through chat (Mercury's format)."""
        return await self._call("next edit", key, lambda c: c.edit(order.content, order.max_tokens))

    async def instruct(self, key: str, order: InstructRequest) -> Fill:
        """An edit from an instruction, asked of the API's chat endpoint."""
        from ..formats.instruct import chat_content

        return await self._call("edit", key, lambda c: c.instruct(chat_content(order), order.max_tokens))

    async def structured(self, key: str, order: StructuredRequest) -> Answered:
        """A remote API's own chat endpoint answers JSON its own way: not through this backend
        (capabilities.structured)."""
        raise BackendError(Failure.INVALID, "a remote API's output is not constrained here (capabilities.structured)")

    async def probe(self, key: str, order: ProbeRequest) -> Probed:
        """Completion APIs return text, not the model's probabilities of given tokens: next edits
        through an API use its edit endpoint (`rewrite`)."""
        raise BackendError(Failure.INVALID, "a remote API cannot probe tokens (capabilities.probe)")

    async def _client(self) -> FimClient:
        client = await self.ensure()
        if client is None:
            kind = Failure.OFF if not self.enabled else Failure.UNAVAILABLE
            raise BackendError(kind, f"the remote API is not available: {self.error or 'completions are off'}")
        return client

    async def _call(self, what: str, key: str, ask) -> Fill:
        client = await self._client()
        message = f"the remote API gave no {what} within worker.fillTimeoutS ({self.fill_timeout_s:g} s)"

        def missed() -> None:  # shown once, like every other failure
            self.counts["fill_timeouts"] += 1
            self._report_failure("timeout", message)
        try:
            with self._latest.take(key) as newer:  # a newer order for the key closes this one's request
                async with deadline(self.fill_timeout_s, message, missed):
                    done = await race(ask(client), newer.wait())
        except Stopped:
            raise BackendError.dropped(Stop.SUPERSEDED) from None
        except RemoteError as e:
            self._report_failure(e.kind, str(e))
            raise BackendError(KINDS.get(e.kind, Failure.UNAVAILABLE), str(e)) from None
        self.error = None
        self._shown.clear()
        pieces = [done.text] if done.text else []
        return Fill(done.text, pieces, [1.0] * len(pieces), ms=done.ms, tokens=done.tokens)

    def _report_failure(self, kind: str, message: str) -> None:
        self.error = message
        self.ui.log("error", message)
        if kind not in self._shown:  # once per kind, not on every request
            self._shown.add(kind)
            self.ui.show("error", f"diffusion-lsp: {message}")

    async def close(self) -> None:
        self._latest.supersede_all()
        if self.client is not None:
            client, self.client = self.client, None
            await client.aclose()

    def describe(self) -> dict:
        s = self.settings
        counts = self.client.counts if self.client else {}
        return {"backend": "openai", "base_url": s.base_url, "model": s.remote_model, "api_key_env": s.api_key_env,
                "server": s.server, "format": s.remote_format, "fim_template": s.fim_template,
                "rewrite": self.capabilities.rewrite, "route": self.client.route if self.client else None,
                "state": "ready" if self.client else "stopped", "error": self.error, **counts}
