"""What crosses the Backend (base.py): the orders a backend is given and the answers it gives,
the same from the worker, a remote API and the in-process engine. Each has its wire form
(`message` / `from_message`) for the worker's socket (worker/wire.py frames them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from ..model.settings import SamplerConfig

MAX_CANDIDATES, MAX_CANDIDATE_CHARS = 8, 4096  # drafts one fill order may carry


@dataclass(frozen=True)
class FillOrder:
    """A canvas of `max_tokens` between prefix and suffix, to be filled."""

    prefix: str
    suffix: str
    max_tokens: int
    one_line: bool = False  # the caller keeps the first line only: the worker stops once it is written
    sampling: SamplerConfig = field(default_factory=SamplerConfig)
    drafts: bool = False  # the worker sends the draft after every denoising step (serve-api's streams)
    # guesses at the fill from the user's own code (context/drafts.py), for the model to verify
    # (model/verify.py) before it decodes; a backend that cannot probe is never given any
    candidates: tuple[str, ...] = ()
    # a conversation instead of prefix and suffix (serve-api's chat): {"messages": [...], "tools": [...]}
    # as JSON text (model/chat.py), the answer on the canvas after the chat template's generation prompt
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
    def from_message(cls, msg: dict) -> FillOrder:
        """ValueError naming what is wrong with a fill message."""
        prefix, suffix, n = (msg.get(k) for k in ("prefix", "suffix", "max_tokens"))
        one_line = msg.get("one_line", False)
        if not isinstance(prefix, str) or not isinstance(suffix, str):
            raise ValueError("prefix and suffix must be strings")
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 4096:
            raise ValueError(f"max_tokens must be an integer between 1 and 4096, got {n!r}")
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


class Kept(str, Enum):
    WHOLE = "whole"  # the draft is the fill
    PART = "part"  # a prefix of it was kept, the rest denoised
    REJECTED = "rejected"  # nothing kept: denoised as without drafts


@dataclass(frozen=True)
class DraftTally:
    """What became of a fill order's candidates (model/verify.py Verdict): how many were scored, the
    tokens of the one chosen, and how many of them the model kept."""

    offered: int = 0
    tokens: int = 0
    kept: int = 0

    @property
    def outcome(self) -> Kept | None:
        """How much of the chosen draft was kept; None when no candidate was scored."""
        if not self.offered:
            return None
        return Kept.REJECTED if not self.kept else Kept.WHOLE if self.kept == self.tokens else Kept.PART

    def message(self) -> list[int]:
        return [self.offered, self.tokens, self.kept]

    @classmethod
    def from_message(cls, raw) -> DraftTally:
        """The tally a reply carries; none (an older worker, a remote API) when it has no valid one."""
        if (isinstance(raw, list) and len(raw) == 3 and all(isinstance(x, int) and not isinstance(x, bool)
                                                             and x >= 0 for x in raw) and raw[2] <= raw[1]):
            return cls(*raw)
        return cls()


@dataclass
class Fill:
    """The answer for one canvas, from every backend."""

    text: str
    pieces: list[str]  # per-token text, "".join(pieces) == text
    confidence: list[float]  # per token
    ms: float = 0.0
    forwards: int = 0
    reused: int = 0  # context positions the worker reused from this document's last fill
    end_confidence: float = 1.0  # how sure the model was that the text ends where it does
    batch: float = 1.0  # mean rows of the steps that decoded it (one forward pass per step for all of them)
    budget_hit: bool = False  # stopped by sampling.time_budget_ms before every position was decoded
    # the tokens the model wrote (model/sampler.py FillResult.tokens): one per piece from our own model;
    # a remote API's answer is one piece, and its count is the API's usage (0 when it does not say)
    tokens: int | None = None
    draft: DraftTally = field(default_factory=lambda: DraftTally())  # what was kept of the order's candidates

    def __post_init__(self):
        if self.tokens is None:
            self.tokens = len(self.pieces)

    def message(self, rid) -> dict:
        return {"id": rid, "ok": True, "text": self.text, "pieces": self.pieces, "confidence": self.confidence,
                "ms": self.ms, "forwards": self.forwards, "reused": self.reused, "end_confidence": self.end_confidence,
                "batch": self.batch, "budget_hit": self.budget_hit, "drafted": self.draft.message()}

    @classmethod
    def from_message(cls, msg: dict) -> Fill:
        """ValueError when an ok reply does not have the shape `message` gives it."""
        text, pieces, conf = msg.get("text"), msg.get("pieces"), msg.get("confidence")
        if not (isinstance(text, str) and isinstance(pieces, list) and isinstance(conf, list)
                and all(isinstance(p, str) for p in pieces) and "".join(pieces) == text
                and len(pieces) == len(conf) and all(isinstance(c, (int, float)) for c in conf)):
            raise ValueError("a fill reply whose text, pieces and confidence do not line up")
        ms, forwards, reused = msg.get("ms", 0.0), msg.get("forwards", 0), msg.get("reused", 0)
        end = msg.get("end_confidence", 1.0)
        end = float(end) if isinstance(end, (int, float)) and not isinstance(end, bool) else 1.0
        batch = msg.get("batch", 1)
        batch = float(batch) if isinstance(batch, (int, float)) and not isinstance(batch, bool) and batch >= 1 else 1.0
        budget_hit = msg.get("budget_hit") is True
        return cls(text, pieces, [float(c) for c in conf], float(ms), int(forwards), int(reused), end, batch,
                   budget_hit, draft=DraftTally.from_message(msg.get("drafted")))


@dataclass(frozen=True)
class ProbeOrder:
    """How sure the model is of `middle`'s tokens between prefix and suffix (model/probe.py)."""

    prefix: str
    middle: str
    suffix: str
    stride: int = 4  # interleaved passes: each token is judged with (stride - 1) / stride of its neighbours

    def message(self, rid: int, key: str) -> dict:
        return {"op": "probe", "id": rid, "key": key, "prefix": self.prefix, "middle": self.middle,
                "suffix": self.suffix, "stride": self.stride}

    @classmethod
    def from_message(cls, msg: dict) -> ProbeOrder:
        """ValueError naming what is wrong with a probe message."""
        texts = [msg.get(k) for k in ("prefix", "middle", "suffix")]
        stride = msg.get("stride", 4)
        if not all(isinstance(t, str) for t in texts):
            raise ValueError("prefix, middle and suffix must be strings")
        if not isinstance(stride, int) or isinstance(stride, bool) or not 1 <= stride <= 16:
            raise ValueError(f"stride must be an integer between 1 and 16, got {stride!r}")
        return cls(*texts, stride)


