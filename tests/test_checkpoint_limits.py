"""Checkpoint folders that are at fault (issue 19): sizes in config.json that the weights do not hold or
that no model has, JSON nested past the recursion limit, and files that are not regular files or are
too large. Each is one CheckpointError naming the file and the key, found before any module is built
and before any such file is opened; the command line prints it as one line, the worker as its one
"model failed to load" message."""

from __future__ import annotations

import json
import os
import shutil
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
from safetensors.torch import save_file

from diffusion_lsp.cli import main
from diffusion_lsp.model.families import hf_tokenizer
from diffusion_lsp.model.network import transformer
from diffusion_lsp.model.families.checkpoint import CheckpointError
from diffusion_lsp.model.network.config import ModelConfig, SpecialTokens
from diffusion_lsp.model.families.table import FAMILIES
from diffusion_lsp.model.families.hf_tokenizer import load_tokenizer_files
from diffusion_lsp.model.families.pretrained import _theirs, load_folder
from diffusion_lsp.protocol.settings import LaunchSettings
from diffusion_lsp.model.network.tokenizer import train_bpe
from diffusion_lsp.worker.process import Worker, load_model

from conftest import corpus_texts

DEEP = "[" * 100_000 + "]" * 100_000  # json raises RecursionError on it
# the Qwen2 layout of Open-dCoder: plain qwen2 config.json, one model.safetensors, tied head
QWEN2 = dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], vocab_size=416, hidden_size=64,
             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
             max_position_embeddings=512, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def hf_folder(tmp_path_factory) -> Path:
    """A Hugging Face folder written from our own model under the qwen2 family's tensor names."""
    folder = tmp_path_factory.mktemp("hf") / "qwen2"
    folder.mkdir()
    tok = train_bpe(corpus_texts(), vocab_size=400,
                    special=SpecialTokens("<|mask|>", "<|endoftext|>", None, {"im": "<|im_start|>"}))
    tok.hf.save(str(folder / "tokenizer.json"))
    cfg = ModelConfig(vocab_size=416, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=128,
                      max_seq_len=512, qkv_bias=True, shift_logits=True)
    state = transformer.DiffusionTransformer(cfg).state_dict()
    qwen2 = FAMILIES["qwen2"]
    save_file({_theirs(qwen2, k): v.contiguous() for k, v in state.items()}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(QWEN2))
    return folder


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def with_config(src: Path, dst: Path, **changes) -> Path:
    """A copy of src whose config.json has `changes` (ours: under "model")."""
    folder = copy(src, dst)
    config = json.loads((folder / "config.json").read_text())
    (config["model"] if "format" in config else config).update(changes)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


@pytest.fixture
def no_modules(monkeypatch):
    """Building a transformer block fails the test: the sizes must be refused before any module is built."""

    def built(cfg):
        raise AssertionError(f"a block was built for a {cfg.n_layers}-layer config")

    monkeypatch.setattr(transformer, "Block", built)


def test_the_folders_load(hf_folder, tiny_checkpoint):
    model, _, meta = load_folder(hf_folder)
    assert meta["family"] == "qwen2" and model.lm_head is None and len(model.layers) == 2
    model, _, meta = load_folder(tiny_checkpoint)
    assert meta["format"] == "diffusion-lsp-checkpoint" and len(model.layers) == 2


def test_model_config_sizes_have_bounds():
    with pytest.raises(ValueError, match="n_layers should be an integer from 1 to 1024, got 1000000"):
        ModelConfig(n_layers=1_000_000)
    with pytest.raises(ValueError, match=r"dim should be an integer from 1 to 65536, got 1000000000.0"):
        ModelConfig(dim=1e9)
    with pytest.raises(ValueError, match="n_heads should be an integer"):  # not a ZeroDivisionError
        ModelConfig(n_heads=0)
    with pytest.raises(ValueError, match="rope_theta should be a positive number, got nan"):
        ModelConfig(rope_theta=float("nan"))
    assert ModelConfig(rope_theta=10000).rope_theta == 10000.0


