"""The slow marker's check (tests/conftest.py) in a pytest run of its own: a test that starts a process
(through subprocess, asyncio or a fixture) and is not marked slow fails, naming the command; marked
either way, or starting only git, it passes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # it runs pytest in a process

INNER = '''
import asyncio
import subprocess
import sys

import pytest

PYTHON = [sys.executable, "-c", "pass"]


@pytest.fixture(scope="module")
def started():
    return subprocess.run(PYTHON + ["fixture"], check=True)


def test_unmarked_subprocess():
    subprocess.run(PYTHON + ["plain"], check=True)


def test_unmarked_asyncio():
    async def go():
        proc = await asyncio.create_subprocess_exec(*PYTHON, "asyncio")
        return await proc.wait()
    assert asyncio.run(go()) == 0


def test_unmarked_fixture(started):
    pass


@pytest.mark.slow
def test_marked():
    subprocess.run(PYTHON + ["marked"], check=True)


def test_git_only():
    subprocess.run(["git", "--version"], check=True, capture_output=True)


def test_no_process():
    assert sum(range(4)) == 6
'''

MARKED_MODULE = '''
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_in_a_marked_module():
    subprocess.run([sys.executable, "-c", "pass", "module"], check=True)
'''


def test_an_unmarked_test_that_starts_a_process_fails_and_names_it(tmp_path):
    here = Path(__file__).parent
    shutil.copy(here / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "test_inner.py").write_text(INNER)
    (tmp_path / "test_inner_module.py").write_text(MARKED_MODULE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(here), os.environ.get("PYTHONPATH")) if p)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rfE", "-p", "no:cacheprovider", "-W", "ignore",
                           str(tmp_path)], cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    out = done.stdout
    failed = re.findall(r"^(?:FAILED|ERROR) test_inner\.py::(\w+) ", out, re.M)
    assert sorted(failed) == ["test_unmarked_asyncio", "test_unmarked_fixture", "test_unmarked_subprocess"], out
    assert out.splitlines()[-1].startswith("2 failed, 4 passed, 1 error in "), out  # the fixture's is a setup error
    said = "started a process ({} -c pass {}): a test that starts one is marked slow (tests/conftest.py)"
    for who, argv in [("it", "plain"), ("it", "asyncio"), ("its fixtures", "fixture")]:
        assert f"{who} {said.format(sys.executable, argv)}" in out.splitlines(), out
