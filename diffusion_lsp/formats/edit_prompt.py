"""What the model reads for a next edit; training rows (data/edits.py) and the server use this one
format, so the model is asked exactly what it was taught.

    <|edit_history|>
    --- a/pkg/mod.py
    +++ b/pkg/mod.py
    @@ -10,1 +10,1 @@
    -def f(x):
    +def f(x, y):
    <|current_file|> pkg/mod.py
    ...code before the region...[CANVAS: the region, masked]...code after the region...

In full re-mask mode the old region is shown too, just before the canvas, between `<|original|>`
and `<|edited|>` lines: the canvas is then the region as it should read after the next edit. In
remask-and-refine mode there is no copy: the region stands in place and only what may change is
masked.

Definitions from other open files that the region uses (as for completion, context/crossfile.py)
sit between the history and the file, under `<|definitions|>`, when there are any. The history comes first and is kept whole (newest last, at most `max_steps` diffs that fit their
budget); the file context is then cut around the region at line boundaries to fit what is left,
more of it before the region than after (the cursor's side)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..context.tokens import over_budget

HISTORY = "<|edit_history|>\n"
DEFINITIONS = "<|definitions|>\n"  # other open files' definitions the region uses, as comments
FILE = "<|current_file|> "
ORIGINAL = "<|original|>\n"
EDITED = "<|edited|>\n"
NO_HISTORY = "(none)\n"


@dataclass(frozen=True)
class EditPrompt:
    prefix: str  # history + file header + code before the region
    suffix: str  # code after the region
    history_steps: int  # diffs kept


def history_block(diffs: list[str], count: Callable[[str], int], budget: int, max_steps: int = 5) -> tuple[str, int]:
    """The newest diffs that fit `budget` tokens (at most max_steps), oldest first -> (text, kept)."""
    kept: list[str] = []
    used = count(HISTORY)
    for d in reversed(diffs[-max_steps:] if max_steps > 0 else []):
        d = d if d.endswith("\n") else d + "\n"
        n = count(d)
        if used + n > budget:
            break
        kept.append(d)
        used += n
    kept.reverse()
    return HISTORY + ("".join(kept) if kept else NO_HISTORY), len(kept)


def cut_lines(text: str, count: Callable[[str], int], budget: int, keep_end: bool) -> str:
    """The whole lines of `text` nearest the region (its end when keep_end) that fit `budget` tokens."""
    if budget <= 0 or not text:
        return ""
    if not over_budget(count, text, budget):
        return text
    lines = text.splitlines(keepends=True)
    order = reversed(lines) if keep_end else iter(lines)
    kept, used = [], 0
    for line in order:
        if over_budget(count, line, budget - used):  # a huge line ends it uncounted
            break
        kept.append(line)
        used += count(line)
    return "".join(reversed(kept) if keep_end else kept)


def edit_prompt(diffs: list[str], path: str, before: str, after: str, count: Callable[[str], int],
                budget: int, history_budget: int | None = None, max_steps: int = 5,
                old_region: str | None = None, definitions: str = "") -> EditPrompt:
    """The prompt around one region. `before`/`after`: the file's text before and after the region;
    `budget`: tokens for everything but the canvas; the history gets at most `history_budget` (default
    half), the code before the region 3/4 of the rest, the code after it what is left. With
    `old_region` (full re-mask), the old region is shown before the canvas and counts in the budget.
    `definitions` (cross-file context, already cut to its budget) goes between history and file."""
    history_budget = budget // 2 if history_budget is None else min(history_budget, budget)
    head, kept = history_block(diffs, count, history_budget, max_steps)
    if definitions:
        head += DEFINITIONS + definitions + ("" if definitions.endswith("\n") else "\n")
    head += f"{FILE}{path}\n"
    tail = ""
    if old_region is not None:
        tail = ORIGINAL + (old_region if not old_region or old_region.endswith("\n") else old_region + "\n") + EDITED
    rest = max(0, budget - count(head) - count(tail))
    after_cut = cut_lines(after, count, rest // 4, keep_end=False)
    before_cut = cut_lines(before, count, rest - count(after_cut), keep_end=True)
    return EditPrompt(head + before_cut + tail, after_cut, kept)
