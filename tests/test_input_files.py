"""One bounded reader for every file a command is given (diffusion_lsp/input_files.py): /dev/zero,
a FIFO with no writer, a folder, a file past the cap, JSON nested past the limit, NaN / Infinity /
1e400, and saved candidates with fields of the wrong type, a miscount or 1e308 are each one line and
exit 2, never a hang, a MemoryError or a traceback, and nothing is written. A walk over every
command's parser fails for an argument naming a file that is not declared as read by that reader
(`type=InputFile`) or as written (`type=output_path`)."""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
from pathlib import Path

import pytest

from diffusion_lsp.cli import build_parser, main
from diffusion_lsp.input_files import MAX_DEPTH, InputFile, Refused, parse_json, read_bytes, read_json
from diffusion_lsp.workspace_files import output_path


def hostile(tmp_path: Path, kind: str) -> str:
    """A path of each kind a command must refuse without reading it whole."""
    if kind == "dev-zero":
        return "/dev/zero"
    path = tmp_path / f"in-{kind}"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "huge":
        with open(path, "wb") as f:
            f.truncate((256 << 20) + 1)  # sparse: nothing read decides
    elif kind == "missing":
        pass
    return str(path)


KINDS = ["dev-zero", "fifo", "folder", "huge", "missing"]


@pytest.mark.parametrize("kind", KINDS)
def test_the_reader_refuses_devices_fifos_folders_huge_and_missing_files_without_blocking(tmp_path, no_hang, kind):
    with pytest.raises(Refused) as e:
        read_bytes(hostile(tmp_path, kind))
    assert "\n" not in str(e.value) and str(tmp_path) in str(e.value) or kind == "dev-zero"
    assert re.search({"dev-zero": "a device", "fifo": "FIFO", "folder": "a directory", "huge": "more than the 256 MB",
                      "missing": "No such file"}[kind], str(e.value))


@pytest.mark.parametrize("text, why", [
    ("[" * 100_000 + "]" * 100_000, "nested"),  # past Python's recursion limit: json's RecursionError
    ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nested"),
    ('{"a": NaN}', "NaN is not a finite"), ('{"a": -Infinity}', "Infinity is not a finite"),
    ('{"a": 1e400}', "1e400 is not a finite"), ('{"a": 1', "not JSON"),
])
def test_json_is_bounded_in_depth_and_finite(text, why):
    with pytest.raises(Refused, match=why):
        parse_json(text, "f.json")
    assert parse_json("[" * MAX_DEPTH + "1e308" + "]" * MAX_DEPTH, "f.json")  # as deep as allowed; finite


def test_a_file_that_grows_past_the_cap_after_the_check_is_not_read_past_it(tmp_path):
    path = tmp_path / "f.json"
    path.write_text("[1]")
    assert read_json(str(path)) == [1]
    path.write_bytes(b" " * 101)
    with pytest.raises(Refused, match="more than the 100 bytes"):
        read_bytes(str(path), cap=100)


def saved(**fields) -> str:
    record = {"package": "p", "truth": "t", "typed": "", "offers": [{"text": "t", "source": "model"}],
              "feats": [{"bias": 1.0, "conf_first": 0.5}], "exact": [True], "partly": [True]} | fields
    return json.dumps(record)


def saved_edit(**fields) -> str:
    record = {"id": "c", "repo": "r", "offers": [["rename", 0, 1, "y", 0.5]], "feats": [{"bias": 1.0, "conf": 0.5}],
              "right": [True]} | fields
    return json.dumps(record)


BAD_CASES = {
    "exact a string": (saved(exact=["yes"]), "'exact' must hold true or false"),
    "exact an integer (the miscount)": (saved(exact=[88]), "'exact' must hold true or false"),
    "more labels than candidates": (saved(exact=[True, False]), "'exact' holds 2 items for 1 candidates"),
    "feats not a list": (saved(feats={"bias": 1}), "'feats' must be a list"),
    "a feature a string": (saved(feats=[{"bias": "1"}]), "feature 'bias' must be a finite number"),
    "a feature 1e308": (saved(feats=[{"bias": 1e308}]), "at most 1e\\+09"),
    "a feature NaN": ('{"feats": [{"bias": NaN}]}', "NaN is not a finite number"),
    "a feature Infinity": ('{"feats": [{"bias": Infinity}]}', "Infinity is not a finite number"),
    "truth a number": (saved(truth=3), "'truth' must be a string"),
    "offers a number": (saved(offers=5), "'offers' must be a list"),
    "a source no completion has": (saved(offers=[{"text": "t", "source": "rename"}]),
                                   "'source' must be one of model, last, lookup, line, not 'rename'"),
    "a line not an object": ("[1, 2]", "a line must be a JSON object"),
    "deep JSON": ("[" * 50_000 + "]" * 50_000, "nested more than"),
}
BAD_EDITS = {
    "right an integer": (saved_edit(right=[1]), "'right' must hold true or false"),
    "an offer of 4 fields": (saved_edit(offers=[["rename", 0, 1, "y"]]), "each offer must be"),
    "an offer ending before it starts": (saved_edit(offers=[["rename", 5, 1, "y", None]]), "each offer must be"),
    "a conf of 1e308": (saved_edit(offers=[["rename", 0, 1, "y", 1e308]]), "conf must be a finite number"),
    "id a list": (saved_edit(id=[1]), "'id' must be a string"),
    "deep JSON": ("[" * 50_000 + "]" * 50_000, "nested more than"),
}


