"""A next edit of a whole file, for `eval nep` and tests: the edit history derived from the file
before and after the user's edits (one step per hunk); the rest of a rename at its next sites
(scope.py), as the language server proposes it, else the one next-edit pipeline (suggest.py) over a
Backend (backend/local.py in process, or a remote API)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..context.languages import LanguageSpec
from .history import steps_between
from .follow import follow_text
from .settings import NextEditSettings
from .suggest import DOC_KEY, EditRequest, Outcome, suggest


@dataclass
class Predicted:
    text: str | None  # the whole file after the edit; None: no edit
    forwards: int
    outcome: Outcome | None


async def predict_file(backend, path: str, old: str, current: str, cursor: tuple[int, int],
                       spec: LanguageSpec | None, count: Callable[[str], int],
                       settings: NextEditSettings = NextEditSettings(), mode: str | None = None) -> Predicted:
    """The next edit of `current` (after the edits old -> current, one history step per hunk) at
    `cursor`: what `eval nep` asks. Raises BackendError."""
    steps = steps_between(path, old, current)
    if settings.follow and spec is not None:  # the rest of a rename first, as the language server does
        text = follow_text(current, spec, steps, cursor)
        if text is not None:
            return Predicted(text, 0, None)
    req = EditRequest(current, path, cursor, spec, [st.diff() for st in steps], steps[-1] if steps else None,
                      settings, count, mode=mode)
    out = await suggest(req, backend, DOC_KEY)
    text = None if out.edit is None else out.edit.apply(current)
    return Predicted(text, out.forwards, out)
