"""``mailrail replay``: delivery verified in every flow-control mode, and failures reported, not hung."""

from __future__ import annotations

import argparse
import shutil

import numpy as np
import pytest

from helpers import mailrail_job, replay
from mailrail.errors import ConfigError, TraceFormatError
from mailrail.flow import MODE_NAMES
from mailrail.trace import MessageBlock, PhaseEnd, TraceDir
from mailrail_tools.replay.generate import Workload, write_trace
from mailrail_tools.replay.replay import DEFAULT_DATAGRAM_SIZE, Payload, PeerTally, _plan, add_arguments, check_delivery
from mailrail_tools.replay.spool import Spool

MODES = MODE_NAMES
HISTOGRAM_BYTE_MATRIX = [[7560, 7440], [7350, 7650]]
DOCUMENT_KEYS = {
    "benchmark",
    "trace",
    "ranks",
    "flow_control",
    "runtime_s",
    "goodput_bps",
    "messages_replayed",
    "bytes_replayed",
    "credit_messages",
    "phases",
    "verified",
}


# -- verification logic (no MPI) -----------------------------------------


def tallies(sent_bytes, crc=7):
    """What an intact delivery of *sent_bytes[s]* (one datagram per source) looks like."""
    received = PeerTally.zeros(len(sent_bytes))
    for source, nbytes in enumerate(sent_bytes):
        received.add(source, nbytes, crc)
    return [(1, crc) for _ in sent_bytes], received


def test_check_delivery_accepts_an_intact_delivery():
    expected = np.array([[10, 0], [5, 5]])  # source 0 sends 10 in phase 0; source 1 5 + 5
    sent, received = tallies([10, 10])
    assert check_delivery(1, expected, sent, received, [[10, 5], [10, 10]]) == []


def test_check_delivery_reports_missing_bytes_datagrams_and_corruption():
    expected = np.array([[10], [20]])
    sent, received = tallies([10, 20])
    received.bytes[0] -= 1
    received.datagrams[1] += 1
    received.crc[1] ^= 1
    assert check_delivery(3, expected, sent, received, [[10, 20]]) == [
        "rank 3 received 9 bytes from rank 0; the trace records 10",
        "rank 3 received 2 datagrams from rank 1, which sent 1",
        "rank 3: CRC-32 sum of the datagrams from rank 1 is 6, the sender's is 7 (corrupt or misdelivered payload)",
    ]


def test_check_delivery_reports_a_barrier_that_returned_early():
    expected = np.array([[4, 6]])
    sent, received = tallies([10])
    assert check_delivery(0, expected, sent, received, [[3], [10]]) == [
        "rank 0: barrier 0 returned with 3 of the 4 bytes rank 0 sent in phases 0..0"
    ]


def test_payload_is_deterministic_and_differs_per_datagram():
    payload = Payload(64)
    a, b, c = (np.zeros(64, np.uint8) for _ in range(3))
    crc = payload.fill(a, 0, 1, 5, 64)
    assert payload.fill(b, 0, 1, 5, 64) == crc and np.array_equal(a, b)
    assert payload.fill(c, 0, 1, 6, 64) != crc
    assert Payload(64).fill(b, 0, 1, 5, 64) == crc  # the same in every process


def test_spool_gives_the_events_back(json_trace):
    trace = TraceDir.open(json_trace)
    spool = Spool()
    original = list(spool.record(trace.events(1, block_messages=100)))
    again = list(spool.events())
    spool.close()
    assert [type(e) for e in again] == [type(e) for e in original]
    for mine, theirs in zip(again, original):
        if isinstance(mine, MessageBlock):
            assert all(np.array_equal(x, y) for x, y in zip(mine, theirs))
        else:
            assert isinstance(theirs, PhaseEnd)


def replay_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser.parse_args([str(a) for a in argv])


