"""Every counter means the same on both transports: read while sends are deferred, and after."""

import pytest

from helpers import mpirun

TRANSPORTS = ["compiled", "python"]


@pytest.mark.mpi
@pytest.mark.smoke
@pytest.mark.parametrize("transport", TRANSPORTS)
def test_stats_while_sends_are_deferred_mean_the_same_on_both_transports(transport):
    result = mpirun(2, "deferred_stats.py", "--messages", "10", env={"MAILRAIL_IMPLEMENTATION": transport})
    assert result["implementation"] == transport
    # Two messages had credit; eight wait, and count as sent (submitted) already.
    assert result["while_deferred"] == {
        "messages_sent": 10,
        "bytes_sent": 80,
        "deferred_now": 8,
        "deferred_sends": 8,
        "messages_received": 0,
    }
    assert result["pending_while_deferred"] >= 8
    assert result["keys"] == result["documented"]
    sender, receiver = result["after"]
    assert sender["messages_sent"] == receiver["messages_received"] == 10
    assert sender["deferred_now"] == 0 and sender["deferred_sends"] == 8
    # 2 credits per pair, returned 2 at a time: 10 releases make 5 returns; the 8 deferred sends
    # needed 4 of them (the last may still be on its way when the barrier ends).
    assert receiver["credit_messages_sent"] == 5 and 4 <= sender["credit_messages_received"] <= 5
    assert result["checksum_match"] and result["finalize"] == {
        "deferred": 0,
        "unreleased": 0,
        "unreceived": 0,
        "reserved": 0,
        "staged": 0,
        "unanswered": 0,
    }
