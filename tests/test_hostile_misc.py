"""Hostile input to the smaller surfaces: a `regress` baseline that is not one (checked whole before
anything is measured: exit 3 naming the field, a FIFO refused unopened, deep JSON refused), an API
error that echoes the key in another form (percent-encoded, base64, in a basic-auth blob), `--json`
output that must stay strict JSON, and editWithInstruction's expected refusals (an LSP error
response, no ERROR traceback in the log)."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from diffusion_lsp.cli import build_parser
from diffusion_lsp.regress import baseline, command
from diffusion_lsp.regress.workload import sample

from test_regress import files, run_record


# ---- regress baselines ----

def good_baseline() -> dict:
    """A baseline as `regress --save` writes it (figures made up, the workload sampled for real)."""
    record = run_record()
    workload = sample(files(), "the test's files", 8, 2, 2, 3, 0)
    return {"format": command.FORMAT, "created": "2026-01-01T00:00:00+00:00", "version": "0",
            "machine": {"cpu": "x", "cores": 2, "threads": 1, "python": "3.11", "platform": "linux"},
            "model": {"backend": "local", "name": "m", "fingerprint": "0" * 16},
            "settings": {"completion": {"debounceMs": 0}}, "repeat": 3, "calibration": record["calibration"],
            "figures": record["figures"], "workload": workload.to_wire()}


def compare(path: Path, capsys) -> tuple[int, str]:
    """`regress --compare PATH` in this process: (exit code, what it printed)."""
    args = build_parser().parse_args(["regress", "--compare", str(path), "--threads", "1"])
    code = args.run(args)
    return code, capsys.readouterr().out


FIG = "python single-line | e2e p50"


def broken(change) -> dict:
    base = good_baseline()
    change(base)
    return base


# each: what is wrong, and the field the refusal names
BROKEN = [
    (lambda b: b.pop("machine"), "baseline: machine is missing"),
    (lambda b: b.update(model="m"), "baseline: model must be an object"),
    (lambda b: b["model"].pop("fingerprint"), "baseline: model.fingerprint is missing"),
    (lambda b: b.update(figures=[1, 2]), "baseline: figures must be a non-empty object"),
    (lambda b: b.update(figures={}), "baseline: figures must be a non-empty object"),
    (lambda b: b.update(calibration={}), "baseline: calibration.matmul_ms is missing"),
    (lambda b: b["calibration"].update(matmul_ms=[]), 'baseline: calibration["matmul_ms"] must be a non-empty list'),
    (lambda b: b["calibration"].update(matmul_ms=[0.0]), 'calibration["matmul_ms"][0] must be a number above 0'),
    (lambda b: b["figures"][FIG].update(value=float("nan")), f'figures["{FIG}"].value must be a finite number'),
    (lambda b: b["figures"][FIG].update(value=10 ** 400), f'figures["{FIG}"].value must be a finite number'),
    (lambda b: b["figures"][FIG].update(values=[]), f'figures["{FIG}"].values must be a non-empty list'),
    (lambda b: b["figures"][FIG].update(n="30"), f'figures["{FIG}"].n must be an integer'),
    (lambda b: b["figures"][FIG].update(figure="speed"), f'figures["{FIG}"].figure must be one of e2e p50'),
    (lambda b: b["figures"][FIG].pop("row"), f'figures["{FIG}"].row is missing'),
    (lambda b: b.update(settings={"completion": 5}), 'baseline: settings["completion"] must be an object'),
    (lambda b: b.update(created=None), "baseline: created must be a string"),
    (lambda b: b.update(workload=[]), "baseline: workload must be an object"),
    (lambda b: b["workload"]["files"][0].update(text=5), "baseline: workload.files[0].text must be a string"),
    (lambda b: b["workload"]["files"][0].update(renames=[["x", [1], [2, 3]]]),
     "baseline: workload.files[0].renames[0][1] must be a list of two"),
]


def test_a_baseline_as_saved_passes_the_check():
    baseline.check(good_baseline())  # no ValueError
    saved = json.loads(json.dumps(good_baseline(), indent=1))  # as the file holds it
    baseline.check(saved)


@pytest.mark.parametrize("change, named", BROKEN)
def test_each_field_the_compare_reads_is_checked(change, named):
    with pytest.raises(ValueError, match="^baseline: ") as e:
        baseline.check(broken(change))
    assert named in str(e.value)


@pytest.mark.parametrize("change, named", [BROKEN[0], BROKEN[1], BROKEN[3], BROKEN[5]],
                         ids=["no-machine", "model-string", "figures-list", "empty-calibration"])
def test_a_broken_baseline_is_refused_with_exit_3_before_anything_runs(change, named, tmp_path, capsys, monkeypatch):
    """These four were a KeyError or AttributeError traceback, three after a minute of measuring."""
    from diffusion_lsp.regress import measure

    def no_measuring(*args, **kwargs):
        raise AssertionError("measured a baseline that cannot be compared")
    monkeypatch.setattr(measure, "run", no_measuring)
    path = tmp_path / "base.json"
    path.write_text(json.dumps(broken(change)))
    code, out = compare(path, capsys)
    assert code == command.INCOMPATIBLE, out
    assert out.strip().splitlines()[-1].startswith("regress: BASELINE INCOMPATIBLE: ") and named in out


def test_deeply_nested_json_is_refused_without_a_recursion_error(tmp_path, capsys):
    path = tmp_path / "deep.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    code, out = compare(path, capsys)
    assert code == command.INCOMPATIBLE and "is not JSON (nested too deeply)" in out
    (tmp_path / "settings.json").write_text('{"a": ' * 100_000 + "1" + "}" * 100_000)
    with pytest.raises(command.UserError, match="is not JSON"):
        command._settings(str(tmp_path / "settings.json"))


def test_a_fifo_as_the_baseline_is_refused_not_waited_on(tmp_path):
    fifo = tmp_path / "base.json"
    os.mkfifo(fifo)
    done = subprocess.run([sys.executable, "-m", "diffusion_lsp", "regress", "--compare", str(fifo)],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == command.COULD_NOT_RUN, done.stdout + done.stderr
    assert "FIFO" in done.stdout and "Traceback" not in done.stderr
    os.mkfifo(tmp_path / "settings.json")
    with pytest.raises(command.UserError, match="FIFO"):
        command._settings(str(tmp_path / "settings.json"))
