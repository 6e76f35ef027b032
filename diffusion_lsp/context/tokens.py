"""Counting tokens with the model's own tokenizer, without torch (Hugging Face `tokenizers`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..model.text import valid_text

class TokenCounter:
    """Token counts with a Hugging Face tokenizer; many() counts a batch in one call."""

    def __init__(self, tok):
        self.tok = tok

    def __call__(self, text: str) -> int:
        return len(self.tok.encode(valid_text(text), add_special_tokens=False).ids) if text else 0

    def many(self, texts: list[str]) -> list[int]:
        return [len(e.ids) for e in self.tok.encode_batch([valid_text(t) for t in texts], add_special_tokens=False)]


def approx_tokens(text: str) -> int:
    """A tokenizer-free estimate (about 3 characters per token, erring long), for tests and for a
    model folder whose tokenizer cannot be read."""
    return len(text) // 3 + 1


def model_token_counter(folder: str | Path) -> Callable[[str], int]:
    """Count with a checkpoint folder's own tokenizer (tokenizer.json, or a Hugging Face folder's
    vocab.json + merges.txt); approx_tokens when it has none that reads."""
    from ..model.hf_tokenizer import load_tokenizer_files  # the tokenizers library only, no torch

    try:
        return TokenCounter(load_tokenizer_files(Path(folder)))
    except (ValueError, OSError):
        return approx_tokens
