"""Our chat-template renderer (model/chat/prompting.py render_chat) equals transformers' apply_chat_template
(tokenize=False) on the published chat templates of the diffusion instruct checkpoints
(tests/chat_templates/: each template verbatim after a first-line `{# source: ... #}` comment, its
tokenizer_config.json's bos/eos tokens in the JSON beside it), for plain turns, multi-turn chats,
tools, assistant tool calls (arguments as a JSON string and as a dict) answered by `tool` messages,
reasoning, and unicode and quotes, with and without the generation prompt; and on small templates
for what the chat-template environment offers (`{% generation %}`, `strftime_now`, `dict`,
`namespace`, `tools`/`documents` when absent, plain-data conversion). Where transformers raises, ours
raises ValueError. The reference is transformers' own pipeline: apply_chat_template's message
normalization, then `render_jinja_template` with the tokenizer's special tokens."""

from __future__ import annotations

import dataclasses
import enum
import json
from pathlib import Path

import pytest

from diffusion_lsp.model.chat.prompting import render_chat

ctu = pytest.importorskip("transformers.utils.chat_template_utils")

FIXTURES = Path(__file__).parent / "chat_templates"
FAMILIES = sorted(p.stem for p in FIXTURES.glob("*.jinja"))


def fixture(name: str) -> tuple[str, dict[str, str | None]]:
    """The published template (the text after the source comment line) and its special tokens."""
    with open(FIXTURES / f"{name}.jinja", encoding="utf-8", newline="") as f:
        source, template = f.read().split("\n", 1)
    assert source.startswith("{# source: ") and source.endswith(" #}"), name
    meta = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    assert meta["source"] in source
    return template, {"bos_token": meta["bos_token"], "eos_token": meta["eos_token"]}


def reference(template, messages, special, add_generation_prompt, tools=None, documents=None) -> str:
    """transformers' rendering: apply_chat_template normalizes each message (objects to dicts, keys
    whose value is None dropped), then renders with its special tokens map (the non-None tokens)."""
    normalize = getattr(ctu, "_normalize_chat_messages", None)
    chat = normalize(messages) if normalize else [{k: v for k, v in m.items() if v is not None} for m in messages]
    rendered, _ = ctu.render_jinja_template(
        conversations=[chat], tools=tools, documents=documents, chat_template=template,
        add_generation_prompt=add_generation_prompt, **{k: v for k, v in special.items() if v is not None})
    return rendered[0]