@dataclass
class Probed:
    """The answer to a probe: per token of the middle, its text, the model's probability of it, and
    that of the model's own first choice."""

    pieces: list[str]
    prob: list[float]
    best: list[float]
    forwards: int = 0
    ms: float = 0.0

    def message(self, rid) -> dict:
        return {"id": rid, "ok": True, "pieces": self.pieces, "prob": self.prob, "best": self.best,
                "forwards": self.forwards, "ms": self.ms}

    @classmethod
    def from_message(cls, msg: dict) -> Probed:
        pieces, prob, best = msg.get("pieces"), msg.get("prob"), msg.get("best")
        if not (isinstance(pieces, list) and isinstance(prob, list) and isinstance(best, list)
                and len(pieces) == len(prob) == len(best) and all(isinstance(p, str) for p in pieces)
                and all(isinstance(x, (int, float)) for x in prob + best)):
            raise ValueError("a probe reply whose pieces and probabilities do not line up")
        return cls(pieces, [float(x) for x in prob], [float(x) for x in best], int(msg.get("forwards", 0)),
                   float(msg.get("ms", 0.0)))


@dataclass(frozen=True)
class Draft:
    """A fill's draft after a denoising step (FillOrder.drafts; model/sampler.py's Draft)."""

    step: int
    committed: str  # the text up to the first masked position: a prefix of the final text
    text: str  # the whole canvas, masked positions shown as a glyph
    masked: int

    def message(self, rid) -> dict:
        return {"id": rid, "draft": self.text, "committed": self.committed, "step": self.step, "masked": self.masked}

    @classmethod
    def from_message(cls, msg: dict) -> Draft | None:
        text, committed, step, masked = (msg.get(k) for k in ("draft", "committed", "step", "masked"))
        if not (isinstance(text, str) and isinstance(committed, str) and isinstance(step, int)
                and isinstance(masked, int)):
            return None
        return cls(step, committed, text, masked)


