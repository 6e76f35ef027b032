"""How much one follow of the user's last change may do (the rules' table, rules.py, and each rule): a
deadline, a stop flag (a newer request for the document, or its caller gave up), where the walk for
sites begins, and how many sites it collects. A rule checks `spent()` inside its loops and, once it
is, returns what it has found so far: a request past its budget answers with that, never an error.

Why these numbers (measured on a loaded 2-core machine): an ordinary follow (a parameter renamed in
`bench lsp`'s 5,000-line file, its tree kept) takes 12 ms p50, 25 ms at most; a walk visits a tree
node in 1-5 us, so 250 ms reaches 50,000 nodes or more (thousands of lines) past the cursor, more
than a suggestion near the cursor needs. One suggestion is at most GROUP_SITES sites over
GROUP_SPAN lines: what an editor shows as one edit (a 100,000-call signature change once became one
3 MB edit). The behaviour is tests/test_follow_bounds.py's."""

from __future__ import annotations

import math
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

FOLLOW_MS = 250.0  # the rules' time for one request, parsing aside (its own bound: PARSE_S)
PARSE_S = 10.0  # a whole-document parse past this is abandoned (a 100,000-line file: 1-3 s here)
GROUP_SITES = 12  # sites in one suggestion at most
GROUP_SPAN = 20  # lines one suggestion spans at most
MOST_SITES = 64  # sites collected from the walk's start: the group near the cursor and the next


@dataclass
class Clock:
    """One request's time, shared by every walk of it: a deadline the parses push back by what they
    took, and a stop flag (a newer request for the document, or its caller gave up)."""

    deadline: float = math.inf  # time.monotonic()
    stop: threading.Event = field(default_factory=threading.Event)


@dataclass
class Budget:
    """One walk's bounds. `start`: a character offset where the walk for sites begins (the nearest
    sites first: a few lines above the cursor); 0: the whole document."""

    clock: Clock = field(default_factory=Clock)
    start: int = 0
    most: int = MOST_SITES

    @classmethod
    def of(cls, ms: float = FOLLOW_MS) -> "Budget":
        return cls(Clock(time.monotonic() + ms / 1e3))

    def spent(self) -> bool:
        return self.clock.stop.is_set() or time.monotonic() > self.clock.deadline

    def full(self, found: int) -> bool:
        """Whether a walk that has found `found` sites should stop: enough of them, or no time left."""
        return found >= self.most or self.spent()

    def at(self, start: int) -> "Budget":
        """The same bounds (the same clock) for a walk from `start`."""
        return Budget(self.clock, start, self.most)

    def stop(self) -> None:
        self.clock.stop.set()

    @contextmanager
    def applied(self) -> Iterator["Budget"]:
        """The budget the parses in this thread answer to (`parsing`) while the block runs."""
        before = current()
        _local.budget = self
        try:
            yield self
        finally:
            _local.budget = before

    def parsing(self, began: float) -> bool:
        """Whether a parse that began at `began` is to be abandoned: stopped, or past PARSE_S."""
        return self.clock.stop.is_set() or time.monotonic() - began > PARSE_S

    def parsed(self, seconds: float) -> None:
        """A parse took `seconds`: the rules' deadline moves back by as much."""
        self.clock.deadline += seconds


UNBOUNDED = Budget(most=sys.maxsize)  # every site of the whole file, no clock: a rule asked alone (tests, bench)
_local = threading.local()


def current() -> Budget:
    """The budget applied in this thread (UNBOUNDED outside any)."""
    return getattr(_local, "budget", UNBOUNDED)
