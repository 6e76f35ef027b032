"""The VS Code extension (editors/vscode): its Node test runner suite (the extension's own logic, and
its client layer against the real server with checkpoints whose answers are known: the scripted
checkpoint of test_server_range.py for a completion, test_server_e2e's echo checkpoint for a next
edit), its `.vsix` package, and its settings against the server's.

Node and npm come from Debian (CI installs them); the extension's packages from its own
package-lock.json (`npm ci`, run here when node_modules is missing or older than the lock file).
Without node or npm the tests skip with the reason. A real VS Code run is in
test_vscode_code_server.py."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from diffusion_lsp.server.config import Config, parse_config
from diffusion_lsp.server.schema import properties
from test_neovim_plugin import AREA, OPTIONS, SAMPLE, serve
from test_server_e2e import echo_checkpoint  # noqa: F401 (a fixture)
from test_server_range import SCRIPT, scripted_checkpoint

EXTENSION = Path(__file__).parent.parent / "editors" / "vscode"
NPM = shutil.which("npm")
pytestmark = pytest.mark.skipif(NPM is None or shutil.which("node") is None,
                                reason="node and npm are not installed (Debian: apt-get install nodejs npm)")


def npm(*args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([NPM, *args], cwd=EXTENSION, capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def node_modules() -> Path:
    stamp = EXTENSION / "node_modules" / ".package-lock.json"
    if not stamp.exists() or stamp.stat().st_mtime < (EXTENSION / "package-lock.json").stat().st_mtime:
        done = npm("ci", "--no-audit", "--no-fund")
        assert done.returncode == 0, done.stdout + done.stderr
    return stamp.parent


@pytest.mark.slow
def test_node_suite_and_client_layer_against_the_real_server(node_modules, tokenizer, echo_checkpoint,  # noqa: F811
                                                              tmp_path):
    scripted = scripted_checkpoint(tokenizer, SCRIPT, tmp_path / "model")
    spec = {
        "completion": {"command": serve(scripted, tmp_path / "a"), "options": OPTIONS, "text": SAMPLE,
                       "position": [1, len("    y = self.")], "expect": SCRIPT[1:]},
        # next edits on explicitly: not every model enables them by default
        "nextEdit": {"command": serve(echo_checkpoint, tmp_path / "b"), "text": AREA,
                     "options": {**OPTIONS, "nextEdit": {**OPTIONS["nextEdit"], "enable": True}},
                     "change": [0, 9, 0, 10, "width"], "cursor": [1, 14],
                     "expectLine": r"^\s*return width \* h$"},  # the rename, followed to the parameter's use
    }
    for sub in ("a", "b"):
        (tmp_path / sub).mkdir(mode=0o700)  # the worker's socket folder must be private
    done = npm("test", env={"DIFFUSION_LSP_TEST_SPEC": json.dumps(spec)}, timeout=400)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    counts = {k: int(v) for k, v in re.findall(r"^# (pass|fail|skipped) (\d+)$", out, re.M)}
    assert counts["fail"] == 0 and counts["skipped"] == 0 and counts["pass"] >= 13, (counts, out[-3000:])


@pytest.mark.slow
def test_npm_run_package_makes_a_vsix(node_modules, tmp_path):
    done = npm("run", "package")
    assert done.returncode == 0, done.stdout + done.stderr
    vsix = EXTENSION / "diffusion-lsp.vsix"
    with zipfile.ZipFile(vsix) as z:
        names = set(z.namelist())
        manifest = json.loads(z.read("extension/package.json"))
        bundle = z.read("extension/dist/extension.js").decode()
    assert {"extension.vsixmanifest", "extension/dist/extension.js", "extension/readme.md"} <= names, names
    assert not any(n.startswith("extension/node_modules/") or n.startswith("extension/src/") for n in names), names
    assert manifest["main"] == "./dist/extension.js" and manifest["engines"]["vscode"].startswith("^1.")
    assert "textDocument/inlineCompletion" in bundle  # vscode-languageclient is bundled, with LSP 3.18
    assert "require(\"vscode\")" in bundle or "require('vscode')" in bundle  # vscode stays external


def test_the_extension_contributes_every_server_setting_as_the_server_defines_it():
    manifest = json.loads((EXTENSION / "package.json").read_text())
    contributed = manifest["contributes"]["configuration"]["properties"]
    server = properties()
    assert {k: contributed.get(k) for k in server} == server, (
        "editors/vscode/package.json is out of date: diffusion-lsp settings-schema --write editors/vscode/package.json")
    own = [k for k in contributed if k not in server]
    assert own and all(k.split(".")[1] in ("server", "client", "trace") for k in own), own


@pytest.mark.slow
def test_settings_schema_command_prints_the_schema():
    done = subprocess.run([sys.executable, "-m", "diffusion_lsp", "settings-schema"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    schema = json.loads(done.stdout)
    assert schema["diffusionLsp.nextEdit.mode"]["enum"] == ["refine", "full"]
    assert schema["diffusionLsp.completion.debounceMs"] == {
        "type": "integer", "default": 0, "minimum": 0, "maximum": 5000,
        "description": "wait this long for more typing before a fill"}
    assert schema["diffusionLsp.model.path"]["type"] == ["string", "null"]
    assert "diffusionLsp.sampling.stopBelow" not in schema  # not an editor setting


def test_the_manifest_defaults_are_the_server_defaults_and_draw_no_complaint():
    manifest = json.loads((EXTENSION / "package.json").read_text())
    nested: dict = {}
    for key, schema in manifest["contributes"]["configuration"]["properties"].items():
        section, name = key.split(".")[1:]
        if section not in ("server", "client", "trace"):
            nested.setdefault(section, {})[name] = schema["default"]
    cfg, problems = parse_config({"diffusionLsp": nested})
    assert problems == [] and cfg == Config()


@pytest.mark.slow
def test_the_install_scripts_version_check_reads_past_a_first_start_log_line(tmp_path):
    """code-server's first start prints "Wrote default config file" before its version (and writes it
    into the user's home): the script's first run on a fresh machine failed, comparing the log line."""
    script = Path(__file__).parents[1] / "editors" / "vscode" / "scripts" / "install-code-server.sh"
    fake = tmp_path / "code-server"
    fake.write_text('#!/bin/sh\nmkdir -p "$XDG_CONFIG_HOME/code-server"\n'
                    'echo "[2026-12-01T00:15:14.889Z] info  Wrote default config file to $XDG_CONFIG_HOME/code-server"\n'
                    'echo "4.100.3 6c4ba5e0 with Code 1.100.3"\n')
    fake.chmod(0o755)
    home = tmp_path / "home"
    home.mkdir()
    check = f'eval "$(sed -n \'/^installed_version() {{/,/^}}/p\' {script})"; installed_version {fake}'
    done = subprocess.run(["bash", "-c", check], capture_output=True, text=True, env={**os.environ, "HOME": str(home)})
    assert done.stdout.strip() == "4.100.3", done
    assert list(home.iterdir()) == []  # its config went to a throwaway folder, not the user's home
