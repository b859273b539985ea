"""Helpers the tests import (``pythonpath = tests`` in pyproject.toml): programs, the mailrail command, clusters."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from mailrail.cluster import cgroups, namespaces, state
from mailrail.cluster.spec import PREFIX
from mailrail.launch import run_bounded

PROGRAMS = os.path.join(os.path.dirname(__file__), "programs")
#: The README, whose tables the tests check against the code.
README_TEXT = open(os.path.join(os.path.dirname(__file__), os.pardir, "README.md"), encoding="utf-8").read()


def program_path(name: str) -> str:
    """The path of the test program *name* (in tests/programs)."""
    return os.path.join(PROGRAMS, name)


def program(name: str) -> list[str]:
    """A test program as ranks run it (``python -m mpi4py``: an exception on one rank aborts the job)."""
    return [sys.executable, "-m", "mpi4py", program_path(name)]


#: The transport of jobs whose test does not choose one: unset, MailRail's own choice (compiled
#: when built); ``make test`` runs the smoke set a second time with ``python``.
TEST_ENGINE = os.environ.get("MAILRAIL_TEST_ENGINE")


def job_environment(**extra: str) -> dict[str, str]:
    """The environment of a test's job: no MAILRAIL_* of the caller's, a stall timeout, the test transport."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILRAIL_")}
    env["MAILRAIL_STALL_TIMEOUT"] = "30"  # starvation fails loudly, not as a hang
    if TEST_ENGINE:
        env["MAILRAIL_ENGINE"] = TEST_ENGINE
    env.update(extra)
    return env


def mailrail(*args: str, timeout: float = 240, prefix: list[str] | None = None) -> subprocess.CompletedProcess:
    """``python -m mailrail ARGS`` in its own process group, killed after *timeout* seconds."""
    argv = [*(prefix or []), sys.executable, "-m", "mailrail", *args]
    try:
        return run_bounded(argv, timeout=timeout, env=job_environment(), capture=True)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"mailrail {' '.join(args)} hung for {timeout} s:\n{expired.output}\n{expired.stderr}")


def leftovers() -> dict[str, list[str]]:
    """Every trace a cluster leaves on the machine: named namespaces, state directories, cgroups, processes."""
    hierarchy = cgroups.find_hierarchy()
    groups = []
    if hierarchy and os.path.isdir(hierarchy.base):
        groups = sorted(n for n in os.listdir(hierarchy.base) if n.startswith(PREFIX))
    return {"netns": namespaces.list_netns(PREFIX), "state": state.known_names(PREFIX), "cgroups": groups,
            "processes": processes_mentioning(state.STATE_ROOT + "/" + PREFIX)}


def processes_mentioning(text: str) -> list[str]:
    """Processes whose command line names *text* (every launcher daemon names its cluster's ssh stand-in)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as source:
                    cmdline = source.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if text in cmdline:
                found.append(f"{entry}: {cmdline[:200]}")
    return found


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def ready_pids(stdout: str) -> list[int]:
    return [int(line.split()[2]) for line in stdout.splitlines() if line.startswith("READY ")]


def result_of(completed: subprocess.CompletedProcess) -> dict:
    """The ``RESULT <json>`` line of a job that must have exited 0 (else the test fails with its output)."""
    assert completed.returncode == 0, (f"exit {completed.returncode}\n{completed.stdout[-4000:]}\n"
                                       f"{completed.stderr[-4000:]}")
    for line in completed.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    pytest.fail(f"no RESULT line:\n{completed.stdout[-4000:]}\n{completed.stderr[-4000:]}")
