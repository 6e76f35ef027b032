"""The `regress` command line: measure, save a baseline, compare with one; its exit codes.

Exit codes: 0 within tolerance (or saved), 1 regressed, 2 could not run (the model did not load, the
server did not start, the API did not answer, a bad flag or an unreadable file), 3 baseline incompatible
(another workload or format, or another model without --allow-model-change).
A baseline's structure is checked by baseline.py."""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

from .. import __version__, jsonout
from ..engine import model_folder
from ..errors import UserError
from ..protocol.settings import LaunchSettings
from ..input_files import InputFile, Refused
from ..options import MAX_SOURCE, add_launch_args, launch_settings
from ..workspace_files import check_file, output_path
from . import baseline
from .compare import Tolerances, judge, run_calibration
from .report import junit, markdown, saved_markdown, table, verdict_line, write

FORMAT = "diffusion-lsp-regress/1"
PASSED, REGRESSED, COULD_NOT_RUN, INCOMPATIBLE = 0, 1, 2, 3
# the workload flags' defaults; None on the parser, so a compare knows which were given
WORKLOAD_DEFAULTS = {"files": 6, "requests": 60, "chars": 4, "next_edits": 12, "seed": 0}
# what regress sets on the server unless --settings says otherwise: no debounce (the figures are the
# requests' own latency), next edits on whatever the model claims (they are measured), a worker of its own
BASE_SETTINGS = {"completion": {"debounceMs": 0}, "nextEdit": {"enable": True}, "worker": {"idleExitS": 0}}

EPILOG = f"""\
exit codes: {PASSED} within tolerance (or only --save), {REGRESSED} regressed, {COULD_NOT_RUN} could not run, \
{INCOMPATIBLE} baseline incompatible

examples:
  diffusion-lsp regress --repo . --save base.json
  diffusion-lsp regress --compare base.json --junit regress.xml --summary "$GITHUB_STEP_SUMMARY"
  diffusion-lsp regress --compare base.json --model runs/new/checkpoint --allow-model-change"""


def register(sub) -> None:
    p = sub.add_parser(
        "regress", help="completion latency and quality against a saved baseline: exit 1 when they got worse",
        description="Replay typing sessions and next-edit requests through the real language server, several "
                    "times, and record their latency (also as ratios to a calibration timed beside them) and "
                    "quality. --save keeps the run as a baseline (the workload's files included); --compare replays "
                    "the baseline's workload and fails when a figure is worse than its tolerance allows.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--save", metavar="BASE.json", type=output_path, help="write this run as a baseline")
    p.add_argument("--compare", metavar="BASE.json", type=InputFile, help="compare this run with a baseline (its workload is replayed)")
    w = p.add_argument_group("workload (sampled for --save; with --compare, given only to check the baseline's)")
    w.add_argument("--repo", metavar="PATH", help="type in this repository's files (default: CPython test modules)")
    w.add_argument("--files", type=int, metavar="N", help=f"files to type in (default {WORKLOAD_DEFAULTS['files']})")
    w.add_argument("--requests", type=int, metavar="N",
                   help=f"completion requests per repetition (default {WORKLOAD_DEFAULTS['requests']})")
    w.add_argument("--chars", type=int, metavar="N",
                   help=f"characters typed into each body, one request each (default {WORKLOAD_DEFAULTS['chars']})")
    w.add_argument("--next-edits", type=int, metavar="N",
                   help=f"renames asking for the next edit (default {WORKLOAD_DEFAULTS['next_edits']}; 0: none)")
    w.add_argument("--seed", type=int, help="the sampling's seed (default 0)")
    p.add_argument("--repeat", type=int, default=3, metavar="N", help="repetitions, each in a fresh server (default 3)")
    p.add_argument("--settings", metavar="FILE", type=InputFile, help="the server's settings, as JSON (the diffusionLsp object an "
                                                      "editor sends); default: the server's own, no debounce")
    t = p.add_argument_group("tolerances (--compare)")
    d = Tolerances()
    t.add_argument("--latency-tolerance", type=float, default=d.latency, metavar="R",
                   help=f"a latency p50 may be this much slower, a p95 twice as much (default {d.latency})")
    t.add_argument("--quality-tolerance", type=float, default=d.quality, metavar="R",
                   help=f"a quality figure may lose this share of its value (default {d.quality})")
    t.add_argument("--floor-ms", type=float, default=d.floor_ms, metavar="MS",
                   help=f"a latency may always be this many ms slower (default {d.floor_ms:g})")
    t.add_argument("--normalize", choices=("auto", "calibration", "none"), default="auto",
                   help="compare latencies as ratios to the calibration, or as ms (auto: the calibration for a "
                        "local model, ms for --backend openai, whose speed is not this machine's)")
    t.add_argument("--allow-model-change", action="store_true",
                   help="compare with a baseline of another model (a new checkpoint is what is being tested)")
    p.add_argument("--junit", metavar="FILE", type=output_path, help="also write the verdicts as JUnit XML")
    p.add_argument("--summary", metavar="FILE", type=output_path, help="also append a Markdown summary (e.g. $GITHUB_STEP_SUMMARY)")
    add_launch_args(p)
    p.set_defaults(run=run)


