"""serve-api's own worker ends with it: after SIGTERM (and after SIGKILL, which runs no shutdown) the worker
process it started is gone within a bounded wait, polled, never slept. The editors' shared worker keeps its
idle exit (worker.idleExitS); that is test_server_e2e's."""

from __future__ import annotations

import os
import signal

import pytest

from test_api import Api, until
from test_server_range import SCRIPT, scripted_checkpoint

pytestmark = pytest.mark.slow
GONE_S = 30  # seconds: only reached when a test is failing (the worker polls its clients every second)


def alive(pid: int) -> bool:
    """The process is there and not a zombie (a worker whose parent has not reaped it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_the_worker_serve_api_started_ends_with_it(tokenizer, tmp_path, sig):
    api = Api(scripted_checkpoint(tokenizer, SCRIPT, tmp_path / "model"), tmp_path / "run")
    try:
        worker = api.worker_pid()
        assert alive(worker)
        os.kill(api.proc.pid, sig)
        api.proc.wait(GONE_S)
        until(lambda: not alive(worker), f"exit of serve-api's worker (pid {worker})", GONE_S)
    finally:
        api.close()
