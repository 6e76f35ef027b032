"""The command line: `fim` end to end on a tiny checkpoint and every bad input, the launch and sampler
flags every model command shares, `bench sampler`, the default thread count, and how the package's
modules import each other (no cycles; `--help` without torch)."""

from __future__ import annotations

import ast
import importlib
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from diffusion_lsp.cli import main

SOURCE = "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n"


@pytest.fixture
def src(tmp_path):
    path = tmp_path / "add.py"
    path.write_text(SOURCE)
    return path


def fim(capsys, *args):
    code = main(["fim", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_fim_prints_the_fill_and_json_has_the_figures(tiny_checkpoint, src, capsys):
    code, text, _ = fim(capsys, src, "--at", "2:12", "--model", tiny_checkpoint, "--max-tokens", "6")
    assert code == 0 and text
    code, out, _ = fim(capsys, src, "--at", "2:12", "--model", tiny_checkpoint, "--max-tokens", "6", "--json")
    record = json.loads(out)
    assert code == 0 and record["text"] == text
    assert set(record) >= {"text", "tokens", "forwards", "ms", "confidence"}
    assert 1 <= record["forwards"] <= 7 and len(record["confidence"]) >= record["tokens"]


@pytest.mark.parametrize("policy", ["threshold", "topk", "eb", "one"])
def test_every_policy_and_no_cache_run(tiny_checkpoint, src, capsys, policy):
    code, out, _ = fim(capsys, src, "--at", "3:1", "--model", tiny_checkpoint, "--policy", policy,
                       "--no-cache", "--json", "--max-tokens", "4")
    assert code == 0 and json.loads(out)["forwards"] >= 1


def test_stdin_and_empty_file(tiny_checkpoint, capsys, monkeypatch, tmp_path):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(SOURCE.encode())))
    code, out, _ = fim(capsys, "-", "--at", "1:5", "--model", tiny_checkpoint, "--json", "--max-tokens", "4")
    assert code == 0 and "text" in json.loads(out)
    empty = tmp_path / "empty.py"
    empty.write_text("")
    code, out, _ = fim(capsys, empty, "--at", "1:1", "--model", tiny_checkpoint, "--json", "--max-tokens", "4")
    assert code == 0 and json.loads(out)["forwards"] >= 1


@pytest.mark.parametrize("at,message", [
    ("9:1", "line 9 is past the end of the file (5 lines)"),
    ("2:40", "column 40 is past the end of line 2"),
    ("0:1", "line 0 is past the end"),
    ("two", "--at expects LINE:COL"),
])
def test_positions_past_the_end(tiny_checkpoint, src, capsys, at, message):
    code, out, err = fim(capsys, src, "--at", at, "--model", tiny_checkpoint)
    assert code == 2 and out == ""
    (line,) = err.strip().splitlines()
    assert line.startswith(f"diffusion-lsp: error: {message}")


@pytest.mark.parametrize("content,message", [
    (b"\x7fELF\x00\x00binary", "looks binary"),
    (b"caf\xe9 = 1\n", "is not UTF-8"),
])
def test_binary_and_non_utf8_files(tiny_checkpoint, tmp_path, capsys, content, message):
    path = tmp_path / "f.py"
    path.write_bytes(content)
    code, _, err = fim(capsys, path, "--at", "1:1", "--model", tiny_checkpoint)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1


def test_missing_file_and_checkpoints(tiny_checkpoint, src, tmp_path, capsys):
    code, _, err = fim(capsys, tmp_path / "nope.py", "--at", "1:1", "--model", tiny_checkpoint)
    assert code == 2 and "cannot read" in err
    code, _, err = fim(capsys, src, "--at", "1:1", "--model", tmp_path / "no-model")
    assert code == 2 and "checkpoint folder not found" in err
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in tiny_checkpoint.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    (bad / "model.safetensors").write_bytes(b"garbage")
    code, _, err = fim(capsys, src, "--at", "1:1", "--model", bad)
    assert code == 2 and "model.safetensors is corrupt" in err and len(err.strip().splitlines()) == 1