def one_line(capsys) -> str:
    captured = capsys.readouterr()
    assert captured.err.count("\n") == 1 and captured.err.startswith("diffusion-lsp: error: "), captured.err
    assert "wrote" not in captured.out and "Traceback" not in captured.err
    return captured.err


@pytest.mark.parametrize("name", sorted(BAD_CASES))
def test_calibrate_refuses_saved_candidates_of_the_wrong_shape_in_one_line(tmp_path, capsys, name):
    text, why = BAD_CASES[name]
    (tmp_path / "cases.jsonl").write_text(saved() + "\n" + text + "\n")
    out = tmp_path / "out.json"
    assert main(["calibrate", "--cases", str(tmp_path / "cases.jsonl"), "--out", str(out)]) == 2
    err = one_line(capsys)
    assert re.search(why, err) and "line 2" in err, err
    assert not out.exists()


@pytest.mark.parametrize("name", sorted(BAD_EDITS))
def test_calibrate_edits_refuses_saved_next_edit_candidates_of_the_wrong_shape_in_one_line(tmp_path, capsys, name):
    text, why = BAD_EDITS[name]
    (tmp_path / "edits.jsonl").write_text(saved_edit() + "\n" + text + "\n")
    out = tmp_path / "out.json"
    assert main(["calibrate", "--edits", "--edits-from", str(tmp_path / "edits.jsonl"), "--out", str(out)]) == 2
    err = one_line(capsys)
    assert re.search(why, err) and "line 2" in err, err
    assert not out.exists()


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("argv", [["calibrate", "--cases", "{}"], ["calibrate", "--edits", "--edits-from", "{}"],
                                  ["eval", "edits", "--no-model", "--edits-from", "{}"],
                                  ["eval", "edits", "--acceptance", "{}", "--edits-from", "{}"],
                                  ["bench", "renames", "{}"], ["eval", "nep", "--no-model", "--data", "{}"],
                                  ["fim", "{}", "--at", "1:1"], ["data", "unpack", "{}", "--out", "OUT"]])
def test_every_file_argument_refuses_hostile_files_in_one_line_without_blocking(tmp_path, capsys, no_hang, kind, argv):
    path = hostile(tmp_path, kind)
    argv = [a.format(path).replace("OUT", str(tmp_path / "out")) for a in argv]
    assert main(argv + (["--out", str(tmp_path / "out.json")] if argv[0] == "calibrate" else [])) == 2
    err = one_line(capsys)
    assert path in err
    assert not (tmp_path / "out.json").exists() and not (tmp_path / "out").exists()


def test_bench_renames_refuses_a_file_past_its_cap_before_parsing_it(tmp_path, capsys):
    path = tmp_path / "big.py"
    path.write_text("x = 1\n" * 200_000)  # 1.2 MB of Python: 18 MB of it ran out of memory after 47 s
    assert main(["bench", "renames", str(path)]) == 2
    assert "more than the 1 MB" in one_line(capsys)


def test_a_refusal_counts_the_candidates_and_the_right_ones_rightly(tmp_path, capsys):
    (tmp_path / "cases.jsonl").write_text("\n".join(saved() for _ in range(45)) + "\n")
    assert main(["calibrate", "--cases", str(tmp_path / "cases.jsonl"), "--out", str(tmp_path / "o.json")]) == 2
    assert "cannot fit on 45 candidates with 45 exactly right" in one_line(capsys)


# ---- every command's file arguments go through the reader ----

FILE_METAVAR = re.compile(r"FILE|PATH|JSON|\.jsonl?$|^OUT$")
# arguments whose metavar looks like a file but that name no file a command reads or writes
NOT_FILES = {
    "--worker-socket": "a Unix socket the worker listens on, not a file read",
    "--next-edit": "a JSON text given inline (serve-api), not a path",
}
# a path that travels as a launch setting (protocol/settings.py) into the worker, which reads it with
# model/config.read_text: input_files.read_bytes under the checkpoint's cap
SETTINGS = {"--chat-template"}