@dataclass(frozen=True)
class RewriteOrder:
    """A region rewritten by an API's edit endpoint (next edit through a remote API: nextedit/mercury.py)."""

    content: str  # the user message, in the endpoint's tagged format
    max_tokens: int

    def message(self, rid: int, key: str) -> dict:
        """The worker's form (a model asked through its prompt: model/native.py answer_rewrite)."""
        return {"op": "rewrite", "id": rid, "key": key, "content": self.content, "max_tokens": self.max_tokens}

    @classmethod
    def from_message(cls, msg: dict) -> RewriteOrder:
        """ValueError naming what is wrong with a rewrite message."""
        content, n = msg.get("content"), msg.get("max_tokens")
        if not isinstance(content, str):
            raise ValueError("content must be a string")
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 4096:
            raise ValueError(f"max_tokens must be an integer between 1 and 4096, got {n!r}")
        return cls(content, n)


@dataclass(frozen=True)
class StructuredOrder:
    """A conversation answered in JSON under constraints (model/structured.py): `output` says what JSON,
    as JSON text: {"schema": {...}} (response_format json_schema), {"object": true} (json_object), or
    {"tools": [...], "choice": "auto" | "required" | NAME, "parallel": bool} (tool calls); each with
    "limit": the request's own max_tokens, which the answer's layout keeps within, where it gave one."""

    chat: str  # {"messages": [...], "tools": [...]} as JSON text (FillOrder.chat)
    output: str
    max_tokens: int
    sampling: SamplerConfig = field(default_factory=SamplerConfig)

    def message(self, rid: int, key: str) -> dict:
        return {"op": "structured", "id": rid, "key": key, "chat": self.chat, "output": self.output,
                "max_tokens": self.max_tokens, "sampling": self.sampling.to_wire()}

    @classmethod
    def from_message(cls, msg: dict) -> StructuredOrder:
        """ValueError naming what is wrong with a structured message."""
        chat, output, n = msg.get("chat"), msg.get("output"), msg.get("max_tokens")
        if not isinstance(chat, str) or not isinstance(output, str):
            raise ValueError("chat and output must be JSON text")
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 4096:
            raise ValueError(f"max_tokens must be an integer between 1 and 4096, got {n!r}")
        return cls(chat, output, n, SamplerConfig.from_wire(msg.get("sampling", {})))


@dataclass
class Answered:
    """The answer to a StructuredOrder: the JSON text (a tool call's arguments in `calls`), or plain
    text when the model chose to answer rather than call (tool choice auto)."""

    kind: str  # "json" | "tool_calls" | "text"
    text: str  # the JSON (kind json), or the answer (kind text); "" for tool calls
    calls: list[dict] = field(default_factory=list)  # [{"name": ..., "arguments": JSON text}]
    tokens: int = 0  # tokens of the answer as written on the canvas (the skeleton's and the model's)
    decoded: int = 0  # of them, positions the model decoded
    forwards: int = 0
    ms: float = 0.0

    def message(self, rid) -> dict:
        return {"id": rid, "ok": True, "kind": self.kind, "text": self.text, "calls": self.calls,
                "tokens": self.tokens, "decoded": self.decoded, "forwards": self.forwards, "ms": self.ms}

    @classmethod
    def from_message(cls, msg: dict) -> Answered:
        kind, text, calls = msg.get("kind"), msg.get("text"), msg.get("calls")
        if not (kind in ("json", "tool_calls", "text") and isinstance(text, str) and isinstance(calls, list)
                and all(isinstance(c, dict) and isinstance(c.get("name"), str) and isinstance(c.get("arguments"), str)
                        for c in calls)):
            raise ValueError("a structured reply whose kind, text and calls do not line up")
        numbers = [msg.get(k, 0) for k in ("tokens", "decoded", "forwards")]
        numbers = [int(v) if isinstance(v, int) and not isinstance(v, bool) else 0 for v in numbers]
        ms = msg.get("ms", 0.0)
        return cls(kind, text, calls, *numbers, float(ms) if isinstance(ms, (int, float)) else 0.0)


@dataclass(frozen=True)
class InstructOrder:
    """A region rewritten as an instruction says (nextedit/instruct.py): `region` between `prefix` and
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
    def from_message(cls, msg: dict) -> InstructOrder:
        """ValueError naming what is wrong with an instruct message."""
        texts = [msg.get(k) for k in ("prefix", "region", "suffix", "instruction")]
        n, comment = msg.get("max_tokens"), msg.get("comment", "#")
        if not all(isinstance(t, str) for t in texts) or not isinstance(comment, str):
            raise ValueError("prefix, region, suffix, instruction and comment must be strings")
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 4096:
            raise ValueError(f"max_tokens must be an integer between 1 and 4096, got {n!r}")
        return cls(*texts, n, comment)
