"""The socket to the worker, from the side that uses it (asyncio): connect to a running worker or
start one, send orders and pings, route each answer (and a fill's drafts) to its caller, keep the
worker's state, and kill one that stopped answering. It calls nobody back: its owner (link.py)
awaits `events` (hello, state changes, and "lost" when a worker goes away unasked) and `settled()`.
Orders answered by model/decoding/probe.py, model/families/native.py, formats/instruct.py and model/structured/constrained.py."""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
from collections.abc import AsyncIterator
from dataclasses import dataclass

from ..protocol.failure import BackendError, Failure
from ..protocol.capabilities import Capabilities
from ..protocol.answers import Answered, Draft, Fill, Probed
from ..protocol.requests import FillRequest, InstructRequest, ProbeRequest, RewriteRequest, StructuredRequest
from ..protocol.settings import LaunchSettings
from .spec import WorkerSpec
from .wire import (MAX_LINE, WIRE_VERSION, build_id, check_socket_path, decode, encode, model_name,
                   weights_id)

SPAWN_TIMEOUT_S = 60.0  # the worker prints "ready" once its socket listens, before loading the model
CONNECT_TRIES = 40  # when another session is starting the worker: 40 x 0.25 s
MAX_SPAWNS = 3
HELLO_TIMEOUT_S = 10.0  # a listening worker says hello at once, from its socket thread
Request = FillRequest | ProbeRequest | RewriteRequest | InstructRequest | StructuredRequest
ANSWERS = {FillRequest: Fill, ProbeRequest: Probed, RewriteRequest: Fill, InstructRequest: Fill,
           StructuredRequest: Answered}  # what each request is answered with


def refusal(hello: dict, settings: LaunchSettings) -> str | None:
    """Why a worker that said `hello` must not serve these settings (it runs another install's code,
    another model, or older weights of it), or None. The default socket's name already differs for
    each (wire.worker_key); this catches a shared worker.socket."""
    if hello.get("build") != (build := build_id()):
        return f"runs diffusion-lsp {hello.get('build')}, not this install's {build}"
    if hello.get("model") != (model := model_name(settings)):
        return f"serves the model {hello.get('model')}, not {model}"
    if hello.get("weights") != weights_id(settings):
        return f"loaded other weights of {model} (the files changed since it started)"
    return None


class WorkerUnavailable(Exception):
    """The worker could not be started or reached; the message says why."""


@dataclass(frozen=True)
class Pong:
    """A ping's answer (from the worker's socket thread, so a busy model thread does not delay it)."""

    busy_s: float = 0.0  # how long the current batch has run (0: idle)
    stuck_s: float | None = None  # how long the model thread has held an order that was stopped, not letting
    # it go (None: it holds none)
    dead: str | None = None  # why the model thread ended, when it has

    @classmethod
    def from_message(cls, reply: dict) -> Pong:
        def seconds(key: str) -> float | None:
            value = reply.get(key)
            return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
        dead = reply.get("dead")
        return cls(seconds("busy_s") or 0.0, seconds("stuck_s"), str(dead) if dead else None)


