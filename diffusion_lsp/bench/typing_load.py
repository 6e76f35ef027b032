"""`diffusion-lsp bench lsp --typing-seconds S`: a user typing into the running server for S seconds.

With `--open-docs` other large documents open (a Crowd, some of them edited between sites), the
"user" retypes the first line of block bodies of the 5,000-line file one key at a time, at most one
key per `--key-ms`: after each key an inline completion and then a next edit (nextEdit.enable, its
other settings the editors' defaults) are asked, each awaited before the next key, as a typist who
waits for the ghost text would. Printed: the keys typed, completion and next-edit p50/p95 as the
client saw them, the resident memory (RSS) of the server and of its worker at the start and the end,
and the load average meanwhile (the machine may be shared). With `--baseline DIR` the same session
first runs against the server of the source tree DIR (another checkout: its own server and worker),
and both columns are printed side by side. Prints figures; asserts nothing."""

from __future__ import annotations

import asyncio
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .replay import Crowd, find_sites


@dataclass
class Session:
    """What one typing session measured."""

    keys: int = 0
    seconds: float = 0.0
    completion_ms: list[float] = field(default_factory=list)
    next_edit_ms: list[float] = field(default_factory=list)
    next_edits_shown: int = 0
    rss_mb: dict[str, tuple[float | None, float | None]] = field(default_factory=dict)  # process -> start, end
    load: tuple[float, float] = (0.0, 0.0)  # 1-minute load average at the start, the end
    shown: list[str] = field(default_factory=list)  # what the server showed the user meanwhile


def rss_mb(pid: int | None) -> float | None:
    """A process's resident memory in MB (Linux /proc), None when it cannot be read."""
    try:
        with open(f"/proc/{pid}/status") as f:
            kb = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
    except (OSError, StopIteration, ValueError):
        return None
    return kb / 1024


def quantile(values: list[float], q: float) -> float | None:
    """Nearest-rank quantile (q in [0, 1]); None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def server_command(cmd: list[str], tree: Path | None) -> list[str]:
    """The `serve` command line, run from the source tree `tree` (its package first on the path,
    for the server and the worker it starts) when one is given."""
    return cmd if tree is None else ["env", f"PYTHONPATH={tree}", *cmd]


async def _key(lsp, uri: str, line: int, typed: str, session: Session) -> None:
    ms, _ = await lsp.complete(uri, line, typed)
    session.completion_ms.append(ms)
    ms, edit = await lsp.next_edit(uri, line, typed)
    session.next_edit_ms.append(ms)
    session.next_edits_shown += edit is not None


async def type_for(lsp, uri: str, text: str, crowd: Crowd | None, seconds: float, key_ms: float,
                   rng: random.Random) -> Session:
    """Retype body lines of `text` under `uri` for `seconds` (see the module doc) -> the Session."""
    session, lines = Session(), text.split("\n")
    sites = find_sites(lines)
    rng.shuffle(sites)
    if crowd is not None:
        crowd.open(lsp)
    lsp.open(uri, text)
    pids = {"server": lsp.pid, "worker": (await lsp.stats())["worker"]["pid"]}
    start = {name: rss_mb(pid) for name, pid in pids.items()}
    load0, t0 = os.getloadavg()[0], time.monotonic()
    end, k = t0 + seconds, 0
    while time.monotonic() < end and sites:
        site = sites[k % len(sites)]
        k += 1
        if crowd is not None:
            crowd.edit_next(lsp)
        opener, last = lines[site.line], lines[site.last]
        lsp.change(uri, (site.line, opener), (site.last, last), "\n" + site.indent)  # the body gone, Enter
        typed = site.indent
        for ch in site.first:
            if time.monotonic() >= end:
                break
            began = time.monotonic()
            lsp.change(uri, (site.line + 1, typed), (site.line + 1, typed), ch)
            typed += ch
            session.keys += 1
            await _key(lsp, uri, site.line + 1, typed, session)
            await asyncio.sleep(max(0.0, key_ms / 1e3 - (time.monotonic() - began)))
        lsp.replace_all(uri, text)
    session.seconds = time.monotonic() - t0
    await lsp.stats()  # every change handled before the memory is read
    session.rss_mb = {name: (start[name], rss_mb(pid)) for name, pid in pids.items()}
    session.load = (load0, os.getloadavg()[0])
    session.shown = list(lsp.shown)
    lsp.close(uri)
    if crowd is not None:
        crowd.close(lsp)
    return session


def _ms(v: float | None) -> str:
    return "-" if v is None else f"{v:,.0f}"


def _mb(v: float | None) -> str:
    return "-" if v is None else f"{v:,.1f}"


def rows(s: Session) -> dict[str, str]:
    """One column of the table: a Session's figures as text."""
    out = {"keys typed (per second)": f"{s.keys:,} ({s.keys / s.seconds:.1f}/s)" if s.seconds else "0",
           "completion p50 / p95 ms": f"{_ms(quantile(s.completion_ms, .5))} / {_ms(quantile(s.completion_ms, .95))}",
           "next edit p50 / p95 ms": f"{_ms(quantile(s.next_edit_ms, .5))} / {_ms(quantile(s.next_edit_ms, .95))}",
           "next edits shown": f"{s.next_edits_shown:,}"}
    for name, (a, b) in s.rss_mb.items():
        grew = "" if a is None or b is None else f" ({b - a:+.1f})"
        out[f"{name} RSS MB start -> end"] = f"{_mb(a)} -> {_mb(b)}{grew}"
    out["load average start -> end"] = f"{s.load[0]:.2f} -> {s.load[1]:.2f} ({os.cpu_count()} cores)"
    out["messages shown"] = f"{len(s.shown)}"
    return out


def print_sessions(title: str, sessions: dict[str, Session]) -> None:
    """The sessions' figures side by side, a column each."""
    columns = {name: rows(s) for name, s in sessions.items()}
    names = list(next(iter(columns.values())))
    width = max(len(n) for n in names) + 2
    cells = {name: max(len(name), *(len(v) for v in col.values())) + 2 for name, col in columns.items()}
    print(title)
    print(" " * width + "".join(f"{name:>{cells[name]}}" for name in columns))
    for row in names:
        print(f"{row:<{width}}" + "".join(f"{col[row]:>{cells[name]}}" for name, col in columns.items()))
    for name, s in sessions.items():
        for message in s.shown[:3]:
            print(f"  {name} showed: {message}")
    print(f"  python {sys.version.split()[0]}; times are the client's, each request awaited before the next key")
