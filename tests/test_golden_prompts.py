"""Golden prompts per Qwen-family checkpoint (issue 47, item 2): the ids the product feeds a checkpoint equal the
ids its authors' reference code builds (tests/golden_prompts.py: the cases, the references by repository, file
and function, and their recipes), computed with transformers' Qwen2Tokenizer over the real Qwen2 vocabulary;
and what comes back: which ids a fill drops and how its middle is decoded. Each family is a tiny checkpoint
folder (random weights, one layer) carrying the real vocab.json / merges.txt and the family's published added
tokens. Skipped where ../shared/tokenizers/qwen2 is absent (a user's clone)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from diffusion_lsp.model.decoding.canvas import CanvasRequest, build_row
from diffusion_lsp.model.decoding.results import Decoded, result_of
from diffusion_lsp.model.decoding.sampler import fill
from diffusion_lsp.model.families.dreamon import MIN_GEN_LEN, fill_variable
from diffusion_lsp.model.families.pretrained import _theirs, load_hf_folder
from diffusion_lsp.model.families.table import FAMILIES as TABLE
from diffusion_lsp.model.network.config import ModelConfig
from diffusion_lsp.model.network.transformer import DiffusionTransformer
from diffusion_lsp.protocol.settings import SamplerConfig

from golden_prompts import (CASES, END_INSIDE, FAMILIES, HEALING, LEADING_BOS, MIN_GEN_LEN as VARIABLE, SPELLED,
                            tokenizer_config)

QWEN2 = Path(__file__).resolve().parents[1].parent / "shared" / "tokenizers" / "qwen2"
pytestmark = pytest.mark.skipif(not (QWEN2 / "vocab.json").is_file(),
                                reason=f"the real Qwen2 tokenizer files are not here ({QWEN2}): test data kept "
                                       "outside the repository, see issue 47")
transformers = pytest.importorskip("transformers")
IDS = [f.name for f in FAMILIES]


def write_folder(fam, folder: Path) -> Path:
    """A tiny checkpoint of the family: the real vocab.json / merges.txt (linked), its tokenizer_config.json,
    its config.json keys, one layer of random weights under the family's tensor names."""
    folder.mkdir()
    for name in ("vocab.json", "merges.txt"):
        (folder / name).symlink_to(QWEN2 / name)
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config(fam)))
    family = TABLE[{"dreamon": "dream"}.get(fam.family, fam.family)]
    qk_norm = fam.family == "coda"
    cfg = ModelConfig(vocab_size=fam.vocab_rows, dim=16, n_layers=1, n_heads=2, n_kv_heads=1, hidden_dim=32,
                      head_dim=8, max_seq_len=256, qkv_bias=not qk_norm, qk_norm=qk_norm, tie_embeddings=True,
                      shift_logits=family.shift_logits)
    torch.manual_seed(0)
    state = DiffusionTransformer(cfg).state_dict()
    save_file({_theirs(family, k): v.contiguous() for k, v in state.items() if k != "lm_head.weight"},
              str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps(dict(
        vocab_size=fam.vocab_rows, hidden_size=16, num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=1,
        head_dim=8, intermediate_size=32, max_position_embeddings=256, tie_word_embeddings=True, **fam.config)))
    return folder


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """family name -> (golden family, transformers' tokenizer of its folder, the product's model, tokenizer)."""
    root, out = tmp_path_factory.mktemp("golden"), {}
    for fam in FAMILIES:
        folder = write_folder(fam, root / fam.name.replace(" / ", "-"))
        reference = transformers.Qwen2Tokenizer.from_pretrained(str(folder))
        model, tok, config = load_hf_folder(folder)
        assert config["family"] == fam.family
        out[fam.name] = fam, reference, model, tok
    return out


def lead(tok) -> list[int]:
    """What the product puts before a row's prefix: its bos, when the family has one."""
    return [] if tok.bos_id is None else [tok.bos_id]


def span_length(fam, case) -> int:
    """The masks the product's span starts with: the request's length, or for DreamOn (VARIABLE) the
    reference's min_gen_len, never more than the request's length."""
    return min(MIN_GEN_LEN, case.n) if VARIABLE in fam.differences else case.n


def expected(fam, reference, tok, case) -> list[int]:
    """The reference's prompt for the case with the product's stated differences applied."""
    ids = fam.recipe(reference, case.prefix, case.suffix, span_length(fam, case))
    if LEADING_BOS in fam.differences:
        ids = [tok.bos_id] + ids
    return ids


def fed_ids(model, run) -> list[int]:
    """The token ids of the first row the model is given while `run()` decodes (padding left out)."""
    seen = []
    hidden = model.hidden

    def spy(tokens, positions, key_mask, *rest):
        if not seen:
            seen.append(tokens[0][key_mask[0]].tolist())
        return hidden(tokens, positions, key_mask, *rest)

    model.hidden = spy
    try:
        run()
    finally:
        del model.hidden
    return seen[0]


def feed(model, tok, family: str, req: CanvasRequest) -> list[int]:
    cfg = SamplerConfig(heal=False)
    if family == "dreamon":
        return fed_ids(model, lambda: fill_variable(model, tok, [req], cfg))
    return fed_ids(model, lambda: fill(model, tok, [req], cfg))


def test_the_recipes_special_ids_are_the_published_ones(loaded):
    """The reference tokenizer reads each family's slots to the ids its published files give (Qwen2 adds no
    bos of its own), and the product picks the same mask by name."""
    for fam, reference, _, tok in loaded.values():
        published = {name: i for i, name, _ in fam.added}
        assert reference.mask_token_id == published[fam.slots["mask_token"]] == tok.mask_id, fam.name
        assert reference.encode("x", add_special_tokens=True) == reference.encode("x", add_special_tokens=False)


