"""Every file a command writes into a workspace (REPO/.diffusion-lsp/...: `adapt`'s model and report,
`calibrate`'s acceptance models) and every file it writes where the user named one (--out FILE) is
written here, and only here, with one set of checks.

A repository is someone else's: it may commit `.diffusion-lsp -> ~/elsewhere`, a linked
`.diffusion-lsp/acceptance`, or `.diffusion-lsp/acceptance/acceptance.json -> ~/.bashrc`, and a
write that followed any of them would land outside the workspace, and be recorded on this machine as
a model it made (local_state.trust). So, below the workspace (resolved: the user named it, and links
above it are theirs):

- each folder is opened relative to the one above it without following a link (O_NOFOLLOW and
  dir_fd: no check-then-use gap), and created that way when missing;
- the target must be absent or a regular file (not a link, a FIFO, a folder);
- the bytes go to a new temporary file in the same folder (O_EXCL | O_NOFOLLOW), are flushed, and
  os.replace puts it in place: a reader sees the old file or the new one, never half of one;
- only then is a model folder recorded as trusted (`write_trusted`).

Whatever is refused is one UserError line naming the path and what to do. An argument that names a
file a command writes is declared `type=output_path` (tests/test_input_files.py walks the parsers)."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from pathlib import Path, PurePath

from .errors import UserError
from .input_files import open_checked
from .local_state import trust

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_NEW_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def _refuse(path: Path, what: str, flag: str | None = "--out") -> UserError:
    """One line: what `path` is, and what to do; `flag` is the option that names another place (None:
    the command has none). A folder is never offered for removal: it may hold the user's work."""
    other = f"name another place with {flag}" if flag else "name another place"
    todo = other if what == "a folder" else f"remove it, or {other}"
    return UserError(f"{path} is {what}: diffusion-lsp writes only into real folders and files; {todo}")


def _what(fd: int, name: str) -> str | None:
    """Why the entry `name` in the folder `fd` is no place to write through; None when it is absent."""
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return _link(fd, name)
    return "" if stat.S_ISDIR(st.st_mode) else "not a folder"


def _link(fd: int | None, name: str) -> str:
    """A refusal naming where the link `name` (in the folder `fd`) points, when it can be read."""
    try:
        return f"a symlink (to {os.readlink(name, dir_fd=fd)})"
    except OSError:
        return "a symlink"


def _relative(rel: str | PurePath) -> tuple[str, ...]:
    parts = PurePath(rel).parts
    if not parts or PurePath(rel).is_absolute() or any(p in ("..", ".") for p in parts):
        raise ValueError(f"{rel}: a path inside the workspace is wanted")
    return parts


@contextlib.contextmanager
def _folder(root: Path, parts: tuple[str, ...], create: bool, flag: str | None = "--out"):
    """The descriptor of root/parts, each folder opened without following a link (created when
    `create`); None when one is missing and not `create`."""
    try:
        fd = os.open(root, _DIR_FLAGS & ~getattr(os, "O_NOFOLLOW", 0))  # the root: the user named it
    except (FileNotFoundError, NotADirectoryError):
        raise UserError(f"{root} is not a folder") from None
    except OSError as e:
        raise UserError(f"cannot write in {root}: {e.strerror}") from None
    try:
        for k, name in enumerate(parts):
            here = root.joinpath(*parts[:k + 1])
            why = _what(fd, name)
            if why is None and create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
                why = _what(fd, name)
            if why is None:
                os.close(fd)
                fd = None
                break
            if why:
                raise _refuse(here, why, flag)
            fd_next = os.open(name, _DIR_FLAGS, dir_fd=fd)  # ELOOP if a link was swapped in since
            os.close(fd)
            fd = fd_next
        yield fd
    except OSError as e:
        raise UserError(f"cannot write in {root}: {e.strerror}") from None
    finally:
        if fd is not None:
            os.close(fd)


