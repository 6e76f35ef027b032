"""JSON under constraints (model/structured/jsonschema.py, model/structured/constrained.py): every answer to random schemas
parses and validates, whatever the model predicts; what the layout cannot express is refused by name;
tool calls name a declared function with valid arguments."""

import json
import random

import pytest
import torch

from diffusion_lsp.protocol.requests import StructuredRequest
from diffusion_lsp.bench.schemas import KEYS, random_schema
from diffusion_lsp.engine import Engine
from diffusion_lsp.model.decoding.canvas import DoesNotFit
from diffusion_lsp.model.families.checkpoint import load_checkpoint
from diffusion_lsp.model.chat.conversation import ChatFormat, ChatTemplate
from diffusion_lsp.model.network.config import ModelConfig
from diffusion_lsp.model.structured.jsonschema import (Arr, Choice, Const, Nullable, Num, Obj, Str, Unsupported, compile_schema,
                                            for_object)
from diffusion_lsp.model.structured.constrained import decode_json
from diffusion_lsp.model.network.transformer import DiffusionTransformer

jsonschema = pytest.importorskip("jsonschema")

TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant: "


@pytest.fixture(scope="module")
def tiny(tiny_checkpoint):
    model, tok, _ = load_checkpoint(tiny_checkpoint)
    return model.eval(), tok


@pytest.fixture(scope="module")
def noise(tokenizer):
    """A random model of one narrow layer: its predictions are noise, and it is fast."""
    torch.manual_seed(0)
    cfg = ModelConfig.preset("tiny", dim=32, n_layers=1, n_heads=2, n_kv_heads=1, head_dim=16, hidden_dim=64,
                             vocab_size=tokenizer.vocab_size)
    return DiffusionTransformer(cfg).eval(), tokenizer


def test_every_answer_to_200_random_schemas_parses_and_validates(noise):
    """A random model predicts noise: the layout alone makes the answers valid."""
    model, tok = noise
    rng = random.Random(0)
    prompt = tok.encode("def record():\n    return ")
    decoded = skeleton = too_large = 0
    for i in range(200):
        schema = random_schema(rng) if i % 4 else {"type": "object", "properties": {
            k: random_schema(rng, 1) for k in rng.sample(KEYS, 3)}}
        try:
            r = decode_json(model, tok, prompt, compile_schema(schema), threshold=0.9)
        except DoesNotFit:  # nested arrays of objects can outgrow this model's 512 positions: said, not cut
            too_large += 1
            continue
        assert json.loads(r.text) == r.value
        jsonschema.validate(r.value, schema)  # raises with the path when it does not validate
        decoded, skeleton = decoded + r.decoded, skeleton + r.canvas - r.decoded
    assert too_large <= 10, too_large
    assert skeleton > 0 and decoded > 0  # both kinds of positions were exercised


def test_values_hold_what_json_needs_escaped(tiny):
    """Keys with quotes, backslashes, tabs and unicode are written escaped; enum values too."""
    model, tok = tiny
    schema = {"type": "object", "properties": {'say "hi"': {"enum": ['b"c', "new\nline", "日本"]},
                                               "a\\b": {"type": "string", "minLength": 2, "maxLength": 5},
                                               "tab\tkey": {"const": "x\ty"}}}
    r = decode_json(model, tok, tok.encode("x = "), compile_schema(schema))
    jsonschema.validate(r.value, schema)
    assert 2 <= len(r.value["a\\b"]) <= 5 and r.value["tab\tkey"] == "x\ty"
    assert set(r.value) == {'say "hi"', "a\\b", "tab\tkey"}


def test_the_layout_fixes_the_skeleton_and_leaves_the_values():
    node = compile_schema({"type": "object", "properties": {
        "a": {"type": "integer", "minimum": 0, "maximum": 3}, "b": {"type": "boolean"},
        "c": {"type": "array", "items": {"type": "string", "maxLength": 4}, "maxItems": 2},
        "d": {"type": "number", "exclusiveMaximum": 1}}})
    assert isinstance(node, Obj) and [k for k, _ in node.entries] == ["a", "b", "c", "d"]
    a, b, c, d = (v for _, v in node.entries)
    assert a == Choice(("0", "1", "2", "3")) and b == Choice(("true", "false"))
    assert c == Arr(Str(0, 4, 4), 1, 2) and isinstance(d, Num) and d.maximum < 1 and not d.integer
    assert compile_schema({"enum": ["only"]}) == Const('"only"')
    assert isinstance(for_object(), Arr) and for_object().key is not None


@pytest.mark.parametrize("schema, named", [
    ({"type": "string", "pattern": "^a+$"}, "pattern"),
    ({"type": "string", "format": "date-time"}, "format"),
    ({"anyOf": [{"type": "string"}, {"type": "integer"}]}, "anyOf is supported only as one schema or null"),
    ({"oneOf": [{"type": "string"}, {"type": "null"}, {"type": "integer"}]}, "oneOf"),
    ({"type": ["string", "integer"]}, "type as a list"),
    ({"type": "object", "properties": {"a": True}}, "true/false schemas"),
    ({"$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"},
     "recursive"),
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, "uniqueItems"),
    ({"type": "array", "items": {"type": "integer"}, "minItems": 40}, "at most 32"),
    ({"type": "string", "minLength": 5, "maxLength": 2}, "minLength is above maxLength"),
    ({"type": "integer", "minimum": 5, "maximum": 4}, "no integer"),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b"]}, "required"),
    ({}, "type must be one of"),
])
def test_what_the_layout_cannot_express_is_refused_by_name(schema, named):
    with pytest.raises(Unsupported, match=named):
        compile_schema(schema)


