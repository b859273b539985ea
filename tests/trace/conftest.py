"""Fixtures of the trace tests: the real YGM traces, and bounded ``mailrail`` runs under mpiexec."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from mailrail.launch import run_mailrail

#: Real traces written by YGM, beside the repository (see ../shared/traces/README.md).
SHARED_TRACES = Path(__file__).resolve().parents[2].parent / "shared" / "traces"
BINARY_TRACE = SHARED_TRACES / "ygm-histogram-binary-2ranks"
JSON_TRACE = SHARED_TRACES / "ygm-histogram-json-2ranks"
REPLAY_TIMEOUT = float(os.environ.get("MAILRAIL_TEST_TIMEOUT", "120"))


def _shared(path: Path) -> Path:
    if not path.is_dir():
        pytest.skip(f"the shared YGM traces are not at {path}")
    return path


@pytest.fixture(scope="session")
def binary_trace() -> Path:
    return _shared(BINARY_TRACE)


@pytest.fixture(scope="session")
def json_trace() -> Path:
    return _shared(JSON_TRACE)


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
