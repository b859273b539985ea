"""The compiled transport never crashes the process: failed construction, MPI errors, clean-up past errors.

The fault-injection cases run tests/programs/compiled_faults.py in one process (COMM_SELF, no
mpiexec: fast and deterministic); the job cases run real mpiexec jobs.  Each asserts a Python
exception with a clear message and no signal (a segfault is the test failing).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from helpers import MPI_TIMEOUT, job_environment, mpirun, program_path, run_program
from mailrail._mpi import singleton_variables
from mailrail_tools.jobs.bounded import run_bounded


def single_process(scenario: str) -> dict:
    """compiled_faults.py SCENARIO in one process; fails the test unless it exits 0 with a RESULT."""
    argv = [sys.executable, program_path("compiled_faults.py"), scenario]
    try:
        # a singleton: Open MPI 5 would leave its shared-memory segment behind (see mailrail._mpi)
        env = job_environment(**singleton_variables(os.environ))
        completed = run_bounded(argv, timeout=MPI_TIMEOUT, env=env, capture=True)
    except subprocess.TimeoutExpired:
        pytest.fail(f"compiled_faults.py {scenario} hung")
    assert completed.returncode == 0, f"exit {completed.returncode}\n{completed.stdout}\n{completed.stderr}"
    line = next(line for line in completed.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


def assert_no_crash(completed: subprocess.CompletedProcess) -> None:
    output = completed.stdout + completed.stderr
    assert completed.returncode >= 0 and completed.returncode not in (128 + 11, 128 + 6), output[-4000:]
    assert "Segmentation fault" not in output and "signal 11" not in output.lower(), output[-4000:]


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        ("tuning", "ValueError: tuning idle_sleep_ns=10000000000000000000 is out of range"),
        ("layout", "ValueError: unsupported MPI layout: status of 1000000 bytes"),
        ("pools", "ValueError: a pool needs slots >= 1"),
        ("MPI_Recv_init:0", "injected"),  # no receive made yet
        ("MPI_Recv_init:2", "injected"),  # two made, none posted
        ("MPI_Start:0", "injected"),  # every receive made, none posted
        ("MPI_Start:3", "injected"),  # three posted
        ("MPI_Recv_init:5:credit", "injected"),  # payload receives posted, one credit receive made
        ("MPI_Start:6:credit", "injected"),  # payload receives and two credit receives posted
    ],
)
def test_failed_construction_releases_what_exists(step, expected):
    result = single_process(f"construct={step}")
    assert (result["injected"] if expected == "injected" else expected) in result["error"]
    assert result["nothing_left_posted"], "a receive of the failed transport is still posted"


def test_abandon_goes_on_past_errors_and_raises_the_first():
    result = single_process("abandon-past-errors")
    assert result["error"] == (
        f"MailRailError: MPI failed to cancel a posted receive ({result['injected']}); everything else was released"
    )
    assert result["nothing_left_posted"]


def test_cancel_receives_goes_on_past_errors():
    result = single_process("close-past-errors")
    assert result["error"].startswith("MailRailError: MPI failed to complete a cancelled receive")
    assert result["nothing_left_posted"]


def test_a_failed_send_gives_its_slot_back_and_is_not_counted():
    result = single_process("send-fails")
    assert result["error"] == f"MailRailError: send(dest=0, nbytes=8) failed: {result['injected']}"
    assert (result["reserved"], result["pending"], result["sent"]) == (0, 0, 0)


def test_a_transport_collected_without_close_cancels_its_receives():
    assert single_process("collected-unclosed")["nothing_left_posted"]


def test_a_truncated_receive_raises_and_the_rail_goes_on():
    result = single_process("truncation")
    if result["error"] is None:
        pytest.skip(f"this MPI truncates a self-send silently ({result['library']}); the 2-rank job checks it")
    assert "longer than this rank's datagram_size (64 bytes) arrived from rank 0" in result["error"]
    assert result["after"] == [8, 5]
    assert result["nothing_left_posted"]


# -- real jobs -----------------------------------------------------------------------------------


@pytest.mark.mpi
@pytest.mark.smoke
def test_failed_construction_in_a_job_ends_in_a_python_error():
    completed = run_program(2, "compiled_faults.py", "construct-uncaught=MPI_Start:3")
    assert_no_crash(completed)
    assert completed.returncode != 0
    assert completed.stderr.count("\nmpi4py.MPI.Exception: ") == 1, completed.stderr  # the last rank's only


@pytest.mark.mpi
@pytest.mark.smoke
def test_a_truncating_message_mid_run_raises_and_the_job_recovers():
    result = mpirun(2, "truncation_mid_run.py", "recover", env={"MAILRAIL_IMPLEMENTATION": "compiled"})
    assert result["error"].startswith("MailRailError: a message longer than this rank's datagram_size (1024 bytes)")
    assert "arrived from rank 0" in result["error"] and "truncate" in result["error"].lower()
    assert result["after"] == [0, 4, 7]


@pytest.mark.mpi
@pytest.mark.smoke
def test_rails_abandoned_after_a_truncation_leave_mpi_finalize_safe():
    completed = run_program(2, "truncation_mid_run.py", "abandon", env={"MAILRAIL_IMPLEMENTATION": "compiled"})
    assert_no_crash(completed)
    assert completed.returncode == 0, completed.stdout[-4000:] + completed.stderr[-4000:]
    assert "MailRailError: a message longer" in completed.stdout


@pytest.mark.mpi
@pytest.mark.smoke
def test_an_uncaught_truncation_ends_the_job_with_its_message():
    completed = run_program(2, "truncation_mid_run.py", "uncaught", env={"MAILRAIL_IMPLEMENTATION": "compiled"})
    assert_no_crash(completed)
    assert completed.returncode != 0
    assert "every rank of a rail must use the same datagram_size" in completed.stdout + completed.stderr


@pytest.mark.mpi
@pytest.mark.smoke
@pytest.mark.parametrize("flow_control", ["none", "rank"])
@pytest.mark.parametrize("transport", ["compiled", "python"])
def test_send_refuses_strided_views_and_returns_refused_slots(transport, flow_control):
    results = mpirun(
        2, "send_contract.py", env={"MAILRAIL_IMPLEMENTATION": transport, "MAILRAIL_FLOW_CONTROL": flow_control}
    )
    for found in results:
        assert found["implementation"] == transport
        assert "strides (2,)" in found["strided"]
        assert found["reserved_after_strided"] == 1  # refused before anything changed
        assert found["reserved_after_bad_destination"] == 0  # the refused send gave its slot back
        assert found["reserved_after_bad_sizes"] == 0
        assert found["all_slots_reservable"]
        assert found["reserved_all"] == found["pending_with_all_reserved"] == 8
        assert found["reserved_after_sends"] == 1
        assert found["received"] == list(range(7))
        assert found["counters"] == {"messages_sent": 7, "messages_received": 7, "messages_released": 7}
        assert found["finalize"]["reserved"] == 1
