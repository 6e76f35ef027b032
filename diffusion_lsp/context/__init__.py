"""Context for a completion (span kind, prefix/suffix within a token budget, cross-file definitions)
and post-processing of the model's fill. Pure modules: no LSP, no model.

    ctx = gather(doc, offset, open_docs, recent_edits, budget, count_tokens)
    candidate = postprocess(ctx, fill.text, pieces, fill.confidence, confidence_cut, reasons)  # candidate.py's, at the cursor
"""

from .gather import gather
from .index import index_document
from .languages import language_for
from .postprocess import creates_parse_error, postprocess
from .spans import CANVAS_TOKENS
from .records import CompletionContext, ContextBudget, Document, EditSnippet, SpanKind

__all__ = ["gather", "postprocess", "creates_parse_error", "index_document", "language_for",
           "CANVAS_TOKENS", "CompletionContext", "ContextBudget", "Document", "EditSnippet", "SpanKind"]
