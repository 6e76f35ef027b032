"""`diffusion-lsp data build|tokenizer|edits|pack|unpack`: rebuild the training corpus from the pinned
manifest, train the byte-level BPE tokenizer on its train split, build next-edit records
(data/edits.py), and pack a corpus as token ids in one compressed file (data/pack.py)."""

from __future__ import annotations

import json
import sys
import time
import zlib
from pathlib import Path

from ..errors import UserError
from ..input_files import InputFile
from ..workspace_files import check_file, output_path, write_file
from .build import build_corpus
from .manifest import load_manifest


def register(sub):
    p = sub.add_parser("data", help="build the training corpus and its tokenizer",
                       description="Build the training corpus from the pinned manifest and train its tokenizer.")
    actions = p.add_subparsers(dest="data_command", required=True, metavar="ACTION")
    b = actions.add_parser("build", help="download, filter, deduplicate and split the corpus")
    b.add_argument("--manifest", metavar="PATH", type=InputFile, help="manifest.json (default: the one shipped with the package)")
    b.add_argument("--out", default="data/corpus", metavar="DIR", help="corpus folder (default data/corpus)")
    b.add_argument("--cache", default="data/cache", metavar="DIR", help="downloaded archives (default data/cache)")
    t = actions.add_parser("tokenizer", help="train the byte-level BPE tokenizer on train.jsonl")
    t.add_argument("--corpus", default="data/corpus", metavar="DIR", help="corpus folder (default data/corpus)")
    t.add_argument("--vocab-size", type=int, default=8192, metavar="N", help="vocabulary size (default 8192)")
    t.add_argument("--out", metavar="PATH", type=output_path, help="tokenizer.json to write (default DIR/tokenizer.json)")
    t.add_argument("--max-mb", type=float, default=300.0, metavar="MB",
                   help="train on a deterministic sample of about this many MB of train.jsonl (default 300)")
    e = actions.add_parser("edits", help="next-edit records: mined from previous releases, and synthetic")
    e.add_argument("--manifest", metavar="PATH", type=InputFile, help="manifest.json (default: the one shipped with the package)")
    e.add_argument("--corpus", default="data/corpus", metavar="DIR", help="corpus folder (default data/corpus)")
    e.add_argument("--cache", default="data/cache", metavar="DIR", help="downloaded archives (default data/cache)")
    e.add_argument("--out", default="data/edits", metavar="DIR", help="output folder (default data/edits)")
    e.add_argument("--tokenizer", metavar="DIR",
                   help="folder whose tokenizer sizes regions (default: the embedded model)")
    e.add_argument("--synthetic-rate", type=float, default=0.25, metavar="R",
                   help="fraction of corpus files that synthetic edits are derived from (default 0.25)")
    e.add_argument("--per-file", type=int, default=3, metavar="N", help="synthetic records per file (default 3)")
    e.add_argument("--no-mined", action="store_true", help="synthetic records only (no downloads)")
    k = actions.add_parser("pack", help="a corpus as token ids in one tar.xz (for a machine without network)")
    k.add_argument("--corpus", default="data/corpus", metavar="DIR", help="corpus folder (default data/corpus)")
    k.add_argument("--tokenizer", metavar="DIR",
                   help="checkpoint folder whose tokenizer.json tokenizes it (default: the embedded model)")
    k.add_argument("--out", required=True, metavar="FILE", type=output_path, help="the pack to write (.tar.xz)")
    k.add_argument("--max-mb", type=float, default=38.0, metavar="MB",
                   help="keep whole train files while the pack stays under about this size (default 38)")
    u = actions.add_parser("unpack", help="a token pack back into a corpus folder that `train --corpus` reads")
    u.add_argument("pack", metavar="FILE", type=InputFile)
    u.add_argument("--out", required=True, metavar="DIR", help="corpus folder to write")
    p.set_defaults(run=run)


def run(args) -> int:
    return {"build": run_build, "tokenizer": run_tokenizer, "edits": run_edits, "pack": run_pack,
            "unpack": run_unpack}[args.data_command](args)


def run_pack(args) -> int:
    from ..engine import model_folder
    from ..model.network.config import SpecialTokens
    from ..model.network.tokenizer import Tokenizer
    from .token_files import PackError
    from .pack import pack

    tok_path = model_folder(args.tokenizer) / "tokenizer.json"
    if not tok_path.is_file():
        raise UserError(f"no tokenizer.json in {tok_path.parent}")
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    check_file(args.out)  # refused before the corpus is tokenized
    try:
        meta = pack(Path(args.corpus), Tokenizer.from_file(tok_path, SpecialTokens()), Path(args.out), args.max_mb)
    except (PackError, OSError) as e:
        raise UserError(str(e)) from None
    size = Path(args.out).stat().st_size / 2**20
    print(f"{args.out}: {size:.1f} MiB; train {meta['train_tokens']:,} tokens in {meta['train_files']:,} files "
          f"(of {meta['train_tokens_in_corpus']:,} in the corpus), val {meta.get('val_tokens', 0):,} tokens")
    return 0


def run_unpack(args) -> int:
    from .token_files import PackError
    from .pack import unpack

    try:
        meta = unpack(args.pack, Path(args.out))
    except (PackError, OSError) as e:
        raise UserError(str(e)) from None
    print(f"{args.out}: train {meta['train_tokens']:,} tokens, val {meta.get('val_tokens', 0):,} tokens")
    return 0


