"""Counting tokens with the model's own tokenizer, without torch (Hugging Face `tokenizers`)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from ..model.network.text import valid_text

# No vocabulary we load has a token that decodes to more characters (ours: 78, a run of blanks), so a
# text of more than budget x this many characters is over the budget without being counted
MAX_TOKEN_CHARS = 256
LONG_TEXT = 10_000  # characters: counted by encode_batch, which releases the GIL (encode holds it)


def over_budget(count: Callable[[str], int], text: str, budget: int) -> bool:
    """count(text) > budget, without counting a text too long to fit: a 2 MB minified line near the
    cursor was counted nine times for one next edit, 3 s each, stalling the whole server."""
    return len(text) > max(budget, 0) * MAX_TOKEN_CHARS or count(text) > budget


class TokenCounter:
    """Token counts with a Hugging Face tokenizer; many() counts a batch in one call. A long text is
    counted with encode_batch, which lets go of the GIL while it works: the event loop and the
    other threads go on (a single encode holds it, a second per 700,000 tokens)."""

    def __init__(self, tok):
        self.tok = tok

    def __call__(self, text: str) -> int:
        if not text:
            return 0
        if len(text) > LONG_TEXT:
            return self.many([text])[0]
        return len(self.tok.encode(valid_text(text), add_special_tokens=False).ids)

    def many(self, texts: list[str]) -> list[int]:
        return [len(e.ids) for e in self.tok.encode_batch([valid_text(t) for t in texts], add_special_tokens=False)]


def approx_tokens(text: str) -> int:
    """A tokenizer-free estimate (about 3 characters per token, erring long), for tests and for a
    model folder whose tokenizer cannot be read."""
    return len(text) // 3 + 1


def model_token_counter(folder: str | Path) -> Callable[[str], int]:
    """Count with a checkpoint folder's own tokenizer (tokenizer.json, or a Hugging Face folder's
    vocab.json + merges.txt); approx_tokens when it has none that reads."""
    from ..model.network.config import adapter_base
    from ..model.families.hf_tokenizer import load_tokenizer_files  # the tokenizers library only, no torch

    folder = adapter_base(folder) or folder  # low-rank adapters count with their base model's tokenizer
    try:
        return TokenCounter(load_tokenizer_files(Path(folder)))
    except (ValueError, OSError):
        return approx_tokens
