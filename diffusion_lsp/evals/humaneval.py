"""HumanEval infilling (Bavarian et al. 2022): fill the gap, run the tests, report pass@1.

A completion c passes when `prompt + c + suffix + "\\n" + test + "\\n" + f"check({entry_point})"` runs
without error within 3 s in a child process (the reference harness's rule)."""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

SPLITS = {
    "single-line": "HumanEval-SingleLineInfilling.jsonl.gz",
    "multi-line": "HumanEval-MultiLineInfilling.jsonl.gz",
    "random-span": "HumanEval-RandomSpanInfilling.jsonl.gz",
    "random-span-light": "HumanEval-RandomSpanInfillingLight.jsonl.gz",
}
# canvas size per split, in tokens; sized from the kind of span, never from the reference answer
CANVAS = {"single-line": 32, "multi-line": 128, "random-span": 64, "random-span-light": 64}
# where a user gets the data: the help and the error when it is missing say it
SOURCE = ("the HumanEval-*Infilling.jsonl.gz files of HumanEval infilling (Bavarian et al. 2022, MIT): the data/ "
          "folder of https://github.com/openai/human-eval-infilling")
DATA_ENV = "DIFFUSION_LSP_DATA"  # a folder with human-eval-infilling/ and next-edit-prediction/ in it


def data_root() -> Path:
    """The evaluation data's folder: $DIFFUSION_LSP_DATA, else shared/data beside the repository checkout."""
    env = os.environ.get(DATA_ENV)
    return Path(env) if env else Path(__file__).resolve().parents[2].parent / "shared" / "data"


def default_data_dir() -> Path:
    return data_root() / "human-eval-infilling"


def load_split(split: str, data_dir: Path | None = None, limit: int | None = None,
               sample: int | None = None) -> list[dict]:
    """The split's records: the first `limit`, or `sample` of them spread evenly over the file (the
    splits list each function's spans together, so a spread sample covers every function)."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose from {', '.join(SPLITS)}")
    path = (data_dir or default_data_dir()) / SPLITS[split]
    if not path.is_file():
        raise FileNotFoundError(f"HumanEval infilling data not found: {path}. The evaluation reads {SOURCE}; "
                                f"pass their folder with --data, or set {DATA_ENV} to a folder that holds "
                                "human-eval-infilling/")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        records = [json.loads(line) for line in f if line.strip()]
    if sample and sample < len(records):
        records = [records[i * len(records) // sample] for i in range(sample)]
    return records[:limit] if limit else records


def program(record: dict, completion: str) -> str:
    return (record["prompt"] + completion + record["suffix"] + "\n" + record["test"] + "\n"
            + f"check({record['entry_point']})")


def postprocess(split: str, completion: str) -> str:
    """Single-line tasks ask for exactly one line: keep the first line and end it."""
    if split == "single-line":
        return completion.split("\n", 1)[0] + "\n"
    return completion
