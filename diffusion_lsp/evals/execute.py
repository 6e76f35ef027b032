"""Run candidate programs in child processes with a timeout, as the HumanEval harness does."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor


def passes(program: str, timeout: float = 3.0) -> bool:
    """True when `program` runs to completion without error within `timeout` seconds."""
    with tempfile.TemporaryDirectory(prefix="dlsp-eval-") as tmp:
        path = os.path.join(tmp, "candidate.py")
        with open(path, "w", encoding="utf-8") as f:
            f.write(program)
        try:
            proc = subprocess.run([sys.executable, "-I", path], cwd=tmp, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return proc.returncode == 0


def run_all(programs: list[str], timeout: float = 3.0, workers: int | None = None) -> list[bool]:
    workers = workers or max(1, os.cpu_count() or 1)
    with ThreadPoolExecutor(workers) as pool:
        return list(pool.map(lambda p: passes(p, timeout), programs))
