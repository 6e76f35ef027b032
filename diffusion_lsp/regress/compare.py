"""A run against its baseline: each figure's verdict, and the run's.

A latency is compared as its ratio to the run's calibration (unless `normalize` is off): the fastest
of the calibrations measured during the run (measure.py), since another tenant's burst only ever
slows a calibration down (on these shared machines one in three can read nearly twice as slow:
matmul 50 ms beside 24 and 27, parse 31 ms beside 17). The report shows it as milliseconds "at the baseline's speed" (the
ratio times the baseline's calibration), beside the milliseconds measured. It regresses past

    allowed = max(base * (1 + tolerance), base + floor_ms),  tolerance = max(the figure's, noise_factor * noise)

where noise is the larger relative spread (max - min over the median) of the figure's repetitions in
the two runs: the tolerance is never tighter than the noise measured. A p95 gets twice the p50's
tolerance (the tail moves most between runs).

A quality figure is compared directly. Both runs replay the same requests, so a difference is a
change in what was answered at those requests (a paired comparison: no sampling error from picking
positions), or run-to-run variation, which the repetitions measure. A share or a mean regresses when
it falls more than max(quality * base, share_floor, noise_factor * spread) below the base (or rises by
as much, for a figure where lower is better); forwards per token when it rises more than
max(quality * base, noise_factor * spread). A figure of fewer than MIN_REQUESTS requests is shown,
not judged."""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from .figures import SPECS, Spec

MIN_REQUESTS = 5


@dataclass(frozen=True)
class Tolerances:
    latency: float = 0.4  # a p50 may be this much slower (relative), a p95 twice as much
    quality: float = 0.25  # a quality figure may lose this share of its value
    floor_ms: float = 2.0  # ... and a latency these many milliseconds whatever its size
    share_floor: float = 0.02  # ... and a share or mean this much, whatever its size
    # the spread itself: 0 false failures in 420 compares of 21 runs of the same code (README); at 0.5, 32
    noise_factor: float = 1.0

    def __post_init__(self):
        for name in ("latency", "quality", "floor_ms", "share_floor", "noise_factor"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"tolerance {name} must be at least 0, got {getattr(self, name)}")


@dataclass(frozen=True)
class Verdict:
    key: str
    row: str
    figure: str
    spec: Spec
    base: float | None  # in the figure's unit (ms at the baseline's speed for a latency)
    now: float | None  # the same, for this run
    measured: float | None  # a latency as measured in this run (ms), else None
    allowed: float | None  # the worst value that passes
    status: str  # ok | regressed | improved | not judged | info | missing | new
    why: str = ""
    tolerance: float | None = None  # the relative tolerance applied (latency, per-token)

    @property
    def failed(self) -> bool:
        return self.status in ("regressed", "missing")


def _spread(xs: list[float]) -> float:
    """(max - min) / median: the relative noise of a repeated figure (0 for one repetition)."""
    m = statistics.median(xs)
    return (max(xs) - min(xs)) / abs(m) if m else 0.0


def _abs_spread(xs: list[float]) -> float:
    return max(xs) - min(xs)


def judge(base: dict, now: dict, tol: Tolerances, normalize: bool) -> list[Verdict]:
    """Every figure of the baseline, and those only this run has, in the baseline's order."""
    cal_base, cal_now = (run_calibration(r) for r in (base, now))
    out = []
    for key, b in base["figures"].items():
        spec = SPECS[b["figure"]]
        n = now["figures"].get(key)
        if n is None:
            out.append(Verdict(key, b["row"], b["figure"], spec, b["value"], None, None, None, "missing",
                               f"no such requests in this run (the baseline had {b['n']}): they now go "
                               "elsewhere, e.g. to no model at all"))
            continue
        out.append(_judge_one(key, spec, b, n, tol, normalize, cal_base, cal_now))
    for key, n in now["figures"].items():
        if key not in base["figures"]:
            spec = SPECS[n["figure"]]
            out.append(Verdict(key, n["row"], n["figure"], spec, None, n["value"], None, None, "new",
                               "not in the baseline"))
    return out


def run_calibration(run: dict) -> dict[str, float]:
    """The run's calibration: the fastest of its repetitions' (see the module doc)."""
    return {k: min(v) for k, v in run["calibration"].items()}


def _judge_one(key: str, spec: Spec, b: dict, n: dict, tol: Tolerances, normalize: bool,
               cal_base: dict, cal_now: dict) -> Verdict:
    vb, vn = b["value"], n["value"]
    measured = vn if spec.calibrate else None
    if normalize and spec.calibrate is not None:
        name = f"{spec.calibrate}_ms"
        if cal_base[name] > 0 and cal_now[name] > 0:
            vn = vn / cal_now[name] * cal_base[name]  # ms at the baseline's speed
    series_b, series_n = b["values"], n["values"]
    common = dict(key=key, row=b["row"], figure=b["figure"], spec=spec, base=vb, now=vn, measured=measured)
    if spec.better is None:
        return Verdict(**common, allowed=None, status="info")
    if min(b["n"], n["n"]) < MIN_REQUESTS:
        return Verdict(**common, allowed=None, status="not judged",
                       why=f"too few requests to judge ({min(b['n'], n['n'])} < {MIN_REQUESTS})")
    if spec.kind in ("latency", "tail", "per-token"):
        base_tol = {"latency": tol.latency, "tail": 2 * tol.latency, "per-token": tol.quality}[spec.kind]
        noise = max(_spread(series_b), _spread(series_n))
        t = max(base_tol, tol.noise_factor * noise)
        floor = tol.floor_ms if spec.kind != "per-token" else 0.0
        allowed = max(vb * (1 + t), vb + floor)
        worse, better = vn > allowed, vn < vb / (1 + t) and vn < vb - floor
        why = f"tolerance {t:.0%}" + (f" (noise {noise:.0%} x {tol.noise_factor:g})" if t > base_tol else "")
        return Verdict(**common, allowed=allowed, status=_status(worse, better), why=why, tolerance=t)
    # a share or a mean, compared directly
    noise = max(_abs_spread(series_b), _abs_spread(series_n))
    margin = max(tol.quality * vb, tol.share_floor, tol.noise_factor * noise)
    if spec.better == "higher":
        allowed, worse, better = max(0.0, vb - margin), vn < vb - margin, vn > vb + margin
    else:
        allowed, worse, better = vb + margin, vn > vb + margin, vn < vb - margin
    return Verdict(**common, allowed=allowed, status=_status(worse, better), why=f"margin {margin * 100:.1f} points")


def _status(worse: bool, better: bool) -> str:
    return "regressed" if worse else "improved" if better else "ok"
