"""Next-edit training rows: records from `diffusion-lsp data edits` (data/edits.py) laid out with the
prompt the server sends (formats/edit_prompt.py), so the model is taught exactly what it is asked.

    [bos] + tok(prefix) + canvas + tok(suffix)

prefix = edit history + file header + code before the region (and, in "copy" rows, the old region
between `<|original|>` and `<|edited|>`); the canvas is the new region's tokens followed by filler
tokens, as many as the old region's size plus some slack (the sampler's canvas is sized from the old
region, and an edit may grow or shrink it); only the canvas is maskable, as in FIM rows (objective.py).
Half the rows are "copy" rows (full re-mask mode), half "in place" rows (remask-and-refine mode).

Records are drawn with weight 1/sqrt(records of their kind): synthetic renames far outnumber the mined
edits and the rarer synthetic kinds, which square-root balancing lifts without repeating them too often.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..formats.edit_prompt import edit_prompt
from .objective import Row, _bos, _pad

HISTORY_TOKENS = 120  # history budget for the embedded model's 512 positions
COPY_RATE = 0.5  # rows that show the old region before the canvas
SLACK = (4, 33)  # filler tokens beyond the old region's size: U[4, 33)


@dataclass
class EditSet:
    records: list[dict]
    cumulative: np.ndarray  # [N] float: cumulative sampling weight, ending at 1

    def __len__(self) -> int:
        return len(self.records)

    def pick(self, rng: np.random.Generator) -> dict:
        return self.records[min(int(np.searchsorted(self.cumulative, rng.random(), side="right")), len(self) - 1)]

    @classmethod
    def of(cls, records: list[dict]) -> "EditSet":
        kinds = Counter(r.get("kind", "") for r in records)
        w = np.array([kinds[r.get("kind", "")] ** -0.5 for r in records])
        return cls(records, np.cumsum(w / w.sum()))


def load_records(path: str | Path) -> EditSet:
    """The records of one split (train.jsonl / val.jsonl of an edits folder)."""
    path = Path(path)
    out = []
    with path.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    r = json.loads(line)
                    out.append({k: r[k] for k in ("kind", "path", "diffs", "before", "after", "old_region",
                                                  "new_region")})
                except (json.JSONDecodeError, KeyError, TypeError) as e:
                    raise ValueError(f"{path}:{n}: not an edit record ({e})") from None
    if not out:
        raise ValueError(f"{path}: no edit records")
    return EditSet.of(out)


def edit_row(rec: dict, seq_len: int, tok, rng: np.random.Generator, copy: bool | None = None) -> Row | None:
    """One record as a training row; None when its canvas cannot fit in seq_len with a header."""
    bos = _bos(tok)
    count = lambda s: len(tok.encode(s)) if s else 0  # noqa: E731
    new = tok.encode(rec["new_region"]) if rec["new_region"] else []
    n_old = count(rec["old_region"])
    size = max(len(new), n_old + int(rng.integers(*SLACK)))  # canvas positions
    budget = seq_len - len(bos) - size
    if copy is None:
        copy = bool(rng.random() < COPY_RATE)
    if budget < 32 + (n_old if copy else 0):
        return None
    p = edit_prompt(rec["diffs"], rec["path"], rec["before"], rec["after"], count, budget,
                    history_budget=min(HISTORY_TOKENS, budget // 2), old_region=rec["old_region"] if copy else None)
    prefix = tok.encode(p.prefix)
    if len(bos) + len(prefix) + size > seq_len:  # counts of pieces can differ from the whole by a token
        return None
    canvas = new + [tok.filler_id] * (size - len(new))
    ids = (bos + prefix + canvas + tok.encode(p.suffix))[:seq_len]
    maskable = [False] * (len(bos) + len(prefix)) + [True] * size
    return _pad(ids, (maskable + [False] * len(ids))[: len(ids)], seq_len, tok.filler_id, blockable=True)


def edit_rows(records: EditSet, n: int, seq_len: int, tok, rng: np.random.Generator, tries: int = 4) -> list[Row]:
    """n rows from records drawn at random (a record that does not fit is redrawn, up to `tries` times)."""
    rows = []
    for _ in range(n):
        for _ in range(tries):
            row = edit_row(records.pick(rng), seq_len, tok, rng)
            if row is not None:
                rows.append(row)
                break
    return rows
