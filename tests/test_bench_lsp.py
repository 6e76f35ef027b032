"""`diffusion-lsp bench lsp`: the typing replay's sites, the other open documents and their edits,
the server it starts, the missing-model error, and one short run end to end on the tiny checkpoint
that prints its rows. No timing is asserted: benchmarks print figures, tests check behaviour."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from diffusion_lsp.bench.figures import Sample
from diffusion_lsp.bench.lsp import _print_header, server_launch
from diffusion_lsp.bench.replay import Crowd, Site, find_sites
from diffusion_lsp.data.workload import open_documents
from diffusion_lsp.cli import build_parser, main
from diffusion_lsp.protocol.settings import LaunchSettings
from diffusion_lsp.server.config import parse_config

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
    assert Sample(1.0, None, "turn x\n    y = 1", "re", "return x").similarity == 1.0
    assert Sample(1.0, None, "", "re", "return x").similarity < Sample(1.0, None, "turn", "re", "return x").similarity


def test_sites_are_block_openers_with_an_indented_body():
    assert find_sites(CODE.split("\n")) == [
        Site(line=3, last=7, indent="    ", first="if x:  # a comment"),
        Site(line=4, last=5, indent="        ", first="return 1"),
        Site(line=10, last=11, indent="    ", first="pass"),
    ]


def test_the_open_documents_are_large_distinct_stdlib_modules():
    docs = open_documents(30)
    uris, texts = [u for u, _ in docs], [t for _, t in docs]
    assert len(docs) == 30 and len(set(uris)) == 30 and len(set(texts)) == 30  # copies are variants
    assert all(t.count("\n") >= 1500 and len(t.encode()) < 2_000_000 for t in texts)  # indexed, yet large


class Editor:
    """Records what the replay sends, applying each change to its own copy of the text."""

    def __init__(self):
        self.texts: dict[str, str] = {}
        self.changed: list[str] = []

    def open(self, uri, text):
        self.texts[uri] = text

    def close(self, uri):
        del self.texts[uri]

    def change(self, uri, start, end, text):
        lines = self.texts[uri].split("\n")
        assert start == end and lines[start[0]].startswith(start[1])  # an insertion at a real position
        offset = sum(len(s) + 1 for s in lines[: start[0]]) + len(start[1])
        self.texts[uri] = self.texts[uri][:offset] + text + self.texts[uri][offset:]
        self.changed.append(uri)


def test_the_crowd_edits_its_first_documents_in_turn_at_their_end():
    crowd = Crowd({"file:///a.py": "x = 1\n", "file:///b.py": "y = 2", "file:///c.py": "z = 3\n"}, edited=2)
    editor = Editor()
    crowd.open(editor)
    for _ in range(3):
        crowd.edit_next(editor)
    assert editor.changed == ["file:///a.py", "file:///b.py", "file:///a.py"] and crowd.edited_docs == 2
    assert editor.texts == crowd.docs  # the crowd knows the text the server has
    assert editor.texts["file:///a.py"] == "x = 1\n_edited_0 = 0\n_edited_2 = 2\n"
    assert editor.texts["file:///b.py"] == "y = 2\n_edited_1 = 1\n" and editor.texts["file:///c.py"] == "z = 3\n"
    crowd.close(editor)
    assert editor.texts == {}


def test_the_server_starts_with_the_bench_s_launch_settings(tmp_path):
    launch = LaunchSettings(path=str(tmp_path), device="cpu", threads=3, precision="fp32")
    cmd, options = server_launch(launch, 256, tmp_path / "w.sock")
    serve = build_parser().parse_args(cmd[cmd.index("serve"):])
    assert (serve.model, serve.device, Path(serve.worker_socket)) == (str(tmp_path), "cpu", tmp_path / "w.sock")
    cfg, problems = parse_config(options)
    assert problems == [] and (cfg.model.threads, cfg.model.precision) == (3, "fp32")
    assert cfg.completion.max_context_tokens == 256 and cfg.completion.debounce_ms == 0
    cmd, _ = server_launch(LaunchSettings(), 256, tmp_path / "w.sock")
    assert "--model" not in cmd  # the server's own default: the embedded model


def test_the_header_says_what_the_columns_are(capsys):
    _print_header(LaunchSettings(), build_parser().parse_args(["bench", "lsp"]), {"pid": 7}, 1.25)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("model: embedded default  device: auto") and "worker pid 7 ready in 1.2 s" in lines[0]
    assert lines[1].startswith("Times are in ms. The columns: model is the worker's fill time; "), lines[1]


def test_a_missing_default_model_is_one_clear_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr("diffusion_lsp.engine.DEFAULT_MODEL", tmp_path / "default")
    assert main(["bench", "lsp"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "embedded default model is missing" in err and "--model" in err


@pytest.mark.slow
def test_bench_lsp_runs_end_to_end_and_prints_the_rows(tiny_checkpoint, capsys):
    argv = ["bench", "lsp", "--model", str(tiny_checkpoint), "--requests", "4", "--chars", "2", "--threads", "1",
            "--next-edits", "2"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    titles = re.findall(r"^\S.* \([\d,]+ lines.*\)$", out, re.M)
    assert len(titles) == 3 and "while 30 large documents open" in titles[2], out  # one table per replay
    for row in ("single-line", "multi-line"):  # one row per replay
        assert len(re.findall(rf"^{row} +\d+ +\d", out, re.M)) == 3, out
    assert out.count("goals: single-line p50") == 3
    assert out.count("goal on the 5,000-line file: server overhead p95") == 2  # the big file, alone and crowded
    assert len(re.findall(r"^single-line .* \d+% +\d+\.\d%$", out, re.M)) == 3, out  # shown, line similarity
    calls = [int(n) for n, asked in re.findall(r"model calls: (\d+) for (\d+) completions", out) if int(asked)]
    assert len(calls) == 3 and min(calls) >= 1
    edits = re.search(r"other documents: 30 open, (\d+) edits to (\d+) of them", out)
    assert edits and int(edits[1]) >= 1 and int(edits[2]) >= 1  # one edit before each site
    assert re.search(r"^next edits: 2 renames in .*, each mode on the same sites$", out, re.M), out
    for mode in ("remask-and-refine", "full re-mask"):  # each site asked in both modes, each request counted
        row = re.search(rf"^{mode} +2 +\d+ +\d+ +\d+ +\d+ +(\d+)", out, re.M)
        assert row and int(row[1]) >= 1, out  # forwards per request: the model ran
    assert "goal: next-edit p50 (default mode, remask-and-refine) <= 300 ms:" in out
    assert "goal: remask-and-refine forwards per edited token <= 1/2 of full re-mask's:" in out


def test_next_edit_sites_are_local_names_used_twice_with_the_right_edit():
    import random

    from diffusion_lsp.bench.next_edit import find_sites

    src = "def f(items, n):\n    total = len(items)\n    # items is not a use here\n    return total + n.x\n"
    sites = {s.name: s for s in find_sites(src, 10, random.Random(0))}
    assert set(sites) == {"items", "total"}  # n once as a name (n.x's x is an attribute), len skipped
    items = sites["items"]
    assert items.first == (0, 6)
    assert items.expected == src.replace("f(items", "f(items_new").replace("len(items)", "len(items_new)")


def test_typing_figures_are_printed_side_by_side(capsys):
    from diffusion_lsp.bench.typing_load import Session, print_sessions, quantile, server_command

    assert quantile([], 0.5) is None and quantile([5.0, 1.0, 3.0], 0.5) == 3.0 and quantile(list(range(1, 101)), .95) == 95
    assert server_command(["python", "-m", "x"], None) == ["python", "-m", "x"]
    assert server_command(["python"], Path("/tmp/base"))[:2] == ["env", "PYTHONPATH=/tmp/base"]
    before = Session(keys=40, seconds=10.0, completion_ms=[100.0, 200.0], next_edit_ms=[300.0],
                     rss_mb={"server": (76.0, 114.0), "worker": (400.0, 401.0)}, load=(1.0, 2.0))
    after = Session(keys=50, seconds=10.0, completion_ms=[90.0], next_edit_ms=[250.0, 260.0],
                    rss_mb={"server": (76.0, 80.5), "worker": (400.0, None)}, load=(1.5, 1.5))
    print_sessions("typing", {"baseline /tmp/base": before, "this tree": after})
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "typing" and re.match(r"^ +baseline /tmp/base +this tree$", lines[1]), lines
    row = {line.split("  ")[0]: line for line in lines[2:]}
    assert re.search(r"40 \(4\.0/s\) +50 \(5\.0/s\)$", row["keys typed (per second)"])
    assert re.search(r"100 / 200 +90 / 90$", row["completion p50 / p95 ms"])
    assert re.search(r"76\.0 -> 114\.0 \(\+38\.0\) +76\.0 -> 80\.5 \(\+4\.5\)$", row["server RSS MB start -> end"])
    assert re.search(r"400\.0 -> 401\.0 \(\+1\.0\) +400\.0 -> -$", row["worker RSS MB start -> end"])


def test_a_baseline_that_is_no_source_tree_is_one_line(tmp_path, capsys):
    assert main(["bench", "lsp", "--typing-seconds", "1", "--baseline", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "not a source tree" in err


@pytest.mark.slow
def test_typing_runs_against_a_baseline_tree_and_this_one(tiny_checkpoint, capsys):
    tree = Path(__file__).resolve().parents[1]  # this checkout as its own baseline: two servers, two columns
    argv = ["bench", "lsp", "--model", str(tiny_checkpoint), "--threads", "1", "--typing-seconds", "3",
            "--open-docs", "2", "--baseline", str(tree)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert re.search(rf"^ +baseline {re.escape(str(tree))} +this tree$", out, re.M), out
    keys = re.search(r"^keys typed \(per second\) +(\d+) \(.*\) +(\d+) \(", out, re.M)
    assert keys and int(keys[1]) >= 1 and int(keys[2]) >= 1, out
    for process in ("server", "worker"):  # both read at the start and the end, in both runs
        assert len(re.findall(r"\d+\.\d -> \d+\.\d \([+-]\d+\.\d\)", re.search(
            rf"^{process} RSS MB start -> end .*$", out, re.M)[0])) == 2, out
    assert re.search(r"^next edit p50 / p95 ms +\d[\d,]* / \d[\d,]* +\d[\d,]* / \d[\d,]*$", out, re.M), out
