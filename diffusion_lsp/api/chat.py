"""`POST /v1/chat/completions`: the body checked without I/O (400 naming the field), and the answer in
OpenAI's shapes (`chat.completion`, `chat.completion.chunk`).

- `messages` in the OpenAI shape (text content or text parts; assistant `tool_calls`, `tool` results)
  go to the worker, which renders them with the checkpoint's chat template (model/chat/conversation.py).
- `reasoning_effort` is the denoising budget: how sure the model must be of a position to commit it
  in a step (the threshold policy, model/decoding/policies.py). More effort, fewer positions per step, more
  forwards, each commit surer (EFFORT).
- `response_format` `json_object` / `json_schema` and `tools` are decoded under constraints
  (model/structured/constrained.py): a schema is compiled here first (model/structured/jsonschema.py), and one the layout
  cannot express is a 400 naming its keywords before the model is asked anything.
- `tool_choice`: "none" (text), "auto" (the model's first token says whether it calls), "required",
  or {"type": "function", "function": {"name": ...}}. More than one call per answer
  (`parallel_tool_calls`, on by default as in OpenAI's API) where the template writes calls in
  tags one after another (Qwen's <tool_call>): after each, the model's first choice says whether
  another follows."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..model.chat.conversation import conversation
from ..model.structured.jsonschema import Unsupported, compile_schema, tool_call
from ..model.network.text import valid_text
from .bodies import BadRequest, _common, asked_max_tokens, stops_of

# reasoning_effort -> the threshold policy's threshold (SamplerConfig.threshold): a step commits every
# position at least this sure (and the surest one); the default is the server's own sampling
EFFORT = {"none": 0.5, "minimal": 0.5, "low": 0.7, "medium": None, "high": 0.95, "xhigh": 0.99}


@dataclass
class Chat:
    model: str | None
    chat: str  # {"messages", "tools"} as JSON text, for the worker (FillRequest.chat)
    max_tokens: int
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    diffusing: bool = False
    include_usage: bool = False
    threshold: float | None = None  # from reasoning_effort; None: the server's sampling
    output: str | None = None  # StructuredRequest.output (JSON text); None: free text
    ignored: list[str] = field(default_factory=list)
    rendered: str | None = None  # `chat` with its rendering in the chat template added (Service.render)


def parse_chat(body, cap: int) -> Chat:
    known = {"model", "messages", "max_tokens", "max_completion_tokens", "stop", "temperature", "stream", "diffusing",
             "n", "best_of", "logprobs", "echo", "reasoning_effort", "response_format", "tools", "tool_choice",
             "parallel_tool_calls", "top_logprobs", "modalities", "reasoning"}
    model, max_tokens, ignored = _common(body, known, cap)
    try:
        messages, tools = conversation(_text(body.get("messages")), body.get("tools"))
    except ValueError as e:
        param = "tools" if str(e).startswith("tools") else "messages"
        raise BadRequest(str(e), param) from None
    stop = stops_of(body)
    flags = {}
    for name in ("stream", "diffusing", "parallel_tool_calls"):
        v = body.get(name)
        if v is not None and not isinstance(v, bool):
            raise BadRequest(f"{name} must be true or false, got {v!r}", name)
        flags[name] = bool(v)
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise BadRequest("stream_options must be an object", "stream_options")
    effort, field_name = body.get("reasoning_effort"), "reasoning_effort"
    reasoning = body.get("reasoning")
    if reasoning is not None and not isinstance(reasoning, dict):
        raise BadRequest(f"reasoning must be an object ({{\"effort\": ...}}), got {reasoning!r}", "reasoning_effort")
    if reasoning is not None and "effort" in reasoning:  # the Responses API's shape, which some clients send here
        effort, field_name = reasoning["effort"], "reasoning.effort"
    if effort is not None and not (isinstance(effort, str) and effort in EFFORT):
        raise BadRequest(f"{field_name} must be one of {', '.join(EFFORT)}, got {effort!r}", "reasoning_effort")
    output = _output(body, tools, max_tokens if asked_max_tokens(body) else None)
    return Chat(model, json.dumps({"messages": messages, "tools": tools}, ensure_ascii=False), max_tokens, stop,
                flags["stream"], flags["diffusing"], bool((options or {}).get("include_usage", False)),
                EFFORT.get(effort), output, ignored)


def _text(messages):
    """Lone surrogates in the messages' text as U+FFFD, as the model reads them."""
    if isinstance(messages, list):
        return [{**m, "content": valid_text(m["content"])} if isinstance(m, dict) and isinstance(m.get("content"), str)
                else m for m in messages]
    return messages


def _output(body: dict, tools, limit: int | None) -> str | None:
    """StructuredRequest.output for the body's response_format / tools, or None for free text; `limit`:
    the body's own max_tokens, which the answer's layout keeps within (without one, only the model's
    positions bound it)."""
    within = {} if limit is None else {"limit": limit}
    choice = body.get("tool_choice")
    fmt = body.get("response_format")
    if tools and choice != "none":
        if fmt not in (None, {"type": "text"}):
            raise BadRequest("response_format and tools together are not supported: give one", "response_format")
        names = [t["function"]["name"] for t in tools]
        if choice is None or choice in ("auto", "required"):
            pick = choice or "auto"
        elif (isinstance(choice, dict) and choice.get("type") == "function" and isinstance(choice.get("function"), dict)
              and choice["function"].get("name") in names):
            pick = choice["function"]["name"]
        else:
            raise BadRequest(f"tool_choice must be none, auto, required or a declared function "
                             f"({', '.join(names)}), got {choice!r}", "tool_choice")
        for t in tools:
            try:
                tool_call(t["function"]["name"], t["function"].get("parameters"))
            except Unsupported as e:
                raise BadRequest(f"tools: function {t['function']['name']}: {e}", "tools") from None
        parallel = body.get("parallel_tool_calls")
        return json.dumps({"tools": tools, "choice": pick, "parallel": parallel is not False, **within},
                          ensure_ascii=False)
    if choice is not None and choice != "none" and not tools:
        raise BadRequest("tool_choice without tools", "tool_choice")
    if fmt is None:
        return None
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None
    if kind == "json_object":
        return json.dumps({"object": True, **within})
    if kind == "json_schema":
        spec = fmt.get("json_schema")
        schema = spec.get("schema") if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise BadRequest("response_format.json_schema.schema must be a JSON schema object", "response_format")
        try:
            compile_schema(schema)
        except Unsupported as e:
            raise BadRequest(f"response_format: this schema cannot be decoded under constraints: {e}",
                             "response_format") from None
        return json.dumps({"schema": schema, **within}, ensure_ascii=False)
    raise BadRequest(f"response_format.type must be text, json_object or json_schema, got {kind!r}", "response_format")


def message_of(text: str | None, calls: list[dict], rid: str) -> dict:
    """The assistant message: its content, and its tool calls in OpenAI's shape."""
    msg = {"role": "assistant", "content": text if not calls else None}
    if calls:
        msg["tool_calls"] = [{"id": f"call_{rid[-12:]}_{i}", "type": "function",
                              "function": {"name": c["name"], "arguments": c["arguments"]}} for i, c in enumerate(calls)]
    return msg
