"""Thin wrapper over a Hugging Face `tokenizers.Tokenizer` that exposes special tokens by name.
Chat turns are marked up by model/chat/prompting.py."""

from __future__ import annotations

import bisect
import re
from functools import cached_property
from pathlib import Path

from tokenizers import Tokenizer as HFTokenizer

from .config import SpecialTokens
from .text import valid_text

# How vocabularies spell their control tokens: Qwen's and Dream's <|fim_prefix|>, Seed-Coder's <[fim-middle]>, and
# snake_case tags (Qwen2.5's <tool_call> </tool_call>, Gemma's <start_of_turn>); an HTML tag (<td>) is no control
_CONTROL_SPELLING = re.compile(r"<\|[^<>|]+\|>|<\[[^<>\[\]]+\]>|</?[A-Za-z]+(?:_[A-Za-z0-9]+)+>")


class Tokenizer:
    def __init__(self, hf: HFTokenizer, special: SpecialTokens):
        self.hf = hf
        self.special = special
        self.mask_id = self._require(special.mask, "mask")
        self.filler_id = self._require(special.filler, "filler")
        self.bos_id = self._require(special.bos, "bos") if special.bos else None
        self.special_ids = frozenset(
            i for i in (self.mask_id, self.filler_id, self.bos_id) if i is not None
        ) | frozenset(self.hf.token_to_id(t) for t in special.extra.values() if self.hf.token_to_id(t) is not None)

    @classmethod
    def from_file(cls, path: str | Path, special: SpecialTokens) -> "Tokenizer":
        return cls(HFTokenizer.from_file(str(path)), special)

    def _require(self, token: str, role: str) -> int:
        tid = self.hf.token_to_id(token)
        if tid is None:
            raise ValueError(f"tokenizer has no {role} token {token!r}")
        return tid

    def id_of(self, name: str) -> int:
        """Id of a special token by its role name: 'mask', 'filler', 'bos' or a key of `extra`."""
        token = self.special.extra.get(name) or getattr(self.special, name, None)
        if not isinstance(token, str):
            raise ValueError(f"no special token named {name!r}")
        return self._require(token, name)

    @property
    def vocab_size(self) -> int:
        return self.hf.get_vocab_size()

    def encode(self, text: str) -> list[int]:
        """The ids of `text` as text: a special token's name in it (code that spells "<|mask|>" or
        "<end_of_turn>") is encoded as the characters it is made of, never as that token, so a file
        cannot put a mask, an end of turn or a FIM token on the model's row."""
        text = valid_text(text)
        if self._specials is None or not self._specials.search(text):
            return self.hf.encode(text, add_special_tokens=False).ids
        ids, at = [], 0
        for m in self._specials.finditer(text):
            ids += self.encode_markup(text[at:m.start()]) + self.encode_markup(m[0][:1]) + self.encode(m[0][1:])
            at = m.end()
        return ids + self.encode_markup(text[at:])

    def encode_markup(self, text: str) -> list[int]:
        """The ids of `text` with special tokens' names read as those tokens: a prompt's own markup (a
        chat template's turns), never a user's text."""
        return self.hf.encode(valid_text(text), add_special_tokens=False).ids if text else []

    @cached_property
    def _specials(self) -> re.Pattern | None:
        """The names of the tokenizer's control tokens, longest first; None when it has none. A control token
        is an added token marked special, one spelled as control tokens are (_CONTROL_SPELLING), or one of
        our roles (mask, filler, bos, extra): Qwen2.5's tokenizer_config.json marks <|fim_prefix|>,
        <|fim_suffix|>, <|file_sep|>, <|repo_name|> and <tool_call> `"special": false`, and transformers'
        Qwen2Tokenizer encodes a file that spells them as those ids. Word-like added tokens (a vocabulary's
        HTML tags or whitespace runs) stay tokens: the model learned them as text."""
        roles = {self.special.mask, self.special.filler, self.special.bos, *self.special.extra.values()}
        names = sorted({t.content for t in self.hf.get_added_tokens_decoder().values()
                        if t.content and (t.special or _CONTROL_SPELLING.fullmatch(t.content) or t.content in roles)},
                       key=len, reverse=True)
        return re.compile("|".join(map(re.escape, names))) if names else None

    def decode(self, ids: list[int]) -> str:
        """The text of `ids` without our role tokens and without any added token marked special: a span that
        holds an end of turn or an end of text the model wrote reads as every family's reference code reads it,
        tokenizer.decode(ids, skip_special_tokens=True) (the golden prompt tests), not as the token's name."""
        return self.hf.decode([i for i in ids if i not in self.special_ids], skip_special_tokens=True)

    @cached_property
    def _sorted_pieces(self) -> tuple[list[str], list[int]]:
        """Every non-special token's decoded text, sorted, for prefix look-ups in token healing."""
        pairs = sorted(
            (self.hf.decode([i]), i) for i in range(self.vocab_size) if i not in self.special_ids
        )
        return [p for p, _ in pairs], [i for _, i in pairs]

    @cached_property
    def newline_ids(self) -> list[int]:
        """Ids of the non-special tokens whose text holds a newline (one-line fills stop at them)."""
        pieces, ids = self._sorted_pieces
        return sorted(i for p, i in zip(pieces, ids) if "\n" in p)

    def ids_of_text(self, text: str) -> list[int]:
        """Ids of the tokens whose text is exactly `text`."""
        pieces, ids = self._sorted_pieces
        j, out = bisect.bisect_left(pieces, text), []
        while j < len(pieces) and pieces[j] == text:
            out, j = out + [ids[j]], j + 1
        return out

    def ids_starting_with(self, text: str) -> list[int]:
        """Ids of the tokens whose text starts with `text` (token healing's allowed first tokens)."""
        pieces, ids = self._sorted_pieces
        out = []
        for j in range(bisect.bisect_left(pieces, text), len(pieces)):
            if not pieces[j].startswith(text):
                break
            out.append(ids[j])
        return out


def train_bpe(texts, vocab_size: int, special: SpecialTokens | None = None) -> Tokenizer:
    """Byte-level BPE that round-trips any text exactly (no normalizer, no added prefix space)."""
    from tokenizers import decoders, models, pre_tokenizers, trainers

    special = special or SpecialTokens()
    names = [t for t in (special.bos, special.mask, special.filler, *special.extra.values()) if t]
    hf = HFTokenizer(models.BPE())
    hf.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    hf.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=names, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    hf.train_from_iterator(texts, trainer=trainer)
    return Tokenizer(hf, special)


def decode_pieces(tok: Tokenizer, ids: list[int]) -> tuple[list[str], str]:
    """(per token the text it completes, the whole text) by incremental decoding: a character split
    across tokens lands on the token that completes it ("" on the others)."""
    pieces, prev = [], ""
    for k in range(1, len(ids) + 1):
        cur = tok.decode(ids[:k])
        if cur.endswith("\ufffd") and k < len(ids):
            pieces.append("")
            continue
        pieces.append(cur[len(prev):] if cur.startswith(prev) else cur)
        prev = cur
    return pieces, prev


def fit_context(prefix: list[int], suffix: list[int], room: int) -> tuple[list[int], list[int]]:
    """Cut the prefix on the left and the suffix on the right to `room` tokens in all; the suffix
    keeps at least a quarter of the room when it has that much."""
    if len(prefix) + len(suffix) <= room:
        return prefix, suffix
    keep_suffix = min(len(suffix), max(room - len(prefix), room // 4))
    keep_prefix = room - keep_suffix
    return (prefix[len(prefix) - keep_prefix:] if keep_prefix else []), suffix[:keep_suffix]
