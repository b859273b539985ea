"""Recording (MAILRAIL_TRACE=DIR): a MailRail run writes a binary trace that replays to the same bytes."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import mpirun, replay
from mailrail.trace import TraceDir, load_phases, read_binary
from mailrail.trace.binary import MESSAGE_RECORD
from mailrail.trace.recorder import TraceWriter
from mailrail_tools.replay.stats import compute


def test_trace_writer_records_messages_and_barriers(tmp_path):
    writer = TraceWriter.for_rank(str(tmp_path / "new"), 3)  # makes the one directory (Config checked its parent)
    writer.message(1, 100)
    writer.message(3, 0)
    writer.barrier_begin(2, 0)
    writer.message(0, 7)  # sent by a barrier handler
    writer.barrier_end(3, 1)
    # barrier_end flushed: the completed phase is on disk before close()
    path = tmp_path / "new" / "trace_3.bin"
    assert load_phases(read_binary(str(path), 3, 4)) == [[(1, 100), (3, 0), (0, 7)]]
    writer.message(2, 9)
    writer.close()
    assert load_phases(read_binary(str(path), 3, 4)) == [[(1, 100), (3, 0), (0, 7)], [(2, 9)]]
    data = path.read_bytes()
    assert len(data) == 4 * 20 + 2 * 52
    first = np.frombuffer(data, MESSAGE_RECORD, 2)
    assert first["event_id"].tolist() == [1, 2]  # event ids increase by one per record


def test_trace_writer_buffers_writes(tmp_path, monkeypatch):
    writer = TraceWriter.for_rank(str(tmp_path), 0)
    writes = []
    real_write = writer._file.write
    monkeypatch.setattr(writer._file, "write", lambda data: writes.append(len(data)) or real_write(data))
    for i in range(10000):
        writer.message(i % 2, 8)
    writer.close()
    assert len(writes) == 1 and writes[0] == 10000 * 20  # one write for 10,000 messages, not 10,000


@pytest.mark.mpi
def test_recorded_run_replays_to_the_same_byte_matrix(tmp_path):
    trace = tmp_path / "recorded"
    result = mpirun(
        2,
        "record.py",
        "--phases",
        "3",
        "--messages",
        "150",
        env={"MAILRAIL_TRACE": str(trace), "MAILRAIL_DATAGRAM_SIZE": "2048"},
    )
    recorded = TraceDir.open(trace)
    assert (recorded.ranks, recorded.format) == (2, "binary")
    stats = compute(recorded)
    assert stats.byte_matrix.tolist() == result["byte_matrix"]
    assert stats.messages == result["sends"] and stats.phases == 3
    # Each rank's own sends of phases 0 and 2 (150 each) are in those phases.  Phase 1 sends nothing
    # but may hold a reply: a rank still in barrier 1 can receive (and answer) a message that a
    # faster peer sent in phase 2, after leaving barrier 1.  The reply is recorded where it was sent.
    assert stats.phase_messages[0] >= 300 and stats.phase_messages[2] >= 300

    for mode in ("rank", "node"):
        document = replay(2, trace, tmp_path / f"{mode}.json", "--flow-control", mode)
        assert document["verified"] is True
        assert document["byte_matrix"] == result["byte_matrix"]
        assert document["messages_replayed"] == result["sends"]


def test_a_second_rail_in_the_same_process_appends(tmp_path):
    first = TraceWriter.for_rank(str(tmp_path), 0)
    first.message(1, 5)
    first.close()
    second = TraceWriter.for_rank(str(tmp_path), 0)  # e.g. a benchmark's next configuration
    second.message(0, 6)
    second.close()
    assert load_phases(read_binary(str(tmp_path / "trace_0.bin"), 0, 2)) == [[(1, 5), (0, 6)]]
    ids = np.frombuffer((tmp_path / "trace_0.bin").read_bytes(), MESSAGE_RECORD)["event_id"]
    assert ids.tolist() == [1, 2]  # the event ids go on increasing
