"""The HumanEval infilling evaluator scores known-good and known-bad completions correctly."""

from __future__ import annotations

import json
import math

import pytest

from diffusion_lsp.cli import main
from diffusion_lsp.evals import humaneval
from diffusion_lsp.evals.execute import run_all

needs_data = pytest.mark.skipif(not humaneval.default_data_dir().is_dir(), reason="shared/data not present")


@pytest.mark.slow
@needs_data
@pytest.mark.parametrize("split", ["single-line", "multi-line"])
def test_reference_passes_and_wrong_completions_fail(split):
    tasks = humaneval.load_split(split, limit=2)
    good = [humaneval.program(t, t["canonical_solution"]) for t in tasks]
    wrong = [humaneval.program(t, humaneval.postprocess(split, "    return None")) for t in tasks]
    assert run_all(good) == [True, True]
    assert run_all(wrong) == [False, False]


@needs_data
def test_sample_spreads_over_the_functions_of_a_split():
    first = humaneval.load_split("multi-line", limit=10)
    spread = humaneval.load_split("multi-line", sample=10)
    assert len(spread) == 10 and spread[0] == first[0]
    assert len({t["task_id"].split("/")[2] for t in spread}) == 10 > len({t["task_id"].split("/")[2] for t in first})


@pytest.mark.slow
def test_timeouts_and_crashes_fail():
    assert run_all(["while True: pass", "raise SystemExit(3)", "x = 1"], timeout=1.0) == [False, False, True]


def test_single_line_postprocess_keeps_one_line():
    assert humaneval.postprocess("single-line", "    x = 1\n    y = 2\n") == "    x = 1\n"
    assert humaneval.postprocess("multi-line", "a\nb") == "a\nb"


