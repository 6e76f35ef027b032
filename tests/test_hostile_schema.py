"""The schema compiler under hostile schemas (model/structured/jsonschema.py, model/structured/keywords.py): every answer
validates, or the schema is refused before decoding naming the keyword; `$ref` is a JSON pointer;
the layout is within a budget and within max_tokens; the chat body's bad values are 400s naming the
field. Unit tests, a random model decoding every schema it accepts, and serve-api end to end."""

from __future__ import annotations

import copy
import json
import random

import httpx
import openai
import pytest

from diffusion_lsp.api.bodies import BadRequest
from diffusion_lsp.api.chat import parse_chat
from diffusion_lsp.protocol.capabilities import Capabilities
from diffusion_lsp.protocol.failure import BackendError, Failure
from diffusion_lsp.protocol.requests import StructuredRequest, max_tokens_refusal
from diffusion_lsp.bench.schemas import random_schema
from diffusion_lsp.engine import DEFAULT_MODEL, Engine
from diffusion_lsp.model.decoding.canvas import DoesNotFit
from diffusion_lsp.model.families.checkpoint import load_checkpoint
from diffusion_lsp.model.chat.conversation import ChatFormat, ChatTemplate
from diffusion_lsp.model.structured import jsonschema as layouts
from diffusion_lsp.model.structured.jsonschema import (Arr, Choice, Const, Nullable, Num, Str, Unsupported, compile_schema,
                                            tool_call)
from diffusion_lsp.model.structured.constrained import decode_json
from test_api import Api
from test_structured import noise  # noqa: F401 - the fixture: a random one-layer model

jsonschema = pytest.importorskip("jsonschema")

TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant: "
ASK = [{"role": "user", "content": "JSON, please."}]




def answer(noise, schema):
    model, tok = noise
    return decode_json(model, tok, tok.encode("x = "), compile_schema(schema)).value


# --- satisfiable and exact: an answer validates, or the schema is refused naming the keyword -----

DEFS = {"$defs": {"a": {"type": "object", "properties": {"y": {"type": "integer", "minimum": 0, "maximum": 99}}},
                  "y": {"type": "string"}, "x": {"type": "boolean"}, "s": {"type": "string"}},
        "definitions": {"x": {"type": "null"}}}


@pytest.mark.parametrize("schema, named", [
    ({"const": "abc", "maxLength": 2}, "maxLength"),
    ({"const": 1, "type": "string"}, "type"),
    ({"enum": ["a", "bb"], "minLength": 3}, "minLength"),
    ({"type": "object", "const": {"a": 1, "b": 2}, "properties": {"a": {"type": "integer"}},
      "additionalProperties": False}, "additionalProperties"),
    ({"enum": [1, 2], "minimum": 5}, "minimum"),
    ({"const": {"a": "x"}, "properties": {"a": {"type": "string", "pattern": "^y"}}}, "pattern"),
    ({**DEFS, "$ref": "#/$defs/s", "type": "integer"}, "type"),
    ({**DEFS, "$ref": "#/$defs/nope"}, "points at nothing"),
    ({**DEFS, "$ref": "#anchor"}, "anchors"),
    ({"type": "object", "properties": {"a": {"$ref": "#/properties/b/enum/0", "type": "object"},
                                       "b": {"enum": [{"required": 1.5}]}}}, "not a subschema"),
    ({"type": "object", "properties": {"a": {"anyOf": [{"const": "x"}, {"type": "null"}], "enum": ["y"]}}}, "enum"),
    ({"type": "integer", "minimum": 10 ** 400}, "minimum must be a finite number"),
    ({"type": "number", "maximum": -10 ** 400}, "maximum must be a finite number"),
    ({"type": "object", "properties": {"a": {"type": "string"}}, "required": ["b", {"a": 1}]}, "required"),
    ({"type": []}, "or a list of them"),
    ({"type": "string", "minItems": [1]}, "minItems must be a non-negative integer"),  # where it does not apply
    ({"type": "number", "properties": {"n": {"minLength": ""}}}, "#/properties/n: minLength"),
    ({"$defs": {"d": {"items": "x"}}, "type": "null"}, "#/\\$defs/d: items must be a boolean or a schema"),
    ({"$ref": "#", "required": 1.5, "const": True}, "required must be a list"),
    ({"type": ["null", "null"]}, "type lists a type twice"),
    ({"const": float("nan")}, "NaN"),
    ({"type": "object", "properties": {"\ud800": {"type": "null"}}}, "lone surrogate"),
    ({"enum": ["a", "\udfff"]}, "lone surrogate"),
    ({"oneOf": [{"type": ["string", "null"]}, {"type": "null"}]}, "both schemas accept null"),
])
def test_an_unsatisfiable_or_unknown_combination_is_refused_naming_the_keyword(schema, named):
    with pytest.raises(Unsupported, match=named):
        compile_schema(schema)


