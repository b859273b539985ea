"""Fixtures of the trace tests: the real YGM traces."""

from __future__ import annotations

from pathlib import Path

import pytest

#: Real traces written by YGM: the project's copy of ../shared/traces (ygm-traces/README.md
#: describes the formats), so the tests never depend on what lies beside the repository.
YGM_TRACES = Path(__file__).resolve().parent / "ygm-traces"
BINARY_TRACE = YGM_TRACES / "ygm-histogram-binary-2ranks"
JSON_TRACE = YGM_TRACES / "ygm-histogram-json-2ranks"


@pytest.fixture(scope="session")
def binary_trace() -> Path:
    return BINARY_TRACE


@pytest.fixture(scope="session")
def json_trace() -> Path:
    return JSON_TRACE
