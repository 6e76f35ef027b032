"""load_tokenizer_files against transformers' Qwen2 tokenizers on a small Qwen2-style folder.

transformers 5 has no slow (pure Python) Qwen2Tokenizer any more: `Qwen2Tokenizer` and its alias
`Qwen2TokenizerFast` are the tokenizers-backed class, built from vocab.json + merges.txt by its own loader. So the
references here are (1) that class loaded from the slow files, (2) transformers' `Qwen2Converter` (the 4.x
slow -> fast conversion), and (3) `_slow_encode`, the 4.x slow algorithm restated below in plain Python, which
shares no code with `tokenizers` and so also checks the Rust regex and BPE against Python's `regex` module."""

from __future__ import annotations

import json
import sysconfig
import unicodedata
from pathlib import Path

import pytest
from tokenizers import AddedToken, Regex, Tokenizer, models, normalizers, pre_tokenizers, trainers

from diffusion_lsp.model.families.hf_tokenizer import QWEN2_PATTERN, load_tokenizer_files

STDLIB = Path(sysconfig.get_paths()["stdlib"])
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|mask|>"]
# Lines starting with '#' that are real merges ("# #", "#! ...") are the trap PR #29929 fixed; this text makes sure
# the trained merges hold some.
EXTRA_CORPUS = "## Heading\n### Sub\n#!/usr/bin/env python\n#: note\n" * 20 + "I'm we're they'll she'd it's\n" * 5

TEXTS = [
    "",
    "def f(x):\n\treturn x  # a tab before return\n",
    "if a:\r\n    b = 1\r\n\r\nelse:\r\n\tc = 2\r\n",
    "naïve café — Ünïcödé 日本語のテスト Привет мир",
    "cafe\u0301 and A\u030a are NFD; NFC makes them one code point",
    "print('🙂👍🏽 ok')  # 🎉 👨‍👩‍👧 flags 🇫🇷",
    "x = 1234567 + 3.14159e-10 - 0xFF_FF; y = 42\n",
    "I'm sure you'll see it's THEY'RE here, we'd go, she's done, don't, I've, 'S",
    "<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\n",
    "a<|mask|>b<|endoftext|>c <|mask|> d<|mask|><|mask|>",
    "   leading spaces",
    " x",
    "\n\n  \n    indented after blank lines\n",
    "trailing spaces   ",
    "\t\t\n\t",
    "## Heading\n#!/usr/bin/env python\n#: colon ## twice",
    "\u00a0no-break space, \u3000ideographic space, \x00 nul \x7f del",
    "ＦＵＬＬ　ＷＩＤＴＨ and ﬁ ligature",
    "<|im_start <|im_end|x <|endoftext|",
    (STDLIB / "string.py").read_text()[:4000],
    (STDLIB / "textwrap.py").read_text(),
]


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's bytes_to_unicode (transformers.models.gpt2.tokenization_gpt2): printable bytes stand for themselves,
    the rest are shifted to U+0100.. so no symbol is whitespace or a control character."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    shifted = [b for b in range(256) if b not in printable]
    return {**{b: chr(b) for b in printable}, **{b: chr(256 + n) for n, b in enumerate(shifted)}}


def _slow_encode(folder: Path, text: str) -> list[int]:
    """The transformers 4.x slow Qwen2Tokenizer (after PR #29929): NFC the text, split out added tokens, findall
    the Qwen2 regex, map bytes to the byte alphabet, then merge the lowest-ranked pair until none is left."""
    import regex

    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    lines = (folder / "merges.txt").read_text(encoding="utf-8").splitlines()
    ranks = {tuple(line.split()): i for i, line in enumerate(ln for ln in lines[1:] if ln.strip())}
    added = {v: int(k) for k, v in ((k, e["content"]) for k, e in _config(folder)["added_tokens_decoder"].items())}
    alphabet = _byte_alphabet()
    text = unicodedata.normalize("NFC", text)
    ids = []
    for part in regex.split("(" + "|".join(map(regex.escape, added)) + ")", text):
        if part in added:
            ids.append(added[part])
            continue
        for piece in regex.findall(QWEN2_PATTERN, part):
            word = [alphabet[b] for b in piece.encode("utf-8")]
            while len(word) > 1:
                rank, pair = min((ranks.get(pair, float("inf")), pair) for pair in zip(word, word[1:]))
                if rank == float("inf"):
                    break
                merged, j = [], 0
                while j < len(word):  # merge every occurrence of the pair, left to right, as the slow bpe() does
                    if tuple(word[j:j + 2]) == pair:
                        merged.append(pair[0] + pair[1])
                        j += 2
                    else:
                        merged.append(word[j])
                        j += 1
                word = merged
            ids.extend(vocab[s] for s in word)
    return ids


