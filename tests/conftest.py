"""Fixtures every test directory shares (what tests import lives in helpers.py)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from hypothesis import settings

from helpers import (
    BINARY_TRACE,
    JSON_TRACE,
    TEST_IMPLEMENTATION,
    job_environment,
    present_job_files,
    unclaimed_job_files,
)

# Hypothesis: CI (.ci/run sets MAILRAIL_HYPOTHESIS_PROFILE=ci) draws the same examples on every run, so a red run
# is red again on any machine; elsewhere each run explores new ones.  Both print the blob that replays a failure
# (CONTRIBUTING.md, "A Hypothesis failure").  Loaded here, before any test module makes its settings.
settings.register_profile("ci", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", print_blob=True)
settings.load_profile(os.environ.get("MAILRAIL_HYPOTHESIS_PROFILE", "explore"))

#: What was in node-local shared memory, and MPI launchers' files in /tmp, when the session started (see
#: pytest_sessionfinish).
_JOB_FILES_AT_START: set[str] = set()


def _owner(path: str) -> int | None:
    try:
        return os.stat(path).st_uid
    except OSError:  # (gone meanwhile)
        return None


def pytest_configure(config: pytest.Config) -> None:
    """MPI starts here, before any test module imports mpi4py: as a singleton that leaves nothing behind
    (:mod:`mailrail._mpi`).  Not in pytest-xdist's controller, which runs no test: Open MPI 4's singleton
    writes its job's variables (``PMIX_*``, ``OMPI_MCA_ess``) into the process's environment, the workers
    inherit them, and every ``mpiexec`` they start then takes itself for part of that job and exits 1."""
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        return
    import mailrail._mpi  # noqa: F401


def pytest_sessionstart(session: pytest.Session) -> None:
    _JOB_FILES_AT_START.update(present_job_files())  # (the controller starts before its workers)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A session that passed fails if it left anything of its own in /dev/shm, or an MPI launcher's file in /tmp:
    an MPI's segments or a job's directory outlive their processes until a reboot (issue 34).  Entries another
    process still maps or holds (a job running beside the session), or that are a running job's directory, are
    not the session's; one that goes within a second was being removed."""
    if exitstatus != 0 or hasattr(session.config, "workerinput"):  # (an xdist worker: its controller checks)
        return
    new = unclaimed_job_files() - _JOB_FILES_AT_START
    if new:
        time.sleep(1.0)
        new &= unclaimed_job_files()
        new = {path for path in new if _owner(path) == os.getuid()}
    if new:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is not None:
            reporter.ensure_newline()
            reporter.write_sep("=", f"the session left {len(new)} files of its jobs (in /dev/shm, /tmp)", red=True)
            for path in sorted(new):
                reporter.write_line(path)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


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
