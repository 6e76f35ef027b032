"""What a backend answers (backend.py): a filled canvas (`Fill`), the draft after a step (`Draft`,
the one draft type from the sampler to serve-api's streams), a probe's probabilities (`Probed`) and
a structured answer (`Answered`); each with its wire form (`message` / `from_message`).
Made by the model's side: Verdict (model/decoding/verify.py), FillResult and Draft (model/decoding/sampler.py)."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Kept(str, Enum):
    WHOLE = "whole"  # the draft is the fill
    PART = "part"  # a prefix of it was kept, the rest denoised
    REJECTED = "rejected"  # nothing kept: denoised as without drafts


@dataclass(frozen=True)
class DraftTally:
    """What became of a fill order's candidates (the verifier's Verdict): how many were scored, the
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
        """The tally a fill reply carries (`message`); ValueError when it has another shape."""
        if (isinstance(raw, list) and len(raw) == 3 and all(isinstance(x, int) and not isinstance(x, bool)
                                                             and x >= 0 for x in raw) and raw[2] <= raw[1]):
            return cls(*raw)
        raise ValueError(f"a fill reply whose draft tally is not [offered, tokens, kept]: {raw!r}")


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
    # the tokens the model wrote (FillResult.tokens): one per piece from our own model;
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
    """A fill's draft after a denoising step (FillRequest.drafts; the sampler's Draft)."""

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


@dataclass
class Answered:
    """The answer to a StructuredRequest: the JSON text (a tool call's arguments in `calls`), or plain
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
