"""A fill's per-token pieces: made once by the sampler, where the ids and the healed text are."""

from __future__ import annotations

import pytest

from diffusion_lsp.model.decoding.canvas import CanvasRequest, build_row
from diffusion_lsp.model.decoding.results import text_of as _text
from diffusion_lsp.model.decoding.sampler import fill
from diffusion_lsp.protocol.settings import LaunchSettings, SamplerConfig

PREFIX = "def greet(name):\n    return"


def oracle_fill(tok, oracle, ids, prefix=PREFIX, heal=False):
    """Fill `prefix` with an oracle sure of `ids` right after it (one pass)."""
    req = CanvasRequest(prefix, "\n", 16)
    row = build_row(req, tok, 512, heal=heal)
    model = oracle(tok, {row.start + i: t for i, t in enumerate(ids)}, easy=range(1000))
    (res,) = fill(model, tok, [req], SamplerConfig(heal=heal))
    return row, res


def _byte_table() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: token string character -> byte."""
    bs = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


def complete_characters(tok, ids: list[int]) -> list[str]:
    """Per token, the characters whose last byte it holds: worked out from the tokens' bytes."""
    table, pending, out = _byte_table(), b"", []
    for t in ids:
        pending += bytes(table[c] for c in tok.hf.id_to_token(t))
        cut = next(k for k in range(len(pending), -1, -1) if _is_utf8(pending[:k]))
        out.append(pending[:cut].decode())
        pending = pending[cut:]
    return out


def _is_utf8(b: bytes) -> bool:
    try:
        b.decode()
    except UnicodeDecodeError:
        return False
    return True


def test_a_character_split_across_tokens_lands_on_the_token_that_completes_it(tokenizer, oracle):
    answer = " 'é😀 naïve'"
    ids = tokenizer.encode(answer)
    assert "\ufffd" in [tokenizer.decode([t]) for t in ids]  # the tiny vocabulary splits é, 😀 and ï
    _, res = oracle_fill(tokenizer, oracle, ids)
    assert res.token_ids == ids and res.text == answer
    assert res.pieces == complete_characters(tokenizer, ids)
    assert "é" in res.pieces and "😀" in res.pieces and "" in res.pieces


@pytest.mark.parametrize("more", ["", "o"])
def test_the_healed_text_is_cut_from_the_first_piece(tokenizer, oracle, more):
    # the cursor is inside `fo|`: the first token re-types the prefix's last token (maybe adding to it)
    prefix = "x = self.fo"
    row = build_row(CanvasRequest(prefix, "\n", 16), tokenizer, 512, heal=True)
    assert row.healed and "fo".endswith(row.healed)
    first = next(i for i in row.first_allowed if tokenizer.decode([i]) == row.healed + more)
    ids = [first, *tokenizer.encode("(bar)")]
    _, res = oracle_fill(tokenizer, oracle, ids, prefix=prefix, heal=True)
    assert res.token_ids == ids and res.tokens == len(ids)  # the re-typed token is one the model wrote
    assert res.pieces == [more, *(tokenizer.decode([t]) for t in ids[1:])]
    assert "".join(res.pieces) == res.text and prefix + res.text == "x = self.fo" + more + "(bar)"


class ByteTokens:
    """A tokenizer stand-in whose tokens are byte strings, decoded like byte-level BPE."""

    def __init__(self, *tokens: bytes, rewrite=lambda s: s):
        self.tokens, self.rewrite = tokens, rewrite

    def decode(self, ids: list[int]) -> str:
        return self.rewrite(b"".join(self.tokens[i] for i in ids).decode("utf-8", errors="replace"))


def test_pieces_at_the_edges():
    # a healed token that ends inside a character: the cut goes on into the piece that completes it
    assert _text(ByteTokens(b"a\xc3", b"\xa9b", b"!"), [0, 1, 2], "a") == ("\xe9b!", ["", "\xe9b", "!"])
    # a fill that stops inside a character keeps the replacement character on its last token
    assert _text(ByteTokens(b"s", b"\xc3"), [0, 1], "") == ("s\ufffd", ["s", "\ufffd"])
    # a decoder that rewrites earlier text (" ," -> ","): all the text on the first token
    cleanup = ByteTokens(b"a", b" ", b",", rewrite=lambda s: s.replace(" ,", ","))
    assert _text(cleanup, [0, 1, 2], "") == ("a,", ["a,", "", ""])
    assert _text(ByteTokens(), [], "x") == ("", [])


@pytest.fixture(scope="module")
def engine(tiny_checkpoint):
    from diffusion_lsp.engine import load_engine

    return load_engine(LaunchSettings(str(tiny_checkpoint), device="cpu", threads=1, precision="fp32"))


@pytest.mark.parametrize("cfg", [SamplerConfig(), SamplerConfig(heal=False, policy="one"),
                                 SamplerConfig(confidence_cut=0.5), SamplerConfig(time_budget_ms=0.0)])
def test_pieces_always_add_up_to_the_text(engine, cfg):
    # a random model writes arbitrary bytes: characters split across tokens, and fills cut inside one
    reqs = [CanvasRequest("def f(x):\n    return", "\n", 12), CanvasRequest("import os\n", "x = 1\n", 8, one_line=True),
            CanvasRequest("s = 'na", "'\n", 10), CanvasRequest("y = ", "", 6)]
    decoding = engine.decoding(reqs, cfg)
    for _ in decoding:  # the last request is abandoned after its first step
        decoding.stop(3)
    results = decoding.results()
    for res in results:
        assert "".join(res.pieces) == res.text
        assert len(res.pieces) == len(res.confidence) == len(res.token_ids)
    if results[3].cancelled:
        assert (results[3].text, results[3].pieces, results[3].confidence) == ("", [], [])


def test_a_special_token_the_model_writes_is_not_its_name_in_the_text(oracle):
    """A special token of the vocabulary that is none of our roles (an end of turn written inside the span) is
    left out of the fill's text, as every family's reference code decodes (skip_special_tokens=True); it was
    written into the user's code as '<|im_end|>'."""
    from conftest import corpus_texts
    from diffusion_lsp.model.network.tokenizer import train_bpe

    tok = train_bpe(corpus_texts(), vocab_size=512)
    tok.hf.add_special_tokens(["<|im_end|>"])
    end = tok.hf.token_to_id("<|im_end|>")
    assert end not in tok.special_ids
    _, res = oracle_fill(tok, oracle, tok.encode(" name") + [end] + tok.encode(" + 1"))
    assert res.text == " name + 1" and "<|" not in "".join(res.pieces)
