"""`eval nep`: the benchmark's match scores on hand-made files whose answers are worked out by hand,
the added rates, both baselines, record loading, and the command (baselines only, and with a fake
model predictor in place of nextedit.run)."""

from __future__ import annotations

import dataclasses
import json
import sys
import types

import pytest

from diffusion_lsp.cli import main
from diffusion_lsp.evals import nep
from diffusion_lsp.evals.nep import NepCase, case_from, load_cases, run_predictor
from diffusion_lsp.evals.nep_baselines import no_edit, repeat_last_edit as repeat_fields
from diffusion_lsp.evals.nep_metrics import chunks, partial_match, position_match, score, summarize

CURRENT = "".join(f"l{i:02d}\n" for i in range(1, 31))  # 30 lines: l01..l30


def insert(text: str, after: str, line: str) -> str:
    """`line` inserted below the line reading `after`."""
    return text.replace(after + "\n", after + "\n" + line + "\n", 1)


NEW = insert(CURRENT, "l15", "X")  # the reference: X below line 15


def test_chunks_carry_the_header_and_three_context_lines():
    assert chunks(CURRENT, NEW) == [["@@ -13,6 +13,7 @@", " l13", " l14", " l15", "+X", " l16", " l17", " l18"]]
    assert chunks(CURRENT, insert(CURRENT, "l02", "  ")) == []  # a blank-line-only hunk is dropped
    assert chunks(CURRENT, CURRENT) == []


@pytest.mark.parametrize("predicted, exact, partial, position", [
    (NEW, True, True, True),
    (CURRENT, False, False, False),  # no edit
    (insert(CURRENT, "l15", "Y"), False, False, True),  # right place, wrong line
    (insert(CURRENT, "l05", "X"), False, False, False),  # right line, wrong place
    (insert(NEW, "l28", "Z"), False, True, True),  # plus a far change below: a hunk of its own
    (insert(NEW, "l28", ""), False, True, True),  # plus a far blank line: dropped
    (insert(NEW, "l18", "Z"), False, False, False),  # plus a near change: one merged hunk, other context
    (insert(NEW, "l02", "Z"), False, False, True),  # plus a far change above: the header's +line moves
    (NEW.replace("l01\n", "", 1), False, False, True),  # a far deletion above, the same
    (NEW[:-1], False, True, True),  # the last newline is not a line of its own
])
def test_match_scores_worked_out_by_hand(predicted, exact, partial, position):
    s = score(CURRENT, NEW, predicted)
    assert (s.exact, s.partial, s.position) == (exact, partial, position)
    assert s.edited == (predicted != CURRENT) and s.needs_edit


def test_when_no_edit_is_right_only_no_edit_matches():
    assert partial_match(CURRENT, CURRENT, CURRENT) and position_match(CURRENT, CURRENT, CURRENT)
    assert not partial_match(CURRENT, CURRENT, NEW) and not position_match(CURRENT, CURRENT, NEW)
    s = score(CURRENT, CURRENT, None)
    assert s.exact and s.partial and not s.edited and not s.needs_edit


def test_rates_on_five_records_worked_out_by_hand():
    scores = [
        score(CURRENT, NEW, NEW, ms=1.0, forwards=4),  # right
        score(CURRENT, NEW, insert(CURRENT, "l15", "Y"), ms=3.0, forwards=6),  # a wrong edit at the right place
        score(CURRENT, NEW, None, ms=2.0, forwards=0),  # missed
        score(CURRENT, CURRENT, NEW, ms=9.0, forwards=2),  # noise: an edit where none is right
        score(CURRENT, NEW, insert(NEW, "l28", "Z"), ms=5.0, forwards=8),  # right, plus a far extra change
    ]
    row = summarize("m", scores, ["py", "py", "go", "go", "java"])
    assert row["exact"] == 0.2 and row["partial"] == 0.4 and row["position"] == 0.6
    assert row["edit_rate"] == 0.8
    assert row["wrong_edit_rate"] == 0.5  # records 2 and 4 of the four edits; 5 has a partial match
    assert row["noise_rate"] == 1.0 and row["no_edit_records"] == 1
    assert row["p50_ms"] == 3.0 and row["forwards"] == 4.0
    assert row["partial_by_language"] == {"py": {"n": 2, "partial": 0.5}, "go": {"n": 2, "partial": 0.0},
                                          "java": {"n": 1, "partial": 1.0}}
    quiet = summarize("none", scores[:3])
    assert quiet["noise_rate"] is None and "partial_by_language" not in quiet
    assert summarize("never", [score(CURRENT, NEW, None)])["wrong_edit_rate"] is None


