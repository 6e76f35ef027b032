"""The next-edit acceptance model: candidates judged against the rest of a real commit (a right
rest-of-rename is right wherever the commit's next hunk is), commits replayed from a git work tree
as a user makes them, the model's file kinds, the choice at the bar, `eval edits` and
`calibrate --edits` on a repository made here, and the language server showing what the model
likes and holding back what it does not."""

from __future__ import annotations

import asyncio
import json
import math
import shutil
import subprocess

import pytest

from diffusion_lsp.acceptance.chooser import choose
from diffusion_lsp.acceptance.edits import EDIT_FEATURES, edit_features, features_at
from diffusion_lsp.acceptance.model import AcceptanceModel
from diffusion_lsp.candidate import Candidate, Kind, Request, Source
from diffusion_lsp.context.records import Document
from diffusion_lsp.evals.edit_replay import JudgedEdit, changes, code_offers, judged, replay_cases, right
from diffusion_lsp.nextedit.edits import minimal_edit
from diffusion_lsp.nextedit.history import EditLog
from diffusion_lsp.server.config import parse_config
from diffusion_lsp.server.next_edit import NextEditor
from diffusion_lsp.server.positions import UTF16
from diffusion_lsp.server.stats import NextEditStats


def between(doc: str, new: str, source: Source = Source.MODEL) -> Candidate:
    return minimal_edit(doc, new, source)


CUR = "a\nr = 1\nx(q)\ny(q)\nz\n"  # q renamed r on its first line; the commit renames the rest too
TARGET = "a\nr = 1\nx(r)\ny(r)\nz\n"


def test_the_rest_of_a_rename_is_right_all_at_once_or_one_line_at_a_time():
    assert right(CUR, between(CUR, TARGET), TARGET)
    assert right(CUR, between(CUR, "a\nr = 1\nx(r)\ny(q)\nz\n"), TARGET)  # its first site: right, not all
    assert right(CUR, between(CUR, "a\nr = 1\nx(q)\ny(r)\nz\n"), TARGET)


def test_a_change_the_commit_does_not_make_or_makes_otherwise_is_wrong():
    assert not right(CUR, between(CUR, "a\nr = 1\nx(q)\ny(q)\nzz\n"), TARGET)  # a line the commit keeps
    assert not right(CUR, between(CUR, "a\nr = 1\nx(s)\ny(q)\nz\n"), TARGET)  # the right site, other text
    more = "a\nr = 1\nx(r, 2)\ny(r)\nz\n"  # the commit changes that line further: half of it is not right
    assert not right(CUR, between(CUR, "a\nr = 1\nx(r)\ny(q)\nz\n"), more)


def test_a_line_inserted_next_to_the_edited_one_does_not_make_it_wrong():
    target = "a\nr = 1\nnew\nx(r)\ny(r)\nz\n"
    assert right(CUR, between(CUR, "a\nr = 1\nx(r)\ny(q)\nz\n"), target)


def test_whole_lines_inserted_or_deleted_are_judged_as_lines():
    doc = "a\nb\nc\n"
    assert right(doc, Candidate(4, 4, "new\n", Source.MODEL), "a\nb\nnew\nc\n")
    assert not right(doc, Candidate(4, 4, "other\n", Source.MODEL), "a\nb\nnew\nc\n")
    assert right(doc, Candidate(2, 4, "", Source.MODEL), "a\nc\n")
    assert not right(doc, Candidate(0, 2, "", Source.MODEL), "a\nc\n")


def test_a_one_for_one_replacement_is_made_a_line_at_a_time_and_other_hunks_whole():
    old = "def f(q):\n    x = q\n    return q\n\n\n\nz = 1\n"
    new = "def f(r):\n    x = r\n    return r\n\n\n\nz = 2\nw = 3\n"
    assert [len(c) for c in changes(old, new)] == [1, 1, 1, 1]
    assert [c[0][1:3] for c in changes(old, new)] == [(0, 1), (1, 2), (2, 3), (6, 7)]