def file_arguments():
    """(command, argument, action) for every argument of every command whose value is a path to a
    file: its metavar says so, or its help calls it a file."""
    def walk(parser: argparse.ArgumentParser, prefix: str):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, f"{prefix} {name}".strip())
            elif action.nargs != 0 and not isinstance(action, argparse._HelpAction):
                name = action.option_strings[-1] if action.option_strings else action.dest
                says = FILE_METAVAR.search(action.metavar or "") or re.search(r"\bfile\b", action.help or "") \
                    or name in ("file", "files", "pack")
                number = action.type in (int, float)  # "requests per file"
                folder = re.search(r"\b(folder|repository)\b", action.help or "")  # a checkpoint, a repository
                if says and not number and not folder:
                    yield prefix, name, action
    return list(walk(build_parser(), ""))


def test_every_file_argument_of_every_command_is_read_by_the_one_reader_or_declared_written():
    found = file_arguments()
    assert len(found) > 20  # the walk reaches the subcommands' parsers
    wrong = [f"{command} {name}: type={getattr(action.type, '__name__', action.type)}"
             for command, name, action in found
             if name not in NOT_FILES and name not in SETTINGS
             and action.type not in (InputFile, InputFile.or_stdin, output_path)]
    assert wrong == []
    read = {(c, n) for c, n, a in found if a.type in (InputFile, InputFile.or_stdin)}
    assert {("calibrate", "--cases"), ("calibrate", "--edits-from"), ("bench renames", "files"), ("fim", "file"),
            ("regress", "--compare"), ("eval nep", "--data"), ("data unpack", "pack")} <= read


WRITES = {"open", "write_text", "write_bytes", "save", "copy", "copyfile", "move", "mkfifo"}


def _bypasses(tree: ast.AST, dests: set[str]) -> list[str]:
    """Calls that open or write a path made from `args.<dest>` (directly, or through a name assigned
    from it in the same function) other than through workspace_files."""
    def mentions(node: ast.AST, tainted: set[str]) -> bool:
        return any(isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "args"
                   and n.attr in dests or isinstance(n, ast.Name) and n.id in tainted for n in ast.walk(node))
    found = []
    for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
        tainted: set[str] = set()
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and mentions(node.value, tainted):
                tainted |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in ast.walk(fn):
            name = node.func.attr if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) else \
                node.func.id if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) else None
            if name in WRITES and mentions(node, tainted):
                found.append(f"{fn.name}:{node.lineno} {name}()")
    return found


def test_every_file_a_command_is_told_to_write_is_written_by_the_one_writer():
    """An argument declared `type=output_path` is written through workspace_files (never through a
    link, never into a FIFO, replaced atomically): in each module that declares one, no open(),
    write_text(), save() ... of a path made from it. (eval nep's --predictions, bench's --json and
    `data tokenizer --out` were written with open() / write_text and followed a link to its target.)"""
    import diffusion_lsp

    declared = {(c, n) for c, n, a in file_arguments() if a.type is output_path}
    assert {("eval nep", "--predictions"), ("bench api", "--json"), ("regress", "--junit"),
            ("data tokenizer", "--out")} <= declared
    root = Path(diffusion_lsp.__file__).parent
    wrong = []
    for module in sorted(root.rglob("*.py")):
        text = module.read_text(encoding="utf-8")
        dests = {d.lstrip("-").replace("-", "_") for d in re.findall(r'"(--[\w-]+)"[^\n]*type=output_path', text)}
        if dests:
            wrong += [f"{module.relative_to(root)} {b}" for b in _bypasses(ast.parse(text), dests)]
    assert wrong == []
    planted = ast.parse("def run(args):\n    out = Path(args.json)\n    out.write_text('x')\n")
    assert _bypasses(planted, {"json"}) == ["run:3 write_text()"]  # the scan sees one


def test_calibrate_feedback_reads_the_kept_suggestions_bounded_and_skips_lines_that_are_not_finite(tmp_path,
                                                                                                   no_hang):
    """`calibrate --feedback` reads the state folder's feedback.jsonl: a FIFO there is no file (it hung),
    a line nested past Python's recursion limit is skipped (a RecursionError before), and so is a
    feature of NaN, Infinity or 1e308 (they went into the fit)."""
    from diffusion_lsp.acceptance.feedback import read_feedback

    path = tmp_path / "feedback.jsonl"
    good = json.dumps({"feats": {"bias": 1.0, "conf_first": 0.5}, "kept": True, "partly": False})
    path.write_text("\n".join([good, '{"feats": {"bias": NaN}, "kept": true}', '{"feats": {"bias": Infinity}}',
                               json.dumps({"feats": {"bias": 1e308}}), "[" * 100_000 + "]" * 100_000, good]) + "\n")
    assert read_feedback(path) == [({"bias": 1.0, "conf_first": 0.5}, True, False)] * 2
    os.mkfifo(tmp_path / "fifo.jsonl")
    assert read_feedback(tmp_path / "fifo.jsonl") == [] and read_feedback(Path("/dev/zero")) == []
