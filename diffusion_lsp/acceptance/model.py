"""A model of acceptance: P(the user keeps this text) for a candidate's features (features.py).

A logistic regression, small enough to read (`diffusion-lsp calibrate` prints its weights) and
fitted with numpy alone (Newton's method with an L2 penalty; a few milliseconds for thousands of
candidates). Its file is JSON, beside the model's weights (acceptance.json) or in a workspace's
.diffusion-lsp/ folder:

    {"format": 1, "kind": "completion", "features": [name, ...], "weights": [w, ...],
     "show_above": 0.4, "label": "exact", "fitted_on": {...}}

Two kinds: "completion" (acceptance.json, the features of features.py) and "edit"
(edit_acceptance.json, next edits: the features of edits.py); a file without "kind" is a
completion model.

A feature the file does not name weighs nothing; a name this code does not compute, a weight that
is not a finite number or a bar outside [0, 1] makes the file unusable (ValueError), and the server
then falls back to its rules with one log line."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..local_state import read_state
from .edits import EDIT_FEATURES
from .features import FEATURES

FORMAT = 1
FILE = "acceptance.json"
EDIT_FILE = "edit_acceptance.json"
KINDS = {"completion": FEATURES, "edit": EDIT_FEATURES}  # each kind's features, in a file's order
WORKSPACE_DIR = Path(".diffusion-lsp") / "acceptance"  # relative to a workspace: `calibrate` writes, the server looks


@dataclass(frozen=True)
class AcceptanceModel:
    weights: dict[str, float]
    show_above: float
    label: str = "exact"
    fitted_on: dict = field(default_factory=dict)
    origin: str = ""  # where it was read from, for the log and the stats
    kind: str = "completion"  # or "edit" (KINDS)

    def p(self, feats: dict[str, float]) -> float:
        z = sum(w * feats.get(name, 0.0) for name, w in self.weights.items())
        return 1.0 / (1.0 + math.exp(-max(-30.0, min(30.0, z))))

    def to_json(self) -> dict:
        names = [n for n in KINDS[self.kind] if n in self.weights]
        return {"format": FORMAT, "kind": self.kind, "features": names, "weights": [round(self.weights[n], 6) for n in names],
                "show_above": self.show_above, "label": self.label, "fitted_on": self.fitted_on}

    def save(self, path: str | Path) -> None:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(self.to_json(), indent=1) + "\n")
        tmp.replace(path)

    @classmethod
    def from_json(cls, raw, origin: str = "", kind: str = "completion") -> AcceptanceModel:
        """ValueError saying what is wrong when `raw` is not a model of `kind` this code can use."""
        if not isinstance(raw, dict) or raw.get("format") != FORMAT:
            raise ValueError(f"not an acceptance model of format {FORMAT}")
        if raw.get("kind", "completion") != kind:
            raise ValueError(f"an acceptance model of kind {str(raw.get('kind'))[:20]!r}, not {kind!r}")
        names, weights, bar = raw.get("features"), raw.get("weights"), raw.get("show_above")
        if not (isinstance(names, list) and isinstance(weights, list) and len(names) == len(weights)):
            raise ValueError("features and weights must be two lists of one length")
        unknown = [n for n in names if n not in KINDS[kind]]
        if unknown:
            raise ValueError(f"features this version does not compute: {', '.join(map(str, unknown[:5]))}")
        if not all(isinstance(w, (int, float)) and not isinstance(w, bool) and math.isfinite(w) for w in weights):
            raise ValueError("a weight that is not a finite number")
        if not (isinstance(bar, (int, float)) and not isinstance(bar, bool) and 0.0 <= bar <= 1.0):
            raise ValueError("show_above must be a number in [0, 1]")
        fitted = raw.get("fitted_on")
        return cls(dict(zip(names, map(float, weights))), float(bar), str(raw.get("label", "exact")),
                   fitted if isinstance(fitted, dict) else {}, origin, kind)

    @classmethod
    def load(cls, path: str | Path, kind: str = "completion") -> AcceptanceModel:
        """ValueError when the file cannot be read or used (missing, not a regular file, over 1 MiB,
        not JSON, or not a model)."""
        raw = read_state(Path(path))
        if raw is None:
            raise ValueError("missing, not a regular file, too large or not JSON")
        return cls.from_json(raw, str(path), kind)


def fit(rows: Sequence[dict[str, float]], labels: Sequence[bool], l2: float = 1.0,
        iterations: int = 50, names: Sequence[str] = FEATURES) -> dict[str, float]:
    """Logistic-regression weights for the features `names` (a kind's, KINDS; Newton's method; the
    penalty spares the bias). Features are standardized for the fit and the weights given back on
    their raw scale."""
    names = tuple(names)
    import numpy as np  # the fit only: the server reads a fitted model with math alone
    x = np.array([[r.get(n, 0.0) for n in names] for r in rows], dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if len(x) == 0:
        raise ValueError("nothing to fit on")
    bias = names.index("bias")
    mean, std = x.mean(0), x.std(0)
    mean[bias], std[std == 0] = 0.0, 1.0
    std[bias] = 1.0
    z = (x - mean) / std
    penalty = np.full(len(names), l2)
    penalty[bias] = 1e-6
    w = np.zeros(len(names))
    for _ in range(iterations):
        p = 1.0 / (1.0 + np.exp(-np.clip(z @ w, -30, 30)))
        grad = z.T @ (p - y) + penalty * w
        hess = (z * (p * (1 - p))[:, None]).T @ z + np.diag(penalty)
        step = np.linalg.solve(hess, grad)
        w -= step
        if np.abs(step).max() < 1e-8:
            break
    raw = w / std
    raw[bias] = w[bias] - float((w / std) @ mean)
    return {n: float(v) for n, v in zip(names, raw)}
