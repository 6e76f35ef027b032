"""LRU of recent completions (the candidate shown, candidate.py's), keyed by (uri, hash of the text
before the cursor, hash of the text after it).

Type-ahead: while the user types characters that match the suggestion on screen, the document
changes, so the exact key misses; `lookup` then finds the entry whose prefix is the new prefix
minus what was typed and answers with the rest of the suggestion at once, at the new cursor,
without the model."""

from __future__ import annotations

import dataclasses

from collections import OrderedDict
from dataclasses import dataclass

from ..candidate import Candidate

TYPE_AHEAD_SCAN = 8  # recent entries of the same document tried for type-ahead


@dataclass(frozen=True)
class _Entry:
    uri: str
    prefix_len: int
    prefix_hash: int
    suffix_hash: int
    suggestion: Candidate | None  # None: the model had nothing to say here (a negative entry)


class CompletionCache:
    def __init__(self, size: int = 256):
        self.size = size
        self._entries: OrderedDict[tuple[str, int, int], _Entry] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()

    def put(self, uri: str, prefix: str, suffix: str, suggestion: Candidate | None) -> None:
        if self.size <= 0:
            return
        key = (uri, hash(prefix), hash(suffix))
        self._entries[key] = _Entry(uri, len(prefix), key[1], key[2], suggestion)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def lookup(self, uri: str, prefix: str, suffix: str) -> tuple[bool, Candidate | None]:
        """(hit, suggestion). A hit with None means "asked here before, nothing to suggest"."""
        key = (uri, hash(prefix), hash(suffix))
        entry = self._entries.get(key)
        if entry is not None:
            self._entries.move_to_end(key)
            return True, entry.suggestion
        tried = 0
        for entry in reversed(self._entries.values()):
            if entry.uri != uri:
                continue
            tried += 1
            if tried > TYPE_AHEAD_SCAN:
                break
            rest = _type_ahead(entry, prefix, key[2])
            if rest is not None:
                return True, rest
        return False, None


def _type_ahead(entry: _Entry, prefix: str, suffix_hash: int) -> Candidate | None:
    sug = entry.suggestion
    typed = len(prefix) - entry.prefix_len
    if sug is None or entry.suffix_hash != suffix_hash or not 0 < typed < len(sug.text):
        return None
    if not sug.text.startswith(prefix[entry.prefix_len:]) or hash(prefix[: entry.prefix_len]) != entry.prefix_hash:
        return None
    return dataclasses.replace(sug, start=sug.start + typed, end=sug.end + typed, text=sug.text[typed:])
