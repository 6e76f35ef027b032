"""The acceptance model: features of known texts, the fit on a synthetic rule, the server showing the
highest-P candidate and nothing below the bar, the shipped model, a corrupt one falling back to the
rules, and `calibrate` writing a model the server takes up."""

from __future__ import annotations

import asyncio
import json
import random
from pathlib import Path

import pytest

from diffusion_lsp.acceptance.chooser import choose
from diffusion_lsp.acceptance.completion_candidates import offers
from diffusion_lsp.acceptance.features import FEATURES, Spot, features
from diffusion_lsp.acceptance.model import FILE, AcceptanceModel, fit
from diffusion_lsp.candidate import Candidate, Source
from diffusion_lsp.context.records import Document
from diffusion_lsp.engine import model_folder
from diffusion_lsp.protocol.answers import DraftTally, Fill
from diffusion_lsp.server.positions import UTF16
from diffusion_lsp.server.workspace_model import ACCEPTANCE_DIR, ModelChoice, acceptance_for

from test_server_completion import REPEATING, FakeLink, make


def test_spot_and_features_of_a_known_text():
    text = "def f(a):\n    total = compute(a, 1)\n\n    ret\n"
    spot = Spot.at(text, text.index("ret") + 3, "python")
    assert (spot.before, spot.after, spot.above, spot.doc_lines) == ("    ret", "", "total = compute(a, 1)", 5)
    draft = Candidate.at(0, "urn total", Source.LOOKUP, match=12.0, lines_away=2, agree=1)
    model = Candidate.at(0, "urn", Source.MODEL, conf=(0.9, 0.2, 0.5), kept="part")
    f = features(draft, spot, [model])
    assert f["source_lookup"] == 1.0 and f["source_model"] == 0.0 and f["lookup_match"] == pytest.approx(0.2)
    assert f["near"] == pytest.approx(1 / 3) and f["same"] == 1.0 and f["support"] == pytest.approx(3 / 9)
    assert f["in_word"] == 1.0 and f["at_indent"] == 0.0 and f["scored"] == 0.0 and f["python"] == 1.0
    g = features(model, spot, [draft])
    assert (g["conf_first"], g["conf_min"]) == (0.9, 0.2) and g["conf_gmean"] == pytest.approx(0.09 ** (1 / 3))
    assert g["kept_part"] == 1.0 and g["support"] == 1.0  # the draft starts with all of it
    assert set(f) == set(FEATURES)
    repeat = features(Candidate.at(0, "total = compute(a, 1)", Source.LINE), Spot.at("    total = compute(a, 1)\n    ", 30, "python"), [])
    assert repeat["repeats_above"] == 1.0 and repeat["at_indent"] == 1.0
    below = "    idx = b\n\n    idx = bisect(x)\n"  # the line being written is the one already below it
    assert Spot.at(below, 11, "python").below == "idx = bisect(x)"
    assert features(Candidate.at(0, "isect(x)", Source.LOOKUP), Spot.at(below, 11, "python"), [])["repeats_below"] == 1.0


def test_the_fit_finds_a_known_rule():
    rng = random.Random(0)
    rows, labels = [], []
    for _ in range(2000):  # right when a lookup draft with a long match; noise otherwise
        lookup, match = rng.random() < 0.5, rng.random()
        rows.append({"bias": 1.0, "source_lookup": float(lookup), "lookup_match": match if lookup else 0.0,
                     "chars": rng.random()})
        labels.append(rng.random() < (0.9 if lookup and match > 0.5 else 0.05))
    w = fit(rows, labels)
    assert w["lookup_match"] > 2 and abs(w["chars"]) < 0.5
    model = AcceptanceModel(w, 0.5)
    assert model.p({"bias": 1, "source_lookup": 1, "lookup_match": 0.9}) > 0.7
    assert model.p({"bias": 1, "source_lookup": 0, "lookup_match": 0.0}) < 0.1


# P = 0.99 for a lookup draft, 0.01 for anything else: which candidate wins is known
LIKES_LOOKUP = AcceptanceModel({"bias": -4.6, "source_lookup": 9.2}, 0.5, origin="test")


def at(spot: Spot):
    """The completion features at `spot`, as the chooser takes them."""
    return lambda candidate, others: features(candidate, spot, others)