def case(old: str, current: str, new: str = "", cursor=None, path: str = "m.py") -> NepCase:
    record = {"new_file": path, "old_contents": old, "current_contents": current, "new_contents": new}
    if cursor is not None:
        record["cursor"] = {"line": cursor[0], "character": cursor[1]}
    return case_from(record, 0, "test")


def repeat_last_edit(c: NepCase) -> str | None:
    return repeat_fields(c.old, c.current, c.cursor)


def test_repeat_replaces_the_next_whole_identifier_after_the_cursor():
    old = "x = foo(1)\nfood = 1\ny = foo(2)\nz = foo(3)\n"
    current = "x = bar(1)\nfood = 1\ny = foo(2)\nz = foo(3)\n"
    c = case(old, current)
    assert c.cursor == (0, 7)
    assert repeat_last_edit(c) == "x = bar(1)\nfood = 1\ny = bar(2)\nz = foo(3)\n"
    assert no_edit(c.old, c.current, c.cursor) is None
    # from a record's own cursor on line 3, the next one is line 4
    assert repeat_last_edit(case(old, current, cursor=(3, 0))) == "x = bar(1)\nfood = 1\ny = foo(2)\nz = bar(3)\n"


def test_repeat_widens_a_partial_identifier_change():
    # getName -> getFullName: the change is the whole identifier, so getNames is left alone
    old, current = "a.getName()\nb.getNames()\nc.getName()\n", "a.getFullName()\nb.getNames()\nc.getName()\n"
    assert repeat_last_edit(case(old, current)) == "a.getFullName()\nb.getNames()\nc.getFullName()\n"


def test_repeat_makes_no_edit_when_the_old_text_is_only_before_the_cursor():
    assert repeat_last_edit(case("a = foo\nb = foo\n", "a = foo\nb = bar\n")) is None
    assert repeat_last_edit(case("f(x)\nf(x)\n", "f(x, y)\nf(x)\n")) is None  # an insertion inside a line
    assert repeat_last_edit(case("same\n", "same\n")) is None
    assert repeat_last_edit(case("a  b\nc  d\n", "a b\nc  d\n")) is None  # only whitespace changed


def test_repeat_copies_and_renames_a_one_line_insertion():
    old = "set(json, IdKey, _Id);\n\nget(json, IdKey, e->_Id);\nend();\n"
    current = "set(json, IdKey, _Id);\nset(json, IconKey, _Icon);\n\nget(json, IdKey, e->_Id);\nend();\n"
    new = "set(json, IdKey, _Id);\nset(json, IconKey, _Icon);\n\nget(json, IdKey, e->_Id);\nget(json, IconKey, e->_Icon);\nend();\n"
    c = case(old, current, new, path="m.cpp")
    assert repeat_last_edit(c) == new
    assert c.label == "cpp" and c.language.name == "cpp"
    # the found line is the last one, without a newline
    old, current = old[:-len("\nend();\n")], current[:-len("\nend();\n")]
    assert repeat_last_edit(case(old, current)) == current + "\nget(json, IconKey, e->_Icon);"


