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
is not a finite number or is over MAX_WEIGHT, or a bar outside [0, 1] makes the file unusable
(ValueError), and the server then falls back to its rules with one log line. `fit` gives no feature
whose spread is float noise a weight, refuses weights the server would refuse, and `save` writes a
file only after it loads back the way the server loads it (`load`)."""

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
# every feature lies in about [0, 15] (indicators, fractions, logs of lengths) and P clamps z to
# [-30, 30]: a weight of 1000 flips P from 0 to 1 over a feature change of 0.03, which no feature
# measures that finely (the shipped fits' largest weights: 3.7). Past it a model explodes.
MAX_WEIGHT = 1000.0
# a feature whose spread over the fit's rows is below this fraction of its mean magnitude is constant
# but for float noise (every document of a folder 100 lines long: std 5.6e-17 of 0.46); standardized
# by that spread it got a weight of 3e10. It weighs nothing.
FLAT = 1e-3


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
        """Write the model to `path` once its file loads as the server loads it (`load`); ValueError
        saying why not, with nothing written, when it would not."""
        path = Path(path)
        text = json.dumps(self.to_json(), indent=1) + "\n"
        self.from_json(json.loads(text), kind=self.kind)  # a weight that is not finite, or too large
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + ".tmp")
        try:
            tmp.write_text(text)
            self.load(tmp, self.kind)
            tmp.replace(path)
        finally:
            tmp.unlink(missing_ok=True)

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
        if (big := next((n for n, w in zip(names, weights) if abs(w) > MAX_WEIGHT), None)) is not None:
            raise ValueError(f"the weight of {big} is over {MAX_WEIGHT:g} in size: P would swing on noise")
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
    their raw scale; one constant over the rows (spread under FLAT of its magnitude) weighs 0.
    ValueError when a weight is not finite or over MAX_WEIGHT (the server would refuse the model)."""
    names = tuple(names)
    import numpy as np  # the fit only: the server reads a fitted model with math alone
    x = np.array([[r.get(n, 0.0) for n in names] for r in rows], dtype=np.float64)
    y = np.asarray(labels, dtype=np.float64)
    if len(x) == 0:
        raise ValueError("nothing to fit on")
    if not np.isfinite(x).all():
        raise ValueError(f"{names[int(np.argmin(np.isfinite(x).all(0)))]} is not a finite number in every candidate")
    bias = names.index("bias")
    mean, std = x.mean(0), x.std(0)
    flat = std <= FLAT * np.abs(x).mean(0)  # a constant column (float noise in its spread): no weight
    flat[bias] = False
    mean[bias], std[bias], std[flat] = 0.0, 1.0, 1.0
    z = (x - mean) / std
    z[:, flat] = 0.0
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
    wrong = next((n for n, v in zip(names, raw) if not abs(v) <= MAX_WEIGHT), None)  # NaN included
    if wrong is not None:
        raise ValueError(f"the fit gives {wrong} a weight of {raw[names.index(wrong)]:.3g}, not a number or over "
                         f"{MAX_WEIGHT:g} in size: P would swing on noise")
    return {n: float(v) for n, v in zip(names, raw)}
