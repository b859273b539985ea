"""The readers decode the real YGM traces to what they contain, in every container, in any chunking."""

from __future__ import annotations

import gzip
import shutil
from collections import Counter

import numpy as np
import pytest

from mailrail.trace import MessageBlock, PhaseEnd, TraceDir, iter_messages, load_phases, read_binary, summarize
from mailrail.trace.binary import BinaryTraceWriter

# What YGM's histogram benchmark (2 ranks) sent, per sender: destination -> messages of 15 bytes.
# The byte totals equal the sizes of YGM's own mpi_send buffers in the binary trace (7560/7440, 7350/7650).
HISTOGRAM_DESTINATIONS = {0: {0: 504, 1: 496}, 1: {0: 490, 1: 510}}
HISTOGRAM_BYTE_MATRIX = [[7560, 7440], [7350, 7650]]
HISTOGRAM_BARRIERS = 16
HISTOGRAM_BUSY_PHASE = 10  # all 1000 messages of a rank lie between the 10th and 11th barrier


@pytest.fixture(params=["binary", "json"])
def histogram(request, binary_trace, json_trace):
    return TraceDir.open(binary_trace if request.param == "binary" else json_trace)


def test_shared_traces_hold_1000_messages_per_rank_in_one_of_16_phases(histogram):
    assert histogram.ranks == 2
    for rank in range(2):
        phases = load_phases(histogram.events(rank))
        assert len(phases) == HISTOGRAM_BARRIERS
        assert [len(p) for p in phases] == [1000 if i == HISTOGRAM_BUSY_PHASE else 0 for i in range(16)]
        messages = phases[HISTOGRAM_BUSY_PHASE]
        assert Counter(dest for dest, _ in messages) == HISTOGRAM_DESTINATIONS[rank]
        assert {size for _, size in messages} == {15}


def test_shared_traces_byte_matrix(histogram):
    rows = [summarize(histogram.events(rank), rank, 2).bytes.sum(axis=0).tolist() for rank in range(2)]
    assert rows == HISTOGRAM_BYTE_MATRIX


def test_binary_and_json_traces_record_the_same_run_order(binary_trace, json_trace):
    binary, text = TraceDir.open(binary_trace), TraceDir.open(json_trace)
    assert (binary.format, text.format) == ("binary", "json")
    for rank in range(2):
        from_binary = [(d, s) for d, s, _ in iter_messages(binary.events(rank))]
        from_json = [(d, s) for d, s, _ in iter_messages(text.events(rank))]
        assert len(from_binary) == len(from_json) == 1000
        assert Counter(from_binary) == Counter(from_json)


def test_json_messages_carry_increasing_timestamps_and_binary_none(binary_trace, json_trace):
    stamps = [t for _, _, t in iter_messages(TraceDir.open(json_trace).events(0))]
    assert stamps == sorted(stamps) and stamps[0] == 1795983039818977 and stamps[-1] - stamps[0] == 1990
    assert {t for _, _, t in iter_messages(TraceDir.open(binary_trace).events(0))} == {None}


@pytest.mark.parametrize("kind", ["binary", "json"])
def test_gzip_rank_files_decode_like_plain_ones(kind, binary_trace, json_trace, tmp_path):
    source = binary_trace if kind == "binary" else json_trace
    for path in sorted(source.iterdir()):
        with open(path, "rb") as plain, gzip.open(tmp_path / (path.name + ".gz"), "wb") as packed:
            shutil.copyfileobj(plain, packed)
    plain, packed = TraceDir.open(source), TraceDir.open(tmp_path)
    assert packed.files[0].endswith(".gz") and packed.format == plain.format
    for rank in range(2):
        assert load_phases(packed.events(rank)) == load_phases(plain.events(rank))


@pytest.mark.parametrize("chunk_bytes", [1, 3, 19, 20, 21, 52, 53, 997, 4096])
def test_binary_chunk_boundaries_do_not_change_the_result(binary_trace, chunk_bytes):
    trace = TraceDir.open(binary_trace)
    whole = load_phases(trace.events(1))
    assert load_phases(trace.events(1, chunk_bytes=chunk_bytes)) == whole


def test_binary_reader_streams_in_bounded_blocks(tmp_path):
    """A large file is decoded chunk by chunk: no block exceeds one chunk's worth of records."""
    path = tmp_path / "trace_0.bin"
    rng = np.random.default_rng(3)
    dests, sizes = rng.integers(0, 4, 100_000), rng.integers(0, 1 << 20, 100_000)
    with BinaryTraceWriter(str(path)) as writer:
        writer.messages(dests[:60_000], sizes[:60_000])
        writer.barrier_begin(), writer.barrier_end()
        writer.messages(dests[60_000:], sizes[60_000:])
    blocks, ends = [], 0
    for event in read_binary(str(path), 0, 4, chunk_bytes=20 * 1000):
        if isinstance(event, MessageBlock):
            blocks.append(event)
        else:
            ends += 1
    assert ends == 1 and max(len(b) for b in blocks) <= 1000
    assert np.array_equal(np.concatenate([b.dests for b in blocks]), dests)
    assert np.array_equal(np.concatenate([b.sizes for b in blocks]), sizes)


def test_skipped_records_and_sends_inside_a_barrier(tmp_path):
    """mpi_send/mpi_recv are skipped (a completed mpi_send's 'to' is a request id); a message sent
    between barrier_begin and barrier_end belongs to the phase that barrier closes."""
    path = tmp_path / "trace_0.bin"
    with BinaryTraceWriter(str(path)) as writer:
        writer.message(1, 10)
        writer.mpi_send(1, 100)
        writer.mpi_send(4024, 100)  # completion record: a request id, not a rank
        writer.barrier_begin(1, 0)
        writer.message(0, 20)  # sent by a handler during the barrier
        writer.mpi_recv(1, 100)
        writer.barrier_end(2, 1)
        writer.message(1, 30)
    events = list(read_binary(str(path), 0, 2))
    assert [type(e) for e in events] == [MessageBlock, MessageBlock, PhaseEnd, MessageBlock]
    assert events[2].where == "byte offset 152"  # 3 x 20 + 52 + 2 x 20
    assert load_phases(iter(events)) == [[(1, 10), (0, 20)], [(1, 30)]]


def test_trace_directory_ignores_other_files(binary_trace, tmp_path):
    for path in binary_trace.iterdir():
        shutil.copy(path, tmp_path / path.name)
    (tmp_path / "heatmap.png").write_bytes(b"not a trace")
    (tmp_path / "trace_notes.txt").write_text("hello")
    assert TraceDir.open(tmp_path).ranks == 2
