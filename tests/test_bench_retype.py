"""`bench retype`: the scoring of what is shown, and a run through the real server beside the rules."""

from __future__ import annotations

import re

import pytest

from diffusion_lsp.bench.retype import score
from diffusion_lsp.cli import main
from diffusion_lsp.context.records import Document
from diffusion_lsp.evals.retype import Case


def case(truth: str) -> Case:
    return Case(Document("file:///a.py", "", "python"), 0, truth, "")


def test_score_counts_shown_right_partly_and_wrong():
    cases = [case("x = 1"), case("return y"), case("f(a, b)"), case("pass")]
    got = score(cases, ["x = 1  ", "return", "g()", ""], [10.0, 30.0, 20.0, 40.0])
    assert got["requests"] == 4 and got["shown"] == 0.75 and got["exact"] == 0.25
    assert got["precision"] == pytest.approx(1 / 3) and got["partly"] == 0.5 and got["wrong"] == 0.5
    assert got["p50_ms"] == 25.0
    assert score([case("a")], [""], [1.0])["precision"] is None  # nothing shown: no precision


@pytest.mark.slow
def test_bench_retype_runs_beside_the_rules(tmp_path, tiny_checkpoint, capsys):
    src = tmp_path / "pkg"
    src.mkdir()
    (src / "m.py").write_text("".join(f"def f{i}(a):\n    b = a + {i}\n    return b\n\n" for i in range(6)))
    argv = ["bench", "retype", str(src), "--lines", "4", "--beside-rules", "--model", str(tiny_checkpoint),
            "--threads", "1"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for name in ("acceptance", "rules"):
        assert re.search(rf"^{name}: all +4 ", out, re.M), out
    assert "acceptance: off (completion.acceptance)" in out  # the server said the second pass used the rules
