"""`diffusion-lsp model check PATH [--json]`: is my checkpoint loaded right?

Loads the folder as every command does and prints its family, parameters, weights' dtype, special
tokens, memory and load time; then, where transformers is installed and the folder is a Hugging Face
one, our logits beside transformers' own forward under full bidirectional attention on a sample of
code (model/families/reference.py): the largest absolute difference and how often the argmax agrees. A
correctly loaded float32 checkpoint differs by ~1e-5 (tiny random checkpoints); a wrong tensor name,
RoPE base or logit shift shows as differences of the logits' own size. The tokenizer's files, its special
tokens by role and the prompt built for a one-line example: model/families/token_report.py.
Native families: model/families/native.py."""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

from . import jsonout
from .errors import UserError

SAMPLE = '''def mean(values):
    """The arithmetic mean of a non-empty list."""
    total = sum(values)
    return total / len(values)
'''


PROMPTS = {"infill": "infill (prefix | canvas | suffix on one row)",
           "fim": "fim (prefix and suffix between its FIM tokens, the canvas after them)",
           "chat": "chat (the code and the cursor in a user turn of its chat template, the answer on the canvas)"}


def register(sub):
    p = sub.add_parser("model", help="inspect a checkpoint folder")
    model = p.add_subparsers(dest="model_command", required=True, metavar="COMMAND")
    c = model.add_parser("check", help="family, sizes, special tokens, and our logits beside transformers'",
                         description="Is a checkpoint loaded right? Loads the folder as every command does and "
                                     "prints its family, parameters, dtype, special tokens, memory and load time; "
                                     "for a Hugging Face folder, where transformers is installed, also how far "
                                     "our logits are from transformers' own on a sample of code (for a model "
                                     "transformers runs, DiffusionGemma: a fill beside its own generate).")
    c.add_argument("path", metavar="PATH", help="checkpoint folder (ours or a Hugging Face one)")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.add_argument("--no-reference", action="store_true", help="skip the comparison with transformers")
    c.set_defaults(run=run)


def check_native(path: Path, reference: bool = True) -> dict:
    """`check` for a family transformers runs (a native model): its forward is transformers' own, so
    the reference is its generation: a fill of SAMPLE through our engine beside `generate` from the
    same seed and prompt, token for token."""
    import torch

    from .protocol.requests import FillRequest
    from .engine import NativeEngine
    from .model.decoding.drive import run
    from .model.families.native import SEED, end_ids, prompt_room
    from .model.families.native_load import load_native

    t0 = time.perf_counter()
    model, tok, meta, prompter = load_native(path, "cpu")
    engine, ends = NativeEngine(model, tok, meta, prompter=prompter), end_ids(model, tok)
    load_ms = (time.perf_counter() - t0) * 1e3
    params = list(model.parameters())
    out = {
        "path": str(path), "format": "huggingface (transformers' own modeling code)", "family": engine.meta["family"],
        "parameters": sum(p.numel() for p in params), "dtype_on_disk": engine.meta.get("dtype") or "float32",
        "dtype_loaded": str(params[0].dtype).replace("torch.", ""), "shift_logits": None,
        "vocab_size": tok.vocab_size, "prompt": engine.prompter.convention, "capabilities": engine.capabilities.message(),
        "canvas_length": model.config.canvas_length, "chat": _chat(path, tok),
        "special_tokens": {"eos": sorted(ends), "bos": tok.bos_id},
        "memory_mb": {"weights": round(sum(p.numel() * p.element_size() for p in params) / 2**20, 1),
                      "peak_rss": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)},
        "load_ms": round(load_ms, 1), "reference": {"skipped": "--no-reference"},
    }
    if reference:
        n = min(32, engine.max_tokens())
        prefix, suffix = SAMPLE[:SAMPLE.index("total")], SAMPLE[SAMPLE.index("total"):]
        t0 = time.perf_counter()
        decoding = engine.decode_orders([FillRequest(prefix, suffix, n)], [""])
        run(decoding)
        ours = decoding.result(0)
        ms = (time.perf_counter() - t0) * 1e3
        prompt = prompter.fill(prefix, suffix, prompt_room(model, n))
        with torch.random.fork_rng(), torch.inference_mode():
            torch.manual_seed(SEED)
            theirs = model.generate(torch.tensor([prompt]), max_new_tokens=n).sequences[0, len(prompt):].tolist()
        theirs = theirs[: next((k for k, t in enumerate(theirs) if t in ends), len(theirs))][:n]
        mine = ours.token_ids
        out["reference"] = {"tokens": len(theirs), "equal": mine == theirs, "forwards": ours.forwards,
                            "fill_ms": round(ms, 1),
                            "first_difference": next((k for k, (a, b) in enumerate(zip(mine, theirs)) if a != b),
                                                     None if len(mine) == len(theirs) else min(len(mine), len(theirs)))}
    return out