@pytest.mark.parametrize("schema, value_check", [
    ({"enum": ["a", "bb"], "minLength": 2}, lambda v: v == "bb"),
    ({"enum": ["a", 1, None], "type": ["string", "null"]}, lambda v: v in ("a", None)),
    ({**DEFS, "$ref": "#/$defs/s", "maxLength": 2}, lambda v: isinstance(v, str) and len(v) <= 2),
    ({**DEFS, "$ref": "#/$defs/a/properties/y"}, lambda v: isinstance(v, int) and 0 <= v <= 99),
    ({**DEFS, "$ref": "#/definitions/x"}, lambda v: v is None),
    ({**DEFS, "$ref": "#/$defs/x"}, lambda v: isinstance(v, bool)),
    ({"type": ["null"]}, lambda v: v is None),
    ({"type": ["integer", "number"], "minimum": 1, "maximum": 3}, lambda v: 1 <= v <= 3),
    ({"anyOf": [{"type": "string", "maxLength": 10}, {"type": "null"}], "maxLength": 3},
     lambda v: v is None or len(v) <= 3),
    ({"anyOf": [{"type": "string", "minLength": 1}, {"type": "null"}], "type": "string"},
     lambda v: isinstance(v, str) and v),
    ({"type": "object", "properties": {"a": {"$ref": "#/$defs/y", "minLength": 2, "maxLength": 4}},
      "required": ["a"], "$defs": {"y": {"type": "string", "maxLength": 8}}}, lambda v: 2 <= len(v["a"]) <= 4),
    ({"$ref": "#/$defs/o", "properties": {"b": {"type": "integer"}}, "required": ["a"],
      "$defs": {"o": {"type": "object", "properties": {"a": {"const": "k"}}, "additionalProperties": False}}},
     lambda v: v == {"a": "k"}),
])
def test_what_the_layout_answers_validates_under_every_keyword(noise, schema, value_check):
    v = answer(noise, schema)
    jsonschema.validate(v, schema)
    assert value_check(v), v


def test_a_ref_is_a_json_pointer_and_its_siblings_hold():
    assert compile_schema({**DEFS, "$ref": "#/$defs/a/properties/y"}) == Num(True, 0, 99)  # not the def named y
    assert compile_schema({**DEFS, "$ref": "#/definitions/x"}) == Const("null")  # not $defs' x
    assert compile_schema({**DEFS, "$ref": "#/$defs/s", "maxLength": 2}) == Str(0, 2, 2)
    escaped = {"$defs": {"a/b": {"type": "null"}, "c~d": {"type": "boolean"}}}
    assert compile_schema({**escaped, "$ref": "#/$defs/a~1b"}) == Const("null")
    assert compile_schema({**escaped, "$ref": "#/$defs/c~0d"}).options == ("true", "false")


def test_an_enum_keeps_the_values_its_siblings_accept():
    assert compile_schema({"enum": ["a", "bb"], "minLength": 2}) == Const('"bb"')
    assert compile_schema({"enum": ["a", 1, None, "ccc"], "type": ["string", "null"], "maxLength": 2}) \
        == Choice(('"a"', "null"))
    assert compile_schema({"const": {"a": 1}, "properties": {"a": {"type": "integer"}},
                           "additionalProperties": False}) == Const('{"a": 1}')


def test_a_null_is_offered_only_where_the_siblings_accept_it():
    assert compile_schema({"anyOf": [{"type": "string", "maxLength": 10}, {"type": "null"}], "maxLength": 3}) \
        == Nullable(Str(0, 3, 3))
    assert compile_schema({"anyOf": [{"type": "string"}, {"type": "null"}], "type": "string"}) == Str(0, None, 12)
    assert compile_schema({"anyOf": [{"type": "string"}, {"type": "null"}], "type": ["null", "integer"]}) \
        == Const("null")


