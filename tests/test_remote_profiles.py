"""Server profiles (`--server`, backend/profiles.py) against fakes of vLLM, SGLang and Mercury that speak
each engine's OpenAI-compatible protocol as its code documents it (the sources are named in
profiles.py): the routes each has, the fields it refuses, the prompt its model sees. Each test compares
the recorded request bodies with the expected ones exactly and checks the fill that comes back; then
the settings that cannot work together, answers without a code fence or not JSON, and `fim` as a user
runs it."""

from __future__ import annotations

import asyncio
import json

import pytest

from remote_api import ENV, Api, client, complete
from diffusion_lsp.protocol.backend import LogReporter
from diffusion_lsp.protocol.failure import BackendError, Failure
from diffusion_lsp.protocol.requests import FillRequest, RewriteRequest
from diffusion_lsp.backend.profiles import EDIT_SYSTEM, FENCE_TOKENS, FILL_SYSTEM, ONE_LINE, fim_prompt
from diffusion_lsp.backend.remote import RemoteBackend
from diffusion_lsp.cli import main
from diffusion_lsp.protocol.settings import FIM_TEMPLATES, LaunchSettings
from diffusion_lsp.backend.api_client import RemoteError, RequestFailed
from diffusion_lsp.server.config import parse_config

PREFIX, SUFFIX = "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n"
QWEN = f"<|fim_prefix|>{PREFIX}<|fim_suffix|>{SUFFIX}<|fim_middle|>"
USER = f"```\n{PREFIX}<|cursor|>{SUFFIX}\n```"  # the chat format's user message
EDIT = "<|current_file_content|>\n<|code_to_edit|>\nx = 1<|cursor|>\n<|/code_to_edit|>\n<|/current_file_content|>"


# ---- the engines, as their code answers ----

class Engine:
    """A fake engine behind the scripted Api: `routes` answers by path, `prompts` records the prompt its
    model saw, the model says `output` (cut at the request's first stop, as the engines do)."""

    def __init__(self, api: Api, routes: dict, output: str = "a + b\n    # more", completion_template=None):
        self.routes, self.output, self.completion_template, self.prompts = routes, output, completion_template, []
        api.default = self.answer

    def answer(self, path, headers, body):
        route = self.routes.get(path.removeprefix("/v1"))
        return route(self, body) if route else (404, {"detail": "Not Found"})  # FastAPI's own 404

    def said(self, prompt, body) -> str:
        self.prompts.append(prompt)
        stops = body.get("stop") or []
        stops = [stops] if isinstance(stops, str) else stops
        cut = min([i for i in (self.output.find(s) for s in stops) if i >= 0], default=len(self.output))
        return self.output[:cut]

    def text(self, prompt, body):
        return 200, {"object": "text_completion", "choices": [{"index": 0, "text": self.said(prompt, body),
                                                               "finish_reason": "stop"}],
                     "usage": {"prompt_tokens": 9, "completion_tokens": 3, "total_tokens": 12}}

    def message(self, body):
        return 200, {"object": "chat.completion", "choices": [{"index": 0, "message": {
            "role": "assistant", "content": self.said(body["messages"], body)}, "finish_reason": "stop"}],
            "usage": {"completion_tokens": 5}}


def vllm_completions(engine, body):
    """vllm/renderers/online_renderer.py render_completion: any suffix that is not null is a 400 (in
    vLLM's ErrorResponse shape); unknown fields are ignored (OpenAIBaseModel extra="allow")."""
    if body.get("suffix") is not None:
        return 400, {"error": {"message": "suffix is not currently supported", "type": "BadRequestError",
                               "param": None, "code": 400}}
    return engine.text(body["prompt"], body)


def sglang_completions(engine, body):
    """serving_completions.py + parser/code_completion_parser.py: with --completion-template the prompt
    is templated unless suffix == "" (a missing suffix is written in as "None"); without it suffix is unread."""
    prompt, suffix = body["prompt"], body.get("suffix")
    if engine.completion_template is not None and suffix != "":
        prompt = engine.completion_template.replace("{prefix}", prompt).replace("{suffix}", str(suffix))
    return engine.text(prompt, body)


def chat(engine, body):
    return engine.message(body)


def mercury_fim(engine, body):
    return engine.text(("FIM", body["prompt"], body["suffix"]), body)