class Stop(Exception):
    """Ends the run with an exit code and a reason (could not run, incompatible)."""

    def __init__(self, code: int, reason: str):
        super().__init__(reason)
        self.code, self.reason = code, reason


def run(args) -> int:
    t0 = time.perf_counter()
    for flag, path in (("--junit", args.junit), ("--summary", args.summary), ("--save", args.save)):
        if path:  # refused now, not after minutes of measuring
            check_file(path, flag)
    try:
        return _run(args, t0)
    except Stop as e:
        word = "BASELINE INCOMPATIBLE" if e.code == INCOMPATIBLE else "COULD NOT RUN"
        line = f"regress: {word}: {e.reason}"
        print(line)
        write(args.junit, junit([], time.perf_counter() - t0, error=line), "--junit")
        write(args.summary, markdown("diffusion-lsp regress", line, [], [], False), "--summary", append=True)
        return e.code


def _run(args, t0: float) -> int:
    if args.save is None and args.compare is None:
        raise UserError("give --save BASE.json (record a baseline), --compare BASE.json, or both")
    if args.repeat < 1:
        raise UserError(f"--repeat must be at least 1, got {args.repeat}")
    try:
        tol = Tolerances(args.latency_tolerance, args.quality_tolerance, args.floor_ms)
    except ValueError as e:
        raise UserError(str(e)) from None
    launch = launch_settings(args)
    settings = _settings(args.settings)
    base = _load(args.compare) if args.compare else None
    workload = _workload(args, base)
    model = describe_model(launch)
    if base is not None:  # the workload is the baseline's (_workload checked it)
        _check_model(base, model, args.allow_model_change)

    from ..cpus import default_threads
    from . import measure
    from .figures import calibration_summary, figures

    threads = launch.threads or default_threads(1)
    if launch.backend == "local":
        launch = launch.replace(threads=threads)
    print(f"regress: {workload.requests} completion requests and {workload.renames} next-edit requests in "
          f"{len(workload.files)} files ({', '.join(workload.languages)}) from {workload.source}, "
          f"{args.repeat} repetitions; model {model['name']}")
    try:
        reps = measure.run(launch, settings, workload, args.repeat, threads)
    except UserError as e:
        raise Stop(COULD_NOT_RUN, str(e)) from None
    except (OSError, TimeoutError) as e:
        raise Stop(COULD_NOT_RUN, f"the server failed mid-run ({type(e).__name__}: {e})") from None
    record = {"format": FORMAT, "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "version": __version__, "machine": machine(threads), "model": model, "settings": settings,
              "repeat": args.repeat, "calibration": calibration_summary(reps), "figures": figures(reps),
              "workload": workload.to_wire()}
    for line in unserved(record["figures"]):
        print(f"regress: {line}")
    if args.save:
        write(args.save, jsonout.dumps(record, indent=1) + "\n", "--save")
        print(f"regress: saved the baseline to {args.save} ({len(record['figures'])} figures)")
    if base is None:
        line = f"regress: saved a baseline of {len(record['figures'])} figures ({model['name']})"
        write(args.summary, saved_markdown("diffusion-lsp regress", line, record["figures"]), "--summary", append=True)
        return PASSED
    normalize = args.normalize == "calibration" or (args.normalize == "auto" and launch.backend == "local")
    verdicts = judge(base, record, tol, normalize)
    header = _header(base, record, normalize)
    line = verdict_line(verdicts)
    print("\n".join(header))
    print(table(verdicts, normalize))
    print(line)
    write(args.junit, junit(verdicts, time.perf_counter() - t0), "--junit")
    write(args.summary, markdown("diffusion-lsp regress", line, verdicts, header, normalize), "--summary", append=True)
    return REGRESSED if any(v.failed for v in verdicts) else PASSED


