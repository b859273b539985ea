"""``mailrail trace stats``: counts, matrix summary, JSON and the heatmap PNG."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mailrail.errors import TraceFormatError
from mailrail.trace import TraceDir
from mailrail.trace.binary import BinaryTraceWriter
from mailrail_tools.cli import main
from mailrail_tools.replay.stats import compute, matrix_summary

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_stats_of_the_shared_traces(binary_trace, json_trace):
    for path in (binary_trace, json_trace):
        stats = compute(TraceDir.open(path))
        assert (stats.ranks, stats.phases, stats.messages, stats.bytes) == (2, 16, 2000, 30000)
        assert stats.byte_matrix.tolist() == [[7560, 7440], [7350, 7650]]
        assert stats.message_matrix.tolist() == [[504, 496], [490, 510]]
        assert (stats.min_size, stats.max_size) == (15, 15)
        assert stats.phase_messages.tolist() == [0] * 10 + [2000] + [0] * 5


def test_matrix_summary():
    matrix = np.array([[0, 10, 0], [30, 0, 0], [50, 10, 0]])
    summary = matrix_summary(matrix, top=2)
    assert summary["receive_imbalance"] == pytest.approx(80 / 100 * 3)  # max received / mean received
    assert summary["send_imbalance"] == pytest.approx(60 / 100 * 3)
    assert summary["pair_imbalance"] == pytest.approx(50 / (100 / 9))
    assert (summary["zero_pairs"], summary["pairs"], summary["self_bytes"]) == (5, 9, 0)
    assert summary["top_receivers"] == [{"rank": 0, "bytes": 80, "share": 0.8}, {"rank": 1, "bytes": 20, "share": 0.2}]
    assert matrix_summary(np.zeros((2, 2), np.int64))["receive_imbalance"] == 0.0


def test_ranks_that_disagree_on_barriers_are_reported(tmp_path):
    with BinaryTraceWriter(str(tmp_path / "trace_0.bin")) as writer:
        writer.message(1, 4), writer.barrier_begin(), writer.barrier_end()
    with BinaryTraceWriter(str(tmp_path / "trace_1.bin")) as writer:
        writer.message(0, 4)
    with pytest.raises(TraceFormatError) as info:
        compute(TraceDir.open(tmp_path))
    assert str(info.value) == (
        f"{tmp_path}: the ranks recorded different numbers of barriers "
        f"(rank 0: 1, rank 1: 0); barriers are global, so the rank files do not belong to one run"
    )


def test_trailing_messages_after_the_last_barrier_form_a_phase(tmp_path):
    for rank in range(2):
        with BinaryTraceWriter(str(tmp_path / f"trace_{rank}.bin")) as writer:
            writer.message(1 - rank, 4), writer.barrier_begin(), writer.barrier_end()
            if rank == 1:
                writer.message(0, 6)
    stats = compute(TraceDir.open(tmp_path))
    assert stats.phases == 2 and stats.phase_bytes.tolist() == [8, 6]


def test_stats_command_prints_writes_json_and_heatmap(binary_trace, tmp_path, capsys):
    png, document = tmp_path / "fig" / "matrix.png", tmp_path / "stats.json"
    assert main(["trace", "stats", str(binary_trace), "--heatmap", str(png), "--json", str(document)]) == 0
    out = capsys.readouterr().out
    assert "phases     16 (1 with messages)" in out
    assert "messages   2,000  bytes 30,000  message size 15..15 (mean 15.0)" in out
    assert "0 of 4 exchange nothing" in out
    assert png.read_bytes().startswith(PNG_MAGIC)
    stats = json.loads(document.read_text())
    assert stats["byte_matrix"] == [[7560, 7440], [7350, 7650]]
    assert stats["top_receivers"][0] == {"rank": 1, "bytes": 15090, "share": pytest.approx(15090 / 30000)}
    assert stats["heatmap"] == str(png)


def test_stats_command_reports_a_corrupt_trace(binary_trace, tmp_path, capsys):
    (tmp_path / "trace_0.bin").write_bytes((binary_trace / "trace_0.bin").read_bytes()[:-1])
    (tmp_path / "trace_1.bin").write_bytes((binary_trace / "trace_1.bin").read_bytes())
    assert main(["trace", "stats", str(tmp_path), "--no-heatmap"]) == 2
    assert (
        f"mailrail trace stats: {tmp_path}/trace_0.bin: byte offset 21732: truncated barrier_end"
        in capsys.readouterr().err
    )
