"""Fixtures of the trace tests: the real YGM traces, and bounded ``mailrail`` runs under mpiexec."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from mailrail.launch import run_mailrail

#: Real traces written by YGM: the project's copy of ../shared/traces (ygm-traces/README.md
#: describes the formats), so the tests never depend on what lies beside the repository.
YGM_TRACES = Path(__file__).resolve().parent / "ygm-traces"
BINARY_TRACE = YGM_TRACES / "ygm-histogram-binary-2ranks"
JSON_TRACE = YGM_TRACES / "ygm-histogram-json-2ranks"
REPLAY_TIMEOUT = float(os.environ.get("MAILRAIL_TEST_TIMEOUT", "120"))


@pytest.fixture(scope="session")
def binary_trace() -> Path:
    return BINARY_TRACE


@pytest.fixture(scope="session")
def json_trace() -> Path:
    return JSON_TRACE


class Mailrail:
    """``mailrail_run(ranks, "replay", DIR, ...)`` under mpiexec, killed after a timeout.

    MAILRAIL_* variables of the calling shell are dropped (a stray MAILRAIL_TRACE would
    record the replay); a credit stall fails loudly instead of hanging.
    """

    def __call__(self, ranks: int, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        clean = {k: "" for k in os.environ if k.startswith("MAILRAIL_")}
        clean["MAILRAIL_STALL_TIMEOUT"] = "30"
        clean.update(env or {})
        try:
            return run_mailrail(ranks, [str(a) for a in args], timeout=REPLAY_TIMEOUT, env=clean, capture=True)
        except subprocess.TimeoutExpired as expired:
            pytest.fail(f"mailrail {' '.join(map(str, args))} on {ranks} ranks hung for {REPLAY_TIMEOUT:.0f} s\n"
                        f"{(expired.output or '')[-4000:]}\n{(expired.stderr or '')[-4000:]}")

    def replay(self, ranks: int, trace: Path, json_path: Path, *flags: str, env=None) -> dict:
        """Replay *trace*; fail with the output unless it exits 0; return the JSON document."""
        completed = self(ranks, "replay", trace, "--json", json_path, *flags, env=env)
        if completed.returncode != 0:
            pytest.fail(f"replay {trace} {' '.join(flags)} exited {completed.returncode}\n"
                        f"--- stdout ---\n{completed.stdout[-4000:]}\n--- stderr ---\n{completed.stderr[-4000:]}")
        return json.loads(json_path.read_text())


@pytest.fixture(scope="session")
def mailrail_run() -> Mailrail:
    return Mailrail()