def mercury_edit(engine, body):
    """Inception's /v1/edit/completions: exactly one user message, no streaming."""
    messages = body.get("messages")
    if body.get("stream") or not (isinstance(messages, list) and len(messages) == 1 and messages[0]["role"] == "user"):
        return 400, {"error": {"message": "exactly one user message, no stream"}}
    return engine.message(body)


VLLM = {"/completions": vllm_completions, "/chat/completions": chat}
SGLANG = {"/completions": sglang_completions, "/chat/completions": chat}
MERCURY = {"/fim/completions": mercury_fim, "/edit/completions": mercury_edit, "/chat/completions": chat}


def asked(api: Api) -> list[tuple[str, dict]]:
    return [(path, body) for path, _, body in api.got]


def fill(api: Api, prefix=PREFIX, suffix=SUFFIX, max_tokens=16, one_line=False, **profile):
    c, _ = client(api, **profile)
    return complete(c, prefix, suffix, max_tokens, one_line)


# ---- fills, each profile ----

def test_vllm_gets_the_template_in_the_prompt_and_no_suffix(api):
    engine = Engine(api, VLLM)
    done = fill(api, server="vllm", fim_template="qwen")
    assert asked(api) == [("/v1/completions", {"model": "mercury-edit", "prompt": QWEN, "max_tokens": 16,
                                               "temperature": 0.0})]
    assert engine.prompts == [QWEN] and (done.text, done.tokens, done.route) == ("a + b\n    # more", 3, "/completions")
    one = fill(api, server="vllm", fim_template="qwen", one_line=True)
    assert api.got[1][2]["stop"] == ["\n"] and one.text == "a + b"


def test_the_generic_profile_against_vllm_is_refused_as_vllm_refuses_suffix(api):
    """Why --server vllm exists: vLLM has no /fim/completions, and its /completions refuses `suffix`."""
    Engine(api, VLLM)
    with pytest.raises(RequestFailed, match=r"rejected the request \(HTTP 400\): suffix is not currently supported"):
        fill(api)
    assert [path for path, _ in asked(api)] == ["/v1/fim/completions", "/v1/completions"]


@pytest.mark.parametrize("name, expected", [
    ("seed-coder", f"<[fim-suffix]>{SUFFIX}<[fim-prefix]>{PREFIX}<[fim-middle]>"),  # suffix first (SPM)
    ("codellama", f"<PRE> {PREFIX} <SUF>{SUFFIX} <MID>"),
    ("deepseek", f"<｜fim▁begin｜>{PREFIX}<｜fim▁hole｜>{SUFFIX}<｜fim▁end｜>"),
    ("<s>{prefix}<hole>{suffix}<fill>", f"<s>{PREFIX}<hole>{SUFFIX}<fill>"),  # a template of one's own
])
def test_each_named_or_custom_template_is_the_prompt_vllm_gets(api, name, expected):
    engine = Engine(api, VLLM)
    fill(api, server="vllm", fim_template=name)
    assert api.got[0][2]["prompt"] == expected == engine.prompts[0] and "suffix" not in api.got[0][2]


def test_a_template_is_filled_in_one_pass_so_code_holding_its_placeholders_stays():
    assert fim_prompt("qwen", "s = '{suffix}'", "t = '{prefix}'") == \
        "<|fim_prefix|>s = '{suffix}'<|fim_suffix|>t = '{prefix}'<|fim_middle|>"
    assert set(FIM_TEMPLATES) == {"qwen", "starcoder", "deepseek", "codellama", "seed-coder", "codestral"}


def test_sglang_without_a_template_sends_suffix_for_its_completion_template(api):
    engine = Engine(api, SGLANG, completion_template=FIM_TEMPLATES["qwen"])  # --completion-template qwen_coder
    done = fill(api, server="sglang")
    assert asked(api) == [("/v1/completions", {"model": "mercury-edit", "prompt": PREFIX, "suffix": SUFFIX,
                                               "max_tokens": 16, "temperature": 0.0})]
    assert engine.prompts == [QWEN] and done.text == "a + b\n    # more"


