"""Chat templates and messages under hostile input (model/chat/sandbox.py, model/chat/template_bounds.py,
model/chat/conversation.py): a template that loops or builds a huge value is a one-line ValueError within the
render's budget, whatever construct it uses; client data nested past MAX_DEPTH is refused naming its
field before anything recurses on it; a template that breaks a bound on a short conversation is
refused where it is read (serve-api exits 2 with one line, `fim --model` on a checkpoint asked in a
chat turn ends with one line), and serve-api renders each conversation in its own process: a request
that breaks a bound is a 400 naming messages and the model goes on answering."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from diffusion_lsp.api.bodies import BadRequest
from diffusion_lsp.api.chat import parse_chat
from diffusion_lsp.engine import DEFAULT_MODEL, load_engine
from diffusion_lsp.model.chat import template_bounds
from diffusion_lsp.model.chat.conversation import conversation, launch_template
from diffusion_lsp.model.chat.prompting import MAX_DEPTH, TemplateOverBound, chat_template, render_chat
from diffusion_lsp.protocol.settings import LaunchSettings

HELLO = [{"role": "user", "content": "Hello"}]
PLAIN = ("{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}\n{% endfor %}"
         "{% if add_generation_prompt %}<|assistant|>\n{% endif %}")
# each construct the probe of the issue found, and the others a template could grow or repeat through
HOSTILE = {
    "nested ranges": "{% for i in range(10**5) %}{% for j in range(10**5) %}{% endfor %}{% endfor %}",
    "a string repeated": "{{ 'x' * 10**10 }}",
    "the messages repeated": "{% for m in messages * 10**9 %}{{ m.content }}{% endfor %}",
    "a huge tojson indent": "{{ messages | tojson(indent=10**9) }}",
    "a tojson indent past the bound": "{{ messages | tojson(indent=1000) }}",
    "a huge power": "{{ 10**(10**8) }}",
    "loops over a string": "{% set a = 'x' * 4000000 %}{% for x in a %}{% for y in a %}{% endfor %}{% endfor %}",
    "a set block that grows": "{% set a = 'x' * 4000000 %}{% set b %}{% for i in range(100000) %}{{ a }}"
                              "{% endfor %}{% endset %}{{ b | length }}",
    "literal text in a loop": "{% set b %}{% for i in range(100000) %}" + "y" * 100000 + "{% endfor %}{% endset %}",
    "concatenation": "{% set a = 'x' * 4000000 %}{% set b = a~a~a~a~a~a~a~a %}{% set c = b~b~b~b~b~b~b~b %}{{ c }}",
    "a namespace that doubles": "{% set ns = namespace(s='x') %}{% for i in range(64) %}{% set ns.s = ns.s ~ ns.s %}"
                                "{% endfor %}{{ ns.s }}",
    "a macro that doubles": "{% macro f(s, n) %}{% if n %}{{ f(s ~ s, n - 1) }}{% endif %}{% endmacro %}"
                            "{{ f('x', 60) }}",
    "a macro that branches": "{% macro f(n) %}{% if n %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
                             "{{ f(40) }}",
    "a filter's width": "{{ 'x' | center(10**9) }}",
    "a method's width": "{{ 'x'.ljust(10**9) }}",
    "a %-format width": "{{ '%1000000000s' % 'x' }}",
    "a format() width": "{{ '{:>1000000000}'.format('x') }}",
    "a format filter width": "{{ '%1000000000s' | format('x') }}",
    "slices in loops": "{% for s in [1] | slice(100000) %}{% for t in [1] | slice(100000) %}{% endfor %}{% endfor %}",
    "a replace": "{{ ('x' * 100000).replace('', 'y' * 100000) }}",
    "a join": "{{ ('y' * 1000000).join(range(100000) | map('string')) }}",
    "a join filter": "{{ range(100000) | map('string') | join('y' * 1000000) }}",
    "an indent of many lines": "{{ ('a\n' * 100000) | indent(1000) }}",
    "a wordwrap": "{{ ('a ' * 1000000) | wordwrap(1, wrapstring='y' * 100000) }}",
    "an expandtabs": "{{ ('\t' * 10000).expandtabs(100000) }}",
    "a translate": "{{ ('x' * 100000).translate({120: 'y' * 100000}) }}",
}


@pytest.fixture
def quick(monkeypatch):
    monkeypatch.setattr(template_bounds, "BUDGET_S", 0.3)  # the wall-clock bound, short for the tests


@pytest.mark.parametrize("name", HOSTILE)
def test_a_template_that_loops_or_grows_is_a_one_line_error(quick, name):
    with pytest.raises(TemplateOverBound, match=r"^the chat template failed: [^\n]*$"):
        render_chat(HOSTILE[name], HELLO, {})


@pytest.mark.parametrize("template, said", [
    ("{{ range(100000) | join('y' * 100000) }}", "it asks a join of 9999900002"),
    ("{{ ('x' * 100000) | join('y' * 100000) }}", "it asks a join of 10000100000"),
    ("{{ range(20000) | join('y' * 100000) }}", "it asks a join of 1999900002"),
    ("{% set a = ['y' * 4000000] * 100000 %}{{ a }}", "it writes more than"),
    ("{% set a = ['y' * 4000000] * 100000 %}{{ a | join(',') }}", "it asks a join"),
    ("{% set a = 'x' * 4000000 %}{{ " + " ~ ".join(["a"] * 12) + " }}", "it writes more than"),
], ids=["a range joined", "a string's characters joined", "a shorter range joined", "a list of one string printed", "a list of one string joined", "a twelve-way ~"])
def test_what_a_value_would_make_is_counted_before_it_is_made(template, said):
    """The probe's cases: a join of a range ran in one C call for 11 s to 9.8 GB (and held the API's
    event loop) before the output's bound saw it; a list printed, or pieces joined by `~`, were made
    whole first."""
    with pytest.raises(TemplateOverBound, match=said):
        render_chat(template, HELLO, {})


def test_lipsum_is_not_offered():
    with pytest.raises(ValueError, match="^the chat template failed: 'lipsum' is undefined$"):
        render_chat("{{ lipsum(n=10**6) }}", HELLO, {})


def test_what_a_template_is_allowed_still_renders():
    """The bounded environment renders ranges, loops, filters, formats, macros and tojson as before."""
    template = ("{% macro turn(m) %}<{{ m.role }}>{{ m.content | trim }}{% endmacro %}"
                "{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{{ turn(m) }}"
                "{% endfor %}|{{ range(3) | list | join(',') }}|{{ '%-4s|' % 'ab' }}{{ '{:>3}'.format(7) }}"
                "|{{ ns.n }}|{{ tools | tojson(indent=2) }}|{{ 'ab' * 3 }}|{{ 2 ** 10 }}|"
                "{% for i in range(2) | reverse %}{{ i }}{{ loop.length }}{% endfor %}"
                "|{{ 'a\nb' | indent(2) }}|{{ 'a\tb'.expandtabs(4) }}|{{ 'abc'.replace('b', 'xx') }}")
    out = render_chat(template, HELLO + [{"role": "assistant", "content": " hi "}], {}, True,
                      [{"type": "function", "function": {"name": "f"}}])
    assert out == ('<user>Hello<assistant>hi|0,1,2|ab  |  7|2|[\n  {\n    "type": "function",\n    "function": '
                   '{\n      "name": "f"\n    }\n  }\n]|ababab|1024|1202|a\n  b|a   b|axxc')


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 500, 100_000])
def test_tool_call_arguments_nested_past_the_bound_are_refused_naming_them(depth):
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": nested(depth)}}]}
    with pytest.raises(ValueError, match=r"^messages\[1\]\.tool_calls\[0\]\.function\.arguments nests deeper"):
        conversation(HELLO + [call])
    with pytest.raises(BadRequest) as e:
        parse_chat({"messages": HELLO + [call]}, 64)
    assert e.value.param == "messages"


def test_tools_nested_past_the_bound_are_refused_naming_them():
    deep = {"type": "object"}
    for _ in range(MAX_DEPTH):
        deep = {"type": "object", "properties": {"a": deep}}
    tools = [{"type": "function", "function": {"name": "f", "parameters": deep}}]
    with pytest.raises(BadRequest) as e:
        parse_chat({"messages": HELLO, "tools": tools}, 64)
    assert e.value.param == "tools" and "tools[0] nests deeper" in str(e.value)


def test_arguments_within_the_bound_still_render():
    args = json.loads(nested(MAX_DEPTH - 1))
    call = {"role": "assistant", "content": "", "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "f", "arguments": json.dumps(args)}}]}
    messages, _ = conversation(HELLO + [call])
    rendered = render_chat("{{ messages[1].tool_calls[0].function.arguments | tojson }}", messages, {})
    assert rendered == json.dumps(args)


def test_data_nested_past_the_bound_given_directly_is_a_value_error():
    with pytest.raises(ValueError, match="nests deeper"):
        render_chat("{{ messages }}", [{"role": "user", "content": json.loads(nested(500))}], {})


def test_a_template_that_breaks_a_bound_is_refused_where_it_is_read(quick, tmp_path):
    (tmp_path / "loops.jinja").write_text(HOSTILE["nested ranges"])
    with pytest.raises(ValueError, match=r"^[^\n]*loops\.jinja: the chat template failed: it ran past"):
        launch_template(tmp_path, str(tmp_path / "loops.jinja"))
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": HOSTILE["a string repeated"]}))
    with pytest.raises(ValueError, match=r"tokenizer_config\.json: chat_template: the chat template failed"):
        chat_template(folder)
    with pytest.raises(ValueError, match="repetition"):
        launch_template(folder)
    # one that merely raises on a conversation is left to answer per request
    (tmp_path / "picky.jinja").write_text("{{ raise_exception('no system message') }}")
    assert launch_template(tmp_path, str(tmp_path / "picky.jinja")).template.startswith("{{ raise_exception")


def test_a_chat_turn_familys_prompt_is_rendered_when_it_loads(quick, tmp_path):
    """A family asked in a chat turn (LLaDA2) renders its user turn once, as the checkpoint loads: a
    template that passes the short conversation but breaks a bound on that turn is refused there, not
    at each fill on the model's thread."""
    from diffusion_lsp.model.families.table import FAMILIES
    from diffusion_lsp.model.chat.prompting import prompter_for

    # a short message renders; the fill's turn (a longer one) builds a huge value
    template = "{% if messages[0].content | length > 10 %}{{ 'x' * 10**10 }}{% endif %}" + PLAIN
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    assert chat_template(tmp_path) == template
    with pytest.raises(TemplateOverBound, match="repetition"):
        prompter_for(FAMILIES["llada2"], None, tmp_path)
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": PLAIN}))
    assert prompter_for(FAMILIES["llada2"], None, tmp_path).turn == ("<|user|>\n", "\n<|assistant|>\n")


