"""Fixtures of the trace tools' tests: the real YGM traces the library's trace tests read too."""

from __future__ import annotations

from pathlib import Path

import pytest

#: The project's copy of the real YGM traces lives with the library's trace tests (tests/trace/ygm-traces).
YGM_TRACES = Path(__file__).resolve().parent.parent / "trace" / "ygm-traces"
BINARY_TRACE = YGM_TRACES / "ygm-histogram-binary-2ranks"
JSON_TRACE = YGM_TRACES / "ygm-histogram-json-2ranks"


@pytest.fixture(scope="session")
def binary_trace() -> Path:
    return BINARY_TRACE


@pytest.fixture(scope="session")
def json_trace() -> Path:
    return JSON_TRACE
