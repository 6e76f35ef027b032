"""Recent edits across the open documents, offered to the model as context: the lines around each
edit, typing at one spot kept as one (its newest text)."""

from __future__ import annotations

from collections import deque

from ..context.records import EditSnippet
from .positions import line_span

CONTEXT_LINES = 2  # lines kept around an edit
MAX_LINES = 12  # at most this many of the edit's own lines: a replaced whole file is not a snippet
KEPT = 16


class RecentEdits:
    def __init__(self, size: int = KEPT):
        self.items: deque[EditSnippet] = deque(maxlen=size)  # oldest first
        self._last: tuple[str, int] = ("", -1)

    def note(self, uri: str, text: str, line: int, new_lines: int) -> None:
        """An edit starting at `line` of `text` (the edited document) that wrote `new_lines` line breaks."""
        lo = max(0, line - CONTEXT_LINES)
        hi = min(line + new_lines, lo + MAX_LINES) + CONTEXT_LINES + 1
        span = line_span(text, lo)  # lines lo..hi-1, without splitting the whole document
        if span is None:
            return
        end = span[0]
        for _ in range(hi - lo):
            nl = text.find("\n", end)
            end = len(text) + 1 if nl < 0 else nl + 1
            if nl < 0:
                break
        snippet = text[span[0]:end - 1]
        if self.items and self._last[0] == uri and abs(self._last[1] - line) <= CONTEXT_LINES:
            self.items.pop()  # the same spot, edited again (typing): keep the newest text only
        if snippet.strip():
            self.items.append(EditSnippet(uri, snippet))
            self._last = (uri, line)

    def oldest_first(self) -> list[EditSnippet]:
        return list(self.items)
