"""Fixtures every test directory shares (what tests import lives in helpers.py)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from helpers import (
    BINARY_TRACE,
    JSON_TRACE,
    SETTLE_S,
    TEST_IMPLEMENTATION,
    files_left,
    job_environment,
    recorded_job_files,
    use_job_records,
)

# Hypothesis: CI (.ci/run sets MAILRAIL_HYPOTHESIS_PROFILE=ci) draws the same examples on every run, so a red run
# is red again on any machine; elsewhere each run explores new ones.  Both print the blob that replays a failure
# (CONTRIBUTING.md, "A Hypothesis failure").  Loaded here, before any test module makes its settings.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("MAILRAIL_HYPOTHESIS_PROFILE", "explore"))

#: The session's records: a directory for each test (and one for each test process, for the jobs started outside a
#: test), with the jobs it started marked with it (helpers.job_environment); each names its test in TEST_FILE.
_RECORDS = pytest.StashKey[str]()
#: How pytest-xdist's controller hands the directory to its workers (their workerinput).
_RECORDS_INPUT = "mailrail_job_records"
TEST_FILE = "test"


def pytest_configure(config: pytest.Config) -> None:
    """The session's records directory, made by the process that checks it at the end (pytest-xdist's controller,
    or the only process), in every test process the directory of the jobs started outside a test.

    MPI starts here, before any test module imports mpi4py: as a singleton that leaves nothing behind
    (:mod:`mailrail._mpi`).  Not in pytest-xdist's controller, which runs no test: Open MPI 4's singleton
    writes its job's variables (``PMIX_*``, ``OMPI_MCA_ess``) into the process's environment, the workers
    inherit them, and every ``mpiexec`` they start then takes itself for part of that job and exits 1."""
    workerinput = getattr(config, "workerinput", None)
    root = workerinput[_RECORDS_INPUT] if workerinput is not None else tempfile.mkdtemp(prefix="mailrail-tests-")
    config.stash[_RECORDS] = root
    if getattr(config.option, "numprocesses", None) and workerinput is None:
        return
    use_job_records(_records_of(root, "outside any test"))
    import mailrail._mpi  # noqa: F401


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist's controller: the worker *node* records in the session's directory."""
    node.workerinput[_RECORDS_INPUT] = node.config.stash[_RECORDS]


def _records_of(root: str, test: str) -> str:
    directory = tempfile.mkdtemp(dir=root)
    with open(os.path.join(directory, TEST_FILE), "w", encoding="utf-8") as named:
        named.write(test)
    return directory


@pytest.fixture(autouse=True)
def own_job_records(request: pytest.FixtureRequest) -> Iterator[str]:
    """The jobs the test starts are marked with a directory of its own, where they record what they make
    (helpers.job_environment, helpers.job_files_left): its leftover checks, and the session's, count its own."""
    directory = _records_of(request.config.stash[_RECORDS], request.node.nodeid)
    previous = use_job_records(directory)
    try:
        yield directory
    finally:
        use_job_records(previous)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A session that passed fails if its jobs left anything in /dev/shm, or an MPI launcher's file in /tmp: an MPI's
    segments or a job's directory outlive their processes until a reboot (issue 34).  What they left is what they
    recorded, by test (helpers.recorded_job_files), never what another process on the machine makes or leaves
    meanwhile (issue 48); one that goes within SETTLE_S seconds was being removed (a watchdog's cleanup)."""
    if exitstatus != 0 or hasattr(session.config, "workerinput"):  # (an xdist worker: its controller checks)
        return
    left = session_files_left(session.config.stash[_RECORDS])
    if left:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_sep("=", f"the session's jobs left {len(left)} files (in /dev/shm, /tmp)", red=True)
            for path, test in sorted(left.items()):
                reporter.write_line(f"{path}  (a job of {test})")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def session_files_left(root: str, bound: float = SETTLE_S) -> dict[str, str]:
    """What the jobs recorded in *root* made and is still there after up to *bound* seconds, with the test whose
    jobs made it."""
    made: dict[str, str] = {}
    for entry in os.scandir(root):
        recorded = recorded_job_files(entry.path)
        if recorded:
            with open(os.path.join(entry.path, TEST_FILE), encoding="utf-8") as named:
                made.update(dict.fromkeys(recorded, named.read()))
    return {path: made[path] for path in files_left(made, bound)}


def pytest_unconfigure(config: pytest.Config) -> None:
    """The session's records go with it (made by this process: not in an xdist worker)."""
    if not hasattr(config, "workerinput") and _RECORDS in config.stash:
        shutil.rmtree(config.stash[_RECORDS], ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``MAILRAIL_TEST_IMPLEMENTATION`` (make test-python-transport: the smoke set's jobs again on that
    transport) a test that names its transport itself is the very check the main run made: left out."""
    if not TEST_IMPLEMENTATION:
        return
    kept, pinned = [], []
    for item in items:
        callspec = getattr(item, "callspec", None)
        chosen = callspec.params.get("transport") if callspec is not None else None
        (pinned if chosen in ("python", "compiled") else kept).append(item)
    if pinned:
        config.hook.pytest_deselected(items=pinned)
        items[:] = kept


@pytest.fixture
def clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's environment as a test job's (helpers.job_environment): none of the caller's
    ``MAILRAIL_*`` variables, a stall timeout (starvation fails loudly), the test transport."""
    for name in [name for name in os.environ if name.startswith("MAILRAIL_")]:
        monkeypatch.delenv(name)
    for name, value in job_environment().items():
        if name.startswith("MAILRAIL_"):
            monkeypatch.setenv(name, value)


@pytest.fixture(scope="session")
def binary_trace() -> Path:
    """A real binary YGM trace of two ranks (helpers.YGM_TRACES)."""
    return BINARY_TRACE


@pytest.fixture(scope="session")
def json_trace() -> Path:
    """A real JSON-lines YGM trace of two ranks (helpers.YGM_TRACES)."""
    return JSON_TRACE