OLD = '''def area(width, height):
    scale = 2
    total = width * height
    return total * scale


def other(scale):
    return scale
'''
NEW = OLD.replace("    scale = 2", "    factor = 2").replace("return total * scale", "return total * factor")


def git(root, *args):
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(root), "PATH": "/usr/bin:/bin"})


@pytest.fixture
def repo(tmp_path):
    if shutil.which("git") is None:
        pytest.skip("needs git")
    root = tmp_path / "proj"
    root.mkdir()
    git(root, "init", "-q")
    (root / "geo.py").write_text(OLD)
    git(root, "add", ".")
    git(root, "commit", "-qm", "first")
    (root / "geo.py").write_text(NEW)
    git(root, "commit", "-qam", "rename scale in area")
    return root


def test_a_commit_is_replayed_and_its_rename_followed_is_right_and_a_repeat_out_of_scope_wrong(repo):
    cases = replay_cases(str(repo), 10)
    assert len(cases) == 1  # two changes (the two lines): one case, after the first
    case = cases[0]
    assert case.current == OLD.replace("    scale = 2", "    factor = 2") and case.target == NEW
    assert case.cursor == (1, 10)
    offers = code_offers(case.path, case.old, case.current, case.cursor)
    by = {o.source: o for o in offers}
    assert by["rename"].apply(case.current) == NEW  # the rest of the rename, in area's scope only
    got = judged(case, offers)
    assert dict(zip([o.source for o in got.offers], got.right)) == {"rename": True, "repeat": True}
    assert got.feats[0]["agree"] == 1.0 and set(got.feats[0]) == set(EDIT_FEATURES)


def model(weights: dict, bar: float = 0.5) -> AcceptanceModel:
    return AcceptanceModel(weights, bar, "right", kind="edit")


def test_an_edit_model_is_its_own_kind_and_round_trips(tmp_path):
    m = model({"bias": -1.0, "source_rename": 3.0}, 0.6)
    path = tmp_path / "edit_acceptance.json"
    m.save(path)
    back = AcceptanceModel.load(path, kind="edit")
    assert back.weights == m.weights and back.show_above == 0.6 and back.kind == "edit"
    with pytest.raises(ValueError, match="kind 'edit'"):
        AcceptanceModel.load(path)  # not a completion model
    raw = json.loads(path.read_text())
    raw["features"] = ["bias", "conf_first"]  # a completion feature
    with pytest.raises(ValueError, match="does not compute"):
        AcceptanceModel.from_json(raw, kind="edit")


def test_the_choice_is_the_likeliest_candidate_at_the_bar_and_the_first_without_a_model():
    doc = "a = 1\nb = 2\n"
    rename, wrong = Candidate(0, 1, "x", Source.RENAME), Candidate(6, 7, "y", Source.MODEL, confidence=0.9)
    m = model({"bias": -1.0, "source_rename": 3.0, "source_model": -2.0})
    at = features_at(doc, 5, 1)
    got = choose(m, [wrong, rename], at)
    assert got.shown is rename and got.p == pytest.approx(1 / (1 + math.exp(-2.0)))
    assert choose(m, [wrong], at).shown is None
    assert choose(m, [rename], at, show_above=0.95).shown is None  # the user's bar
    assert choose(None, [wrong, rename], at).shown is wrong


def test_the_changes_own_sites_from_a_source_the_model_hardly_saw_are_shown_by_the_rules():
    doc = "a = 1\nb = 2\n"
    rename, repeat = Candidate(0, 1, "x", Source.RENAME), Candidate(6, 7, "y", Source.REPEAT)
    low = AcceptanceModel({"bias": -5.0}, 0.5, "right", {"seen": {"rename": 3, "repeat": 400}}, kind="edit")
    at = features_at(doc, 5, 1)
    got = choose(low, [repeat, rename], at)
    assert got.shown is rename and got.p is None and len(got.scored) == 2  # 3 renames measure nothing
    assert choose(low, [repeat], at).shown is None  # a repeat it saw 400 of: its P decides
    seen = AcceptanceModel({"bias": -5.0}, 0.5, "right", {"seen": {"rename": 300}}, kind="edit")
    assert choose(seen, [rename], at).shown is None


