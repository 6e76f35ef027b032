"""Next edits on a repository's own history (`adapt`, `eval repo`): the held-out files' recent
commits replayed hunk by hunk (data/git_history.py), each next hunk scored as `eval nep` scores it
(nep_metrics.py: exact, partial and position match), for the model beside repeating the last edit.
The baseline is nep_baselines.py's; the model's edits are nextedit/run.py's."""

from __future__ import annotations

import random
import time
from collections.abc import Iterable

from ..context.languages import language_for
from ..data.git_history import EditStep, edit_steps, file_pairs
from ..context.repo import SourceFile
from .nep_baselines import repeat_last_edit
from .nep_metrics import score, summarize

MAX_CASES = 60  # next edits measured: a minute of the embedded model at most


def history_cases(root, files: list[SourceFile], n: int = MAX_CASES, seed: int = 0) -> list[EditStep]:
    """Up to n next edits from the recent commits of the held-out files among `files` (none outside
    git), spread over the commits at random with `seed`."""
    held = {f.path for f in files if f.held_out}
    steps = [s for pair in file_pairs(root, held) for s in edit_steps(pair)]
    if len(steps) > n:
        steps = random.Random(seed).sample(steps, n)
    return sorted(steps, key=lambda s: s.id)


def baseline_row(steps: list[EditStep]) -> dict:
    """Repeating the last edit where it applies (repeat_last_edit)."""
    return summarize("repeat last edit", [score(s.current, s.new, repeat_last_edit(s.old, s.current, s.cursor))
                                          for s in steps])


async def model_row(backend, steps: Iterable[EditStep], count) -> dict:
    """The model's next edit at each step (the editor's default settings)."""
    from ..nextedit.run import predict_file  # the model's libraries: only here

    scores = []
    for s in steps:
        t0 = time.perf_counter()
        out = await predict_file(backend, s.path, s.old, s.current, s.cursor, language_for(None, s.path), count)
        scores.append(score(s.current, s.new, out.text, (time.perf_counter() - t0) * 1e3, out.forwards))
    return summarize("model", scores)
