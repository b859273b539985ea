"""Fixtures of the transport tests: each test run on each transport."""

from __future__ import annotations

import pytest

from mailrail.testing.stack import IMPLEMENTATIONS, unavailable


@pytest.fixture(params=IMPLEMENTATIONS)
def kind(request: pytest.FixtureRequest) -> str:
    """``"python"`` or ``"compiled"``; a transport that cannot run over the fake skips, saying why."""
    reason = unavailable(request.param)
    if reason is not None:
        pytest.skip(reason)
    return str(request.param)
