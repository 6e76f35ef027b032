"""`model check` shows the tokenizer: its files and size, the special tokens by role and where each was named
(config.json, tokenizer_config.json, or the family's candidate names), the role a folder lacks, the families
whose tokens it holds, and the ids of the prompt built for a one-line example. On a tiny folder written with the
real Qwen2 tokenizer files (skipped without them) and on the tiny Dream folder of test_pretrained."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from diffusion_lsp.cli import main
from diffusion_lsp.model.families.token_report import EXAMPLE, EXAMPLE_TOKENS

from qwen2_files import FIRST_ADDED, QWEN25_ADDED, needs_qwen2_files, write_qwen2_folder

transformers = pytest.importorskip("transformers")

MASK = FIRST_ADDED + len(QWEN25_ADDED)  # the <|mask|> written after Qwen2.5's added tokens


def check(folder: Path, capsys) -> tuple[dict, str]:
    assert main(["model", "check", str(folder), "--json", "--no-reference"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert main(["model", "check", str(folder), "--no-reference"]) == 0
    return report, capsys.readouterr().out


@pytest.fixture(scope="module")
def real_folder(tmp_path_factory) -> Path:
    """A tiny random Qwen2 model with the real vocabulary's 151,936 rows (Qwen2.5-0.5B's), config.json's ids as
    Qwen2.5's (bos and eos 151643) plus a mask_token_id, and the real tokenizer files."""
    folder = tmp_path_factory.mktemp("real") / "qwen2"
    torch.manual_seed(0)
    hf = transformers.Qwen2ForCausalLM(transformers.Qwen2Config(
        vocab_size=151936, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        intermediate_size=32, max_position_embeddings=256, tie_word_embeddings=True, bos_token_id=FIRST_ADDED,
        eos_token_id=FIRST_ADDED))
    hf.save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "mask_token_id": MASK}))
    return write_qwen2_folder(folder, extra=("<|mask|>",))


@needs_qwen2_files
def test_real_tokenizer_folder(real_folder, capsys):
    report, text = check(real_folder, capsys)
    tok = report["tokenizer"]
    assert tok["files"] == "vocab.json + merges.txt" and tok["vocab_size"] == MASK + 1
    assert tok["roles"]["mask"] == {"token": "<|mask|>", "id": MASK, "from": "config.json mask_token_id"}
    assert tok["roles"]["eos"] == {"token": "<|endoftext|>", "id": FIRST_ADDED, "from": "config.json eos_token_id"}
    assert tok["roles"]["pad"] == {"token": "<|endoftext|>", "id": FIRST_ADDED, "from": "tokenizer_config.json pad_token"}
    assert "expand_token_id" in tok["roles"]["expand"]["missing"]
    assert "qwen2" in tok["families_with_these_tokens"]
    # Qwen2.5's config.json names <|endoftext|> its bos; the qwen2 family's loader puts <|im_start|> first
    assert tok["roles"]["bos"] == {"token": "<|endoftext|>", "id": FIRST_ADDED, "from": "config.json bos_token_id",
                                   "product_uses": {"token": "<|im_start|>", "id": FIRST_ADDED + 1}}
    assert all("product_uses" not in tok["roles"][name] for name in ("mask", "pad", "eos", "expand"))
    reference = transformers.Qwen2Tokenizer.from_pretrained(str(real_folder))
    prefix, suffix = (reference.encode(t, add_special_tokens=False) for t in EXAMPLE)
    bos = report["special_tokens"]["bos"]
    assert tok["example"]["ids"] == [bos] + prefix + [MASK] * EXAMPLE_TOKENS + suffix
    assert "".join(tok["example"]["pieces"]) == reference.decode(tok["example"]["ids"])
    assert "tokenizer: vocab.json + merges.txt, 151,666 tokens; mask <|mask|> 151665 (config.json mask_token_id)" \
        in text
    assert "expand not named" in text and f"{MASK}:'<|mask|>'" in text
    assert "bos <|endoftext|> 151643 (config.json bos_token_id; the product uses <|im_start|> 151644)" in text


def test_tiny_dream_folder_and_our_own_format(tmp_path, tiny_checkpoint, capsys):
    from test_pretrained import build

    folder, _ = build("dream", tmp_path)
    report, text = check(folder, capsys)
    tok = report["tokenizer"]
    mask, bos = report["special_tokens"]["mask"], report["special_tokens"]["bos"]
    assert tok["files"] == "tokenizer.json"
    assert tok["roles"]["mask"] == {"token": "<|mask|>", "id": mask, "from": "config.json mask_token_id"}
    assert tok["roles"]["bos"]["token"] == "<|beginoftext|>"
    # the dream family would find its <|expand|> by name: the message says which names were looked for
    assert "<|expand|>" in tok["roles"]["expand"]["missing"] and "dream" in tok["families_with_these_tokens"]
    ids = tok["example"]["ids"]
    assert ids[0] == bos and ids.count(mask) == EXAMPLE_TOKENS and ids.index(mask) > 1
    assert "".join(p for p, i in zip(tok["example"]["pieces"], ids) if i not in (mask, bos)) == "".join(EXAMPLE)
    assert "tokens of the families: " in text

    report, _ = check(tiny_checkpoint, capsys)  # our own format: no family, roles from its special tokens
    tok, special = report["tokenizer"], report["special_tokens"]
    assert tok["example"]["ids"].count(special["mask"]) == EXAMPLE_TOKENS
    assert {name: r.get("id") for name, r in tok["roles"].items()} == \
        {"mask": special["mask"], "pad": special["filler"], "bos": special["bos"], "eos": None, "expand": None}
    assert {r.get("from") for r in tok["roles"].values()} == {"config.json special_tokens", None}


def test_a_fim_family_shows_its_prompt_in_its_order(tmp_path, capsys):
    """Stable-DiffCoder puts the suffix first (Family.fim_order "spm"): the example shows the FIM tokens by id."""
    from test_families_new import build_stable_diffcoder

    folder, _ = build_stable_diffcoder(tmp_path / "sd")
    report, _ = check(folder, capsys)
    example = report["tokenizer"]["example"]
    fim = [p for p in example["pieces"] if p.startswith("<[fim-")]
    assert fim == ["<[fim-suffix]>", "<[fim-prefix]>", "<[fim-middle]>"]
    assert example["pieces"][-EXAMPLE_TOKENS:] == ["<[MASK_TOKEN]>"] * EXAMPLE_TOKENS
    assert report["tokenizer"]["roles"]["mask"]["from"] == "stable-diffcoder's name for it"
