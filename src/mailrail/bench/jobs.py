"""Launch the adversarial benchmark as its own mpiexec job, bounded by a time limit (compare, sweep).

Each run is a separate job, so a mode that hangs, crashes or runs out of
memory costs only its own run: it comes back as a ``status`` of ``"timeout"``
or ``"failed"`` that the caller reports, next to the runs that worked.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any, Mapping, Sequence

from ..launch import mpi_environment, mpiexec_argv, run_bounded
from .common import rail_flags

#: Seconds each run may take, mpiexec start-up included, unless the caller says otherwise.
DEFAULT_TIME_LIMIT = 120.0


def add_workload_arguments(parser: argparse.ArgumentParser, *, messages: int, trials: int, per: str) -> None:
    """The workload a driver passes on to each adversarial run: its amount, trials and seed."""
    amount = parser.add_mutually_exclusive_group()
    amount.add_argument("--messages", type=int, default=None, help=f"messages per sending rank (default: {messages})")
    amount.add_argument("--bytes-per-rank", type=int, default=None, help="payload bytes per sending rank instead")
    parser.add_argument("--trials", type=int, default=trials, help=f"timed trials per {per} (default: %(default)s)")
    parser.add_argument("--seed", type=int, default=1, help="victims and send orders (default: %(default)s)")


def adversarial_args(*, victims: int, trials: int, seed: int, messages: int | None, bytes_per_rank: int | None,
                     knobs: Mapping[str, Any], extra: Sequence[str] = ()) -> list[str]:
    """The ``bench adversarial`` command line of one run (*bytes_per_rank*, when given, wins over *messages*)."""
    amount = (["--bytes-per-rank", str(bytes_per_rank)] if bytes_per_rank is not None
              else ["--messages", str(messages)])
    return ["--victims", str(victims), "--trials", str(trials), "--seed", str(seed), "--quiet", *extra,
            *amount, *rail_flags(knobs)]


def adversarial_argv(ranks: int, args: Sequence[str]) -> list[str]:
    # python -m mpi4py: an exception on one rank aborts the whole job instead of hanging it;
    # the module is launched directly, so the run does not depend on the rest of the CLI.
    return mpiexec_argv(ranks, [sys.executable, "-m", "mpi4py", "-m", "mailrail.bench.adversarial", *args])


def run_adversarial(ranks: int, args: Sequence[str], json_path: str, *, time_limit: float = DEFAULT_TIME_LIMIT,
                    capture: bool = True) -> dict[str, Any]:
    """Run ``bench adversarial ARGS --json JSON_PATH`` on *ranks* ranks.

    Returns the benchmark's JSON document with ``status="ok"`` and ``wall_s``
    added, or ``{"status": "timeout" | "failed", ...}`` saying what went wrong.
    With *capture* False the job's output goes straight to the terminal
    (live progress); otherwise the tail of a failed job's output is kept.
    """
    if os.path.exists(json_path):
        os.remove(json_path)  # never mistake an older run's document for this one's
    argv = adversarial_argv(ranks, [*args, "--json", json_path])
    start = time.monotonic()
    try:
        completed = run_bounded(argv, timeout=time_limit, env=mpi_environment(), capture=capture)
    except subprocess.TimeoutExpired as expired:
        return {"status": "timeout", "time_limit_s": time_limit, "wall_s": time.monotonic() - start,
                "ranks": ranks, "output_tail": _tail(expired.output, expired.stderr)}
    wall = time.monotonic() - start
    if completed.returncode != 0 or not os.path.exists(json_path):
        return {"status": "failed", "returncode": completed.returncode, "wall_s": wall, "ranks": ranks,
                "output_tail": _tail(completed.stdout, completed.stderr)}
    with open(json_path) as source:
        document = json.load(source)
    document.update(status="ok", wall_s=wall)
    return document


def status_text(result: dict[str, Any]) -> str:
    """``ok``, ``timed out (> 120 s)`` or ``failed (exit 1)``."""
    if result["status"] == "timeout":
        return f"timed out (> {result['time_limit_s']:g} s)"
    if result["status"] == "failed":
        return f"failed (exit {result['returncode']})"
    return "ok"


def _tail(stdout: str | bytes | None, stderr: str | bytes | None, limit: int = 2000) -> str:
    text = "".join(part.decode(errors="replace") if isinstance(part, bytes) else part
                   for part in (stdout, stderr) if part)
    return text[-limit:]
