"""Structured answers: JSON under a schema (model/structured/jsonschema.py) decoded with its skeleton on the canvas
(model/structured/constrained.py), or tool calls, the function chosen first when it is not given, then its arguments
under its parameters; with parallel calls, another one while the model's first choice after a call is
another opening tag. torch is imported with the model, not with this module.
The orders are protocol/requests.py's StructuredRequest; OrderStopped is model/decoding/stop.py's."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..protocol.answers import Answered
from ..protocol.requests import FillRequest, max_tokens_refusal
from ..model.structured.jsonschema import Choice, Obj, compile_schema, for_object, tool_call
from ..model.decoding.stop import OrderStopped, watched

MAX_PARALLEL_CALLS = 4  # tool calls in one answer


@dataclass
class _Decodes:
    """One structured order's decodes on `model` (its stop watched): the prompt they follow, which grows
    by each tool call, and the forwards and ms they took together."""

    model: object
    tok: object
    prompt: list[int]
    threshold: float
    limit: int | None  # the request's own max_tokens, which the answer's positions stay within
    field: str  # what a layout past the model is the fault of: "tools" or "response_format"
    forwards: int = 0
    ms: float = 0.0

    def decode(self, node, within: int | None, lead: str = "", trail: str = ""):
        from ..model.decoding.canvas import DoesNotFit
        from ..model.structured.constrained import decode_json

        try:
            r = decode_json(self.model, self.tok, self.prompt, node, self.threshold, lead, trail, within)
        except DoesNotFit as e:  # the layout alone is past the model: the schema's field
            if e.param is not None:
                raise
            raise DoesNotFit(str(e), self.field) from None
        self.forwards, self.ms = self.forwards + r.forwards, self.ms + r.ms
        return r

    def opens(self, tag: str, max_tokens: int) -> bool:
        """Whether the model's first choice on the canvas is `tag`'s first token."""
        from ..model.structured.constrained import opens_with

        opened, forwards, ms = opens_with(self.model, self.tok, self.prompt, self.tok.encode_markup(tag)[:1],
                                          max_tokens)
        self.forwards, self.ms = self.forwards + forwards, self.ms + ms
        return opened


def answer_structured(engine, order, stop=None) -> Answered:
    """StructuredRequest -> Answered, JSON or tool calls (or text, where the model chooses
    to answer rather than call); ValueError for a request the model cannot answer (jsonschema.Unsupported:
    a schema it cannot express); OrderStopped at the next forward once `stop` (a
    threading.Event) is set."""
    from ..model.decoding.canvas import DoesNotFit

    if engine.chat_format is not None and not engine.structured:
        raise ValueError("this model does not decode JSON under constraints")
    output = json.loads(order.output)
    if order.max_tokens > engine.max_tokens():
        raise DoesNotFit(max_tokens_refusal(order.max_tokens, engine.max_tokens()), "max_tokens")
    prompt = engine.chat_prompt(order.chat, order.max_tokens)
    runs = _Decodes(watched(engine.model, stop), engine.tokenizer, prompt, order.sampling.threshold,
                    output.get("limit"), "tools" if "tools" in output else "response_format")
    if "tools" not in output:
        r = runs.decode(compile_schema(output["schema"]) if "schema" in output else for_object(), runs.limit)
        return Answered("json", r.text, tokens=r.canvas, decoded=r.decoded, forwards=runs.forwards, ms=runs.ms)
    lead, trail = engine.chat_format.tool_tags
    # does the model open a call (the template's tag or a JSON object) or answer?
    if output.get("choice", "auto") == "auto" and not runs.opens(lead or "{", order.max_tokens):
        (fill,) = engine.answer([FillRequest("", "", order.max_tokens, sampling=order.sampling, chat=order.chat)],
                                [""], [stop] if stop else None)
        if fill is None:
            raise OrderStopped("stopped")
        return Answered("text", fill.text, tokens=fill.tokens, decoded=fill.tokens,
                        forwards=runs.forwards + fill.forwards, ms=runs.ms + fill.ms)
    return _tool_calls(runs, output, lead, trail, order.max_tokens)


def _tool_calls(runs: _Decodes, output: dict, lead: str, trail: str, max_tokens: int) -> Answered:
    """The calls: every one within what max_tokens leaves (a call past it ends the answer, unless it is
    the first); with `parallel` where the template writes calls in tags (one after another), another
    one when the model's first choice after this call is another opening tag."""
    from ..model.decoding.canvas import DoesNotFit

    functions = {t["function"]["name"]: t["function"].get("parameters") for t in output["tools"]}
    choice, tok = output.get("choice", "auto"), runs.tok
    calls, tokens, decoded = [], 0, 0
    while True:
        name = choice if choice in functions else _function(runs, functions, lead)
        try:
            r = runs.decode(tool_call(name, functions[name]), None if runs.limit is None else runs.limit - tokens,
                            lead, trail)
        except DoesNotFit:
            if not calls:
                raise
            break
        calls.append({"name": name, "arguments": json.dumps(r.value["arguments"], ensure_ascii=False)})
        tokens, decoded = tokens + r.canvas, decoded + r.decoded
        if not (output.get("parallel") and lead and len(calls) < MAX_PARALLEL_CALLS):
            break
        runs.prompt = runs.prompt + tok.encode_markup(lead) + tok.encode(r.text) + tok.encode_markup(trail + "\n")
        if not runs.opens(lead, max_tokens):
            break
    return Answered("tool_calls", "", calls, tokens=tokens, decoded=decoded, forwards=runs.forwards, ms=runs.ms)


def _function(runs: _Decodes, functions: dict, lead: str) -> str:
    """The function a call is to: the only one, else chosen whole by the model (its arguments come next)."""
    if len(functions) == 1:
        return next(iter(functions))
    names = tuple(json.dumps(n, ensure_ascii=False) for n in functions)
    return runs.decode(Obj((("name", Choice(names)),)), runs.limit, lead).value["name"]