def test_choose_shows_the_highest_p_and_nothing_below_the_bar():
    spot = Spot.at("x = 1\ny = ", 10, "python")
    found = [Candidate.at(0, "2", Source.MODEL), Candidate.at(0, "x + 1", Source.LOOKUP), Candidate.at(0, "3", Source.LINE)]
    got = choose(LIKES_LOOKUP, found, at(spot))
    assert got.shown.text == "x + 1" and got.p > 0.98 and len(got.scored) == 3
    assert choose(LIKES_LOOKUP, [found[0], found[2]], at(spot)).shown is None  # best P 0.01 < 0.5
    assert choose(LIKES_LOOKUP, found, at(spot), show_above=0.999).shown is None
    assert choose(None, found, at(spot)).shown is found[0]  # the rules: the model's fill


def test_offers_carry_the_fills_probabilities_to_a_draft_it_agrees_with():
    fill = Fill("urn total", ["urn", " total"], [0.6, 0.3], draft=DraftTally(1, 2, 2))
    got = offers(Candidate.at(0, "urn total", Source.MODEL), fill, [Candidate.at(0, "urn total", Source.LOOKUP, match=9.0, lines_away=1), Candidate.at(0, "urn 0", Source.LINE)])
    assert [(o.source, o.conf, o.kept) for o in got] == [("model", (0.6, 0.3), "whole"),
                                                         ("lookup", (0.6, 0.3), "whole"), ("line", (), "whole")]
    assert offers(None, fill, [])[:1] == []  # nothing left of the fill: no model candidate


def test_the_server_shows_a_draft_the_acceptance_model_prefers_and_counts_it():
    completer = make(FakeLink("0"), drafts=True)
    completer.acceptance = LIKES_LOOKUP
    answer = asyncio.run(completer.complete(REPEATING, 6, 7, UTF16))
    assert answer is not None and answer.text == "urn total"  # the lookup draft, not the model's "0"
    report = completer.stats.report()["acceptance"]
    assert report["won"] == {"lookup": 1} and report["shown_share"] == 1.0 and report["mean_p_shown"] > 0.98


def test_the_server_shows_nothing_when_no_candidate_reaches_the_bar():
    completer = make(FakeLink("0"), drafts=False)
    completer.acceptance = LIKES_LOOKUP
    assert asyncio.run(completer.complete(REPEATING, 6, 7, UTF16)) is None
    assert completer.stats.report()["acceptance"]["shown_share"] == 0.0


def test_the_shipped_model_loads_and_is_used_for_the_embedded_model():
    shipped = AcceptanceModel.load(model_folder(None) / FILE)
    assert 0 < shipped.show_above < 1 and set(shipped.weights) <= set(FEATURES)
    model, line = acceptance_for(ModelChoice(None, "embedded"), model_folder(None), None)
    assert model == shipped and "shown when P >=" in line
    assert acceptance_for(ModelChoice(None, "remote"), None, None)[0] is None  # an API's model: the rules


@pytest.mark.parametrize("content", ["{not json", json.dumps({"format": 1, "features": ["bias", "nope"],
                                                              "weights": [0, 1], "show_above": 0.5}),
                                     json.dumps({"format": 1, "features": ["bias"], "weights": [1e999],
                                                 "show_above": 0.5}),
                                     json.dumps({"format": 1, "features": [], "weights": [], "show_above": 3}),
                                     json.dumps({"format": 1, "features": ["bias", "doc_lines"], "weights": [0, 3e10],
                                                 "show_above": 0.5})])
def test_a_corrupt_model_falls_back_to_the_rules_with_one_line(tmp_path, content):
    (tmp_path / FILE).write_text(content)
    model, line = acceptance_for(ModelChoice(str(tmp_path), "settings"), tmp_path, None)
    assert model is None and "unusable" in line and "the rules" in line and "\n" not in line


def test_a_workspace_model_is_used_only_when_calibrate_made_it_on_this_machine(tmp_path):
    folder = tmp_path / ACCEPTANCE_DIR
    LIKES_LOOKUP.save(folder / FILE)  # a repository shipped one: not this machine's
    model, _ = acceptance_for(ModelChoice(None, "embedded"), None, str(tmp_path))
    assert model is None