def same_as_transformers(template, messages, special, add_generation_prompt, tools=None, documents=None):
    """Our rendering equals transformers'; where transformers raises, ours raises ValueError. The
    rendering (None where it raised)."""
    try:
        want = reference(template, messages, special, add_generation_prompt, tools, documents)
    except Exception:  # noqa: BLE001 - whatever transformers raises, ours is a ValueError
        with pytest.raises(ValueError, match="^[^\n]*$"):
            render_chat(template, messages, special, add_generation_prompt, tools, documents)
        return None
    assert render_chat(template, messages, special, add_generation_prompt, tools, documents) == want
    return want


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city, now (°C or °F; <b>not</b> \"forecasts\").",
    "parameters": {"type": "object", "properties": {"city": {"type": "string", "description": "e.g. \"Paris\""},
                                                   "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}
TIME = {"type": "function", "function": {
    "name": "local_time", "description": "The local time in a time zone.",
    "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}, "required": ["tz"]}}}


def tool_call_chat(arguments) -> list[dict]:
    """An assistant's tool calls (OpenAI shape, content None as the API sends it) answered by two tool
    messages, then the assistant's answer and a follow-up question."""
    return [
        {"role": "system", "content": "You are a weather bot."},
        {"role": "user", "content": "Weather and time in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": arguments}},
            {"id": "call_2", "type": "function", "function": {"name": "local_time", "arguments":
                                                              '{"tz": "Europe/Paris"}' if isinstance(arguments, str)
                                                              else {"tz": "Europe/Paris"}}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp": 21, "unit": "celsius"}'},
        {"role": "tool", "tool_call_id": "call_2", "content": "14:05"},
        {"role": "assistant", "content": "21 °C at 14:05."},
        {"role": "user", "content": "And tomorrow?"},
    ]


UNICODE = ('Ünïcødé ✓ 日本語 — "double" \'single\' `back` <tag a="1"> & {{ not jinja }} {% neither %} '
           '\\n\ttab  ')
CASES = {
    "system_user": ([{"role": "system", "content": "You write Python."},
                     {"role": "user", "content": "Sort a list."}], None),
    "user_only": ([{"role": "user", "content": "hi"}], None),
    "multi_turn": ([{"role": "system", "content": "Be brief."},
                    {"role": "user", "content": "a\n"}, {"role": "assistant", "content": " b "},
                    {"role": "user", "content": "c"}, {"role": "assistant", "content": "d"},
                    {"role": "user", "content": "e"}], None),
    "tools": ([{"role": "user", "content": "Weather in Paris?"}], [WEATHER, TIME]),
    "tools_with_system": ([{"role": "system", "content": "Use tools."},
                           {"role": "user", "content": "Weather in Paris?"}], [WEATHER]),
    "tools_empty_list": ([{"role": "user", "content": "hi"}], []),
    "tool_calls_json_string": (tool_call_chat('{"city": "Paris", "unit": "celsius"}'), [WEATHER, TIME]),
    "tool_calls_dict": (tool_call_chat({"city": "Paris", "unit": "celsius"}), [WEATHER, TIME]),
    "tool_calls_with_content": ([{"role": "user", "content": "Weather?"},
                                 {"role": "assistant", "content": "Let me look.", "tool_calls": [
                                     {"id": "c", "type": "function",
                                      "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'}}]},
                                 {"role": "tool", "tool_call_id": "c", "content": "cold"}], [WEATHER]),
    "reasoning": ([{"role": "user", "content": "2+2?"},
                   {"role": "assistant", "content": "4", "reasoning_content": "two and two"},
                   {"role": "user", "content": "3+3?"},
                   {"role": "assistant", "content": "6", "reasoning": "three and three"}], None),
    "unicode_quotes": ([{"role": "system", "content": UNICODE}, {"role": "user", "content": UNICODE},
                        {"role": "assistant", "content": UNICODE}, {"role": "user", "content": "«ok?»"}], None),
    "content_parts": ([{"role": "user", "content": [{"type": "text", "text": "hi"}]}], None),
}


@pytest.mark.parametrize("add_generation_prompt", [True, False], ids=["gen", "nogen"])
@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("family", FAMILIES)
def test_the_published_template_renders_as_transformers_renders_it(family, case, add_generation_prompt):
    template, special = fixture(family)
    messages, tools = CASES[case]
    rendered = same_as_transformers(template, messages, special, add_generation_prompt, tools)
    if rendered is not None and tools and "tools" in template:
        assert all(t["function"]["name"] in rendered for t in tools)  # the case is not vacuous


def test_the_fixtures_are_the_families_published_templates():
    assert FAMILIES == ["coda_instruct", "dream_instruct", "llada_instruct", "qwen2_5_instruct"]
    for name in FAMILIES:
        template, special = fixture(name)
        meta = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
        assert "messages" in template and set(meta) >= {"bos_token", "eos_token", "source"}
        assert all(v is None or isinstance(v, str) and v for v in special.values())
    assert fixture("dream_instruct")[1] == {"bos_token": "<|beginoftext|>", "eos_token": "<|endoftext|>"}
    assert fixture("llada_instruct")[1] == {"bos_token": "<|startoftext|>", "eos_token": "<|endoftext|>"}
    dream, qwen = fixture("dream_instruct")[0], fixture("qwen2_5_instruct")[0]
    assert dream.replace("You are a helpful assistant.", "You are Qwen, created by Alibaba Cloud. You are a "
                         "helpful assistant.") == qwen  # Dream's is Qwen2.5's with its own system prompt


def test_a_template_that_fails_in_transformers_fails_here_with_a_value_error():
    template, special = fixture("dream_instruct")
    messages = CASES["content_parts"][0]
    with pytest.raises(Exception):
        reference(template, messages, special, True)
    with pytest.raises(ValueError, match="^the chat template failed: TypeError: "):
        render_chat(template, messages, special)


@pytest.mark.parametrize("family", FAMILIES)
def test_apply_chat_template_of_a_tokenizer_agrees(family):
    """The reference pipeline is apply_chat_template's: a tiny tokenizer with the template and the
    fixture's special tokens renders the same through its public API."""
    transformers = pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    template, special = fixture(family)
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=tokenizers.Tokenizer(tokenizers.models.WordLevel({"<unk>": 0}, unk_token="<unk>")),
        **{k: v for k, v in special.items() if v is not None})
    tok.chat_template = template
    for messages, tools in (CASES["tool_calls_json_string"], CASES["multi_turn"], CASES["unicode_quotes"]):
        for gen in (True, False):
            want = tok.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=gen)
            assert render_chat(template, messages, tok.special_tokens_map, gen, tools) == want


ENVIRONMENT = {
    "block_whitespace": "{% for m in messages %}\n    {% if m.role == 'user' %}\n  U: {{ m.content }}\n"
                        "    {% else %}\n{{ m.role }}\n    {% endif %}\n{% endfor %}\n"
                        "{% if add_generation_prompt %}\n    A:\n{% endif %}\n",
    "generation_tag": "{% for m in messages %}{% if m.role == 'assistant' %}{% generation %}{{ m.content }}"
                      "{{ eos_token }}{% endgeneration %}{% else %}[{{ m.content }}]{% endif %}{% endfor %}",
    "generation_tag_trimmed": "{%- for m in messages %}\n  {%- generation -%}\n  {{ m.content }}\n"
                              "  {%- endgeneration %}\n{% endfor %}",
    "tools_absent": "{{ tools is defined }} {{ tools is none }} {{ tools | tojson }}|{% if tools %}T{% endif %}",
    "documents": "{{ documents is defined }} {{ documents is none }}{% for d in documents or [] %} "
                 "{{ d.title }}={{ d.text }}{% endfor %}",
    "strftime_now": "{{ strftime_now('%Y') | length }} {{ strftime_now('%d %b %Y') | length > 6 }}",
    "dict": "{{ dict(a=1, b='x') | tojson }} {{ dict.fromkeys(['p', 'q'], 0) | tojson }} {{ dict() }}",
    "namespace": "{% set ns = namespace(n=0, seen=[]) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}"
                 "{% endfor %}{{ ns.n }} {{ ns.seen }}",
    "namespace_underscore_kwarg": "{% set ns = namespace(_x=1) %}{{ ns._x }}",
    "namespace_underscore_set": "{% set ns = namespace() %}{% set ns._y = 2 %}{{ 1 }}",
    "namespace_dunder_read": "{% set ns = namespace(a=1) %}{{ ns.__class__ }}",
    "sandbox_attribute": "{{ messages.__class__.__mro__ }}",
    "raise_exception": "{{ raise_exception('no ' + messages[0].role) }}",
    "undefined_call": "{{ nonexistent() }}",
    "syntax_error": "{% for m in messages %}{{ m.content }}",
    "tojson_html": "{{ messages[0].content | tojson }} {{ messages | tojson(indent=2) }} "
                   "{{ {'b': 1, 'a': 2} | tojson(sort_keys=true, separators=(',', ':')) }}",
    "loop_controls": "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.role }}{% continue %}"
                     "{% endfor %}",
    "keys_seen": "{% for m in messages %}{{ m | dictsort | map('first') | join(',') }};{% endfor %}",
    "reasoning_aliases": "{% for m in messages %}{{ m.reasoning_content }}|{{ m.thinking }}|{{ m.reasoning }};"
                         "{% endfor %}",
    "special_tokens": "{{ bos_token }}|{{ eos_token is defined }}|{{ pad_token }}",
}


class Color(str, enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


@dataclasses.dataclass
class Part:
    kind: str
    text: str


class Opaque:
    def __repr__(self):
        return "Opaque()"


RICH = [
    {"role": "system", "content": "<b>bold</b> & 'q' \"dq\" ✓", "name": None},
    {"role": "user", "content": Color.RED, "level": Level.HIGH, "parts": [Part("text", "hi")],
     "blob": Opaque(), "pair": ("a", 1), "ratio": 0.5, "flag": True},
    {"role": "assistant", "content": "ok", "reasoning": "because", "tool_calls": None},
]


@pytest.mark.parametrize("add_generation_prompt", [True, False], ids=["gen", "nogen"])
@pytest.mark.parametrize("name", sorted(ENVIRONMENT))
def test_the_chat_template_environment_is_transformers(name, add_generation_prompt):
    special = {"bos_token": "<s>", "eos_token": None, "pad_token": "<pad>"}
    documents = [{"title": "a", "text": "x"}, {"title": "b", "text": "y"}] if name == "documents" else None
    same_as_transformers(ENVIRONMENT[name], RICH, special, add_generation_prompt, None, documents)


def test_templates_that_transformers_refuses_are_refused():
    for name in ("namespace_underscore_kwarg", "namespace_underscore_set", "raise_exception", "syntax_error",
                 "undefined_call"):
        with pytest.raises(Exception):
            reference(ENVIRONMENT[name], RICH, {}, True)
        with pytest.raises(ValueError, match="^the chat template failed: "):
            render_chat(ENVIRONMENT[name], RICH, {})
    with pytest.raises(ValueError, match="the chat template failed: no system"):
        render_chat(ENVIRONMENT["raise_exception"], RICH, {})


def test_what_the_template_sees_is_plain_data():
    rendered = render_chat("{% for m in messages %}{{ m | tojson }}\n{% endfor %}", RICH, {})
    seen = [json.loads(line) for line in rendered.splitlines()]
    assert "name" not in seen[0] and "tool_calls" not in seen[2]  # None-valued keys are dropped
    assert seen[1]["content"] == "red" and seen[1]["level"] == 3 and seen[1]["blob"] == "<Opaque>"
    assert seen[1]["parts"] == [{"kind": "text", "text": "hi"}] and seen[1]["pair"] == ["a", 1]
    assert seen[2]["reasoning_content"] == seen[2]["thinking"] == seen[2]["reasoning"] == "because"
    assert RICH[2] == {"role": "assistant", "content": "ok", "reasoning": "because", "tool_calls": None}


def test_tools_and_documents_not_of_their_shape_are_a_value_error():
    with pytest.raises(ValueError, match="tools"):
        render_chat("{{ tools }}", [], {}, True, [lambda city: city])
    with pytest.raises(ValueError, match="documents"):
        render_chat("{{ documents }}", [], {}, True, None, ["not a dict"])
    with pytest.raises(ValueError, match="chat message"):
        render_chat("{{ messages }}", ["hi"], {})
