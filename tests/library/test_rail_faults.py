"""The library's own failure behaviour under real mpiexec jobs: every fault ends the job or is refused, and says why.

Each job is bounded (a time-out is the test failing); a program that must end by MailRail's own
abort runs under plain ``python`` (not ``python -m mpi4py``), so nothing else can end it.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import (
    MPI_TIMEOUT,
    alive,
    job_environment,
    job_files_left,
    job_processes_left,
    mailrail,
    mpirun,
    program_path,
    result_of,
    run_program,
)
from mailrail.flow import MODE_NAMES
from mailrail_tools.jobs.bounded import run_bounded
from mailrail_tools.jobs.which_mpi import mpi_environment, mpiexec_argv

pytestmark = pytest.mark.mpi

#: Both transports: the default (compiled when built) and the Python one.
TRANSPORTS = ["compiled", "python"]
#: Seconds a job that must abort by itself may take (the sleepers in it sleep 300 s).
ABORT_BOUND = 60.0


def run_plain(ranks: int, name: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """Test program *name* under plain ``python`` on *ranks* ranks; the test fails if it outlives ABORT_BOUND."""
    argv = mpiexec_argv(ranks, [sys.executable, program_path(name), *args])
    try:
        completed = run_bounded(
            argv, timeout=ABORT_BOUND, env=mpi_environment(base=job_environment(**env)), capture=True
        )
    except subprocess.TimeoutExpired as expired:
        pytest.fail(f"{name} {args} did not end within {ABORT_BOUND} s\n{expired.output}\n{expired.stderr}")
    assert job_processes_left() == []  # nothing of the test's jobs left
    return completed


def failure_lines(completed: subprocess.CompletedProcess, text: str) -> list[str]:
    output = (completed.stdout + completed.stderr).replace("\x00", "")  # Open MPI may interleave NUL bytes
    return [line for line in output.splitlines() if text in line]


@pytest.mark.smoke
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_an_exception_inside_with_aborts_the_job_with_its_traceback_once(transport):
    completed = run_plain(3, "fault_raise_inside_with.py", env={"MAILRAIL_IMPLEMENTATION": transport})
    assert completed.returncode != 0
    lines = failure_lines(completed, "RuntimeError: injected failure on rank 1")
    assert len(lines) == 1, completed.stderr
    assert lines[0].startswith("[rank 1 on "), lines
    assert failure_lines(completed, "Traceback (most recent call last)")[0].startswith("[rank 1 on ")
    assert not failure_lines(completed, "UNREACHABLE")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_sys_exit_0_inside_with_is_a_normal_exit(transport):
    completed = run_plain(2, "fault_raise_inside_with.py", "exit0", env={"MAILRAIL_IMPLEMENTATION": transport})
    assert completed.returncode == 0, completed.stderr
    assert len(failure_lines(completed, "finalized>")) == 2


@pytest.mark.smoke
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("mode", list(MODE_NAMES))
def test_on_error_raise_cleans_up_locally_without_a_collective_and_re_raises(transport, mode):
    if transport == "compiled" and mode in ("node", "adaptive"):
        env = {"MAILRAIL_IMPLEMENTATION": transport, "MAILRAIL_ATOMICS": "cpu"}
    else:
        env = {"MAILRAIL_IMPLEMENTATION": transport}
    everyone = mpirun(3, "fault_on_error_raise.py", mode, env=env)
    for rank, seen in enumerate(everyone):
        assert seen["error"] == f"injected failure on rank {rank}"
        assert seen["finalized"]
        assert seen["after_sources"] == [0, 1, 2]
        assert not any(seen["after_report"].values())


@pytest.mark.smoke
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("wait", ["finalize", "barrier"])
def test_a_wait_for_ranks_that_never_come_ends_within_the_stall_timeout_naming_them(transport, wait):
    completed = run_plain(
        4,
        "fault_wait_missing_ranks.py",
        wait,
        env={"MAILRAIL_IMPLEMENTATION": transport, "MAILRAIL_STALL_TIMEOUT": "2"},
    )
    assert completed.returncode != 0
    named = failure_lines(completed, f"ranks 1, 3 have not called {wait}()")
    assert named and named[0].startswith("[rank 0 on "), completed.stderr
    assert "StallError" in named[0]
    assert not failure_lines(completed, "UNREACHABLE")


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_barrier_inside_a_barrier_handler_is_refused_at_once(transport):
    everyone = mpirun(2, "fault_nested_barrier.py", env={"MAILRAIL_IMPLEMENTATION": transport})
    for outcome in everyone:
        assert outcome["handled"] == 2 and outcome["again"] == 0
        assert len(outcome["errors"]) == 4
        assert all("inside a barrier() handler" in error for error in outcome["errors"])


@pytest.mark.smoke
@pytest.mark.parametrize(
    "case, words",
    [
        ("datagram_size", ["datagram_size (MAILRAIL_DATAGRAM_SIZE) is 4096 on ranks 0, 2 and 1024 on rank 1"]),
        ("flow_control", ["flow_control (MAILRAIL_FLOW_CONTROL) is 'none' on ranks 0, 2 and 'rank' on rank 1"]),
        ("recv_pool_slots", ["recv_pool_slots (MAILRAIL_RECV_POOL_SLOTS) is 512 on ranks 0, 2 and 4 on rank 1"]),
        (
            "implementation",
            ["implementation (MAILRAIL_IMPLEMENTATION) is 'compiled' on ranks 0, 2 and 'python' on rank 1"],
        ),
        ("invalid", ["rank 1: datagram_size= (keyword for MAILRAIL_DATAGRAM_SIZE)", "got 0"]),
    ],
)
def test_ranks_that_disagree_are_refused_on_every_rank_with_one_message(case, words):
    everyone = mpirun(3, "config_disagreement.py", case)
    messages = {outcome["error"][1] for outcome in everyone}
    assert len(messages) == 1, messages
    for outcome in everyone:
        assert outcome["error"][0] == "ConfigError"
        assert outcome["communicators"] == [0, 0]  # refused before any MPI object existed
        assert outcome["after"] == 1
    message = messages.pop()
    for word in words:
        assert word in message, (word, message)


@pytest.mark.smoke
def test_configuration_warnings_are_said_once_for_the_job():
    """Three ranks, two rails each, the same environment: each warning once, from rank 0, not six times."""
    env = {"MAILRAIL_DATAGRAM_SIZ": "4096", "MAILRAIL_RECV_POOL_SLOTS": "64"}
    completed = run_program(3, "config_warnings.py", env=env)
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.count("DONE") == 3
    err = completed.stderr
    assert err.count("unknown environment variable MAILRAIL_DATAGRAM_SIZ is ignored") == 1, err
    assert err.count("recv_pool_slots=32 (a keyword) overrides MAILRAIL_RECV_POOL_SLOTS='64'") == 1, err


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_staged_leftovers_are_reported_and_coalescers_share_a_rail(transport):
    for result in mpirun(2, "coalesce_leftovers.py", env={"MAILRAIL_IMPLEMENTATION": transport}):
        assert result["report"]["staged"] == 4
        assert len(result["warnings"]) == 1 and "4 record(s) and call(s) left staged" in result["warnings"][0]
        assert (
            result["strict"][0] == "UndeliveredError" and "2 record(s) and call(s) left staged" in result["strict"][1]
        )
        assert result["numbers"] == sorted(n for round in range(7) for n in range(round))
        assert result["words"] == 21
        assert not any(result["final"].values())
        assert result["disagree"][0] == "MailRailError" and "ranks opened different channels" in result["disagree"][1]


@pytest.mark.smoke
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_the_stall_report_tells_the_true_counters_on_both_transports(transport):
    report = mpirun(2, "stall_report_counts.py", env={"MAILRAIL_IMPLEMENTATION": transport}, timeout=MPI_TIMEOUT)[
        "report"
    ]
    assert report is not None
    assert "this rank received 3 message(s), released 3" in report, report


@pytest.mark.mpi
@pytest.mark.smoke
def test_a_truncating_message_mid_run_raises_and_the_job_recovers_on_the_python_transport():
    """The compiled transport's case (tests/library/transport/test_compiled_faults.py) on the Python one: Open MPI 4
    frees a receive that completed with an error, and the transport makes it again."""
    result = mpirun(2, "truncation_mid_run.py", "recover", env={"MAILRAIL_IMPLEMENTATION": "python"})
    assert result["error"].startswith("MailRailError: a message longer than this rank's datagram_size (1024 bytes)")
    assert result["after"] == [0, 4, 7]
    assert not any(result["finalize"].values()), result["finalize"]


# -- ranks in different collectives, and ranks late to one -----------------------------------------------------------

#: The program of these tests, and no stall timeout: only the judge may end a mismatched job.
MISMATCH = "collective_mismatch.py"
NO_STALL_TIMEOUT = {"MAILRAIL_STALL_TIMEOUT": "0"}


def site_of(what: str) -> str:
    """``PATH:LINE`` of the call marked ``# CALL: what`` in the program, as the ranks say it: the path relative to
    the working directory (the job's too) when it is inside it."""
    path = program_path(MISMATCH)
    line = next(
        number for number, text in enumerate(Path(path).read_text().splitlines(), 1) if text.endswith(f"# CALL: {what}")
    )
    relative = os.path.relpath(path)
    return f"{path if relative.startswith(os.pardir) else relative}:{line}"


def at_the_end_of_with() -> str:
    return f"finalize() at the end of the `with` block opened at {site_of('with')}"


MISMATCHES = {
    # case: ranks, (rank 0's call, the others' call)
    "total_finalize": (2, f"CountingSet.total() at {site_of('total')}", at_the_end_of_with()),
    "finalize_total": (2, at_the_end_of_with(), f"CountingSet.total() at {site_of('total')}"),
    "barrier_size": (
        3,
        f"barrier() at {site_of('barrier on rank 0')}",
        f"CountingSet.size() at {site_of('size on the others')}",
    ),
    "size_barrier": (
        3,
        f"CountingSet.size() at {site_of('size on rank 0')}",
        f"barrier() at {site_of('barrier on the others')}",
    ),
}


@pytest.mark.smoke
@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize("case", list(MISMATCHES))
def test_ranks_in_different_collectives_end_the_job_at_once_naming_each_call(case, transport):
    """No stall timeout: the job would hang to the test's bound if rank 0, the judge, did not end it."""
    ranks, zeroth, others = MISMATCHES[case]
    completed = run_plain(ranks, MISMATCH, case, env={**NO_STALL_TIMEOUT, "MAILRAIL_IMPLEMENTATION": transport})
    assert completed.returncode != 0
    said = failure_lines(completed, "CollectiveMismatchError:")
    assert len(said) == 1 and said[0].startswith("[rank 0 on "), completed.stderr
    rest = "1" if ranks == 2 else f"1-{ranks - 1}"
    expected = (
        f"ranks called different collectives (collective #2 of this rail): rank 0 called {zeroth}; "
        f"rank{'s' if ranks > 2 else ''} {rest} called {others}."
    )
    assert expected in said[0], said[0]
    assert not failure_lines(completed, "UNREACHABLE")
    assert job_files_left() == set()  # (run_plain: and no process of the job is left)


@pytest.mark.smoke
def test_under_mailrail_run_the_mismatch_ends_the_job_before_its_timeout():
    """The user's case: ``mailrail run --timeout`` used to end this job; now the judge does, with the calls' names."""
    completed = mailrail(
        "run", "-n", "2", "--timeout", "200", "--", "python", program_path(MISMATCH), "total_finalize",
        env=NO_STALL_TIMEOUT, timeout=240,
    )  # fmt: skip
    assert completed.returncode == 1, completed.stderr  # the exception's status, not the timeout's
    assert f"rank 0 called CountingSet.total() at {site_of('total')}; rank 1 called {at_the_end_of_with()}" in (
        completed.stderr
    )


@pytest.mark.parametrize("launcher", ["mailrail run", "mpiexec"])
def test_a_rank_dying_before_it_answers_ends_the_job_naming_it(launcher):
    """Issue 52: rank 0 waits in ``Future.result()`` for an answer rank 1 never gives (killed while running the asked
    function).  The job's failure path ends it, the waiting rank too, within the bound, and says which rank died."""
    if launcher == "mailrail run":
        completed = mailrail("run", "-n", "2", "--", "python", program_path("ask_of_a_dead_rank.py"), timeout=120)
        last = completed.stderr.strip().splitlines()[-1]
        assert re.fullmatch(
            r"mailrail run: the job failed with exit status \d+: (rank 1|a rank on \S+) was killed by signal 9.*", last
        ), completed.stderr
    else:  # plain mpiexec: the MPI's own failure path
        completed = run_plain(2, "ask_of_a_dead_rank.py", env={})
        assert "signal 9" in completed.stdout + completed.stderr, completed.stderr
    assert completed.returncode != 0 and "got past" not in completed.stdout, completed.stdout
    pids = [int(pid) for pid in re.findall(r"READY \d+ (\d+)", completed.stdout)]
    assert len(pids) == 2, completed.stdout
    assert not [pid for pid in pids if alive(pid)] and job_processes_left() == []
    assert job_files_left() == set()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_on_error_raise_has_every_rank_raise_the_verdict_and_go_on(transport):
    everyone = mpirun(3, MISMATCH, "raise", env={**NO_STALL_TIMEOUT, "MAILRAIL_IMPLEMENTATION": transport})
    errors = {outcome["error"] for outcome in everyone}
    assert len(errors) == 1, errors
    assert f"rank 0 called CountingSet.total() at {site_of('total')}; ranks 1-2 called {at_the_end_of_with()}" in (
        errors.pop()
    )


@pytest.mark.smoke
@pytest.mark.parametrize("late", [0, 2])
def test_a_rank_late_to_a_collective_is_waited_for_and_said_once(late):
    """One rank computes 6 s before CountingSet.total(); the warning's delay is 1 s, shortened by its knob: one
    warning for the job (rank 0 names the late rank; when rank 0 is the late one, rank 1 says so after twice the
    delay), and the job ends normally, every rank's results right."""
    env = {**NO_STALL_TIMEOUT, "MAILRAIL_SLOW_RANK_WARNING": "1"}
    completed = run_program(3, MISMATCH, "slow", "6", str(late), env=env)
    assert result_of(completed) == [{"total": 30, "size": 30}] * 3
    warned = [line for line in completed.stderr.splitlines() if "SlowRankWarning: " in line]
    assert len(warned) == 1, completed.stderr
    text = warned[0]
    total = re.escape(f"in CountingSet.total() at {site_of('slow total')} (collective #3 of this rail)")
    if late == 2:
        said = rf"rank 0: waited \d+ s {total} for rank 2; rank 1 is there too \(rank 2 last entered collective #2, "
    else:
        said = rf"rank 1: waited \d+ s {total}, and rank 0, which names the ranks awaited, has not come"
    assert re.search(said, text), text
    assert "waiting on (MAILRAIL_SLOW_RANK_WARNING=1" in text


def test_by_default_a_late_rank_is_waited_for_in_silence():
    completed = run_program(2, MISMATCH, "slow", "3", env=NO_STALL_TIMEOUT)
    assert result_of(completed) == [{"total": 20, "size": 20}] * 2
    assert "SlowRankWarning" not in completed.stderr


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_stall_in_a_container_collective_names_the_call_not_its_barrier(transport):
    completed = run_plain(
        3, MISMATCH, "slow", "300", env={"MAILRAIL_STALL_TIMEOUT": "2", "MAILRAIL_IMPLEMENTATION": transport}
    )
    assert completed.returncode != 0
    said = failure_lines(completed, "StallError:")
    assert len(said) == 1 and said[0].startswith("[rank 0 on "), completed.stderr
    text = said[0]
    assert f"rank 0: CountingSet.total() at {site_of('slow total')} (this rail's collective #3, its barrier #" in text
    awaited = "rank 2 has not called CountingSet.total() (rank 2 last entered collective #2, CountingSet.barrier() at "
    assert awaited in text