def test_features_say_how_far_and_how_much():
    doc = "".join(f"line{i}\n" for i in range(20))
    far = edit_features(Candidate(doc.index("line15"), doc.index("line15") + 6, "LINE15", Source.REPEAT), doc, 0, 2)
    near = edit_features(Candidate(doc.index("line1\n"), doc.index("line1\n") + 5, "x", Source.REPEAT), doc, 0, 2)
    assert far["away"] > near["away"] > 0 and far["source_repeat"] == 1.0
    assert far["insertion"] == far["deletion"] == 0.0


# the features a model file of the next-edit kind was written with before sources became members
SHIPPED = ("bias", "followed", "source_rename", "source_signature", "source_argument", "source_imported",
           "source_repeat", "source_model", "source_draft", "away", "lines", "removed", "added", "insertion",
           "deletion", "conf", "agree", "steps")


def test_the_features_keep_their_names_and_order_a_later_source_adds_its_own():
    assert tuple(f for f in EDIT_FEATURES if f in SHIPPED) == SHIPPED
    assert [f for f in EDIT_FEATURES if f not in SHIPPED] == [f"source_{s}" for s in Request.EDIT.sources[7:]]


def test_a_candidate_agrees_when_another_not_from_the_model_leaves_the_document_the_same():
    doc = "a = q\nb = q\n"
    model = Candidate(4, 5, "r", Source.MODEL, confidence=0.8)
    same = {s: Candidate(4, 5, "r", s) for s in Request.EDIT.sources}
    for source, other in same.items():
        agrees = edit_features(model, doc, 0, 1, [other])["agree"]
        assert agrees == (0.0 if source.kind is Kind.MODEL else 1.0), source  # a draft is the model's own
    assert edit_features(model, doc, 0, 1, [Candidate(4, 5, "s", Source.RENAME)])["agree"] == 0.0
    assert edit_features(same[Source.RENAME], doc, 0, 1, [])["followed"] == 1.0


def test_a_saved_candidate_names_one_of_the_next_edits_sources():
    row = {"id": "x", "repo": "made", "right": [True], "offers": [["rename", 0, 1, "z", None]], "feats": [{}]}
    assert JudgedEdit.from_json(row).offers == [Candidate(0, 1, "z", Source.RENAME)]
    with pytest.raises(ValueError, match="source must be one of rename, signature"):
        JudgedEdit.from_json(row | {"offers": [["shown", 0, 1, "z", None]]})
    with pytest.raises(ValueError, match="source must be one of"):
        JudgedEdit.from_json(row | {"offers": [["lookup", 0, 1, "z", None]]})  # a completion's source


