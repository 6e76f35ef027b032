"""Load a Hugging Face tokenizer folder with the `tokenizers` library only (transformers is never imported).

A folder with tokenizer.json is read as is. A folder with only the "slow" files (vocab.json + merges.txt, plus
tokenizer_config.json and/or added_tokens.json) gets the tokenizer that transformers' Qwen2 conversion builds from
them, rebuilt here piece by piece: `Qwen2Converter.converted` in transformers/convert_slow_tokenizer.py (4.x and
5.x) and `Qwen2Tokenizer.__init__` in transformers/models/qwen2/tokenization_qwen2.py (5.x) make the same
Tokenizer. Nothing is written next to the user's files and nothing is cached: the build took 0.17 s for a 47k-token
vocabulary (tests' trainer on the stdlib), about what from_str of its own JSON takes, so a cache keyed by mtimes made
a first load 2x slower and a repeated one 1.6x faster, for state that can go stale.
"""

from __future__ import annotations

import json
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from ..network.config import read_text

# Qwen2's pre-tokenization regex, character for character as in transformers' PRETOKENIZE_REGEX (qwen2).
QWEN2_PATTERN = (r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
                 r"""|\s*[\r\n]+|\s+(?!\S)|\s+""")
# The named special-token slots of transformers' SPECIAL_TOKENS_ATTRIBUTES; only used for legacy added_tokens.json.
_NAMED_SLOTS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
# Qwen2Tokenizer's own defaults for the slots a config leaves out (bos is None).
_QWEN2_DEFAULTS = {"eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}
_ADDED_TOKEN_FLAGS = ("content", "single_word", "lstrip", "rstrip", "normalized", "special")
# The most tokenizer.json, vocab.json or merges.txt may hold: published tokenizer.json files are a few MB
# (Qwen2.5: 7 MB) to a few tens of MB (262k-token vocabularies); parsing one takes several times its size.
MAX_TOKENIZER = 512 << 20


def load_tokenizer_files(folder: Path) -> Tokenizer:
    """The folder's tokenizer: tokenizer.json when present, else the Qwen2 tokenizer built from the slow files.

    Raises ValueError naming the folder and the missing or unreadable file."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"tokenizer folder not found: {folder}")
    if (folder / "tokenizer.json").exists():  # not is_file(): a FIFO or a folder by that name is an error
        try:
            return read_tokenizer_json(folder / "tokenizer.json")
        except ValueError as e:
            raise ValueError(f"tokenizer {folder}: {e}") from None
    missing = [name for name in ("vocab.json", "merges.txt") if not (folder / name).exists()]
    if missing:
        found = sorted(p.name for p in folder.iterdir())
        raise ValueError(f"tokenizer {folder}: no tokenizer.json and no {' or '.join(missing)} to build one from "
                         f"(found: {', '.join(found) or 'nothing'})")
    return build_qwen2_tokenizer(folder)


def read_tokenizer_json(path: Path) -> Tokenizer:
    """A tokenizer.json, read by us (a FIFO, a device or a file over MAX_TOKENIZER is refused before
    tokenizers would open it) and parsed from the text. ValueError in one line naming the file."""
    text = read_text(path, MAX_TOKENIZER)
    try:
        return Tokenizer.from_str(text)
    except Exception as e:  # tokenizers raises a bare Exception on malformed files
        raise ValueError(f"bad {path.name} ({(str(e).splitlines() or [type(e).__name__])[0]})") from None


def build_qwen2_tokenizer(folder: Path) -> Tokenizer:
    """The Tokenizer of Qwen2Converter.converted (transformers/convert_slow_tokenizer.py), with the added tokens that
    transformers registers from tokenizer_config.json's added_tokens_decoder (or, in older folders,
    added_tokens.json), each at the id the files give it."""
    folder = Path(folder)
    vocab = _read_vocab(folder)
    merges = _read_merges(folder)
    try:
        # Same arguments as the converter: no unk token (Qwen's byte-level vocab covers every byte), no byte
        # fallback, ignore_merges left False (the converter does not set it; published Qwen2 tokenizer.json
        # files say "ignore_merges": false).
        model = models.BPE(vocab=vocab, merges=merges, dropout=None, unk_token=None, continuing_subword_prefix="",
                           end_of_word_suffix="", fuse_unk=False, byte_fallback=False, ignore_merges=False)
    except Exception as e:  # tokenizers raises a bare Exception, e.g. for a merge of tokens not in the vocab
        raise ValueError(f"tokenizer {folder}: vocab.json and merges.txt do not fit ({e})") from None
    tokenizer = Tokenizer(model)
    # The slow Qwen2Tokenizer NFC-normalized in prepare_for_tokenization; the fast one does it here.
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        # The regex already split the text; ByteLevel only maps bytes to the printable alphabet of vocab.json.
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)  # offsets only; ids are unaffected
    _add_tokens(tokenizer, folder, vocab)
    return tokenizer


def _read_json(folder: Path, name: str) -> dict | None:
    path = folder / name
    if not path.exists():
        return None
    try:
        text = read_text(path, MAX_TOKENIZER)
    except ValueError as e:
        raise ValueError(f"tokenizer {folder}: {e}") from None
    try:
        data = json.loads(text)
    except RecursionError:
        raise ValueError(f"tokenizer {folder}: {name} is not readable JSON (nested too deeply)") from None
    except ValueError as e:
        raise ValueError(f"tokenizer {folder}: {name} is not readable JSON ({e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"tokenizer {folder}: {name} holds a {type(data).__name__}, not an object")
    return data


def configured_token(folder: Path, key: str) -> str | None:
    """The token tokenizer_config.json names for `key` ("mask_token"): its text, given as a string or as an
    added token's content; None when the file or the key is absent. ValueError as for a bad file."""
    data = _read_json(Path(folder), "tokenizer_config.json")
    name = _content(data.get(key)) if data else None
    return name if isinstance(name, str) and name else None


