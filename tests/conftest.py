"""Shared test helpers: run programs under a real mpiexec, bounded by a timeout."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import TEST_ENGINE, job_environment, program_path
from mailrail.launch import mpi_environment, mpiexec_argv, run_bounded

#: Seconds before a hung mpiexec job is killed (all ranks) and the test fails with their output.
MPI_TIMEOUT = float(os.environ.get("MAILRAIL_TEST_TIMEOUT", "120"))


class MpiRun:
    """``mpirun(ranks, "program.py", *args, env={...})`` -> parsed ``RESULT`` line of rank 0."""

    def __call__(self, ranks: int, program: str, *args: str, env: dict[str, str] | None = None,
                 timeout: float = MPI_TIMEOUT, expect_failure: bool = False):
        completed = self.run(ranks, program, *args, env=env, timeout=timeout)
        if expect_failure:
            if completed.returncode == 0:
                pytest.fail(f"{program} was expected to fail but exited 0:\n{completed.stdout}")
            return completed
        if completed.returncode != 0:
            pytest.fail(f"{program} on {ranks} ranks exited {completed.returncode}\n"
                        f"--- stdout ---\n{completed.stdout[-6000:]}\n--- stderr ---\n{completed.stderr[-6000:]}")
        for line in completed.stdout.splitlines():
            if line.startswith("RESULT "):
                return json.loads(line[len("RESULT "):])
        pytest.fail(f"{program} printed no RESULT line:\n{completed.stdout[-6000:]}\n{completed.stderr[-6000:]}")

    def run(self, ranks: int, program: str, *args: str, env: dict[str, str] | None = None,
            timeout: float = MPI_TIMEOUT) -> subprocess.CompletedProcess:
        clean = job_environment(**(env or {}))
        # python -m mpi4py: an uncaught exception on one rank aborts the job instead of hanging it.
        argv = mpiexec_argv(ranks, [sys.executable, "-m", "mpi4py", program_path(program), *args])
        try:
            return run_bounded(argv, timeout=timeout, env=mpi_environment(clean), capture=True)
        except subprocess.TimeoutExpired as expired:
            pytest.fail(f"{program} on {ranks} ranks hung for {timeout:.0f} s and was killed\n"
                        f"--- stdout ---\n{(expired.output or '')[-6000:]}\n--- stderr ---\n{(expired.stderr or '')[-6000:]}")


@pytest.fixture(scope="session")
def mpirun() -> MpiRun:
    return MpiRun()


def _assert_exactly_once(result: dict, engine: str = TEST_ENGINE or "compiled") -> None:
    """A traffic.py run delivered every message once, on the *engine* message path, with nothing left over."""
    assert result["finalize"] == {"deferred": 0, "unreleased": 0, "unreceived": 0}
    stats = result["stats"]
    assert {s["engine"] for s in stats} == {engine}
    assert sum(s["messages_sent"] for s in stats) == sum(s["messages_received"] for s in stats)
    assert sum(s["bytes_sent"] for s in stats) == sum(s["bytes_received"] for s in stats)
    assert all(s["deferred_now"] == 0 for s in stats)


@pytest.fixture(scope="session")
def assert_exactly_once():
    """The check of :func:`_assert_exactly_once` (a fixture: tests/ is not an importable package)."""
    return _assert_exactly_once
