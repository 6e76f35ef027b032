"""The fields of a saved candidate (`calibrate --save-cases`, `--save-edits`), checked before a fit
uses them: a file is someone's, and its lines may hold anything JSON can.

Each field has its type, the lists of one record are as long as its candidates (a record whose
labels outnumbered its features was counted "45 candidates with 3960 exactly right"), labels are
true or false (an integer summed as a count), and features are finite numbers no larger than
MAX_FEATURE (1e308 passed as finite, and the fit's products overflowed into a model of NaN). The
file itself is read by input_files (regular, bounded, JSON depth and finite numbers)."""

from __future__ import annotations

from ..acceptance.features import MAX_FEATURE
from ..candidate import Request, Source
from ..errors import UserError
from ..input_files import MAX_JSON_BYTES, InputFile, parse_json


def text(raw: dict, key: str, default: str | None = None) -> str:
    value = raw.get(key, default) if isinstance(raw, dict) else None
    if not isinstance(value, str):
        raise ValueError(f"{key!r} must be a string")
    return value


def source(raw: dict, request: Request) -> Source:
    """The "source" field: the name of one of `request`'s sources."""
    value = text(raw, "source")
    found = next((s for s in request.sources if s.value == value), None)
    if found is None:
        raise ValueError(f"'source' must be one of {', '.join(s.value for s in request.sources)}, not {value[:40]!r}")
    return found


def number(value, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not abs(value) <= MAX_FEATURE:
        raise ValueError(f"{what} must be a finite number of at most {MAX_FEATURE:g} in size")
    return float(value)


def listed(raw: dict, key: str, n: int | None = None) -> list:
    value = raw.get(key) if isinstance(raw, dict) else None
    if not isinstance(value, list):
        raise ValueError(f"{key!r} must be a list")
    if n is not None and len(value) != n:
        raise ValueError(f"{key!r} holds {len(value)} items for {n} candidates")
    return value


def flags(raw: dict, key: str, n: int) -> list[bool]:
    value = listed(raw, key, n)
    if not all(isinstance(v, bool) for v in value):
        raise ValueError(f"{key!r} must hold true or false for each candidate")
    return value


def features(raw: dict, n: int) -> list[dict[str, float]]:
    """The "feats" list: one {name: number} per candidate."""
    out = []
    for f in listed(raw, "feats", n):
        if not isinstance(f, dict):
            raise ValueError("'feats' must hold one object of features per candidate")
        out.append({str(k): number(v, f"feature {str(k)[:40]!r}") for k, v in f.items()})
    return out


def records(file: InputFile, parse, what: str) -> list:
    """parse(raw) of each line of `file`, read by input_files; one UserError line naming the file, the
    line and what is wrong."""
    out = []
    for n, line in enumerate(file.read_text(MAX_JSON_BYTES).splitlines(), 1):
        if not line.strip():
            continue
        raw = parse_json(line, f"{file} line {n}")
        try:
            if not isinstance(raw, dict):
                raise ValueError("a line must be a JSON object")
            out.append(parse(raw))
        except ValueError as e:
            raise UserError(f"{file} line {n}: not {what} ({e})") from None
    return out
