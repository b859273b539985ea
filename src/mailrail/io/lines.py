"""Lines out of a byte range of a file, in blocks, and blocks decoded into Arrow string arrays.

:func:`line_blocks` reads the lines that begin in ``[start, end)`` of a stream (a line belongs to the range
in which it begins: see :mod:`mailrail.io.plan`) as :class:`Block` objects, each whole lines that end in
``\\n``; the last line of a file without one gets it, so every consumer sees whole lines.  It reads about
*chunk_bytes* at a time, and a line that spans many reads is joined once.  :func:`decode_lines` turns a
block into a ``pyarrow`` string array with Arrow's kernels (the line ends ``\\n`` and ``\\r\\n`` cut off,
UTF-8 checked), and :class:`LineBatcher` packs those into batches of at most *batch_bytes* bytes, copying
each into place, so that a rank holds the batch it is building and little else.

Nothing here knows MPI or file systems: the stream is anything with ``readinto`` (and ``seek`` for a range
that does not begin at 0), such as ``pyarrow.BufferReader``.
"""

from __future__ import annotations

import mmap
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Block", "line_blocks", "decode_lines", "LineBatcher", "InvalidUTF8", "EOF", "CHUNK_BYTES", "TAIL_BYTES"]

NEWLINE = 10
CARRIAGE_RETURN = 13
#: A range whose end is the end of the stream (a file read whole).
EOF = 2**63 - 1
#: The bytes read at a time: the temporaries of a read are a few times this, whatever the batch size.
CHUNK_BYTES = 1 << 20
#: Past the end of its range, a reader reads this much at a time to finish its last line.
TAIL_BYTES = 64 << 10
_NEWLINE_BYTE = np.array([NEWLINE], np.uint8)
#: Batch buffers this large or larger are pages of their own (:func:`fresh_pages`).
FRESH_PAGES_FROM = 1 << 20
#: An Arrow string array's offsets are 32-bit: no block of lines may reach this.
MAX_BLOCK_BYTES = 2**31 - 1


@dataclass(frozen=True, slots=True)
class Block:
    """Whole lines: *data* (``uint8``) begins at byte *offset* of the file and each line ends in ``\\n``, at the
    positions *newlines* (``int64``, one a line).  Its lines are those of the range that begin in it."""

    offset: int
    data: np.ndarray
    newlines: np.ndarray

    @property
    def lines(self) -> int:
        return len(self.newlines)

    def line_start(self, line: int) -> int:
        """The position in :attr:`data` where line number *line* (from 0) of the block begins."""
        return 0 if line == 0 else int(self.newlines[line - 1]) + 1


