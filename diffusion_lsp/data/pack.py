"""A corpus as token ids in one compressed file, small enough to travel with the working tree to a
machine that has no network (the GPU machine lent to some sessions gets 64 MiB of tree in all).

`pack` tokenizes a corpus folder's splits with a given tokenizer (data/token_files.py's cache: every file's
ids concatenated, uint16 for a vocabulary under 65,536, and the file boundaries), keeps whole train
files in their corpus order until the estimate of the compressed size reaches the budget (validation
is kept whole), and writes a tar.xz of the tokenizer, the ids, the boundaries and `pack.json`
(format, version, the tokenizer's sha256, counts). `unpack` writes a corpus folder that `train
--corpus` reads as it reads a tokenized one: no jsonl, the ids already there (data/token_files.py reads it)."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import tarfile
from pathlib import Path

import numpy as np

from ..input_files import InputFile
from .token_files import PACK_META, PackError, TokenFiles, tokenizer_sha256

PACK_FORMAT, PACK_VERSION = "diffusion-lsp-token-pack", 1
SPLITS = ("train", "val")


def _array(arr: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, arr, allow_pickle=False)
    return buf.getvalue()


def _cut(ids: np.ndarray, offsets: np.ndarray, keep_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """The first whole files holding at most keep_tokens tokens (at least one file)."""
    n = max(1, int(np.searchsorted(offsets, keep_tokens, side="right")) - 1)
    return np.asarray(ids[: offsets[n]]), np.asarray(offsets[: n + 1])


def pack(corpus: Path, tok, out: Path, max_mb: float) -> dict:
    """Write the pack of `corpus` (train.jsonl, val.jsonl) tokenized with `tok` -> pack.json's content."""
    splits = {}
    for split in SPLITS:
        source = corpus / f"{split}.jsonl"
        if source.is_file():
            files = TokenFiles.load(source, tok)
            splits[split] = (np.asarray(files.ids), np.asarray(files.offsets))
    if "train" not in splits:
        raise PackError(f"no train.jsonl in {corpus}")
    # xz ratio of this corpus, measured on a slice of the train ids: the cut is sized from it
    ids, offsets = splits["train"]
    sample = ids[: min(len(ids), 4 << 20)]
    ratio = len(lzma.compress(sample.tobytes(), preset=6)) / max(sample.nbytes, 1)
    fixed = sum(a.nbytes for a in splits.get("val", ())) * ratio + len(lzma.compress(tok.hf.to_str().encode()))
    keep_tokens = int(max(max_mb * 2**20 * 0.97 - fixed, 0) / ratio / ids.itemsize)
    if keep_tokens < len(ids):
        splits["train"] = _cut(ids, offsets, keep_tokens)
    meta = {"format": PACK_FORMAT, "format_version": PACK_VERSION, "tokenizer_sha256": tokenizer_sha256(tok),
            "vocab_size": tok.vocab_size, "dtype": str(splits["train"][0].dtype),
            **{f"{s}_tokens": int(o[-1]) for s, (_, o) in splits.items()},
            **{f"{s}_files": len(o) - 1 for s, (_, o) in splits.items()},
            "train_tokens_in_corpus": int(offsets[-1])}
    members = {PACK_META: (json.dumps(meta, indent=2) + "\n").encode(), "tokenizer.json": tok.hf.to_str().encode()}
    for split, (ids, offsets) in splits.items():
        members[f"{split}.ids.npy"], members[f"{split}.offsets.npy"] = _array(ids), _array(offsets)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    with tarfile.open(tmp, "w:xz", preset=6) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(out)
    return meta


XZ_MAGIC = b"\xfd7zXZ\x00"


def _members(raw, wanted: set[str]) -> dict[str, bytes]:
    """The `wanted` files of the tar.xz stream `raw`, by name."""
    found = {}
    with tarfile.open(fileobj=raw, mode="r:xz") as tar:
        for member in tar:
            if member.name in wanted and member.isfile():  # nothing else, and no path: no traversal
                found[member.name] = tar.extractfile(member).read()
    return found


def unpack(path: Path | InputFile, out: Path) -> dict:
    """Write the corpus folder of the pack at `path` (opened by input_files: a regular file, never a
    FIFO waited on) into `out` -> pack.json's content."""
    wanted = {PACK_META, "tokenizer.json"} | {f"{s}.{k}.npy" for s in SPLITS for k in ("ids", "offsets")}
    file = path if isinstance(path, InputFile) else InputFile(str(path))
    try:
        with file.open() as raw:
            if raw.read(len(XZ_MAGIC)) != XZ_MAGIC:  # zeros are xz stream padding: 256 MB of them took 50 s
                raise PackError(f"{path}: not a token pack (not an xz file)")
            raw.seek(0)
            found = _members(raw, wanted)
    except (tarfile.TarError, lzma.LZMAError, EOFError, OSError) as e:
        raise PackError(f"{path}: not a readable token pack ({e})") from None
    try:
        meta = json.loads(found[PACK_META])
    except (KeyError, json.JSONDecodeError) as e:
        raise PackError(f"{path}: no readable {PACK_META} ({e})") from None
    if meta.get("format") != PACK_FORMAT or meta.get("format_version") != PACK_VERSION:
        raise PackError(f"{path}: format {meta.get('format')!r} version {meta.get('format_version')!r}, "
                        f"expected {PACK_FORMAT!r} version {PACK_VERSION}")
    missing = sorted({"tokenizer.json", "train.ids.npy", "train.offsets.npy"} - set(found))
    if missing:
        raise PackError(f"{path}: missing {', '.join(missing)}")
    if hashlib.sha256(found["tokenizer.json"]).hexdigest() != meta.get("tokenizer_sha256"):
        raise PackError(f"{path}: its tokenizer does not match the sha256 in {PACK_META}")
    out.mkdir(parents=True, exist_ok=True)
    for name, data in found.items():
        (out / name).write_bytes(data)
    return meta
