"""Edit from an instruction (select code, say what to change): the selection is rewritten and shown
as a diff to accept or reject (the editors), or answered at serve-api's /v1/edit/completions.

How the model is asked depends on what it is (each backend's `instruct`):
- a model that sees the code after its canvas (infill: ours, Dream, DiffuCoder, ...): the selection
  is re-masked and denoised between the code before and after it, with the instruction written as a
  line comment just above it (`commented`). A base model reads that comment as weak conditioning, no
  more: the embedded model mostly rewrites the region as it would have completed it anyway;
- a model asked in chat (LLaDA2, DiffusionGemma) and a remote chat API (Mercury 2, vLLM, SGLang):
  the file with the selection between <|code_to_edit|> tags and the instruction, in a user turn
  (model/chat/prompts/instruct_chat.txt); the answer is its code fence's body."""

from __future__ import annotations

from ..protocol.requests import InstructRequest
from ..context.tokens import approx_tokens
from ..model.chat.prompting import instruction as prompt_text

CONTEXT_CHARS = 6000  # of the file on each side of the selection, for a chat prompt
MAX_INSTRUCTION = 2000


def order_for(text: str, start: int, end: int, instruction: str, comment: str = "#",
              max_tokens: int | None = None) -> InstructRequest:
    """The order rewriting text[start:end] as `instruction` says; ValueError for an empty instruction
    or one past MAX_INSTRUCTION characters, or a range outside the text."""
    instruction = " ".join(instruction.split())
    if not instruction:
        raise ValueError("the instruction is empty")
    if len(instruction) > MAX_INSTRUCTION:
        raise ValueError(f"the instruction is longer than {MAX_INSTRUCTION} characters")
    if not 0 <= start <= end <= len(text):
        raise ValueError("the range is outside the document")
    region = text[start:end]
    n = max_tokens or min(512, max(24, 2 * approx_tokens(region) + 16))  # room for the region to grow
    return InstructRequest(text[:start], region, text[end:], instruction, n, comment)


def commented(order: InstructRequest) -> str:
    """The prefix with the instruction as a line comment above the selection's first line, indented as
    that line is (an infill model's only way to read it)."""
    line_start = order.prefix.rfind("\n") + 1
    line = order.prefix[line_start:] + order.region
    indent = line[: len(line) - len(line.lstrip(" \t"))]
    return order.prefix[:line_start] + f"{indent}{order.comment} {order.instruction}\n" + order.prefix[line_start:]


def chat_content(order: InstructRequest) -> str:
    """The user turn for a model asked in chat: the instruction and the file around the tagged selection."""
    before, after = order.prefix[-CONTEXT_CHARS:], order.suffix[:CONTEXT_CHARS]
    content = f"{before}<|code_to_edit|>\n{order.region}\n<|/code_to_edit|>{after}"
    return prompt_text("instruct_chat").format(instruction=order.instruction, content=content)