def test_batch_mode_reports_bad_lines_and_continues(tiny_checkpoint, tmp_path, capsys):
    lines = [
        json.dumps({"id": "a", "prefix": "def f(x):\n    return ", "suffix": "\n", "max_tokens": 5}),
        "{broken json",
        json.dumps({"id": "c", "prefix": 3}),
        "",
        json.dumps({"id": "d", "prefix": "import ", "suffix": "", "max_tokens": 0}),
        json.dumps({"id": "e", "prefix": "x = ", "suffix": "\ny = x\n"}),
        json.dumps({"id": "f", "prefix": "x", "max_tokens": 100000}),
        json.dumps({"id": "g", "prefix": "x = ", "one_line": "yes"}),
        json.dumps({"id": "h", "prefix": "x = ", "suffix": "\ny = x\n", "one_line": True}),
    ]
    batch = tmp_path / "in.jsonl"
    batch.write_text("\n".join(lines) + "\n")
    code = main(["fim", "--batch", str(batch), "--model", str(tiny_checkpoint), "--batch-size", "4",
                 "--max-tokens", "4"])
    out, err = capsys.readouterr()
    records = [json.loads(s) for s in out.splitlines()]
    assert code == 0 and [r["id"] for r in records] == ["a", None, "c", "d", "e", "f", "g", "h"]
    assert {"text", "tokens", "forwards", "ms"} <= set(records[0]) and "error" not in records[4]
    assert "not valid JSON" in records[1]["error"] and "must be strings" in records[2]["error"]
    assert "max_tokens" in records[3]["error"] and "does not fit" in records[5]["error"]
    assert "one_line" in records[6]["error"] and records[7]["text"].count("\n") <= 1
    assert "5 of 8 requests failed" in err