def test_calibrate_on_a_tiny_folder_writes_a_model_the_server_takes_up(tmp_path, capsys):
    from diffusion_lsp.cli import main

    src = tmp_path / "ws"
    src.mkdir()
    body = "".join(f"def handler_{i}(request, context):\n    value = request.get('key_{i}')\n"
                   f"    return context.reply(value, status={i})\n\n\n" for i in range(12))
    (src / "handlers.py").write_text(body)
    assert main(["calibrate", str(src), "--lines", "40", "--seed", "1"]) == 0
    out = capsys.readouterr().out
    assert "acceptance (P >=" in out and "wrote" in out
    model, line = acceptance_for(ModelChoice(None, "embedded"), None, str(src))
    assert model is not None and str(src / ACCEPTANCE_DIR / FILE) in line
    assert model.fitted_on["folders"] == ["ws"] and model.fitted_on["cases"] == 35  # every line there is but the first


def test_feedback_is_kept_locally_and_refitted(tmp_path, monkeypatch, capsys):
    from diffusion_lsp.acceptance.feedback import Feedback, feedback_path, read_feedback
    from diffusion_lsp.cli import main

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    completer = make(FakeLink("0"), drafts=True)
    completer.acceptance = LIKES_LOOKUP
    asyncio.run(completer.complete(REPEATING, 6, 7, UTF16))  # shows the lookup draft
    completer.feedback.accepted(REPEATING.uri)
    (feats, kept, partly), = read_feedback()
    assert kept and partly and feats["source_lookup"] == 1.0
    assert "urn total" not in feedback_path().read_text()  # features only: no code leaves the editor's text
    fb = Feedback(tmp_path / "fb.jsonl")
    for i in range(40):  # long lookups kept, the rest not: a rule the refit must find
        fb.shown("u", {"bias": 1.0, "source_lookup": 1.0, "lookup_match": (i % 10) / 10})
        fb.accepted("u") if i % 10 >= 5 else fb.shown("v", {"bias": 1.0})
        fb.shown("u", {"bias": 1.0, "source_line": 1.0})  # replaced by the next one: not kept
    rows = read_feedback(tmp_path / "fb.jsonl")
    assert len(rows) == 40 + 39 + 19 and sum(k for _, k, _ in rows) == 20  # the last "u" and "v" still pending
    off = Feedback(tmp_path / "off.jsonl")
    off.enabled = False
    off.shown("u", {"bias": 1.0})
    off.accepted("u")
    assert not (tmp_path / "off.jsonl").exists()  # completion.feedback false: nothing kept
    feedback_path().write_text((tmp_path / "fb.jsonl").read_text())
    assert main(["calibrate", "--feedback", "--out", str(tmp_path / "refit.json")]) == 0
    refit = AcceptanceModel.load(tmp_path / "refit.json")
    assert refit.weights["lookup_match"] > 0 and refit.fitted_on["folders"] == ["feedback"]


def test_a_multi_line_fill_is_cut_to_the_lines_whose_p_holds():
    fill = Fill("a = 1\nb = 2\nc = 3", ["a = 1", "\nb = 2", "\nc = 3"], [0.9, 0.8, 0.1])
    found = offers(Candidate.at(0, "a = 1\nb = 2\nc = 3", Source.MODEL), fill, [])
    assert [o.text for o in found] == ["a = 1", "a = 1\nb = 2", "a = 1\nb = 2\nc = 3"]
    assert [len(o.conf) for o in found] == [1, 2, 3]
    holds = AcceptanceModel({"bias": -2.0, "conf_min": 5.0}, 0.5)  # P >= 0.5 while every token is >= 0.4
    got = choose(holds, found, at(Spot.at("", 0, "python")))
    assert got.shown.text == "a = 1\nb = 2" and got.p > 0.5  # the third line's token is doubted


def test_a_feature_constant_but_for_float_noise_weighs_nothing_and_p_holds_across_document_lengths():
    # every file of the folder 100 lines long: doc_lines' spread is 5.6e-17, float noise; standardized
    # by it, doc_lines got a weight of 3e10 and P jumped from 0 to 1 between 74 and 100 lines
    rng = random.Random(3)
    rows, labels = [], []
    for _ in range(500):
        offer = Candidate.at(0, "x" * rng.randint(1, 30), rng.choice([Source.MODEL, Source.LOOKUP]), match=rng.random() * 60)
        rows.append(features(offer, Spot("    ", "", "", 100, "python"), []))
        labels.append(offer.source == "lookup" and rng.random() < 0.8)
    w = fit(rows, labels)
    assert w["doc_lines"] == 0.0 and w["source_lookup"] > 1
    model = AcceptanceModel(w, 0.5)
    offer = Candidate.at(0, "value", Source.LOOKUP, match=30)
    ps = [model.p(features(offer, Spot("    ", "", "", n, "python"), [])) for n in (1, 74, 99, 100, 101, 10_000)]
    assert max(ps) - min(ps) < 1e-9 and 0.5 < ps[0] < 1  # the length it never saw vary does not move P


