"""A model transformers runs natively (model/families/native.py): a tiny DiffusionGemma folder written by
transformers, whose fills through our engine equal transformers' own `generate` token for token
(the same seed, prompt and generation_config.json), streamed a step at a time, stopped between
steps, put to the model through its chat template (model/chat/prompting.py), and served through the
command line, `model check`, the worker and the language server."""

from __future__ import annotations

import asyncio
import json
import math
import sys
from pathlib import Path

import pytest
import torch

from diffusion_lsp.protocol.failure import BackendError, Failure
from diffusion_lsp.backend.local import LocalBackend
from diffusion_lsp.protocol.requests import FillRequest, ProbeRequest, RewriteRequest
from diffusion_lsp.cli import main
from diffusion_lsp.engine import NativeEngine, load_engine
from diffusion_lsp.model.families.checkpoint import CheckpointError
from diffusion_lsp.model.families.native import SEED, end_ids, prompt_room
from diffusion_lsp.model.families.native_load import load_native
from diffusion_lsp.model.chat.prompting import CURSOR, Prompter, answer_text, render_chat
from diffusion_lsp.protocol.settings import LaunchSettings, SamplerConfig
from diffusion_lsp.formats import mercury

from native_models import GEMMA_TEMPLATE, write_diffusion_gemma

transformers = pytest.importorskip("transformers")

CODE = ("def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n")


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    return write_diffusion_gemma(tmp_path_factory.mktemp("native") / "diffusiongemma")


@pytest.fixture(scope="module")
def engine(folder) -> NativeEngine:
    return load_engine(LaunchSettings(path=str(folder), threads=1))


def generated(engine: NativeEngine, prompt: list[int], n: int) -> list[int]:
    """transformers' own generation of n tokens after `prompt`, from SEED, to the first end token."""
    with torch.random.fork_rng():
        torch.manual_seed(SEED)
        out = engine.model.generate(torch.tensor([prompt]), max_new_tokens=n).sequences[0, len(prompt):].tolist()
    return next((out[:k] for k, t in enumerate(out) if t in end_ids(engine.model, engine.tokenizer)), out)[:n]


def decoded(engine: NativeEngine, orders: list[FillRequest]):
    decoding = engine.decode_orders(orders, [""] * len(orders))
    turns = [t for t in decoding]
    return decoding, turns


def room(engine: NativeEngine, n: int) -> int:
    return prompt_room(engine.model, n)


@pytest.mark.parametrize("n", [5, 16, 40])  # within a canvas, exactly one, and three canvases of 16
def test_a_fill_equals_transformers_generation_token_for_token(engine, n):
    decoding, _ = decoded(engine, [FillRequest(*CODE, n)])
    ours = decoding.result(0)
    theirs = generated(engine, engine.prompter.fill(*CODE, room(engine, n)), n)
    assert ours.token_ids == theirs and len(theirs) > 0
    assert ours.forwards >= math.ceil(len(theirs) / engine.model.config.canvas_length)
    assert len(ours.confidence) == len(ours.pieces) == len(theirs) and all(0 < c <= 1 for c in ours.confidence)


def test_every_denoising_forward_gives_the_logits_of_transformers_generation(engine):
    model, seen = engine.model, []
    forward = model.forward

    def recording(*args, **kwargs):  # both loops call model.forward for each denoising step
        out = forward(*args, **kwargs)
        seen.append(out.logits.detach().clone())
        return out

    model.forward = recording
    try:
        decoded(engine, [FillRequest(*CODE, 40)])
        ours, seen[:] = list(seen), []
        generated(engine, engine.prompter.fill(*CODE, room(engine, 40)), 40)
        theirs = list(seen)
    finally:
        del model.forward
    assert len(ours) == len(theirs) > 3  # three canvases' steps
    assert max(float((a - b).abs().max()) for a, b in zip(ours, theirs)) <= 1e-3