def _target_problem(fd: int | None, name: str) -> str | None:
    """Why the file `name` (in the folder `fd`; None: `name` is a whole path) is no place to write;
    None when it is absent or a regular file."""
    try:
        st = os.stat(name, dir_fd=fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    if stat.S_ISREG(st.st_mode):
        return None
    if stat.S_ISLNK(st.st_mode):
        return _link(fd, name)
    return "a folder" if stat.S_ISDIR(st.st_mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(st.st_mode) \
        else "not a regular file"


def check_in(workspace: str | Path, rel: str | PurePath, folder: bool = False, flag: str | None = "--out") -> Path:
    """workspace/rel, once nothing below the workspace on the way to it is a link or not a folder,
    and it is absent or a regular file (a real folder when `folder`); UserError otherwise. Writes
    nothing: a command checks first, to refuse before minutes of work."""
    root, parts = Path(workspace).resolve(), _relative(rel)
    with _folder(root, parts if folder else parts[:-1], create=False, flag=flag) as fd:
        if fd is not None and not folder and (why := _target_problem(fd, parts[-1])):
            raise _refuse(root.joinpath(*parts), why, flag)
    return root.joinpath(*parts)


def write_in(workspace: str | Path, rel: str | PurePath, data: bytes | str, flag: str | None = "--out") -> Path:
    """Write `data` to workspace/rel with the checks above (folders made as needed) -> the path."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return _place(workspace, rel, lambda f: f.write(raw), flag)


def copy_in(workspace: str | Path, rel: str | PurePath, source: Path) -> Path:
    """Copy the file `source` (weights: streamed, not held in memory) to workspace/rel as write_in writes."""
    def fill(f) -> None:
        with open_checked(str(source)) as src:
            shutil.copyfileobj(src, f, 1 << 20)
    return _place(workspace, rel, fill)


def _place(workspace: str | Path, rel: str | PurePath, fill, flag: str | None = "--out") -> Path:
    root, parts = Path(workspace).resolve(), _relative(rel)
    path = root.joinpath(*parts)
    with _folder(root, parts[:-1], create=True, flag=flag) as fd:
        if (why := _target_problem(fd, parts[-1])):
            raise _refuse(path, why, flag)
        tmp = f".{parts[-1]}.{os.getpid()}.tmp"
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=fd)  # a leftover of a killed run of this pid
            out = os.open(tmp, _NEW_FLAGS, 0o644, dir_fd=fd)
            with os.fdopen(out, "wb") as f:
                fill(f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, parts[-1], src_dir_fd=fd, dst_dir_fd=fd)
        except BaseException as e:  # nothing is left beside the target, whatever stopped the write
            with contextlib.suppress(OSError):
                os.unlink(tmp, dir_fd=fd)
            if isinstance(e, OSError):
                raise UserError(f"cannot write {path}: {e.strerror}") from None
            raise
    return path


def write_file(path: str | Path, data: bytes | str, flag: str | None = "--out") -> Path:
    """Write `data` to a file the user named (`flag` FILE) with the same target checks: its folder is
    the user's, the file itself is replaced atomically and never written through a link."""
    path = Path(path)
    return write_in(path.parent, path.name, data, flag)


def stream_file(path: str | Path, fill, flag: str | None = "--out") -> Path:
    """write_file for bytes made while written (a tar.xz): `fill(f)` writes them to the binary file f."""
    path = Path(path)
    return _place(path.parent, path.name, fill, flag)


def check_file(path: str | Path, flag: str | None = "--out") -> Path:
    """The checks write_file makes, made now (the folder must exist): a command refuses a symlink,
    a FIFO or a folder it was told to write before minutes of work, not after."""
    path = Path(path)
    if not path.resolve().parent.is_dir():
        raise UserError(f"cannot write {path}: no folder {path.resolve().parent}")
    return check_in(path.parent, path.name, flag=flag)


def append_file(path: str | Path, text: str, flag: str | None = "--out") -> Path:
    """Append `text` to a file the user named (a CI step summary, which others append to as well, so it
    is added to in place, not replaced): opened without following a link or waiting on a FIFO, and
    written only once the open descriptor is a regular file."""
    path = Path(path)
    check_file(path, flag)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
                     | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as e:  # ELOOP: a link swapped in since the check; ENXIO: a FIFO with no reader
        raise UserError(f"cannot write {path}: {e.strerror}") from None
    with os.fdopen(fd, "ab") as f:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _refuse(path, "not a regular file", flag)
        os.set_blocking(fd, True)
        f.write(text.encode("utf-8"))
    return path


def write_trusted(workspace: str | Path, rel: str | PurePath, data: bytes | str) -> tuple[Path, bool]:
    """write_in, then record the file's folder on this machine as made for `workspace` (the server
    then uses it there without a setting) -> (the path, whether the record was written)."""
    path = write_in(workspace, rel, data)
    return path, trust(path.parent, Path(workspace))


def no_link_below(folder: Path) -> None:
    """UserError naming the first link or FIFO found below `folder` (a real folder): a command that
    writes many files into it (adapt's run) checks them all once, before it starts."""
    for here, dirs, names in os.walk(folder):  # os.walk enters no linked folder
        for name in dirs + names:
            p = Path(here) / name
            why = _target_problem(None, str(p))
            if why and not (why == "a folder" and name in dirs):
                raise _refuse(p, why)


def output_path(value: str) -> str:
    """The argparse type of an argument that names a file a command writes (not one it reads: those
    are input_files.InputFile); the test that walks every command's parser tells the two apart by it."""
    return value