def test_repeat_makes_no_edit_for_an_insertion_unlike_its_anchor():
    assert repeat_last_edit(case("a = 1\nb = 1\n", "a = 1\nprint(a)\nb = 1\n")) is None
    assert repeat_last_edit(case("a = 1\n", "a = 1\nx = 1\n")) is None  # a renamed, but no later a


def test_a_predictor_may_return_text_and_forwards():
    c = case("x = foo\ny = foo\n", "x = bar\ny = foo\n", "x = bar\ny = bar\n")
    row, outputs = run_predictor("m", lambda _: types.SimpleNamespace(text=c.new, forwards=7), [c])
    assert row["exact"] == 1.0 and row["forwards"] == 7.0 and outputs == [c.new]
    row, outputs = run_predictor("m", lambda _: types.SimpleNamespace(text=None, forwards=3), [c])
    assert row["edit_rate"] == 0.0 and outputs == [c.current]
    with pytest.raises(RuntimeError, match="m predicted bytes"):
        run_predictor("m", lambda _: b"x", [c])


RECORD = {"commit": "c0", "message": "m", "old_file": "a.py", "new_file": "a.py", "status": "M", "text": "",
          "old_contents": "x = foo(1)\ny = foo(2)\n", "current_contents": "x = bar(1)\ny = foo(2)\n",
          "new_contents": "x = bar(1)\ny = bar(2)\n"}


def write_jsonl(path, records):
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in records), encoding="utf-8")
    return path


def test_load_cases_ids_cursor_and_language(tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", [RECORD, "", {**RECORD, "id": "own", "new_file": "b/c.ts",
                                                            "cursor": {"line": 1, "character": 2}}])
    first, second = load_cases(data)
    assert (first.id, first.cursor, first.language.name, first.label) == (0, (0, 7), "python", "py")
    assert (second.id, second.cursor, second.language.name, second.label) == ("own", (1, 2), "typescript", "ts")
    assert len(load_cases(data, limit=1)) == 1


@pytest.mark.parametrize("bad, message", [
    ({k: v for k, v in RECORD.items() if k != "current_contents"}, "line 2: missing field 'current_contents'"),
    ({**RECORD, "new_contents": None}, "line 2: field 'new_contents' must be a string, got NoneType"),
    ({**RECORD, "cursor": {"line": 0}}, "line 2: cursor must be"),
    ({**RECORD, "cursor": {"line": 5, "character": 0}}, "line 2: cursor 5:0 is outside"),
    ({**RECORD, "id": [1]}, "line 2: field 'id'"),
    ("{not json", "line 2: not JSON"),
    ("[1, 2]", "line 2: a record must be a JSON object, got list"),
])
def test_bad_records_name_their_line(tmp_path, bad, message):
    data = write_jsonl(tmp_path / "d.jsonl", [RECORD, bad])
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        load_cases(data)


