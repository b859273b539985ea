"""Fixtures every test directory shares (what tests import lives in helpers.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import BINARY_TRACE, JSON_TRACE, job_environment


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
