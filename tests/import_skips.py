"""A test skipped because a package it imports cannot be imported fails instead, on every machine (not
only in CI): every package the tests import is in pyproject.toml's `test` extra, so a skip of that
kind means the environment was not installed as the README says (`pip install -e '.[test]'`), and a
whole file of tests would otherwise vanish from the run with one `s` (the JSON tests did, for months,
while jsonschema was in no extra).

What is turned into a failure: a `pytest.importorskip(...)` that could not import its module, in a
test, a fixture or at a module's top (then the whole file's collection fails, naming the package).
What still skips, with its reason: the programs and machines a test may need that pip does not
install (Neovim's binary, node and npm, code-server and playwright, a GPU, git, `shared/data`), which
skip through `pytest.skip` / `skipif` with a reason of their own, and the modules in OPTIONAL."""

from __future__ import annotations

import re

import pytest

# module -> why it may be missing on a machine installed as the README says
OPTIONAL = {"tomllib": "in the standard library from Python 3.11 only"}
_COULD_NOT_IMPORT = re.compile(r"could not import '([^']+)'")


def missing_package(report) -> str | None:
    """The module a skipped report's importorskip could not import (unless OPTIONAL), else None."""
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return None
    found = _COULD_NOT_IMPORT.search(str(report.longrepr[2]))
    if found is None or found[1].split(".")[0] in OPTIONAL:
        return None
    return found[1]


def _failed(report) -> None:
    name = missing_package(report)
    if name is not None:
        report.outcome = "failed"
        report.longrepr = (f"{report.longrepr[2]}\n'{name}' cannot be imported: the tests need every package of "
                           f"the test extra (pip install -e '.[test]'); tests/import_skips.py")


@pytest.hookimpl(wrapper=True)
def pytest_make_collect_report(collector):
    report = yield
    _failed(report)
    return report


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    _failed(report)
    return report
