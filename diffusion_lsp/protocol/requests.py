"""What a backend is asked (backend.py): the requests, the same to the worker, a remote API and the
in-process engine. Each has its wire form (`message` / `from_message`) for the worker's socket
(worker/wire.py frames them); the answers are in answers.py.
Answered by the model's side: a probe (model/decoding/probe.py), a rewrite (model/families/native.py), a structured
answer (model/structured/constrained.py), drafts verified (model/decoding/verify.py) from context/drafts.py, a conversation's
template (model/chat/conversation.py); formats/mercury.py and formats/instruct.py write the prompts."""

from __future__ import annotations

from dataclasses import dataclass, field

from .settings import SamplerConfig

MAX_CANDIDATES, MAX_CANDIDATE_CHARS = 8, 4096  # drafts one fill request may carry
MAX_TOKENS = 4096  # the most any request may ask on the wire; a model's own canvas takes fewer (Engine.max_tokens)


def max_tokens_refusal(n, most: int, name: str = "max_tokens") -> str | None:
    """The one refusal of a token limit, wherever one is checked (serve-api's body, the worker's
    admission, a request on the wire): None when `n` is an integer from 1 to `most`."""
    if isinstance(n, int) and not isinstance(n, bool) and 1 <= n <= most:
        return None
    return f"{name} must be an integer between 1 and {most}, got {n!r}"


@dataclass(frozen=True)
class FillRequest:
    """A canvas of `max_tokens` between prefix and suffix, to be filled."""

    prefix: str
    suffix: str
    max_tokens: int
    one_line: bool = False  # the caller keeps the first line only: the worker stops once it is written
    sampling: SamplerConfig = field(default_factory=SamplerConfig)
    drafts: bool = False  # the worker sends the draft after every denoising step (serve-api's streams)
    # guesses at the fill from the user's own code, for the model to verify
    # before it decodes; a backend that cannot probe is never given any
    candidates: tuple[str, ...] = ()
    # a conversation instead of prefix and suffix (serve-api's chat): {"messages": [...], "tools": [...]}
    # as JSON text, the answer on the canvas after the chat template's generation prompt
    chat: str = ""

    def message(self, rid: int, key: str) -> dict:
        msg = {"op": "fill", "id": rid, "key": key, "prefix": self.prefix, "suffix": self.suffix,
               "max_tokens": self.max_tokens, "one_line": self.one_line, "sampling": self.sampling.to_wire()}
        if self.drafts:
            msg["drafts"] = True
        if self.candidates:
            msg["candidates"] = list(self.candidates)
        if self.chat:
            msg["chat"] = self.chat
        return msg

    @classmethod
    def from_message(cls, msg: dict) -> FillRequest:
        """ValueError naming what is wrong with a fill message."""
        prefix, suffix, n = (msg.get(k) for k in ("prefix", "suffix", "max_tokens"))
        one_line = msg.get("one_line", False)
        if not isinstance(prefix, str) or not isinstance(suffix, str):
            raise ValueError("prefix and suffix must be strings")
        if (refused := max_tokens_refusal(n, MAX_TOKENS)) is not None:
            raise ValueError(refused)
        drafts = msg.get("drafts", False)
        if not isinstance(one_line, bool) or not isinstance(drafts, bool):
            raise ValueError(f"one_line and drafts must be true or false, got {one_line!r} and {drafts!r}")
        candidates = msg.get("candidates", [])
        if not (isinstance(candidates, list) and len(candidates) <= MAX_CANDIDATES
                and all(isinstance(c, str) and 0 < len(c) <= MAX_CANDIDATE_CHARS for c in candidates)):
            raise ValueError(f"candidates must be a list of at most {MAX_CANDIDATES} non-empty strings of at most "
                             f"{MAX_CANDIDATE_CHARS} characters")
        chat = msg.get("chat", "")
        if not isinstance(chat, str):
            raise ValueError("chat must be a conversation as JSON text")
        return cls(prefix, suffix, n, one_line, SamplerConfig.from_wire(msg.get("sampling", {})), drafts,
                   tuple(candidates), chat)