def _chat(path: Path, tok) -> str:
    """What serve-api's /v1/chat/completions puts a conversation in, for `model check`."""
    from .model.chat.conversation import chat_format

    try:
        found = chat_format(tok, path)
    except ValueError as e:
        return f"its chat template cannot be read ({e})"
    if found is None:
        return "no chat template: /v1/chat/completions answers 400 unless serve-api is given --chat-template FILE"
    return (f"its own chat template ({len(found.chat.template):,} characters"
            f"{', tools shown' if found.shows_tools else ''}"
            f"{', calls in ' + found.tool_tags[0].strip() + ' tags' if found.tool_tags[0] else ''})")


def _prompt(family_name: str | None, tok) -> dict:
    """How a fill is put to the checkpoint: its family's convention ("infill", "fim", "chat") and the line
    that says it (a DreamOn checkpoint and our own format infill)."""
    from .model.families.table import FAMILIES, prompt_description

    family = FAMILIES.get(family_name)
    return {"prompt": family.prompt if family else "infill",
            "prompt_description": prompt_description(family, lambda name: tok.hf.token_to_id(name) is not None)}


def check(path: Path, reference: bool = True) -> dict:
    """The figures `model check` prints. CheckpointError when the folder does not load."""
    from .model.families.table import is_native_folder

    if is_native_folder(path):
        return check_native(path, reference)

    from .model.families.pretrained import is_hf_folder, load_folder  # raises CheckpointError

    t0 = time.perf_counter()
    model, tok, meta = load_folder(path, "cpu")
    load_ms = (time.perf_counter() - t0) * 1e3
    params = sum(p.numel() for p in model.parameters())
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    hf = is_hf_folder(path)
    out = {
        "path": str(path), "format": "huggingface" if hf else "diffusion-lsp",
        "family": meta.get("family", "diffusion-lsp"),
        "parameters": params, "dtype_on_disk": meta.get("torch_dtype") or meta.get("dtype") or "float32",
        "dtype_loaded": str(next(model.parameters()).dtype).replace("torch.", ""),
        "shift_logits": model.config.shift_logits, "vocab_size": tok.vocab_size,
        "special_tokens": {"mask": tok.mask_id, "filler": tok.filler_id, "bos": tok.bos_id,
                           **{role: tok.id_of(role) for role in tok.special.extra}},
        "memory_mb": {"weights": round(weight_bytes / 2**20, 1),
                      "peak_rss": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)},
        "load_ms": round(load_ms, 1), "reference": None,
    }
    out.update(_prompt(meta.get("family"), tok), chat=_chat(path, tok), tokenizer=_tokenizer(path, model, tok))
    if not reference:
        out["reference"] = {"skipped": "--no-reference"}
    elif not hf:
        out["reference"] = {"skipped": "our own format has no transformers reference"}
    else:
        out["reference"] = _compare(path, model, tok)
    return out


def _tokenizer(path: Path, model, tok) -> dict:
    """The tokenizer's files, special tokens by role and the example prompt (token_report)."""
    from .model.families.pretrained import is_hf_folder, read_hf_config
    from .model.families.table import detect_family
    from .model.families.token_report import token_report
    from .model.network.config import adapter_base

    folder = adapter_base(path) or path
    family = detect_family(read_hf_config(folder)[0]) if is_hf_folder(folder) else None
    return token_report(folder, tok, family, model.config.max_seq_len)


def _tokenizer_lines(report: dict) -> list[str]:
    def said(name, r):
        uses = r.get("product_uses")
        uses = f"; the product uses {uses['token']} {uses['id']}" if uses else ""
        return f"{name} {r['token']} {r['id']} ({r['from']}{uses})" if "id" in r else f"{name} {r['missing']}{uses}"

    roles = ", ".join(said(name, r) for name, r in report["roles"].items())
    example = report["example"]
    return [f"  tokenizer: {report['files']}, {report['vocab_size']:,} tokens; {roles}",
            f"  tokens of the families: {', '.join(report['families_with_these_tokens']) or 'none known'}",
            f"  example prompt for {example['prefix']!r} | cursor | {example['suffix']!r}: "
            + (f"none ({example['skipped']})" if "skipped" in example else
               " ".join(f"{i}:{p!r}" for i, p in zip(example["ids"], example["pieces"])))]


