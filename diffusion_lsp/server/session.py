"""One editor session, without LSP types: settings, statistics, the worker's life cycle (progress
while the model loads, a clear message when it cannot load, one notice and a restart when it
crashes) and the completion entry point. The server adapts it to pygls through a `Ui`."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from dataclasses import dataclass
from typing import Protocol

from ..context.types import Document, EditSnippet, Suggestion
from . import positions
from .client import Launch, WorkerClient, WorkerUnavailable
from .completion import BadInput, Completer, Fill, Unavailable, locate
from ..model.settings import LaunchSettings
from .config import Config, WorkerSettings, parse_config
from .context_api import load_context_api, token_counter
from .stats import Stats
from .wire import default_socket

RESTARTS_PER_MINUTE = 3  # beyond this, a crashed worker restarts on the next request only
EDIT_CONTEXT_LINES = 2  # lines kept around an edit for the recent-edits context
EDIT_MAX_LINES = 12  # at most this many of the edit's own lines


class Ui(Protocol):
    def show(self, kind: str, message: str) -> None: ...  # kind: error | warning | info
    def log(self, kind: str, message: str) -> None: ...
    async def progress_begin(self, title: str, message: str) -> object: ...
    def progress_end(self, token: object, message: str) -> None: ...


class _Progress:
    """One $/progress at a time, begun when the worker starts and ended when the model is ready or
    has failed, even when that happens while the client is still creating the token."""

    def __init__(self, ui: Ui):
        self.ui, self.active, self.begun, self.token, self.ended = ui, False, False, None, None

    async def begin(self, title: str, message: str) -> None:
        if self.active:
            return
        self.active, self.begun, self.ended = True, False, None
        self.token = await self.ui.progress_begin(title, message)
        self.begun = True
        if self.ended is not None:
            self.end(self.ended)

    def end(self, message: str) -> None:
        if not self.active:
            return
        if not self.begun:
            self.ended = message
            return
        self.active = False
        self.ui.progress_end(self.token, message)


@dataclass
class ServeOptions:
    """`diffusion-lsp serve` flags: the defaults the editor's settings override."""

    model: str | None = None
    device: str = "auto"
    worker_socket: str | None = None


