"""YGM's binary trace format (``trace_<rank>.bin``): a streaming reader and a buffered writer.

Records sit back to back, little-endian, unpadded: a 4-byte signed variant index,
then that variant's fields (see ``shared/traces/README.md``):

====  ==============  ==============================================================
0     ygm_async       u64 event_id, i32 to, u32 message_size         (an app message)
1     mpi_send        u64 event_id, i32 to, u32 buffer_size          (skipped)
2     mpi_recv        u64 event_id, i32 from, u32 buffer_size        (skipped)
3     barrier_begin   u64 event_id + 5 x u64 counters
4     barrier_end     same as barrier_begin                          (closes a phase)
====  ==============  ==============================================================

The reader decodes runs of ``ygm_async`` records with numpy, a window at a time,
so a multi-GB trace streams through in fixed-size chunks at C speed.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import numpy as np

from ..errors import TraceFormatError
from .events import Event, MessageBlock, PhaseEnd
from .files import open_binary, open_file, read_chunk

YGM_ASYNC, MPI_SEND, MPI_RECV, BARRIER_BEGIN, BARRIER_END = range(5)
RECORD_NAMES = ("ygm_async", "mpi_send", "mpi_recv", "barrier_begin", "barrier_end")

#: ygm_async, mpi_send and mpi_recv share one 20-byte layout.
MESSAGE_RECORD = np.dtype([("variant", "<i4"), ("event_id", "<u8"), ("peer", "<i4"), ("size", "<u4")])
MESSAGE_STRUCT = struct.Struct("<iQiI")
#: barrier_begin / barrier_end: event_id, send_count, recv_count, pending_isend_bytes,
#: send_local_buffer_bytes, send_remote_buffer_bytes.
BARRIER_STRUCT = struct.Struct("<i6Q")
RECORD_SIZES = (MESSAGE_STRUCT.size,) * 3 + (BARRIER_STRUCT.size,) * 2
assert MESSAGE_RECORD.itemsize == MESSAGE_STRUCT.size == 20 and BARRIER_STRUCT.size == 52

CHUNK_BYTES = 1 << 20
#: ygm_async records examined at a time when measuring a run (grows while the run lasts), so a
#: trace alternating records costs O(record) each, not O(chunk).
FIRST_RUN_WINDOW = 256
MAX_RUN_WINDOW = 1 << 16


def read_binary(path: str, rank: int, ranks: int | None = None, *, chunk_bytes: int = CHUNK_BYTES) -> Iterator[Event]:
    """Stream the events of one rank's binary trace.

    *ranks* (the trace's rank count) bounds destinations; every malformed record
    raises :class:`TraceFormatError` naming *path* and the record's byte offset
    (in the decompressed stream for ``.gz`` files).
    """
    pending: int | None = None  # byte offset of a barrier_begin not yet ended
    buffer = b""
    base = 0  # file offset of buffer[0]
    position = 0
    with open_binary(path) as stream:
        while True:
            data = read_chunk(stream, path, chunk_bytes, base + len(buffer))
            if not data:
                break
            buffer = buffer[position:] + data
            base += position
            position = 0
            while True:
                remaining = len(buffer) - position
                if remaining < 4:
                    break
                offset = base + position
                variant = int.from_bytes(buffer[position : position + 4], "little", signed=True)
                if variant == YGM_ASYNC:
                    count = _async_run(buffer, position, remaining // MESSAGE_RECORD.itemsize)
                    if count == 0:
                        break
                    records = np.frombuffer(buffer, MESSAGE_RECORD, count, position)
                    dests = records["peer"].astype(np.int64)
                    _check_destinations(path, offset, dests, ranks)
                    yield MessageBlock(dests, records["size"].astype(np.int64), None)
                    position += count * MESSAGE_RECORD.itemsize
                    continue
                if not 0 <= variant < len(RECORD_SIZES):
                    raise TraceFormatError(
                        f"{path}: byte offset {offset}: unknown record type {variant} "
                        f"(expected 0..4: {', '.join(RECORD_NAMES)})"
                    )
                if remaining < RECORD_SIZES[variant]:
                    break
                if variant == MPI_RECV:
                    source = MESSAGE_STRUCT.unpack_from(buffer, position)[2]
                    if source < 0 or (ranks is not None and source >= ranks):
                        raise TraceFormatError(
                            f"{path}: byte offset {offset}: mpi_recv from rank {source}, outside {_rank_range(ranks)}"
                        )
                # mpi_send is only skipped: its completion record holds a request id, not a rank.
                elif variant == BARRIER_BEGIN:
                    if pending is not None:
                        raise TraceFormatError(
                            f"{path}: byte offset {offset}: barrier_begin inside the barrier begun at "
                            f"byte offset {pending} (no barrier_end between them)"
                        )
                    pending = offset
                elif variant == BARRIER_END:
                    if pending is None:
                        raise TraceFormatError(
                            f"{path}: byte offset {offset}: barrier_end without a barrier_begin before it"
                        )
                    pending = None
                    yield PhaseEnd(f"byte offset {offset}")
                position += RECORD_SIZES[variant]
    if position < len(buffer):
        _raise_truncated(path, base + position, buffer[position:])
    if pending is not None:
        raise TraceFormatError(
            f"{path}: byte offset {pending}: barrier_begin has no barrier_end: "
            f"the trace ends inside a barrier (truncated?)"
        )


def _async_run(buffer: bytes, position: int, available: int) -> int:
    """How many whole ygm_async records start at *position*, consecutively."""
    run = 0
    window = FIRST_RUN_WINDOW
    while run < available:
        take = min(window, available - run)
        start = position + run * MESSAGE_RECORD.itemsize
        variants = np.frombuffer(buffer, MESSAGE_RECORD, take, start)["variant"]
        others = np.flatnonzero(variants)
        if others.size:
            return run + int(others[0])
        run += take
        window = min(window * 2, MAX_RUN_WINDOW)
    return run


def _check_destinations(path: str, offset: int, dests: np.ndarray, ranks: int | None) -> None:
    bad = (dests < 0) | (dests >= ranks) if ranks is not None else dests < 0
    if bad.any():
        index = int(np.argmax(bad))
        raise TraceFormatError(
            f"{path}: byte offset {offset + index * MESSAGE_RECORD.itemsize}: ygm_async to rank "
            f"{int(dests[index])}, outside {_rank_range(ranks)}"
        )


def _rank_range(ranks: int | None) -> str:
    return "the ranks (negative)" if ranks is None else f"0..{ranks - 1} (the trace has {ranks} ranks)"


def _raise_truncated(path: str, offset: int, tail: bytes) -> None:
    if len(tail) < 4:
        raise TraceFormatError(
            f"{path}: byte offset {offset}: truncated record: {len(tail)} byte(s) "
            f"left where a 4-byte record index should start"
        )
    variant = int.from_bytes(tail[:4], "little", signed=True)
    needed = RECORD_SIZES[variant]  # the loop only stops early on a known variant
    raise TraceFormatError(
        f"{path}: byte offset {offset}: truncated {RECORD_NAMES[variant]} record: "
        f"{len(tail)} of its {needed} bytes before the end of the file"
    )


class BinaryTraceWriter:
    """Writes one rank's trace in YGM's binary format through an in-memory buffer.

    Records accumulate in a bytearray and reach the file in blocks of about
    *buffer_bytes*, so recording costs no system call per message.  Event ids
    increase by one per record.  A path ending in ``.gz`` is gzip-compressed.
    """

    def __init__(self, path: str, *, append: bool = False, buffer_bytes: int = CHUNK_BYTES) -> None:
        self.path = str(path)
        self._file = open_file(self.path, "ab" if append else "wb")
        self._buffer = bytearray()
        self._limit = buffer_bytes
        self._next_id = 1

    def message(self, dest: int, size: int) -> None:
        """One ygm_async record: an application message of *size* bytes to rank *dest*."""
        self._buffer += MESSAGE_STRUCT.pack(YGM_ASYNC, self._next_id, dest, size)
        self._next_id += 1
        if len(self._buffer) >= self._limit:
            self.flush()

    def messages(self, dests: np.ndarray, sizes: np.ndarray) -> None:
        """Many ygm_async records at once (vectorized)."""
        count = len(dests)
        records = np.empty(count, MESSAGE_RECORD)
        records["variant"] = YGM_ASYNC
        records["event_id"] = np.arange(self._next_id, self._next_id + count, dtype=np.uint64)
        records["peer"] = dests
        records["size"] = sizes
        self._next_id += count
        self._buffer += records.tobytes()
        if len(self._buffer) >= self._limit:
            self.flush()

    def mpi_send(self, dest: int, size: int) -> None:
        self._buffer += MESSAGE_STRUCT.pack(MPI_SEND, self._next_id, dest, size)
        self._next_id += 1

    def mpi_recv(self, source: int, size: int) -> None:
        self._buffer += MESSAGE_STRUCT.pack(MPI_RECV, self._next_id, source, size)
        self._next_id += 1

    def barrier_begin(self, send_count: int = 0, recv_count: int = 0) -> None:
        self._barrier(BARRIER_BEGIN, send_count, recv_count)

    def barrier_end(self, send_count: int = 0, recv_count: int = 0) -> None:
        self._barrier(BARRIER_END, send_count, recv_count)

    def _barrier(self, variant: int, send_count: int, recv_count: int) -> None:
        # The buffer-occupancy counters YGM also records mean nothing for MailRail: zero.
        self._buffer += BARRIER_STRUCT.pack(variant, self._next_id, send_count, recv_count, 0, 0, 0)
        self._next_id += 1

    def flush(self) -> None:
        if self._buffer:
            self._file.write(self._buffer)
            self._buffer.clear()
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self.flush()
            self._file.close()

    def __enter__(self) -> BinaryTraceWriter:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