def test_hostile_combinations_of_random_schemas_validate_or_are_refused(noise):
    """Random schemas with sibling keywords that may contradict them (a const, an enum, bounds, a
    type, a $ref beside its own keywords): the compiler's answer validates, or it refuses."""
    rng = random.Random(4)
    extras = [{"maxLength": 1}, {"minLength": 2}, {"type": "string"}, {"type": "integer"}, {"const": "ab"},
              {"const": 3}, {"enum": ["a", "abc", 2, None]}, {"minimum": 2}, {"maximum": 0}, {"maxItems": 1},
              {"minItems": 2}, {"type": ["string", "null"]}, {"additionalProperties": False, "properties": {}}]
    decoded = refused = 0
    for i in range(120):
        base = random_schema(rng, 1)
        schema = {**copy.deepcopy(base), **rng.choice(extras)} if i % 2 else \
            {"$defs": {"d": base}, "$ref": "#/$defs/d", **rng.choice(extras)}
        try:
            node = compile_schema(schema)
        except Unsupported:
            refused += 1
            continue
        model, tok = noise
        try:
            r = decode_json(model, tok, tok.encode("x = "), node)
        except DoesNotFit:
            continue
        jsonschema.validate(r.value, schema)
        decoded += 1
    assert decoded > 30 and refused > 10, (decoded, refused)


# --- the budget, before anything is laid out ------------------------------------------------------

def nested(depth: int, items: int = 32) -> dict:
    s = {"type": "integer"}
    for _ in range(depth):
        s = {"type": "array", "items": s, "minItems": 0, "maxItems": items}
    return s


@pytest.mark.parametrize("schema, named", [
    (nested(4), "value slots"),
    (nested(5), "positions"),
    ({"enum": [f"v{i}" for i in range(40_000)]}, "40000 values"),
    ({"enum": ["x" * 300_000, "y"]}, "bytes"),
    ({"type": "object", "properties": {f"k{i}": {"enum": [str(j) for j in range(300)]} for i in range(10)}},
     "enum options"),
])
def test_a_layout_past_the_budget_is_refused_before_it_is_laid_out(schema, named):
    with pytest.raises(Unsupported, match=named):
        compile_schema(schema)


def test_the_work_and_the_message_are_bounded_too():
    """2,000 $refs to one enum of 2,048 values: refused once the values met pass the budget, not
    after checking four million; 30,000 properties: the message names the first problems and counts
    the rest."""
    refs = {"type": "object", "$defs": {"d": {"enum": list(range(2048))}},
            "properties": {f"p{i}": {"$ref": "#/$defs/d"} for i in range(2000)}}
    with pytest.raises(Unsupported, match="more than 2048 enum options"):
        compile_schema(refs)
    with pytest.raises(Unsupported, match=r"and \d+ more$") as e:
        compile_schema({"type": "object", "properties": {f"p{i}": {"type": "string"} for i in range(30_000)}})
    assert len(str(e.value)) < 2000


def test_the_budget_counts_what_the_layout_lays_out(noise):
    """measure's positions are at least the layout's: a fixed text or an option takes at most a token
    per byte, a slot its positions."""
    from diffusion_lsp.model.structured.constrained import Layout

    model, tok = noise
    for schema in (nested(2, 4), {"type": "object", "properties": {"a b": {"enum": ["x", "yy", 3]},
                                                                   "n": {"type": "number"}, "s": {"type": "string"}}}):
        node = compile_schema(schema)
        layout = Layout(tok, model.config.vocab_size)
        layout.build(node)
        size = layouts.measure(node)
        assert len(layout.ids) <= size.positions and len(layout.units) == size.slots


# --- max_tokens: the answer is within it, or a 400 naming it -------------------------------------

@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    model, tok, _ = load_checkpoint(tiny_checkpoint)
    return Engine(model.eval(), tok, {}, chat_format=ChatFormat(tok, ChatTemplate(TEMPLATE)))


def structured(engine, body: dict):
    chat = parse_chat({"messages": ASK, **body}, 512)
    return engine.answer_structured(StructuredRequest(chat.chat, chat.output, chat.max_tokens))


def test_a_json_object_answer_keeps_within_max_tokens(engine):
    for n in (8, 20, 64):
        got = structured(engine, {"response_format": {"type": "json_object"}, "max_tokens": n})
        assert got.tokens <= n and isinstance(json.loads(got.text), dict), (n, got.tokens)
    unlimited = structured(engine, {"response_format": {"type": "json_object"}})
    assert unlimited.tokens > 20  # without max_tokens the layout is its own


def test_a_schema_answer_shrinks_to_max_tokens_and_still_validates(engine):
    schema = {"type": "object", "properties": {"names": {"type": "array", "items": {"type": "string", "minLength": 1},
                                                         "minItems": 1, "maxItems": 6}},
              "required": ["names"]}
    body = {"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}}
    wide = structured(engine, body)
    narrow = structured(engine, {**body, "max_tokens": 16})
    assert narrow.tokens <= 16 < wide.tokens
    jsonschema.validate(json.loads(narrow.text), schema)


def test_tool_calls_keep_within_max_tokens(engine):
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}}]
    wide = structured(engine, {"tools": tools, "tool_choice": "required"})
    got = structured(engine, {"tools": tools, "tool_choice": "required", "max_tokens": wide.tokens - 4})
    assert got.tokens <= wide.tokens - 4 and got.calls
    jsonschema.validate(json.loads(got.calls[0]["arguments"]), tools[0]["function"]["parameters"])