class InvalidUTF8(ValueError):
    """A block's line *line* (from 0) is not UTF-8 (the readers say where in the file)."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line} of the block is not UTF-8: {reason}")
        self.line = line
        self.reason = reason


def _read(stream: Any, head: np.ndarray, size: int) -> np.ndarray:
    """*head* followed by up to *size* bytes read from *stream* (fewer only at its end), as a new array."""
    total = len(head) + size
    # (a large block is pages of its own, returned when it goes; read_lines' reads of CHUNK_BYTES stay in the heap)
    buffer = fresh_pages(total) if total > 2 * CHUNK_BYTES else np.empty(total, np.uint8)
    buffer[: len(head)] = head
    filled = len(head)
    view = buffer.data
    while filled < len(buffer):
        got = stream.readinto(view[filled:])
        if not got:
            break
        filled += got
    return buffer[:filled]


def _newlines(data: np.ndarray) -> np.ndarray:
    """The positions of the newlines in *data* (``int64``), found a piece at a time: the comparison's
    temporary array stays small however large the block."""
    if len(data) <= CHUNK_BYTES:
        return np.flatnonzero(data == NEWLINE)
    pieces = [np.flatnonzero(data[at : at + CHUNK_BYTES] == NEWLINE) + at for at in range(0, len(data), CHUNK_BYTES)]
    return np.concatenate(pieces)


def _checked_size(size: int) -> int:
    if size < 1:
        raise ValueError(f"chunk_bytes={size}: at least 1")
    return size


def line_blocks(
    stream: Any, start: int = 0, end: int = EOF, chunk_bytes: int | Callable[[], int] = CHUNK_BYTES
) -> Iterator[Block]:
    """The lines of *stream* that begin in bytes ``[start, end)``, in blocks of about *chunk_bytes*.

    A range that does not begin at 0 begins at its first line start: after the first ``\\n`` at or after
    byte ``start - 1`` (the stream must seek).  The last line owned is read to its ``\\n`` however far past
    *end* it goes.  The final line of the stream, when it has no ``\\n``, is given one.  *chunk_bytes* may
    be a function, asked before each read (a parser adapts its blocks to what it makes of them).
    """
    next_size = chunk_bytes if callable(chunk_bytes) else lambda: chunk_bytes
    if start >= end:
        return
    empty = np.empty(0, np.uint8)
    head = empty  # bytes from `position` on, read but not yet handed out
    scanned = 0  # how many of them are known to hold no newline
    if start > 0:
        stream.seek(start - 1)
        skipped = start - 1  # stream offset of the next chunk
        while True:
            chunk = _read(stream, empty, _checked_size(next_size()))
            if not len(chunk):
                return  # the range is inside the stream's last line, which began before it
            found = _newlines(chunk)
            if len(found):
                position = skipped + int(found[0]) + 1
                if position >= end:
                    return  # no line begins in the range
                head = chunk[int(found[0]) + 1 :]
                break
            skipped += len(chunk)
    else:
        position = 0  # stream offset where the line being read begins
    pieces: list[np.ndarray] = []  # earlier reads of a line that spans several (none has a newline)
    pieces_bytes = 0
    while True:
        consumed = position + pieces_bytes + len(head)
        left = end - consumed
        wanted = _checked_size(next_size())
        size = wanted if left >= wanted else max(left, min(wanted, TAIL_BYTES))
        scan_from = scanned
        read_from = len(head)
        buffer = _read(stream, head, size)
        if len(buffer) == read_from and scanned == read_from:  # the end: the last line, if any, has no newline
            rest = np.concatenate([*pieces, buffer, _NEWLINE_BYTE])
            if len(rest) > 1:
                yield Block(position, rest, np.array([len(rest) - 1], np.int64))
            return
        newlines = _newlines(buffer[scan_from:])
        if not len(newlines):
            pieces.append(buffer)
            pieces_bytes += len(buffer)
            head, scanned = empty, 0
            continue
        newlines += scan_from
        data = buffer
        if pieces:
            data = np.concatenate([*pieces, buffer])
            newlines += pieces_bytes
            pieces, pieces_bytes = [], 0
        # Lines begin at `position` and after each newline; those that begin before `end` are this range's.
        before_end = int(np.searchsorted(newlines, end - 2 - position, side="right"))
        owned = min(before_end + 1, len(newlines))
        last = int(newlines[owned - 1]) + 1
        yield Block(position, data[:last], newlines[:owned])
        if owned == before_end + 1:
            return  # the next line begins at or after `end`
        head = data[last:]
        scanned = len(head)
        position += last


def decode_lines(block: Block) -> pa.StringArray:
    """The block's lines as a ``pyarrow`` string array, without their ``\\n`` or ``\\r\\n``.

    Raises :class:`InvalidUTF8` naming the first line that is not UTF-8 (found only after the fast check
    of the whole block failed).
    """
    count = block.lines
    if len(block.data) > MAX_BLOCK_BYTES:
        raise ValueError(f"a line of {len(block.data):,} bytes or more: an Arrow string array holds less than 2 GiB")
    offsets = np.empty(count + 1, np.int32)
    offsets[0] = 0
    offsets[1:] = block.newlines + 1
    data = pa.py_buffer(block.data)
    with_ends = pa.Array.from_buffers(pa.binary(), count, [None, pa.py_buffer(offsets), data])
    # A line ends in \r\n when the byte before its \n, within the line, is \r.
    carriage = (block.newlines > offsets[:-1]) & (block.data[block.newlines - 1] == CARRIAGE_RETURN)
    returns = int(np.count_nonzero(carriage))
    if returns == 0:
        lines = pc.binary_slice(with_ends, 0, -1)
    elif returns == count:
        lines = pc.binary_slice(with_ends, 0, -2)
    else:
        lines = pc.if_else(pa.array(carriage), pc.binary_slice(with_ends, 0, -2), pc.binary_slice(with_ends, 0, -1))
    text = lines.view(pa.string())
    try:
        text.validate(full=True)
    except pa.ArrowInvalid:
        for line, value in enumerate(lines.to_pylist()):
            try:
                value.decode("utf-8")
            except UnicodeDecodeError as error:
                raise InvalidUTF8(line, f"{error.reason} at byte {error.start} of the line") from None
        raise  # (Arrow refused what Python accepts: not expected)
    return text


def fresh_pages(nbytes: int) -> np.ndarray:
    """*nbytes* (``uint8``) of fresh anonymous memory for a batch: its untouched pages cost nothing, and it goes
    back to the system when the last array over it is collected.  (``malloc`` keeps freed blocks of a batch's
    size in its heap and hands them out again in pieces: a rank's memory grew to several batches.)"""
    if nbytes < FRESH_PAGES_FROM:
        return np.empty(nbytes, np.uint8)
    return np.frombuffer(mmap.mmap(-1, nbytes), np.uint8)


class LineBatcher:
    """String arrays packed into batches of at most *batch_bytes* (data plus 4 bytes of offset a line).

    :meth:`add` copies lines into the batch being built and returns the batches it filled; :meth:`finish`
    returns the last one.  A line larger than *batch_bytes* is a batch of its own.  The batch being built
    is allocated at full size but only its used part is ever written, so it costs what it holds; once the
    program has dropped a batch (no array over its buffers is left), its buffers build a later one, so a
    rank that reads batch after batch touches two batches' memory, not one more each time.
    """

    #: Emitted batches' buffers watched for reuse: the one the program holds, and the one before.
    SPARES = 2

    def __init__(self, batch_bytes: int) -> None:
        if batch_bytes < 8:
            raise ValueError(f"batch_bytes={batch_bytes}: at least 8")
        self.batch_bytes = batch_bytes
        self._data: np.ndarray | None = None
        self._offsets: np.ndarray | None = None
        self._lines = 0
        self._used = 0  # bytes of data written
        # (data, offsets, and weak references to the views a batch exported: dead, the buffers are free)
        self._spares: list[tuple[np.ndarray, np.ndarray, weakref.ref[np.ndarray], weakref.ref[np.ndarray]]] = []

    def _buffers(self, data_bytes: int, lines: int) -> tuple[np.ndarray, np.ndarray]:
        for index, (data, offsets, data_view, offsets_view) in enumerate(self._spares):
            free = data_view() is None and offsets_view() is None
            if free and len(data) >= data_bytes and len(offsets) > lines:
                del self._spares[index]
                return data, offsets
        return fresh_pages(data_bytes), fresh_pages(4 * (lines + 1)).view(np.int32)

    def _cost(self) -> int:
        return self._used + 4 * self._lines

    def add(self, lines: pa.StringArray) -> Iterator[pa.StringArray]:
        """Copy *lines* in, handing out each batch as it fills up (often none): the next is begun only once the
        program has taken this one, and dropped the one before (whose buffers it then reuses)."""
        count = len(lines)
        if not count:
            return
        _, offsets_buffer, data_buffer = lines.buffers()
        offsets = np.frombuffer(offsets_buffer, np.int32, count + 1, lines.offset * 4)
        data = np.frombuffer(data_buffer, np.uint8) if data_buffer is not None else np.empty(0, np.uint8)
        first = 0
        while first < count:
            # The cost of lines[first:k] for each k: their bytes and 4 bytes each.
            cost = offsets[first + 1 :] - offsets[first] + 4 * np.arange(1, count - first + 1)
            fits = int(np.searchsorted(cost, self.batch_bytes - self._cost(), side="right"))
            if fits == 0:
                if self._lines:
                    yield self._emit()
                    continue
                fits = 1  # a line larger than a batch: a batch of its own
            last = first + fits
            self._copy(offsets, data, first, last)
            first = last
            if self._cost() >= self.batch_bytes - 4:
                yield self._emit()

    def _copy(self, offsets: np.ndarray, data: np.ndarray, first: int, last: int) -> None:
        begin, stop = int(offsets[first]), int(offsets[last])
        if self._data is None:
            self._data, self._offsets = self._buffers(
                max(self.batch_bytes, stop - begin), max(self.batch_bytes // 4, last - first)
            )
            self._offsets[0] = 0
        assert self._offsets is not None
        self._data[self._used : self._used + stop - begin] = data[begin:stop]
        self._offsets[self._lines + 1 : self._lines + 1 + last - first] = offsets[first + 1 : last + 1] + (
            self._used - begin
        )
        self._used += stop - begin
        self._lines += last - first

    def _emit(self) -> pa.StringArray:
        assert self._data is not None and self._offsets is not None
        offsets, data = self._offsets[: self._lines + 1], self._data[: self._used]
        batch = pa.Array.from_buffers(pa.string(), self._lines, [None, pa.py_buffer(offsets), pa.py_buffer(data)])
        self._spares.append((self._data, self._offsets, weakref.ref(data), weakref.ref(offsets)))
        del self._spares[: -self.SPARES]
        self._data = self._offsets = None
        self._lines = self._used = 0
        return batch

    def finish(self) -> pa.StringArray | None:
        """The batch being built, if it holds any line."""
        return self._emit() if self._lines else None