def _config(folder: Path) -> dict:
    return json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))


def _qwen2_pre_tokenizer():
    return pre_tokenizers.Sequence([pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated"),
                                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])


def _write_qwen2_folder(folder: Path, vocab_size: int = 1200) -> Path:
    """A small Qwen2-style slow-tokenizer folder: byte-level BPE trained on stdlib code with Qwen2's
    pre-tokenizer, saved as vocab.json + merges.txt ('#version: 0.2' header, 'a b' lines), with the special
    tokens after the vocabulary in added_tokens.json and tokenizer_config.json, as Qwen publishes them."""
    trained = Tokenizer(models.BPE())
    trained.normalizer = normalizers.NFC()
    trained.pre_tokenizer = _qwen2_pre_tokenizer()
    texts = [(STDLIB / f).read_text() for f in ("textwrap.py", "json/decoder.py", "shlex.py")] + [EXTRA_CORPUS]
    trained.train_from_iterator(texts, trainer=trainers.BpeTrainer(
        vocab_size=vocab_size, show_progress=False, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    folder.mkdir(parents=True, exist_ok=True)
    trained.model.save(str(folder))
    n = trained.get_vocab_size()
    entry = dict(lstrip=False, rstrip=False, normalized=False, single_word=False, special=True)
    (folder / "added_tokens.json").write_text(json.dumps({t: n + i for i, t in enumerate(SPECIAL)}))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "added_tokens_decoder": {str(n + i): {"content": t, **entry} for i, t in enumerate(SPECIAL)},
        "additional_special_tokens": SPECIAL[1:], "bos_token": None, "eos_token": "<|endoftext|>",
        "pad_token": "<|endoftext|>", "unk_token": None, "clean_up_tokenization_spaces": False,
        "errors": "replace", "model_max_length": 32768, "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer"}, indent=2))
    return folder


@pytest.fixture(scope="module")
def qwen2_folder(tmp_path_factory) -> Path:
    return _write_qwen2_folder(tmp_path_factory.mktemp("qwen2"))


def test_fixture_has_the_merges_that_tripped_the_slow_tokenizer(qwen2_folder):
    lines = (qwen2_folder / "merges.txt").read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("#version")
    assert any(line.startswith("#") for line in lines[1:])  # e.g. "# #": must not be taken for a comment


def test_matches_the_slow_algorithm_and_transformers(qwen2_folder):
    transformers = pytest.importorskip("transformers")
    from transformers.convert_slow_tokenizer import Qwen2Converter

    ours = load_tokenizer_files(qwen2_folder)
    by_transformers = transformers.Qwen2Tokenizer.from_pretrained(str(qwen2_folder))
    by_alias = transformers.Qwen2TokenizerFast.from_pretrained(str(qwen2_folder))

    class Slow:  # what Qwen2Converter reads from a slow tokenizer
        encoder = json.loads((qwen2_folder / "vocab.json").read_text(encoding="utf-8"))
        bpe_ranks = {tuple(line.split()): i for i, line in
                     enumerate((qwen2_folder / "merges.txt").read_text(encoding="utf-8").splitlines()[1:])}
        add_prefix_space = False

    converted = Qwen2Converter(Slow()).converted()
    converted.add_tokens([AddedToken(**e) for _, e in sorted(_config(qwen2_folder)["added_tokens_decoder"].items(),
                                                              key=lambda kv: int(kv[0]))])
    assert ours.get_vocab() == by_transformers.get_vocab() == converted.get_vocab()
    for text in TEXTS:
        ids = ours.encode(text, add_special_tokens=False).ids
        assert ids == _slow_encode(qwen2_folder, text), text
        assert ids == by_transformers.encode(text, add_special_tokens=False), text
        assert ids == by_alias.encode(text, add_special_tokens=False), text
        assert ids == converted.encode(text, add_special_tokens=False).ids, text
        assert ours.decode(ids, skip_special_tokens=False) == unicodedata.normalize("NFC", text)
        assert ours.decode(ids) == by_transformers.decode(ids, skip_special_tokens=True)