@pytest.mark.parametrize("launched_with", [None, FIM_TEMPLATES["starcoder"]])
def test_sglang_with_our_template_sends_an_empty_suffix_so_its_model_sees_our_prompt_either_way(api, launched_with):
    """An empty suffix keeps SGLang's own --completion-template off; a missing one would put "None" in."""
    engine = Engine(api, SGLANG, completion_template=launched_with)
    fill(api, server="sglang", fim_template="qwen", one_line=True)
    assert asked(api) == [("/v1/completions", {"model": "mercury-edit", "prompt": QWEN, "suffix": "",
                                               "max_tokens": 16, "temperature": 0.0, "stop": ["\n"]})]
    assert engine.prompts == [QWEN]


def test_mercury_fills_at_fim_completions_only(api):
    engine = Engine(api, MERCURY)
    done = fill(api, server="mercury", one_line=True)
    assert asked(api) == [("/v1/fim/completions", {"model": "mercury-edit", "prompt": PREFIX, "suffix": SUFFIX,
                                                   "max_tokens": 16, "temperature": 0.0, "stop": ["\n"]})]
    assert engine.prompts == [("FIM", PREFIX, SUFFIX)] and done.text == "a + b"
    api.got.clear()
    engine.routes = {}  # an API without /fim/completions: Mercury's profile asks nowhere else
    with pytest.raises(RemoteError, match=r"answered 404 \(not found\) at /fim/completions: Not Found") as e:
        fill(api, server="mercury")
    assert e.value.kind == "endpoint" and len(api.got) == 1


def test_the_generic_profile_still_falls_back_to_completions_with_suffix(api):
    engine = Engine(api, {"/completions": lambda e, body: e.text((body["prompt"], body["suffix"]), body)})
    done = fill(api)
    assert asked(api)[1] == ("/v1/completions", {"model": "mercury-edit", "prompt": PREFIX, "suffix": SUFFIX,
                                                 "max_tokens": 16, "temperature": 0.0})
    assert [p for p, _ in asked(api)] == ["/v1/fim/completions", "/v1/completions"] and done.route == "/completions"
    assert engine.prompts == [(PREFIX, SUFFIX)]


# ---- the chat format: an instruct model asked for the code at the cursor ----

@pytest.mark.parametrize("server, engine_routes", [("vllm", VLLM), ("sglang", SGLANG)])
def test_chat_asks_for_the_code_at_the_cursor_and_takes_it_out_of_the_fence(api, server, engine_routes):
    Engine(api, engine_routes, output="Here it is:\n```python\na + b\n```\nIt adds them.")
    done = fill(api, server=server, remote_format="chat")
    system = FILL_SYSTEM.format(one_line="")
    assert asked(api) == [("/v1/chat/completions", {
        "model": "mercury-edit", "messages": [{"role": "system", "content": system}, {"role": "user", "content": USER}],
        "max_completion_tokens": 16 + FENCE_TOKENS, "temperature": 0.0})]
    assert (done.text, done.tokens) == ("a + b", 5)


def test_a_one_line_chat_fill_is_its_codes_first_line_without_a_stop(api):
    Engine(api, VLLM, output="```python\nx = 1\ny = 2\n```")
    done = fill(api, server="vllm", remote_format="chat", one_line=True)
    body = api.got[0][2]
    assert "stop" not in body and body["messages"][0]["content"] == FILL_SYSTEM.format(one_line=ONE_LINE)
    assert done.text == "x = 1"


def test_a_chat_answer_cut_by_the_token_limit_keeps_what_its_fence_holds(api):
    Engine(api, SGLANG, output="```\nfor i in range(10):\n    total +=")
    assert fill(api, server="sglang", remote_format="chat").text == "for i in range(10):\n    total +="


def test_mercury_chat_names_its_limit_max_tokens(api):
    Engine(api, MERCURY, output="```\n1\n```")
    assert fill(api, server="mercury", remote_format="chat").text == "1"
    assert api.got[0][0] == "/v1/chat/completions" and api.got[0][2]["max_tokens"] == 16 + FENCE_TOKENS


@pytest.mark.parametrize("answer, message", [
    ((200, {"choices": [{"message": {"role": "assistant", "content": "Sure, use a + b."}}]}),
     "the chat answer has no ``` code fence"),
    ((200, b'{"choices": [{"message": {"content": "```\\n1\\n```"'), "not JSON"),
    ((200, {"choices": [{"message": {"role": "assistant", "content": None}}]}), r"no choices\[0\]\.text"),
])
def test_chat_answers_without_a_fence_or_not_json_are_one_line_failures(api, answer, message):
    api.script.append(answer)
    with pytest.raises(RequestFailed, match=message) as e:
        fill(api, server="vllm", remote_format="chat")
    assert e.value.kind == "answer" and "\n" not in str(e.value)


