"""`diffusion-lsp serve` end to end, where the suggestion writes over an auto-closed bracket after
the cursor: the returned item carries a `range` covering that bracket. The model is the tiny test
checkpoint rewired into a bigram chain (`scripted_checkpoint`), so every answer is known."""

from __future__ import annotations

from pathlib import Path

import pytest
import pytest_asyncio
import torch
from lsprotocol import types

from conftest import complete, loads_ended, open_doc, start_server, stop_server
from diffusion_lsp.model.families.checkpoint import save_checkpoint
from diffusion_lsp.model.network.config import ModelConfig
from diffusion_lsp.model.network.transformer import DiffusionTransformer

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]
SCRIPT = ".foo(value) + 1"  # the chain: after ".", "foo(value) + 1"; after "(", "value) + 1"
OPTIONS = {"sampling": {"heal": False}, "completion": {"confidenceCut": 0.0, "debounceMs": 0},
           "worker": {"idleExitS": 0}}
CAPS = types.ClientCapabilities(
    general=types.GeneralClientCapabilities(position_encodings=["utf-16"]),
    window=types.WindowClientCapabilities(work_done_progress=True),
    text_document=types.TextDocumentClientCapabilities(
        inline_completion=types.InlineCompletionClientCapabilities()))


def scripted_checkpoint(tok, script: str, folder: Path) -> Path:
    """A checkpoint that writes `script` one token at a time: each token of it predicts the next
    (the last predicts filler, filler predicts filler), so a prefix ending in one of its tokens
    gets the rest of `script` as its fill.

    The blocks add nothing (zero output projections), so the final hidden state at position i is
    RMSNorm(embedding of token i); with shifted logits that state predicts position i + 1. Each
    chain token's embedding is one-hot on its own dimension and the output head maps that dimension
    to the next token (p ~ 1 - 5e-5); every other token, the mask included, has a zero embedding and
    so uniform predictions (p = 1/V), which the threshold policy leaves masked: the canvas fills
    left to right, one confident position per step."""
    chain = tok.encode(script) + [tok.filler_id]
    if len(set(chain)) != len(chain):
        raise ValueError(f"the tokens of {script!r} must be distinct for a bigram chain: {chain}")
    model = DiffusionTransformer(ModelConfig.preset("tiny", shift_logits=True, tie_embeddings=False))
    if len(chain) > model.config.dim:
        raise ValueError(f"{script!r} has more tokens than the tiny model has dimensions")
    with torch.no_grad():
        for layer in model.layers:
            layer.attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        model.embed.weight.zero_()
        model.lm_head.weight.zero_()
        model.norm.weight.fill_(1)
        for d, (token, after) in enumerate(zip(chain, chain[1:] + [tok.filler_id])):
            model.embed.weight[token, d] = 1  # RMSNorm makes it 8 (sqrt of dim 64)
            model.lm_head.weight[after, d] = 2  # logit 16 against 0 for the 511 others
    return save_checkpoint(folder, model, tok, extra={"claims": SCRIPTED_CLAIMS})


# a test model whose answers are known claims next edits, so that servers (and the editors' tests)
# take their defaults from the claims as they do for a real model: next edits on, any language
SCRIPTED_CLAIMS = {"languages": None, "next_edits": True}


@pytest.fixture(scope="module")
def script_checkpoint(tokenizer, tmp_path_factory) -> Path:
    return scripted_checkpoint(tokenizer, SCRIPT, tmp_path_factory.mktemp("script") / "script")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def client(script_checkpoint, tmp_path_factory):
    client = await start_server(script_checkpoint, tmp_path_factory.mktemp("sock") / "worker.sock", CAPS, OPTIONS)
    open_doc(client, "file:///warmup.py", "x = 1\n")  # starts the worker; its $/progress ends once loaded
    await loads_ended(client, 1)
    yield client
    await stop_server(client)


def apply(text: str, line: int, character: int, item) -> str:
    """The document after accepting `item` at the cursor, as an editor applies it."""
    lines = text.split("\n")
    start, end = (character, character) if item.range is None else (item.range.start.character,
                                                                    item.range.end.character)
    assert item.range is None or item.range.start.line == item.range.end.line == line
    lines[line] = lines[line][:start] + item.insert_text + lines[line][end:]
    return "\n".join(lines)


async def test_a_fill_that_closes_the_auto_closed_bracket_replaces_it(client):
    text = "def total(items):\n    n = len()\n    return n\n"
    open_doc(client, "file:///r.py", text)
    (item,) = await complete(client, "file:///r.py", 1, 12)  # between the brackets of len()
    assert item.insert_text == "value) + 1"
    assert item.range == types.Range(types.Position(1, 12), types.Position(1, 13))  # the ")"
    assert apply(text, 1, 12, item).split("\n")[1] == "    n = len(value) + 1"


async def test_a_plain_insertion_carries_no_range(client):
    text = "def f(self):\n    y = self.\n"
    open_doc(client, "file:///p.py", text)
    (item,) = await complete(client, "file:///p.py", 1, 13)
    assert (item.insert_text, item.range) == ("foo(value) + 1", None)
