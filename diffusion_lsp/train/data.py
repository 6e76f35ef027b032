"""Training data: random crops of a corpus split's token ids (data/token_files.py).

Batches are a pure function of (seed, rank, step): `Batches.get(step)` seeds a fresh generator
with those, so a resumed run or another rank needs no saved data state. With next-edit records
(train/edit_rows.py), a binomial share `edit_rate` of each batch's rows are edit rows.
"""

from __future__ import annotations

import numpy as np

from ..data.token_files import TokenFiles
from .edit_rows import EditSet, edit_rows
from .objective import Batch, ObjectiveConfig, make_batch


def newline_table(tok) -> np.ndarray:
    """[V] bool: which token ids decode to text containing a newline (line-aligned FIM spans)."""
    table = np.zeros(tok.vocab_size, dtype=bool)
    table[tok.newline_ids] = True
    return table


class Batches:
    """Deterministic random batches of one split for one rank."""

    def __init__(self, files: TokenFiles, tok, seq_len: int, batch_size: int, objective: ObjectiveConfig,
                 seed: int, rank: int = 0, newline: np.ndarray | None = None, edits: EditSet | None = None,
                 edit_rate: float = 0.0):
        self.files, self.tok, self.seq_len, self.batch_size = files, tok, seq_len, batch_size
        self.edits, self.edit_rate = edits, edit_rate
        self.objective, self.seed, self.rank = objective, seed, rank
        self.newline = newline_table(tok) if newline is None else newline
        self.crop_len = seq_len - (0 if tok.bos_id is None else 1)

    def get(self, step: int, fim_rate: float | None = None, edit_rate: float | None = None) -> Batch:
        rng = np.random.default_rng([self.seed, self.rank, step])
        edit_rate = self.edit_rate if edit_rate is None else edit_rate
        n_edit = int(rng.binomial(self.batch_size, edit_rate)) if self.edits and edit_rate > 0 else 0
        crops = [self.files.crop(rng, self.crop_len) for _ in range(self.batch_size - n_edit)]
        extra = edit_rows(self.edits, n_edit, self.seq_len, self.tok, rng) if n_edit else []
        return make_batch(crops, self.seq_len, self.tok, self.newline, self.objective, rng, fim_rate, extra)