# ---- next edits ----

def backend(api: Api, **settings) -> RemoteBackend:
    import logging
    return RemoteBackend(LogReporter(logging.getLogger("test")), LaunchSettings(
        backend="openai", base_url=api.base, remote_model="m", api_key_env=ENV, **settings))


def rewrite(b: RemoteBackend):
    async def go():
        try:
            return await b.rewrite("k", RewriteRequest(EDIT, 40)), b.describe()
        finally:
            await b.close()
    return asyncio.run(go())


def test_a_chat_profile_rewrites_through_chat_with_the_tagged_user_message(api):
    Engine(api, VLLM, output="```python\nx = 2\n```")
    b = backend(api, server="vllm", remote_format="chat")
    done, described = rewrite(b)
    assert b.capabilities.rewrite and done.text == "```python\nx = 2\n```"  # mercury.rewritten takes the fence off
    assert asked(api) == [("/v1/chat/completions", {
        "model": "m", "messages": [{"role": "system", "content": EDIT_SYSTEM}, {"role": "user", "content": EDIT}],
        "max_completion_tokens": 40, "temperature": 0.0})]
    assert described["server"] == "vllm" and described["format"] == "chat" and described["rewrite"] is True


def test_mercury_rewrites_at_its_edit_endpoint_with_one_user_message(api):
    Engine(api, MERCURY, output="```\nx = 2\n```")
    done, _ = rewrite(backend(api, server="mercury"))
    assert asked(api) == [("/v1/edit/completions", {"model": "m", "messages": [{"role": "user", "content": EDIT}],
                                                    "max_tokens": 40, "temperature": 0.0})]
    assert done.text == "```\nx = 2\n```"


def test_a_completions_profile_without_an_edit_endpoint_declares_no_rewrite(api):
    b = backend(api, server="sglang", fim_template="qwen")
    assert not b.capabilities.rewrite and backend(api).capabilities.rewrite  # generic keeps /edit/completions
    with pytest.raises(BackendError, match="server sglang has no next-edit endpoint") as e:
        rewrite(b)
    assert e.value.kind is Failure.UNAVAILABLE and api.got == []


# ---- settings ----

BASE = {"backend": "openai", "base_url": "http://127.0.0.1:9/v1", "remote_model": "m"}


@pytest.mark.parametrize("settings, message", [
    ({"server": "vllm"}, "server vllm needs fim_template .*qwen, starcoder"),
    ({"server": "vllm", "fim_template": "<fim>{prefix}"}, r"fim_template='<fim>\{prefix\}' is not valid"),
    ({"server": "mercury", "fim_template": "qwen"}, "server mercury fills at /fim/completions with suffix"),
    ({"server": "tgi"}, "server='tgi' is not valid"),
    ({"remote_format": "responses"}, "remote_format='responses' is not valid"),
])
def test_settings_that_cannot_work_are_refused_when_made(settings, message):
    with pytest.raises(ValueError, match=message):
        LaunchSettings(**BASE, **settings)


def test_defaults_keep_todays_requests_and_flags():
    s = LaunchSettings(**BASE)
    assert (s.server, s.fim_template, s.remote_format) == ("generic", None, "completions")
    assert "--server" not in s.to_argv()
    chatty = LaunchSettings(**BASE, server="vllm", remote_format="chat")  # chat needs no template
    assert chatty.to_argv()[-4:] == ["--server", "vllm", "--remote-format", "chat"]


def test_editor_settings_name_the_profile_and_a_bad_combination_falls_back_with_a_message():
    model = {"backend": "openai", "baseUrl": "http://127.0.0.1:9/v1", "remoteModel": "m"}
    cfg, problems = parse_config({"model": {**model, "server": "vllm", "fimTemplate": "seed-coder"}})
    assert (cfg.model.server, cfg.model.fim_template, problems) == ("vllm", "seed-coder", [])
    cfg, problems = parse_config({"model": {**model, "server": "vllm"}})
    assert cfg.model.backend == "local" and len(problems) == 1 and "server vllm needs fim_template" in problems[0]


