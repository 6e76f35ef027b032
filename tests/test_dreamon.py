"""DreamOn's variable-length infilling (model/families/dreamon.py) on a scripted fake model, and end to end on a
tiny Dream folder whose tokenizer has `<|expand|>`."""

from __future__ import annotations

import json
import math

import pytest
import torch

from diffusion_lsp.cli import main
from diffusion_lsp.engine import Engine, load_engine
from diffusion_lsp.model.decoding.canvas import CanvasRequest, build_row
from diffusion_lsp.model.network.config import ModelConfig, SpecialTokens
from diffusion_lsp.model.families.dreamon import MIN_GEN_LEN, VariableDecoding, delete_ended, expand_blocked, expands, fill_variable
from diffusion_lsp.protocol.settings import LaunchSettings, SamplerConfig
from diffusion_lsp.model.network.tokenizer import train_bpe

from conftest import corpus_texts

PREFIX = "def add(a, b):\n    return"
SUFFIX = "\n\nprint(add(1, 2))\n"
DREAMON = SpecialTokens("<|mask|>", "<|endoftext|>", "<|beginoftext|>",
                        {"expand": "<|expand|>", "eos": "<|endoftext|>"})


@pytest.fixture(scope="module")
def tok():
    return train_bpe(corpus_texts(), vocab_size=512, special=DREAMON)


class ScriptedModel(torch.nn.Module):
    """A fake DreamOn denoiser with shifted logits: at a masked middle column `col` of a middle of length L,
    the next token's distribution is script(col, L) -> {token: probability} (the rest spread evenly). It
    finds the middle from the row's prefix length and suffix length (+ eos), so the script sees the canvas
    grow and shrink. Speaks the sampler's model API: hidden() and logits(). Records each window it sees."""

    def __init__(self, tok, req: CanvasRequest, script, heal=False):
        super().__init__()
        row = build_row(req, tok, 511, heal)
        self.start, self.tail = row.start, len(row.ids) - row.start - row.length + 1  # + 1: the eos
        self.script, self.windows = script, []
        self.config = ModelConfig(vocab_size=tok.vocab_size, dim=8, n_layers=1, n_heads=1, max_seq_len=512,
                                  shift_logits=True)
        self.dummy = torch.nn.Parameter(torch.zeros(1))

    def hidden(self, tokens, positions, key_mask, cache=None):
        self.windows.append(tokens[0].tolist())
        length = tokens.shape[1] - self.start - self.tail
        col = positions + 1 - self.start  # output i predicts token i + 1
        return torch.stack([col, torch.full_like(col, length)], -1).float(), None  # [B, S, 2]

    def logits(self, h):
        V = self.config.vocab_size
        flat = h.reshape(-1, 2)
        out = torch.empty(flat.shape[0], V)
        for s, (col, length) in enumerate(flat.long().tolist()):
            probs = self.script(col, length)
            out[s] = math.log((1 - sum(probs.values())) / (V - len(probs)))
            for t, p in probs.items():
                out[s, t] = math.log(p)
        return out.reshape(*h.shape[:-1], V)

    def lengths(self) -> list[int]:
        """The middle's length at each forward pass."""
        return [len(w) - self.start - self.tail for w in self.windows]


def run(tok, script, req=None, cfg=None, heal=False):
    req = req or CanvasRequest(PREFIX, SUFFIX, 16)
    model = ScriptedModel(tok, req, script, heal)
    (res,) = fill_variable(model, tok, [req], cfg or SamplerConfig(heal=heal))
    assert "".join(res.pieces) == res.text and len(res.pieces) == len(res.token_ids)  # pieces add up
    return model, res


def growing(tok, answer):
    """Expand at the middle's last column until it holds the answer (sure: 0.9), then write it left to
    right (0.8 at column 0, less further right), with end-of-text past it."""
    ids, expand = tok.encode(answer), tok.id_of("expand")

    def script(col, length):
        if length < len(ids) and col == length - 1:
            return {expand: 0.9, ids[col]: 0.05}
        return {ids[col]: 0.8 - 0.01 * col} if 0 <= col < len(ids) else {tok.id_of("eos"): 0.5}
    return script, ids


def test_the_middle_grows_past_the_initial_canvas_when_the_model_expands(tok):
    answer = " a + b * c - d"
    script, ids = growing(tok, answer)
    model, res = run(tok, script)
    assert len(ids) > MIN_GEN_LEN
    assert res.text == answer and res.token_ids == ids and res.tokens == len(ids)
    grown = len(ids) - MIN_GEN_LEN
    assert model.lengths()[: grown + 1] == list(range(MIN_GEN_LEN, len(ids) + 1))  # one expansion per step
    assert res.forwards == grown + len(ids)  # one position per step: each expansion, then each token
    assert tok.id_of("expand") not in res.canvas and tok.mask_id not in res.canvas
    assert res.confidence == pytest.approx([0.8 - 0.01 * c for c in range(len(ids))], abs=0.01)


