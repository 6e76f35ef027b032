"""`bench api` end to end on a tiny checkpoint: it starts serve-api with continuous and with static
batching, runs two concurrency levels on each and the faults, and its figures are the server's
(requests answered, batches, the faults' statuses)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from test_server_range import SCRIPT, scripted_checkpoint

pytestmark = pytest.mark.slow


def test_bench_api_prints_load_and_fault_figures(tokenizer, tmp_path):
    model = scripted_checkpoint(tokenizer, SCRIPT, tmp_path / "model")
    out = tmp_path / "figures.json"
    done = subprocess.run([sys.executable, "-m", "diffusion_lsp", "bench", "api", "--model", str(model),
                           "--concurrency", "1,4", "--seconds", "2", "--json", str(out), "--no-engine"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(out.read_text())
    assert set(figures["load"]) == {"continuous", "static"}
    for mode, (one, four) in figures["load"].items():
        assert one["concurrency"] == 1 and four["concurrency"] == 4
        assert one["ok"] > 0 and four["ok"] > 0 and one["5xx"] == four["5xx"] == 0, figures["load"]
        # four clients at once: the worker decodes them together (the point of serve-api's batching)
        assert one["mean_batch"] == 1.0 and four["mean_batch"] > 1.0 and four["peak_rss_mb"] > 0, mode
    assert "continuous vs static batching (--max-batch 16):" in done.stdout
    got = {f["fault"]: f["got"] for f in figures["faults"]}
    assert got["malformed JSON"] == "400" and got["oversized body (2 MiB)"] == "413" and got["wrong types"] == "400"
    assert got["unknown fields"] == "200" and got["client disconnects mid-stream"].startswith("200")
    assert all(f["then"] == 200 for f in figures["faults"]), figures["faults"]  # still serving after each
    killed = got["worker killed mid-batch (8 requests)"]
    codes = [part.split("x ", 1)[1] for part in killed.split(", ")]
    assert codes and all(c.isdigit() and not c.startswith("5") for c in codes), killed  # retried, no 5xx
    assert "goal: no 5xx under load: 0 (met)" in done.stdout
