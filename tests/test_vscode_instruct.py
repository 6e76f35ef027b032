"""The VS Code extension's Edit Selection with Instruction (editors/vscode/src/instruct.ts) at its
client layer: editors/vscode/test/instruct.test.ts, run alone by Node's test runner against the real
server and worker with test_server_e2e's echo checkpoint (every answer is "foo"s), builds the request
as the command does, parses and applies the proposal, and meets the server's refusals. It registers
no test unless DIFFUSION_LSP_TEST_INSTRUCT gives it the server's command, so this test checks that
it ran and passed. Needs node and npm, as test_vscode_extension.py."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from test_neovim_plugin import serve
from test_server_e2e import echo_checkpoint  # noqa: F401 (a fixture)
from test_vscode_extension import EXTENSION, NPM, node_modules, npm  # noqa: F401 (node_modules: a fixture)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(NPM is None, reason="node and npm are not installed")]


def test_the_command_s_requests_against_the_real_server(node_modules, echo_checkpoint, tmp_path):  # noqa: F811
    built = npm("run", "compile")
    assert built.returncode == 0, built.stdout + built.stderr
    (tmp_path / "sock").mkdir(mode=0o700)  # the worker's socket folder must be private
    env = {"DIFFUSION_LSP_TEST_INSTRUCT": json.dumps(serve(echo_checkpoint, tmp_path / "sock"))}
    done = subprocess.run(["node", "--test", "out/test/instruct.test.js"], cwd=EXTENSION, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **env})
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    counts = {k: int(v) for k, v in re.findall(r"^# (pass|fail|skipped) (\d+)$", out, re.M)}
    assert counts == {"pass": 1, "fail": 0, "skipped": 0}, (counts, out[-3000:])
