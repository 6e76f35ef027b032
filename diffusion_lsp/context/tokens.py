"""Counting tokens with the model's own tokenizer, without torch (Hugging Face `tokenizers`)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """`text` with lone surrogates (which an editor may send, and tokenizers and UTF-8 refuse)
    replaced by U+FFFD: one code point for one, so offsets into the text stay the same."""
    return text if text.isascii() or not _SURROGATE.search(text) else _SURROGATE.sub("\ufffd", text)


class TokenCounter:
    """Token counts with a Hugging Face tokenizer; many() counts a batch in one call."""

    def __init__(self, tok):
        self.tok = tok

    def __call__(self, text: str) -> int:
        return len(self.tok.encode(valid_text(text), add_special_tokens=False).ids) if text else 0

    def many(self, texts: list[str]) -> list[int]:
        return [len(e.ids) for e in self.tok.encode_batch([valid_text(t) for t in texts], add_special_tokens=False)]


def approx_tokens(text: str) -> int:
    """About 4 characters a token: the fallback when there is no tokenizer.json."""
    return (len(text) + 3) // 4


def token_counter(tokenizer_json: str | Path) -> Callable[[str], int]:
    """Count with a tokenizer.json; approx_tokens when it is missing or unreadable."""
    try:
        from tokenizers import Tokenizer

        return TokenCounter(Tokenizer.from_file(str(tokenizer_json)))
    except Exception:
        return approx_tokens