def test_the_completer_fills_through_a_vllm_chat_profile_from_editor_settings(api):
    from conftest import RecordingUi
    from remote_api import DOC
    from diffusion_lsp.candidate import Candidate, Source
    from diffusion_lsp.server.completion import Completer
    from diffusion_lsp.server.positions import UTF16
    from diffusion_lsp.server.stats import Stats

    Engine(api, VLLM, output="```python\nos.getcwd()\n```")
    cfg = parse_config({"model": {"backend": "openai", "baseUrl": api.base, "remoteModel": "m", "apiKeyEnv": ENV,
                                  "server": "vllm", "remoteFormat": "chat"}, "completion": {"confidenceCut": 0.0}})[0]
    ui = RecordingUi()
    link = RemoteBackend(ui, cfg.model)
    completer = Completer(link, Stats(), ui.log)
    completer.configure(cfg)

    async def go():
        try:
            return await completer.complete(DOC, 1, 0, UTF16)
        finally:
            await link.close()

    assert asyncio.run(go()) == Candidate.at(DOC.text.index("\n") + 1, "os.getcwd()", Source.MODEL) and ui.shown == []
    user = api.got[0][2]["messages"][1]["content"]
    assert user == "```\nimport os\n<|cursor|>\nprint(os.sep)\n\n```" and api.got[0][0] == "/v1/chat/completions"


# ---- the command line ----

def test_fim_with_server_vllm_as_a_user_runs_it(api, tmp_path, capsys):
    path = tmp_path / "a.py"
    path.write_text(PREFIX + SUFFIX)
    engine = Engine(api, VLLM)
    flags = ["--backend", "openai", "--server", "vllm", "--base-url", api.base, "--remote-model", "m",
             "--api-key-env", ENV]
    code = main(["fim", str(path), "--at", "2:12", *flags, "--fim-template", "qwen", "--one-line", "--json"])
    assert code == 0 and json.loads(capsys.readouterr().out)["text"] == "a + b"
    assert engine.prompts == [QWEN]
    assert main(["fim", str(path), "--at", "2:12", *flags]) == 2
    assert "server vllm needs fim_template" in capsys.readouterr().err and len(api.got) == 1


# ---- edits from an instruction: every server through its chat endpoint ----

@pytest.mark.parametrize("server, routes, limit", [("vllm", VLLM, "max_completion_tokens"),
                                                   ("sglang", SGLANG, "max_completion_tokens"),
                                                   ("mercury", MERCURY, "max_tokens"),
                                                   ("generic", MERCURY, "max_tokens")])
def test_an_instruction_edit_asks_the_chat_endpoint_and_takes_the_code_out_of_its_fence(api, server, routes, limit):
    from diffusion_lsp.protocol.requests import InstructRequest
    from diffusion_lsp.backend.profiles import FENCE_TOKENS, INSTRUCT_SYSTEM
    from diffusion_lsp.formats.instruct import chat_content

    Engine(api, routes, output="Sure:\n```python\nreturn sum(xs)\n```\nDone.")
    # the completions format (vLLM's with its FIM template): the edit still goes through chat
    b = backend(api, server=server, **({"fim_template": "qwen"} if server == "vllm" else {}))
    order = InstructRequest("def total(xs):\n", "    s = 0\n    return s\n", "\nprint(1)\n", "use sum()", 30)

    async def go():
        try:
            return await b.instruct("k", order)
        finally:
            await b.close()
    done = asyncio.run(go())
    assert done.text == "return sum(xs)"
    ((path, body),) = asked(api)
    assert path == "/v1/chat/completions" and body[limit] == 30 + FENCE_TOKENS
    assert body["messages"] == [{"role": "system", "content": INSTRUCT_SYSTEM},
                                {"role": "user", "content": chat_content(order)}]
    assert "use sum()" in chat_content(order) and "<|code_to_edit|>\n    s = 0\n    return s\n\n<|/code_to_edit|>" \
        in chat_content(order)


def test_an_instruction_edit_answered_without_a_fence_is_a_clear_failure(api):
    from diffusion_lsp.protocol.failure import BackendError
    from diffusion_lsp.protocol.requests import InstructRequest

    Engine(api, VLLM, output="I would use sum here.")
    b = backend(api, server="vllm", remote_format="chat")

    async def go():
        try:
            return await b.instruct("k", InstructRequest("", "x = 1\n", "", "rename x", 10))
        finally:
            await b.close()
    with pytest.raises(BackendError, match="no ``` code fence"):
        asyncio.run(go())
