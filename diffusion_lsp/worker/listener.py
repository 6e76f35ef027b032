"""The worker's socket side: bind the owner-only socket under a lock, accept connections, one
reader thread per connection feeding the Worker, and exit once nobody has been connected for a
while (the worker is shared, so it outlives the session that started it, but not forever)."""

from __future__ import annotations

import fcntl
import itertools
import os
import select
import socket
import struct
import threading
import time
from pathlib import Path
from typing import Protocol

from ..protocol.failure import BackendError, Failure
from .wire import MAX_LINE, decode, encode, ensure_private_dir

STARTUP_GRACE_S = 30.0  # stay up this long waiting for the first connection
SEND_TIMEOUT_S = 5


class Handler(Protocol):
    """What the listener feeds (worker.Worker): one call per connection, message and hang-up."""

    def connect(self, conn: Conn) -> None: ...
    def handle(self, conn: Conn, message: dict) -> None: ...
    def disconnect(self, conn: Conn) -> None: ...
    def has_clients(self) -> bool: ...


def bind(path: Path) -> tuple[socket.socket, int] | None:
    """Listen on `path`, mode 0600, while holding the lock `path`.lock (released by the kernel when
    this process dies). None when another worker holds the lock: it serves this socket."""
    ensure_private_dir(path.parent)
    lock = os.open(f"{path}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(lock)
        return None
    path.unlink(missing_ok=True)  # a stale socket: its worker is gone, since we hold the lock
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old_umask = os.umask(0o177)  # no window in which the socket exists with looser permissions
    try:
        listener.bind(str(path))
    finally:
        os.umask(old_umask)
    os.chmod(path, 0o600)
    listener.listen(16)
    return listener, lock


class Conn:
    """One client. Sends may come from any thread; a client that stops reading is dropped after
    SEND_TIMEOUT_S rather than stalling the model thread for every session."""

    _ids = itertools.count(1)

    def __init__(self, sock: socket.socket):
        self.sock, self.id, self.lock = sock, next(self._ids), threading.Lock()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", SEND_TIMEOUT_S, 0))

    def send(self, message: dict) -> None:
        with self.lock:
            try:
                self.sock.sendall(encode(message))
            except OSError:  # gone or stuck: end the reader, which cleans up
                try:
                    self.sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass


def _read(worker: Handler, conn: Conn) -> None:
    worker.connect(conn)
    try:
        with conn.sock.makefile("rb") as lines:
            while line := lines.readline(MAX_LINE):
                if not line.endswith(b"\n") and len(line) == MAX_LINE:
                    break  # a runaway line: drop the connection rather than buffer it
                try:
                    worker.handle(conn, decode(line))
                except Exception as e:  # a bad message costs its answer, not the connection
                    conn.send(BackendError(Failure.REFUSED, f"bad message: {type(e).__name__}: {e}").message(None))
    except OSError:
        pass
    finally:
        worker.disconnect(conn)
        conn.sock.close()


def serve(listener: socket.socket, worker: Handler, idle_exit_s: float) -> None:
    """Accept connections until nobody has been connected for `idle_exit_s`, or the listener closes."""
    idle_since, ever = time.monotonic(), False
    while True:
        try:
            ready, _, _ = select.select([listener], [], [], 1.0)
            sock = listener.accept()[0] if ready else None
        except (OSError, ValueError):  # closed under us
            return
        if sock is not None:
            ever = True
            threading.Thread(target=_read, args=(worker, Conn(sock)), daemon=True).start()
            continue
        if worker.has_clients():
            idle_since = time.monotonic()
            continue
        limit = idle_exit_s if ever else max(idle_exit_s, STARTUP_GRACE_S)
        if time.monotonic() - idle_since >= limit:
            return
