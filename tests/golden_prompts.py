"""Golden infill prompts as data: for each Qwen-family diffusion checkpoint, the reference code its authors run
(repository, commit read, file, function), the special tokens its published tokenizer carries, and that code's
recipe for an infill prompt and for the text it keeps of the middle, restated as small functions named after the
function they restate (facts carried over, not their code). tests/test_golden_prompts.py applies each recipe
with transformers' Qwen2Tokenizer to the real Qwen2 vocabulary and compares it with what the product feeds a
tiny checkpoint folder of the family. Where the product differs on purpose, `differences` says what and why.

The recipes take a transformers tokenizer `tok` (the reference's own: `tok.mask_token_id`, `tok.encode`) and
the prefix, suffix and span length of a case."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable


@dataclass(frozen=True)
class Case:
    name: str
    prefix: str
    suffix: str
    n: int  # the span's length in tokens (the request's max_tokens)


CASES = (
    Case("plain", "def add(a, b):\n    return ", "\n\nprint(add(1, 2))\n", 8),
    Case("empty prefix", "", "    return total\n", 6),
    Case("empty suffix", "import os\n\n\ndef main():\n    ", "", 5),
    # the cursor inside an identifier: the prefix ends with "tot" of "total"
    Case("cursor inside a token", "def compute(items):\n    tot", " = sum(items)\n    return total\n", 4),
    Case("non-ASCII line", "# Größe der Übergabe ✓ naïve\nnom = 'Zoë'  # 日本語\n", "\nprint(nom)\n", 7),
    Case("text spelling a special token", "s = '<|endoftext|>'\n", "\nt = '<|mask|>'\n", 3),
)


@dataclass(frozen=True)
class Reference:
    repo: str
    commit: str  # the commit read
    file: str
    function: str


# Qwen2.5's added tokens 151643..151664 and their "special" flags, as every Qwen2.5 tokenizer_config.json
# (and CoDA's, SalesforceAIResearch/CoDA CoDALanguageModel/tokenizer_config.json, which repeats them) gives them.
QWEN25_ADDED = [(151643 + i, name, i < 14) for i, name in enumerate((
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>"))]
# Dream-v0 (Dream-org/Dream-v0-Base-7B tokenizer_config.json; the mask id is its config.json mask_token_id, also
# ../shared/tokenizers/README.md): <|beginoftext|> is its bos_token, <|endoftext|> eos and pad
DREAM_ADDED = QWEN25_ADDED + [(151665, "<|beginoftext|>", True), (151666, "<|mask|>", True)]
DREAM_SLOTS = dict(bos_token="<|beginoftext|>", eos_token="<|endoftext|>", pad_token="<|endoftext|>",
                   mask_token="<|mask|>")
# CoDA-v0: its published CoDALanguageModel/tokenizer_config.json (Qwen3's added tokens, <|mask|> 151669,
# bos and eos <|im_end|>, pad <|endoftext|>) and config.json (mask_token_id 151669, pad_token_id 151643)
CODA_ADDED = QWEN25_ADDED[:-1] + [(151664, "<|file_sep|>", True), (151665, "<tool_response>", False),
                                  (151666, "</tool_response>", False), (151667, "<think>", False),
                                  (151668, "</think>", False), (151669, "<|mask|>", True)]


# ---- the recipes, each named after the reference function it restates ----

def process_infilling_prompt(tok, prefix: str, suffix: str, n: int) -> list[int]:
    """DreamOn demo/quickstart.py: bos, the prefix without added specials, n masks, the suffix, eos.
    eval/generator.py infilling_with_expansion builds the same with n = min_gen_len (eval_infill.yaml: 4)."""
    return ([tok.bos_token_id] + tok.encode(prefix, add_special_tokens=False) + [tok.mask_token_id] * n
            + tok.encode(suffix, add_special_tokens=False) + [tok.eos_token_id])


def infilling(tok, prefix: str, suffix: str, n: int) -> list[int]:
    """Open-dLLM eval/eval_infill/eval_infill.py infilling(): the prefix with the tokenizer's own special tokens
    (Qwen2 adds none), n masks, the suffix without; no eos (a batch is right-padded with pad_token_id)."""
    return (tok.encode(prefix, add_special_tokens=True) + [tok.mask_token_id] * n
            + tok.encode(suffix, add_special_tokens=False))


def dream_sampler_infill(tok, prefix: str, suffix: str, n: int) -> list[int]:
    """ZHZisZZ/dllm dllm/pipelines/dream/sampler.py DreamSampler.infill(): the caller's ids with mask tokens in
    place (examples/dream/sample.py spells them in the text: prefix + mask_token * n + suffix, tokenized without
    added specials, which splits the text at the masks as below); left-padded with eos in a batch, nothing added
    to one row."""
    return (tok.encode(prefix, add_special_tokens=False) + [tok.mask_token_id] * n
            + tok.encode(suffix, add_special_tokens=False))


def mdlm_infill(tok, prefix: str, suffix: str, n: int) -> list[int]:
    """ZHZisZZ/dllm dllm/core/samplers/mdlm.py MDLMSampler.infill() (the dllm-hub A2D models, right_shift_logits
    False): the caller's ids with masks in place, right-padded with eos in a batch; only an empty row with
    shifted logits becomes [bos]."""
    return (tok.encode(prefix, add_special_tokens=False) + [tok.mask_token_id] * n
            + tok.encode(suffix, add_special_tokens=False))


def diffusion_generate(tok, prefix: str, suffix: str, n: int) -> list[int]:
    """SalesforceAIResearch/CoDA CoDALanguageModel/generation_utils.py diffusion_generate() -> _sample():
    every mask_token_id in input_ids is denoised where it stands (x == mask_token_id), so an infill is the
    encoded prefix (add_bos_token false), n masks and the encoded suffix, max_length its own length."""
    return (tok.encode(prefix, add_special_tokens=True) + [tok.mask_token_id] * n
            + tok.encode(suffix, add_special_tokens=False))


# ---- what the references keep of the middle they get back (ids: the middle's ids) ----

def decode_skipping_specials(tok, middle: list[int]) -> str:
    """DreamOn infilling / infilling_with_expansion, Open-dLLM infilling(), CoDA: tokenizer.decode(middle,
    skip_special_tokens=True): pads, eos, mask and every other special token go, the rest is kept in order."""
    return tok.decode(middle, skip_special_tokens=True)


def infill_trim(tok, middle: list[int]) -> str:
    """ZHZisZZ/dllm dllm/utils/sampling.py infill_trim: the masked positions' ids up to the first eos (or eot,
    <|im_end|> for Dream and the A2D Qwen models), decoded skipping special tokens."""
    ends = {tok.eos_token_id, tok.convert_tokens_to_ids("<|im_end|>")}
    end = next((k for k, t in enumerate(middle) if t in ends), len(middle))
    return tok.decode(middle[:end], skip_special_tokens=True)


@dataclass(frozen=True)
class GoldenFamily:
    name: str  # the checkpoint family
    family: str  # the product's family name for it (load_hf_folder's config["family"])
    reference: Reference
    recipe: Callable  # (tok, prefix, suffix, n) -> the reference's prompt ids
    keep: Callable  # (tok, middle ids) -> the reference's fill text
    added: list  # (id, name, special) the published tokenizer_config.json adds
    slots: dict  # tokenizer_config.json's bos/eos/pad/mask_token
    config: dict  # config.json keys that tell the family apart and name its tokens
    vocab_rows: int  # config.json vocab_size (the embedding's rows)
    # the product's deliberate differences from the recipe: (what, why)
    differences: tuple[tuple[str, str], ...] = field(default=())


LEADING_BOS = ("leading bos", "the product puts the family's bos (Dream's <|beginoftext|>, else <|im_start|>) "
               "before every row: the sampler reads canvas[0] from the output one position before it (shifted "
               "logits), which an empty prefix would not have; the reference instead copies output 0 to "
               "position 0 (logits = cat(logits[:, :1], logits[:, :-1])). Every later position sees the same "
               "tokens, one position further on.")
MIN_GEN_LEN = ("variable length", "DreamOn's middle starts at eval_infill.yaml's min_gen_len = 4 masks "
               "(infilling_with_expansion) and the span's length is the most it may grow to (the reference's "
               "max_gen_len, 64 there), so the recipe is applied with n = 4; a span asked shorter than 4 starts "
               "at its own length (the product never writes more tokens than a request asks for)")
SPELLED = ("text spelling a special token", "a file's text that spells a special token's name is text to the product "
           "(model/network/tokenizer.py Tokenizer.encode: the name's first character encoded apart, so no special "
           "id can come from a file), where every reference's tokenizer.encode puts the special token itself on "
           "the row, and transformers' split_special_tokens=True would tokenize the name with its neighbours; "
           "the test checks that no special id comes from the text and that the row decodes to the text")
END_INSIDE = ("an end inside the span", "infill_trim cuts the middle at its first eos or <|im_end|>; the product drops "
              "those ids and keeps what follows (its sampler's trailing fillers end a Dream span at its first "
              "filler, <|endoftext|>, so only a vocab whose filler is another token, DiffuCoder's <|dlm_pad|>, can "
              "have text after an end)")
HEALING = ("token healing", "with heal on, a prefix that ends inside a token (' tot') has that token moved into "
           "the span (which keeps its length, its first prediction constrained to start with ' tot'); the golden "
           "rows are built with heal off, the test of healing shows the moved token")

DREAMON = Reference("DreamLM/DreamOn", "8a0a54918412eda9402a327646f7f067f7160ec8", "demo/quickstart.py",
                    "process_infilling_prompt")
FAMILIES = (
    GoldenFamily("Dream-v0 / Dream-Coder-v0", "dream",
                 Reference("ZHZisZZ/dllm", "ca176752fbceec49c6b4777a2c18ae88e4eb10ed",
                           "dllm/pipelines/dream/sampler.py", "DreamSampler.infill"),
                 dream_sampler_infill, infill_trim, DREAM_ADDED, DREAM_SLOTS,
                 dict(model_type="Dream", architectures=["DreamModel"], mask_token_id=151666, pad_token_id=151643),
                 152064, (LEADING_BOS, END_INSIDE)),
    # DiffuCoder: Dream's tokenizer plus <|dlm_pad|> as pad_token (its model card splits the answer at
    # '<|dlm_pad|>'); the id 151667 is the first one free after <|mask|>, not read from the published file
    GoldenFamily("DiffuCoder", "dream",
                 Reference("ZHZisZZ/dllm", "ca176752fbceec49c6b4777a2c18ae88e4eb10ed",
                           "dllm/pipelines/dream/sampler.py", "DreamSampler.infill"),
                 dream_sampler_infill, infill_trim, DREAM_ADDED + [(151667, "<|dlm_pad|>", True)],
                 {**DREAM_SLOTS, "pad_token": "<|dlm_pad|>"},
                 dict(model_type="Dream", architectures=["DreamModel"], mask_token_id=151666, pad_token_id=151667),
                 152064, (LEADING_BOS, END_INSIDE)),
    # DreamOn-v0-7B: Dream's tokenizer plus <|expand|> at 151667 (../shared/tokenizers/README.md; DreamOn's
    # eval tokenizer wrapper sets expand_id 151667 from its added_tokens.json)
    GoldenFamily("DreamOn-v0", "dreamon", DREAMON, process_infilling_prompt, decode_skipping_specials,
                 DREAM_ADDED + [(151667, "<|expand|>", True)], DREAM_SLOTS,
                 dict(model_type="Dream", architectures=["DreamModel"], mask_token_id=151666, pad_token_id=151643),
                 152064, (MIN_GEN_LEN,)),
    # Open-dCoder-0.5B: Qwen2.5's tokenizer plus a mask token; Open-dLLM's training script
    # (tasks/train_torch.py) adds "<M>" when the tokenizer has none, so the first free id, 151665; the product
    # finds it by config.json's mask_token_id (MDMGenerationConfig's)
    GoldenFamily("Open-dCoder", "qwen2",
                 Reference("pengzhangzhi/Open-dLLM", "8b38787794e7e13e74ab6f5d2ec9240595a1a777",
                           "eval/eval_infill/eval_infill.py", "infilling"),
                 infilling, decode_skipping_specials, QWEN25_ADDED + [(151665, "<M>", True)],
                 dict(eos_token="<|endoftext|>", pad_token="<|endoftext|>", mask_token="<M>"),
                 dict(model_type="qwen2", architectures=["Qwen2ForCausalLM"], mask_token_id=151665,
                      pad_token_id=151643),
                 151936, (LEADING_BOS,)),
    # dllm-hub's Qwen2.5-Coder-0.5B-Instruct-diffusion-mdlm-v0.1: Qwen2.5-Coder-Instruct's tokenizer (eos
    # <|im_end|>, pad <|endoftext|>) plus the <|mask|> dllm/utils/models.py get_tokenizer adds, at the first free
    # id; config.json as dllm/pipelines/a2d/convert.py saves it (model_type a2d-qwen2, tied head)
    GoldenFamily("dllm-hub Qwen2.5-Coder (A2D)", "a2d",
                 Reference("ZHZisZZ/dllm", "ca176752fbceec49c6b4777a2c18ae88e4eb10ed", "dllm/core/samplers/mdlm.py",
                           "MDLMSampler.infill"),
                 mdlm_infill, infill_trim, QWEN25_ADDED + [(151665, "<|mask|>", True)],
                 dict(eos_token="<|im_end|>", pad_token="<|endoftext|>", mask_token="<|mask|>"),
                 dict(model_type="a2d-qwen2", architectures=["A2DQwen2LMHeadModel"], pad_token_id=151643),
                 151936, (END_INSIDE,)),
    GoldenFamily("CoDA-v0", "coda",
                 Reference("SalesforceAIResearch/CoDA", "fa1d505008c6cd453ad3e8dbf86d5a8e3a1d8f92",
                           "CoDALanguageModel/generation_utils.py", "diffusion_generate"),
                 diffusion_generate, decode_skipping_specials, CODA_ADDED,
                 dict(bos_token="<|im_end|>", eos_token="<|im_end|>", pad_token="<|endoftext|>",
                      mask_token="<|mask|>"),
                 dict(model_type="CoDA", architectures=["CoDALanguageModel"], mask_token_id=151669,
                      pad_token_id=151643),
                 151936, (LEADING_BOS,)),
)


def tokenizer_config(fam: GoldenFamily) -> dict:
    """The family's tokenizer_config.json: its added tokens and named slots (Qwen2Tokenizer, no bos added)."""
    decoder = {str(i): dict(content=name, lstrip=False, rstrip=False, normalized=False, single_word=False,
                            special=special) for i, name, special in fam.added}
    return dict(added_tokens_decoder=decoder, add_bos_token=False, tokenizer_class="Qwen2Tokenizer",
                errors="replace", **fam.slots)