def test_end_of_text_deletes_its_position_and_the_masks_after_it(tok):
    (a,), (b,) = tok.encode(" a"), tok.encode(" y")
    eos = tok.id_of("eos")
    # column 3 first (0.95), then column 0, then an end-of-text at column 1: columns 1 and 2, both still
    # masked, go; column 3, already written, stays
    table = {0: {a: 0.9}, 1: {eos: 0.8}, 2: {eos: 0.5}, 3: {b: 0.95}}
    model, res = run(tok, lambda col, length: table[col])
    assert res.token_ids == [a, b] and res.text == " a y" and res.forwards == 3
    assert model.lengths() == [4, 4, 4]
    last = {0: {a: 0.9}, 1: {b: 0.85}, 2: {a: 0.8}, 3: {eos: 0.5}}  # the end-of-text comes last: one deletion
    model, res = run(tok, lambda col, length: last[col])
    assert res.token_ids == [a, b, a] and res.forwards == 4
    model, res = run(tok, lambda col, length: {eos: 0.9})  # the model wants nothing here
    assert res.text == "" and res.token_ids == [] and res.forwards == 1


def test_the_span_shrinks_then_the_rest_is_written(tok):
    ids = tok.encode(" ok")
    eos = tok.id_of("eos")
    model, res = run(tok, lambda col, length: {ids[col]: 0.8} if col < len(ids) else {eos: 0.95})
    assert res.token_ids == ids and res.forwards == 1 + len(ids)
    assert model.lengths() == [MIN_GEN_LEN] + [len(ids)] * len(ids)


def test_deletion_keeps_committed_tokens_and_confidences_in_step():
    middle, conf = [7, 1, 1, 9, 1], [0.9, 0.0, 0.0, 0.8, 0.0]
    was_masked = [False, True, True, False, True]
    assert delete_ended([7, 2, 1, 9, 1], conf, was_masked, eos=2) == ([7, 9], [0.9, 0.8])
    assert delete_ended(middle, conf, was_masked, eos=2) == (middle, conf)  # no end-of-text: unchanged
    assert delete_ended([7, 1, 1, 9, 2], conf, was_masked, eos=2) == ([7, 1, 1, 9], conf[:4])


def test_expansion_stops_at_the_largest_middle(tok):
    (x,), expand = tok.encode(" self"), tok.id_of("expand")
    req = CanvasRequest(PREFIX, SUFFIX, 6)
    model, res = run(tok, lambda col, length: {expand: 0.9, x: 0.05}, req)  # it would expand forever
    assert res.token_ids == [x] * 6 and res.forwards == 2 + 6
    assert max(model.lengths()) == 6
    assert expand_blocked(6, 6, 3) and expand_blocked(5, 6, 0) and not expand_blocked(5, 6, 1)


def test_expansion_stops_when_the_budget_is_spent(tok):
    (x,), expand, eos = tok.encode(" self"), tok.id_of("expand"), tok.id_of("eos")

    def script(col, length):  # grow at the end; once at 6, delete the last position again
        if col == length - 1:
            return {eos: 0.9} if length == 6 else {expand: 0.9, x: 0.05}
        return {x: 0.05}
    model, res = run(tok, script, CanvasRequest(PREFIX, SUFFIX, 6))
    # 4 -> 5 -> 6, then (delete, expand) until the 6 expansions are spent, then 5 selfs
    assert model.lengths()[:4] == [4, 5, 6, 5] and max(model.lengths()) == 6
    assert res.token_ids == [x] * 5 and res.forwards == 6 + 5 + 5


def test_one_line_request_stops_once_its_first_line_is_written(tok):
    answer = " a + b\n    c = d\n    e = f"
    script, ids = growing(tok, answer)
    _, whole = run(tok, script)
    _, line = run(tok, script, CanvasRequest(PREFIX, SUFFIX, 16, one_line=True))
    assert whole.text == answer
    assert line.text == " a + b"  # the first line: without the newline token ("\n   ")
    assert line.forwards < whole.forwards


def test_token_healing_constrains_the_first_token(tok):
    prefix = "x = self.fo"
    req = CanvasRequest(prefix, "", 8)
    row = build_row(req, tok, 511, heal=True)
    assert row.healed and "fo".endswith(row.healed)
    allowed = tok.ids_starting_with(row.healed)
    foo = next(i for i in allowed if tok.decode([i]).startswith(row.healed + "o"))
    wrong, eos = tok.encode(" bar")[0], tok.id_of("eos")
    model, res = run(tok, lambda col, length: {wrong: 0.9, foo: 0.05} if col == 0 else {eos: 0.5}, req, heal=True)
    assert model.lengths()[0] == MIN_GEN_LEN + 1  # the healed token's column, plus the usual canvas
    assert (prefix + res.text).startswith("x = self.foo") and res.token_ids == [foo]
    assert res.tokens == 1  # it re-types what was there, plus the "o"


