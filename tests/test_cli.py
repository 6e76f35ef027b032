"""The command line: `fim` end to end on a tiny checkpoint and every bad input, the token counts and
one-line fills it prints, the launch and sampler flags every model command shares, `bench sampler`,
the default thread count, every command's help and `--version`, and how the package's modules
import each other (no cycles; `--help` without torch)."""

from __future__ import annotations

import argparse
import ast
import importlib
import io
import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

import diffusion_lsp
from diffusion_lsp.cli import build_parser, main
from test_server_range import scripted_checkpoint

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
    assert 1 <= record["forwards"] <= 7 and record["tokens"] == len(record["confidence"]) <= 6


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


SCRIPTED = "def f(self):\n    y = self.\n"  # the cursor at 2:14, after "self."


@pytest.fixture(scope="module")
def script_model(tokenizer, tmp_path_factory):
    """A checkpoint that writes ".foo(value)" and then the next line, one token per step."""
    return scripted_checkpoint(tokenizer, ".foo(value)\n    return", tmp_path_factory.mktemp("script") / "model")


def test_fim_json_counts_the_tokens_the_model_wrote(script_model, tmp_path, capsys):
    """Token healing re-types the prefix's "." as the fill's first token: one of the --max-tokens, so
    the count is never past it and there is one confidence per token."""
    path = tmp_path / "f.py"
    path.write_text(SCRIPTED)
    code, out, _ = fim(capsys, path, "--at", "2:14", "--model", script_model, "--max-tokens", "4", "--json")
    record = json.loads(out)
    assert code == 0 and record["text"] == "foo(value"  # ".", "foo", "(", "value"
    assert record["tokens"] == len(record["confidence"]) == 4


def test_fim_one_line_is_the_first_line_without_the_line_break(script_model, tmp_path, capsys):
    path = tmp_path / "f.py"
    path.write_text(SCRIPTED)
    code, text, _ = fim(capsys, path, "--at", "2:14", "--model", script_model, "--one-line")
    assert code == 0 and text == "foo(value)"  # not "foo(value)\n   ": the next line's break and indentation
    code, out, _ = fim(capsys, path, "--at", "2:14", "--model", script_model, "--one-line", "--json")
    record = json.loads(out)
    assert record["text"] == "foo(value)" and record["tokens"] == len(record["confidence"]) == 5


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
    assert "one_line" in records[6]["error"] and "\n" not in records[7]["text"]
    assert "5 of 8 requests failed" in err


