"""What pip users get: the sdist (a runnable test suite, the sources of the compiled modules) and the wheel
built from it (no C or Cython sources), as ``python -m build`` makes them; the declared Pythons."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from pathlib import Path

import pytest

from helpers import ROOT

pytestmark = pytest.mark.slow  # builds and installs the package: a minute (make test runs it, test-fast not)

#: What a working tree holds that is no source (the environments, build outputs, caches): never copied.
NOT_SOURCES = shutil.ignore_patterns(
    ".git", ".venv*", "build", "dist", "*.egg-info", "_build", "_generated", "__pycache__", "*.so", ".*_cache",
    "mailrail-results", ".hypothesis",
)  # fmt: skip


@pytest.fixture(scope="module")
def distributions(tmp_path_factory) -> tuple[Path, Path]:
    """(sdist, wheel): ``python -m build`` on a copy of the sources (the wheel is built from the sdist)."""
    pytest.importorskip("build")  # the dev extra: not in every test environment
    work = tmp_path_factory.mktemp("packaging")
    shutil.copytree(ROOT, work / "source", ignore=NOT_SOURCES)
    # The tests check what the distributions hold, not how fast their modules run: compiled unoptimized
    # (gcc takes the last -O), which took the fixture from 18 to 11 s here.
    completed = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(work / "dist"), str(work / "source")],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "CFLAGS": "-O0 -g0"},
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    (sdist,) = (work / "dist").glob("*.tar.gz")
    (wheel,) = (work / "dist").glob("*.whl")
    return sdist, wheel


def test_the_wheel_has_the_compiled_modules_and_stubs_and_no_sources_to_compile(distributions):
    _, wheel = distributions
    names = zipfile.ZipFile(wheel).namelist()
    assert not [name for name in names if name.endswith((".c", ".pyx", ".pxd"))]
    for module in (
        "mailrail/_protocol",
        "mailrail/flow/_ledger",
        "mailrail/transport/_compiled",
        "mailrail/flow/_atomics",
        "mailrail/containers/_hot",
        "mailrail/containers/_varkeys",
        "mailrail/containers/_table",
        "mailrail/io/_words",
    ):
        assert any(name.startswith(module + ".") and name.endswith(".so") for name in names), module
        assert module + ".pyi" in names
    assert "mailrail/py.typed" in names and "mailrail_tools/cli/__init__.py" in names  # the library and the tools
    assert not [name for name in names if name.startswith("mailrail_simulate/")]  # the model is its own distribution
    assert not [name for name in names if name.startswith(("tests/", "docs/", "examples/"))]


@pytest.fixture(scope="module")
def model_wheel(tmp_path_factory) -> Path:
    """The model's wheel (``simulate/``, the mailrail-simulate distribution), as ``python -m build`` makes it."""
    pytest.importorskip("build")
    work = tmp_path_factory.mktemp("model")
    shutil.copytree(ROOT / "simulate", work / "source", ignore=NOT_SOURCES)
    completed = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(work / "dist"), str(work / "source")],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    (wheel,) = (work / "dist").glob("*.whl")
    return wheel


def test_the_model_s_data_ships_in_the_model_s_wheel(model_wheel):
    names = zipfile.ZipFile(model_wheel).namelist()
    assert "mailrail_simulate/command.py" in names and "mailrail_simulate/measure/idle.py" in names
    # its parameter sets, validation, the recorded runs it validates against (the lossy set's too) and the
    # sampled runs cpu-split reads
    cpu = [f"cpu/queue-16kb-nodes-4/{name}" for name in ("cpu-samples.jsonl", "cpu-output.log", "compare.json")]
    for data in (
        "calibrated.json",
        "omnipath.json",
        "validation.json",
        "runs/held-out/nodes-8/compare.json",
        "runs/lossy/fit/queue-16kb/compare.json",
        *cpu,
    ):
        assert f"mailrail_simulate/data/{data}" in names, data
    shipped = {name for name in names if name.startswith("mailrail_simulate/data/")}
    on_disk = {
        "mailrail_simulate/" + str(path.relative_to(ROOT / "simulate/src/mailrail_simulate"))
        for path in (ROOT / "simulate/src/mailrail_simulate/data").rglob("*")
        if path.is_file()
    }
    assert shipped == on_disk, on_disk - shipped
    assert not [name for name in names if name.startswith(("mailrail/", "mailrail_tools/"))]
    requires = next(name for name in names if name.endswith("/METADATA"))
    assert "Requires-Dist: mailrail==" in zipfile.ZipFile(model_wheel).read(requires).decode()


def test_the_sdist_carries_a_test_suite_that_runs(distributions, tmp_path):
    sdist, _ = distributions
    with tarfile.open(sdist) as archive:
        archive.extractall(tmp_path, filter="data")
    (root,) = tmp_path.iterdir()
    for needed in (
        "tests/conftest.py",
        "tests/helpers.py",
        "tests/programs/traffic.py",
        "tests/library/trace/ygm-traces/ygm-histogram-binary-2ranks",
        "examples/first_program.py",
        "docs/conf.py",
        "docs/_static/compare.png",
        "docs/_static/compare-runs.json",
        ".ci/run",
        "src/mailrail/_protocol.pyx",
        "src/mailrail/flow/_ledger.pxd",
        "src/mailrail/flow/_atomics.c",
    ):
        assert (root / needed).exists(), needed
    # The sdist's own tests, from its own directory (its pyproject's pytest settings): conftest, helpers
    # and data found there.  test_packaging.py is left out: it would build again.
    completed = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not mpi and not cluster",
         "tests/tools/cli/test_cli.py", "tests/library/test_config.py", "tests/library/trace", "tests/test_docs.py"],
        cwd=root, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stdout[-3000:] + completed.stderr[-3000:]
    assert re.search(r"\d+ passed", completed.stdout) and " failed" not in completed.stdout


def test_the_declared_pythons_start_at_requires_python_and_include_this_one():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = sorted(
        tuple(map(int, c.rsplit(" :: ", 1)[1].split(".")))
        for c in project["classifiers"]
        if re.fullmatch(r"Programming Language :: Python :: 3\.\d+", c)
    )
    assert declared and f">={declared[0][0]}.{declared[0][1]}" == project["requires-python"]
    assert sys.version_info[:2] in declared  # the tests run on a declared Python