class Session:
    def __init__(self, options: ServeOptions, ui: Ui):
        self.ui = ui
        self.base = Config(model=LaunchSettings(path=options.model, device=options.device),
                           worker=WorkerSettings(socket=options.worker_socket))
        self.cfg = self.base
        self.stats = Stats()
        self.context = load_context_api()
        for why in self.context.stand_ins:
            ui.log("info", f"using a stand-in for {why}")
        self.completer = Completer(self._fill, self.context, token_counter(options.model), self.stats)
        self.recent_edits: deque[EditSnippet] = deque(maxlen=16)  # oldest first
        self._last_edit: tuple[str, int] = ("", -1)
        self.worker: WorkerClient | None = None
        self.progress = _Progress(ui)
        self._shown_failure: str | None = None
        self._crashes: deque[float] = deque()

    # ---- settings ----
    def configure(self, raw) -> None:
        cfg, problems = parse_config(raw, self.base)
        for problem in problems:
            self.ui.show("warning", f"diffusion-lsp settings: {problem}")
        old_launch = self.launch() if self.worker is not None else None
        if cfg.model.path != self.cfg.model.path:
            self.completer.count_tokens = token_counter(cfg.model.path)
        self.cfg = cfg
        self.completer.configure(cfg)
        if old_launch is not None and old_launch != self.launch():  # another model: another worker
            worker, self.worker = self.worker, None
            asyncio.ensure_future(worker.close())

    def launch(self) -> Launch:
        m, w = self.cfg.model, self.cfg.worker
        socket = w.socket or default_socket(m.path, m.device, m.precision)
        return Launch(socket=socket, settings=m, idle_exit_s=w.idle_exit_s)

    # ---- the worker ----
    async def ensure_worker(self) -> WorkerClient | None:
        """Connect to (or start) the worker on demand; None when completions are off or it fails."""
        if not self.cfg.completion.enable:
            return None
        if self.worker is None:
            try:
                self.worker = WorkerClient(self.launch(), self._on_event, self._on_lost)
            except RuntimeError as e:  # the socket directory is not private
                self._report_failure(str(e))
                return None
        worker = self.worker
        if not worker.connected:
            await self.progress.begin("diffusion-lsp", "loading the model")
            try:
                await worker.start()
            except (WorkerUnavailable, OSError, ValueError) as e:
                self.progress.end("the model worker is unavailable")
                self._report_failure(f"could not start the model worker: {e}")
                return None
            if worker.state != "loading":
                self.progress.end(f"model {worker.state}")
        return worker

    def _on_event(self, message: dict) -> None:
        state = message.get("state")
        if state == "ready":
            self._shown_failure = None
            self.progress.end("model ready")
            self.ui.log("info", f"model worker pid {self.worker.pid if self.worker else '?'} is ready")
        elif state == "failed":
            self.progress.end("the model failed to load")
            self._report_failure(f"could not load the model: {message.get('error')}. Completions are off "
                                 "until it loads; check the model.path setting or `serve --model DIR`")

    def _on_lost(self, reason: str) -> None:
        self.stats.worker_crashes += 1
        now = time.monotonic()
        self._crashes.append(now)
        while self._crashes and now - self._crashes[0] > 60:
            self._crashes.popleft()
        if self.stats.worker_crashes == 1:
            self.ui.show("warning", f"diffusion-lsp: {reason}; restarting it")
        self.ui.log("warning", f"{reason}; restarting it")
        self._shown_failure = None
        if len(self._crashes) <= RESTARTS_PER_MINUTE:
            asyncio.ensure_future(self.ensure_worker())

    def _report_failure(self, message: str) -> None:
        self.ui.log("error", message)
        if message != self._shown_failure:  # once, not on every request
            self._shown_failure = message
            self.ui.show("error", f"diffusion-lsp: {message}")

    async def _fill(self, rid: int, key: str, request: dict) -> Fill | None:
        worker = await self.ensure_worker()
        if worker is None:
            return None
        reply = await worker.fill(rid, key, request)
        if reply is None or not reply.get("ok"):
            if reply is not None and reply.get("reason") == "error":
                self.ui.log("error", f"fill failed: {reply.get('error')}")
            return None
        text = reply.get("text", "")
        return Fill(text, reply.get("pieces") or [text], reply.get("confidence") or [1.0], reply.get("ms", 0.0),
                    reply.get("reused", 0))

    async def close(self) -> None:
        if self.worker is not None:
            await self.worker.close()

    # ---- documents and completions ----
    async def prime(self, text: str) -> None:
        """Count an opened document's line tokens in a thread (the tokenizer releases the GIL), so
        the first completion after a jump anywhere in it finds them counted."""
        from ..context.cutting import memoized

        try:
            await asyncio.get_running_loop().run_in_executor(None, memoized(self.completer.count_tokens).prime, text)
        except Exception as e:  # an optimisation only: completions count what they need themselves
            self.ui.log("warning", f"counting the document's tokens ahead failed: {type(e).__name__}: {e}")

    def note_edit(self, uri: str, text: str, line: int, new_lines: int) -> None:
        """Remember the lines around an edit (in the edited text) as recent-edit context."""
        lo = max(0, line - EDIT_CONTEXT_LINES)
        hi = min(line + new_lines, lo + EDIT_MAX_LINES) + EDIT_CONTEXT_LINES + 1  # not a whole replaced file
        span = positions.line_span(text, lo)  # lines lo..hi-1, without splitting the whole document
        if span is None:
            return
        end = span[0]
        for _ in range(hi - lo):
            nl = text.find("\n", end)
            end = len(text) + 1 if nl < 0 else nl + 1
            if nl < 0:
                break
        snippet = text[span[0]:end - 1]
        last = self._last_edit
        if self.recent_edits and last[0] == uri and abs(last[1] - line) <= EDIT_CONTEXT_LINES:
            self.recent_edits.pop()  # the same spot, edited again (typing): keep the newest text only
        if snippet.strip():
            self.recent_edits.append(EditSnippet(uri, snippet))
            self._last_edit = (uri, line)

    async def complete(self, doc: Document | None, uri: str, line: int, column: int, encoding: str,
                       open_docs: list[Document]) -> tuple[int, Suggestion] | None:
        """(offset, suggestion) or None; every refusal and failure is one log line, never a raise."""
        t0 = time.perf_counter()
        self.stats.requests += 1
        result = None
        try:
            if not self.cfg.completion.enable:
                return None
            if doc is None:
                raise BadInput(f"unknown document {uri}")
            offset = locate(doc.text, line, column, encoding, self.cfg.completion.max_line_chars)
            sug = await self.completer.complete(doc, offset, open_docs, list(reversed(self.recent_edits)))
            result = (offset, sug) if sug is not None and sug.text else None
        except BadInput as e:
            self.stats.bad_input += 1
            self.ui.log("info", f"no completion: {e}")
        except Unavailable as e:
            self.ui.log("debug", f"no completion: {e}")
        except asyncio.CancelledError:
            self.stats.cancelled += 1
            raise
        except Exception as e:  # a bug must cost one completion, not the session
            self.stats.errors += 1
            self.ui.log("error", f"completion failed: {type(e).__name__}: {e}")
        finally:
            self.stats.latency_ms.append((time.perf_counter() - t0) * 1e3)
        if result is None:
            self.stats.empty += 1
        else:
            self.stats.answered += 1
        return result

    def report(self) -> dict:
        w = self.worker
        worker = {"pid": w.pid if w else None, "state": w.state if w else "stopped",
                  "error": w.error if w else None, "socket": str(w.launch.socket) if w else None}
        return self.stats.report(worker=worker, context_stand_ins=self.context.stand_ins)