def test_a_fill_differs_from_a_generation_with_another_seed_so_the_comparison_can_fail(engine):
    prompt = engine.prompter.fill(*CODE, room(engine, 16))
    decoding, _ = decoded(engine, [FillRequest(*CODE, 16)])
    with torch.random.fork_rng():
        torch.manual_seed(SEED + 1)
        other = engine.model.generate(torch.tensor([prompt]), max_new_tokens=16).sequences[0, len(prompt):].tolist()
    assert decoding.result(0).token_ids != other[:16]


def test_orders_of_a_batch_are_each_their_own_generation(engine):
    orders = [FillRequest(*CODE, 8), FillRequest("import os\n", "", 8), FillRequest(*CODE, 8, one_line=True)]
    decoding, _ = decoded(engine, orders)
    for i, order in enumerate(orders[:2]):
        assert decoding.result(i).token_ids == generated(engine, engine.prompter.fill(order.prefix, order.suffix,
                                                                                     room(engine, 8)), 8)
    one_line = decoding.result(2)
    assert "\n" not in one_line.text and decoding.result(0).text.startswith(one_line.text)


def test_drafts_come_after_each_step_and_a_stopped_fill_is_cancelled_between_steps(engine):
    order = FillRequest(*CODE, 16, drafts=True)
    decoding = engine.decode_orders([order, FillRequest(*CODE, 16)], ["a", "b"])
    turns = iter(decoding)
    first = next(turns)
    assert [i for i, _ in first] == [0] and first[0][1].step == 1 and first[0][1].text
    decoding.stop(0)
    rest = list(turns)
    assert all(i != 0 for turn in rest for i, _ in turn)
    assert decoding.result(0).cancelled and not decoding.result(1).cancelled
    assert sorted(decoding.take_finished()) == [0, 1]
    with pytest.raises(ValueError, match="cannot be joined"):
        engine.join(decoding, [order], ["c"])


def test_a_time_budget_stops_the_denoising_early(engine):
    decoding = engine.decode_orders([FillRequest(*CODE, 16, sampling=SamplerConfig(time_budget_ms=0.0))], [""])
    list(decoding)
    r = decoding.result(0)
    assert r.budget_hit and r.forwards == 1


def test_the_prompt_is_the_checkpoints_chat_template_as_transformers_renders_it(folder, engine):
    hf_tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    conversations = [[{"role": "user", "content": "hi"}],
                     [{"role": "user", "content": "a\n"}, {"role": "assistant", "content": " b "},
                      {"role": "user", "content": 'say "{x}" <tag>'}]]
    special = dict(engine.prompter.special)
    for messages in conversations:
        for gen in (True, False):
            ours = render_chat(GEMMA_TEMPLATE, messages, special, add_generation_prompt=gen)
            assert ours == hf_tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=gen)
    # the prompt's markup, our role tokens (its bos) left out (Tokenizer.decode gives a fill's text: no markup)
    tok = engine.tokenizer
    text = tok.hf.decode([i for i in engine.prompter.fill(*CODE, 400) if i not in tok.special_ids],
                         skip_special_tokens=False)
    assert text.startswith("<start_of_turn>user\nComplete the code at") and text.endswith("<start_of_turn>model\n")
    assert CODE[0] + CURSOR + CODE[1].rstrip() in text
    with pytest.raises(ValueError, match="the chat template failed: nope"):
        render_chat("{{ raise_exception('nope') }}", [], {})


def test_a_long_file_is_cut_to_the_prompts_room_around_the_cursor(engine):
    prefix, suffix = "x = 1\n" * 400 + "def f():\n    return ", "\n" + "y = 2\n" * 400
    ids = engine.prompter.fill(prefix, suffix, 200)
    text = engine.tokenizer.decode(ids)
    assert len(ids) <= 200 and "def f():\n    return " + CURSOR in text
    assert text.count("y = 2") >= 3  # a quarter of the room is the suffix's


def test_fim_tokens_go_in_as_ids_and_code_that_spells_one_stays_text(engine):
    tok = engine.tokenizer
    fim = tuple(tok.hf.token_to_id(t) for t in ("<start_of_turn>", "<end_of_turn>", "<mask>"))
    ids = Prompter("fim", tok, fim_ids=fim).fill("a = '<end_of_turn>'\n", "b\n", 100)
    assert ids[0] == fim[0] and ids[-1] == fim[2] and ids.count(fim[1]) == 1


