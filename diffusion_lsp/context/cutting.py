"""Cutting the prefix and suffix out of a document within a token budget, at whole lines.

Tokens are counted only for what is kept, one line at a time outwards from the cursor, and each
line's count is memoized: while the user types, every line but the cursor's was counted for an
earlier request, so a request costs one tokenizer call or two. (The Hugging Face BPE here costs
~8 us per call plus ~0.5 us per character; a cold 384-token prefix is ~1 ms.) Line counts are
summed, which a byte-level BPE matches to within about a token per line; the canvas builder trims
whatever is left over. A line longer than the whole budget (minified code, binary text) is cut
inside the line instead, keeping the part nearest the cursor."""

from __future__ import annotations

import weakref
from typing import Callable

from .lines import indent_at, width
from .records import ContextBudget

CountTokens = Callable[[str], int]
CHARS_PER_TOKEN_CAP = 8  # never look at more than budget * this many characters
SNAP_KEEP = 0.5  # start at a unit boundary only if that keeps at least this share of the prefix
MEMO_SIZE = 50_000  # memoized line counts per tokenizer (cleared when full)
MEMO_MAX_CHARS = 2048  # longer strings are counted every time


class MemoCounter:
    """count_tokens with memoized results for short strings."""

    def __init__(self, count: CountTokens):
        self.count, self.memo = count, {}

    def __call__(self, s: str) -> int:
        n = self.memo.get(s)
        if n is None:
            n = self.count(s)
            self._keep(s, n)
        return n

    def _keep(self, s: str, n: int) -> None:
        if len(s) <= MEMO_MAX_CHARS:
            if len(self.memo) >= MEMO_SIZE:
                self.memo.clear()
            self.memo[s] = n

    def missing(self, text: str) -> list[str]:
        """The lines of `text` ("line\n", as the cutters ask for them) not counted yet."""
        todo = dict.fromkeys(line + "\n" for line in text.split("\n")[:MEMO_SIZE // 2])
        return [s for s in todo if s not in self.memo and len(s) <= MEMO_MAX_CHARS]

    def keep_many(self, strings: list[str], counts: list[int]) -> None:
        for s, n in zip(strings, counts):
            self._keep(s, n)

    def prime(self, text: str, chunk: int = 512) -> int:
        """Count every line of `text` ahead of time, in batches when the counter can (`count.many`),
        so that the first completion after a jump to anywhere in an opened document finds its lines
        counted. Returns the lines counted. (The language server counts them in its indexer's
        child process instead, and keeps them here with `keep_many`.)"""
        todo = self.missing(text)
        many = getattr(self.count, "many", None)
        for i in range(0, len(todo), chunk):
            part = todo[i:i + chunk]
            self.keep_many(part, many(part) if many else list(map(self.count, part)))
        return len(todo)


_MEMOS: "weakref.WeakKeyDictionary[Callable, MemoCounter]" = weakref.WeakKeyDictionary()


def memoized(count: CountTokens) -> MemoCounter:
    """The memoizing wrapper of `count`, kept for as long as `count` lives (pass the same callable
    on every request; a fresh lambda or bound method each time gets a fresh, empty memo)."""
    if isinstance(count, MemoCounter):
        return count
    try:
        memo = _MEMOS.get(count)
        if memo is None:
            memo = _MEMOS[count] = MemoCounter(count)
        return memo
    except TypeError:  # not weakly referenceable
        return MemoCounter(count)


def _fit(piece: str, budget: int, count: CountTokens, keep_end: bool) -> tuple[str, int]:
    """Shorten `piece` from the far side (left when keep_end) until it fits `budget` tokens."""
    n = count(piece) if piece else 0
    while n > budget and piece:
        cut = max(1, len(piece) // 4)
        piece = piece[cut:] if keep_end else piece[:-cut]
        n = count(piece) if piece else 0
    return piece, n


def take_prefix(text: str, offset: int, budget: int, count: CountTokens) -> tuple[int, int]:
    """(start, tokens): text[start:offset] fits `budget` and starts at a line start unless the
    cursor's own line is too long for the budget."""
    cap = max(budget, 1) * CHARS_PER_TOKEN_CAP
    pos = text.rfind("\n", 0, offset) + 1
    head = text[pos:offset]
    head, used = _fit(head[-cap:] if len(head) > cap else head, budget, count, keep_end=True)
    if offset - len(head) != pos:
        return offset - len(head), used
    while pos > 0:
        start = text.rfind("\n", 0, pos - 1) + 1
        if offset - start > cap:
            break
        n = count(text[start:pos])
        if used + n > budget:
            break
        used, pos = used + n, start
    return pos, used


def take_suffix(text: str, offset: int, budget: int, count: CountTokens) -> tuple[int, int]:
    """(end, tokens): text[offset:end] fits `budget` and ends at a line end unless the rest of the
    cursor's line is too long for the budget."""
    cap = max(budget, 1) * CHARS_PER_TOKEN_CAP
    pos = text.find("\n", offset)
    pos = len(text) if pos < 0 else pos
    rest = text[offset:pos]
    rest, used = _fit(rest[:cap] if len(rest) > cap else rest, budget, count, keep_end=False)
    if offset + len(rest) != pos:
        return offset + len(rest), used
    while pos < len(text):
        end = text.find("\n", pos + 1)
        end = len(text) if end < 0 else end
        if end - offset > cap:
            break
        n = count(text[pos + 1:end + 1])  # the next line with its newline, as prime() counts lines
        if used + n > budget:
            break
        used, pos = used + n, end
    return pos, used


def heuristic_unit_starts(text: str, start: int, stop: int) -> list[int]:
    """Line starts in [start, stop] that look like top-level units when there is no parse: lines at
    column 0 that are neither closing brackets nor continuations of the line above."""
    out, pos, prev = [], start, ""
    while pos <= stop:
        end = text.find("\n", pos)
        end = len(text) if end < 0 else end
        line = text[pos:end]
        if line[:1] and not line[0].isspace() and line[0] not in ")]}" and \
                not prev.rstrip().endswith(("\\", ",", "(", "[")):
            out.append(pos)
        if line.strip():
            prev = line
        pos = end + 1
    return out


def snap_start(text: str, start: int, offset: int, unit_starts: list[int]) -> int:
    """Move the prefix start forward to the first unit boundary after it, when that keeps at least
    SNAP_KEEP of the prefix; a prefix that begins mid-definition confuses the model more than a
    shorter one that begins at a `def`. Only the shallowest units count: a window parsed from the
    middle of a function sees its indented statements as top-level ones."""
    line_start = text.rfind("\n", 0, offset) + 1
    depth = {u: width(indent_at(text, u)) for u in unit_starts if start <= u <= line_start}
    if not depth:
        return start
    top = min(depth.values())
    if depth.get(start) == top:
        return start
    u = min(u for u, d in depth.items() if d == top)
    return u if offset - u >= SNAP_KEEP * (offset - start) else start


def cut_around(prefix: str, suffix: str, total: int, count: CountTokens) -> tuple[str, str]:
    """The prefix and suffix the language server would keep within `total` tokens (ContextBudget
    .split, the cross-file share going to the prefix: a headless fill has no other documents), so
    that `fim` sees what an editor's completion at the same spot sees. `total` 0 keeps everything."""
    if total <= 0:
        return prefix, suffix
    budget, count = ContextBudget.split(total), memoized(count)
    text, offset = prefix + suffix, len(prefix)
    start, _ = take_prefix(text, offset, budget.prefix_tokens + budget.cross_file_tokens, count)
    end, _ = take_suffix(text, offset, budget.suffix_tokens, count)
    return text[start:offset], text[offset:end]
