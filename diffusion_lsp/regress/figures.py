"""The figures `regress` records and compares, made from its repetitions (measure.py).

Per row (a language and what the user did: "python single-line" is a request after a typed character,
"python multi-line" one after Enter in an empty body, "python next edit" a rename asking for the next
edit), per repetition:
- latencies (ms, lower is better): end-to-end p50 and p95 as the client saw them, the model's p50 (the
  worker's own time, requests that called it) and the server's own overhead p50 (tree-sitter, context,
  post-processing); each also divided by the calibration measured beside it (the model's by the matmul,
  the server's by the parse);
- quality (higher is better): the share of requests with a suggestion shown (one minus the
  empty-answer rate), and the line similarity of what accepting it gives; for next edits the share of
  requests answered with the right edit and, lower is better, with a wrong one.
Per language: forwards per token written (lower is better) and the share of requests the server failed.

A figure is taken over every repetition's requests pooled, and also kept per repetition: the compare
(compare.py) reads the spread of those as the run's noise."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from ..server.stats import percentile
from .measure import Repetition, RowRaw


@dataclass(frozen=True)
class Spec:
    name: str
    kind: str  # latency | tail (a p95) | share | mean | per-token | failures | info
    better: str | None  # lower | higher | None: shown, not judged
    calibrate: str | None = None  # the calibration a latency is divided by: matmul | parse


TYPING = (Spec("e2e p50", "latency", "lower", "matmul"), Spec("e2e p95", "tail", "lower", "matmul"),
          Spec("model p50", "latency", "lower", "matmul"), Spec("overhead p50", "latency", "lower", "parse"),
          Spec("shown", "share", "higher"), Spec("similarity", "mean", "higher"))
NEXT_EDIT = (Spec("e2e p50", "latency", "lower", "matmul"), Spec("right edit", "share", "higher"),
             Spec("wrong edit", "share", "lower"))
LANGUAGE = (Spec("forwards per token", "per-token", "lower"), Spec("failed", "failures", "lower"))
SPECS = {s.name: s for s in TYPING + NEXT_EDIT + LANGUAGE}


def _value(spec: Spec, raws: list[RowRaw]) -> tuple[float | None, int]:
    """(the figure over these repetitions' requests pooled, how many requests that is)."""
    def pooled(name: str) -> list:
        return [x for raw in raws for x in getattr(raw, name)]

    series = {"e2e p50": ("e2e_ms", 50), "e2e p95": ("e2e_ms", 95), "model p50": ("model_ms", 50),
              "overhead p50": ("overhead_ms", 50)}
    if spec.name in series:
        name, q = series[spec.name]
        values = pooled(name)
        return percentile(values, q), len(values)
    names = {"shown": "shown", "similarity": "similarity", "right edit": "right", "wrong edit": "wrong"}
    values = pooled(names[spec.name])
    return (statistics.fmean(values) if values else None), len(values)


def figures(reps: list[Repetition]) -> dict[str, dict]:
    """"row | figure" -> {row, figure, value (over every repetition's requests pooled: a p50 of 12
    requests a repetition moves more than one of 36), values (each repetition's own: their spread is
    the noise), n (requests of one repetition, the fewest)}."""
    out: dict[str, dict] = {}

    def put(row: str, spec: Spec, pooled: tuple[float | None, int], per_rep: list[tuple[float | None, int]]) -> None:
        if pooled[0] is None or any(v is None for v, _ in per_rep):
            return  # the row had no such requests in some repetition
        out[f"{row} | {spec.name}"] = {"row": row, "figure": spec.name, "value": pooled[0],
                                       "values": [v for v, _ in per_rep], "n": min(n for _, n in per_rep)}

    rows = sorted(set.intersection(*(set(r.rows) for r in reps))) if reps else []
    for row in rows:
        for spec in NEXT_EDIT if row.endswith(" next edit") else TYPING:
            raws = [r.rows[row] for r in reps]
            put(row, spec, _value(spec, raws), [_value(spec, [raw]) for raw in raws])
    languages = sorted(set.intersection(*(set(r.failed) for r in reps))) if reps else []
    for language in languages:
        fw = [r.forwards.get(language, (0, 0)) for r in reps]
        total = (sum(f for f, _ in fw), sum(t for _, t in fw))
        put(language, SPECS["forwards per token"], (total[0] / total[1] if total[1] else None, total[1]),
            [(f / t if t else None, t) for f, t in fw])
        fails = [r.failed[language] for r in reps]
        asked = sum(n for _, n in fails)
        put(language, SPECS["failed"], (sum(e for e, _ in fails) / asked if asked else 0.0, asked),
            [(e / n if n else 0.0, n) for e, n in fails])
    return out


def calibration_summary(reps: list[Repetition]) -> dict:
    """Every calibration of the run, in order."""
    return {"matmul_ms": [c.matmul_ms for r in reps for c in r.calibrations],
            "parse_ms": [c.parse_ms for r in reps for c in r.calibrations]}