@pytest.mark.parametrize("name", IDS)
def test_the_prompt_the_product_feeds_is_the_references(loaded, name):
    """For every case (empty prefix, empty suffix, the cursor inside a token, a non-ASCII line), the ids of the
    product's first forward pass are the reference recipe's, with only the differences golden_prompts.py states
    and explains."""
    fam, reference, model, tok = loaded[name]
    for case in CASES:
        if case.name == SPELLED[0]:
            continue
        req = CanvasRequest(case.prefix, case.suffix, max_tokens=case.n)
        want = expected(fam, reference, tok, case)
        assert feed(model, tok, fam.family, req) == want, (
            f"{fam.name}, case {case.name!r}: the product's prompt is not {fam.reference.repo} "
            f"{fam.reference.file} {fam.reference.function}'s")
        if fam.family != "dreamon":
            assert build_row(req, tok, model.config.max_seq_len, heal=False).ids == want


def test_token_healing_moves_the_half_typed_token_into_the_span(loaded):
    """HEALING: with heal on, the cursor-inside-a-token case feeds the reference's prompt less the prefix's last
    token ('tot'), which becomes the span's first position: the span keeps the request's length."""
    case = next(c for c in CASES if c.name == "cursor inside a token")
    for fam, reference, model, tok in loaded.values():
        if fam.family == "dreamon":
            continue
        row = build_row(CanvasRequest(case.prefix, case.suffix, max_tokens=case.n), tok, model.config.max_seq_len,
                        heal=True)
        prefix = reference.encode(case.prefix, add_special_tokens=False)
        assert reference.decode(prefix[-1:]) == row.healed == " tot", HEALING
        assert row.ids == (lead(tok) + prefix[:-1] + [tok.mask_id] * case.n
                           + reference.encode(case.suffix, add_special_tokens=False))


@pytest.mark.parametrize("name", IDS)
def test_text_spelling_a_special_token_stays_text(loaded, name):
    """SPELLED: where the reference's prompt holds the special tokens the text spells, the product's holds text
    only; its row is otherwise the reference's layout (bos, prefix, span, suffix, end) and decodes to the text."""
    fam, reference, model, tok = loaded[name]
    case = next(c for c in CASES if c.name == SPELLED[0])
    theirs = expected(fam, reference, tok, case)
    n = span_length(fam, case)
    # the reference's own row holds the token the text spells
    assert reference.convert_tokens_to_ids("<|endoftext|>") in theirs[:theirs.index(reference.mask_token_id)], SPELLED
    ours = feed(model, tok, fam.family, CanvasRequest(case.prefix, case.suffix, max_tokens=case.n))
    start = ours.index(tok.mask_id)
    head, span, tail = ours[:start], ours[start:start + n], ours[start + n:]
    assert span == [tok.mask_id] * n
    k = len(lead(tok))  # the bos the reference has, or the one LEADING_BOS adds
    assert head[:k] == theirs[:k] == lead(tok)
    head = head[k:]
    if fam.recipe(reference, "", "", 0)[-1:] == [reference.eos_token_id]:  # a reference that ends with eos
        assert tail[-1] == reference.eos_token_id
        tail = tail[:-1]
    assert not set(head + tail) & set(reference.all_special_ids), SPELLED
    assert (reference.decode(head), reference.decode(tail)) == (case.prefix, case.suffix)


def fill_text(tok, model, middle: list[int]) -> str:
    """The text the product gives back for a span that ended as `middle` (results.result_of)."""
    req = CanvasRequest("def f():\n    ", "\n", max_tokens=len(middle))
    f = Decoded(req, build_row(req, tok, model.config.max_seq_len, heal=False), canvas=middle,
                conf=[1.0] * len(middle))
    return result_of(f, tok).text


@pytest.mark.parametrize("name", IDS)
def test_what_comes_back_is_decoded_as_the_reference_decodes_it(loaded, name):
    """The span's ids the product drops and the text it makes of the rest are the reference's: trailing
    fillers (Dream's <|endoftext|>, DiffuCoder's <|dlm_pad|>) go, and so does any other special token the model
    writes inside the span (an end of turn, an end of text), as tokenizer.decode(skip_special_tokens=True)
    drops them; text spelling a special token is kept. END_INSIDE: the text after an end stays."""
    fam, reference, model, tok = loaded[name]
    text = reference.encode("x = 'Zoë'  # <|im_end|>", add_special_tokens=False, split_special_tokens=True)
    more = reference.encode("\ny = 2", add_special_tokens=False)
    im_end, eos = reference.convert_tokens_to_ids("<|im_end|>"), reference.convert_tokens_to_ids("<|endoftext|>")
    middles = {"trailing fillers": text + [tok.filler_id] * 3,
               "an end of turn, then fillers": text + [im_end] + [tok.filler_id] * 2,
               "text after an end of turn": text + [im_end] + more + [tok.filler_id],
               "text after an end of text": text + [eos] + more + [tok.filler_id]}
    for what, middle in middles.items():
        theirs = fam.keep(reference, middle)
        if END_INSIDE in fam.differences and what.startswith("text after"):
            theirs = fam.keep(reference, [t for t in middle if t not in (im_end, eos)])
        assert fill_text(tok, model, middle) == theirs, f"{fam.name}, {what}: not as {fam.keep.__name__} keeps it"