@pytest.mark.slow
@needs_data
def test_eval_command_reports_model_and_baselines(tiny_checkpoint, capsys):
    code = main(["eval", "humaneval-infill", "--model", str(tiny_checkpoint), "--limit", "2",
                 "--max-tokens", "4", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["split"] == "single-line" and out["n"] == 2
    assert {"pass@1", "forwards_per_token", "ms_per_task"} <= set(out)
    assert [r["name"] for r in out["rows"]] == ["threshold", "one", "empty"]
    assert out["rows"][1]["forwards_per_token"] >= out["rows"][0]["forwards_per_token"]


def test_missing_data_is_a_clear_error(tiny_checkpoint, tmp_path, capsys):
    code = main(["eval", "humaneval-infill", "--model", str(tiny_checkpoint), "--data", str(tmp_path)])
    assert code == 2 and "data not found" in capsys.readouterr().err


def test_heldout_reports_loss_and_exact_match_beside_baselines(tiny_checkpoint, tokenizer, tmp_path, capsys):
    from conftest import corpus_texts

    with (tmp_path / "val.jsonl").open("w") as f:
        for i, text in enumerate(corpus_texts()[:2]):
            f.write(json.dumps({"package": f"pkg{i}", "path": "m.py", "text": text}) + "\n")
    code = main(["eval", "heldout", "--model", str(tiny_checkpoint), "--corpus", str(tmp_path), "--lines", "3",
                 "--crops", "2", "--seq-len", "32", "--max-tokens", "4", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["packages"] == ["pkg0", "pkg1"] and out["lines"] == 3
    uniform = math.log(tokenizer.vocab_size)  # the untrained model's logits are near zero: about a uniform guess
    assert all(out[f"loss@{r}"] == pytest.approx(uniform, abs=0.5) for r in (0.15, 0.5, 0.85)), out
    assert 0 < out["unigram_loss"] < uniform - 1, out  # code's token counts are far from uniform
    assert out["forwards_per_token"] == 1.0  # never confident: one token committed per forward
    assert out["exact_match_empty"] == 0.0  # picked lines are never blank
    assert out["edit_similarity_empty"] == 0.0 and out["exact_match"] == 0.0 < out["edit_similarity"] < 1.0, out
    code = main(["eval", "heldout", "--model", str(tiny_checkpoint), "--corpus", str(tmp_path / "none")])
    assert code == 2 and "data build" in capsys.readouterr().err


def test_typing_fills_every_keystroke_fresh_and_from_the_last_fill(tiny_checkpoint, tmp_path, capsys):
    from conftest import corpus_texts

    with (tmp_path / "val.jsonl").open("w") as f:
        f.write(json.dumps({"package": "pkg", "path": "m.py", "text": corpus_texts()[0]}) + "\n")
    code = main(["eval", "typing", "--model", str(tiny_checkpoint), "--corpus", str(tmp_path), "--lines", "3",
                 "--chars", "2", "--context", "96", "--max-tokens", "4", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["lines"] == 3 and 3 <= out["fills"] <= 9
    assert out["fresh"]["reused_share"] == 0.0
    assert out["reuse"]["reused_share"] >= 0.5  # every keystroke after a line's first
    for mode in ("fresh", "reuse"):  # an untrained model: something of each line, never all of it
        assert out[mode]["exact_match"] == 0.0 < out[mode]["edit_similarity"] < 1.0, out
        assert 1 <= out[mode]["forwards_mean"] <= 4, out  # at least one token a forward, --max-tokens 4


def test_typing_context_is_cut_at_whole_lines_within_the_budget():
    from diffusion_lsp.evals.typing_session import cut_context, keystrokes

    count = lambda s: len(s.split())  # noqa: E731
    prefix = "".join(f"a{i} = {i}\n" for i in range(100))
    suffix = "".join(f"b{i} = {i}\n" for i in range(100))
    p, s = cut_context(prefix, suffix, count, 30, 12)
    assert prefix.endswith(p) and suffix.startswith(s) and p.startswith("a") and suffix[len(s)] == "\n"  # line ends
    assert count(p) <= 30 and count(s) <= 12 and count(p) > 20
    steps = keystrokes(p, s, "    x = 1\n", 2)
    assert [t for *_, t in steps] == ["", "x", "x "] and steps[1][0] == p + "    x"


def test_edit_similarity_scores_near_misses_between_exact_and_nothing():
    from diffusion_lsp.evals.metrics import edit_similarity

    line = "    return total / len(values)\n"
    assert edit_similarity("return total / len(values)", line) == 1.0
    assert 0.5 < edit_similarity("return total / len(vals)", line) < 1.0
    assert edit_similarity("", line) == 0.0 and edit_similarity("", "") == 1.0


def test_eval_repo_measures_every_row_on_held_out_files_only(tiny_checkpoint, tmp_path, capsys):
    from diffusion_lsp.context.repo import is_held_out
    from diffusion_lsp.evals import repo

    body = "".join(f"def load_{n}({n}):\n    data = read({n})\n    return parse(data, {n})\n\n"
                   for n in ("path", "name", "url", "key", "row"))
    names = [f"pkg/mod{i}.py" for i in range(40)]
    held = [n for n in names if is_held_out(n)]
    assert held and len(held) < len(names)
    for n in names:
        (tmp_path / n).parent.mkdir(exist_ok=True)
        (tmp_path / n).write_text(body)
    code = main(["eval", "repo", str(tmp_path), "--model", str(tiny_checkpoint), "--lines", "6", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and (out["files"], out["held_out_files"], out["lines"]) == (40, len(held), 6)
    rows = out["rows"]
    assert list(rows) == ["copy-previous-line", "drafts alone", "model", "model + drafts"]
    # the functions repeat one shape: the line that followed a similar line, its names swapped, is right
    assert rows["drafts alone"]["exact_match"] > rows["copy-previous-line"]["exact_match"] == 0
    assert {"shown", "shown_exact", "forwards_per_token", "p50_ms"} <= set(rows["model + drafts"])
    cases = repo.pick_cases([f for f in repo.repo_files(tmp_path)[0] if f.held_out], 6, __import__("random").Random(0))
    assert all(c.doc.uri.split("/", 3)[3] in held for c in cases)


def test_eval_repo_adapts_and_puts_the_adapted_rows_beside_the_model(tiny_checkpoint, tmp_path, capsys):
    body = "".join(f"def load_{n}({n}):\n    data = read({n})\n    return parse(data, {n})\n\n"
                   for n in ("path", "name", "url", "key", "row"))
    for i in range(30):
        (tmp_path / "src" / f"mod{i}.py").parent.mkdir(exist_ok=True)
        (tmp_path / "src" / f"mod{i}.py").write_text(body)
    out = tmp_path / "adapted"
    code = main(["eval", "repo", str(tmp_path / "src"), "--model", str(tiny_checkpoint), "--lines", "4",
                 "--adapt-minutes", "0.05", "--adapt-out", str(out), "--json"])
    result = json.loads(capsys.readouterr().out)
    assert code == 0 and (out / "config.json").is_file() and result["adapted"]["steps"] >= 1
    assert list(result["rows"]) == ["copy-previous-line", "drafts alone", "model", "model + drafts", "adapted",
                                    "adapted + drafts"]
    assert set(result["loss"]) == {"model", "adapted"} and result["next_edits"] == {}  # no git: no history
    assert result["next_edit_cases"] == 0
