"""How many threads the model may use here: the cores idle now, measured, split between this
machine's processes (the CPU features and the load of these machines vary: measure, don't assume)."""

from __future__ import annotations

import os
import time


def _cpu_times() -> tuple[int, int] | None:
    """(idle, total) jiffies of all CPUs from /proc/stat; None where there is none."""
    try:
        with open("/proc/stat") as f:
            values = [int(v) for v in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    return values[3] + (values[4] if len(values) > 4 else 0), sum(values)


def idle_cores(cores: int, sample_s: float = 0.2) -> int:
    """Cores idle now: the idle share of CPU time over a short sample (/proc/stat), else cores
    minus the 1-minute load average (which some VMs keep near 1 with nothing running)."""
    first = _cpu_times()
    if first is not None:
        time.sleep(sample_s)
        second = _cpu_times()
        total = second[1] - first[1] if second else 0
        if total > 0:
            return round(cores * (second[0] - first[0]) / total)
    try:
        return cores - int(os.getloadavg()[0] + 0.5)
    except OSError:
        return cores


def default_threads(local_world_size: int) -> int:
    """The cores idle now, split between this machine's processes. Oversubscribing hurts badly: on a
    shared 2-core box with load 3, a `small` step on 2048 tokens took 7.0 s with 2 threads and 1.6 s
    with 1 (OpenMP barriers wait on descheduled threads)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS
        cores = os.cpu_count() or 1
    return max(1, max(idle_cores(cores), 1) // max(local_world_size, 1))
