"""Channels under mpiexec: record channels and calls share one rail, in every flow-control mode."""

import pytest

from helpers import mpirun

pytestmark = pytest.mark.mpi


@pytest.mark.parametrize(
    "mode, ranks, small",
    [
        pytest.param("none", 3, False, marks=pytest.mark.smoke),
        ("rank", 4, True),
        pytest.param("node", 4, True, marks=pytest.mark.smoke),
        ("adaptive", 4, False),
        ("none", 1, False),
    ],
)
def test_channels_and_calls_arrive_exactly_once(mode, ranks, small):
    env = {"MAILRAIL_FLOW_CONTROL": mode, "MAILRAIL_RANKS_PER_NODE": "2"}
    if small:  # constant backpressure: 512-byte datagrams, 2 send buffers
        env.update(MAILRAIL_DATAGRAM_SIZE="512", MAILRAIL_SEND_POOL_SLOTS="2", MAILRAIL_RECV_POOL_SLOTS="8")
    result = mpirun(ranks, "channels_mix.py", "--seed", str(ranks), env=env)
    assert result["numbers"] > 0 and result["words"] > 0 and result["calls"] > 0
    assert not any(result["report"].values())


@pytest.mark.smoke
def test_bad_calls_and_records_are_refused_naming_the_value():
    result = mpirun(1, "channels_errors.py")
    expected = {
        "lambda": ("TypeError", "is a lambda"),
        "nested": ("TypeError", "not a module-level callable"),
        "bound": ("TypeError", "is a bound method"),
        "unpicklable": ("TypeError", "argument 1 (lock"),
        "large": ("no error", ""),
        "bad_dest": ("InvalidDestinationError", "destination 5 is out of range"),
        "float_dest": ("TypeError", "float"),
        "wrong_dtype": ("TypeError", "records have dtype float64, this channel carries uint64"),
        "float_dests": ("TypeError", "destination ranks must be integers"),
        "dest_range": ("InvalidDestinationError", "destination 3 is out of range"),
        "collective_inside": ("MailRailError", "called from inside a handler"),
        "huge_record": ("MessageSizeError", "a 300-byte record does not fit in a 256-byte datagram"),
        "raw_datagram": ("ProtocolError", "4-byte datagram from rank 0 is not a channel datagram"),
    }
    for case, (kind, words) in expected.items():
        got_kind, message, staged = result[case]
        assert got_kind == kind and words in message, (case, result[case])
        assert staged == 0 or case == "collective_inside", (case, staged)


@pytest.mark.parametrize("mode", ["none", "adaptive"])
def test_functions_defined_after_a_barrier_are_there_when_their_calls_run(mode):
    """Issue 52: 15 of 23 such runs failed, a rank still finishing a barrier running a call to a function it had
    not defined yet.  Several runs of 4 ranks on 2 cores: each must run every call once."""
    for _ in range(4):
        result = mpirun(4, "defined_later.py", env={"MAILRAIL_FLOW_CONTROL": mode})
        assert result == {"notes": 16, "bumped": 4 * 400.0}, result