class WorkerClient:
    def __init__(self, spec: WorkerSpec):
        self.spec = spec
        self.pid: int | None = None
        self.state = "stopped"  # stopped | loading | ready | failed
        self.error: str | None = None
        self.max_tokens: int | None = None  # the largest canvas the loaded model takes (its state event)
        self.capabilities: Capabilities | None = None  # what the loaded model can do (its state event)
        self.events: asyncio.Queue[dict] = asyncio.Queue()  # hello, state, and {"event": "lost", "reason"}
        self._changed = asyncio.Event()  # set (and replaced) at every change of state
        self._writer: asyncio.StreamWriter | None = None
        self._pending: dict[int, asyncio.Queue] = {}  # by request id: its drafts, then its reply (None: lost)
        self._connecting: asyncio.Task | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._closed = False
        self._ids = itertools.count(1)
        self._said = ""  # the last spawned worker's first line: "ready" or "busy"
        self._killed: str | None = None  # why we killed the worker, for the orders it leaves unanswered

    @property
    def connected(self) -> bool:
        return self._writer is not None

    async def start(self) -> None:
        """Connect, starting the worker when nobody serves the socket. One attempt at a time;
        raises WorkerUnavailable."""
        if self.connected:
            return
        if self._connecting is None or self._connecting.done():
            self._connecting = asyncio.ensure_future(self._connect())
        await asyncio.shield(self._connecting)

    async def settled(self) -> None:
        """Return once the worker is not loading any more: ready, failed, or gone."""
        while self.connected and self.state == "loading":
            await self._changed.wait()

    async def ask(self, key: str, order: Request) -> Fill | Probed | Answered:
        """The worker's answer to `order` (a fill's drafts, if it asked for them, are passed over).
        Raises WorkerUnavailable when it is not connected and ready or goes away meanwhile,
        BackendError when it says no. Cancelling this coroutine sends a cancel, so the worker
        abandons the work."""
        rid, queue = self._open(key, order)
        try:
            while (message := await queue.get()) is not None and "draft" in message:
                pass
        except asyncio.CancelledError:
            self._send({"op": "cancel", "id": rid})
            raise
        finally:
            self._pending.pop(rid, None)
        return self._answer(message, order)

    async def stream(self, key: str, order: FillRequest) -> AsyncIterator[Draft | Fill]:
        """The drafts the worker sends after each denoising step (with `order.drafts`), then the
        fill; raises like `ask`."""
        rid, queue = self._open(key, order)
        try:
            while (message := await queue.get()) is not None and "draft" in message:
                if (draft := Draft.from_message(message)) is not None:
                    yield draft
        except (asyncio.CancelledError, GeneratorExit):
            self._send({"op": "cancel", "id": rid})
            raise
        finally:
            self._pending.pop(rid, None)
        yield self._answer(message, order)

    def _open(self, key: str, order: Request) -> tuple[int, asyncio.Queue]:
        """Send `order` -> (its id, the queue its messages arrive on; None: the connection went)."""
        if not self.connected or self.state != "ready":
            raise WorkerUnavailable(f"the model worker is {self.state}")
        rid = next(self._ids)
        queue = self._pending[rid] = asyncio.Queue()
        self._writer.write(encode(order.message(rid, key)))
        return rid, queue

    def _answer(self, message: dict | None, order: Request) -> Fill | Probed | Answered:
        if message is None:
            raise WorkerUnavailable(f"{self._killed}; it is being restarted" if self._killed
                                    else "the connection to the model worker was lost")
        try:  # a "no" whose stop reason this side does not know is unusable too (ValueError)
            said = (ANSWERS[type(order)] if message.get("ok") else BackendError).from_message(message)
        except (TypeError, ValueError) as e:
            raise BackendError(Failure.REFUSED, f"the worker's answer is unusable: {e}") from None
        if isinstance(said, BackendError):
            raise said
        return said

    async def ping(self, timeout_s: float) -> Pong | None:
        """How the worker's model thread is doing, or None when the worker does not answer within
        `timeout_s` (stopped, or its socket thread is stuck)."""
        if not self.connected:
            return None
        rid = next(self._ids)
        queue = self._pending[rid] = asyncio.Queue()
        self._send({"op": "ping", "id": rid})
        try:
            reply = await asyncio.wait_for(queue.get(), timeout_s)
        except asyncio.TimeoutError:
            return None
        finally:
            self._pending.pop(rid, None)
        if reply is None:  # the connection was lost meanwhile
            return None
        return Pong.from_message(reply)

    def kill(self, why: str) -> None:
        """SIGKILL the worker (it stopped answering, or its model thread is stuck or gone; SIGKILL also
        ends a SIGSTOPped process). The connection then drops, its orders fail saying `why` (a sentence
        naming the worker), and its owner hears of it ("lost")."""
        self._killed = why
        if self.pid:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except OSError:
                pass

    async def close(self) -> None:
        """Disconnect; the worker itself stays for other sessions until it idles out."""
        self._closed = True
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def _send(self, message: dict) -> None:
        if self._writer is not None:
            self._writer.write(encode(message))

    async def _connect(self) -> None:
        try:
            check_socket_path(self.spec.socket)
        except (OSError, RuntimeError) as e:
            raise WorkerUnavailable(str(e)) from None
        path = str(self.spec.socket)
        spawns = 0
        for _ in range(CONNECT_TRIES):
            writer = None
            try:
                reader, writer = await asyncio.open_unix_connection(path, limit=MAX_LINE)
                line = await asyncio.wait_for(reader.readline(), HELLO_TIMEOUT_S)
                if not line:  # closed before its hello
                    raise ConnectionResetError
                hello = decode(line)
                break
            except (asyncio.TimeoutError, ValueError, asyncio.IncompleteReadError) as e:
                if writer is not None:
                    writer.close()
                raise WorkerUnavailable(f"the worker on {path} did not say hello ({type(e).__name__})") from None
            except (ConnectionResetError, BrokenPipeError):
                # a worker on its way out (killed, idle exit) took the connection and dropped or reset
                # it: another session may be starting the next one, as this one may
                if writer is not None:
                    writer.close()
                await asyncio.sleep(0.25)
            except (FileNotFoundError, ConnectionRefusedError):
                # nobody listens: start a worker; one that found the lock held ("busy") leaves the
                # socket to its holder, which may be on its way out (idle exit): then start another
                if spawns < MAX_SPAWNS and (spawns == 0 or self._said == "busy"):
                    spawns += 1
                    await self._spawn()
                    continue
                await asyncio.sleep(0.25)  # another session's worker is binding the socket
        else:
            raise WorkerUnavailable(f"no worker answers on {path}")
        if hello.get("event") != "hello" or hello.get("version") != WIRE_VERSION:
            writer.close()
            raise WorkerUnavailable(f"the worker on {path} speaks another protocol version "
                                    f"({hello.get('version')!r}, this server speaks {WIRE_VERSION}); "
                                    "it exits once idle, or stop it and retry")
        if (why := refusal(hello, self.spec.model)) is not None:
            writer.close()
            raise WorkerUnavailable(f"the worker on {path} {why}; it exits once idle, or set another worker.socket")
        self._writer, self._killed = writer, None
        self._event(hello)
        asyncio.ensure_future(self._read(reader, writer))

    async def _spawn(self) -> None:
        log = open(f"{self.spec.socket}.log", "ab", buffering=0)
        os.chmod(log.name, 0o600)
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.spec.command(), stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
                stderr=log, start_new_session=True)  # outlives this session: others may share it
        finally:
            log.close()
        try:
            line = await asyncio.wait_for(self._proc.stdout.readline(), SPAWN_TIMEOUT_S)
        except asyncio.TimeoutError:
            raise WorkerUnavailable(f"the worker did not start in {SPAWN_TIMEOUT_S:.0f} s") from None
        if not line:
            code = await self._proc.wait()
            raise WorkerUnavailable(f"the worker exited with code {code} before listening "
                                    f"(see {self.spec.socket}.log)")
        self._said = line.decode(errors="replace").split(" ", 1)[0].strip()  # ready PID | busy

    def _event(self, message: dict) -> None:
        if message.get("event") == "hello":
            self.pid = message.get("pid")
        self.state, self.error = message.get("state", self.state), message.get("error")
        limit = message.get("max_tokens")
        self.max_tokens = limit if isinstance(limit, int) and not isinstance(limit, bool) else None
        self.capabilities = Capabilities.from_message(message.get("capabilities"))
        self.events.put_nowait(message)
        self._changed.set()
        self._changed = asyncio.Event()

    async def _read(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while line := await reader.readline():
                message = decode(line)
                if "event" in message:
                    self._event(message)
                elif (queue := self._pending.get(message.get("id"))) is not None:
                    queue.put_nowait(message)
        except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        if self._writer is not writer:  # closed on purpose, or already replaced
            return
        self._writer = None
        for queue in self._pending.values():
            queue.put_nowait(None)
        writer.close()
        if not self._closed:
            self._event({"event": "lost", "state": "stopped", "reason": await self._exit_reason()})
        else:
            self.state = "stopped"
            self._changed.set()

    async def _exit_reason(self) -> str:
        if self._killed:
            return f"{self._killed} and was killed"
        if self._proc is not None and self.pid == self._proc.pid:
            try:
                code = await asyncio.wait_for(self._proc.wait(), 2.0)
                return f"the model worker (pid {self.pid}) exited with code {code}"
            except asyncio.TimeoutError:
                pass
        return f"the connection to the model worker (pid {self.pid}) was lost"