def test_console_script_end_to_end(tiny_checkpoint, src):
    proc = subprocess.run(["diffusion-lsp", "fim", str(src), "--at", "2:5", "--model", str(tiny_checkpoint),
                           "--json", "--max-tokens", "4"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["tokens"] <= 5
    proc = subprocess.run(["diffusion-lsp", "fim", str(src), "--at", "99:1", "--model", str(tiny_checkpoint)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "past the end" in proc.stderr


def test_bench_sampler_prints_every_configuration(tiny_checkpoint, capsys):
    from diffusion_lsp.model.quantize import int8_available

    assert main(["bench", "sampler", "--model", str(tiny_checkpoint), "--spans", "1", "--context", "32"]) == 0
    out = capsys.readouterr().out
    for length in ("8", "32", "64"):
        rows = [s.split() for s in out.splitlines() if s.split()[:1] == [length]]
        weights = "int8" if int8_available() else "fp32"  # on CPU the main rows are int8, one fp32 row beside
        want = [("threshold", "on"), ("threshold", "off"), ("one", "on"), ("one", "off")]
        assert sorted((r[1], r[2], r[3]) for r in rows) == sorted(
            [(p, c, weights) for p, c in want] + ([("threshold", "on", "fp32")] if int8_available() else []))
        assert all(float(r[4]) >= 1 for r in rows)
    assert out.count("ratios: one/threshold forwards") == 3
    assert out.count("fp32/int8 ms") == (3 if int8_available() else 0)


def test_idle_cores_come_from_the_cpu_time_sample_else_the_load_average(monkeypatch):
    from diffusion_lsp import engine

    samples = iter([(100, 200), (175, 300)])  # 75 of 100 jiffies idle
    monkeypatch.setattr(engine, "_cpu_times", lambda: next(samples))
    assert engine.idle_cores(4, sample_s=0) == 3
    monkeypatch.setattr(engine, "_cpu_times", lambda: None)
    monkeypatch.setattr(engine.os, "getloadavg", lambda: (1.2, 1.0, 1.0))
    assert engine.idle_cores(4, sample_s=0) == 3 and engine.idle_cores(1, sample_s=0) == 0


@pytest.mark.parametrize("idle,processes,threads", [(6, 1, 6), (6, 2, 3), (6, 4, 1), (0, 1, 1), (3, 0, 3)])
def test_default_threads_split_the_idle_cores_between_processes(monkeypatch, idle, processes, threads):
    from diffusion_lsp import engine

    monkeypatch.setattr(engine.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(engine, "idle_cores", lambda cores: min(idle, cores))
    assert engine.default_threads(processes) == threads


MODEL_COMMANDS = [["fim", "FILE", "--at", "1:1"], ["fim", "--batch", "FILE"], ["bench", "sampler"], ["bench", "lsp"],
                  ["eval", "humaneval-infill"], ["eval", "heldout"], ["eval", "typing"]]
BAD_LAUNCH = [(["--device", "tpu"], "device='tpu' is not valid (auto, cpu, mps, cuda or cuda:N)"),
              (["--threads", "0"], "threads=0 is not valid (between 1 and 1024)")]
BAD_SAMPLING = [(["--threshold", "2"], "threshold=2.0 is not valid (in (0, 1])"),
                (["--block-size", "-1"], "block_size=-1 is not valid")]  # bench lsp samples as the server does


@pytest.mark.parametrize("command,flags,message", [
    (c, f, m) for c in MODEL_COMMANDS for f, m in BAD_LAUNCH + (BAD_SAMPLING if c[:2] != ["bench", "lsp"] else [])
], ids=lambda v: " ".join(v) if isinstance(v, list) else "")
def test_every_model_command_checks_the_shared_settings_first(src, capsys, command, flags, message):
    """The launch and sampler flags come from model/settings.py for every command, and a bad value is
    one line before any data is read or any model is loaded (no --model: none would load here)."""
    code = main([str(src) if a == "FILE" else a for a in command] + flags)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(f"diffusion-lsp: error: {message}") and "\n" not in err


def test_help_imports_no_torch_tokenizer_tqdm_or_lsp_client():
    code = ("import sys; from diffusion_lsp.cli import build_parser; build_parser(); "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'tokenizers', 'tqdm', 'numpy', "
            "'pygls', 'lsprotocol'}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr


def import_graph() -> dict[str, set[str]]:
    """diffusion_lsp module -> the diffusion_lsp modules it imports, at module top or in a function."""
    roots = {name: Path(importlib.import_module(name).__file__).parent
             for name in ("diffusion_lsp", "diffusion_lsp.model", "diffusion_lsp.kernels")}
    files = {}
    for package, root in roots.items():
        for f in root.rglob("*.py"):
            name = ".".join([package, *f.relative_to(root).with_suffix("").parts]).removesuffix(".__init__")
            if package == "diffusion_lsp" and name.split(".")[1:2] in (["model"], ["kernels"]):
                continue  # mapped from their own folders
            files[name] = f
    graph = {}
    for name, f in files.items():
        package = name if f.name == "__init__.py" else name.rpartition(".")[0]
        graph[name] = set()
        for node in ast.walk(ast.parse(f.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1]) if node.level else ""
                module = ".".join(p for p in (base, node.module) if p)
                targets = [f"{module}.{a.name}" for a in node.names]
            else:
                continue
            for target in targets:
                while target and target not in files:  # `from . import x` names a module; `from .m import f` not
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def test_no_import_cycles_between_the_package_modules():
    graph, cycles = import_graph(), []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(name: str, path: list[str]) -> None:
        state[name] = 1
        for target in sorted(graph[name]):
            if state.get(target) == 1:
                cycles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, path + [target])
        state[name] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name, [name])
    assert len(graph) > 50 and "diffusion_lsp.fim_batch" in graph["diffusion_lsp.fim"]  # the graph sees imports
    assert cycles == []