HF_FAULTS = [  # config.json changes -> the error
    ({"num_hidden_layers": 1_000_000}, "config.json num_hidden_layers should be an integer from 1 to 1024, "
                                       "got 1000000"),
    ({"num_hidden_layers": 3}, r"config.json and the weights do not match \(num_hidden_layers is 3, but the weights "
                               r"hold 2 layers\)"),
    ({"hidden_size": 128}, r"hidden_size is 128, but model.embed_tokens.weight is \[416, 64\]"),
    ({"vocab_size": 10**11}, "config.json vocab_size should be an integer from 1 to 2097152, got 100000000000"),
    ({"vocab_size": 500}, r"vocab_size is 500, but model.embed_tokens.weight is \[416, 64\]"),
    ({"num_attention_heads": 10**6}, "config.json num_attention_heads should be an integer from 1 to 1024"),
    ({"num_key_value_heads": 4}, r"num_key_value_heads × head_dim is 4 × 16 = 64, but "
                                 r"model.layers.0.self_attn.k_proj.weight is \[32, 64\]"),
    ({"head_dim": 32}, r"num_attention_heads × head_dim is 4 × 32 = 128, but model.layers.0.self_attn.q_proj.weight"),
    ({"intermediate_size": 10**9}, "config.json intermediate_size should be an integer from 1 to 262144"),
    ({"intermediate_size": 100}, r"intermediate_size is 100, but model.layers.0.mlp.gate_proj.weight is \[128, 64\]"),
    ({"max_position_embeddings": -1}, "config.json max_position_embeddings should be an integer from 1 to"),
    ({"rope_theta": "x"}, "config.json rope_theta should be a positive number, got 'x'"),
    ({"rope_scaling": "yarn"}, "config.json asks for what this loader cannot run: rope_scaling that is not an object"),
]


@pytest.mark.parametrize("changes,message", HF_FAULTS, ids=[next(iter(changes)) for changes, _ in HF_FAULTS])
def test_hf_sizes_are_checked_before_any_module_is_built(hf_folder, tmp_path, no_modules, changes, message):
    folder = with_config(hf_folder, tmp_path / "bad", **changes)
    with pytest.raises(CheckpointError, match=message):
        load_folder(folder)


@pytest.mark.parametrize("changes,message", [
    ({"n_layers": 1_000_000}, "config.json model.n_layers should be an integer from 1 to 1024, got 1000000"),
    ({"n_layers": 3}, r"config.json and the weights do not match \(model.n_layers is 3, but the weights hold 2 layers"),
    ({"dim": 128}, r"model.dim is 128, but embed.weight is \[512, 64\]"),
    ({"vocab_size": 10**9}, "config.json model.vocab_size should be an integer from 1 to 2097152"),
    ({"hidden_dim": 100}, r"model.hidden_dim is 100, but layers.0.mlp.gate_proj.weight is \[192, 64\]"),
])
def test_our_sizes_are_checked_before_any_module_is_built(tiny_checkpoint, tmp_path, no_modules, changes, message):
    folder = with_config(tiny_checkpoint, tmp_path / "bad", **changes)
    with pytest.raises(CheckpointError, match=message):
        load_folder(folder)


@pytest.mark.parametrize("value", [1e9, 10**9])
def test_a_config_at_fault_is_not_called_corrupt_weights(hf_folder, tmp_path, value):
    folder = with_config(hf_folder, tmp_path / "bad", hidden_size=value)
    with pytest.raises(CheckpointError) as e:
        load_folder(folder)
    assert "config.json hidden_size" in str(e.value) and "corrupt" not in str(e.value)


def test_a_later_layer_of_another_shape_blames_the_config_not_the_weights(hf_folder, tmp_path):
    from safetensors.torch import load_file

    folder = copy(hf_folder, tmp_path / "odd")
    state = load_file(str(folder / "model.safetensors"))
    name = "model.layers.1.mlp.gate_proj.weight"
    state[name] = state[name][:96].contiguous()
    save_file(state, str(folder / "model.safetensors"))
    with pytest.raises(CheckpointError) as e:
        load_folder(folder)
    message = str(e.value)
    assert f"do not match ({name} is [96, 64], config.json gives [128, 64])" in message and "corrupt" not in message


def test_an_id_outside_the_vocab_falls_back_to_the_familys_token(hf_folder, tmp_path):
    folder = with_config(hf_folder, tmp_path / "ids", mask_token_id=-1, expand_token_id=10**30)
    _, tok, meta = load_folder(folder)
    assert tok.hf.id_to_token(tok.mask_id) == "<|mask|>" and meta["family"] == "qwen2"