@dataclass(frozen=True)
class ProbeRequest:
    """How sure the model is of `middle`'s tokens between prefix and suffix."""

    prefix: str
    middle: str
    suffix: str
    stride: int = 4  # interleaved passes: each token is judged with (stride - 1) / stride of its neighbours

    def message(self, rid: int, key: str) -> dict:
        return {"op": "probe", "id": rid, "key": key, "prefix": self.prefix, "middle": self.middle,
                "suffix": self.suffix, "stride": self.stride}

    @classmethod
    def from_message(cls, msg: dict) -> ProbeRequest:
        """ValueError naming what is wrong with a probe message."""
        texts = [msg.get(k) for k in ("prefix", "middle", "suffix")]
        stride = msg.get("stride", 4)
        if not all(isinstance(t, str) for t in texts):
            raise ValueError("prefix, middle and suffix must be strings")
        if not isinstance(stride, int) or isinstance(stride, bool) or not 1 <= stride <= 16:
            raise ValueError(f"stride must be an integer between 1 and 16, got {stride!r}")
        return cls(*texts, stride)


@dataclass(frozen=True)
class RewriteRequest:
    """A region rewritten by an API's edit endpoint (next edit through a remote API: Mercury's format)."""

    content: str  # the user message, in the endpoint's tagged format
    max_tokens: int

    def message(self, rid: int, key: str) -> dict:
        """The worker's form (a model asked through its prompt: NativeEngine.answer_rewrite)."""
        return {"op": "rewrite", "id": rid, "key": key, "content": self.content, "max_tokens": self.max_tokens}

    @classmethod
    def from_message(cls, msg: dict) -> RewriteRequest:
        """ValueError naming what is wrong with a rewrite message."""
        content, n = msg.get("content"), msg.get("max_tokens")
        if not isinstance(content, str):
            raise ValueError("content must be a string")
        if (refused := max_tokens_refusal(n, MAX_TOKENS)) is not None:
            raise ValueError(refused)
        return cls(content, n)


@dataclass(frozen=True)
class StructuredRequest:
    """A conversation answered in JSON under constraints: `output` says what JSON,
    as JSON text: {"schema": {...}} (response_format json_schema), {"object": true} (json_object), or
    {"tools": [...], "choice": "auto" | "required" | NAME, "parallel": bool} (tool calls); each with
    "limit": the request's own max_tokens, which the answer's layout keeps within, where it gave one."""

    chat: str  # {"messages": [...], "tools": [...]} as JSON text (FillRequest.chat)
    output: str
    max_tokens: int
    sampling: SamplerConfig = field(default_factory=SamplerConfig)

    def message(self, rid: int, key: str) -> dict:
        return {"op": "structured", "id": rid, "key": key, "chat": self.chat, "output": self.output,
                "max_tokens": self.max_tokens, "sampling": self.sampling.to_wire()}

    @classmethod
    def from_message(cls, msg: dict) -> StructuredRequest:
        """ValueError naming what is wrong with a structured message."""
        chat, output, n = msg.get("chat"), msg.get("output"), msg.get("max_tokens")
        if not isinstance(chat, str) or not isinstance(output, str):
            raise ValueError("chat and output must be JSON text")
        if (refused := max_tokens_refusal(n, MAX_TOKENS)) is not None:
            raise ValueError(refused)
        return cls(chat, output, n, SamplerConfig.from_wire(msg.get("sampling", {})))


@dataclass(frozen=True)
class InstructRequest:
    """A region rewritten as an instruction says: `region` between `prefix` and
    `suffix`, the answer the region as it should read."""

    prefix: str
    region: str
    suffix: str
    instruction: str
    max_tokens: int
    comment: str = "#"  # the language's line comment: an infill model reads the instruction as one

    def message(self, rid: int, key: str) -> dict:
        return {"op": "instruct", "id": rid, "key": key, "prefix": self.prefix, "region": self.region,
                "suffix": self.suffix, "instruction": self.instruction, "max_tokens": self.max_tokens,
                "comment": self.comment}

    @classmethod
    def from_message(cls, msg: dict) -> InstructRequest:
        """ValueError naming what is wrong with an instruct message."""
        texts = [msg.get(k) for k in ("prefix", "region", "suffix", "instruction")]
        n, comment = msg.get("max_tokens"), msg.get("comment", "#")
        if not all(isinstance(t, str) for t in texts) or not isinstance(comment, str):
            raise ValueError("prefix, region, suffix, instruction and comment must be strings")
        if (refused := max_tokens_refusal(n, MAX_TOKENS)) is not None:
            raise ValueError(refused)
        return cls(*texts, n, comment)