def test_a_conversation_rendered_elsewhere_is_the_same_prompt(tmp_path):
    """serve-api renders a conversation in its own process (ChatTemplate.segments) and the worker only
    reads the rendering: the ids are the ones the worker's own rendering gives."""
    (tmp_path / "t.jinja").write_text(PLAIN)
    engine = load_engine(LaunchSettings(chat_template=str(tmp_path / "t.jinja"), threads=1))
    template = launch_template(DEFAULT_MODEL, str(tmp_path / "t.jinja"))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": 'Say "<|user|>"'}]
    raw = {"messages": messages, "tools": None}
    rendered = {**raw, "rendered": template.segments(messages)}
    ids = engine.chat_prompt(json.dumps(rendered), 8)
    assert ids == engine.chat_prompt(json.dumps(raw), 8) and ids
    with pytest.raises(ValueError, match="pairs"):
        engine.chat_prompt(json.dumps({**raw, "rendered": [["a"]]}), 8)


def run_cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "diffusion_lsp", *args], capture_output=True, text=True,
                          timeout=timeout)


def one_line_error(done: subprocess.CompletedProcess) -> str:
    assert done.returncode != 0, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    return lines[0]


@pytest.mark.slow
def test_serve_api_refuses_a_template_that_breaks_a_bound_at_start(tmp_path):
    (tmp_path / "huge.jinja").write_text(HOSTILE["a string repeated"])
    done = run_cli("serve-api", "--chat-template", str(tmp_path / "huge.jinja"), "--port", "1")
    assert done.returncode == 2
    assert "huge.jinja: the chat template failed: it asks a repetition" in one_line_error(done)
    folder = tmp_path / "checkpoint"  # a checkpoint's own template: refused before any worker loads it
    folder.mkdir()
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": HOSTILE["a huge power"]}))
    done = run_cli("serve-api", "--model", str(folder), "--port", "1")
    assert done.returncode == 2
    assert "chat_template: the chat template failed: it asks a power" in one_line_error(done)


