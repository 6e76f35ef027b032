"""Text as the model may read it, without torch or tokenizers (the language server imports it)."""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def valid_text(text: str) -> str:
    """`text` with lone surrogates (which an editor or an HTTP client may send, and tokenizers and
    UTF-8 refuse) replaced by U+FFFD: one code point for one, so offsets into the text stay the same.
    Every text the model reads goes through it (Tokenizer.encode)."""
    return text if text.isascii() or not _SURROGATE.search(text) else _SURROGATE.sub("\ufffd", text)