def test_plan_checks_before_any_message_flies(binary_trace, json_trace, clean_environment, monkeypatch, tmp_path):
    plan = _plan(replay_args(binary_trace, "--flow-control", "rank"), 0, 2)
    assert plan.options == {"flow_control": "rank", "datagram_size": DEFAULT_DATAGRAM_SIZE}
    assert plan.summary.bytes.sum(axis=0).tolist() == HISTOGRAM_BYTE_MATRIX[0]
    with pytest.raises(TraceFormatError, match=r"the trace has 2 rank\(s\) .* but the job has 3"):
        _plan(replay_args(binary_trace), 0, 3)
    with pytest.raises(TraceFormatError) as info:
        _plan(replay_args(binary_trace, "--pacing"), 0, 2)
    assert str(info.value) == (
        f"{binary_trace}: --pacing needs recorded timestamps, which only JSON-lines traces "
        f"(trace_<rank>.txt) have; this trace is binary"
    )
    assert _plan(replay_args(json_trace, "--pacing"), 1, 2).spool is not None
    with pytest.raises(SystemExit) as exit_:  # a bad flag is a usage error as argv is parsed
        replay_args(binary_trace, "--flow-control", "credit")
    assert exit_.value.code == 2
    monkeypatch.setenv("MAILRAIL_FLOW_CONTROL", "credit")
    with pytest.raises(ConfigError, match="MAILRAIL_FLOW_CONTROL"):  # a bad variable, every rank alike
        _plan(replay_args(binary_trace), 0, 2)
    monkeypatch.delenv("MAILRAIL_FLOW_CONTROL")
    monkeypatch.setenv("MAILRAIL_TRACE", str(binary_trace))
    with pytest.raises(ConfigError, match="would record this replay over the trace it reads"):
        _plan(replay_args(binary_trace), 0, 2)
    monkeypatch.setenv("MAILRAIL_DATAGRAM_SIZE", "1024")
    monkeypatch.setenv("MAILRAIL_TRACE", str(tmp_path))
    assert "datagram_size" not in _plan(replay_args(binary_trace), 0, 2).options  # the variable applies


# -- real replays under mpiexec ------------------------------------------


@pytest.mark.mpi
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("kind", ["binary", "json"])
def test_shared_traces_replay_verified_in_every_mode(kind, mode, binary_trace, json_trace, tmp_path):
    trace = binary_trace if kind == "binary" else json_trace
    document = replay(2, trace, tmp_path / "replay.json", "--flow-control", mode)
    assert DOCUMENT_KEYS <= set(document)
    assert document["verified"] is True and document["problems"] == []
    assert (document["benchmark"], document["ranks"], document["flow_control"]) == ("replay", 2, mode)
    assert (document["messages_replayed"], document["bytes_replayed"]) == (2000, 30000)
    assert document["byte_matrix"] == HISTOGRAM_BYTE_MATRIX
    assert len(document["phases"]) == 16 and document["phases"][10]["messages"] == 2000
    assert document["datagram_size"] == DEFAULT_DATAGRAM_SIZE
    assert document["runtime_s"] > 0 and document["goodput_bps"] > 0
    if mode == "none":
        assert document["credit_messages"] == 0


@pytest.mark.mpi
def test_replay_splits_large_messages_and_coalesces_small_ones(tmp_path):
    workload = Workload("uniform", ranks=3, messages=300, phases=3, min_size=0, max_size=20000, seed=8)
    write_trace(workload, str(tmp_path / "trace"))
    document = replay(
        3,
        tmp_path / "trace",
        tmp_path / "replay.json",
        "--flow-control",
        "node",
        "--datagram-size",
        "4096",
        "--recv-pool-slots",
        "24",
    )
    assert document["verified"] is True
    assert document["messages_replayed"] == 900 and len(document["phases"]) == 3
    assert document["datagrams"] >= document["bytes_replayed"] / 4096
    assert document["config"]["recv_pool_slots"] == "24"


@pytest.mark.mpi
def test_paced_json_replay_keeps_the_recorded_gaps(json_trace, tmp_path):
    document = replay(2, json_trace, tmp_path / "replay.json", "--pacing", "--flow-control", "rank")
    assert document["verified"] is True and document["pacing"] is True
    # Pacing only ever delays: the busy phase lasts at least the 1990 us rank 0 spent sending.
    assert document["phases"][10]["runtime_s"] >= 1990e-6


@pytest.mark.mpi
def test_wrong_rank_count_is_a_clean_error(binary_trace):
    completed = mailrail_job(3, "replay", binary_trace)
    assert completed.returncode != 0
    assert (
        f"mailrail replay: {binary_trace}: the trace has 2 rank(s) (trace_0 .. trace_1) but the job has 3"
        in completed.stderr
    )


@pytest.mark.mpi
def test_a_corrupt_rank_file_stops_every_rank(binary_trace, tmp_path):
    shutil.copy(binary_trace / "trace_0.bin", tmp_path / "trace_0.bin")
    data = bytearray((binary_trace / "trace_1.bin").read_bytes())
    data[1040:1044] = (9).to_bytes(4, "little")  # the index of a ygm_async record
    (tmp_path / "trace_1.bin").write_bytes(data)
    completed = mailrail_job(2, "replay", tmp_path)
    assert completed.returncode != 0
    assert f"mailrail replay: {tmp_path}/trace_1.bin: byte offset 1040: unknown record type 9" in completed.stderr
