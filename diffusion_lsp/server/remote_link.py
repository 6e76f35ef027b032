"""An OpenAI-compatible FIM API as the completer sees it (`model.backend: "openai"`): the same
`await link.fill(key, order) -> Fill | None` as WorkerLink, over remote.FimClient instead of a
worker process.

The client is made on demand from the model.* settings (its key read from the environment variable
model.apiKeyEnv names) and made again when they change. Every fill has the worker's deadline,
worker.fillTimeoutS; cancelling a fill (the completer does, on supersession and $/cancelRequest)
closes its HTTP request. A failure is logged, and shown once per kind (refused key, unknown
endpoint, unreachable, ...) until a fill succeeds again. The key appears nowhere: not in messages,
not in `describe()`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from ..model.settings import LaunchSettings
from ..remote import FimClient, RemoteError
from .client import Launch
from .link import Ui, Unavailable
from .stats import Stats
from .wire import Fill, FillOrder

ClientFactory = Callable[..., FimClient]


def remote_settings(settings: LaunchSettings) -> tuple:
    """What a client is made from: another value means another client."""
    return settings.base_url, settings.remote_model, settings.api_key_env


class RemoteLink:
    can_probe = False

    def __init__(self, ui: Ui, stats: Stats, launch: Launch, client_factory: ClientFactory = FimClient.from_launch):
        self.ui, self.stats, self.launch, self._new_client = ui, stats, launch, client_factory
        self.enabled, self.fill_timeout_s = True, 10.0
        self.client: FimClient | None = None
        self.error: str | None = None  # the last failure, until a fill succeeds
        self._shown: set[str] = set()  # failure kinds shown since the last fill that succeeded

    def configure(self, launch: Launch, enabled: bool, fill_timeout_s: float) -> None:
        """New settings; another API, model, key variable or deadline (the client's read timeout)
        means another client, made on demand."""
        changed = (remote_settings(launch.settings) != remote_settings(self.launch.settings)
                   or fill_timeout_s != self.fill_timeout_s)
        self.launch, self.enabled, self.fill_timeout_s = launch, enabled, fill_timeout_s
        if changed and self.client is not None:
            client, self.client = self.client, None
            self._shown.clear()
            asyncio.ensure_future(client.aclose())

    async def ensure(self) -> FimClient | None:
        """The client; None when completions are off or it cannot be made (reported)."""
        if not self.enabled:
            return None
        if self.client is None:
            try:
                self.client = self._new_client(self.launch.settings, read_s=self.fill_timeout_s)
            except (RemoteError, ValueError) as e:
                self._report_failure(getattr(e, "kind", "settings"), f"cannot use the remote API: {e}")
                return None
            self.ui.log("info", f"remote FIM API {self.client.base_url}, model {self.client.model}")
        return self.client

    async def fill(self, key: str, order: FillOrder) -> Fill | None:
        """The API's fill. Raises Unavailable. Cancelling this coroutine closes the HTTP request.
        `key` is unused: the completer abandons a superseded fill itself."""
        return await self._call("fill", lambda c: c.complete(order.prefix, order.suffix, order.max_tokens,
                                                             order.one_line))

    async def rewrite(self, key: str, order) -> Fill | None:
        """A next edit from the API's edit endpoint (nextedit/mercury.py: Mercury's format)."""
        return await self._call("next edit", lambda c: c.edit(order.content, order.max_tokens))

    async def _call(self, what: str, ask) -> Fill:
        client = await self.ensure()
        if client is None:
            raise Unavailable(f"the remote API is not available: {self.error or 'completions are off'}")
        try:
            done = await asyncio.wait_for(ask(client), self.fill_timeout_s)
        except asyncio.TimeoutError:  # shown once, like every other failure (it was only logged)
            self.stats.fill_timeouts += 1
            message = f"the remote API gave no {what} within worker.fillTimeoutS ({self.fill_timeout_s:g} s)"
            self._report_failure("timeout", message)
            raise Unavailable(message) from None
        except RemoteError as e:
            self._report_failure(e.kind, str(e))
            raise Unavailable(str(e)) from None
        self.error = None
        self._shown.clear()
        pieces = [done.text] if done.text else []
        return Fill(done.text, pieces, [1.0] * len(pieces), ms=done.ms)

    async def probe(self, key: str, order) -> None:
        """Completion APIs return text, not the model's probabilities of given tokens: next edits
        through an API use its edit endpoint (`rewrite`)."""
        raise Unavailable("a remote API cannot probe tokens")

    def _report_failure(self, kind: str, message: str) -> None:
        self.error = message
        self.ui.log("error", message)
        if kind not in self._shown:  # once per kind, not on every request
            self._shown.add(kind)
            self.ui.show("error", f"diffusion-lsp: {message}")

    async def close(self) -> None:
        if self.client is not None:
            client, self.client = self.client, None
            await client.aclose()

    def describe(self) -> dict:
        s = self.launch.settings
        counts = self.client.counts if self.client else {}
        return {"backend": "openai", "base_url": s.base_url, "model": s.remote_model, "api_key_env": s.api_key_env,
                "route": self.client.route if self.client else None,
                "state": "ready" if self.client else "stopped", "error": self.error, **counts}
