"""The server's view of the context and post-processing modules (diffusion_lsp.context.gather and
.postprocess): their three functions, or small stand-ins while those modules are missing or fail to
import, so that the server and its tests never depend on their internals.

    gather(doc, offset, open_docs, recent_edits, budget, count_tokens) -> CompletionContext
    postprocess(ctx, text, pieces, confidence, threshold) -> Suggestion | None
    creates_parse_error(doc_text, offset, suggestion, language) -> bool
"""

from __future__ import annotations

import importlib
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..context.types import CompletionContext, ContextBudget, Document, SpanKind, Suggestion

# editor languageId -> canonical language, for the stand-in gather only
LANGUAGE_IDS = {"python": "python", "javascript": "javascript", "javascriptreact": "javascript",
                "typescript": "typescript", "typescriptreact": "typescript", "rust": "rust", "go": "go",
                "java": "java", "c": "c", "cpp": "cpp"}
CANVAS = {SpanKind.REST_OF_LINE: 16, SpanKind.LINE: 32, SpanKind.BLOCK: 64}  # stand-in canvas sizes
_OPENER = re.compile(r"[:{(\[]\s*$")


@dataclass
class ContextApi:
    gather: Callable
    postprocess: Callable
    creates_parse_error: Callable
    stand_ins: list[str] = field(default_factory=list)  # "module.function: why" for each stand-in

    def finish(self, ctx: CompletionContext, doc_text: str, text: str, pieces: list[str],
               confidence: list[float], threshold: float, check_syntax: bool) -> tuple[Suggestion | None, bool]:
        """Post-process a fill -> (suggestion, broke): broke when it was dropped for creating a
        parse error. A postprocess that checks syntax itself (on the window gather parsed) and
        says why it rejects is asked to; otherwise creates_parse_error is."""
        params = inspect.signature(self.postprocess).parameters
        if "reasons" in params and "check_syntax" in params:
            reasons: list[str] = []
            sug = self.postprocess(ctx, text, pieces, confidence, threshold, reasons=reasons,
                                   check_syntax=check_syntax)
            return sug, sug is None and "parse-error" in reasons
        sug = self.postprocess(ctx, text, pieces, confidence, threshold)
        if sug is not None and check_syntax and self.creates_parse_error(doc_text, ctx.offset, sug, ctx.language):
            return None, True
        return sug, False


def load_context_api() -> ContextApi:
    api = ContextApi(gather, postprocess, creates_parse_error)
    for module, name in (("gather", "gather"), ("postprocess", "postprocess"),
                         ("postprocess", "creates_parse_error")):
        try:
            setattr(api, name, getattr(importlib.import_module(f"diffusion_lsp.context.{module}"), name))
        except Exception as e:  # missing or broken while being written: keep the stand-in
            api.stand_ins.append(f"context.{module}.{name}: {type(e).__name__}: {e}")
    return api


def budget_for(max_context_tokens: int) -> ContextBudget:
    """Split the context budget: 1/8 cross-file, 1/4 suffix, the rest prefix."""
    cross, suffix = max_context_tokens // 8, max_context_tokens // 4
    return ContextBudget(prefix_tokens=max_context_tokens - cross - suffix, suffix_tokens=suffix,
                         cross_file_tokens=cross)


class TokenCounter:
    """Token counts with a Hugging Face tokenizer; many() counts a batch in one call."""

    def __init__(self, tok):
        self.tok = tok

    def __call__(self, text: str) -> int:
        return len(self.tok.encode(text, add_special_tokens=False).ids) if text else 0

    def many(self, texts: list[str]) -> list[int]:
        return [len(e.ids) for e in self.tok.encode_batch(texts, add_special_tokens=False)]


def token_counter(model_dir: str | Path | None) -> Callable[[str], int]:
    """Count with the checkpoint's tokenizer.json (no torch needed); ~4 characters a token without."""
    try:
        from tokenizers import Tokenizer

        from ..engine import DEFAULT_MODEL

        return TokenCounter(Tokenizer.from_file(str(Path(model_dir or DEFAULT_MODEL) / "tokenizer.json")))
    except Exception:
        return lambda text: (len(text) + 3) // 4


# ---- stand-ins: plain-text rules, used only until diffusion_lsp.context provides the real ones ----

def _cut_lines(text: str, budget: int, count_tokens, keep_end: bool) -> str:
    lines = text.splitlines(keepends=True)
    kept, used = [], 0
    for line in (reversed(lines) if keep_end else lines):
        used += count_tokens(line)
        if used > budget:
            break
        kept.append(line)
    return "".join(reversed(kept) if keep_end else kept)


def gather(doc: Document, offset: int, open_docs, recent_edits, budget: ContextBudget,
           count_tokens) -> CompletionContext:
    text = doc.text
    start = text.rfind("\n", 0, offset) + 1
    end = text.find("\n", offset)
    line_suffix = text[offset:] if end < 0 else text[offset:end]
    before = text[start:offset]
    indent = before[: len(before) - len(before.lstrip())]
    above = text[:start].rstrip("\n").rsplit("\n", 1)[-1]
    if line_suffix.strip():
        kind = SpanKind.REST_OF_LINE
    elif not before.strip() and _OPENER.search(above):
        kind = SpanKind.BLOCK
    else:
        kind = SpanKind.LINE
    prefix = _cut_lines(text[:offset], budget.prefix_tokens, count_tokens, keep_end=True)
    suffix = _cut_lines(text[offset:], budget.suffix_tokens, count_tokens, keep_end=False)
    return CompletionContext(prefix=prefix, suffix=suffix, kind=kind, max_tokens=CANVAS[kind],
                             language=LANGUAGE_IDS.get(doc.language_id), offset=offset,
                             line_suffix=line_suffix, indent=indent, extras={"stand_in": True})


def postprocess(ctx: CompletionContext, text: str, pieces: list[str], confidence: list[float],
                threshold: float) -> Suggestion | None:
    """Cut the tail from the first token below `threshold`; a line span ends at its line break."""
    if pieces and "".join(pieces) == text:
        cut = next((i for i, c in enumerate(confidence) if c < threshold), len(pieces))
        text = "".join(pieces[:cut])
    if ctx.kind != SpanKind.BLOCK:
        text = text.split("\n", 1)[0]
    text = text.rstrip()
    return Suggestion(text) if text.strip() else None


def creates_parse_error(doc_text: str, offset: int, suggestion: Suggestion, language: str | None) -> bool:
    return False
