"""The transformer's cached forward, config flags and the checkpoint format."""

from __future__ import annotations

import json

import pytest
import torch

from diffusion_lsp.model.families.checkpoint import CheckpointError, load_checkpoint
from diffusion_lsp.model.network.config import PRESETS, ModelConfig
from diffusion_lsp.model.network.transformer import DiffusionTransformer

FLAGS = [
    dict(),  # ours / LLaDA-like: tied, logits in place
    dict(qkv_bias=True, tie_embeddings=False, shift_logits=True),  # Dream (Qwen2)
    dict(qkv_bias=True, qk_norm=True, head_dim=32, tie_embeddings=False, shift_logits=True),  # CoDA (Qwen3)
]


@pytest.mark.parametrize("flags", FLAGS)
def test_cached_forward_matches_full_forward_when_nothing_changed(flags):
    torch.manual_seed(0)
    model = DiffusionTransformer(ModelConfig.preset("tiny", **flags)).eval()
    B, S = 2, 40
    tokens = torch.randint(0, 512, (B, S))
    key_mask = torch.ones(B, S, dtype=torch.bool)
    key_mask[1, 33:] = False  # row 1 is shorter: padding
    positions = torch.arange(S).expand(B, S)
    full, cache = model(tokens, positions, key_mask)
    starts = torch.tensor([10, 20])
    idx = starts[:, None] + torch.arange(8)  # an active block of 8 per row
    active, _ = model(tokens.gather(1, idx), idx, torch.ones(B, 8, dtype=torch.bool), cache.at(idx))
    expected = full.gather(1, idx[..., None].expand(-1, -1, full.shape[-1]))
    torch.testing.assert_close(active, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("flags", [dict(), dict(n_kv_heads=4), FLAGS[2]])  # grouped-query, multi-head, qk-norm
@pytest.mark.parametrize("dense", [False, True])
@torch.inference_mode()
def test_a_cached_window_is_written_into_the_cache_in_place_and_sees_the_rest(flags, dense):
    """The window's keys/values land in the cache tensors themselves (same storage: no cache-sized
    copy), at the window's columns; a slot that is no token writes the spare last column, never
    attended. With one layer a window whose tokens changed since the cache was filled then sees
    exactly what a full pass over the changed rows sees (fresh keys in the window, cached ones
    elsewhere, which a layer 0 computes from the token and its position only), masked or dense."""
    torch.manual_seed(0)
    model = DiffusionTransformer(ModelConfig.preset("tiny", n_layers=1, **flags)).eval()
    B, S = 2, 30  # S + 1 columns: the last one spare
    tokens = torch.randint(0, 512, (B, S + 1))
    key_mask = torch.arange(S + 1).expand(B, S + 1) < S
    positions = torch.arange(S + 1).expand(B, S + 1)
    _, cache = model.hidden(tokens, positions, key_mask)
    cache.dense = dense
    before = [t.clone() for t in cache.keys + cache.values]
    ptrs = [t.data_ptr() for t in cache.keys + cache.values]
    changed = tokens.clone()
    changed[:, 12:18] = torch.randint(0, 512, (B, 6))
    full, now = model.hidden(changed, positions, key_mask)
    idx = torch.tensor([[10, 11, 12, 13, 14, 15, 16, 17], [12, 13, 14, 15, 16, 17, S, S]])  # row 1: 2 spare slots
    valid = idx != S
    h, out = model.hidden(changed.gather(1, idx), idx, valid, cache.at(idx))
    assert out is cache and [t.data_ptr() for t in cache.keys + cache.values] == ptrs
    for b in range(B):
        cols = idx[b][valid[b]]
        torch.testing.assert_close(h[b][valid[b]], full[b, cols], atol=1e-5, rtol=1e-5)
        rest = torch.ones(S + 1, dtype=torch.bool)
        rest[cols] = rest[S] = False
        for got, fresh, was in zip(cache.keys + cache.values, now.keys + now.values, before):
            torch.testing.assert_close(got[b][:, cols], fresh[b][:, cols], atol=1e-5, rtol=1e-5)
            assert torch.equal(got[b][:, rest], was[b][:, rest])  # everything else as cached
    with pytest.raises(ValueError, match=r"cache.at\(columns\)"):  # the cache alone does not say where the window is
        model.hidden(changed.gather(1, idx), idx, valid, cache)


def test_padding_does_not_change_a_row():
    torch.manual_seed(0)
    model = DiffusionTransformer(ModelConfig.preset("tiny")).eval()
    tokens = torch.randint(0, 512, (1, 20))
    alone, _ = model(tokens)
    padded = torch.cat([tokens, torch.zeros(1, 7, dtype=torch.long)], 1)
    mask = torch.arange(27)[None] < 20
    batched, _ = model(padded, key_mask=mask)
    torch.testing.assert_close(batched[:, :20], alone, atol=1e-5, rtol=1e-5)


def test_config_rejects_unknown_keys_and_bad_shapes():
    with pytest.raises(ValueError, match="unknown model config keys: colour"):
        ModelConfig.from_dict({"colour": 1})
    with pytest.raises(ValueError, match="n_kv_heads"):
        ModelConfig(dim=64, n_heads=4, n_kv_heads=3)
    with pytest.raises(ValueError, match="preset"):
        ModelConfig.preset("gpt-5")


@pytest.mark.parametrize("name", ["dream-7b", "coda-1.7b", "llada-8b"])
def test_open_checkpoint_presets_have_their_published_sizes(name):
    billions = {"dream-7b": 7.6, "coda-1.7b": 2.0, "llada-8b": 8.0}[name]
    assert ModelConfig.preset(name).num_params() / 1e9 == pytest.approx(billions, rel=0.05)


def test_num_params_matches_the_module():
    for flags in FLAGS:
        cfg = ModelConfig.preset("tiny", **flags)
        assert cfg.num_params() == sum(p.numel() for p in DiffusionTransformer(cfg).parameters())


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_every_preset_builds_the_model_its_config_describes(name):
    cfg = ModelConfig.preset(name)
    assert {k: getattr(cfg, k) for k in PRESETS[name]} == PRESETS[name]
    with torch.device("meta"):  # shapes only: the open checkpoints' sizes would not fit in a test
        model = DiffusionTransformer(cfg)
    assert sum(p.numel() for p in model.parameters()) == cfg.num_params()
    assert model.embed.weight.shape == (cfg.vocab_size, cfg.dim) and len(model.layers) == cfg.n_layers
    attn, mlp = model.layers[0].attn, model.layers[0].mlp
    assert attn.q_proj.weight.shape == (cfg.n_heads * cfg.head_dim, cfg.dim)
    assert attn.k_proj.weight.shape == (cfg.n_kv_heads * cfg.head_dim, cfg.dim) and cfg.n_heads % cfg.n_kv_heads == 0
    assert mlp.up_proj.weight.shape == (cfg.hidden_dim, cfg.dim) and (attn.q_proj.bias is not None) == cfg.qkv_bias
    assert (model.lm_head is None) == cfg.tie_embeddings and (attn.q_norm is not None) == cfg.qk_norm


def test_checkpoint_round_trip(tiny_checkpoint, tokenizer):
    model, tok, meta = load_checkpoint(tiny_checkpoint)
    assert meta["format_version"] == 1 and tok.mask_id == tokenizer.mask_id
    torch.manual_seed(0)
    original = DiffusionTransformer(ModelConfig.preset("tiny")).eval()
    x = torch.randint(0, 512, (1, 16))
    torch.testing.assert_close(model(x)[0], original(x)[0])
    text = "def f():\n\treturn 'ünïcode'  \n"
    assert tok.decode(tok.encode(text)) == text


def corrupt(src, dst, name, content: bytes | None):
    dst.mkdir()
    for f in src.iterdir():
        (dst / f.name).write_bytes(f.read_bytes())
    if content is None:
        (dst / name).unlink()
    else:
        (dst / name).write_bytes(content)
    return dst


@pytest.mark.parametrize("name,content,message", [
    ("model.safetensors", None, "missing model.safetensors"),
    ("config.json", b"{not json", "not valid JSON"),
    ("config.json", b'{"format": "diffusion-lsp-checkpoint", "format_version": 99}', "format_version 99"),
    ("model.safetensors", b"\x00" * 100, "corrupt"),
    ("tokenizer.json", b"[]", "bad tokenizer.json"),
])
def test_corrupt_checkpoints_raise_one_clear_error(tiny_checkpoint, tmp_path, name, content, message):
    folder = corrupt(tiny_checkpoint, tmp_path / "bad", name, content)
    with pytest.raises(CheckpointError, match=message):
        load_checkpoint(folder)


def test_weights_that_do_not_match_the_config(tiny_checkpoint, tmp_path):
    folder = corrupt(tiny_checkpoint, tmp_path / "bad", "config.json", None)
    config = json.loads((tiny_checkpoint / "config.json").read_text())
    config["model"]["n_layers"] = 3
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(CheckpointError, match="do not match"):
        load_checkpoint(folder)


def test_truncated_safetensors(tiny_checkpoint, tmp_path):
    data = (tiny_checkpoint / "model.safetensors").read_bytes()
    folder = corrupt(tiny_checkpoint, tmp_path / "bad", "model.safetensors", data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="corrupt"):
        load_checkpoint(folder)
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "nowhere")


def test_grouped_query_attention_expanded_for_a_mask_is_the_same():
    """On a GPU a masked GQA attention expands the keys/values to every head (SDPA's memory-efficient
    kernel takes a mask, its GQA-capable flash kernel does not): the same numbers as SDPA's GQA."""
    from diffusion_lsp.model.network.transformer import attend

    torch.manual_seed(0)
    q, k, v = torch.randn(2, 6, 5, 8), torch.randn(2, 2, 9, 8), torch.randn(2, 2, 9, 8)
    mask = torch.rand(2, 1, 1, 9) < 0.7
    mask[..., 0] = True
    grouped = attend(q, k, v, mask, 3, expand=False)
    torch.testing.assert_close(attend(q, k, v, mask, 3, expand=True), grouped, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(attend(q, k, v, None, 3, expand=True), attend(q, k, v, None, 3, expand=False))
    assert not torch.allclose(attend(q, k, v, None, 3), grouped)  # the mask matters here