def run_build(args) -> int:
    try:
        manifest = load_manifest(args.manifest)
    except (OSError, ValueError) as e:
        raise UserError(f"manifest: {e}") from None
    start = time.perf_counter()
    try:
        stats = build_corpus(manifest, Path(args.out), Path(args.cache))
    except (OSError, RuntimeError, ValueError) as e:
        raise UserError(str(e)) from None
    for name, s in stats["splits"].items():
        print(f"{name}: {s['packages']} packages, {s['files']} files, {s['bytes'] / 1e6:.1f} MB")
    d = stats["dedup"]
    print(f"duplicates dropped: {d['duplicates']} files, {d['duplicate_bytes'] / 1e6:.1f} MB; "
          f"built in {time.perf_counter() - start:.0f} s -> {args.out}")
    return 0


def read_records(path: Path):
    with path.open(encoding="utf-8") as f:
        for line in f:
            if line.strip():
                yield json.loads(line)


def run_tokenizer(args) -> int:
    corpus = Path(args.corpus)
    train, val = corpus / "train.jsonl", corpus / "val.jsonl"
    if not train.exists():
        raise UserError(f"{train} not found; run `diffusion-lsp data build` first")
    if args.vocab_size < 300:
        raise UserError(f"--vocab-size must be at least 300 (256 bytes + merges), got {args.vocab_size}")
    from tqdm import tqdm  # tqdm and the tokenizers library: kept off --help

    from ..model.network.tokenizer import train_bpe

    out = Path(args.out) if args.out else corpus / "tokenizer.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    check_file(out)  # refused before the training, not after it
    keep = min(1.0, args.max_mb * 1e6 / train.stat().st_size)  # jsonl size slightly overstates the text
    used = {"files": 0, "bytes": 0}

    def texts():
        for r in tqdm(read_records(train), desc="tokenizer", unit="file", file=sys.stderr):
            if keep < 1.0 and zlib.crc32(f"{r['package']}/{r['path']}".encode()) >= keep * 2**32:
                continue
            used["files"] += 1
            used["bytes"] += len(r["text"].encode())
            yield r["text"]

    start = time.perf_counter()
    tok = train_bpe(texts(), args.vocab_size)
    seconds = time.perf_counter() - start
    write_file(out, tok.hf.to_str(pretty=True))
    print(f"tokenizer: {tok.vocab_size} tokens, trained on {used['files']} files "
          f"({used['bytes'] / 1e6:.1f} MB) in {seconds:.0f} s -> {out}")
    if val.exists():
        texts_val = [r["text"] for r in read_records(val)]
        n_tokens = sum(len(e.ids) for e in tok.hf.encode_batch(texts_val, add_special_tokens=False))
        n_bytes = sum(len(t.encode()) for t in texts_val)
        print(f"val: {n_tokens / max(n_bytes, 1):.4f} tokens/byte ({n_bytes / max(n_tokens, 1):.2f} bytes/token) "
              f"over {len(texts_val)} files")
    return 0


def run_edits(args) -> int:
    from ..context.tokens import model_token_counter
    from ..engine import DEFAULT_MODEL
    from . import edits, synthetic_edits
    from .build import pip_fetch

    corpus, out = Path(args.corpus), Path(args.out)
    if not (corpus / "train.jsonl").exists():
        raise UserError(f"{corpus / 'train.jsonl'} not found; run `diffusion-lsp data build` first")
    if not 0.0 <= args.synthetic_rate <= 1.0 or args.per_file < 0:
        raise UserError("--synthetic-rate must be in [0, 1] and --per-file >= 0")
    try:
        manifest = load_manifest(args.manifest)
    except (OSError, ValueError) as e:
        raise UserError(f"manifest: {e}") from None
    count = model_token_counter(args.tokenizer or DEFAULT_MODEL)
    start = time.perf_counter()
    splits: dict[str, list] = {"train": [], "val": []}
    if not args.no_mined:
        try:
            for rec, val in edits.mined_records(manifest, Path(args.cache), pip_fetch, count):
                splits["val" if val else "train"].append(rec)
        except (OSError, RuntimeError, ValueError) as e:
            raise UserError(str(e)) from None
        splits = {s: edits.cap_no_edit(rs) for s, rs in splits.items()}
    print(f"mined: {sum(map(len, splits.values()))} records in {time.perf_counter() - start:.0f} s", flush=True)
    sources = {"train": (corpus / "train.jsonl", args.synthetic_rate),
               "val": (corpus / "val.jsonl", args.synthetic_rate / 4)}
    for split, (path, rate) in sources.items():
        if path.exists() and args.per_file:
            splits[split] += synthetic_edits.synthetic_records(path, rate, count, args.per_file)
    out.mkdir(parents=True, exist_ok=True)
    stats = {"format": edits.RECORD_FORMAT, "splits": {}}
    for split, records in splits.items():
        kinds: dict[str, int] = {}
        with (out / f"{split}.jsonl.tmp").open("w", encoding="utf-8") as f:
            for rec in records:
                f.write(rec.to_json() + "\n")
                kinds[rec.kind] = kinds.get(rec.kind, 0) + 1
        (out / f"{split}.jsonl.tmp").replace(out / f"{split}.jsonl")
        stats["splits"][split] = {"records": sum(kinds.values()), "kinds": kinds,
                                  "files": len({(r.source, r.path) for r in records})}
        print(f"{split}: {sum(kinds.values())} records ({', '.join(f'{k} {n}' for k, n in sorted(kinds.items()))})")
    (out / "stats.json").write_text(json.dumps(stats, indent=2) + "\n")
    print(f"built in {time.perf_counter() - start:.0f} s -> {out}")
    return 0