def saved_cases(path: Path, rows: list[dict], labels: list[bool], package: str = "pkg") -> None:
    path.write_text("".join(json.dumps({"package": package, "truth": "t", "typed": "", "offers": [{"text": "t", "source": "model"}],
                                        "feats": [r], "exact": [y], "partly": [y]}) + "\n" for r, y in zip(rows, labels)))


def test_a_fit_the_server_would_refuse_or_that_explodes_is_refused_in_one_line(tmp_path, capsys):
    from diffusion_lsp.cli import main

    with pytest.raises(ValueError, match="conf_first"):  # a NaN gave NaN weights, silently
        fit([{"bias": 1.0, "conf_first": float("nan")}, {"bias": 1.0, "conf_first": 0.5}], [True, False])
    # conf_first tells the labels apart on a scale of 1e-9: finite, but P swings from 0 to 1 over 1e-9
    rows = [{"bias": 1.0, "conf_first": (2e-9 if i % 2 else 1e-9)} for i in range(40)]
    saved_cases(tmp_path / "cases.jsonl", rows, [bool(i % 2) for i in range(40)])
    out = tmp_path / "acceptance.json"
    assert main(["calibrate", "--cases", str(tmp_path / "cases.jsonl"), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "wrote" not in captured.out and captured.err.count("\n") == 1 and "conf_first" in captured.err
    assert not out.exists()
    model = AcceptanceModel({"bias": 0.0, "conf_first": 5000.0}, 0.5)
    with pytest.raises(ValueError, match="conf_first"):  # nor is such a model written by anything else
        model.save(out)
    assert list(tmp_path.iterdir()) == [tmp_path / "cases.jsonl"]


def test_calibrate_says_wrote_only_for_a_file_the_server_loads(tmp_path, capsys):
    from diffusion_lsp.cli import main

    rng = random.Random(5)
    rows = [{"bias": 1.0, "conf_first": rng.random()} for _ in range(60)]
    labels = [r["conf_first"] > 0.5 for r in rows]
    saved_cases(tmp_path / "ok.jsonl", rows, labels)
    out = tmp_path / "acceptance.json"
    assert main(["calibrate", "--cases", str(tmp_path / "ok.jsonl"), "--out", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    model, line = acceptance_for(ModelChoice(str(tmp_path), "settings"), tmp_path, None)  # the server's own path
    assert model is not None and model.weights["conf_first"] > 1 and str(out) in line
    # a package name of 1.1 MB in saved cases goes into fitted_on: a file over the server's 1 MiB cap
    saved_cases(tmp_path / "big.jsonl", rows, labels, package="p" * (1_100_000))
    assert main(["calibrate", "--cases", str(tmp_path / "big.jsonl"), "--out", str(out)]) == 2
    captured = capsys.readouterr()
    assert "wrote" not in captured.out and captured.err.count("\n") == 1 and "would not load" in captured.err
    assert AcceptanceModel.load(out) == model  # the good file it had is left as it was, and nothing beside it
    assert sorted(p.name for p in tmp_path.iterdir()) == ["acceptance.json", "big.jsonl", "ok.jsonl"]


def test_calibrate_refuses_the_other_models_options_instead_of_ignoring_them(tmp_path, capsys):
    from diffusion_lsp.cli import main

    rng = random.Random(5)
    rows = [{"bias": 1.0, "conf_first": rng.random()} for _ in range(60)]
    saved_cases(tmp_path / "ok.jsonl", rows, [r["conf_first"] > 0.5 for r in rows])
    saved = tmp_path / "edits.jsonl"
    saved.write_text("")
    out = tmp_path / "acceptance.json"
    # --edits-from without --edits fitted the completion model and said nothing of the edits file
    assert main(["calibrate", "--cases", str(tmp_path / "ok.jsonl"), "--edits-from", str(saved), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--edits-from" in err and "add --edits" in err and not out.exists()
    assert main(["calibrate", "--edits", "--cases", str(tmp_path / "ok.jsonl"), "--edits-from", str(saved),
                 "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--cases" in err and "not to --edits" in err and not out.exists()
    assert main(["calibrate", "--cases", str(tmp_path / "ok.jsonl"), "--out", str(out)]) == 0  # alone, as before