def test_an_instruct_answer_keeps_the_code_of_its_fence():
    assert answer_text("Here it is:\n```python\nreturn a + b\n```\nDone.", "chat") == "return a + b"
    assert answer_text("a + b<|cursor|>", "chat") == "a + b" and answer_text("```x", "fim") == "```x"


def test_load_engine_picks_transformers_for_a_native_folder_and_refuses_int8(folder):
    engine = load_engine(LaunchSettings(path=str(folder)))
    assert isinstance(engine, NativeEngine) and engine.meta["family"] == "diffusiongemma"
    caps = engine.capabilities
    assert (caps.probe, caps.rewrite, caps.drafts, caps.chat, caps.structured) == (False, True, True, True, False)
    assert engine.tokenizer.hf.token_to_id("<end_of_turn>") in engine.chat_format.ends  # ends a chat answer
    with pytest.raises(ValueError, match="int8"):
        load_engine(LaunchSettings(path=str(folder), precision="int8"))


def test_without_transformers_the_folder_is_refused_with_what_to_install(folder, monkeypatch):
    monkeypatch.setitem(sys.modules, "transformers", None)  # import transformers raises ImportError
    with pytest.raises(CheckpointError, match=r"diffusion-lsp\[transformers\]"):
        load_native(folder)


def test_a_transformers_outside_the_supported_range_is_refused_before_the_weights_load(folder, monkeypatch):
    # the module `import transformers` gives now: transformers puts another in sys.modules once a model class is read
    monkeypatch.setattr(sys.modules["transformers"], "__version__", "6.0.0")
    with pytest.raises(RuntimeError, match=r"^transformers 6\.0\.0 is installed, outside the range diffusion-lsp "
                                           r"supports \(transformers>=5\.24,<6\), whose "
                                           r"transformers\.DiffusionGemmaForBlockDiffusion it calls"):
        load_native(folder)


def test_a_fill_whose_model_lacks_a_private_step_fails_before_its_first_step(engine, monkeypatch):
    mixin = next(c for c in type(engine.model).__mro__ if "_denoising_step" in vars(c))
    monkeypatch.delattr(mixin, "_denoising_step")
    decoding = engine.decode_orders([FillRequest(*CODE, 16)], [""])
    with pytest.raises(RuntimeError, match=r"^transformers 5\.\d+\.\S+ has no DiffusionGemmaForBlockDiffusion"
                                           r"\._denoising_step, which diffusion-lsp calls; it supports "
                                           r"transformers>=5\.24,<6"):
        list(decoding)


def test_corrupt_weights_are_a_checkpoint_error(folder, tmp_path):
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in folder.iterdir():
        (bad / f.name).write_bytes(f.read_bytes())
    (bad / "model.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json")
    with pytest.raises(CheckpointError, match="model.safetensors is corrupt"):  # its header, read before transformers
        load_native(bad)
    (bad / "model.safetensors").unlink()
    (bad / "pytorch_model.bin").write_bytes(b"never unpickled")
    with pytest.raises(CheckpointError, match="only pickled weights .pytorch_model.bin., which are never unpickled"):
        load_native(bad)


