"""tests/import_skips.py in a pytest run of its own: a test or a whole file skipped by an importorskip
of a package that is not installed fails, naming the package; an OPTIONAL module's importorskip and
a skip for a missing program still skip."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # it runs pytest in a process

MISSING = "diffusion_lsp_no_such_package"

WHOLE_FILE = f'''
import pytest

pytest.importorskip("{MISSING}")


def test_never_runs():
    pass
'''

INNER = f'''
import pytest


@pytest.fixture
def needs_it():
    return pytest.importorskip("{MISSING}.sub")


def test_in_a_test():
    pytest.importorskip("{MISSING}")


def test_in_a_fixture(needs_it):
    pass


def test_optional_module(monkeypatch):
    import import_skips

    monkeypatch.setitem(import_skips.OPTIONAL, "{MISSING}_optional", "why")
    pytest.importorskip("{MISSING}_optional")


def test_a_missing_program():
    pytest.skip("the program is not installed")


def test_runs():
    assert sum(range(4)) == 6
'''


def test_a_skip_for_a_package_that_cannot_be_imported_fails(tmp_path):
    here = Path(__file__).parent
    shutil.copy(here / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_whole_file.py").write_text(WHOLE_FILE)
    (tmp_path / "test_inner.py").write_text(INNER)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(here), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", "-W", "ignore",
                           "--continue-on-collection-errors", str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    out = done.stdout
    assert done.returncode == 1, out  # (without --continue-on-collection-errors, the file's error stops the run)
    failed = sorted(re.findall(r"^(?:FAILED|ERROR) (test_\w+\.py(?:::\w+)?)", out, re.M))
    assert failed == ["test_inner.py::test_in_a_fixture", "test_inner.py::test_in_a_test", "test_whole_file.py"], out
    assert out.splitlines()[-1].startswith("1 failed, 1 passed, 2 skipped, 2 errors in "), out
    assert f"'{MISSING}' cannot be imported: the tests need every package of the test extra" in out, out
    assert f"'{MISSING}.sub' cannot be imported" in out, out
    skipped = re.findall(r"^SKIPPED \[1\] test_inner\.py:\d+: (.*)$", out, re.M)
    assert sorted(skipped) == [f"could not import '{MISSING}_optional': No module named '{MISSING}_optional'",
                               "the program is not installed"], out