def test_special_tokens_are_single_special_ids(qwen2_folder):
    ours = load_tokenizer_files(qwen2_folder)
    n = len(json.loads((qwen2_folder / "vocab.json").read_text(encoding="utf-8")))
    for i, token in enumerate(SPECIAL):
        assert ours.encode(token, add_special_tokens=False).ids == [n + i]
        assert ours.encode(f"x{token}y", add_special_tokens=False).ids[1] == n + i
    assert all(t.special and not t.normalized for t in ours.get_added_tokens_decoder().values())
    assert ours.decode(ours.encode("a<|mask|>b").ids) == "ab"  # special tokens are skipped by default


def test_legacy_added_tokens_json_alone(qwen2_folder, tmp_path):
    """Without added_tokens_decoder, special means 'held by a named slot' (eos_token, additional_special_tokens)."""
    folder = tmp_path / "legacy"
    folder.mkdir()
    for name in ("vocab.json", "merges.txt", "added_tokens.json"):
        (folder / name).write_bytes((qwen2_folder / name).read_bytes())
    (folder / "tokenizer_config.json").write_text(json.dumps({"additional_special_tokens": SPECIAL[1:3]}))
    ours = load_tokenizer_files(folder)
    flags = {t.content: t.special for t in ours.get_added_tokens_decoder().values()}
    # <|endoftext|> is special through Qwen2Tokenizer's default eos/unk/pad; <|mask|> is named nowhere.
    assert flags == {"<|endoftext|>": True, "<|im_start|>": True, "<|im_end|>": True, "<|mask|>": False}
    reference = load_tokenizer_files(qwen2_folder)
    for text in TEXTS:
        assert ours.encode(text).ids == reference.encode(text).ids, text


def test_tokenizer_json_is_used_as_is(qwen2_folder, tmp_path):
    folder = tmp_path / "both"
    folder.mkdir()
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        (folder / name).write_bytes((qwen2_folder / name).read_bytes())
    other = Tokenizer(models.BPE(vocab={"a": 0, "b": 1, "ab": 2}, merges=[("a", "b")]))
    other.save(str(folder / "tokenizer.json"))
    assert load_tokenizer_files(folder).get_vocab() == {"a": 0, "b": 1, "ab": 2}


def test_nothing_is_written_and_a_changed_file_is_reread(qwen2_folder, tmp_path):
    folder = tmp_path / "copy"
    folder.mkdir()
    for name in ("vocab.json", "merges.txt"):
        (folder / name).write_bytes((qwen2_folder / name).read_bytes())
    before = sorted(p.name for p in folder.iterdir())
    n = load_tokenizer_files(folder).get_vocab_size()
    assert sorted(p.name for p in folder.iterdir()) == before
    (folder / "added_tokens.json").write_text(json.dumps({"<|new|>": n}))
    assert load_tokenizer_files(folder).token_to_id("<|new|>") == n


@pytest.mark.parametrize("missing", ["vocab.json", "merges.txt"])
def test_missing_file_is_a_clear_error(qwen2_folder, tmp_path, missing):
    for name in ("vocab.json", "merges.txt", "tokenizer_config.json"):
        if name != missing:
            (tmp_path / name).write_bytes((qwen2_folder / name).read_bytes())
    with pytest.raises(ValueError, match=rf"{tmp_path}.*no tokenizer.json and no {missing}.*found: .*tokenizer_config"):
        load_tokenizer_files(tmp_path)


