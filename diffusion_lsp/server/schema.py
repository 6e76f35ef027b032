"""The editor settings as a JSON schema, made from the `Config` dataclass tree (server/config.py):
each field's type, default, bounds (`within`), choices (`one_of`) and description (`doc`, else
`help`). The VS Code extension's `contributes.configuration` is this schema
(`diffusion-lsp settings-schema --write editors/vscode/package.json`); a test checks they agree."""

from __future__ import annotations

import dataclasses
import argparse
import enum
import json
import sys
import types
import typing
from pathlib import Path

from ..input_files import InputFile, Refused
from ..protocol.settings import hints
from ..protocol.settings import camel
from ..workspace_files import write_file
from .config import Config

SECTION = "diffusionLsp"
_JSON_TYPES = {bool: "boolean", int: "integer", float: "number", str: "string"}
_SCHEMA_KEYS = {"minimum": "minimum", "maximum": "maximum", "exclusive_minimum": "exclusiveMinimum",
                "enum": "enum"}


def _json_type(hint) -> dict:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        inner = _json_type(next(a for a in typing.get_args(hint) if a is not type(None)))
        return {**inner, "type": [inner["type"], "null"]}
    if typing.get_origin(hint) is list:
        return {"type": "array", "items": {"type": _JSON_TYPES[typing.get_args(hint)[0]]}}
    if isinstance(hint, type) and issubclass(hint, enum.StrEnum):  # its choices travel as `enum` (one_of)
        return {"type": "string"}
    return {"type": _JSON_TYPES[hint]}


def properties(cls=Config, instance=None, prefix: str = SECTION) -> dict:
    """{"diffusionLsp.section.key": JSON schema} for every editor setting, in declaration order."""
    instance = instance if instance is not None else cls()
    out = {}
    for f in dataclasses.fields(cls):
        if f.metadata.get("editor") is False:
            continue
        hint, value, key = hints(cls)[f.name], getattr(instance, f.name), f"{prefix}.{camel(f.name)}"
        if dataclasses.is_dataclass(hint):
            out.update(properties(hint, value, key))
            continue
        schema = {**_json_type(hint), "default": value}
        if isinstance(value, bool) and schema["type"] == ["boolean", "null"]:  # a nullable switch a group
            schema["type"] = "boolean"  # turns on or off (completion.enable): VS Code draws a checkbox only
            # for a plain boolean; null still loads from a settings file
        schema.update({_SCHEMA_KEYS[k]: v for k, v in f.metadata.items() if k in _SCHEMA_KEYS})
        schema["description"] = f.metadata.get("doc") or f.metadata.get("help") or ""
        out[key] = schema
    return out


def write_vscode(package_json: Path | InputFile) -> bool:
    """Put the server's settings into a VS Code extension's package.json, keeping the extension's own
    settings (keys not under a server section). True when the file changed. Read by input_files and
    replaced by workspace_files.write_file (never written through a link or into a FIFO)."""
    file = package_json if isinstance(package_json, InputFile) else InputFile(str(package_json))
    package = file.read_json()
    if not isinstance(package, dict):
        raise Refused(f"{file}: not a package.json (a JSON object)")
    config = package.setdefault("contributes", {}).setdefault("configuration", {})
    props = config.setdefault("properties", {})
    server = properties()
    sections = {key.split(".")[1] for key in server}
    own = {k: v for k, v in props.items() if k.split(".")[1] not in sections}
    new = {**own, **server}
    if new == props and list(new) == list(props):
        return False
    config["properties"] = new
    write_file(file.path, json.dumps(package, indent=2, ensure_ascii=False) + "\n", "--write")
    return True


def register(sub) -> None:
    p = sub.add_parser("settings-schema", help="the editor settings as JSON schema (VS Code configuration)",
                       description="Print every diffusionLsp.* editor setting as a JSON schema: its type, "
                                   "default, bounds and description (the VS Code extension's configuration).")
    p.add_argument("--write", type=InputFile, metavar="PACKAGE_JSON",
                   help="update a VS Code extension's package.json in place instead of printing")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    if args.write is None:
        json.dump(properties(), sys.stdout, indent=2)
        print()
        return 0
    changed = write_vscode(args.write)
    print(f"{args.write}: {'updated' if changed else 'already up to date'}")
    return 0
