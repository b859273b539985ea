"""mailrail bench calls under mpiexec: rail.call against mpi4py's pickled isend, rail.ask against a raw
request/reply, every call and answer checked."""

from __future__ import annotations

import json

import pytest

from mailrail_tools.bench import calls
from mailrail_tools.jobs.job import run_mailrail


@pytest.mark.mpi
def test_bench_calls_reports_both_rates_and_the_calls_each_datagram_carried(tmp_path):
    out = tmp_path / "calls.json"
    args = ["bench", "calls", "--calls", "5000", "--repeats", "1", "--json", str(out)]
    completed = run_mailrail(2, args, timeout=180, capture=True)
    assert completed.returncode == 0, completed.stdout[-2000:] + completed.stderr[-2000:]
    document = json.loads(out.read_text())
    assert document["calls"] == 5000 and len(document["runs"]) == 1
    assert document["call_per_s"] > 0 and document["isend_per_s"] > 0
    assert document["ratio"] == pytest.approx(document["call_per_s"] / document["isend_per_s"])
    # small calls wait in their destination's batch: a 32 KiB datagram carries many hundreds of them
    assert document["calls_per_datagram"] > 500
    assert document["ask_per_s"] > 0 and document["raw_ask_per_s"] > 0 and len(document["ask_runs"]) == 1
    assert document["ask_ratio"] == pytest.approx(document["ask_per_s"] / document["raw_ask_per_s"])
    assert "rail.call vs comm.isend" in completed.stdout and "rail.ask vs isend and irecv" in completed.stdout


def test_a_lost_call_fails_the_check():
    """The check can fail: a receiver one call short says what it got and what it expected."""
    calls._Tally.count, calls._Tally.total = 9, 36
    with pytest.raises(AssertionError, match="rail.call: received 9 calls summing to 36, expected 10 summing to 45"):
        calls._check(None, False, 10, "rail.call")


def test_a_wrong_answer_fails_the_check():
    with pytest.raises(AssertionError, match="rail.ask: 3 answers, the first wrong or missing at ask 2"):
        calls._check_answers([0, 1, 9], 3, "rail.ask")
    with pytest.raises(AssertionError, match="the first wrong or missing at ask 2"):
        calls._check_answers([0, 1], 3, "rail.ask")