@pytest.mark.parametrize("name, content, message", [
    ("vocab.json", "{not json", "vocab.json is not readable JSON"),
    ("vocab.json", '["a", "b"]', "vocab.json holds a list"),
    ("vocab.json", '{"a": "zero"}', "vocab.json maps 'a' to 'zero'"),
    ("merges.txt", "#version: 0.2\na b c\n", "merges.txt line 2 is 'a b c'"),
    ("merges.txt", "a b\n\nb\n", "merges.txt line 3 is 'b'"),
    ("merges.txt", "#version: 0.2\nq z\n", "do not fit"),
    ("merges.txt", b"\xff\xfe", "merges.txt is not readable"),
    ("added_tokens.json", '{"<|x|>": 999}', "'<|x|>' should have id 999 but gets 3"),
    ("tokenizer_config.json", '{"added_tokens_decoder": ["<|x|>"]}', "added_tokens_decoder is not an object"),
    ("tokenizer_config.json", '{"added_tokens_decoder": {"3": {"lstrip": false}}}',
     r"added_tokens_decoder\['3'\] is not an added token"),
])
def test_unreadable_files_are_clear_errors(tmp_path, name, content, message):
    (tmp_path / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "ab": 2}))
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\n")
    path = tmp_path / name
    path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)
    with pytest.raises(ValueError, match=message):
        load_tokenizer_files(tmp_path)


def test_merges_without_a_header_and_with_blank_lines(tmp_path):
    (tmp_path / "vocab.json").write_text(json.dumps({"#": 0, "a": 1, "##": 2, "aa": 3}))
    (tmp_path / "merges.txt").write_text("# #\n\na a\n")
    assert load_tokenizer_files(tmp_path).encode("####aa").tokens == ["##", "##", "aa"]


def test_a_word_in_the_vocab_is_still_split_by_the_merges(tmp_path):
    """ignore_merges stays False, as in Qwen2Converter: 'abc' is in the vocab but no merge makes it."""
    (tmp_path / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "c": 2, "ab": 3, "abc": 4}))
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\n")
    assert load_tokenizer_files(tmp_path).encode("abc").tokens == ["ab", "c"]


def test_not_a_folder(tmp_path):
    with pytest.raises(ValueError, match="tokenizer folder not found"):
        load_tokenizer_files(tmp_path / "nope")
    with pytest.raises(ValueError, match="bad tokenizer.json"):
        (tmp_path / "tokenizer.json").write_text("{}")
        load_tokenizer_files(tmp_path)


def test_every_text_the_model_reads_takes_lone_surrogates_as_u_fffd():
    """An editor or an HTTP body may hold "\\ud800"; the tokenizer refused it (TypeError), which the
    API answered 503."""
    from diffusion_lsp.engine import DEFAULT_MODEL
    from diffusion_lsp.model.network.config import SpecialTokens
    from diffusion_lsp.model.network.tokenizer import Tokenizer

    tok = Tokenizer.from_file(DEFAULT_MODEL / "tokenizer.json", SpecialTokens())
    assert tok.encode("x = '\ud800'") == tok.encode("x = '\ufffd'")


def test_user_text_never_yields_a_control_token_even_one_marked_not_special(tmp_path):
    """Qwen2.5 marks its FIM, repo and file-separator tokens and <tool_call> "special": false; code that spells
    them is text all the same. A word-like added token (an HTML tag some vocabularies add) stays a token."""
    from diffusion_lsp.model.network.config import SpecialTokens
    from diffusion_lsp.model.network.tokenizer import Tokenizer

    alphabet = "<|>_/[]-abcdefilmoprstx"
    (tmp_path / "vocab.json").write_text(json.dumps({c: i for i, c in enumerate(alphabet)}))
    (tmp_path / "merges.txt").write_text("#version: 0.2\n")
    added = ["<|endoftext|>", "<|mask|>", "<|fim_prefix|>", "<tool_call>", "</tool_call>", "<[fim-middle]>", "<td>"]
    n = len(alphabet)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"added_tokens_decoder": {
        str(n + i): {"content": t, "special": i < 2, "normalized": False} for i, t in enumerate(added)}}))
    tok = Tokenizer(load_tokenizer_files(tmp_path), SpecialTokens("<|mask|>", "<|endoftext|>", None))
    for token in added[2:-1]:
        assert tok.hf.encode(f"a{token}b").ids[1] == tok.hf.token_to_id(token)  # what the reference does
        assert tok.hf.token_to_id(token) not in tok.encode(f"a{token}b"), token
        assert tok.decode(tok.encode(f"a{token}b")) == f"a{token}b"
        assert tok.encode_markup(token) == [tok.hf.token_to_id(token)]
    assert tok.encode("a<td>b") == [tok.hf.token_to_id(c) for c in "a"] + [n + 6] + [tok.hf.token_to_id("b")]