def test_a_schema_that_cannot_fit_names_max_tokens_or_the_schema(engine):
    schema = {"type": "array", "items": {"type": "string", "minLength": 8}, "minItems": 4, "maxItems": 4}
    body = {"response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": schema}}}
    with pytest.raises(DoesNotFit) as e:
        structured(engine, {**body, "max_tokens": 10})
    assert e.value.param == "max_tokens" and "max_tokens=10" in str(e.value)
    wide = {"type": "array", "items": {"type": "string", "minLength": 60}, "minItems": 32, "maxItems": 32}
    with pytest.raises(DoesNotFit) as e:
        structured(engine, {"response_format": {"type": "json_schema", "json_schema": {"name": "w", "schema": wide}}})
    assert e.value.param == "response_format"
    with pytest.raises(DoesNotFit) as e:
        structured(engine, {**body, "max_tokens": 512})
    assert e.value.param == "max_tokens"


# --- the chat body ------------------------------------------------------------------------------

@pytest.mark.parametrize("body", [{"reasoning_effort": ["low"]}, {"reasoning_effort": {"x": 1}},
                                  {"reasoning": {"effort": ["high"]}}, {"reasoning": {"effort": {}}},
                                  {"reasoning": "high"}])
def test_a_reasoning_effort_not_a_name_is_a_400(body):
    with pytest.raises(BadRequest) as e:
        parse_chat({"messages": ASK, **body}, 64)
    assert e.value.param == "reasoning_effort"


@pytest.mark.parametrize("body, param", [({"max_completion_tokens": 10**6}, "max_completion_tokens"),
                                         ({"max_tokens": 10**6, "max_completion_tokens": 8}, "max_tokens"),
                                         ({"max_tokens": "8"}, "max_tokens")])
def test_a_token_limit_out_of_range_names_the_field_the_client_sent(body, param):
    """The re-run probe's case: max_completion_tokens 10^6 was refused naming max_tokens, which the
    client never sent."""
    with pytest.raises(BadRequest, match=f"^{param} must be an integer between 1 and 64") as e:
        parse_chat({"messages": ASK, **body}, 64)
    assert e.value.param == param
    assert parse_chat({"messages": ASK, "max_completion_tokens": 9}, 64).max_tokens == 9


def test_max_tokens_goes_to_the_layout_only_when_asked():
    fmt = {"response_format": {"type": "json_object"}}
    assert json.loads(parse_chat({"messages": ASK, **fmt, "max_tokens": 9}, 64).output)["limit"] == 9
    assert "limit" not in json.loads(parse_chat({"messages": ASK, **fmt}, 64).output)
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "a": {"const": 1, "type": "string"}}}}}]
    with pytest.raises(BadRequest) as e:
        parse_chat({"messages": ASK, "tools": tools, "tool_choice": "required"}, 64)
    assert e.value.param == "tools" and "type" in str(e.value)
    assert isinstance(tool_call("f", {"type": "object", "properties": {"a": nested(1, 2)}}).entries[1][1].entries[0][1],
                      Arr)


# --- end to end, through serve-api ----------------------------------------------------------------

