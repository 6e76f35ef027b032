"""The figures `bench lsp` prints for one replay: per kind of request, p50/p95 of where the time
went, from the client's clock and the server's per-request timings (server/stats.py), and what
the user saw. Prints; asserts nothing."""

from __future__ import annotations

from dataclasses import dataclass

from ..evals.metrics import edit_similarity
from ..server.stats import percentile

GOAL_P50_MS, GOAL_P95_MS, GOAL_OVERHEAD_MS = 100.0, 250.0, 5.0  # single-line latency; overhead on 5,000 lines
ROWS = ("single-line", "multi-line", "cache hits", "no model call")
MODEL_ROWS = ROWS[:2]
COLUMNS = [("e2e", 50), ("e2e", 95), ("model", 50), ("model", 95), ("overhead", 50), ("overhead", 95),
           ("context", 95), ("post", 95), ("ipc", 50), ("lsp", 50)]


@dataclass
class Sample:
    e2e_ms: float  # request sent -> answer received, on the client
    timing: dict | None  # the server's Timing for it (diffusion_lsp.server.stats)
    shown: str = ""  # the suggestion's text ("" for none)
    typed: str = ""  # what the user had typed of the line
    line: str = ""  # the line the user goes on to type (stripped)

    @property
    def similarity(self) -> float:
        """Edit similarity of what the line would be with the suggestion's first line accepted."""
        return edit_similarity(self.typed + self.shown.split("\n", 1)[0], self.line)

    @property
    def row(self) -> str:
        t = self.timing
        if t is None or t["source"] == "none":
            return "no model call"
        if t["source"] == "cache":
            return "cache hits"
        return "multi-line" if t["kind"] == "block" else "single-line"


def summarise(samples: list[Sample]) -> dict[str, dict[str, float | None]]:
    """Row -> n and p50/p95 (ms) of: e2e; model (the worker's fill time); overhead (the server's own
    work: cache, context, post-processing); context; post; ipc (the worker socket and queue); lsp
    (JSON-RPC, document sync and the handler around the completer)."""
    out = {}
    for row in ROWS:
        mine = [s for s in samples if s.row == row]
        if not mine:
            continue
        t = [s.timing or {} for s in mine]
        total = [x.get("total_ms", 0.0) for x in t]
        series = {"e2e": [s.e2e_ms for s in mine], "model": [x.get("worker_ms", 0.0) for x in t],
                  "overhead": [tt - x.get("model_ms", 0.0) - x.get("wait_ms", 0.0) for tt, x in zip(total, t)],
                  "context": [x.get("context_ms", 0.0) for x in t], "post": [x.get("post_ms", 0.0) for x in t],
                  "ipc": [x.get("model_ms", 0.0) - x.get("worker_ms", 0.0) for x in t],
                  "lsp": [s.e2e_ms - tt for s, tt in zip(mine, total)]}
        if row not in MODEL_ROWS:  # no context, model or post-processing to measure
            series = {k: v for k, v in series.items() if k in ("e2e", "overhead", "lsp")}
        figures = {"n": len(mine), "shown": sum(bool(s.shown.strip()) for s in mine) / len(mine),
                   "similarity": sum(s.similarity for s in mine) / len(mine)}
        for name in ("e2e", "model", "overhead", "context", "post", "ipc", "lsp"):
            values = series.get(name, [])
            figures[f"{name}50"], figures[f"{name}95"] = percentile(values, 50), percentile(values, 95)
        out[row] = figures
    return out


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x:.1f}" if x >= 10 else f"{x:.2f}"


def _goal(value: float | None, goal: float) -> str:
    return f"{_ms(value)} ms (goal <= {goal:g}: {'n/a' if value is None else 'met' if value <= goal else 'missed'})"


def print_figures(title: str, rows: dict, big_lines: int | None = None) -> None:
    """The table of one replay under `title`; with `big_lines`, the overhead goal on a file that long."""
    print(f"\n{title}")
    print(f"{'':14}{'n':>5} {'end-to-end':^15} {'model':^15} {'server overhead':^15}"
          f" {'context':>7} {'post':>7} {'ipc':>7} {'lsp':>7}")
    print(f"{'':19}" + "".join(f" {'p' + str(q):>7}" for _, q in COLUMNS) + "   shown  line sim")
    for row, f in rows.items():
        print(f"{row:14}{f['n']:>5}" + "".join(f" {_ms(f[f'{c}{q}']):>7}" for c, q in COLUMNS)
              + f" {f['shown']:>7.0%} {f['similarity']:>9.1%}")
    single = rows.get("single-line", {})
    print(f"  goals: single-line p50 {_goal(single.get('e2e50'), GOAL_P50_MS)}, "
          f"p95 {_goal(single.get('e2e95'), GOAL_P95_MS)}")
    if big_lines is not None:
        model_rows = [f for r, f in rows.items() if r in MODEL_ROWS]
        worst = max((f["overhead95"] for f in model_rows), default=None)
        print(f"  goal on the {big_lines:,}-line file: server overhead p95 {_goal(worst, GOAL_OVERHEAD_MS)}")
