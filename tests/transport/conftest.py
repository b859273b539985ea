"""Fixtures of the transport tests: the fake MPI importable, and each test run on each transport."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

# fake_mpi.py lives beside the tests that import it (pytest runs with --import-mode=importlib, which
# puts no test directory on sys.path).
sys.path.insert(0, str(Path(__file__).resolve().parent))

from fake_mpi import TRANSPORTS, unavailable


@pytest.fixture(params=TRANSPORTS)
def kind(request: pytest.FixtureRequest) -> str:
    """``"python"`` or ``"compiled"``; a transport that cannot run over the fake skips, saying why."""
    reason = unavailable(request.param)
    if reason is not None:
        pytest.skip(reason)
    return str(request.param)
