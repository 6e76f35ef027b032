"""/v1/chat/completions and edits from an instruction, through a real `serve-api` and the openai
client: plain, streamed, with tools (and the tool's result in the next turn), with response_format;
a base model without a chat template is a clear 400; an instruct checkpoint's own template is the
one its conversations are put in."""

from __future__ import annotations

import json
import shutil

import httpx
import openai
import pytest

from diffusion_lsp.api.chat import EFFORT, parse_chat
from diffusion_lsp.api.bodies import BadRequest
from diffusion_lsp.engine import DEFAULT_MODEL, load_engine
from diffusion_lsp.model.chat.conversation import launch_template
from diffusion_lsp.model.decoding.results import MASK_GLYPH
from diffusion_lsp.protocol.settings import LaunchSettings
from test_api import Api

jsonschema = pytest.importorskip("jsonschema")

TEMPLATE = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
            "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "The weather in a city",
                                            "parameters": {"type": "object", "properties": {
                                                "city": {"type": "string", "minLength": 1, "maxLength": 40},
                                                "unit": {"enum": ["celsius", "fahrenheit"]}},
                                                "required": ["city", "unit"], "additionalProperties": False}}},
         {"type": "function", "function": {"name": "add", "parameters": {
             "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
             "required": ["a", "b"]}}}]
PERSON = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 130},
                                           "languages": {"type": "array", "items": {"enum": ["python", "go", "c"]},
                                                         "maxItems": 3},
                                           "active": {"type": "boolean"}},
          "required": ["name", "age", "languages", "active"], "additionalProperties": False}
ASK = [{"role": "system", "content": "You write Python."},
       {"role": "user", "content": "Write a function that adds two numbers."}]


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    folder = tmp_path_factory.mktemp("chat-api")
    (folder / "chat.jinja").write_text(TEMPLATE)
    server = Api(DEFAULT_MODEL, folder / "run", "--chat-template", str(folder / "chat.jinja"), "--timeout", "60")
    yield server
    server.close()


