"""Every file a command is given to read (`fim FILE`, `calibrate --cases FILE`, `bench renames FILE`,
`regress --compare FILE`, ...) is read here, and only here, so one set of checks holds for all of them:

- opened without blocking (O_NONBLOCK: a FIFO with no writer hung `bench renames`), then checked on
  the open descriptor (fstat) to be a regular file: a folder, a FIFO, a socket or a device such as
  /dev/zero is refused before a byte is read;
- at most a cap of bytes, said by the caller (an 18 MB file read whole by `bench renames` ended in a
  MemoryError after 47 s), and never more than cap + 1 read even when the file grows meanwhile;
- JSON nested at most MAX_DEPTH deep (past Python's recursion limit json raises RecursionError),
  and with finite numbers only (NaN, Infinity, and 1e400, which Python reads as inf, are refused).

Whatever is refused raises Refused, one line naming the file; the command line prints it and exits 2
(cli.py). Argparse declares each such argument `type=InputFile` (or `InputFile.or_stdin` where "-"
means stdin), whose only ways to the bytes are these readers; tests/test_input_files.py walks every
command's parser and fails for a file argument declared otherwise.

This module imports nothing of the project: the command line, the checkpoints and the state folder
all stand on it."""

from __future__ import annotations

import json
import math
import os
import stat
import sys

MAX_BYTES = 256 << 20  # a file to read whole: past any source file or saved run
MAX_JSON_BYTES = 64 << 20  # a JSON (lines) file: saved candidates are a few KB a line
MAX_DEPTH = 64  # the deepest JSON any of our files nests is 5; json's own limit is Python's recursion


class Refused(ValueError):
    """A file a command was given that is not read: one line naming it and why."""


def _kind(mode: int) -> str:
    return ("a directory" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file")


def open_checked(path: str, cap: int | None = None):
    """A binary file object of `path`, once the open descriptor is a regular file of at most `cap`
    bytes (None: any size, for a stream read in parts such as a tar archive); Refused otherwise."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError as e:
        raise Refused(f"cannot read {path}: {e.strerror}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise Refused(f"{path} is {_kind(st.st_mode)}, not a regular file")
        if cap is not None and st.st_size > cap:
            raise Refused(f"{path} is {st.st_size:,} bytes, more than the {_size(cap)} it may hold")
        os.set_blocking(fd, True)  # a regular file never blocks; reads then behave as usual
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def _size(cap: int) -> str:
    return f"{cap >> 20} MB" if cap >= 1 << 20 else f"{cap:,} bytes"


def read_bytes(path: str, cap: int = MAX_BYTES, stdin: bool = False) -> bytes:
    """The bytes of `path` (of stdin for "-" when `stdin`), at most `cap` of them; Refused otherwise."""
    if stdin and path == "-":
        try:
            data = sys.stdin.buffer.read(cap + 1)
        except OSError as e:
            raise Refused(f"cannot read stdin: {e.strerror}") from None
    else:
        with open_checked(path, cap) as f:
            try:
                data = f.read(cap + 1)
            except OSError as e:
                raise Refused(f"cannot read {path}: {e.strerror}") from None
    if len(data) > cap:
        raise Refused(f"{'stdin' if path == '-' and stdin else path} holds more than the {_size(cap)} it may hold")
    return data


def read_text(path: str, cap: int = MAX_BYTES, stdin: bool = False) -> str:
    """The UTF-8 text of `path`; Refused for anything read_bytes refuses and for other bytes."""
    try:
        return read_bytes(path, cap, stdin).decode("utf-8")
    except UnicodeDecodeError as e:
        raise Refused(f"{'stdin' if path == '-' and stdin else path} is not UTF-8 (bad byte at offset {e.start})") \
            from None


def _no_constant(name: str):
    raise ValueError(f"{name} is not a finite number")


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text[:20]} is not a finite number")
    return value


def _depth(value) -> int:
    """How deep `value` nests, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (list, dict)):
            deepest = max(deepest, d)
            if d <= MAX_DEPTH:
                stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def parse_json(text: str, where: str):
    """The JSON value of `text` (read from `where`); Refused naming `where` for bad JSON, nesting past
    MAX_DEPTH and numbers that are not finite."""
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except RecursionError:
        raise Refused(f"{where}: JSON nested more than {MAX_DEPTH} deep") from None
    except ValueError as e:  # JSONDecodeError, a number that is not finite, an int of 4300+ digits
        raise Refused(f"{where}: not JSON ({str(e).splitlines()[0][:120]})") from None
    if _depth(value) > MAX_DEPTH:
        raise Refused(f"{where}: JSON nested more than {MAX_DEPTH} deep")
    return value


def read_json(path: str, cap: int = MAX_JSON_BYTES):
    """The JSON value in `path`, after read_text's and parse_json's checks."""
    return parse_json(read_text(path, cap), path)


def json_lines(text: str, where: str) -> list:
    """The JSON value of each non-empty line of `text` (JSON lines, read from `where`), each after
    parse_json's checks; the line is named in what is refused."""
    return [parse_json(line, f"{where} line {n}") for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def read_json_lines(path: str, cap: int = MAX_JSON_BYTES) -> list:
    return json_lines(read_text(path, cap), path)


class InputFile:
    """The argparse type of every argument that names a file to read: the path, and these readers as
    the only way to its content (no __fspath__: `open(args.x)` fails loudly instead of bypassing them)."""

    __slots__ = ("path", "stdin")

    def __init__(self, path: str, stdin: bool = False):
        self.path, self.stdin = str(path), stdin

    @classmethod
    def or_stdin(cls, path: str) -> InputFile:
        """The argparse type of a file argument where "-" reads stdin."""
        return cls(path, stdin=True)

    def __str__(self) -> str:
        return self.path

    def __repr__(self) -> str:
        return f"InputFile({self.path!r})"

    def __eq__(self, other) -> bool:
        return isinstance(other, InputFile) and (other.path, other.stdin) == (self.path, self.stdin)

    def __hash__(self) -> int:
        return hash(self.path)

    @property
    def name(self) -> str:
        return os.path.basename(self.path)

    def open(self, cap: int | None = None):
        return open_checked(self.path, cap)

    def read_bytes(self, cap: int = MAX_BYTES) -> bytes:
        return read_bytes(self.path, cap, self.stdin)

    def read_text(self, cap: int = MAX_BYTES) -> str:
        return read_text(self.path, cap, self.stdin)

    def read_json(self, cap: int = MAX_JSON_BYTES):
        return parse_json(self.read_text(cap), self.path)

    def read_json_lines(self, cap: int = MAX_JSON_BYTES) -> list:
        return json_lines(self.read_text(cap), self.path)
