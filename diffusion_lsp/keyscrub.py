"""An API key kept out of every text an API echoes it in (its error bodies reach fim's stderr, the
editor's showMessage and the logs).

Two passes over the text. First every word that holds a piece of the key in a form a word can carry
is written [key]: the key in any case, forwards or backwards, percent-encoded (in part or whole,
`quote` or `quote_plus`, up to three times), in base64 (standard or URL-safe, at any byte alignment
of a larger blob: "Bearer KEY", "user:KEY") and in hex. Then the text is read whole in the forms a
word-by-word look cannot see (HTML entities, \\u / %u / \\x escapes, NFKC's compatibility forms
such as fullwidth letters, the letters with every other character taken out (a key spelled out with
spaces, zero-width characters or hex bytes apart), reversed, rot13, and base64 or base32 blobs decoded,
twice for a blob inside a blob): a piece of the key found there, the text is not shown at all, only
that it held the key."""

from __future__ import annotations

import base64
import binascii
import codecs
import html
import re
import unicodedata
import urllib.parse

KEY_PIECE = 8  # characters of the key that, found anywhere in a word of an API's text, hide that word
B64_PIECE = 11  # base64 characters of KEY_PIECE bytes (11 x 6 bits >= 64)
_WORD = re.compile(r"[^\s\"'`<>()\[\]{},;:]+")
_URLSAFE = str.maketrans("+/", "-_")


def _windows(forms: set[str], n: int) -> tuple[int, frozenset[str]]:
    """(n, every n characters of each form)."""
    return n, frozenset(f[i:i + n] for f in forms for i in range(len(f) - n + 1))


def _base64_cores(raw: bytes) -> set[str]:
    """The base64 characters that `raw` alone decides, wherever it sits in a larger blob: at each of the
    three byte alignments (o bytes before it in its group of 3: the key alone, "user:KEY" of a basic-auth
    header, "Bearer KEY"), the characters from the first whose 6 bits are all raw's to the last; in the
    standard and the URL-safe alphabet. Padding is never in a core: it follows the last byte."""
    cores = set()
    for o in range(3):
        text = base64.b64encode(bytes(o) + raw).decode()
        core = text[-(-o * 8 // 6):(o + len(raw)) * 8 // 6]  # from ceil(8 o / 6) to floor(8 (o + n) / 6)
        cores |= {core, core.translate(_URLSAFE)}
    return cores


def _decodings(word: str):
    """The word, and the word percent-decoded (as `quote` and as `quote_plus` write it; encoded twice
    or three times too), lower-cased: the forms a key is looked for in."""
    yield word.lower()
    for _ in range(3):
        if "%" not in word and "+" not in word:
            return
        yield urllib.parse.unquote_plus(word).lower()
        decoded = urllib.parse.unquote(word)
        if decoded == word:
            return
        yield decoded.lower()
        word = decoded


HIDDEN = "[the API's message is not shown: it holds the key]"
_ESCAPE = re.compile(r"(?:\\u|%u)([0-9a-fA-F]{4})|\\x([0-9a-fA-F]{2})")
_NOT_ALNUM = re.compile(r"[^0-9a-z]+")
_BLOB = re.compile(r"[A-Za-z0-9+/_=-]{16,}")
_MAX_BLOBS = 16  # blobs decoded per text: an API's text is at most MAX_SCAN characters


def _unescaped(text: str) -> str:
    return _ESCAPE.sub(lambda m: chr(int(m.group(1) or m.group(2), 16)), text)


def _decoded_blobs(text: str) -> list[str]:
    """Each long run of base64 or base32 characters in `text`, decoded (as UTF-8, errors replaced)."""
    out = []
    for blob in _BLOB.findall(text)[:_MAX_BLOBS]:
        body = blob.rstrip("=")
        for decode in (lambda b: base64.b64decode(b + "=" * (-len(b) % 4)),
                       lambda b: base64.urlsafe_b64decode(b + "=" * (-len(b) % 4)),
                       lambda b: base64.b32decode(b.upper() + "=" * (-len(b) % 8))):
            try:
                out.append(decode(body).decode("utf-8", "replace"))
            except (binascii.Error, ValueError):
                pass
    return out


def _views(text: str, depth: int = 2):
    """`text` in the forms the whole-text pass reads (the module doc), lower-cased."""
    plain = {text, html.unescape(text), _unescaped(text), unicodedata.normalize("NFKC", text)}
    plain |= {v[::-1] for v in plain} | {codecs.encode(v, "rot13") for v in plain}
    for v in plain:
        yield v.lower()
    if depth:
        for v in plain:
            for decoded in _decoded_blobs(v):
                yield from _views(decoded, depth - 1)


class KeyScrubber:
    """The one scrubber every message with an API's text goes through (remote.FimClient._fail), so
    fim's stderr, the editor's showMessage and the logs see the same (the module doc). A key shorter
    than KEY_PIECE is looked for whole, as itself or percent-encoded."""

    def __init__(self, key: str | None):
        self._pieces: list[tuple[int, frozenset[str]]] = []
        self._flat: tuple[int, frozenset[str]] | None = None
        if not key:
            return
        low = key.lower()
        self._pieces.append(_windows({low, low[::-1]}, min(KEY_PIECE, len(key))))
        if len(key) >= KEY_PIECE:  # shorter, its base64 is a handful of characters any word may hold
            cores = {c.lower() for c in _base64_cores(key.encode())}
            self._pieces.append(_windows(cores, min(B64_PIECE, *map(len, cores))))
            self._pieces.append(_windows({key.encode().hex()}, 2 * KEY_PIECE))
            flat = {_NOT_ALNUM.sub("", f) for f in (low, key.encode().hex())}
            self._flat = _windows({f for f in flat if len(f) >= KEY_PIECE}, KEY_PIECE)

    def __repr__(self) -> str:
        return "KeyScrubber([key])"

    def _holds(self, word: str) -> bool:
        return any(form[i:i + n] in pieces for form in _decodings(word) for n, pieces in self._pieces
                   for i in range(len(form) - n + 1))

    def _hides(self, text: str) -> bool:
        """A piece of the key in a form of the whole text (the second pass)."""
        for view in _views(text):
            for n, pieces in self._pieces:
                if any(view[i:i + n] in pieces for i in range(len(view) - n + 1)):
                    return True
            if self._flat is not None:
                flat, (n, pieces) = _NOT_ALNUM.sub("", view), self._flat
                if any(flat[i:i + n] in pieces for i in range(len(flat) - n + 1)):
                    return True
        return False

    def __call__(self, text: str) -> str:
        if not self._pieces:
            return text
        said = _WORD.sub(lambda m: "[key]" if self._holds(m.group(0)) else m.group(0), text)
        return HIDDEN if self._hides(said) else said


def scrub_key(text: str, key: str | None) -> str:
    """`text` with every word that holds `key` in any form written [key], or HIDDEN (KeyScrubber)."""
    return KeyScrubber(key)(text)