def run_cli(capsys, *args):
    code = main(["eval", "nep", *map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def test_command_baselines_only(tmp_path, capsys):
    no_change = {**RECORD, "id": "same", "current_contents": RECORD["old_contents"],
                 "new_contents": RECORD["old_contents"]}
    data = write_jsonl(tmp_path / "d.jsonl", [RECORD, no_change])
    out_path = tmp_path / "pred.jsonl"
    code, out, _ = run_cli(capsys, "--no-model", "--data", data, "--json", "--predictions", out_path)
    assert code == 0
    report = json.loads(out)
    assert report["n"] == 2 and [r["name"] for r in report["rows"]] == ["no edit", "repeat last edit",
                                                                         "follow the change", "shown, next edits off"]
    none, repeat, rename, shown = report["rows"]  # the embedded model ships a next-edit acceptance model
    assert shown["edit_rate"] <= repeat["edit_rate"]  # it shows some of the candidates, never more
    assert rename["edit_rate"] == 0.0  # a call changed, not a name renamed where it is defined
    # record 0 needs an edit, record "same" needs none
    assert (none["exact"], none["partial"], none["edit_rate"], none["noise_rate"]) == (0.5, 0.5, 0.0, 0.0)
    assert none["wrong_edit_rate"] is None
    assert (repeat["exact"], repeat["partial"], repeat["edit_rate"], repeat["wrong_edit_rate"]) == (1.0, 1.0, 0.5, 0.0)
    lines = [json.loads(x) for x in out_path.read_text().splitlines()]
    assert lines == [{"id": 0, "predicted": RECORD["current_contents"]},
                     {"id": "same", "predicted": RECORD["old_contents"]}]

    data = write_jsonl(tmp_path / "e.jsonl", [RECORD])
    code, out, _ = run_cli(capsys, "--no-model", "--data", data, "--no-noise-cases")
    assert code == 0 and "repeat last edit" in out and "n/a (no such records" in out and "py" in out
    # without a record where no edit is right, the noise rate is measured on the derived unedited file
    code, out, _ = run_cli(capsys, "--no-model", "--data", data, "--json")
    report = json.loads(out)
    assert report["noise_cases"].startswith("noise rate: on 1 derived cases")
    assert [r["noise_rate"] for r in report["rows"]] == [0.0] * 4  # no history: nothing to repeat or follow


def test_the_derived_unedited_case_is_the_old_file_with_the_cursor_at_the_first_edit():
    from diffusion_lsp.evals.nep import NepCase, unedited

    case = NepCase(7, "a.py", None, "a\nb\nc\n", "a\nB\nc\nd\n", "x", (3, 1))
    assert unedited(case) == NepCase("7/unedited", "a.py", None, "a\nb\nc\n", "a\nb\nc\n", "a\nb\nc\n", (1, 0))


def test_command_reports_a_bad_record_in_one_line(tmp_path, capsys):
    data = write_jsonl(tmp_path / "d.jsonl", [RECORD, {**RECORD, "old_contents": 3}])
    code, _, err = run_cli(capsys, "--no-model", "--data", data)
    assert code == 2 and "line 2: field 'old_contents' must be a string" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, "--no-model", "--data", tmp_path / "missing.jsonl")
    assert code == 2 and "not found" in err


@dataclasses.dataclass(frozen=True)
class FakeSettings:
    mode: str = "refine"
    drafts: bool = True


def test_command_calls_the_model_predictor(tmp_path, capsys, monkeypatch):
    calls = []

    async def predict_file(backend, path, old, current, cursor, spec, count, settings):
        calls.append((backend, path, cursor, spec.name, settings.mode, settings.drafts, count("a b c") > 0))
        return types.SimpleNamespace(text=current.replace("foo(2)", "bar(2)"), forwards=5)

    monkeypatch.setitem(sys.modules, "diffusion_lsp.nextedit.run", types.SimpleNamespace(predict_file=predict_file))
    monkeypatch.setitem(sys.modules, "diffusion_lsp.nextedit.settings",
                        types.SimpleNamespace(NextEditSettings=FakeSettings))
    monkeypatch.setattr(nep, "command_backend", lambda launch: "BACKEND")
    data = write_jsonl(tmp_path / "d.jsonl", [RECORD])
    out_path = tmp_path / "pred.jsonl"
    code, out, _ = run_cli(capsys, "--data", data, "--json", "--predictions", out_path, "--mode", "full",
                           "--no-noise-cases")
    assert code == 0
    assert calls == [("BACKEND", "a.py", (0, 7), "python", "full", True, True)]
    model = json.loads(out)["rows"][0]
    assert model["name"] == "model" and model["exact"] == 1.0 and model["forwards"] == 5.0
    assert json.loads(out_path.read_text()) == {"id": 0, "predicted": RECORD["new_contents"]}
    run_cli(capsys, "--data", data)
    assert calls[-1][-3:-1] == ("refine", True)  # the settings' own defaults without --mode
    run_cli(capsys, "--data", data, "--no-drafts")
    assert calls[-1][-2] is False