@pytest.mark.slow
def test_console_script_end_to_end(tiny_checkpoint, src):
    proc = subprocess.run(["diffusion-lsp", "fim", str(src), "--at", "2:5", "--model", str(tiny_checkpoint),
                           "--json", "--max-tokens", "4"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(proc.stdout)
    assert record["tokens"] == len(record["confidence"]) <= 4
    proc = subprocess.run(["diffusion-lsp", "fim", str(src), "--at", "99:1", "--model", str(tiny_checkpoint)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "past the end" in proc.stderr


@pytest.mark.slow
def test_bench_sampler_prints_every_configuration(tiny_checkpoint, capsys):
    from diffusion_lsp.model.network.quantize import int8_available

    assert main(["bench", "sampler", "--model", str(tiny_checkpoint), "--spans", "1", "--context", "32",
                 "--shapes", "embedded,qwen2.5-0.5b"]) == 0
    out = capsys.readouterr().out
    # the output head's cost: this model's row beside Qwen2.5-0.5B's shape at the real vocabulary
    assert "output head's cost (cpu, float32; shapes other than --model have random weights" in out
    cost = {r[0]: r[1:] for r in (s.split() for s in out.splitlines()) if r[:1] in (["--model"], ["qwen2.5-0.5b"])}
    assert cost["qwen2.5-0.5b"][:4] == ["151,936", "896", "24", "0.494B"] and cost["--model"][0] != "151,936"
    for row in cost.values():  # positions, ms/step, head ms, head %, cached ms, head %, ms/fill, forwards per fill
        positions, step, head, share, cached, cached_share, fill, forwards = row[4:]
        assert int(positions) > 8 and float(head) <= float(step) < float(fill) and float(forwards) >= 1
        assert 0 <= int(share.rstrip("%")) <= int(cached_share.rstrip("%")) <= 100  # the cached body is smaller
    step, cached = float(cost["qwen2.5-0.5b"][5]), float(cost["qwen2.5-0.5b"][8])
    assert cached < step  # a cached step runs the 8 masked positions only
    assert "qwen2.5-0.5b/--model: step" in out
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
    from diffusion_lsp import cpus

    samples = iter([(100, 200), (175, 300)])  # 75 of 100 jiffies idle
    monkeypatch.setattr(cpus, "_cpu_times", lambda: next(samples))
    assert cpus.idle_cores(4, sample_s=0) == 3
    monkeypatch.setattr(cpus, "_cpu_times", lambda: None)
    monkeypatch.setattr(cpus.os, "getloadavg", lambda: (1.2, 1.0, 1.0))
    assert cpus.idle_cores(4, sample_s=0) == 3 and cpus.idle_cores(1, sample_s=0) == 0


@pytest.mark.parametrize("idle,processes,threads", [(6, 1, 6), (6, 2, 3), (6, 4, 1), (0, 1, 1), (3, 0, 3)])
def test_default_threads_split_the_idle_cores_between_processes(monkeypatch, idle, processes, threads):
    from diffusion_lsp import cpus

    monkeypatch.setattr(cpus.os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    monkeypatch.setattr(cpus, "idle_cores", lambda cores: min(idle, cores))
    assert cpus.default_threads(processes) == threads


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
    """The launch and sampler flags come from protocol/settings.py for every command, and a bad value is
    one line before any data is read or any model is loaded (no --model: none would load here)."""
    code = main([str(src) if a == "FILE" else a for a in command] + flags)
    err = capsys.readouterr().err.strip()
    assert code == 2 and err.startswith(f"diffusion-lsp: error: {message}") and "\n" not in err


@pytest.mark.slow
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


def command_paths(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """Every command line of the parser tree: (), ("fim",), ("bench",), ("bench", "lsp"), ..."""
    yield path
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                yield from command_paths(child, (*path, name))


def source_names() -> set[str]:
    """The package's own module files (server.py, quantize.py, ...): help is for users, not a map of them."""
    roots = {Path(diffusion_lsp.__file__).parent, Path(importlib.import_module("diffusion_lsp.model").__file__).parent,
             Path(importlib.import_module("diffusion_lsp.kernels").__file__).parent}
    return {f.name for root in roots for f in root.rglob("*.py")}


@pytest.mark.slow
def test_no_help_cites_the_source_or_speaks_to_its_developers(capsys):
    names = source_names()
    paths = list(command_paths(build_parser()))
    assert ("serve-api",) in paths and ("eval", "nep") in paths and len(paths) > 20
    for path in paths:
        with pytest.raises(SystemExit) as done:
            main([*path, "--help"])
        text = capsys.readouterr().out
        where = " ".join(path) or "diffusion-lsp"
        assert done.value.code == 0 and text.startswith("usage: diffusion-lsp"), where
        cited = sorted(set(re.findall(r"[\w.-]+\.py\b", text)) & names)
        folders = re.findall(r"\b(?:diffusion_lsp|model|kernels|server|context|nextedit|evals|tests)/", text)
        assert not cited and not folders, f"{where} --help cites the source: {cited + folders}"
        assert "its own module" not in text and "register(" not in text, where
        assert not re.search(r"^`diffusion-lsp", text, re.M), f"{where} --help opens with a module docstring"
    main_help = subprocess.run(["diffusion-lsp", "--help"], capture_output=True, text=True, timeout=60).stdout
    assert "language server" in main_help and "README" in main_help
    assert all(f"    {name} " in main_help for name in ("fim", "serve", "serve-api", "eval", "train")), main_help


def test_train_help_shows_its_examples_as_written(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    assert "  torchrun --nproc_per_node 4 -m diffusion_lsp.cli train --corpus data/corpus \\\n" in out
    assert "\n      --out runs/base --preset base --minutes 60\n" in out


@pytest.mark.slow
def test_version_is_the_package_version_everywhere(monkeypatch):
    proc = subprocess.run(["diffusion-lsp", "--version"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0 and proc.stdout == f"diffusion-lsp {metadata.version('diffusion-lsp')}\n"
    from diffusion_lsp.server.server import VERSION  # what the language server tells the editor

    assert VERSION == diffusion_lsp.__version__ == metadata.version("diffusion-lsp")

    def not_installed(name):
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", not_installed)  # a source tree that was never installed
    tomllib = pytest.importorskip("tomllib")  # Python 3.11
    pyproject = tomllib.loads((Path(diffusion_lsp.__file__).parents[1] / "pyproject.toml").read_text())
    assert diffusion_lsp._version() == pyproject["project"]["version"]


@pytest.mark.slow
def test_a_test_run_starts_without_a_deprecation_warning():
    """pytest-asyncio warns at every run while asyncio_default_fixture_loop_scope is unset (shown
    when Python shows deprecation warnings)."""
    proc = subprocess.run([sys.executable, "-W", "always", "-m", "pytest", "--collect-only", "-q", "-p",
                           "no:cacheprovider", "tests/test_server_positions.py"],
                          capture_output=True, text=True, timeout=120, cwd=Path(__file__).parents[1])
    assert proc.returncode == 0 and "asyncio_default_fixture_loop_scope" not in proc.stdout + proc.stderr, proc.stderr


def _fim(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diffusion_lsp", "fim", *args], capture_output=True, text=True,
                          timeout=120, input=stdin)


@pytest.mark.slow
def test_fim_refuses_a_fifo_and_a_device_and_a_missing_device_in_one_line(tmp_path):
    """From our probe: a FIFO as FILE (or --batch) hung, /dev/zero read until memory ran out, and
    --device cuda:99 on a machine without it was a traceback from deep inside the loader."""
    import os

    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    source = tmp_path / "a.py"
    source.write_text("x = 1\n")
    for args, why in [((str(fifo), "--at", "1:1"), "is a FIFO (named pipe), not a regular file"),
                      (("--batch", str(fifo)), "is a FIFO (named pipe), not a regular file"),
                      (("/dev/zero", "--at", "1:1"), "not a regular file"),
                      ((str(source), "--at", "1:1", "--device", "cuda:99"), "device cuda:99: this machine has")]:
        done = _fim(*args)
        assert done.returncode == 2 and why in done.stderr and "Traceback" not in done.stderr, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1, done.stderr


@pytest.mark.slow
def test_fim_lines_end_where_the_language_servers_do_and_a_deep_batch_line_is_one_record(tmp_path):
    """str.splitlines also broke lines at form feeds and U+2028 ("column 5 is past the end of line 2");
    a batch line nested 100,000 deep was a RecursionError that lost the whole batch."""
    from diffusion_lsp.fim import split_at

    assert split_at("a = 1\fb\nc = \n", "2:5") == ("a = 1\fb\nc = ", "\n")
    assert split_at("s = 'a\u2028b'\nc = \n", "2:5") == ("s = 'a\u2028b'\nc = ", "\n")
    assert split_at("a\r\nb\rc", "3:2") == ("a\r\nb\rc", "")
    batch = tmp_path / "in.jsonl"
    batch.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    done = _fim("--batch", str(batch), "--max-tokens", "4")
    assert done.returncode == 0 and json.loads(done.stdout)["error"] == "line 1: not valid JSON (nested too deeply)"