@pytest.mark.slow
def test_a_chat_answer_plain_and_streamed_is_the_same_text(api):
    client = api.client()
    done = client.chat.completions.create(model="diffusion-lsp", messages=ASK, max_tokens=24)
    choice = done.choices[0]
    assert choice.message.role == "assistant" and isinstance(choice.message.content, str) and choice.message.content
    assert done.usage.completion_tokens <= 24  # "length" is an answer that took every token it was allowed
    assert choice.finish_reason == ("length" if done.usage.completion_tokens == 24 else "stop"), done.usage
    assert done.object == "chat.completion" and done.id.startswith("chatcmpl-")
    chunks = list(client.chat.completions.create(model="diffusion-lsp", messages=ASK, max_tokens=24, stream=True,
                                                 stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == choice.message.content  # greedy decoding: the same request, the same answer
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == choice.finish_reason
    assert chunks[-1].usage.completion_tokens == done.usage.completion_tokens


@pytest.mark.slow
def test_diffusing_chunks_carry_the_whole_draft(api):
    with httpx.stream("POST", api.base + "/v1/chat/completions", timeout=60, json={
            "messages": ASK, "max_tokens": 16, "stream": True, "diffusing": True}) as r:
        events = [json.loads(line[6:]) for line in r.iter_lines() if line.startswith("data: {")]
    drafts = [e["choices"][0]["delta"].get("content") for e in events[1:-1]]
    assert len(drafts) >= 2 and any(MASK_GLYPH in (d or "") for d in drafts[:-1])  # masked positions shown
    # the last draft is the answer, and it ends as the same request answered at once does (greedy decoding)
    plain = api.client().chat.completions.create(model="diffusion-lsp", messages=ASK, max_tokens=16).choices[0]
    assert drafts[-1] == plain.message.content and MASK_GLYPH not in drafts[-1]
    assert events[-1]["choices"][0]["finish_reason"] == plain.finish_reason


@pytest.mark.slow
def test_a_strict_json_schema_answer_validates(api):
    done = api.client().chat.completions.create(
        model="diffusion-lsp", messages=[{"role": "user", "content": "A developer, as JSON."}],
        response_format={"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON, "strict": True}})
    jsonschema.validate(json.loads(done.choices[0].message.content), PERSON)
    assert done.choices[0].finish_reason == "stop"
    obj = api.client().chat.completions.create(model="diffusion-lsp", messages=[{"role": "user", "content": "JSON!"}],
                                               response_format={"type": "json_object"})
    assert isinstance(json.loads(obj.choices[0].message.content), dict)


@pytest.mark.slow
def test_a_tool_call_then_its_result_in_the_next_turn(api):
    client = api.client()
    messages = [{"role": "user", "content": "What is the weather in Paris, in celsius?"}]
    done = client.chat.completions.create(model="diffusion-lsp", messages=messages, tools=TOOLS,
                                          tool_choice="required")
    choice = done.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.content is None
    (call,) = choice.message.tool_calls
    params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
    assert call.type == "function" and call.function.name in params and call.id
    jsonschema.validate(json.loads(call.function.arguments), params[call.function.name])
    named = client.chat.completions.create(model="diffusion-lsp", messages=messages, tools=TOOLS,
                                           tool_choice={"type": "function", "function": {"name": "add"}})
    jsonschema.validate(json.loads(named.choices[0].message.tool_calls[0].function.arguments), params["add"])
    messages += [choice.message.model_dump(exclude_none=True),
                 {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 18}'}]
    after = client.chat.completions.create(model="diffusion-lsp", messages=messages, tools=TOOLS, tool_choice="none",
                                           max_tokens=16)
    assert after.choices[0].message.tool_calls is None and after.usage.completion_tokens <= 16
    assert after.choices[0].finish_reason == ("length" if after.usage.completion_tokens == 16 else "stop")
    streamed = list(client.chat.completions.create(model="diffusion-lsp", messages=messages[:1], tools=TOOLS,
                                                   tool_choice="required", stream=True))
    deltas = [d for c in streamed if c.choices for d in (c.choices[0].delta.tool_calls or [])]
    # the first request streamed: its one call comes whole, the same call (greedy decoding)
    assert [(d.index, d.type, d.function.name, d.function.arguments) for d in deltas] == [
        (0, "function", call.function.name, call.function.arguments)]
    assert streamed[-1].choices[0].finish_reason == "tool_calls"


@pytest.mark.slow
def test_what_cannot_be_constrained_or_asked_is_a_400_naming_the_field(api):
    client = api.client()
    cases = [
        (dict(response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {
            "type": "string", "pattern": "^a+$"}}}), "response_format", "pattern"),
        (dict(tools=[{"type": "function", "function": {"name": "f", "parameters": {
            "type": "object", "properties": {"a": {"anyOf": [{"type": "string"}]}}}}}], tool_choice="required"),
         "tools", "anyOf"),
        (dict(tools=TOOLS, tool_choice={"type": "function", "function": {"name": "nope"}}), "tool_choice", "nope"),
        (dict(reasoning_effort="maximal"), "reasoning_effort", "maximal"),
    ]
    for extra, param, said in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="diffusion-lsp", messages=ASK, **extra)
        assert e.value.body["param"] == param and said in e.value.body["message"]
    r = httpx.post(api.base + "/v1/chat/completions", json={"messages": [{"role": "wizard", "content": "x"}]})
    assert r.status_code == 400 and r.json()["error"]["param"] == "messages"


@pytest.mark.slow
def test_an_edit_from_an_instruction_at_the_edit_endpoint(api):
    body = {"instruction": "use sum()", "prefix": "def total(xs):\n", "language": "python",
            "input": "    s = 0\n    for x in xs:\n        s += x\n    return s\n", "suffix": "\nprint(total([1]))\n"}
    r = httpx.post(api.base + "/v1/edit/completions", json=body, timeout=60)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["object"] == "chat.completion" and isinstance(answer["choices"][0]["message"]["content"], str)
    r = httpx.post(api.base + "/v1/edit/completions", json={**body, "instruction": " "}, timeout=60)
    assert r.status_code == 400 and r.json()["error"]["param"] == "instruction"


def test_the_embedded_models_own_template_shows_tools_calls_and_results():
    """The template shipped beside the embedded model's weights (checkpoints/default/chat_template.jinja):
    every message's content once, tool definitions in the prompt, calls in <tool_call> tags (so one
    answer may carry several), a tool's result as its own turn."""
    template = launch_template(DEFAULT_MODEL)
    assert template is not None and template.shows_tools and template.tool_tags == ("<tool_call>\n", "\n</tool_call>")
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}}
    messages = [*ASK, {"role": "assistant", "content": "", "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "c1", "content": "3"}]
    segments = template.segments(messages, TOOLS)
    assert [text for _, text in segments] == [m["content"] for m in messages] + [""]
    markup = "".join(m for m, _ in segments)
    assert markup.startswith("<|system|>\nYou may call these functions.")
    assert json.dumps(TOOLS[1]["function"]) in markup and '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}' \
        '\n</tool_call>\n<|tool|>\n' in markup and markup.endswith("<|assistant|>\n")


@pytest.mark.slow
def test_the_embedded_model_answers_a_conversation_out_of_the_box(tmp_path):
    """A newcomer's first calls, no --chat-template: every chat call was a 400 "the model has no chat
    template". Plain and streamed text (code-like: a code model's), tool calls and JSON valid by
    construction."""
    server = Api(DEFAULT_MODEL, tmp_path / "run", "--timeout", "60")
    try:
        client = server.client()
        done = client.chat.completions.create(messages=ASK, model="diffusion-lsp", max_tokens=16)
        text = done.choices[0].message.content
        assert isinstance(text, str) and text and done.usage.completion_tokens <= 16
        chunks = list(client.chat.completions.create(model="diffusion-lsp", messages=ASK, max_tokens=16, stream=True))
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
        params = {t["function"]["name"]: t["function"]["parameters"] for t in TOOLS}
        called = client.chat.completions.create(model="diffusion-lsp", messages=ASK, tools=TOOLS, tool_choice="required")
        assert called.choices[0].finish_reason == "tool_calls"
        for call in called.choices[0].message.tool_calls:
            jsonschema.validate(json.loads(call.function.arguments), params[call.function.name])
        person = client.chat.completions.create(model="diffusion-lsp", messages=ASK, response_format={
            "type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}})
        jsonschema.validate(json.loads(person.choices[0].message.content), PERSON)
        anything = client.chat.completions.create(model="diffusion-lsp", messages=ASK,
                                                  response_format={"type": "json_object"})
        assert isinstance(json.loads(anything.choices[0].message.content), dict)
    finally:
        server.close()


@pytest.mark.slow
def test_a_base_model_without_a_template_answers_400(api, tmp_path):
    """A checkpoint folder with no template (the embedded model's, without the one it ships)."""
    base = shutil.copytree(DEFAULT_MODEL, tmp_path / "base", ignore=shutil.ignore_patterns("chat_template.jinja"))
    server = Api(base, tmp_path / "run")
    try:
        with pytest.raises(openai.BadRequestError, match="no chat template") as e:
            server.client().chat.completions.create(model="diffusion-lsp", messages=ASK)
        assert e.value.body["param"] == "messages" and "--chat-template" in e.value.body["message"]
        with pytest.raises(openai.BadRequestError, match="no chat template"):  # a 400, not an event after a 200
            server.client().chat.completions.create(model="diffusion-lsp", messages=ASK, stream=True)
        fill = dict(model="diffusion-lsp", prompt="def f(", suffix="\n", max_tokens=4)
        # fills are unaffected: the same fill as the server with a template writes
        assert server.client().completions.create(**fill).choices[0].text == \
            api.client().completions.create(**fill).choices[0].text
    finally:
        server.close()


def test_reasoning_effort_is_the_threshold_and_more_effort_takes_more_steps(tmp_path):
    """The mapping, documented in api/chat.py EFFORT, and what it does: a surer threshold commits fewer
    positions per step."""
    assert parse_chat({"messages": ASK}, 64).threshold is None
    assert [parse_chat({"messages": ASK, "reasoning_effort": e}, 64).threshold for e in ("low", "high")] == [0.7, 0.95]
    with pytest.raises(BadRequest):
        parse_chat({"messages": ASK, "reasoning_effort": 3}, 64)
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    engine = load_engine(LaunchSettings(chat_template=str(tmp_path / "t.jinja"), threads=1))
    from diffusion_lsp.protocol.requests import FillRequest
    from diffusion_lsp.protocol.settings import SamplerConfig

    chat = json.dumps({"messages": ASK})
    forwards = [engine.answer([FillRequest("", "", 32, sampling=SamplerConfig(threshold=EFFORT[e] or 0.9), chat=chat)],
                              [""])[0].forwards for e in ("minimal", "high")]
    assert forwards[0] < forwards[1]


def test_an_instruct_checkpoints_own_template_is_the_prompt(tmp_path):
    """A Dream-layout folder whose tokenizer_config.json holds Dream-Instruct's published template: the
    prompt's ids are transformers' rendering of the conversation, markup as special tokens."""
    transformers = pytest.importorskip("transformers")
    from pathlib import Path
    from test_pretrained import build

    folder, _ = build("dream", tmp_path)
    template = (Path(__file__).parent / "chat_templates" / "dream_instruct.jinja").read_text()
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))
    engine = load_engine(LaunchSettings(path=str(folder), precision="fp32"))
    caps = engine.capabilities
    assert caps.chat and caps.structured
    messages = [{"role": "user", "content": 'Say "<|im_start|>" please'}]
    ids = engine.chat_prompt(json.dumps({"messages": messages}), 8)
    hf = transformers.PreTrainedTokenizerFast(tokenizer_file=str(folder / "tokenizer.json"))
    rendered = hf.apply_chat_template(messages, chat_template=template, tokenize=False, add_generation_prompt=True)
    assert engine.tokenizer.hf.decode(ids, skip_special_tokens=False) == rendered
    # the user's "<|im_start|>" is text, the template's are the token (this tokenizer's one turn marker)
    start = engine.tokenizer.hf.token_to_id("<|im_start|>")
    assert start is not None and ids.count(start) == rendered.count("<|im_start|>") - 1 >= 2
