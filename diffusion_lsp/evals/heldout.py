"""`diffusion-lsp eval heldout`: masked-token loss and single-line exact match on the packages the
corpus holds out for validation (data/corpus/val.jsonl), each beside a trivial baseline."""

from __future__ import annotations

import functools
import json
import math
import random
from pathlib import Path

from .. import jsonout
from ..errors import UserError
from ..fim_batch import Item, decode_all
from ..options import add_fill_args, engine_for, launch_settings, sampler_config
from .metrics import edit_similarity, exact_match, mean_score

MASK_RATES = (0.15, 0.5, 0.85)


def register(ev):
    h = ev.add_parser("heldout", help="masked-token loss and single-line exact match on held-out packages")
    h.add_argument("--corpus", default="data/corpus",
                   help="corpus folder with val.jsonl, made by `diffusion-lsp data build` (default data/corpus)")
    h.add_argument("--lines", type=int, default=200, help="single lines to fill (default 200)")
    h.add_argument("--crops", type=int, default=64, help="crops for the masked-token loss (default 64)")
    h.add_argument("--seq-len", type=int, default=256)
    h.add_argument("--seed", type=int, default=0)
    h.add_argument("--json", action="store_true", help="print one JSON object")
    add_fill_args(h)
    h.set_defaults(run=run)


def load_val(corpus: str) -> list[dict]:
    path = Path(corpus) / "val.jsonl"
    if not path.is_file():
        raise UserError(f"{path} not found: run `diffusion-lsp data build` first")
    with path.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def pick_lines(docs: list[dict], n: int, rng: random.Random, window: int = 3000):
    """-> [(prefix, suffix, line, previous line)]: non-blank lines with their surroundings."""
    picks = []
    while len(picks) < n:
        text = rng.choice(docs)["text"]
        lines = text.splitlines(keepends=True)
        candidates = [i for i in range(1, len(lines)) if lines[i].strip()]
        if not candidates:
            continue
        i = rng.choice(candidates)
        prefix, suffix = "".join(lines[:i])[-window:], "".join(lines[i + 1 :])[: window // 2]
        picks.append((prefix, suffix, lines[i], lines[i - 1]))
    return picks


def masked_token_loss(engine, docs, crops: int, seq_len: int, rng: random.Random) -> dict:
    """Mean cross-entropy (nats) on masked tokens at fixed mask rates, and a unigram baseline."""
    import torch  # kept off --help
    import torch.nn.functional as F

    tok, model = engine.tokenizer, engine.model
    device = next(model.parameters()).device
    ids = [tok.encode(d["text"]) for d in docs]
    ids = [x for x in ids if len(x) >= seq_len]
    if not ids:
        raise UserError(f"no held-out file has {seq_len} tokens")
    rows = []
    for _ in range(crops):
        x = rng.choice(ids)
        s = rng.randrange(0, len(x) - seq_len + 1)
        rows.append(x[s : s + seq_len])
    tokens = torch.tensor(rows, device=device)
    counts = torch.bincount(tokens.flatten(), minlength=model.config.vocab_size).float() + 1e-3
    unigram = -(counts / counts.sum()).log()
    gen = torch.Generator(device="cpu").manual_seed(rng.randrange(2**31))
    out = {}
    with torch.inference_mode():
        for rate in MASK_RATES:
            mask = (torch.rand(tokens.shape, generator=gen) < rate).to(device)
            noisy = torch.where(mask, tok.mask_id, tokens)
            total, n = 0.0, 0
            for b in range(0, len(rows), 8):
                logits, _ = model(noisy[b : b + 8])
                if model.config.shift_logits:  # output i predicts token i + 1
                    logits = torch.cat([logits[:, :1], logits[:, :-1]], 1)
                m = mask[b : b + 8]
                total += F.cross_entropy(logits[m].float(), tokens[b : b + 8][m], reduction="sum").item()
                n += int(m.sum())
            out[f"loss@{rate}"] = total / max(n, 1)
        out["unigram_loss"] = unigram[tokens].mean().item()
    return out


def run(args) -> int:
    from ..backend.local import LocalBackend

    cfg, launch = sampler_config(args), launch_settings(args)
    rng = random.Random(args.seed)
    docs = load_val(args.corpus)
    backend = LocalBackend.loading(functools.partial(engine_for, launch))  # every torch call on its thread
    loss = backend.on_model_thread(masked_token_loss, backend.engine, docs, args.crops, args.seq_len, rng)
    picks = pick_lines(docs, args.lines, rng)
    requests = [Item(i, p, s, args.max_tokens, True) for i, (p, s, _, _) in enumerate(picks)]
    records, wall = decode_all(backend, requests, cfg, args.batch_size, desc=args.policy)
    fills = [r.get("text", "").split("\n", 1)[0] for r in records]
    lines = [line for _, _, line, _ in picks]
    guesses = {"": fills, "_copy_previous_line": [prev for *_, prev in picks], "_empty": [""] * len(lines)}
    scores = {f"{metric.__name__}{who}": mean_score(metric, guessed, lines)
              for metric in (exact_match, edit_similarity) for who, guessed in guesses.items()}
    tokens = sum(r.get("tokens", 0) for r in records)
    result = {"packages": sorted({d["package"] for d in docs}), "files": len(docs), **loss, "lines": len(picks),
              **scores, "forwards_per_token": sum(r.get("forwards", 0) for r in records) / max(tokens, 1),
              "ms_per_line": wall * 1e3 / len(picks), "policy": args.policy}
    if args.json:
        print(jsonout.dumps(result))
        return 0
    print(f"held-out packages: {', '.join(result['packages'])} ({len(docs)} files)")
    for rate in MASK_RATES:
        print(f"masked-token loss at {rate:.0%} masked: {loss[f'loss@{rate}']:.3f} nats "
              f"(ppl {math.exp(loss[f'loss@{rate}']):.1f}); unigram baseline {loss['unigram_loss']:.3f}")
    for metric, name in (("exact_match", f"exact match ({len(picks)} lines, {args.policy})"),
                         ("edit_similarity", "edit similarity")):
        print(f"single-line {name}: {scores[metric]:.1%}; copy-previous-line baseline "
              f"{scores[metric + '_copy_previous_line']:.1%}; empty baseline {scores[metric + '_empty']:.1%}")
    print(f"forwards per token {result['forwards_per_token']:.3f}, {result['ms_per_line']:.0f} ms per line")
    return 0
