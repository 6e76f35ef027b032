"""The one candidate type and the one chooser: a source's kind is a property of its member, each
request lists its sources in its features' order, and the chooser's rules (the first candidate
without a model; the highest P at its bar; the model's fill as many lines as hold; a followed source
the model was not measured on shown by the rules)."""

from __future__ import annotations

import pytest

from diffusion_lsp.acceptance.chooser import MEASURED, choose, shown_index
from diffusion_lsp.acceptance.model import AcceptanceModel
from diffusion_lsp.candidate import Candidate, Kind, Request, Source


def test_a_sources_kind_is_its_own_not_its_place():
    assert {s for s in Source if s.kind is Kind.MODEL} == {Source.MODEL, Source.DRAFT}
    assert {s for s in Source if s.kind is Kind.REPEAT} == {Source.REPEAT, Source.LAST}
    assert {s for s in Source if s.followed} == {Source.RENAME, Source.SIGNATURE, Source.ARGUMENT, Source.IMPORTED,
                                                 Source.UNWRAP}
    assert all(s.followed <= (s.kind is Kind.CODE) for s in Source)  # a change's own sites come from the code
    assert Source("rename") is Source.RENAME and f"source_{Source.LINE}" == "source_line"


def test_each_request_names_its_sources_in_a_model_files_order():
    # the order of the features, hence of a model file's weights: a source added later goes last
    assert [s.value for s in Request.COMPLETION.sources][:4] == ["model", "last", "lookup", "line"]
    assert [s.value for s in Request.EDIT.sources][:7] == ["rename", "signature", "argument", "imported", "repeat",
                                                          "model", "draft"]
    for request in Request:
        assert len(set(request.sources)) == len(request.sources)


def test_a_candidate_is_a_span_and_its_text():
    doc = "total = a + b\n"
    c = Candidate(8, 9, "x", Source.RENAME)
    assert c.apply(doc) == "total = x + b\n" and c.replace_chars == 1
    assert c.same(Candidate(8, 13, "x + b", Source.MODEL), doc) and not c.same(Candidate(8, 8, "x", Source.MODEL), doc)
    assert Candidate.at(5, "ab", Source.LOOKUP, 2) == Candidate(5, 7, "ab", Source.LOOKUP)
    with pytest.raises(ValueError, match="start <= end"):
        Candidate(4, 3, "", Source.MODEL)


def by_length(c: Candidate, others: list[Candidate]) -> dict[str, float]:
    return {"bias": 1.0, "chars": float(len(c.text)), "followed": float(c.source.followed)}


def model(weights: dict[str, float], bar: float = 0.5, seen: dict | None = None) -> AcceptanceModel:
    return AcceptanceModel(weights, bar, fitted_on={} if seen is None else {"seen": seen}, kind="edit")


def test_without_a_model_the_rules_show_the_first():
    a, b = Candidate(0, 0, "a", Source.LOOKUP), Candidate(0, 0, "b", Source.MODEL)
    got = choose(None, [a, b], by_length)
    assert got.shown is a and got.p is None and got.scored == []
    assert choose(None, [], by_length).shown is None


def test_the_highest_p_at_its_bar():
    short, long = Candidate(0, 0, "ab", Source.LOOKUP), Candidate(0, 0, "abcdef", Source.LINE)
    likes_long = model({"chars": 1.0, "bias": -3.0})
    got = choose(likes_long, [short, long], by_length)
    assert got.shown is long and got.p == pytest.approx(1 / (1 + 2.718281828 ** -3), rel=1e-6)
    assert got.feats == {"bias": 1.0, "chars": 6.0, "followed": 0.0} and len(got.scored) == 2
    held = choose(likes_long, [short, long], by_length, show_above=0.99)
    assert held.shown is None and held.p == pytest.approx(got.p)  # the best P, though nothing is shown


def test_of_the_models_fill_the_most_lines_that_hold():
    one, two, three = (Candidate(0, 0, t, Source.MODEL) for t in ("a = 1", "a = 1\nb = 2", "a = 1\nb = 2\nc = 33"))
    prefers_short = model({"chars": -0.1, "bias": 2.0}, bar=0.5)  # P falls with length, all three above 0.5
    ps = [prefers_short.p(by_length(c, [])) for c in (one, two, three)]
    assert ps[0] > ps[1] > ps[2] >= 0.5
    assert choose(prefers_short, [one, two, three], by_length).shown is three
    cut = model({"chars": -0.1, "bias": 2.0}, bar=ps[1])  # the third line no longer holds
    assert choose(cut, [one, two, three], by_length).shown is two
    other = Candidate(0, 0, "a = 1\nb = 2", Source.LINE)  # not the model's: never lengthened
    assert shown_index(prefers_short, [other, Candidate(0, 0, "a = 1\nb = 2\nc", Source.LINE)],
                       [0.9, 0.8], 0.5) == 0


def test_a_followed_source_the_model_never_measured_is_shown_by_the_rules():
    rename, wrong = Candidate(4, 5, "y", Source.RENAME), Candidate(0, 1, "zzzzzzzz", Source.MODEL)
    likes_long = model({"chars": 1.0, "bias": -3.0}, seen={"rename": MEASURED - 1, "model": 500})
    got = choose(likes_long, [wrong, rename], by_length)
    assert got.shown is rename and got.p is None
    measured = model({"chars": 1.0, "bias": -3.0}, seen={"rename": MEASURED, "model": 500})
    assert choose(measured, [wrong, rename], by_length).shown is wrong  # its P decides
