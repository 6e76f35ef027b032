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

from ..input_files import MAX_JSON_BYTES, InputFile, Refused, parse_json
from ..workspace_files import stream_file, write_in
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
    def fill(f) -> None:  # pack.json first: unpack checks the format before reading anything else
        with tarfile.open(fileobj=f, mode="w:xz", preset=6) as tar:
            for name, data in members.items():
                info = tarfile.TarInfo(name)
                info.size, info.mode = len(data), 0o644
                tar.addfile(info, io.BytesIO(data))
    out.parent.mkdir(parents=True, exist_ok=True)
    stream_file(out, fill)  # workspace_files: never through a link, replaced atomically
    return meta


XZ_MAGIC = b"\xfd7zXZ\x00"


META_CAP = 64 << 10  # pack.json: a dozen counts
NPY_HEADER = 4096  # np.save's header for these arrays is 128 bytes: a margin over the counted bytes, not a size
MAX_MEMBER = 512 << 20  # the default pack (38 MB) unpacks to about 80 MB of ids; --max-mb 200 fits


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo, cap: int, path) -> bytearray:
    """The bytes of `member`: refused past `cap` by its declared size before a byte is read, and never
    more than that read, into one buffer (a 156 KB pack declared and held 1 GiB of zeros: 1.16 GB of RSS)."""
    if member.size > cap:
        raise PackError(f"{path}: {member.name} holds {member.size:,} bytes, more than the {cap:,} its pack allows")
    data, f = bytearray(member.size), tar.extractfile(member)
    if f.readinto(data) != member.size or f.read(1):  # readinto: one copy (read(n) joins its chunks: two)
        raise PackError(f"{path}: {member.name} does not hold the {member.size:,} bytes it declares")
    return data


def _meta(data: bytes, path) -> dict:
    """pack.json's content once its format and version are this one's."""
    try:
        meta = parse_json(data.decode("utf-8"), f"{path}: {PACK_META}")
    except (UnicodeDecodeError, Refused) as e:
        raise PackError(f"{path}: no readable {PACK_META} ({e})") from None
    if not isinstance(meta, dict) or meta.get("format") != PACK_FORMAT or meta.get("format_version") != PACK_VERSION:
        got = meta if isinstance(meta, dict) else {}
        raise PackError(f"{path}: format {got.get('format')!r} version {got.get('format_version')!r}, "
                        f"expected {PACK_FORMAT!r} version {PACK_VERSION}")
    return meta


def _caps(meta: dict, path) -> dict[str, int]:
    """The most bytes each member may hold, from pack.json's dtype and counts: an array never unpacks
    to more than the ids it counts."""
    item = {"uint16": 2, "uint32": 4}.get(meta.get("dtype"))
    caps = {"tokenizer.json": MAX_JSON_BYTES}
    for split in SPLITS:
        counts = meta.get(f"{split}_tokens"), meta.get(f"{split}_files")
        if split != "train" and counts == (None, None):
            continue
        if item is None or not all(type(n) is int and n >= 0 for n in counts):
            raise PackError(f"{path}: {PACK_META} does not give the dtype and the {split} counts of its arrays")
        caps[f"{split}.ids.npy"] = counts[0] * item + NPY_HEADER
        caps[f"{split}.offsets.npy"] = (counts[1] + 1) * 8 + NPY_HEADER
    if (big := max(caps.values())) > MAX_MEMBER:
        raise PackError(f"{path}: {PACK_META} counts arrays of {big:,} bytes, more than the {MAX_MEMBER:,} unpacked")
    return caps


def _members(raw, path) -> tuple[dict, dict[str, bytes]]:
    """(pack.json's content, the other files it counts by name) of the tar.xz stream `raw`: pack.json
    comes first and is checked before anything else is read; each file is read within its cap."""
    with tarfile.open(fileobj=raw, mode="r:xz") as tar:
        first = tar.next()
        if first is None or first.name != PACK_META or not first.isfile():
            raise PackError(f"{path}: not a token pack (it does not start with {PACK_META})")
        found = {PACK_META: _read(tar, first, META_CAP, path)}
        meta = _meta(found[PACK_META], path)
        caps = _caps(meta, path)
        for member in tar:
            if member.name in caps and member.isfile():  # nothing else, and no path: no traversal
                found[member.name] = _read(tar, member, caps[member.name], path)
    return meta, found


def unpack(path: Path | InputFile, out: Path) -> dict:
    """Write the corpus folder of the pack at `path` (opened by input_files: a regular file, never a
    FIFO waited on) into `out` (through workspace_files) -> pack.json's content."""
    file = path if isinstance(path, InputFile) else InputFile(str(path))
    try:
        with file.open() as raw:
            if raw.read(len(XZ_MAGIC)) != XZ_MAGIC:  # zeros are xz stream padding: 256 MB of them took 50 s
                raise PackError(f"{path}: not a token pack (not an xz file)")
            raw.seek(0)
            meta, found = _members(raw, path)
    except (tarfile.TarError, lzma.LZMAError, EOFError, OSError) as e:
        raise PackError(f"{path}: not a readable token pack ({e})") from None
    missing = sorted({"tokenizer.json", "train.ids.npy", "train.offsets.npy"} - set(found))
    if missing:
        raise PackError(f"{path}: missing {', '.join(missing)}")
    if hashlib.sha256(found["tokenizer.json"]).hexdigest() != meta.get("tokenizer_sha256"):
        raise PackError(f"{path}: its tokenizer does not match the sha256 in {PACK_META}")
    out.mkdir(parents=True, exist_ok=True)
    for name, data in found.items():
        write_in(out, name, data)
    return meta