def _settings(path: InputFile | str | None) -> dict:
    """BASE_SETTINGS under the file's (a {"diffusionLsp": {...}} wrapper is taken off), read by
    input_files (a FIFO is refused, not waited on)."""
    out = json.loads(json.dumps(BASE_SETTINGS))
    if path is None:
        return out
    try:
        data = (path if isinstance(path, InputFile) else InputFile(path)).read_bytes(MAX_SOURCE)
    except Refused as e:
        raise UserError(str(e)) from None
    try:
        raw = baseline.parse(data)
    except ValueError as e:
        raise UserError(f"{path} is not JSON ({e})") from None
    if isinstance(raw, dict) and set(raw) == {"diffusionLsp"}:
        raw = raw["diffusionLsp"]
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise UserError(f"{path}: the settings must be an object of sections, e.g. "
                        '{"completion": {"maxContextTokens": 1024}, "sampling": {"policy": "topk"}}')
    for section, values in raw.items():
        out.setdefault(section, {}).update(values)
    return out


def _load(path: InputFile | str) -> dict:
    """The baseline, its whole structure checked before anything runs."""
    try:
        data = (path if isinstance(path, InputFile) else InputFile(path)).read_bytes(MAX_SOURCE)  # a regular file only: a FIFO is refused, not waited on
    except Refused as e:
        raise Stop(COULD_NOT_RUN, f"cannot read the baseline ({e})") from None
    try:
        base = baseline.parse(data)
    except ValueError as e:
        raise Stop(INCOMPATIBLE, f"the baseline {path} is not JSON ({e})") from None
    if not isinstance(base, dict) or base.get("format") != FORMAT:
        got = base.get("format") if isinstance(base, dict) else type(base).__name__
        raise Stop(INCOMPATIBLE, f"{path} is not a regress baseline of format {FORMAT} (it has {got!r:.80}); "
                                 "save a new one with --save")
    try:
        baseline.check(base)
    except ValueError as e:
        raise Stop(INCOMPATIBLE, f"{path}: {e}") from None
    return base


def _workload(args, base: dict | None):
    from .workload import Workload, repository_files, sample, stdlib_files

    given = {k: getattr(args, k) for k in WORKLOAD_DEFAULTS if getattr(args, k) is not None}
    for k, v in given.items():
        if v < 0 or (k in ("files", "requests") and v < 1):
            raise UserError(f"--{k.replace('_', '-')} must be at least {1 if k in ('files', 'requests') else 0}")
    stored = None
    if base is not None:
        try:
            stored = Workload.from_wire(base["workload"])
        except ValueError as e:
            raise Stop(INCOMPATIBLE, str(e)) from None
        if not given and args.repo is None:
            return stored
    n = {**WORKLOAD_DEFAULTS, **given}
    if args.repo:
        root = Path(args.repo).resolve()
        files, source = repository_files(str(root)), f"the repository {root}"
    else:
        files, source = stdlib_files(), "CPython's test modules"
    if not files:
        raise UserError("no workload files in the Python standard library; pass --repo PATH")
    workload = sample(files, source, n["requests"], n["chars"], n["next_edits"], n["files"], n["seed"])
    if stored is not None and workload.fingerprint() != stored.fingerprint():
        raise Stop(INCOMPATIBLE, f"the workload asked for ({_describe(workload)}) is not the baseline's "
                                 f"({_describe(stored)}); leave out the workload flags to replay the baseline's")
    return workload


def _describe(w) -> str:
    return (f"{len(w.files)} files from {w.source}, {w.requests} requests, {w.renames} renames, seed {w.seed}, "
            f"fingerprint {w.fingerprint()}")


def _check_model(base: dict, model: dict, allow_model_change: bool) -> None:
    b = base["model"]
    if (b.get("backend"), b.get("fingerprint")) != (model["backend"], model["fingerprint"]) and not allow_model_change:
        raise Stop(INCOMPATIBLE, f"the baseline measured the model {b.get('name')} ({b.get('backend')}, "
                                 f"{b.get('fingerprint')}), this run {model['name']} ({model['backend']}, "
                                 f"{model['fingerprint']}); pass --allow-model-change when the new model is what "
                                 "is being tested")