def test_fim_and_model_check_on_the_command_line(folder, tmp_path, capsys, engine):
    src = tmp_path / "add.py"
    src.write_text(CODE[0] + CODE[1])
    assert main(["fim", str(src), "--at", "2:12", "--model", str(folder), "--max-tokens", "12", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    decoding, _ = decoded(engine, [FillRequest(*CODE, 12)])
    assert got["text"] == decoding.result(0).text and got["tokens"] == len(decoding.result(0).token_ids)
    assert main(["model", "check", str(folder), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["family"] == "diffusiongemma" and report["prompt"] == "chat" and report["canvas_length"] == 16
    assert report["reference"]["equal"] is True and report["reference"]["tokens"] > 0
    assert main(["model", "check", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "prompt: chat" in out and "equal token for token" in out


def test_a_rewrite_puts_the_tagged_region_in_the_prompt_and_a_probe_is_refused(engine):
    content = mercury.edit_request("a.py", "x = 1\n", "y = x\n", 0, "print(y)\n", [], lambda s: len(s.split()), 200)
    backend = LocalBackend(engine)
    assert (backend.capabilities.probe, backend.capabilities.rewrite) == (False, True)
    fill = asyncio.run(backend.rewrite("a", RewriteRequest(content, 12)))
    prompt = engine.prompter.rewrite(content, room(engine, 12))
    assert fill.text == answer_text(engine.tokenizer.decode(generated(engine, prompt, 12)), "chat")
    with pytest.raises(BackendError) as e:
        asyncio.run(backend.probe("a", ProbeRequest("x", "y", "z")))
    assert e.value.kind is Failure.INVALID and "no probe" in str(e.value)


@pytest.mark.slow
def test_the_server_completes_and_asks_next_edits_through_a_rewrite_prompt(folder, tmp_path):
    from lsprotocol import types

    from conftest import complete, loads_ended, open_doc, start_server, stop_server, within

    caps = types.ClientCapabilities(
        window=types.WindowClientCapabilities(work_done_progress=True),
        text_document=types.TextDocumentClientCapabilities(
            inline_completion=types.InlineCompletionClientCapabilities()))
    options = {"completion": {"confidenceCut": 0.0, "debounceMs": 0}, "worker": {"idleExitS": 0},
               "model": {"threads": 1}, "nextEdit": {"enable": True, "minConfidence": 0.0}}

    async def run():
        client = await start_server(folder, tmp_path / "worker.sock", caps, options)
        try:
            open_doc(client, "file:///add.py", CODE[0] + CODE[1])
            await loads_ended(client, 1)
            await complete(client, "file:///add.py", 1, 11)
            asked = {"textDocument": {"uri": "file:///add.py", "version": 1}, "position": {"line": 1, "character": 11}}
            await within(client.protocol.send_request_async("textDocument/copilotInlineEdit", asked))
            report = await within(client.protocol.send_request_async("diffusionLsp/stats", {}))
            return report, [m.message for m in client.log_messages]
        finally:
            await stop_server(client)

    report, logs = asyncio.run(run())
    assert report.worker.state == "ready" and report.counts.model_calls >= 1 and report.counts.errors == 0
    assert report.worker.capabilities.probe is False and report.worker.capabilities.rewrite is True
    assert [r.mode for r in report.next_edit.recent] == ["api"]  # the rewrite prompt, not a probe
    assert not [m for m in logs if "failed" in m]


def test_serve_api_refuses_int8_for_a_native_model_before_it_starts(folder, capsys):
    assert main(["serve-api", "--model", str(folder), "--precision", "int8", "--port", "9"]) == 2
    assert "--precision int8: int8 weights are for our own models" in capsys.readouterr().err


def test_a_conversation_is_answered_by_its_own_generation_and_json_is_refused(engine):
    """Chat through a model transformers runs: the conversation in its own template (model/chat/conversation.py),
    the answer transformers' own generation of it; constrained output is not offered (its canvas is
    transformers' own decoding)."""
    from diffusion_lsp.protocol.requests import StructuredRequest

    chat = json.dumps({"messages": [{"role": "system", "content": "Be brief."},
                                    {"role": "user", "content": "Add two numbers in Python."}]})
    (fill,) = engine.answer([FillRequest("", "", 12, chat=chat)], [""])
    prompt = engine.chat_prompt(chat, 12)
    rendered = render_chat(GEMMA_TEMPLATE, json.loads(chat)["messages"], {"bos_token": "<bos>"})
    assert engine.tokenizer.hf.decode(prompt, skip_special_tokens=False) == rendered
    assert fill.text == engine.tokenizer.decode(generated(engine, prompt, 12))
    with pytest.raises(ValueError, match="under constraints"):
        engine.answer_structured(StructuredRequest(chat, json.dumps({"object": True}), 12))
