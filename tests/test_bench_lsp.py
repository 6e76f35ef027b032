"""`diffusion-lsp bench lsp`: the typing replay's sites, the missing-model error, and one short run
end to end on the tiny checkpoint that prints its rows. No timing is asserted: benchmarks print
figures, tests check behaviour."""

from __future__ import annotations

import re

from diffusion_lsp.bench_lsp import Site, find_sites
from diffusion_lsp.cli import main

CODE = '''\
import os


def f(x):
    if x:  # a comment
        return 1

    return 2


class A:
    pass
d = {"a": 1,
     "b": 2}
'''


def test_a_sample_scores_the_line_the_suggestion_would_make():
    from diffusion_lsp.bench_lsp import Sample

    assert Sample(1.0, None, "turn x\n    y = 1", "re", "return x").similarity == 1.0
    assert Sample(1.0, None, "", "re", "return x").similarity < Sample(1.0, None, "turn", "re", "return x").similarity


def test_sites_are_block_openers_with_an_indented_body():
    assert find_sites(CODE.split("\n")) == [
        Site(line=3, last=7, indent="    ", first="if x:  # a comment"),
        Site(line=4, last=5, indent="        ", first="return 1"),
        Site(line=10, last=11, indent="    ", first="pass"),
    ]


def test_a_missing_default_model_is_one_clear_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr("diffusion_lsp.engine.DEFAULT_MODEL", tmp_path / "default")
    assert main(["bench", "lsp"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "embedded default model is missing" in err and "--model" in err


def test_bench_lsp_runs_end_to_end_and_prints_the_rows(tiny_checkpoint, capsys):
    argv = ["bench", "lsp", "--model", str(tiny_checkpoint), "--requests", "4", "--chars", "2", "--threads", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for row in ("single-line", "multi-line"):  # one row per file
        assert len(re.findall(rf"^{row} +\d+ +\d", out, re.M)) == 2, out
    assert out.count("goals: single-line p50") == 2
    assert "goal on the 5,000-line file: server overhead p95" in out
    assert len(re.findall(r"^single-line .* \d+% +\d+\.\d%$", out, re.M)) == 2, out  # shown, line similarity
    calls = [int(n) for n, asked in re.findall(r"model calls: (\d+) for (\d+) completions", out) if int(asked)]
    assert len(calls) == 2 and min(calls) >= 1