def describe_model(launch: LaunchSettings) -> dict:
    """Which model answers: its name and a fingerprint (a checkpoint's files, or the API's model name)."""
    if launch.backend == "openai":
        name = f"{launch.remote_model} at {launch.base_url}"
        return {"backend": "openai", "name": name,
                "fingerprint": hashlib.sha256(name.encode()).hexdigest()[:16]}
    folder = model_folder(launch.path)
    if not (folder / "config.json").is_file():
        raise Stop(COULD_NOT_RUN, f"no checkpoint at {folder} (no config.json)")
    return {"backend": "local", "name": launch.path or "the embedded default model",
            "fingerprint": folder_fingerprint(folder), "precision": launch.precision, "device": launch.device}


FULL_HASH_BYTES, CHUNKS, CHUNK = 32 << 20, 16, 1 << 16


def folder_fingerprint(folder: Path) -> str:
    """A hash of a checkpoint folder's files (their names, sizes and bytes; of a file over
    FULL_HASH_BYTES, CHUNKS evenly spaced CHUNK-byte pieces: a 15 GB checkpoint is not read whole).
    Notes and logs (*.md, *.jsonl) are left out."""
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.suffix not in (".md", ".jsonl")):
        size = path.stat().st_size
        h.update(f"{path.relative_to(folder).as_posix()}\0{size}\0".encode())
        with path.open("rb") as f:
            if size <= FULL_HASH_BYTES:
                h.update(f.read())
                continue
            for i in range(CHUNKS):
                f.seek(i * (size - CHUNK) // (CHUNKS - 1))
                h.update(f.read(CHUNK))
    return h.hexdigest()[:16]


def machine(threads: int) -> dict:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "threads": threads, "python": platform.python_version(),
            "platform": sys.platform}


def _header(base: dict, now: dict, normalize: bool) -> list[str]:
    bm, nm = base["machine"], now["machine"]
    out = [f"baseline: {base['created']}, diffusion-lsp {base.get('version')}, {bm.get('cpu')} "
           f"({bm.get('threads')} threads), model {base['model']['name']}",
           f"this run: {now['created']}, diffusion-lsp {now['version']}, {nm['cpu']} ({nm['threads']} threads), "
           f"model {now['model']['name']}"]
    if base["model"]["fingerprint"] != now["model"]["fingerprint"]:
        out.append(f"the model changed ({base['model']['fingerprint']} -> {now['model']['fingerprint']}): "
                   "--allow-model-change")
    cb, cn = run_calibration(base), run_calibration(now)
    if normalize:
        out.append(f"calibration: matmul {cn['matmul_ms']:.1f} ms (baseline {cb['matmul_ms']:.1f}: "
                   f"{cn['matmul_ms'] / cb['matmul_ms']:.2f}x), parse {cn['parse_ms']:.1f} ms (baseline "
                   f"{cb['parse_ms']:.1f}: {cn['parse_ms'] / max(cb['parse_ms'], 1e-9):.2f}x); latencies are compared "
                   "as ratios to them, shown in ms at the baseline's speed")
    else:
        out.append("latencies are compared in ms as measured (--normalize none"
                   + (", the default for a remote API: they include the network and the API's own queue, which "
                      "this machine's calibration does not measure)" if now["model"]["backend"] == "openai" else ")"))
    out += unserved(now["figures"])
    changed = _changed(base["settings"], now["settings"])
    if changed:
        out.append("settings changed: " + ", ".join(changed))
    return out


def unserved(figures: dict) -> list[str]:
    """A line per language whose completions never reached the model (their figures are the server
    answering alone), so that a 2 ms p50 is not read as a fast model."""
    languages = {f["row"].split(" ", 1)[0] for f in figures.values() if f["row"].endswith("-line")}
    served = {f["row"].split(" ", 1)[0] for f in figures.values() if f["figure"] == "model p50"}
    return [f"{language}: no completion reached the model (a model that does not claim {language} is not asked; "
            "the setting completion.languages widens that)" for language in sorted(languages - served)]


def _changed(a: dict, b: dict) -> list[str]:
    out = []
    for section in sorted(set(a) | set(b)):
        x, y = a.get(section, {}), b.get(section, {})
        for key in sorted(set(x) | set(y)):
            if x.get(key) != y.get(key):
                out.append(f"{section}.{key} {json.dumps(x.get(key))} -> {json.dumps(y.get(key))}")
    return out
