"""Every file a user names for a command to write goes through workspace_files: `regress --save / --junit
/ --summary`, `eval nep --predictions`, `bench api --json`, `bench gpu --json`, `data tokenizer --out`,
`data pack --out` and what `data unpack --out` writes into its folder each refuse a symlink (its target
was overwritten) and a FIFO (the command hung on it) in one line, exit 2, before the work; the refusal
names the option that names another place, and never tells the user to remove a folder."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from diffusion_lsp.cli import main
from diffusion_lsp.workspace_files import append_file, write_file

RECORD = {"commit": "c0", "message": "m", "old_file": "a.py", "new_file": "a.py", "status": "M", "text": "",
          "old_contents": "x = foo(1)\n", "current_contents": "x = bar(1)\n", "new_contents": "x = bar(1)\n"}


def argv(tmp_path: Path, command: str, out: Path) -> list[str]:
    corpus = tmp_path / "corpus"
    corpus.mkdir(exist_ok=True)
    (corpus / "train.jsonl").write_text(json.dumps({"package": "p", "path": "a.py", "text": "x = 1\n"}) + "\n")
    data = tmp_path / "nep.jsonl"
    data.write_text(json.dumps(RECORD) + "\n")
    base = tmp_path / "base.json"
    base.write_text("{}\n")
    return {"regress --save": ["regress", "--save", out],
            "regress --junit": ["regress", "--compare", base, "--junit", out],
            "regress --summary": ["regress", "--compare", base, "--summary", out],
            "eval nep --predictions": ["eval", "nep", "--no-model", "--data", data, "--predictions", out],
            "bench api --json": ["bench", "api", "--json", out],
            "bench gpu --json": ["bench", "gpu", "--dry-run", "--json", out],
            "data tokenizer --out": ["data", "tokenizer", "--corpus", corpus, "--vocab-size", "300", "--out", out],
            "data pack --out": ["data", "pack", "--corpus", corpus, "--out", out]}[command]


COMMANDS = ["regress --save", "regress --junit", "regress --summary", "eval nep --predictions", "bench api --json",
            "bench gpu --json", "data tokenizer --out", "data pack --out"]


@pytest.mark.parametrize("kind", ["symlink", "fifo", "folder"])
@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_refuses_a_linked_a_fifo_or_a_folder_output_in_one_line_before_it_works(
        tmp_path, capsys, no_hang, command, kind):
    victim = tmp_path / "victim.json"
    victim.write_text('{"victim": 1}\n')
    out = tmp_path / "out.json"
    if kind == "symlink":
        out.symlink_to(victim)
    elif kind == "fifo":
        os.mkfifo(out)
    else:
        out.mkdir()
    assert main([str(a) for a in argv(tmp_path, command, out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("diffusion-lsp: error: "), err
    flag = command.split()[-1]
    assert {"symlink": "a symlink", "fifo": "a FIFO", "folder": "a folder"}[kind] in err and flag in err, err
    assert ("remove it" in err) == (kind != "folder"), err
    assert victim.read_text() == '{"victim": 1}\n'


def test_data_unpack_writes_no_file_of_its_folder_through_a_link(tmp_path, capsys):
    from diffusion_lsp.data.pack import pack
    from diffusion_lsp.model.network.config import SpecialTokens
    from diffusion_lsp.model.network.tokenizer import Tokenizer
    from diffusion_lsp.engine import model_folder

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "train.jsonl").write_text(json.dumps({"package": "p", "path": "a.py", "text": "x = 1\n"}) + "\n")
    tok = Tokenizer.from_file(model_folder(None) / "tokenizer.json", SpecialTokens())
    pack(corpus, tok, tmp_path / "c.tar.xz", max_mb=10)
    victim = tmp_path / "victim"
    victim.write_bytes(b"mine")
    (tmp_path / "u").mkdir()
    (tmp_path / "u" / "train.ids.npy").symlink_to(victim)
    assert main(["data", "unpack", str(tmp_path / "c.tar.xz"), "--out", str(tmp_path / "u")]) == 2
    assert "a symlink" in capsys.readouterr().err and victim.read_bytes() == b"mine"


def test_the_refusal_names_the_option_of_the_command_not_out(tmp_path, capsys):
    """settings-schema --write has no --out: its refusal said 'name another place with --out'."""
    package = tmp_path / "package.json"
    package.write_text(json.dumps({"name": "x", "contributes": {"configuration": {"properties": {}}}}))
    real = tmp_path / "real.json"
    real.write_text(package.read_text())
    package.unlink()
    package.symlink_to(real)
    assert main(["settings-schema", "--write", str(package)]) == 2
    err = capsys.readouterr().err
    assert "--write" in err and "--out" not in err, err
    (tmp_path / "ws").mkdir()
    for flag, command in (("--save-edits", ["eval", "edits"]), ("--save-cases", ["calibrate"])):
        assert main([*command, str(tmp_path / "ws"), flag, str(package)]) == 2
        err = capsys.readouterr().err
        assert flag in err and "--out" not in err, err


def test_a_summary_is_appended_in_place_and_a_whole_file_replaced(tmp_path):
    summary = tmp_path / "summary.md"
    summary.write_text("# earlier step\n")
    append_file(summary, "regress: ok\n", "--summary")
    assert summary.read_text() == "# earlier step\nregress: ok\n"
    path = tmp_path / "base.json"
    path.write_text("old")
    inode = path.stat().st_ino
    write_file(path, "new", "--save")
    assert path.read_text() == "new" and path.stat().st_ino != inode  # a new file renamed in place
    assert sorted(p.name for p in tmp_path.iterdir()) == ["base.json", "summary.md"]  # no temporary left