@pytest.fixture(scope="module")
def api(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hostile-schema")
    (folder / "chat.jinja").write_text(TEMPLATE)
    server = Api(DEFAULT_MODEL, folder / "run", "--chat-template", str(folder / "chat.jinja"), "--timeout", "60")
    yield server
    server.close()


def schema_format(schema: dict) -> dict:
    return {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}


@pytest.mark.slow
def test_hostile_schemas_through_serve_api(api):
    """A conflicting schema and the old 500s are 400s naming the field; what was a 500 and is
    satisfiable is answered, valid; max_tokens is kept; the server serves on."""
    client = api.client()
    cases = [
        (dict(response_format=schema_format({"const": "abc", "maxLength": 2})), "response_format", "maxLength"),
        (dict(response_format=schema_format({"type": "integer", "minimum": 10 ** 400})), "response_format",
         "minimum"),
        (dict(response_format=schema_format(nested(4))), "response_format", "value slots"),
        (dict(reasoning_effort=["low"]), "reasoning_effort", "reasoning_effort"),
        (dict(response_format=schema_format({"type": ["null", "null"]})), "response_format", "twice"),
        (dict(response_format={"type": "json_object"}, max_tokens=512), "max_tokens", "max_tokens"),
        (dict(response_format=schema_format({"type": "array", "items": {"type": "string", "minLength": 8},
                                             "minItems": 4, "maxItems": 4}), max_tokens=10), "max_tokens",
         "max_tokens=10"),
    ]
    for extra, param, said in cases:
        with pytest.raises(openai.BadRequestError) as e:
            client.chat.completions.create(model="diffusion-lsp", messages=ASK, **extra)
        assert e.value.body["param"] == param and said in e.value.body["message"], e.value.body
    narrowed = {"type": "object", "properties": {"a": {"type": ["null"]}, "b": {"enum": ["a", "bb"], "minLength": 2}},
                "required": ["a", "b"]}
    done = client.chat.completions.create(model="diffusion-lsp", messages=ASK, response_format=schema_format(narrowed))
    assert json.loads(done.choices[0].message.content) == {"a": None, "b": "bb"}
    small = client.chat.completions.create(model="diffusion-lsp", messages=ASK, max_tokens=8,
                                           response_format={"type": "json_object"})
    assert small.usage.completion_tokens <= 8 and isinstance(json.loads(small.choices[0].message.content), dict)
    assert httpx.get(api.base + "/health", timeout=10).status_code == 200


class RefusingBackend:
    """The worker's answer to a conversation whose max_tokens is past the model (serve-api's own
    --max-tokens above it): INVALID, naming max_tokens (worker/process.py)."""
    capabilities = Capabilities(chat=True, structured=True)
    counts = {"worker_crashes": 0}

    def __init__(self, limit: int | None):
        self.limit, self.asked = limit, 0  # the largest canvas the worker said in its state (None: not yet)

    async def start(self):
        pass

    async def ready(self):
        pass

    def describe(self) -> dict:
        return {"state": "ready", "error": None, "max_tokens": self.limit}

    async def fill(self, key, order):
        self.asked += 1
        raise BackendError(Failure.INVALID, max_tokens_refusal(order.max_tokens, 511), param="max_tokens")

    async def stream(self, key, order):
        yield await self.fill(key, order)

    async def close(self):
        pass


@pytest.mark.parametrize("stream, limit", [(False, None), (False, 511), (True, 511)])
def test_a_conversation_past_the_model_names_max_tokens(tmp_path, stream, limit):
    """The probe's case: the worker named max_tokens, and the chat route said `param: messages`. Once the
    worker has said its largest canvas, the route refuses before asking it (a stream: before it starts)."""
    from starlette.testclient import TestClient

    from diffusion_lsp.api.app import create_app
    from diffusion_lsp.api.metrics import Metrics
    from diffusion_lsp.api.service import Service
    from diffusion_lsp.worker.spec import WorkerSpec

    service = Service(WorkerSpec(tmp_path / "w.sock"), Metrics())
    service.backend = backend = RefusingBackend(limit)
    with TestClient(create_app(service, models=["diffusion-lsp"], max_tokens=4096)) as http:
        r = http.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "hi"}],
                                                    "max_tokens": 1000, "stream": stream})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "max_tokens" and "between 1 and 511, got 1000" in r.json()["error"]["message"]
    assert backend.asked == (limit is None)


def test_a_body_nested_too_deeply_to_read_says_so(tmp_path):
    """The re-run probe's case: a schema of allOf 1000 deep was refused as "the body is not JSON:
    maximum recursion depth exceeded", a body that is JSON."""
    from starlette.testclient import TestClient

    from diffusion_lsp.api.app import create_app
    from diffusion_lsp.api.metrics import Metrics
    from diffusion_lsp.api.service import Service
    from diffusion_lsp.worker.spec import WorkerSpec

    schema = '{"type": "string"}'
    for _ in range(1000):
        schema = '{"allOf": [' + schema + ']}'
    body = ('{"messages": [{"role": "user", "content": "hi"}], "response_format": {"type": "json_schema", '
            '"json_schema": {"name": "deep", "schema": ' + schema + '}}}')
    service = Service(WorkerSpec(tmp_path / "w.sock"), Metrics())
    service.backend = RefusingBackend(None)
    with TestClient(create_app(service, models=["diffusion-lsp"])) as http:
        r = http.post("/v1/chat/completions", content=body, headers={"content-type": "application/json"})
        assert r.status_code == 400 and r.json()["error"]["message"] == "the body is nested too deeply to read", r.text
        assert http.post("/v1/chat/completions", content="{", headers={"content-type": "application/json"}
                         ).json()["error"]["message"].startswith("the body is not JSON: ")
