"""The install: model/ and kernels/ sit at the top of the repository and install inside the package, as
diffusion_lsp.model and diffusion_lsp.kernels (pyproject's package-dir), so that site-packages gets no
top-level `model` or `kernels`. A wheel built from the repository holds them under diffusion_lsp/; a
wheel installed and an editable install each run `fim` on the embedded model in a venv of their own
(torch and the other dependencies come from this test run's environment through a .pth file, the
package only from the install under test); the worker's build id and bench api's workload see their
files."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import pytest

from diffusion_lsp.bench.api import workload_files
from diffusion_lsp.worker import wire

ROOT = Path(__file__).resolve().parent.parent
FOLDERS = {"diffusion_lsp": "diffusion_lsp", "diffusion_lsp.model": "model", "diffusion_lsp.kernels": "kernels"}
SOURCE = "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n"
WHERE = ("import importlib.util as u, json, diffusion_lsp, diffusion_lsp.model.decoding.sampler as s, "
         "diffusion_lsp.kernels.vocab_stats as k; from diffusion_lsp.worker import wire; "
         "print(json.dumps([diffusion_lsp.__file__, s.__file__, k.__file__, [str(f) for f in wire.source_folders()], "
         "u.find_spec('model') is None and u.find_spec('kernels') is None]))")


def packages_on_disk(root: Path) -> set[str]:
    """Every package of the repository at `root` by its import name: a folder with an __init__.py."""
    return {".".join([package, *init.parent.relative_to(root / folder).parts])
            for package, folder in FOLDERS.items() for init in (root / folder).rglob("__init__.py")}


def test_pyproject_maps_model_and_kernels_and_names_every_package():
    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    assert setup["package-dir"] == {"diffusion_lsp.model": "model", "diffusion_lsp.kernels": "kernels"}
    named, found = set(setup["packages"]), packages_on_disk(ROOT)
    assert named == found, f"pyproject's packages: add {sorted(found - named)}, remove {sorted(named - found)}"
    assert {"diffusion_lsp.model.decoding", "diffusion_lsp.kernels"} <= found
    assert not (ROOT / "diffusion_lsp" / "model").exists() and not (ROOT / "diffusion_lsp" / "kernels").exists()


def test_the_build_id_sees_an_edited_model_file():
    """A worker started before a model file was edited is another build: its files count."""
    assert {ROOT / "diffusion_lsp", ROOT / "model", ROOT / "kernels"} <= set(wire.source_folders())
    path = ROOT / "model" / "decoding" / "sampler.py"
    before = path.stat()
    newest = max(p.stat().st_mtime_ns for f in (ROOT / "diffusion_lsp", ROOT / "model", ROOT / "kernels")
                 for p in f.rglob("*.py"))
    wire.build_id.cache_clear()
    old = wire.build_id()
    try:
        os.utime(path, ns=(before.st_atime_ns, newest + 10**9))
        wire.build_id.cache_clear()
        assert wire.build_id() != old
    finally:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
        wire.build_id.cache_clear()
    assert wire.build_id() == old


def test_bench_api_cuts_its_requests_from_model_files_too():
    files = workload_files()
    assert ROOT / "model" / "decoding" / "sampler.py" in files and ROOT / "diffusion_lsp" / "cli.py" in files


@pytest.fixture(scope="module")
def checkout(tmp_path_factory) -> Path:
    """The repository's files (tracked and new, not ignored) copied, so that a build leaves the checkout
    as it was."""
    copy = tmp_path_factory.mktemp("checkout") / "diffusion-lsp"
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                            capture_output=True, text=True, check=True).stdout
    for name in filter(None, listed.split("\0")):
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    return copy


@pytest.fixture(scope="module")
def wheel(checkout, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(checkout), "--no-deps", "--no-build-isolation",
                    "-q", "-w", str(out)], check=True, capture_output=True, text=True, timeout=300)
    return next(out.glob("diffusion_lsp-*.whl"))


def fresh_venv(where: Path) -> Path:
    """A venv with no package of its own and this run's site-packages behind a .pth (torch, tokenizers,
    ...: a .pth line adds a folder to the path without running that folder's own .pth files, so this
    run's editable install of the package is not among them)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True, timeout=120)
    python = where / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(site, "dependencies.pth").write_text("\n".join(p for p in sys.path if p.endswith("site-packages")) + "\n")
    return python


def install(python: Path, *args: str) -> None:
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps",
                    "--no-build-isolation", "--ignore-installed", *args],
                   check=True, capture_output=True, text=True, timeout=300)


def fim_and_where(python: Path, tmp_path: Path) -> tuple[dict, list]:
    """`diffusion-lsp fim` on the embedded model, and where the package was imported from."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    src = tmp_path / "add.py"
    src.write_text(SOURCE)
    proc = subprocess.run([str(python.parent / "diffusion-lsp"), "fim", str(src), "--at", "2:12", "--max-tokens",
                           "4", "--json", "--threads", "1"], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    where = subprocess.run([str(python), "-c", WHERE], capture_output=True, text=True, timeout=120, cwd=tmp_path,
                           env=env)
    assert where.returncode == 0, where.stderr
    return json.loads(proc.stdout), json.loads(where.stdout)


@pytest.mark.slow
def test_the_wheel_holds_model_and_kernels_inside_the_package(wheel, checkout):
    names = set(zipfile.ZipFile(wheel).namelist())
    tops = {n.split("/")[0] for n in names}
    assert tops == {"diffusion_lsp", wheel.name.split("-py")[0] + ".dist-info"}, tops
    moved = {f"diffusion_lsp/{folder}/{p.relative_to(checkout / folder).as_posix()}"
             for folder in ("model", "kernels") for p in (checkout / folder).rglob("*") if p.is_file()}
    assert {"diffusion_lsp/model/decoding/sampler.py", "diffusion_lsp/kernels/vocab_stats.py",
            "diffusion_lsp/model/chat/prompts/infill_chat.txt"} <= moved
    assert moved <= names, sorted(moved - names)
    assert {n.rpartition("/")[0] for n in names if n.endswith("/__init__.py")} == \
        {p.replace(".", "/") for p in packages_on_disk(checkout)}


@pytest.mark.slow
def test_an_installed_wheel_runs_fim(wheel, tmp_path):
    python = fresh_venv(tmp_path / "venv")
    install(python, str(wheel))
    record, (package, sampler, kernel, folders, no_top_level) = fim_and_where(python, tmp_path)
    assert record["tokens"] == len(record["confidence"]) <= 4 and record["text"]
    site = Path(package).parent
    assert site.parent.parent.parent.parent == tmp_path / "venv"  # venv/lib/pythonX.Y/site-packages/diffusion_lsp
    assert Path(sampler) == site / "model" / "decoding" / "sampler.py" and Path(kernel) == site / "kernels" / \
        "vocab_stats.py"
    assert folders == [str(site)] and no_top_level


@pytest.mark.slow
def test_an_editable_install_runs_fim(checkout, tmp_path):
    python = fresh_venv(tmp_path / "venv")
    install(python, "-e", str(checkout))
    record, (package, sampler, kernel, folders, no_top_level) = fim_and_where(python, tmp_path)
    assert record["tokens"] == len(record["confidence"]) <= 4 and record["text"]
    assert Path(package) == checkout / "diffusion_lsp" / "__init__.py"
    assert Path(sampler) == checkout / "model" / "decoding" / "sampler.py"
    assert Path(kernel) == checkout / "kernels" / "vocab_stats.py"
    assert folders == [str(checkout / f) for f in ("diffusion_lsp", "model", "kernels")] and no_top_level