def test_a_stopped_request_is_abandoned_between_steps(tok):
    script, _ = growing(tok, " a + b")
    reqs = [CanvasRequest(PREFIX, SUFFIX, 8, id="a"), CanvasRequest(PREFIX, SUFFIX, 8, id="b")]
    model = ScriptedModel(tok, reqs[0], script)
    decoding = VariableDecoding(model, tok, reqs, SamplerConfig(heal=False))
    for _ in decoding:
        decoding.stop(1)  # the second request, asked to stop before it starts: its first step still runs
    kept, stopped = decoding.results()
    assert stopped.cancelled and stopped.text == "" and stopped.forwards == 1
    assert not kept.cancelled and kept.text == " a + b" and (kept.id, stopped.id) == ("a", "b")


def test_time_budget_commits_the_rest_in_one_greedy_step(tok):
    script, ids = growing(tok, " a + b * c - d")
    _, res = run(tok, script, cfg=SamplerConfig(heal=False, time_budget_ms=0.0))
    assert res.budget_hit and res.forwards == 1
    assert res.token_ids == ids[:MIN_GEN_LEN]  # the expand token is blocked: the canvas keeps its size


def test_engine_dispatches_on_the_expand_token(tok, tokenizer, oracle):
    script, _ = growing(tok, " a + b")
    req = CanvasRequest(PREFIX, SUFFIX, 8)
    assert expands(tok) and not expands(tokenizer)
    (res,) = Engine(ScriptedModel(tok, req, script), tok, {}).fill([req], SamplerConfig(heal=False))
    assert res.text == " a + b" and res.forwards == 3 + 1  # 3 tokens, then the end-of-text at column 3
    with pytest.raises(ValueError, match="expand"):
        fill_variable(oracle(tokenizer, {}), tokenizer, [req])


# ---- end to end: a tiny Dream folder (random weights) whose tokenizer has <|expand|> ----

SHAPES = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
              intermediate_size=128, max_position_embeddings=512)


@pytest.fixture(scope="module")
def dreamon_folder(tmp_path_factory):
    transformers = pytest.importorskip("transformers")
    folder = tmp_path_factory.mktemp("dreamon") / "DreamOn-tiny"
    folder.mkdir()
    train_bpe(corpus_texts(), vocab_size=400, special=DREAMON).hf.save(str(folder / "tokenizer.json"))
    torch.manual_seed(0)
    hf = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(vocab_size=416, tie_word_embeddings=False,
                                                                **SHAPES)).eval()
    hf.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    mask_id = json.loads((folder / "tokenizer.json").read_text())["added_tokens"]
    config.update(model_type="Dream", architectures=["DreamModel"], rope_theta=10000.0,
                  mask_token_id=next(t["id"] for t in mask_id if t["content"] == "<|mask|>"))
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_a_dream_folder_with_an_expand_token_loads_as_dreamon(dreamon_folder, tmp_path):
    from diffusion_lsp.model.families.pretrained import load_hf_folder

    _, tok, meta = load_hf_folder(dreamon_folder)
    assert meta["family"] == "dreamon" and expands(tok)
    assert tok.hf.id_to_token(tok.id_of("expand")) == "<|expand|>" and tok.id_of("eos") == tok.filler_id
    # a vocab that spells it differently: config.json's expand_token_id names it
    other = tmp_path / "renamed"
    other.mkdir()
    for f in dreamon_folder.iterdir():
        (other / f.name).write_bytes(f.read_bytes())
    (other / "tokenizer.json").write_text((other / "tokenizer.json").read_text().replace("<|expand|>", "<|grow|>"))
    _, tok, meta = load_hf_folder(other)
    assert meta["family"] == "dream" and not expands(tok)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "expand_token_id": tok.hf.token_to_id("<|grow|>")}))
    _, tok, meta = load_hf_folder(other)
    assert meta["family"] == "dreamon" and tok.hf.id_to_token(tok.id_of("expand")) == "<|grow|>"


def test_fim_runs_dreamon_end_to_end(dreamon_folder, tmp_path, capsys, monkeypatch):
    engine = load_engine(LaunchSettings(str(dreamon_folder), device="cpu", threads=1))
    calls = []
    import diffusion_lsp.model.families.dreamon as dreamon

    real = dreamon.VariableDecoding
    monkeypatch.setattr(dreamon, "VariableDecoding", lambda *a, **k: calls.append(1) or real(*a, **k))
    fills = engine.fill([CanvasRequest("def f(x):\n    return ", "\n", 6), CanvasRequest("x = ", "", 3, one_line=True)])
    assert calls == [1] and [f.tokens == len(f.pieces) <= n and "".join(f.pieces) == f.text and f.forwards >= 1
                             for f, n in zip(fills, (6, 3))] == [True, True]
    assert all("".join(f.pieces) == f.text for f in fills)
    src = tmp_path / "add.py"
    src.write_text("def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n")
    code = main(["fim", str(src), "--at", "2:12", "--model", str(dreamon_folder), "--json", "--max-tokens", "5",
                 "--threads", "1"])
    record = json.loads(capsys.readouterr().out)
    assert code == 0 and calls == [1, 1] and isinstance(record["text"], str)
    assert record["tokens"] == len(record["confidence"]) <= 5 and 1 <= record["forwards"] <= MIN_GEN_LEN + 1 + 2 * 5
