"""Corrupt or mismatched traces raise TraceFormatError naming the file and the byte offset or line."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import struct

import pytest

from mailrail.errors import MailRailError, TraceFormatError
from mailrail.trace import TraceDir, load_phases, read_binary, read_jsonl
from mailrail.trace.binary import BinaryTraceWriter


def write_binary(path, build) -> str:
    with BinaryTraceWriter(str(path)) as writer:
        build(writer)
    return str(path)


def error_of(events) -> str:
    with pytest.raises(TraceFormatError) as info:
        load_phases(events)
    assert isinstance(info.value, MailRailError)
    return str(info.value)


def test_truncated_final_record(binary_trace, tmp_path):
    data = (binary_trace / "trace_0.bin").read_bytes()
    path = tmp_path / "trace_0.bin"
    path.write_bytes(data[:-7])  # the last record is a 52-byte barrier_end
    message = error_of(read_binary(str(path), 0, 2))
    assert message == (
        f"{path}: byte offset {len(data) - 52}: truncated barrier_end record: 45 of its 52 bytes "
        f"before the end of the file"
    )


def test_truncated_record_index(tmp_path):
    path = write_binary(tmp_path / "trace_0.bin", lambda w: w.message(1, 8))
    with open(path, "ab") as out:
        out.write(b"\x00\x00")
    assert error_of(read_binary(path, 0, 2)) == (
        f"{path}: byte offset 20: truncated record: 2 byte(s) left where a 4-byte record index should start"
    )


def test_truncated_message_record(tmp_path):
    path = tmp_path / "trace_0.bin"
    path.write_bytes(struct.pack("<iQiI", 0, 1, 1, 8) + struct.pack("<iQ", 0, 2))
    assert error_of(read_binary(str(path), 0, 2)) == (
        f"{path}: byte offset 20: truncated ygm_async record: 12 of its 20 bytes before the end of the file"
    )


def test_unknown_variant_index(tmp_path):
    path = tmp_path / "trace_0.bin"
    path.write_bytes(struct.pack("<iQiI", 0, 1, 1, 8) + struct.pack("<iQiI", 7, 2, 1, 8))
    assert error_of(read_binary(str(path), 0, 2)) == (
        f"{path}: byte offset 20: unknown record type 7 (expected 0..4: ygm_async, mpi_send, mpi_recv, "
        f"barrier_begin, barrier_end)"
    )


def test_destination_outside_the_rank_count(tmp_path):
    path = write_binary(tmp_path / "trace_0.bin", lambda w: (w.message(1, 8), w.message(0, 8), w.message(2, 8)))
    assert error_of(read_binary(path, 0, 2)) == (
        f"{path}: byte offset 40: ygm_async to rank 2, outside 0..1 (the trace has 2 ranks)"
    )
    negative = write_binary(tmp_path / "trace_1.bin", lambda w: w.message(-3, 8))
    assert "ygm_async to rank -3" in error_of(read_binary(negative, 1, None))


def test_mpi_recv_from_outside_the_rank_count(tmp_path):
    path = write_binary(tmp_path / "trace_0.bin", lambda w: w.mpi_recv(5, 100))
    assert error_of(read_binary(path, 0, 2)) == (
        f"{path}: byte offset 0: mpi_recv from rank 5, outside 0..1 (the trace has 2 ranks)"
    )


@pytest.mark.parametrize(
    "build, expected",
    [
        (lambda w: w.barrier_end(), "byte offset 0: barrier_end without a barrier_begin before it"),
        (
            lambda w: (w.barrier_begin(), w.barrier_begin()),
            "byte offset 52: barrier_begin inside the barrier begun at byte offset 0 (no barrier_end between them)",
        ),
        (
            lambda w: (w.message(0, 1), w.barrier_begin()),
            "byte offset 20: barrier_begin has no barrier_end: the trace ends inside a barrier (truncated?)",
        ),
    ],
)
def test_unbalanced_barrier_records(tmp_path, build, expected):
    path = write_binary(tmp_path / "trace_0.bin", build)
    assert error_of(read_binary(path, 0, 2)) == f"{path}: {expected}"


def test_corrupt_gzip_stream(binary_trace, tmp_path):
    packed = gzip.compress((binary_trace / "trace_0.bin").read_bytes())
    path = tmp_path / "trace_0.bin.gz"
    path.write_bytes(packed[: len(packed) // 2])
    assert re.fullmatch(
        rf"{re.escape(str(path))}: corrupt gzip stream after \d+ decompressed bytes: .+",
        error_of(read_binary(str(path), 0, 2)),
    )
    path.write_bytes(b"this is not gzip")
    assert "corrupt gzip stream after 0 decompressed bytes" in error_of(read_binary(str(path), 0, 2))


# -- JSON lines -----------------------------------------------------------


def json_line(**fields) -> str:
    record = {
        "name": "async",
        "cat": "ygm",
        "pid": "0",
        "tid": "send",
        "ts": "100",
        "dur": "1",
        "ph": "X",
        "args": {"to": "1", "from": "0", "message_size": "15"},
    }
    record.update(fields)
    return json.dumps(record) + ",\n"


def json_file(tmp_path, *lines: str) -> str:
    path = tmp_path / "trace_0.txt"
    path.write_text("".join(lines))
    return str(path)


def test_bad_json_line_names_the_line(tmp_path):
    path = json_file(tmp_path, json_line(), '{"name": "async", "tid": "send",\n')
    message = error_of(read_jsonl(path, 0, 2))
    assert message.startswith(f"{path}: line 2: not a JSON object: ")


@pytest.mark.parametrize(
    "line, expected",
    [
        ('["async"],\n', "expected a JSON object, found list"),
        (json_line(name="ping"), "unknown record name 'ping'; expected async, barrier, mpi_send or mpi_receive"),
        (json_line(tid="forward"), "async record with tid 'forward'; expected 'send' or 'receive'"),
        (
            json_line(args={"to": "2", "message_size": "15"}),
            "async send to rank 2, outside 0..1 (the trace has 2 ranks)",
        ),
        (json_line(args={"to": "1"}), "async record has no args.message_size"),
        (json_line(args={"to": "one", "message_size": "15"}), "args.to is not a 64-bit integer: 'one'"),
        (json_line(args={"to": "1", "message_size": "-4"}), "negative args.message_size -4"),
        (json_line(ts="99999999999999999999999"), "ts is not a 64-bit integer: '99999999999999999999999'"),
        (json_line(pid="1"), "record of rank 1 (pid) in the file of rank 0"),
    ],
)
def test_invalid_json_records(tmp_path, line, expected):
    path = json_file(tmp_path, json_line(), line)
    assert error_of(read_jsonl(path, 0, 2)) == f"{path}: line 2: {expected}"


# -- directories and jobs -------------------------------------------------


def copy_trace(source, target, names=None):
    target.mkdir(exist_ok=True)
    for path in source.iterdir():
        if names is None or path.name in names:
            shutil.copy(path, target / path.name)
    return target


def test_missing_rank_file(binary_trace, tmp_path):
    trace = copy_trace(binary_trace, tmp_path / "t")
    shutil.copy(trace / "trace_1.bin", trace / "trace_3.bin")
    with pytest.raises(TraceFormatError) as info:
        TraceDir.open(trace)
    assert str(info.value) == (
        f"{trace}: missing rank file(s) trace_2: the files go up to trace_3, so the trace "
        f"has 4 ranks and needs one file for each"
    )


def test_no_trace_files_and_not_a_directory(tmp_path):
    with pytest.raises(TraceFormatError, match="no trace files"):
        TraceDir.open(tmp_path)
    with pytest.raises(TraceFormatError, match="not a trace directory"):
        TraceDir.open(tmp_path / "absent")


def test_mixed_formats_and_duplicate_ranks(binary_trace, json_trace, tmp_path):
    mixed = copy_trace(binary_trace, tmp_path / "mixed", {"trace_0.bin"})
    copy_trace(json_trace, mixed, {"trace_1.txt"})
    with pytest.raises(TraceFormatError, match="mixes binary .* and JSON-lines"):
        TraceDir.open(mixed)
    duplicate = copy_trace(binary_trace, tmp_path / "dup")
    (duplicate / "trace_1.bin.gz").write_bytes(gzip.compress((duplicate / "trace_1.bin").read_bytes()))
    with pytest.raises(TraceFormatError) as info:
        TraceDir.open(duplicate)
    assert str(info.value) == f"{duplicate}: rank 1 has several files (trace_1.bin, trace_1.bin.gz); keep one"


def test_wrong_rank_count_for_the_job(binary_trace):
    trace = TraceDir.open(binary_trace)
    trace.require_ranks(2)
    with pytest.raises(TraceFormatError) as info:
        trace.require_ranks(3)
    assert str(info.value) == (
        f"{binary_trace}: the trace has 2 rank(s) (trace_0 .. trace_1) but the job has 3: "
        f"replay it on 2 (mailrail run -n 2 replay {binary_trace})"
    )


def test_destination_beyond_the_directory_rank_count(binary_trace, tmp_path):
    """A rank file alone may be fine; in a directory of fewer ranks its destinations are not."""
    trace = copy_trace(binary_trace, tmp_path / "t", {"trace_0.bin"})
    with pytest.raises(TraceFormatError, match=r"trace_0.bin: byte offset \d+: ygm_async to rank 1, outside 0..0"):
        load_phases(TraceDir.open(trace).events(0))
