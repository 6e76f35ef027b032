"""A corpus split's token ids: the jsonl files tokenized once into a cache (or a token pack's ids),
read back as random crops for training (train/data.py).

A corpus folder unpacked from a token pack (data/pack.py) has the ids and no jsonl.

Cache (next to the corpus, e.g. data/corpus/train.ids.npy): all files' token ids concatenated
(`<split>.ids.npy`, uint16 or uint32), file boundaries (`<split>.offsets.npy`, [n_files + 1]) and
`<split>.cache.json`, which records the format version, the tokenizer's hash and the source
file's size and mtime; any mismatch rebuilds the cache.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np

CACHE_VERSION = 1


PACK_META = "pack.json"  # in a corpus folder unpacked from a token pack


class PackError(ValueError):
    """A token pack that is not one, is damaged, or does not match the tokenizer asked for."""


def tokenizer_sha256(tok) -> str:
    return hashlib.sha256(tok.hf.to_str().encode()).hexdigest()


def _packed_split(corpus: Path, split: str, tok):
    """(ids, offsets) of an unpacked split, memory-mapped, or None when `corpus` holds no such pack;
    PackError when its ids are another tokenizer's."""
    meta_path, ids_path, off_path = corpus / PACK_META, corpus / f"{split}.ids.npy", corpus / f"{split}.offsets.npy"
    if not (meta_path.is_file() and ids_path.is_file() and off_path.is_file()):
        return None
    if json.loads(meta_path.read_text()).get("tokenizer_sha256") != tokenizer_sha256(tok):
        raise PackError(f"{corpus}: its token ids are another tokenizer's than the model's")
    return np.load(ids_path, mmap_mode="r"), np.load(off_path)


def _cache_key(source: Path, tok) -> dict:
    st = source.stat()
    return {
        "cache_version": CACHE_VERSION,
        "tokenizer_sha256": tokenizer_sha256(tok),
        "source_size": st.st_size,
        "source_mtime_ns": st.st_mtime_ns,
    }


def _read_texts(source: Path):
    with source.open(encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)["text"]
                except (json.JSONDecodeError, KeyError, TypeError) as e:
                    raise ValueError(f"{source}:{n}: not a corpus record with a 'text' field ({e})") from None


def _tokenize(source: Path, tok, chunk: int = 512) -> tuple[np.ndarray, np.ndarray]:
    dtype = np.uint16 if tok.vocab_size <= 1 << 16 else np.uint32
    parts, lengths, batch = [], [0], []

    def flush():
        for enc in tok.hf.encode_batch(batch, add_special_tokens=False):  # parallel in Rust
            parts.append(np.asarray(enc.ids, dtype=dtype))
            lengths.append(len(enc.ids))
        batch.clear()

    for text in _read_texts(source):
        batch.append(text)
        if len(batch) == chunk:
            flush()
    flush()
    ids = np.concatenate(parts) if parts else np.zeros(0, dtype=dtype)
    return ids, np.cumsum(lengths, dtype=np.int64)


def has_split(corpus: Path, split: str) -> bool:
    """Whether `corpus` holds the split, as jsonl or as an unpacked token pack's ids."""
    return (corpus / f"{split}.jsonl").is_file() or (corpus / f"{split}.ids.npy").is_file() and (
        corpus / PACK_META).is_file()


class TokenFiles:
    """Token ids of every file of one split: `ids` flat [T], `offsets` [n_files + 1]."""

    def __init__(self, ids: np.ndarray, offsets: np.ndarray):
        self.ids, self.offsets = ids, offsets

    @property
    def n_tokens(self) -> int:
        return int(self.offsets[-1])

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @classmethod
    def load(cls, source: str | Path, tok, rebuild: bool = False) -> "TokenFiles":
        """Tokenize `source` (jsonl) or read its cache; only one process should build the cache."""
        source = Path(source)
        if not source.exists():  # an unpacked token pack: the ids without the jsonl
            packed = _packed_split(source.parent, source.stem, tok)
            if packed is not None:
                return cls(*packed)
        stem = source.with_suffix("")
        ids_path, off_path = Path(f"{stem}.ids.npy"), Path(f"{stem}.offsets.npy")
        meta_path = Path(f"{stem}.cache.json")
        key = _cache_key(source, tok)
        if not rebuild and meta_path.is_file() and ids_path.is_file() and off_path.is_file():
            try:
                if json.loads(meta_path.read_text()) == key:
                    return cls(np.load(ids_path, mmap_mode="r"), np.load(off_path))
            except (json.JSONDecodeError, ValueError, OSError):
                pass  # unreadable cache: rebuild it
        ids, offsets = _tokenize(source, tok)
        meta_path.unlink(missing_ok=True)
        for path, arr in ((ids_path, ids), (off_path, offsets)):
            tmp = path.with_name(path.name + f".tmp{os.getpid()}.npy")
            np.save(tmp, arr)
            os.replace(tmp, path)
        meta_path.write_text(json.dumps(key) + "\n")
        return cls(ids, offsets)

    def crop(self, rng: np.random.Generator, length: int) -> np.ndarray:
        """A window of up to `length` tokens; files are picked in proportion to their token count
        (a uniformly random token picks its file), the window uniformly inside the file."""
        if self.n_tokens == 0:
            raise ValueError("the corpus split has no tokens")
        f = int(np.searchsorted(self.offsets, rng.integers(self.n_tokens), side="right")) - 1
        lo, hi = int(self.offsets[f]), int(self.offsets[f + 1])
        start = lo + int(rng.integers(0, max(hi - lo - length, 0) + 1))
        return np.asarray(self.ids[start : min(start + length, hi)], dtype=np.int64)