def test_a_value_or_null_is_the_models_choice(tiny):
    """Pydantic's Optional (anyOf with null) and type [T, "null"]: null when the model prefers it,
    else the value, valid either way."""
    assert compile_schema({"anyOf": [{"type": "string", "maxLength": 3}, {"type": "null"}]}) == Nullable(Str(0, 3, 3))
    assert compile_schema({"type": ["integer", "null"], "minimum": 0, "maximum": 2}) == Nullable(Choice(("0", "1", "2")))
    model, tok = tiny
    schema = {"type": "object", "properties": {"a": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
                                               "b": {"type": ["string", "null"], "maxLength": 4}}}
    r = decode_json(model, tok, [], compile_schema(schema))
    jsonschema.validate(r.value, schema)
    bias = torch.zeros(model.config.vocab_size)
    bias[tok.encode("null")[0]] = 50.0
    original = model.logits
    model.logits = lambda h: original(h) + bias
    try:
        r = decode_json(model, tok, [], compile_schema(schema))
    finally:
        del model.logits
    assert r.value == {"a": None, "b": None}


def test_every_unsupported_keyword_is_named_at_once():
    with pytest.raises(Unsupported) as e:
        compile_schema({"type": "object", "properties": {"a": {"type": "string", "pattern": "x"},
                                                         "b": {"oneOf": [{"type": "string"}]}}})
    assert "#/properties/a: pattern" in str(e.value) and "#/properties/b: oneOf" in str(e.value)


@pytest.fixture(scope="module")
def engine(tiny):
    model, tok = tiny
    return Engine(model, tok, {}, chat_format=ChatFormat(tok, ChatTemplate(TEMPLATE)))


TOOLS = [{"type": "function", "function": {"name": "get_weather", "description": "Weather in a city", "parameters": {
            "type": "object", "properties": {"city": {"type": "string", "minLength": 1},
                                             "unit": {"enum": ["celsius", "fahrenheit"]}},
            "required": ["city", "unit"]}}},
         {"type": "function", "function": {"name": "add", "parameters": {
             "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}},
         {"type": "function", "function": {"name": "now"}}]


@pytest.mark.parametrize("choice", ["required", "get_weather", "add", "now", "auto"])
def test_tool_calls_name_a_declared_function_with_valid_arguments(engine, choice):
    chat = json.dumps({"messages": [{"role": "user", "content": "What is the weather in Paris?"}], "tools": TOOLS})
    answer = engine.answer_structured(StructuredRequest(chat, json.dumps({"tools": TOOLS, "choice": choice}), 64))
    if answer.kind == "text":  # only "auto" may answer instead of calling
        assert choice == "auto"
        return
    assert answer.kind == "tool_calls" and len(answer.calls) == 1
    call = answer.calls[0]
    functions = {t["function"]["name"]: t["function"].get("parameters") for t in TOOLS}
    assert call["name"] in functions and (choice in ("required", "auto") or call["name"] == choice)
    jsonschema.validate(json.loads(call["arguments"]), functions[call["name"]] or {"type": "object"})


def test_json_object_without_a_schema_is_an_object(engine):
    chat = json.dumps({"messages": [{"role": "user", "content": "A person as JSON"}]})
    answer = engine.answer_structured(StructuredRequest(chat, json.dumps({"object": True}), 64))
    assert answer.kind == "json" and isinstance(json.loads(answer.text), dict) and json.loads(answer.text)


def test_a_layout_past_the_model_is_refused(tiny):
    model, tok = tiny
    wide = {"type": "array", "items": {"type": "string", "minLength": 60}, "minItems": 32, "maxItems": 32}
    with pytest.raises(DoesNotFit, match="do not fit"):
        decode_json(model, tok, [], compile_schema(wide))


def test_the_choice_is_the_models_own(tiny):
    """An enum is decided by the model's scores of each option where it would stand: a model that
    prefers an option gets it (here: a model whose head favours one token)."""
    model, tok = tiny
    favourite, other = tok.encode("false"), tok.encode("true")
    assert favourite[0] != other[0]
    with torch.no_grad():
        bias = torch.zeros(model.config.vocab_size)
        bias[favourite[0]] = 50.0
        original = model.logits
        model.logits = lambda h: original(h) + bias
        try:
            r = decode_json(model, tok, [], compile_schema({"type": "boolean"}))
        finally:
            del model.logits
    assert r.value is False


@pytest.mark.parametrize("parallel", [True, False])
def test_parallel_calls_where_the_template_writes_them_in_tags(tiny, parallel):
    """A model whose first choice is always the opening tag calls again after each call, up to the
    limit; without parallel_tool_calls (or tags) one call."""
    from diffusion_lsp.engine import MAX_PARALLEL_CALLS

    model, tok = tiny
    tagged = TEMPLATE + "{% if tools %}<tool_call>{% endif %}"
    engine = Engine(model, tok, {}, chat_format=ChatFormat(tok, ChatTemplate(tagged)))
    opener = tok.encode_markup("<tool_call>\n")[0]
    bias = torch.zeros(model.config.vocab_size)
    bias[opener] = 50.0
    original = model.logits
    model.logits = lambda h: original(h) + bias
    try:
        chat = json.dumps({"messages": [{"role": "user", "content": "Add things"}], "tools": TOOLS})
        output = json.dumps({"tools": TOOLS, "choice": "add", "parallel": parallel})
        answer = engine.answer_structured(StructuredRequest(chat, output, 64))
    finally:
        del model.logits
    assert len(answer.calls) == (MAX_PARALLEL_CALLS if parallel else 1)
    for call in answer.calls:
        assert call["name"] == "add"
        jsonschema.validate(json.loads(call["arguments"]), TOOLS[1]["function"]["parameters"])