@pytest.mark.slow
def test_fim_on_a_chat_turn_checkpoint_whose_template_loops_ends_with_one_line(tmp_path):
    pytest.importorskip("transformers")
    from native_models import write_diffusion_gemma

    folder = write_diffusion_gemma(tmp_path / "gemma")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": HOSTILE["nested ranges"]}))
    (tmp_path / "a.py").write_text("def f():\n    return 1\n")
    done = run_cli("fim", "--model", str(folder), str(tmp_path / "a.py"), "--at", "2:5", "--max-tokens", "4")
    assert "chat_template: the chat template failed: it ran past its" in one_line_error(done)


@pytest.mark.slow
def test_serve_api_answers_400_for_a_conversation_that_breaks_a_bound_and_keeps_answering(tmp_path):
    from test_api import Api

    # renders a short conversation, and loops on a conversation with tools
    (tmp_path / "t.jinja").write_text("{% if tools %}" + HOSTILE["nested ranges"] + "{% endif %}" + PLAIN)
    server = Api(DEFAULT_MODEL, tmp_path / "run", "--chat-template", str(tmp_path / "t.jinja"), "--timeout", "60")
    try:
        chat = server.base + "/v1/chat/completions"
        looping = {"messages": HELLO, "max_tokens": 4, "tool_choice": "none",
                   "tools": [{"type": "function", "function": {"name": "f"}}]}
        deep = {"messages": HELLO + [{"role": "assistant", "content": "", "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "f", "arguments": nested(500)}}]}], "max_tokens": 4}
        for body, said in ((looping, "ran past its"), (deep, "nests deeper")):
            r = httpx.post(chat, json=body, timeout=60)
            assert r.status_code == 400, r.text
            assert r.json()["error"]["param"] == "messages" and said in r.json()["error"]["message"]
        r = httpx.post(chat, json={**looping, "stream": True}, timeout=60)  # rendered before the stream starts
        assert r.status_code == 400 and r.json()["error"]["param"] == "messages", r.text
        pid = server.worker_pid()
        r = httpx.post(chat, json={"messages": HELLO, "max_tokens": 4}, timeout=60)
        assert r.status_code == 200, r.text
        r = httpx.post(server.base + "/v1/completions", json={"prompt": "def f(", "suffix": "\n", "max_tokens": 4},
                       timeout=60)
        assert r.status_code == 200, r.text
        assert server.worker_pid() == pid
    finally:
        server.close()
