"""`bench gpu --dry-run`: the GPU benchmark's own code on the CPU (a tiny Dream-shaped model for the 7B,
the embedded model, the kernels in Triton's interpreter), and its figures are counted from real fills:
the tokens each policy can write per forward pass, the positions each model sees, the rows batching
keeps busy, the kernels agreeing with their references, the goals judged on the figures printed.
Speed is not checked: it is a benchmark."""

from __future__ import annotations

import json

import pytest
import torch

from diffusion_lsp.bench.gpu import BATCH_SPANS, KINDS, POLICIES, SPAN, single_stream
from diffusion_lsp.cli import main
from diffusion_lsp.kernels import dispatch

CONTEXT, REPEAT = 640, 2  # more context than the embedded model's 512 positions: it sees it cut to fit


@pytest.mark.slow
def test_the_dry_run_measures_every_section_from_real_fills(tmp_path, capsys):
    out = tmp_path / "gpu.json"
    assert main(["bench", "gpu", "--dry-run", "--context", str(CONTEXT), "--repeat", str(REPEAT),
                 "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    figures = json.loads(out.read_text())
    assert figures["dry_run"] and figures["device"] == "cpu" and set(figures["models"]) == {"tiny-shape", "embedded"}
    shape, embedded = figures["models"]["tiny-shape"], figures["models"]["embedded"]
    c = shape["config"]  # the 7B preset's flags at a small size, every tokenizer id a row of it
    assert (c["qkv_bias"], c["shift_logits"], c["tie_embeddings"], shape["dtype"]) == (True, True, False,
                                                                                      "torch.bfloat16")
    assert c["vocab_size"] % 64 == 0 and c["vocab_size"] > 8192 and embedded["config"]["vocab_size"] == 8192

    for name, m in figures["models"].items():
        rows = {(r["policy"], r["kind"]): r for r in m["single"]}
        assert set(rows) == {(p, k) for p in POLICIES for k in KINDS}
        for (policy, kind), r in rows.items():
            assert r["fills"] == REPEAT and r["forwards"] >= REPEAT, (name, policy, kind)
            assert r["tokens"] <= SPAN * REPEAT  # at most max_tokens a fill
            # two fills: the nearest-rank p50 is the faster, the p95 the slower; together, the row's time
            assert r["p50_ms"] + r["p95_ms"] == pytest.approx(r["seconds"] * 1e3), (name, policy, kind)
            assert r["tokens_s"] == pytest.approx(r["tokens"] / r["seconds"])
            assert r["forwards_per_token"] == (pytest.approx(r["forwards"] / r["tokens"]) if r["tokens"] else None)
            if kind == "multi-line":  # a fill writes at least one real token (one-line: its line may be empty)
                assert r["tokens"] >= REPEAT
        for kind in KINDS:  # "one" commits a position per forward, top-k four; a filler's step writes no token
            assert rows["one", kind]["forwards"] >= rows["one", kind]["tokens"]
            assert 4 * rows["topk k=4", kind]["forwards"] >= rows["topk k=4", kind]["tokens"]
            if name == "tiny-shape":  # random weights are never sure: threshold commits the surest position, as one
                counts = [(rows[p, kind]["tokens"], rows[p, kind]["forwards"]) for p in ("threshold", "one")]
                assert counts[0] == counts[1], (kind, counts)
        assert all(r["positions"] == 512 for r in m["single"]) == (name == "embedded")  # cut to its positions
        assert all(r["positions"] > CONTEXT for r in m["single"]) == (name == "tiny-shape")

        batched = [(r["rows"], r["mode"]) for r in m["batched"]]
        assert batched == [(2, "continuous"), (2, "static"), (4, "continuous"), (4, "static")]
        for r in m["batched"]:
            spans = [BATCH_SPANS[i % len(BATCH_SPANS)] for i in range(2 * r["rows"])]
            assert r["requests"] == 2 * r["rows"] and r["rows"] <= r["tokens"] <= sum(spans)  # N multi-line ones
            # occupancy is the rows of every step added up, over N and the steps: a whole number of rows
            taken = r["occupancy"] * r["rows"] * r["steps"]
            assert taken == pytest.approx(round(taken)), (name, r)
        for n in (2, 4):  # static groups of N wait on their longest: continuous keeps the rows fuller
            cont, static = (r for r in m["batched"] if r["rows"] == n)
            assert cont["occupancy"] > static["occupancy"], (name, n)
            # the same requests, each decoded greedily in its own row: the same answers whichever rows it shares
            assert cont["tokens"] == static["tokens"], (name, n)
            # static: two groups of N, each starting with every row busy, and no step without a row
            rows_taken = round(static["occupancy"] * n * static["steps"])
            assert 2 * n + static["steps"] - 2 <= rows_taken <= n * static["steps"], (name, static)
            if name == "tiny-shape":  # the threshold commits one position per row and step: a token takes a row-step
                assert rows_taken >= static["tokens"], static

    kernels = figures["kernels"]
    if dispatch.triton_importable():
        assert kernels["skipped"] is None
        assert [r["kernel"] for r in kernels["rows"]] == ["head_stats", "head_stats", "linear_ce fwd+bwd"]
        head, loss = kernels["rows"][:2], kernels["rows"][2]
        assert all(r["errors"]["conf"] < 1e-3 and r["same_id"] >= 0.9 for r in head), head
        assert loss["errors"]["loss"] < 1e-2 and loss["errors"]["dL/dh"] < 1e-2, loss
    else:
        assert "triton is not installed" in kernels["skipped"] and "kernel rows skipped" in printed

    # the output head's cost: the dry run's default is the embedded model's row (--shapes adds the 0.5B shape)
    (cost,) = figures["vocab_cost"].values()
    assert list(figures["vocab_cost"]) == ["embedded"] and cost["vocab"] == 8192 and cost["masked"] == SPAN
    assert 0 < cost["head_ms"] < cost["step_ms"] and cost["head_share"] == cost["head_ms"] / cost["step_ms"]
    assert cost["forwards"] >= 1 and cost["fill_ms"] > 0 and "output head's cost (cpu, float32" in printed

    per_policy = single_stream(shape["single"])
    speed, latency = figures["goals"]
    assert speed["value"] == max(per_policy.values()) and speed["met"] == (speed["value"] >= 1000)
    fastest = min(r["p50_ms"] for r in shape["single"] if r["kind"] == "one-line")
    assert latency["value"] == fastest and latency["met"] == (fastest <= 60)
    assert f"{speed['goal']}: {speed['value']:,.1f} with {speed['policy']} ({'met' if speed['met'] else 'MISSED'})" \
        in printed


@pytest.mark.skipif(torch.cuda.is_available(), reason="here it would run the whole GPU benchmark")
def test_without_a_gpu_it_asks_for_one_or_the_dry_run(capsys):
    assert main(["bench", "gpu"]) == 2
    err = capsys.readouterr().err
    assert "needs a CUDA device" in err and "--dry-run" in err


@pytest.mark.parametrize("dry_run,shapes,want", [(False, None, ("embedded", "qwen2.5-0.5b")),
                                                 (True, None, ("embedded",)),
                                                 (True, ("embedded", "qwen2.5-0.5b"), ("embedded", "qwen2.5-0.5b")),
                                                 (False, (), ())])
def test_the_gpu_run_measures_the_real_vocabulary_and_the_dry_run_leaves_it_to_shapes(monkeypatch, dry_run, shapes,
                                                                                      want):
    """On the GPU the Qwen2.5-0.5B shape's row (151,936 rows) is measured beside the embedded model's by
    default; on the CPU its minute is asked for (--shapes, whose parsing is checked here too)."""
    import argparse

    from diffusion_lsp.bench import gpu, vocab_cost

    asked = []
    monkeypatch.setattr(vocab_cost, "section", lambda names, engine, req, cfg, steps, fills: asked.append(
        (names, req.max_tokens, steps, fills)) or {})
    gpu.head_cost(argparse.Namespace(dry_run=dry_run, shapes=shapes), object(), ("x = ", "\n"), 3)
    assert asked == [(want, SPAN, 3, 1 if dry_run else 3)]
    parser = argparse.ArgumentParser()
    vocab_cost.add_shapes_arg(parser, None, "default: the command's")
    assert parser.parse_args(["--shapes", "qwen2.5-0.5b, embedded"]).shapes == ("qwen2.5-0.5b", "embedded")
    assert parser.parse_args(["--shapes", "none"]).shapes == () and parser.parse_args([]).shapes is None
    with pytest.raises(SystemExit):
        parser.parse_args(["--shapes", "qwen-7b"])