def test_the_mask_tokenizer_config_names_is_the_mask_when_the_family_s_is_not_in_the_vocab(hf_folder, tmp_path):
    """Open-dCoder's mask is its tokenizer_config.json's mask_token ("<M>"), not the qwen2 family's
    "<|mask|>": such a folder was refused for having no mask token."""
    folder = copy(hf_folder, tmp_path / "m")
    tok = train_bpe(corpus_texts(), vocab_size=400,
                    special=SpecialTokens("<M>", "<|endoftext|>", None, {"im": "<|im_start|>"}))
    tok.hf.save(str(folder / "tokenizer.json"))
    with pytest.raises(CheckpointError, match="no mask token .*tokenizer_config.json's mask_token"):
        load_folder(folder)
    (folder / "tokenizer_config.json").write_text(json.dumps({"mask_token": {"content": "<M>", "special": True}}))
    _, tok, meta = load_folder(folder)
    assert tok.hf.id_to_token(tok.mask_id) == "<M>" and meta["family"] == "qwen2"
    (folder / "tokenizer_config.json").write_text(json.dumps({"mask_token": "<|not-in-the-vocab|>"}))
    with pytest.raises(CheckpointError, match="no mask token"):  # a name the vocab lacks is no mask
        load_folder(folder)
    (folder / "tokenizer_config.json").write_text("[" * 100_000)
    with pytest.raises(CheckpointError, match="tokenizer_config.json is not readable JSON"):
        load_folder(folder)


def deep(folder: Path, name: str) -> Path:
    (folder / name).write_text(DEEP)
    return folder


@pytest.mark.parametrize("fmt", ["ours", "hf"])
def test_deeply_nested_config_json_is_one_error(hf_folder, tiny_checkpoint, tmp_path, fmt):
    folder = deep(copy(tiny_checkpoint if fmt == "ours" else hf_folder, tmp_path / "deep"), "config.json")
    with pytest.raises(CheckpointError, match=r"config.json is not valid JSON \(nested too deeply\)"):
        load_folder(folder)


@pytest.mark.parametrize("index", [DEEP, '{"weight_map": ["model.safetensors"]}', '{"weight_map": {"e": "../x"}}'],
                         ids=["deep", "list", "outside"])
def test_a_bad_safetensors_index_is_one_error(hf_folder, tmp_path, index):
    folder = copy(hf_folder, tmp_path / "index")
    (folder / "model.safetensors.index.json").write_text(index)
    with pytest.raises(CheckpointError, match="model.safetensors.index.json is not (valid JSON|a valid index)"):
        load_folder(folder)


def test_deeply_nested_tokenizer_config_is_one_error(tmp_path):
    (tmp_path / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "ab": 2}))
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b\n")
    deep(tmp_path, "tokenizer_config.json")
    with pytest.raises(ValueError, match=r"tokenizer_config.json is not readable JSON \(nested too deeply\)"):
        load_tokenizer_files(tmp_path)


def one_line_error(capsys, argv: list[str]) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("diffusion-lsp: error: ") and err.count("\n") == 1, err
    return err


def test_the_command_line_says_a_deep_config_in_one_line(hf_folder, tiny_checkpoint, tmp_path, capsys):
    src = tmp_path / "a.py"
    src.write_text("x = 1\n")
    for name, checkpoint in (("ours", tiny_checkpoint), ("hf", hf_folder)):
        folder = deep(copy(checkpoint, tmp_path / name), "config.json")
        for argv in (["fim", str(src), "--at", "1:1", "--model", str(folder), "--threads", "1"],
                     ["model", "check", str(folder)]):
            assert "config.json is not valid JSON (nested too deeply)" in one_line_error(capsys, argv)


@pytest.mark.parametrize("changes", [{"num_hidden_layers": 1_000_000}, {"hidden_size": 1e9}])
def test_the_command_line_says_a_bad_size_in_one_line(hf_folder, tmp_path, capsys, no_modules, changes):
    folder = with_config(hf_folder, tmp_path / "bad", **changes)
    src = tmp_path / "a.py"
    src.write_text("x = 1\n")
    err = one_line_error(capsys, ["fim", str(src), "--at", "1:1", "--model", str(folder), "--threads", "1"])
    assert f"config.json {next(iter(changes))} should be an integer" in err