def _read_vocab(folder: Path) -> dict[str, int]:
    vocab = _read_json(folder, "vocab.json")
    bad = next(((k, v) for k, v in vocab.items() if type(v) is not int or v < 0), None)
    if bad is not None:
        raise ValueError(f"tokenizer {folder}: vocab.json maps {bad[0]!r} to {bad[1]!r}, not a token id")
    return vocab


def _read_merges(folder: Path) -> list[tuple[str, str]]:
    """merges.txt in the slow-tokenizer text form: an optional '#version' first line, then 'left right' per line.

    Only the first line may be a header: real merges such as '# #' start with '#' too, and the slow Qwen2Tokenizer
    once skipped them all (transformers PR #29929), which made it disagree with the fast one."""
    try:
        lines = read_text(folder / "merges.txt", MAX_TOKENIZER).splitlines()
    except ValueError as e:
        raise ValueError(f"tokenizer {folder}: {e}") from None
    header = 1 if lines and lines[0].startswith("#version") else 0
    merges = []
    for number, line in enumerate(lines[header:], start=1 + header):
        # str.split(): byte-level symbols never hold whitespace, the separator is a single space or, rarely, a tab.
        parts = line.split()
        if not parts:
            continue
        if len(parts) != 2:
            raise ValueError(f"tokenizer {folder}: merges.txt line {number} is {line!r}, not two symbols")
        merges.append((parts[0], parts[1]))
    return merges


def _added_tokens(folder: Path) -> dict[int, AddedToken]:
    """id -> AddedToken, the way transformers' from_pretrained reads them: tokenizer_config.json's
    added_tokens_decoder (with every flag) when it has one, else the legacy added_tokens.json, where a token is
    special when a named slot (eos_token, additional_special_tokens...) holds it and normalized otherwise."""
    config = _read_json(folder, "tokenizer_config.json") or {}
    decoder = config.get("added_tokens_decoder")
    if decoder is not None and not isinstance(decoder, dict):
        raise ValueError(f"tokenizer {folder}: tokenizer_config.json added_tokens_decoder is not an object")
    if decoder is not None:
        out = {}
        for index, entry in decoder.items():
            try:
                entry = {"content": entry} if isinstance(entry, str) else dict(entry)
                if not isinstance(entry.get("content"), str) or not entry["content"]:
                    raise ValueError("no content")
                # Other keys (old files tag entries with "__type": "AddedToken") are left out, as transformers does.
                out[int(index)] = AddedToken(**{k: v for k, v in entry.items() if k in _ADDED_TOKEN_FLAGS})
            except (TypeError, ValueError) as e:
                raise ValueError(f"tokenizer {folder}: tokenizer_config.json added_tokens_decoder[{index!r}] is "
                                 f"not an added token ({e})") from None
        return out
    legacy = _read_json(folder, "added_tokens.json") or {}
    named = {**_QWEN2_DEFAULTS, **config, **(_read_json(folder, "special_tokens_map.json") or {})}
    special = {_content(named.get(slot)) for slot in _NAMED_SLOTS}
    special |= {_content(t) for t in named.get("additional_special_tokens") or []}
    out = {}
    for content, index in legacy.items():
        if type(index) is not int:
            raise ValueError(f"tokenizer {folder}: added_tokens.json maps {content!r} to {index!r}, not a token id")
        out[index] = AddedToken(content, lstrip=False, rstrip=False, normalized=content not in special,
                                special=content in special)
    return out


def _content(token) -> str | None:
    return token.get("content") if isinstance(token, dict) else token


def _add_tokens(tokenizer: Tokenizer, folder: Path, vocab: dict[str, int]) -> None:
    """Adds the tokens in id order (tokenizers gives each new one the next free id) and checks each landed on the
    id the files say: a gap or a clash would shift every later special token, so it is an error, not a warning."""
    added = sorted(_added_tokens(folder).items())
    tokenizer.add_tokens([token for _, token in added])  # add_tokens keeps each token's own `special` flag
    for index, token in added:
        got = tokenizer.token_to_id(token.content)
        if got != index:
            where = f"vocab.json already has it at {vocab[token.content]}" if token.content in vocab else \
                f"the vocabulary has {len(vocab)} tokens"
            raise ValueError(f"tokenizer {folder}: added token {token.content!r} should have id {index} but gets "
                             f"{got} ({where})")
