"""A token pack is read within bounds (diffusion_lsp/data/pack.py): pack.json comes first and its format
is checked before any other member is read, and each member is refused by its declared size against
what pack.json counts, and read into one buffer of the size it declares. A 156 KB pack declaring 1 GiB of zeros was read
whole (1.16 GB of RSS; a MemoryError traceback under a 900 MB limit) by `data unpack` and
`train-recipe --pack` alike."""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import tarfile

import pytest

from diffusion_lsp.cli import main
from diffusion_lsp.data import pack as pack_module
from diffusion_lsp.data.pack import NPY_HEADER, PACK_FORMAT, PACK_VERSION, unpack
from diffusion_lsp.data.token_files import PackError

BOMB = 64 << 20  # declared and held: 64 MiB of zeros, about 10 KB once compressed
TOKENIZER = b"{}"


class Zeros(io.RawIOBase):
    def __init__(self, n: int):
        self.n = n

    def readinto(self, b) -> int:
        k = min(len(b), self.n)
        b[:k] = bytes(k)
        self.n -= k
        return k

    def readable(self) -> bool:
        return True


def meta(**change) -> bytes:
    return json.dumps({"format": PACK_FORMAT, "format_version": PACK_VERSION, "dtype": "uint16",
                       "tokenizer_sha256": hashlib.sha256(TOKENIZER).hexdigest(), "train_tokens": 10,
                       "train_files": 1, **change}).encode()


def bomb(path, first: bytes | None, big: str = "train.ids.npy"):
    """A pack: pack.json (`first`; None: the big member comes first), the tokenizer, then `big` of BOMB zeros."""
    with lzma.open(path, "wb", preset=0) as xz, tarfile.open(fileobj=xz, mode="w") as tar:
        small = [("pack.json", first)] if first is not None else []
        if first is None:
            info = tarfile.TarInfo(big)
            info.size = BOMB
            tar.addfile(info, Zeros(BOMB))
        for name, data in small + [("tokenizer.json", TOKENIZER)]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        if first is not None:
            info = tarfile.TarInfo(big)
            info.size = BOMB
            tar.addfile(info, Zeros(BOMB))
    return path


@pytest.fixture
def reads(monkeypatch) -> list:
    """How many bytes each read of a pack member asked for (None: all of it)."""
    asked = []
    extract = tarfile.TarFile.extractfile

    def counted(self, member):
        f = extract(self, member)
        read = f.read

        def bounded(n=-1):
            asked.append((member.name, n))
            return read(n)
        readinto = f.readinto

        def into(buf):
            asked.append((member.name, len(buf)))
            return readinto(buf)
        f.read, f.readinto = bounded, into
        return f
    monkeypatch.setattr(tarfile.TarFile, "extractfile", counted)
    return asked


def test_a_member_past_what_pack_json_counts_is_refused_by_its_declared_size_unread(tmp_path, reads):
    path = bomb(tmp_path / "bomb.pack", meta())
    with pytest.raises(PackError, match=r"train.ids.npy holds 67,108,864 bytes, more than the 4,116"):
        unpack(path, tmp_path / "out")
    assert [name for name, _ in reads] == ["pack.json", "pack.json", "tokenizer.json", "tokenizer.json"]  # not the big one
    assert reads[1::2] == [("pack.json", 1), ("tokenizer.json", 1)] and reads[2] == ("tokenizer.json", len(TOKENIZER))
    assert not (tmp_path / "out").exists()
    assert 10 * 2 + NPY_HEADER == 4116


def test_a_foreign_format_is_refused_before_any_other_member_is_read(tmp_path, reads):
    path = bomb(tmp_path / "bomb.pack", json.dumps({"format": "x", "format_version": 1}).encode())
    with pytest.raises(PackError, match="format 'x' version 1"):
        unpack(path, tmp_path / "out")
    assert [name for name, _ in reads] == ["pack.json"] * 2 and max(n for _, n in reads) <= pack_module.META_CAP


def test_a_pack_that_does_not_start_with_pack_json_is_refused_unread(tmp_path, reads):
    with pytest.raises(PackError, match="does not start with pack.json"):
        unpack(bomb(tmp_path / "bomb.pack", None), tmp_path / "out")
    assert reads == []


@pytest.mark.parametrize("change, message", [({"train_tokens": 10**12}, "more than the 536,870,912 unpacked"),
                                             ({"train_tokens": -1}, "does not give the dtype"),
                                             ({"dtype": "object"}, "does not give the dtype"),
                                             ({"train_files": "1"}, "does not give the dtype")])
def test_counts_that_would_allow_a_bomb_or_are_not_counts_are_refused(tmp_path, reads, change, message):
    with pytest.raises(PackError, match=message):
        unpack(bomb(tmp_path / "bomb.pack", meta(**change)), tmp_path / "out")
    assert {name for name, _ in reads} == {"pack.json"}


def test_data_unpack_refuses_the_bomb_in_one_line(tmp_path, capsys):
    path = bomb(tmp_path / "bomb.pack", meta())
    assert main(["data", "unpack", str(path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "more than the 4,116" in err, err