def _compare(path: Path, model, tok) -> dict:
    """Our forward against transformers' on SAMPLE for a Hugging Face folder: the largest logit
    difference and how often the two agree on the top token; why not, where it is skipped."""
    import torch

    from .model.families.table import detect_family
    from .model.families.pretrained import PretrainedLM, read_hf_config
    from .model.families.reference import CLASSES

    family = detect_family(read_hf_config(path)[0])
    if family.name not in CLASSES:
        return {"skipped": f"transformers has no class for {family.name} (its modeling file is remote code, never "
                           "run here; the tests compare our forward with one written from it)"}
    try:
        from .model.families.reference import reference_logits, reference_model

        ref = reference_model(path)
    except ImportError:
        return {"skipped": "transformers is not installed (pip install transformers)"}
    ids = torch.tensor([tok.encode(SAMPLE)])
    with torch.inference_mode():
        ours = PretrainedLM(model)(ids).float()
    theirs = reference_logits(ref, ids)
    return {"tokens": ids.shape[1], "max_abs_diff": float((ours - theirs).abs().max()),
            "logit_std": float(theirs.std()),
            "argmax_agreement": float((ours.argmax(-1) == theirs.argmax(-1)).float().mean())}


def run(args) -> int:
    from .model.families.checkpoint import CheckpointError

    path = Path(args.path)
    # not is_file(): a FIFO or a folder by that name is the loader's error; adapter.json: an adapter folder
    if not any((path / name).exists() for name in ("config.json", "adapter.json")):
        raise UserError(f"no checkpoint at {path} (config.json is missing, nor is it an adapter: no adapter.json)")
    try:
        report = check(path, reference=not args.no_reference)
    except (CheckpointError, ValueError) as e:
        raise UserError(str(e)) from None
    if args.json:
        print(jsonout.dumps(report))
        return 0
    ref = report["reference"]
    lines = [f"{report['path']}: {report['format']} checkpoint, family {report['family']}",
             f"  {report['parameters']:,} parameters, {report['dtype_on_disk']} on disk, loaded as "
             f"{report['dtype_loaded']}; " + ("runs through transformers' modeling and generation code"
                                              if report["shift_logits"] is None else
                                              f"logits {'shifted' if report['shift_logits'] else 'in place'}"),
             f"  vocab {report['vocab_size']:,}; "
             + ", ".join(f"{role} {i}" for role, i in report["special_tokens"].items()),
             f"  weights {report['memory_mb']['weights']:,} MB, peak RSS {report['memory_mb']['peak_rss']:,} MB, "
             f"loaded in {report['load_ms']:,.0f} ms"]
    if "tokenizer" in report:
        lines += _tokenizer_lines(report["tokenizer"])
    if "prompt_description" in report:
        lines.append(f"  prompt: {report['prompt_description']}")
    if "chat" in report:
        lines.append(f"  chat: {report['chat']}")
    if "canvas_length" in report:
        can = report["capabilities"]
        unscored = "; it cannot score given tokens (no guesses from your own code are checked)"
        lines.append(f"  prompt: {PROMPTS[report['prompt']]}; canvas {report['canvas_length']} tokens; "
                     f"next edits by {'a rewrite prompt' if can['rewrite'] else 'a full re-mask'}"
                     f"{unscored if not can['probe'] else ''}")
    if "skipped" in ref:
        lines.append(f"  transformers reference: skipped ({ref['skipped']})")
    elif "equal" in ref:
        where = "" if ref["equal"] else f", first difference at token {ref['first_difference']}"
        lines.append(f"  a {ref['tokens']}-token fill beside transformers' generate from the same seed: "
                     f"{'equal token for token' if ref['equal'] else 'DIFFERENT'}{where} "
                     f"({ref['forwards']} denoising steps, {ref['fill_ms']:,.0f} ms)")
    else:
        lines.append(f"  beside transformers on {ref['tokens']} tokens: max |diff| {ref['max_abs_diff']:.3g} "
                     f"(logit std {ref['logit_std']:.3g}), argmax agrees on {ref['argmax_agreement']:.1%}")
    print("\n".join(lines))
    sys.stdout.flush()
    return 0
