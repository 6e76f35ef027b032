"""Message bodies out of a client's byte stream, framed by `Content-Length` headers, for jsonrpc.py's
reader. pygls 2's own reader allocated a body of any announced length up front (MemoryError at
`Content-Length: 99999999999`) and, after one wrong length, glued the leftover bytes onto the next
header and lost every later message: `Frames` bounds each body (MAX_BODY) and resynchronises at
the next `Content-Length:`."""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable

log = logging.getLogger("diffusion_lsp.server.jsonrpc")  # its reader's lines, under the reader's name

MAX_BODY = 64 << 20  # 64 MiB: a source file's JSON is ~1.04x its size (stdlib typing.py, _pydecimal.py), so
# a didOpen of a 60 MB file still fits; a larger length is skipped unread, not allocated
MAX_HEADER = 8 << 10  # a header block (Content-Length .. blank line) longer than this is garbage
_LENGTH = re.compile(rb"content-length[ \t]*:", re.IGNORECASE)  # anywhere: after garbage too
_NUMBER = re.compile(rb"[ \t]*(\d+)[ \t]*\r?\n")
_END_OF_HEADER = re.compile(rb"\r?\n\r?\n")
_HEADER_LINES = re.compile(rb"(?:[A-Za-z0-9-]+[ \t]*:[^\r\n]*\r?\n)*")  # e.g. Content-Type before the length


class Frames:
    """Bodies of `Content-Length`-framed messages from a stream of byte chunks.

    A header with a bad or oversized length is skipped (one log line) and so is anything up to the
    next `Content-Length:` header, wherever it starts; nothing larger than MAX_BODY is held."""

    def __init__(self, read: Callable[[], Awaitable[bytes]]):
        self._read, self._buf, self._eof, self._skipped = read, bytearray(), False, 0

    async def _more(self) -> bool:
        if not self._eof:
            chunk = await self._read()
            self._eof = not chunk
            self._buf += chunk
        return not self._eof

    def _skip(self, n: int) -> None:
        if n > 0:
            if not _HEADER_LINES.fullmatch(self._buf, 0, n):
                self._skipped += n
            del self._buf[:n]

    async def next(self) -> bytes | None:
        """The next message body; None once the stream has ended."""
        while True:
            header = _LENGTH.search(self._buf)
            if header is None:
                if len(self._buf) > MAX_HEADER:  # garbage; keep what may begin a header split across reads
                    self._skip(len(self._buf) - len(b"content-length:") + 1)
                if not await self._more():
                    return None
                continue
            self._skip(header.start())
            value_at = header.end() - header.start()  # the header now starts the buffer
            number = _NUMBER.match(self._buf, value_at)
            end = _END_OF_HEADER.search(self._buf, value_at) if number is not None else None
            arrived = end is not None or len(self._buf) > MAX_HEADER or (number is None and b"\n" in self._buf)
            if not arrived:
                if not await self._more():
                    return None
                continue
            length = int(number.group(1)) if number is not None and len(number.group(1)) <= 10 else None
            if (end is None or end.start() > MAX_HEADER or length is None or length > MAX_BODY
                    or _LENGTH.search(self._buf, value_at, end.start())):  # two lengths in one header: garbage
                value = bytes(self._buf[value_at:value_at + 40]).split(b"\n")[0].strip().decode("latin-1")
                log.warning("skipped a message header with Content-Length %r (at most %d bytes)", value, MAX_BODY)
                del self._buf[:value_at]  # resynchronise at the next header
                continue
            if self._skipped:
                log.warning("skipped %d bytes that were not a message", self._skipped)
                self._skipped = 0
            start = end.end()
            while len(self._buf) < start + length:
                if not await self._more():
                    return None
            body = bytes(self._buf[start:start + length])
            del self._buf[:start + length]
            return body

    def recover(self, body: bytes) -> None:
        """Put back what follows a header inside a body that failed to parse: with a length that
        was too long, the body swallowed the start of the next message."""
        header = _LENGTH.search(body)
        if header is not None:
            self._buf[:0] = body[header.start():]