def test_eval_edits_and_calibrate_edits_on_a_repository(repo, tmp_path, capsys):
    from diffusion_lsp.cli import main

    saved = tmp_path / "edits.jsonl"
    assert main(["eval", "edits", str(repo), "--no-model", "--json", "--save-edits", str(saved)]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["cases"] == 1 and got["sources"]["rename"]["precision"] == 1.0
    assert got["rules, next edits off (default): the change's own sites"]["right"] == 1.0
    z = Candidate(0, 1, "z", Source.MODEL, confidence=0.5)
    wrong = {"id": "x", "repo": "made", "right": [False],
             "offers": [["model", 0, 1, "z", 0.5]], "feats": [edit_features(z, "ab\n", 0, 1)]}
    more = tmp_path / "more.jsonl"
    more.write_text(json.dumps(wrong) + "\n")
    out = tmp_path / "edit_acceptance.json"
    assert main(["calibrate", "--edits", "--edits-from", str(saved), "--edits-from", str(more),
                 "--out", str(out), "--json"]) == 0
    fitted = AcceptanceModel.load(out, kind="edit")
    assert fitted.fitted_on["right"] == 2 and fitted.weights["source_rename"] > fitted.weights["source_model"]
    assert fitted.fitted_on["seen"] == {"model": 1, "rename": 1, "repeat": 1}


def test_calibrate_edits_on_one_repository_is_what_the_server_uses_there(repo, tmp_path, monkeypatch, capsys):
    from diffusion_lsp.cli import main
    from diffusion_lsp.server.workspace_model import ModelChoice, acceptance_for

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    (repo / "conf.py").write_text("a = 1\nb = 2\nc = 1\n\n\n\nd = 1\n")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "conf")
    (repo / "conf.py").write_text("a = 5\nb = 2\nc = 1\n\n\n\nd = 7\n")  # repeating 1 -> 5 at c is wrong
    git(repo, "commit", "-qam", "new values")
    assert main(["calibrate", "--edits", str(repo), "--no-model", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert got["trusted"] and got["out"].endswith(".diffusion-lsp/acceptance/edit_acceptance.json")
    model, line = acceptance_for(ModelChoice(None, "embedded"), None, str(repo), "edit")
    assert model is not None and model.kind == "edit" and got["out"] in line


class NoModel:
    """A link the editor must not ask: next edits from the code alone."""

    from diffusion_lsp.protocol.capabilities import Capabilities
    capabilities = Capabilities(probe=True)

    async def probe(self, key, order):
        raise AssertionError("the model was asked")


def editor_after_rename(acceptance: AcceptanceModel | None) -> tuple[NextEditor, Document]:
    log = EditLog()
    text = OLD.replace("    scale = 2", "    factor = 2")
    log.note("file:///geo.py", "geo.py", OLD, text, 1, 1, 1)
    editor = NextEditor(NoModel(), NextEditStats(), lambda kind, message: None, log)
    cfg, problems = parse_config({"nextEdit": {"enable": False, "debounceMs": 0}})
    assert problems == []
    editor.configure(cfg)
    editor.acceptance = acceptance
    return editor, Document("file:///geo.py", text, "python", 2)


def test_the_server_shows_the_sites_the_acceptance_model_likes_and_holds_back_the_rest():
    liked = model({"bias": -1.0, "source_rename": 3.0, "source_repeat": -3.0})
    editor, doc = editor_after_rename(liked)
    got = asyncio.run(editor.suggest(doc, 2, 1, 10, UTF16, "geo.py"))
    assert got.shown.source == "rename" and got.p > 0.8 and got.shown.text == "factor"
    assert editor.stats.by_source == {"rename": 1} and editor.stats.judged == 1
    editor, doc = editor_after_rename(model({"bias": -3.0}))
    assert asyncio.run(editor.suggest(doc, 2, 1, 10, UTF16, "geo.py")) is None
    assert editor.stats.held_back == 1
    editor, doc = editor_after_rename(None)  # the rules: the change's sites, whenever there are some
    got = asyncio.run(editor.suggest(doc, 2, 1, 10, UTF16, "geo.py"))
    assert got.shown.source == "rename" and got.p is None and editor.stats.judged == 0


@pytest.mark.slow
def test_bench_edits_types_the_commits_into_the_server_and_judges_what_it_answers(repo, tiny_checkpoint, tmp_path, capsys):
    from pathlib import Path

    import diffusion_lsp
    from diffusion_lsp.cli import main

    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_checkpoint, ckpt)
    shutil.copy(Path(diffusion_lsp.__file__).parent / "checkpoints" / "default" / "edit_acceptance.json", ckpt)
    assert main(["bench", "edits", str(repo), "--json", "--model", str(ckpt), "--threads", "1"]) == 0
    got = json.loads(capsys.readouterr().out)
    offline = next(v for k, v in got.items() if k.startswith("acceptance, next edits off"))
    assert got["through the server, default settings"] == offline and offline["right"] == 1.0
    assert got["through the server, by the rules (nextEdit.acceptance false)"]["right"] == 1.0
