"""The real Qwen2 tokenizer files for tests: vocab.json and merges.txt from the workplace's shared data folder
(`<repo>/../shared/tokenizers/qwen2`, never copied into the repository), linked into a tmp folder next to a
tokenizer_config.json that carries the added tokens the published Qwen2.5 folders carry (Qwen/Qwen2.5-0.5B
tokenizer_config.json added_tokens_decoder: ids 151643-151664, the tool-call, FIM, repo and file-separator
tokens marked "special": false). Tests that use them skip, saying why, where the folder is absent (a user's
clone, a CI clone)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "tokenizers" / "qwen2"
needs_qwen2_files = pytest.mark.skipif(
    not (SHARED / "vocab.json").is_file() or not (SHARED / "merges.txt").is_file(),
    reason=f"the real Qwen2 tokenizer files are not here ({SHARED}: the workplace's shared data, not in a clone)")

# (content, special) in id order from 151643, as Qwen2.5's tokenizer_config.json lists them
QWEN25_ADDED = (
    [(t, True) for t in ("<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                         "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                         "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>")]
    + [(t, False) for t in ("<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                            "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")])
FIRST_ADDED = 151643  # len(vocab.json): the added tokens follow the byte-level BPE vocabulary


def write_qwen2_folder(folder: Path, extra: tuple[str, ...] = (), **config) -> Path:
    """`folder` with links to the real vocab.json and merges.txt and a Qwen2.5 tokenizer_config.json; `extra`
    special tokens follow Qwen2.5's (a diffusion checkpoint's <|mask|>); `config` keys are added to it."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in ("vocab.json", "merges.txt"):
        (folder / name).symlink_to(SHARED / name)
    added = QWEN25_ADDED + [(t, True) for t in extra]
    entry = dict(lstrip=False, normalized=False, rstrip=False, single_word=False)
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "added_tokens_decoder": {str(FIRST_ADDED + i): {"content": t, **entry, "special": s}
                                 for i, (t, s) in enumerate(added)},
        "additional_special_tokens": [t for t, s in added[1:] if s], "bos_token": None,
        "clean_up_tokenization_spaces": False, "eos_token": "<|endoftext|>", "errors": "replace",
        "model_max_length": 131072, "pad_token": "<|endoftext|>", "split_special_tokens": False,
        "tokenizer_class": "Qwen2Tokenizer", "unk_token": None, **config}, indent=2))
    return folder