@pytest.mark.parametrize("fault", ["deep", "layers"])
def test_the_worker_reports_a_bad_checkpoint_as_its_one_line_message(hf_folder, tmp_path, fault):
    if fault == "deep":
        folder, said = deep(copy(hf_folder, tmp_path / "w"), "config.json"), "config.json is not valid JSON"
    else:
        folder, said = with_config(hf_folder, tmp_path / "w", num_hidden_layers=10**6), "config.json num_hidden_layers"
    launch = LaunchSettings(str(folder), device="cpu", threads=1)
    worker = Worker(lambda: load_model(launch), launch)
    worker.run()  # returns once the load has failed
    assert worker.state == "failed" and worker.error.startswith(f"checkpoint {folder}: {said}")
    assert "\n" not in worker.error


@contextmanager
def never_opened(fifo: Path):
    """Fails the test, instead of hanging the run, when `fifo` is opened for reading: a writer opens and
    closes it every 0.1 s from the start, so a reader blocked in open() gets end-of-file at once."""
    stop, opened = threading.Event(), []

    def writer():
        while not stop.is_set():
            try:
                os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))  # ENXIO while no one reads: fine
                opened.append(True)
            except OSError:
                pass
            stop.wait(0.1)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
    assert not opened, f"{fifo.name} was opened for reading (a FIFO blocks the open until a writer comes)"


fifos = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")


@fifos
@pytest.mark.parametrize("fmt,name", [("ours", "config.json"), ("hf", "config.json"), ("ours", "tokenizer.json"),
                                      ("hf", "tokenizer.json"), ("ours", "model.safetensors"),
                                      ("hf", "model.safetensors"), ("hf", "model.safetensors.index.json")])
def test_a_fifo_in_a_checkpoint_is_refused_before_it_is_opened(hf_folder, tiny_checkpoint, tmp_path, fmt, name):
    folder = copy(tiny_checkpoint if fmt == "ours" else hf_folder, tmp_path / "fifo")
    (folder / name).unlink(missing_ok=True)
    os.mkfifo(folder / name)
    with never_opened(folder / name), pytest.raises(CheckpointError, match=rf"{name} is a FIFO \(named pipe\), not a "
                                                                          rf"regular file"):
        load_folder(folder)


@fifos
def test_the_command_line_says_a_fifo_config_in_one_line(hf_folder, tmp_path, capsys):
    folder = copy(hf_folder, tmp_path / "fifo")
    (folder / "config.json").unlink()
    os.mkfifo(folder / "config.json")
    src = tmp_path / "a.py"
    src.write_text("x = 1\n")
    with never_opened(folder / "config.json"):
        for argv in (["fim", str(src), "--at", "1:1", "--model", str(folder), "--threads", "1"],
                     ["model", "check", str(folder)]):
            assert "config.json is a FIFO (named pipe), not a regular file" in one_line_error(capsys, argv)


@pytest.mark.parametrize("name", ["config.json", "tokenizer.json"])
def test_a_folder_or_a_device_in_place_of_a_file_is_refused(tiny_checkpoint, tmp_path, name):
    folder = copy(tiny_checkpoint, tmp_path / "odd")
    (folder / name).unlink()
    (folder / name).mkdir()
    with pytest.raises(CheckpointError, match=f"{name} is a directory, not a regular file"):
        load_folder(folder)
    if os.devnull == "/dev/null":  # a character device
        (folder / name).rmdir()
        (folder / name).symlink_to(os.devnull)
        with pytest.raises(CheckpointError, match=f"{name} is a device, not a regular file"):
            load_folder(folder)


def test_a_huge_config_or_tokenizer_is_refused_unread(hf_folder, tmp_path, monkeypatch):
    folder = copy(hf_folder, tmp_path / "huge")
    os.truncate(folder / "config.json", (64 << 20) + 1)  # sparse: no disk used
    with pytest.raises(CheckpointError, match=r"config.json is 67,108,865 bytes, more than the 64 MB"):
        load_folder(folder)
    (folder / "config.json").write_text(json.dumps(QWEN2))
    monkeypatch.setattr(hf_tokenizer, "MAX_TOKENIZER", 1 << 20)  # the real bound is 512 MB
    os.truncate(folder / "tokenizer.json", (1 << 20) + 1)
    with pytest.raises(CheckpointError, match=r"tokenizer.json is 1,048,577 bytes, more than the 1 MB"):
        load_folder(folder)
