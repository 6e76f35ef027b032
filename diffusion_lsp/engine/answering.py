"""What an engine answers: fills (`fill`, and the Backend's fill orders: `answer`, `decode_orders`, `batch`),
probes, rewrites and edits from an instruction; structured answers are structured.py's. `answer` and
`answer_probe` take the Backend's orders and give its answers (protocol/requests.py,
protocol/answers.py); `fill` and `probe` are
the model's own. torch is imported with the model, not with this module.
The model's side: CanvasRequest and canvas_room (model/decoding/canvas.py), Decoding (model/decoding/drive.py), FillResult
(model/decoding/results.py), probe (model/decoding/probe.py) and a document's context kept (model/decoding/reuse.py), Prompter
(model/chat/prompting.py), ChatFormat (model/chat/conversation.py), OrderStopped (model/decoding/stop.py), native models
(model/families/native.py); a rewrite's format is formats/mercury.py's, an instruction's formats/instruct.py's."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, ClassVar

from ..protocol.capabilities import Capabilities
from ..protocol.answers import Probed
from ..model.decoding.drive import run
from ..model.decoding.stop import OrderStopped
from .batch import FillBatch
from .structured import answer_structured

if TYPE_CHECKING:  # not a cycle: torch and tokenizers come with the model; --help imports this module, not them
    from transformers import PreTrainedModel

    from ..model.chat.conversation import ChatFormat
    from ..model.chat.prompting import Prompter
    from ..model.decoding.reuse import ContextMemo
    from ..model.network.tokenizer import Tokenizer
    from ..model.network.transformer import DiffusionTransformer


@dataclass
class Engine:
    model: DiffusionTransformer
    tokenizer: Tokenizer
    meta: dict  # the checkpoint's config.json
    memo: ContextMemo = field(default_factory=lambda: _context_memo())  # a `doc`'s last fill (or probe) seeds its next
    # a prefix-only model's (its family's `prompt` "fim" or "chat"): a fill's suffix goes into its
    # prompt; None: infill, the suffix on the row after the canvas
    prompter: Prompter | None = None
    # the chat template a conversation is put in (the checkpoint's, or the one given at launch);
    # None: the model answers no conversation
    chat_format: ChatFormat | None = None
    structured: ClassVar[bool] = True  # our sampler decodes JSON under constraints

    @property
    def capabilities(self) -> Capabilities:
        """What the model can do. A probe scores given tokens between prefix and suffix on the row,
        which only an infill model has (no drafts from the user's code, no remask-and-refine
        otherwise); a model asked in chat rewrites a region from an edit prompt."""
        convention = "infill" if self.prompter is None else self.prompter.convention
        chat = self.chat_format is not None
        return Capabilities(probe=convention == "infill", rewrite=convention == "chat", drafts=True, chat=chat,
                            structured=chat and self.structured)

    def decoding(self, requests, cfg=None):
        """A decoding of `requests` (CanvasRequest) for its caller to drive step by step
        (a Decoding: the sampler's; DreamOn's variable-length VariableDecoding, whose
        canvas changes size, gives no drafts)."""
        from ..model.families.dreamon import VariableDecoding, expands
        from ..model.decoding.sampler import Decoding

        if expands(self.tokenizer):  # DreamOn: the span grows and shrinks as it decodes
            return VariableDecoding(self.model, self.tokenizer, requests, cfg)
        return Decoding(self.model, self.tokenizer, requests, cfg, self.memo)

    def batch(self, orders, keys, stops) -> FillBatch:
        """The Backend's fill orders decoded as one batch, a step per turn, for a caller that answers each
        order as it ends and lets more join (the worker; FillBatch); stops[i]: order i's stop flag."""
        return FillBatch(self, orders, keys, stops)

    def fill(self, requests, cfg=None) -> list:
        """Fill `requests` to the end -> a FillResult per request."""
        decoding = self.decoding(requests, cfg)
        run(decoding)
        return decoding.results()

    def decode_orders(self, orders, keys):
        """A decoding of the Backend's orders (FillRequest, one sampling config for all)
        as one batch; keys[i] names order i's document (its context is remembered for its next fill)."""
        return self.decoding(self._requests(orders, keys, 0), orders[0].sampling)

    def join(self, decoding, orders, keys) -> list[int]:
        """Orders that join a running decoding (`decoding.joins`; the same sampling) -> their indices."""
        return decoding.add(self._requests(orders, keys, len(decoding)))

    def _requests(self, orders, keys, first: int) -> list:
        from ..model.decoding.canvas import CanvasRequest

        return [CanvasRequest(o.prefix, o.suffix, o.max_tokens, id=first + i, one_line=o.one_line, drafts=o.drafts,
                            **{"doc": k or None, "candidates": o.candidates,
                               **(self._conversation(o.chat, o.max_tokens) if o.chat
                                  else self._prompted(o.prefix, o.suffix, o.max_tokens))})
                for i, (o, k) in enumerate(zip(orders, keys))]

    def chat_prompt(self, chat: str, n: int) -> list[int]:
        """The ids of a conversation (FillRequest.chat's JSON text: its messages and tools, and their
        rendering when serve-api rendered them) before a canvas of n; ValueError when the model has no
        chat template or the conversation is malformed, DoesNotFit when it is too long."""
        from ..model.decoding.canvas import DoesNotFit
        from ..model.chat.conversation import conversation

        if self.chat_format is None:
            raise ValueError("the model has no chat template (give one with --chat-template FILE)")
        raw = json.loads(chat)
        if raw.get("rendered") is not None:  # rendered by serve-api, off this thread (ChatFormat's segments)
            ids = self.chat_format.tokens(raw["rendered"])
        else:
            messages, tools = conversation(raw.get("messages"), raw.get("tools"))
            ids = self.chat_format.prompt(messages, tools)
        room = self.prompt_room(n)
        if len(ids) > room:
            raise DoesNotFit(f"the conversation is {len(ids)} tokens: with an answer of {n} the model has room "
                             f"for {room}")
        return ids

    def _conversation(self, chat: str, n: int) -> dict:
        """A conversation's CanvasRequest fields: its prompt; no doc, no candidates (as `_prompted`)."""
        return {"prompt_ids": self.chat_prompt(chat, n), "doc": None, "candidates": (), "ends": self.chat_format.ends}

    def answer_structured(self, order, stop=None):
        """StructuredRequest -> Answered: JSON under a schema, or tool calls."""
        return answer_structured(self, order, stop)

    def _prompted(self, prefix: str, suffix: str, n: int, content: str | None = None) -> dict:
        """A prefix-only model's CanvasRequest fields: the prompt before a canvas of n (a fill's, or with
        `content` a rewrite's), in the positions the canvas leaves; none for an infill model."""
        if self.prompter is None:
            return {}
        room = self.prompt_room(n)
        ids = self.prompter.fill(prefix, suffix, room) if content is None else self.prompter.rewrite(content, room)
        # no doc: the reuse lines a row up with the document's last fill by its prefix and suffix tokens, which a
        # prompt row does not hold where they stand; no candidates: drafts are verified by scoring (a probe)
        return {"prompt_ids": ids, "chat": self.prompter.convention == "chat", "doc": None, "candidates": ()}

    def prompt_room(self, n: int) -> int:
        """Positions a prompt may take beside a canvas of n: all but the canvas and a fixed first token."""
        from ..model.decoding.canvas import canvas_room

        return canvas_room(self.tokenizer, self.model.config.max_seq_len) - n

    def answer_rewrite(self, order, stop=None):
        """RewriteRequest -> Fill: the tagged region (Mercury's format) in a chat model's
        prompt (its Prompter), the answer on the canvas; ValueError for a model not asked in chat (ours
        rewrite a region by re-masking it: the next-edit pipeline); OrderStopped between steps
        once `stop` is set."""
        if not self.capabilities.rewrite:
            raise ValueError("this model rewrites a region by re-masking it, not from an edit prompt")
        from ..model.decoding.canvas import CanvasRequest

        n = min(order.max_tokens, self.max_tokens())
        return self._answer_one(CanvasRequest("", "", n, id=0, **self._prompted("", "", n, order.content)), stop)

    def answer_instruct(self, order, stop=None):
        """InstructRequest -> Fill, the region as the instruction says:
        a model asked in chat gets the instruction and the tagged region in a user turn; any other re-masks
        the region between the code around it, the instruction a comment above it; OrderStopped between
        steps once `stop` is set."""
        from ..model.decoding.canvas import CanvasRequest
        from ..formats.instruct import chat_content, commented

        n = min(order.max_tokens, self.max_tokens())
        if self.capabilities.rewrite:  # prefix-only, asked in chat
            ids = self.prompter.ask(chat_content(order), self.prompt_room(n))
            return self._answer_one(CanvasRequest("", "", n, id=0, prompt_ids=ids, chat=True), stop)
        prefix = commented(order)
        return self._answer_one(CanvasRequest(prefix, order.suffix, n, id=0, **self._prompted(prefix, order.suffix, n)),
                                stop)

    def _answer_one(self, request, stop=None):
        """One canvas.CanvasRequest decoded to its end -> its Fill; OrderStopped between steps once `stop`
        is set (a fill's own way: the decoding stops its row)."""
        decoding = self.decoding([request])
        steps = run(decoding, stop)
        fill = self.answer_of(decoding, 0)
        if fill is None:
            raise OrderStopped(f"stopped after {steps} step{'s' * (steps != 1)}")
        return fill

    @staticmethod
    def answer_of(decoding, i: int):
        """Order i's answer once it has finished: its result, which is a Fill, or None when it was stopped."""
        r = decoding.result(i)
        return None if r.cancelled else r

    @classmethod
    def answers(cls, decoding) -> list:
        """A driven decoding's results as the Backend's answers: a Fill per order, None for a stopped one."""
        return [cls.answer_of(decoding, i) for i in range(len(decoding))]

    def answer(self, orders, keys, stops=None) -> list:
        """Fill `orders` to the end -> a Fill per order; with `stops` (a threading.Event per order),
        an order whose event is set is abandoned between steps (None)."""
        decoding = self.decode_orders(orders, keys)
        run(decoding, stops)
        return self.answers(decoding)

    def answer_probe(self, order, key: str | None = None):
        """ProbeRequest -> Probed; ValueError for a prefix-only model.
        No stop: a probe is a few forwards, and its model is read by the kernels it calls too."""
        if not self.capabilities.probe:
            raise ValueError(f"a {self.meta.get('family')} model sees no suffix on its row: it cannot score "
                             "given tokens where they stand (no probe)")
        r = self.probe(order.prefix, order.middle, order.suffix, order.stride, doc=key or None)
        return Probed(r.pieces, r.prob, r.best, r.forwards, r.ms)

    def max_tokens(self) -> int:
        """The largest canvas a fill may ask for: the model's positions less its fixed first token
        (canvas_room), and for DreamOn the end of text after the suffix."""
        from ..model.decoding.canvas import canvas_room
        from ..model.families.dreamon import expands

        room = canvas_room(self.tokenizer, self.model.config.max_seq_len)
        return room - 1 if expands(self.tokenizer) else room

    def probe(self, prefix: str, middle: str, suffix: str, stride: int = 4, doc: str | None = None):
        """How sure the model is of `middle`'s tokens where they stand; with `doc`,
        the next fill for `doc` starts from the probe's context."""
        from ..model.decoding.probe import probe

        return probe(self.model, self.tokenizer, prefix, middle, suffix, stride, self.memo, doc)


@dataclass
class NativeEngine(Engine):
    """A model transformers runs (a native model: DiffusionGemma): its own generation a step at a
    time, a fill's suffix in its prompt. It cannot probe (scoring given tokens where they stand needs
    a mask to put beside them, and its canvas has none), so no drafts from the user's code; a region
    is rewritten from an edit prompt (`answer_rewrite`) when it is asked in chat. No request joins a
    running decoding."""

    model: PreTrainedModel  # the family's transformers class (native_load's `load_native`)
    structured: ClassVar[bool] = False  # transformers' own decoding runs its canvas: no constraints on it

    def decoding(self, requests, cfg=None):
        from ..model.families.native import NativeDecoding

        return NativeDecoding(self.model, self.tokenizer, requests, cfg)

    @staticmethod
    def join(decoding, orders, keys) -> list[int]:
        raise ValueError("a native model's decoding cannot be joined")

    def prompt_room(self, n: int) -> int:
        from ..model.families.native import prompt_room

        return prompt_room(self.model, n)

    def max_tokens(self) -> int:
        from ..model.families.native import largest_fill

        return largest_fill(self.model)


def _context_memo():
    from ..model.decoding.reuse import ContextMemo  # torch: imported with the model, not with this module

    return ContextMemo()
