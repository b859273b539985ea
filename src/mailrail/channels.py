"""Many record streams and active messages on one rail: the multiplexer every container shares.

A rail moves datagrams; an application is written in records of several kinds (histogram keys, edges,
visits, replies) and calls.  :class:`Channels` (one per rail, ``rail.channels``) packs them all into
the rail's datagrams, as every YGM container shares one communicator: one receive pool, one credit
budget, so a second record kind neither doubles receive memory nor breaks the flow-control bound.

**Wire format.**  A channel datagram is a run of *segments*, each an 8-byte header and its payload,
every header at an 8-byte offset (so records of up to 8-byte alignment view in place)::

    header: channel number (uint16) | magic 0xA7 (uint8) | kind (uint8) | payload bytes (uint32)

Kind 0 is a run of fixed-size records of one channel (consecutive sends of one channel to one
destination extend the same segment); kind 1 is one call (:meth:`Channels.call`): a uint32 count of
out-of-band buffers and their uint64 lengths, the function's ``module:qualname`` (uint16 length, then
UTF-8), then with no buffers the pickled arguments; with some, the pickle's uint64 length, the pickle,
and each buffer at an 8-byte offset.  Kind 3 is a batch of calls (:meth:`Channels.call`): one pickled list,
function, arguments, function, arguments..., where asks and answers in a row come as one group: a marker and a
list of their numbers and functions and arguments, or numbers and values (:func:`_ask`, :func:`_answer`).  Kind 4
is a piece of a segment larger than a datagram (a large call): its channel number holds the kind of the whole
segment (bits 0-6), 1 on the last piece (bit 7) and the sender's epoch (bits 8-15); the pieces from one rank
arrive in order and are joined.  In kinds 1 and 3 the
channel number is the sender's epoch: the collectives its program had left, modulo 256 (a rank still in one
holds calls from ranks past it: :meth:`Channels.call`).  Kind 2 is a run of *n* records of a channel whose
records have *m* variable-size parts (``open(..., blobs=m)``; ``blobs=True`` is one: a string key, or a string
value beside a fixed-size key; two: a string key and its string value, or the two strings of a union's walk)
beside their fixed-size part of the channel's dtype (which may be empty)::

    n (uint32) | m (uint32) | n fixed-size parts | zeros to an 8-byte offset
      | part 1's n + 1 offsets (int32, from 0) | ... | part m's n + 1 offsets
      | part 1's bytes, back to back | ... | part m's bytes, back to back

Part *j*'s offsets count from the start of its own bytes, which follow part *j - 1*'s (whose last offset says
how many they are).  So the fixed parts view as an array of the dtype and each variable-size part's offsets and
bytes wrap, with no copy, as an Arrow binary array (:class:`Blobs`): a record of two strings is two columns,
not one string with a length prefix that the receiver would have to cut apart (a copy of every byte) before
its tables could take them.  ``m`` is checked against the channel's on arrival.  Each send of such records
writes segments of its own (they do not extend an earlier one).  Functions travel by name and are resolved
once per rank.
Segments of different channels share a datagram: one staging row per destination, not one per
channel and destination.  The magic byte catches a datagram sent with ``rail.send`` on a rail whose
arrivals go through its channels.

**Batches, not loops.**  :meth:`Channel.send` takes arrays: one stable radix sort by destination,
then one copy per destination slice; full datagrams are packed straight into send buffers.

**Re-entrancy.**  Handlers run while this rank sends (backpressure and the polls after each datagram
keep arrivals moving, so peers' credits come back) and may send more: such nested sends wait in a
FIFO and leave as soon as the running send is done, so a staging row is never written from two
frames.  Records and calls a rank sends to itself never touch MPI: they are handed over at once.

**Termination.**  ``rail.barrier()`` on a rail with channels flushes every staged datagram, then
dispatches arrivals until global quiescence; whatever the handlers send meanwhile leaves at once
(nothing stays staged), so the barrier's message counts see it: visits sent from inside visits are
complete when it returns.
"""

from __future__ import annotations

import bisect
import functools
import importlib
import operator
import pickle
import reprlib
import struct
import time
import traceback
import types
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .collectives import CollectiveCalls, collective
from .errors import MailRailError, MessageSizeError, ProtocolError, RemoteError
from .futures import ANSWERED, WAITING, Future, wait
from .interfaces import DatagramRail
from .protocol import checked_rank

__all__ = [
    "Rail",
    "Blobs",
    "Channel",
    "Channels",
    "Future",
    "HEADER_SIZE",
    "ALIGNMENT",
    "check_by_reference",
    "group_by_rank",
    "in_turn",
    "name_of",
    "spans_in_turn",
    "wait",
]

#: Segment header: channel number, magic, kind, payload bytes.
HEADER = struct.Struct("<HBBI")
HEADER_SIZE = HEADER.size
#: Segment headers start at multiples of this many bytes.
ALIGNMENT = 8
MAGIC = 0xA7
KIND_RECORDS = 0
KIND_CALL = 1
KIND_BLOBS = 2
KIND_CALLS = 3
KIND_PIECE = 4
#: A kind 2 segment's count of records and of variable-size parts per record.
_BLOB_COUNT = struct.Struct("<II")
#: The most variable-size parts a record of a channel has.
MAX_BLOB_PARTS = 8
#: A call's buffer table: number of out-of-band buffers, then each one's length.
_COUNT = struct.Struct("<I")
_LENGTH = struct.Struct("<Q")
_NO_BUFFERS = _COUNT.pack(0)
_NAME_LENGTH = struct.Struct("<H")
#: The argument types a call may wait for its destination's batch with (see :meth:`Channels.call`): their pickling
#: cannot fail (numpy's scalars included), and strings and bytes up to :data:`BATCHED_TEXT_BYTES` long keep a call
#: far below a datagram.
_BATCHED_ARGUMENT_TYPES = frozenset(
    {
        int,
        float,
        bool,
        type(None),
        str,
        bytes,
        np.int64,
        np.int32,
        np.uint64,
        np.uint32,
        np.float64,
        np.float32,
        np.bool_,
    }
)
BATCHED_TEXT_BYTES = 256
#: Calls a destination's batch starts with room for, before the pickled size of earlier batches is known.
_FIRST_BATCH_CALLS = 64
#: Most arrivals dispatched after each datagram sent: receive aggressively, so peers' credits come back.
POLLS_PER_SEND = 4
#: Channel numbers are 16-bit.
MAX_CHANNELS = 1 << 16


def _compiled_grouping() -> Any:
    try:
        return importlib.import_module("mailrail._grouping")
    except ImportError:  # built without a compiler: the numpy passes of group_by_rank
        return None


#: The counting sort of :func:`group_by_rank`, compiled (``_grouping.pyx``) where the package was built with a
#: compiler, else None (its numpy passes: a stable radix sort and a gather).
GROUPING = _compiled_grouping()


def _aligned(offset: int) -> int:
    return (offset + ALIGNMENT - 1) & ~(ALIGNMENT - 1)


class Blobs:
    """Variable-size byte strings, packed as Arrow packs them: string ``i`` is ``data[offsets[i]:offsets[i + 1]]``.

    *offsets*: ``n + 1`` ascending integers (``int32`` or ``int64``) into *data* (``uint8``); they need not start
    at 0.  What a channel of records with a variable-size part sends and hands its handler.
    """

    __slots__ = ("offsets", "data")

    def __init__(self, offsets: np.ndarray, data: np.ndarray) -> None:
        self.offsets = offsets
        self.data = data

    @property
    def count(self) -> int:
        """How many strings."""
        return len(self.offsets) - 1

    def __len__(self) -> int:
        return len(self.offsets) - 1

    @property
    def nbytes(self) -> int:
        """Their bytes in all."""
        return int(self.offsets[-1]) - int(self.offsets[0]) if len(self.offsets) else 0

    def lengths(self) -> np.ndarray:
        """Each string's length in bytes."""
        return np.diff(self.offsets)

    def arrow(self, kind: Any = None) -> Any:
        """A pyarrow array over the same memory (no copy where the offsets are ``int32``, or ``int64`` for a
        large type): *kind* ``pa.binary()`` (the default), ``pa.string()`` or their ``large_`` variants."""
        import pyarrow as pa  # imported on first use: a rail without such records never loads it

        if kind is None:
            kind = pa.binary() if self.offsets.dtype == np.int32 else pa.large_binary()
        large = kind in (pa.large_binary(), pa.large_string())
        if not large and len(self.offsets) and int(self.offsets[-1]) >= 1 << 31:
            raise OverflowError(f"{self!r} reaches past 2**31 bytes: ask for a large type")
        offsets = self.offsets.astype(np.int64 if large else np.int32, copy=False)
        return pa.Array.from_buffers(kind, self.count, [None, pa.py_buffer(offsets), pa.py_buffer(self.data)])

    @staticmethod
    def of(array: Any) -> Blobs:
        """The offsets and bytes of a pyarrow binary or string array (either width, sliced or not), no copy."""
        width = np.int64 if array.type in _large_types() else np.int32
        buffers = array.buffers()
        if len(buffers) < 3 or buffers[1] is None:  # an empty array may have no buffers
            return Blobs(np.zeros(1, dtype=width), np.zeros(0, np.uint8))
        offsets = np.frombuffer(buffers[1], dtype=width)[array.offset : array.offset + len(array) + 1]
        data = np.zeros(0, np.uint8) if buffers[2] is None else np.frombuffer(buffers[2], dtype=np.uint8)
        return Blobs(offsets, data)

    def take(self, order: np.ndarray) -> Blobs:
        """The strings at *order* (positions), packed afresh (pyarrow's take: a copy of each string)."""
        return Blobs.of(self.arrow().take(order))

    def copy(self) -> Blobs:
        """The same strings in memory of their own, offsets from 0."""
        first, last = int(self.offsets[0]), int(self.offsets[-1])
        return Blobs(self.offsets - first, self.data[first:last].copy())

    def __repr__(self) -> str:
        return f"<Blobs: {self.count} strings, {self.nbytes} bytes>"


def _large_types() -> tuple[Any, ...]:
    import pyarrow as pa

    return (pa.large_binary(), pa.large_string())


def in_turn(dests: list[int], rank: int) -> list[int]:
    """The ascending ranks *dests* in the order a rank sends to them: from the next rank after *rank* on, *rank*
    itself last.  Ranks do not all start on rank 0, and local work runs after the remote ranks have theirs."""
    first = bisect.bisect_right(dests, rank)
    return dests[first:] + dests[:first]


def spans_in_turn(counts: np.ndarray, rank: int) -> Iterator[tuple[int, int, int]]:
    """Each rank that has records in a grouping by rank (*counts*: each rank's records, as :func:`group_by_rank`
    gives them), in the order *rank* sends to them (:func:`in_turn`): the rank, and where its records start and end."""
    ends = np.cumsum(counts)
    for dest in in_turn(np.flatnonzero(counts).tolist(), rank):
        end = int(ends[dest])
        yield dest, end - int(counts[dest]), end


def group_by_rank(dests: np.ndarray, records: np.ndarray, ranks: int) -> tuple[np.ndarray, np.ndarray]:
    """*records* grouped by their destination in *dests* (ranks ``0 .. ranks - 1``, already checked), ranks in
    ascending order and records in their own order within a rank, and each rank's count.  All to one rank: *records*
    itself, no copy."""
    if GROUPING is not None:
        counts = np.empty(ranks, dtype=np.int64)
        records = np.ascontiguousarray(records)
        grouped = np.empty_like(records)
        data, out = records.view(np.uint8).reshape(-1), grouped.view(np.uint8).reshape(-1)
        if GROUPING.group_by_rank(dests.astype(np.int64, copy=False), data, records.itemsize, counts, out) == 1:
            return records, counts
        return grouped, counts
    counts = np.bincount(dests.astype(np.intp, copy=False), minlength=ranks)
    if np.count_nonzero(counts) == 1:
        return records, counts
    order = np.argsort(dests.astype(rank_sort_dtype(ranks), copy=False), kind="stable")  # radix sort: O(n)
    return records[order], counts


def rank_sort_dtype(ranks: int) -> type:
    """The narrowest unsigned type for rank numbers: numpy's stable sort is a radix sort for it."""
    return np.uint16 if ranks <= 1 << 16 else np.uint32


@runtime_checkable
class Rail(DatagramRail, Protocol):
    """A rail with channels: :class:`~mailrail.interfaces.DatagramRail`, and the :class:`Channels` its
    containers, Coalescers and calls share.  What the containers take; :class:`~mailrail.rail.MailRail` and
    :mod:`mailrail.testing`'s rails are ones."""

    @property
    def channels(self) -> Channels:
        """The rail's multiplexer (made on first use)."""
        ...

    def call(self, dest: int, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on rank *dest*, asynchronously (an active message)."""
        ...

    def ask(self, dest: int, fn: Callable[..., object], *args: Any) -> Future:
        """Run ``fn(*args)`` on rank *dest*; a :class:`Future` of its answer."""
        ...


class Channel:
    """A stream of fixed-size records of one numpy *dtype* on a rail's :class:`Channels`.

    Made with :meth:`Channels.open` (collective).  *handler* gets ``(source, records)`` for each segment
    that arrives: *records* is a read-only array of *dtype* viewing the receive buffer (copy what must
    outlive the call); it may send more records and calls.
    """

    def __init__(
        self,
        channels: Channels,
        number: int,
        dtype: np.dtype,
        handler: Callable[..., object],
        name: str,
        blobs: bool | int = False,
    ) -> None:
        self.channels = channels
        self.number = number
        self.dtype = dtype
        self.handler = handler
        self.name = name
        self.record_size = dtype.itemsize
        #: How many variable-size parts each record has (0: fixed-size records; else segments of kind 2).
        self.parts = int(blobs)
        #: Whether records have variable-size parts (segments of kind 2; see the module).
        self.blobs = self.parts > 0
        #: Records in a datagram of this channel alone (fixed-size records).
        self.per_datagram = (channels.datagram_size - HEADER_SIZE) // max(1, self.record_size)
        #: The most bytes a record's variable-size parts can have together: one record alone in a datagram, beside
        #: its fixed-size part and two offsets per part.
        self.largest_blob = (
            channels.datagram_size
            - HEADER_SIZE
            - _BLOB_COUNT.size
            - _aligned(self.record_size)
            - 8 * max(1, self.parts)
        )
        self.records_sent = 0
        self.records_received = 0

    def send(
        self,
        dests: np.ndarray | list[int],
        records: np.ndarray | None,
        blobs: Blobs | tuple[Blobs, ...] | None = None,
        *,
        copy: bool = True,
    ) -> None:
        """Queue ``records[i]`` for rank ``dests[i]``; full datagrams leave at once, the rest when flushed.

        *dests*: integer ranks (any integer dtype) in ``0 .. size - 1``; *records*: an array of the
        channel's dtype, as long as *dests*.  Both are copied before the call returns; with ``copy=False``
        the caller hands them over instead (a fresh array it will not change again: a handler's replies
        then skip a copy when they must wait for the running dispatch to end).  Bad input raises
        before anything is sent: ``TypeError`` for a wrong dtype, ``ValueError`` for mismatched lengths,
        :class:`~mailrail.errors.InvalidDestinationError` for a rank out of range.

        On a channel of records with a variable-size part, *blobs* holds each record's (as many as *dests*;
        *records* may be None for an empty dtype); with several parts, a tuple of one :class:`Blobs` per part.
        A record whose parts have more than :attr:`largest_blob` bytes together raises
        :class:`~mailrail.errors.MessageSizeError` naming both sizes, before anything is sent.
        """
        parts: tuple[Blobs, ...] | None = None
        if self.blobs:
            if blobs is None:
                raise TypeError(f"{self.name}: records with a variable-size part: give their blobs")
            parts = (blobs,) if isinstance(blobs, Blobs) else tuple(blobs)
            if len(parts) != self.parts:
                raise TypeError(f"{self.name}: records with {self.parts} variable-size parts, given {len(parts)}")
            if records is None and self.record_size == 0:
                records = np.empty(parts[0].count, dtype=self.dtype)
        elif blobs is not None:
            raise TypeError(f"{self.name}: a channel of fixed-size records takes no blobs")
        records = np.asarray(records)
        if records.dtype != self.dtype:
            raise TypeError(f"{self.name}: records have dtype {records.dtype}, this channel carries {self.dtype}")
        dests = np.asarray(dests)
        if records.ndim != 1 or dests.shape != records.shape:
            raise ValueError(
                f"{self.name}: {dests.shape} destinations for records of shape {records.shape} (one rank per record)"
            )
        if parts is not None:
            for part in parts:
                if part.count != len(records):
                    raise ValueError(f"{self.name}: {part.count} variable-size parts for {len(records)} records")
            if len(records):
                self.check_blob_sizes(sum((part.lengths() for part in parts[1:]), parts[0].lengths()))
        if len(dests) == 0:
            return
        if dests.dtype.kind not in "iu":
            raise TypeError(f"{self.name}: dests have dtype {dests.dtype}: destination ranks must be integers")
        low, high = int(dests.min()), int(dests.max())
        if low < 0 or high >= self.channels.size:
            checked_rank(low if low < 0 else high, self.channels.size)
        self.channels._submit(self, dests, records, copy, parts)

    def check_blob_sizes(self, lengths: np.ndarray) -> None:
        """Refuse records whose variable-size parts have these *lengths* (each record's parts together) if one is
        larger than a datagram takes (:class:`~mailrail.errors.MessageSizeError`, naming both sizes)."""
        longest = int(lengths.max()) if len(lengths) else 0
        if longest > self.largest_blob:
            what, together = ("string", "") if self.parts == 1 else (f"record of {self.parts} strings", " together")
            raise MessageSizeError(
                f"{self.name}: a {longest}-byte {what} does not fit in a {self.channels.datagram_size}-byte "
                f"datagram, which takes strings of up to {self.largest_blob} bytes{together} beside this "
                f"channel's {self.record_size}-byte records and the segment's headers (raise MAILRAIL_DATAGRAM_SIZE)"
            )

    def send_to(self, dest: int, records: np.ndarray, *, copy: bool = True) -> None:
        """Queue every record of *records* for the one rank *dest* (*copy* as for :meth:`send`)."""
        records = np.asarray(records)
        self.send(np.full(len(records), dest, dtype=np.int64), records, copy=copy)

    def fill_to(self, dest: int, count: int, fill: Callable[[np.ndarray, int, int], object]) -> None:
        """Queue *count* records for the one rank *dest*, written by ``fill(view, start, stop)``: *view* is a
        writable array of this channel's dtype for records ``start..stop-1``, usually inside a send buffer, so
        large records are written once, where they leave from (a gather's replies).  *fill* is called before
        this returns, in order, over ``0..count-1``; what it writes is sent as :meth:`send_to` would send it."""
        if self.blobs:
            raise TypeError(f"{self.name}: records with a variable-size part are sent with send()")
        self.channels._fill_to(self, operator.index(dest), operator.index(count), fill)

    def flush(self) -> None:
        """Send every partial datagram of the rail's channels (staging rows are shared by all of them)."""
        self.channels.flush()

    def __repr__(self) -> str:
        return f"<Channel {self.number} {self.name!r} of {self.dtype}>"


class Channels:
    """The multiplexer of one rail: its channels, its calls, its dispatch of arrivals (see the module).

    Made by the rail on first use of ``rail.channels`` (not collective: a rank may make calls alone).
    *comm* carries the containers' collectives (its ``allgather(value)`` and ``allreduce(value)``, a sum): the
    rail's own control communicator, never the application's.  Each public collective here is one collective
    call of the rail (:func:`~mailrail.collectives.collective`), or part of the container's call that runs it.
    Channels are numbered in the order they are opened, which must be the same on every rank (as containers are
    constructed collectively); :meth:`open` checks it.
    """

    def __init__(self, rail: DatagramRail, comm: Any) -> None:
        self.rail = rail
        self.rank: int = rail.rank
        self.size: int = rail.size
        self.datagram_size: int = rail.datagram_size
        self._comm = comm
        self._channels: list[Channel] = []
        size = self.size
        self._rows: list[np.ndarray | None] = [None] * size  # staging row per destination, made on first use
        self._row_views: list[memoryview | None] = [None] * size  # the same rows, for calls' small copies
        self._references: dict[Callable[..., object], bytes] = {}  # functions checked, and their wire names
        self._functions: dict[bytes, Callable[..., object]] = {}  # wire names resolved on this rank
        self._fill = [0] * size  # bytes staged per destination
        self._tail_channel = [-1] * size  # channel of the row's last segment if records, which its next records extend
        self._tail_at = [0] * size  # offset of that segment's header
        self._staged_dests: set[int] = set()
        self._count = [0] * size  # records and calls staged per destination
        self._staged_records = 0  # their sum, for finalize()'s report
        self._rank_dtype = rank_sort_dtype(size)
        self._busy = False  # a send or dispatch is running: nested sends wait in _nested
        self._nested: deque[tuple[Callable[[], None], int]] = deque()  # (work, records or calls in it)
        self._nested_items = 0
        # Send buffers filled by a handler's fill_to, waiting for the dispatch to end; at most half the pool,
        # so that a send waiting for a free buffer meanwhile still gets one as earlier sends complete.
        self._held_buffers = 0
        self._hold_limit = rail.send_pool_slots // 2
        self._flush_each_send = False  # inside barrier(): nothing may stay staged
        self._flush_requested = False
        self._handler_depth = 0
        self._caches: list[tuple[Callable[[], None], Callable[[], int]]] = []  # senders' caches, see add_cache
        self._closed = False
        self.datagrams_sent = 0
        self._calls_staged = 0
        self.calls_received = 0
        self._asks: dict[int, Future] = {}  # this rank's asks not answered yet, by number
        self._next_ask = 0
        # Calls waiting for their destination's batch: function, arguments, function, ... per destination.
        self._batches: list[list[Any]] = [[] for _ in range(size)]
        self._batched_dests: set[int] = set()
        self._grouped_dests: set[int] = set()  # destinations whose batch holds a group of asks or answers
        # Calls from ranks that had left a collective this rank was still in: (source, kind, number, payload), run
        # once this rank's program has left it too (a function it defines after the collective exists by then).
        self._held: deque[tuple[int, int, int, bytes]] = deque()
        self._collective_calls: CollectiveCalls | None = getattr(rail, "_calls", None)
        self._pieces: dict[int, bytearray] = {}  # a call larger than a datagram, its pieces so far, by source
        self._staging_soon: set[int] = set()  # destinations whose full batch is staged after the running handler
        # A batch's length that fills a datagram: two items a call, and a group's items (three an ask, two an answer).
        self._batch_items = 2 * _FIRST_BATCH_CALLS

    # -- opening -----------------------------------------------------------

    @collective
    def open(
        self,
        dtype: np.dtype | type | str,
        handler: Callable[..., object],
        name: str | None = None,
        *,
        blobs: bool | int = False,
    ) -> Channel:
        """Collective: a new :class:`Channel` of records of *dtype*, delivered to *handler*.

        With *blobs*, each record also has a variable-size part (bytes: a string key or value), and *handler*
        gets ``(source, records, blobs)``, a :class:`Blobs` beside the records (*dtype* may then be empty,
        ``np.dtype([])``); with ``blobs=m``, *m* such parts (a string key and its string value: 2), and *handler*
        gets ``(source, records, blobs_1, ..., blobs_m)``.

        Every rank opens the same channels in the same order (one allgather checks their names and
        dtypes, and refuses a disagreement on every rank with :class:`~mailrail.errors.MailRailError`).
        It starts with ``rail.barrier()``: asynchronous work issued before it is complete when it returns.
        A record larger than a datagram's payload is refused with
        :class:`~mailrail.errors.MessageSizeError`.
        """
        self._check_open()
        self.check_collective("Channels.open()")
        # Quiescence first: a rank blocked in the allgather below grants no credit, so a peer still sending
        # earlier work under backpressure would wait for it forever.
        self.rail.barrier()
        dtype = np.dtype(dtype)
        if dtype.hasobject:
            raise TypeError(f"records of dtype {dtype} hold Python objects: a channel carries fixed-size records")
        parts = operator.index(blobs)
        if not 0 <= parts <= MAX_BLOB_PARTS:
            raise ValueError(f"a record has 0 to {MAX_BLOB_PARTS} variable-size parts, not {parts}")
        room = self.datagram_size - HEADER_SIZE - (56 + 8 * parts if parts else 0)
        if (dtype.itemsize == 0 and not parts) or dtype.itemsize > room:
            raise MessageSizeError(
                f"a {dtype.itemsize}-byte record does not fit in a {self.datagram_size}-byte datagram "
                f"({HEADER_SIZE} bytes of it are the segment header)"
            )
        number = len(self._channels)
        if number >= MAX_CHANNELS:
            raise MailRailError(f"a rail carries at most {MAX_CHANNELS} channels")
        name = name or f"channel {number}"
        mine = (name, (dtype.str if dtype.names is None else repr(dtype.descr)) + " + bytes" * parts)
        everyone = self._comm.allgather(mine)
        if any(theirs != mine for theirs in everyone):
            spread = "; ".join(f"rank {rank}: {theirs[0]} ({theirs[1]})" for rank, theirs in enumerate(everyone))
            raise MailRailError(
                f"ranks opened different channels as channel {number} (containers and Coalescers must be made "
                f"in the same order on every rank): {spread}"
            )
        channel = Channel(self, number, dtype, handler, name, parts)
        self._channels.append(channel)
        return channel

    def _check_open(self) -> None:
        if self._closed:
            from .errors import FinalizedError

            raise FinalizedError("the rail was finalized: its channels and containers can no longer be used")

    # -- collectives ---------------------------------------------------------

    @property
    def in_handler(self) -> bool:
        """True while a channel's handler or a call runs on this rank."""
        return self._handler_depth > 0

    def check_collective(self, what: str) -> None:
        """Refuse *what*, a collective, from inside a handler (the other ranks may be anywhere: a hang)."""
        if self._handler_depth:
            raise MailRailError(
                f"{what} called from inside a handler or a call: it is collective (every rank must call it, "
                f"outside handlers); a handler may send records, visits and calls, which the next barrier completes"
            )

    @collective
    def allgather(self, value: Any) -> list[Any]:
        """Collective: every rank's *value*, in rank order (pickled: for small values)."""
        return list(self._comm.allgather(value))

    @collective
    def allreduce_sum(self, value: int) -> int:
        """Collective: the sum of an integer over the ranks (each fits 64 bits)."""
        return int(self._comm.allreduce(int(value)))

    @collective
    def gather(self, value: Any, root: int) -> list[Any] | None:
        """Collective: every rank's *value*, in rank order, on rank *root*; None on the others (pickled)."""
        gathered = self._comm.gather(value, root=checked_rank(root, self.size))
        return None if gathered is None else list(gathered)

    # -- sending -------------------------------------------------------------

    def _submit(
        self,
        channel: Channel,
        dests: np.ndarray,
        records: np.ndarray,
        copy: bool = True,
        blobs: tuple[Blobs, ...] | None = None,
    ) -> None:
        self._check_open()
        if self._busy and copy:  # from a handler: it waits for the running send or dispatch (after_handler), so a copy
            dests, records = dests.copy(), records.copy()
            blobs = None if blobs is None else tuple(part.copy() for part in blobs)
        if blobs is None:
            self.after_handler(lambda: self._partition_and_send(channel, dests, records), len(records))
        else:
            parts = blobs
            self.after_handler(lambda: self._partition_and_send_blobs(channel, dests, records, parts), len(records))

    def _fill_to(self, channel: Channel, dest: int, count: int, fill: Callable[[np.ndarray, int, int], object]) -> None:
        self._check_open()
        checked_rank(dest, self.size)
        per = channel.per_datagram
        start = 0
        if dest != self.rank:  # whole datagrams filled in send buffers, while spare ones are free
            while count - start >= per and self._held_buffers < self._hold_limit:
                buf = self.rail.reserve_send_buffer()
                if buf is None:
                    break
                nbytes = HEADER_SIZE + per * channel.record_size
                HEADER.pack_into(buf.data, 0, channel.number, MAGIC, KIND_RECORDS, nbytes - HEADER_SIZE)
                fill(buf[HEADER_SIZE:nbytes].view(channel.dtype), start, start + per)
                start += per
                channel.records_sent += per
                if self._busy:  # from a handler: it leaves once the running dispatch ends, as a send would
                    self._held_buffers += 1
                    self.after_handler(functools.partial(self._send_held, dest, buf, nbytes), per)
                else:
                    self._pump(functools.partial(self._send, dest, buf, nbytes))
        if start < count:  # the rest (a partial datagram, or no spare buffer): through an array of its own
            records = np.empty(count - start, dtype=channel.dtype)
            fill(records, start, count)
            self._submit(channel, np.full(len(records), dest, dtype=np.int64), records, copy=False)

    def fill_pair_to(
        self,
        dest: int,
        count: int,
        first: Channel,
        second: Channel,
        fill: Callable[[np.ndarray, np.ndarray, int, int], object],
    ) -> None:
        """Queue *count* records on each of two channels for the one rank *dest*, paired: every datagram holds
        a segment of *first* then a segment of *second* over the same records ``start..stop-1``, written by
        ``fill(first_view, second_view, start, stop)`` (called before this returns, in order, over
        ``0..count-1``) inside the send buffer they leave from.  On arrival *first*'s handler runs right
        before *second*'s, for the same records of the same datagram: a per-record header (a lookup's
        positions) that leaves the payload (its values) a contiguous array of its own dtype, written and
        read at full speed.  To this rank, both handlers run over arrays of their own.  From inside a
        handler, datagrams beyond the spare send buffers are written into arrays of their own and copied
        into send buffers once the handler is done (:meth:`after_handler` the call to skip that copy)."""
        self._check_open()
        dest, count = checked_rank(dest, self.size), operator.index(count)
        if count <= 0:
            return
        first.records_sent += count
        second.records_sent += count
        if dest == self.rank:
            heads, bodies = np.empty(count, dtype=first.dtype), np.empty(count, dtype=second.dtype)
            fill(heads, bodies, 0, count)

            def deliver() -> None:
                self._deliver_locally(first, heads)
                self._deliver_locally(second, bodies)

            self.after_handler(deliver, 2 * count)
            return
        first_size, second_size = first.record_size, second.record_size
        per = (self.datagram_size - 2 * HEADER_SIZE - (ALIGNMENT - 1)) // (first_size + second_size)
        if per <= 0:
            raise MessageSizeError(
                f"a record of {first.name} ({first_size} bytes) and one of {second.name} ({second_size} bytes) "
                f"with their segment headers do not fit in a {self.datagram_size}-byte datagram"
            )

        def write(image: np.ndarray, start: int, stop: int) -> int:
            taken = stop - start
            second_at = _aligned(HEADER_SIZE + taken * first_size)
            nbytes = second_at + HEADER_SIZE + taken * second_size
            HEADER.pack_into(image.data, 0, first.number, MAGIC, KIND_RECORDS, taken * first_size)
            HEADER.pack_into(image.data, second_at, second.number, MAGIC, KIND_RECORDS, taken * second_size)
            fill(
                image[HEADER_SIZE : HEADER_SIZE + taken * first_size].view(first.dtype),
                image[second_at + HEADER_SIZE : nbytes].view(second.dtype),
                start,
                stop,
            )
            return nbytes

        if not self._handler_depth:  # free to wait for send buffers: each datagram written where it leaves from

            def send_all() -> None:
                for start in range(0, count, per):
                    buf = self._reserve()
                    self._send(dest, buf, write(buf, start, min(start + per, count)))

            if self._busy:  # deferred work, after the handlers: the send pump runs it
                send_all()
            else:
                self._pump(send_all)
            return
        # Inside a handler no send may wait for a buffer (a buffer frees only as sends complete, and this
        # rank's sends wait for the handler): spare buffers up to the hold limit, then arrays of their own.
        for start in range(0, count, per):
            stop = min(start + per, count)
            buf = self.rail.reserve_send_buffer() if self._held_buffers < self._hold_limit else None
            if buf is None:
                image = np.empty(self.datagram_size, np.uint8)
                nbytes = write(image, start, stop)
                self.after_handler(functools.partial(self._send_image, dest, image, nbytes), 2 * (stop - start))
            else:
                self._held_buffers += 1
                nbytes = write(buf, start, stop)
                self.after_handler(functools.partial(self._send_held, dest, buf, nbytes), 2 * (stop - start))

    def after_handler(self, work: Callable[[], None], records: int = 0) -> None:
        """Run *work* once the running handler (and the send or dispatch around it) is done; at once outside
        handlers.  What *work* sends may then wait for send buffers, as a send outside handlers does: a handler
        that answers a large request defers its answer (with copies of what it reads from the arrivals, whose
        buffers are released after the handler returns).  *records*: how many records *work* will send, counted
        as staged until it runs (``finalize()`` reports them)."""
        if self._busy:
            self._nested.append((work, records))
            self._nested_items += records
        else:
            self._pump(work)

    def _send_image(self, dest: int, image: np.ndarray, nbytes: int) -> None:
        buf = self._reserve()
        buf[:nbytes] = image[:nbytes]
        self._send(dest, buf, nbytes)

    def _send_held(self, dest: int, buf: np.ndarray, nbytes: int) -> None:
        self._held_buffers -= 1
        self._send(dest, buf, nbytes)

    def _pump(self, action: Callable[[], None]) -> None:
        """Run *action*, then every send, call and flush that handlers asked for meanwhile."""
        self._busy = True
        try:
            action()
            self._drain()
        finally:
            self._busy = False

    def _drain(self) -> None:
        while (
            self._nested
            or self._flush_requested
            or (self._flush_each_send and (self._staged_dests or self._batched_dests))
        ):
            while self._nested:
                work, items = self._nested.popleft()
                self._nested_items -= items
                work()
            if self._flush_requested or self._flush_each_send:
                self._flush_requested = False
                self._flush_staged()

    def _partition_and_send(self, channel: Channel, dests: np.ndarray, records: np.ndarray) -> None:
        rank = self.rank
        channel.records_sent += len(records)
        grouped, counts = group_by_rank(dests, records, self.size)
        for dest, start, end in spans_in_turn(counts, rank):
            if dest == rank:
                self._deliver_locally(channel, grouped[start:end])  # a view: the caller's array stays writeable
            else:
                self._append_records(dest, channel, grouped[start:end])

    def _deliver_locally(self, channel: Channel, records: np.ndarray, blobs: tuple[Blobs, ...] | None = None) -> None:
        # No MPI, no copy into a datagram: the handler gets them at once, read-only as arrivals are;
        # what it sends meanwhile waits in _nested.
        records.flags.writeable = False
        channel.records_received += len(records)
        self._handler_depth += 1
        try:
            if blobs is None:
                channel.handler(self.rank, records)
            else:
                channel.handler(self.rank, records, *blobs)
        finally:
            self._handler_depth -= 1

    def _partition_and_send_blobs(
        self, channel: Channel, dests: np.ndarray, records: np.ndarray, blobs: tuple[Blobs, ...]
    ) -> None:
        """:meth:`_partition_and_send` for records with variable-size parts: the parts go in the records' order by
        destination (pyarrow's take), then each destination's in segments of kind 2."""
        rank = self.rank
        channel.records_sent += len(records)
        if len(records) == 1 or (dests[0] == dests).all():
            sorted_records, sorted_parts = np.ascontiguousarray(records), blobs
            counts = np.zeros(self.size, dtype=np.int64)
            counts[int(dests[0])] = len(records)
        else:
            ranks: np.ndarray = dests.astype(self._rank_dtype, copy=False)
            order = np.argsort(ranks, kind="stable")
            sorted_records, sorted_parts = records[order], tuple(part.take(order) for part in blobs)
            counts = np.bincount(ranks, minlength=self.size)
        for dest, start, end in spans_in_turn(counts, rank):
            parts = tuple(Blobs(part.offsets[start : end + 1], part.data) for part in sorted_parts)
            if dest == rank:
                self._deliver_locally(channel, sorted_records[start:end], parts)
            else:
                self._append_blobs(dest, channel, sorted_records[start:end], parts)

    def _append_blobs(self, dest: int, channel: Channel, records: np.ndarray, blobs: tuple[Blobs, ...]) -> None:
        """Records with their variable-size parts into *dest*'s datagrams: as many as fit in each segment (one
        search over the records' sizes per segment); whole datagrams straight into send buffers."""
        capacity = self.datagram_size
        size = channel.record_size
        offsets = [part.offsets.astype(np.int64, copy=False) for part in blobs]
        datas = [part.data for part in blobs]
        parts = len(blobs)
        # Bytes records 0..k-1 take in a segment, but for the fixed overhead: sizes[k].
        sizes = np.arange(len(offsets[0]), dtype=np.int64) * (size + 4 * parts)
        for part_offsets in offsets:
            sizes += part_offsets - part_offsets[0]
        # The count, padding to an 8-byte offset, each part's last offset, and 4 bytes of slack.
        overhead = _BLOB_COUNT.size + (ALIGNMENT - 1) + 4 * parts + 4
        count = len(records)
        done = 0
        while done < count:
            fill = self._fill[dest]
            header_at = _aligned(fill)
            room = capacity - header_at - HEADER_SIZE - overhead
            take = int(np.searchsorted(sizes[done:], sizes[done] + room, side="right")) - 1 if room > 0 else 0
            take = min(take, count - done)
            if take <= 0:
                if fill:
                    self._transmit_row(dest)  # not even one more record here: the next datagram
                    continue
                take = 1  # alone in a datagram, a part of up to largest_blob bytes fits (checked at send)
            if fill == 0 and take < count - done:  # a whole datagram: straight into a send buffer
                buf = self._reserve()
                nbytes = self._write_blobs(buf, 0, channel, records, offsets, datas, done, done + take)
                self._send(dest, buf, nbytes)
            else:
                row = self._staging_row(dest)
                end = self._write_blobs(row, header_at, channel, records, offsets, datas, done, done + take)
                self._fill[dest] = end
                self._tail_channel[dest] = -1  # a segment of kind 2 is never extended
                self._staged_dests.add(dest)
                self._count[dest] += take
                self._staged_records += take
            done += take

    @staticmethod
    def _write_blobs(
        target: np.ndarray,
        header_at: int,
        channel: Channel,
        records: np.ndarray,
        offsets: list[np.ndarray],
        datas: list[np.ndarray],
        start: int,
        stop: int,
    ) -> int:
        """Writes records ``start..stop-1`` as one segment of kind 2 at *header_at* (each part's offsets, then each
        part's bytes: see the module); returns where it ends."""
        count = stop - start
        fixed_at = header_at + HEADER_SIZE + _BLOB_COUNT.size
        fixed_bytes = count * channel.record_size
        offsets_at = _aligned(fixed_at + fixed_bytes)
        end = offsets_at + 4 * (count + 1) * len(offsets)  # where the parts' bytes start
        _BLOB_COUNT.pack_into(target.data, header_at + HEADER_SIZE, count, len(offsets))
        if fixed_bytes:
            target[fixed_at : fixed_at + fixed_bytes] = records[start:stop].view(np.uint8).reshape(-1)
        target[fixed_at + fixed_bytes : offsets_at] = 0
        for part_offsets, data in zip(offsets, datas):
            first, last = int(part_offsets[start]), int(part_offsets[stop])
            written = target[offsets_at : offsets_at + 4 * (count + 1)].view(np.int32)
            np.subtract(part_offsets[start : stop + 1], first, out=written, casting="unsafe")
            target[end : end + last - first] = data[first:last]
            offsets_at += 4 * (count + 1)
            end += last - first
        HEADER.pack_into(target.data, header_at, channel.number, MAGIC, KIND_BLOBS, end - header_at - HEADER_SIZE)
        assert end <= len(target), f"a segment of {count} records ends at byte {end} of {len(target)}"
        return end

    def _append_records(self, dest: int, channel: Channel, records: np.ndarray) -> None:
        size = channel.record_size
        capacity = self.datagram_size
        data = records.view(np.uint8).reshape(-1)  # records are a fresh contiguous copy or slice of one
        count = len(records)
        done = 0
        while done < count:
            fill = self._fill[dest]
            if fill == 0 and count - done >= channel.per_datagram:  # whole datagrams straight to send buffers
                take = channel.per_datagram
                self._transmit_segment(dest, channel, data[done * size : (done + take) * size])
                done += take
                continue
            row = self._staging_row(dest)
            if self._tail_channel[dest] == channel.number:  # extend the last segment
                header_at = self._tail_at[dest]
                room = (capacity - fill) // size
            else:
                header_at = _aligned(fill)
                room = (capacity - header_at - HEADER_SIZE) // size if header_at + HEADER_SIZE <= capacity else 0
                if room > 0:
                    self._tail_channel[dest], self._tail_at[dest] = channel.number, header_at
                    fill = header_at + HEADER_SIZE
            if room <= 0:
                self._transmit_row(dest)
                continue
            take = min(room, count - done)
            nbytes = take * size
            row[fill : fill + nbytes] = data[done * size : done * size + nbytes]
            fill += nbytes
            HEADER.pack_into(row.data, header_at, channel.number, MAGIC, KIND_RECORDS, fill - header_at - HEADER_SIZE)
            self._fill[dest] = fill
            self._staged_dests.add(dest)
            self._count[dest] += take
            self._staged_records += take
            done += take
            if capacity - fill < size:  # this channel can add no more: the datagram is full
                self._transmit_row(dest)

    def _staging_row(self, dest: int) -> np.ndarray:
        """The staging row of *dest*, made on first use (with its memoryview, for calls' small copies)."""
        row = self._rows[dest]
        if row is None:
            row = self._rows[dest] = np.empty(self.datagram_size, np.uint8)
            self._row_views[dest] = row.data
        return row

    def _transmit_segment(self, dest: int, channel: Channel, payload: np.ndarray) -> None:
        """One datagram of one segment, packed straight into a send buffer."""
        buf = self._reserve()
        HEADER.pack_into(buf.data, 0, channel.number, MAGIC, KIND_RECORDS, len(payload))
        buf[HEADER_SIZE : HEADER_SIZE + len(payload)] = payload
        self._send(dest, buf, HEADER_SIZE + len(payload))

    def _transmit_row(self, dest: int) -> None:
        fill = self._fill[dest]
        row = self._rows[dest]
        assert row is not None and fill
        self._fill[dest] = 0
        self._tail_channel[dest] = -1
        self._staged_dests.discard(dest)
        self._staged_records -= self._count[dest]
        self._count[dest] = 0
        buf = self._reserve()
        buf[:fill] = row[:fill]
        self._send(dest, buf, fill)

    def _reserve(self) -> np.ndarray:
        rail = self.rail
        buf = rail.reserve_send_buffer()
        while buf is None:  # backpressure: deliver what arrives until a send buffer frees up
            self._poll_once()
            buf = rail.reserve_send_buffer()
        return buf

    def _send(self, dest: int, buf: np.ndarray, nbytes: int) -> None:
        self.rail.send(dest, buf, nbytes)
        self.datagrams_sent += 1
        for _ in range(POLLS_PER_SEND):
            if not self._poll_once():
                break

    # -- calls ---------------------------------------------------------------

    def call(self, dest: int, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on rank *dest*, asynchronously (the next barrier completes it).

        *fn* is sent by reference (its module and qualified name), so it must be a module-level function
        or class that every rank can import; *args* are pickled (protocol 5, numpy arrays and other
        buffers out of band).  Bad input raises here, before anything is sent: ``TypeError`` for a lambda,
        a nested function, a bound method or an argument that cannot be pickled;
        :class:`~mailrail.errors.InvalidDestinationError` for a rank out of range.  A call larger than a
        datagram travels in pieces, a datagram each, under the same flow control, and runs once the last is
        there.  Calls to this rank run at once (after the running handler, if called from one), unpickled like
        the others.

        Calls to another rank whose arguments are numbers, ``None`` or short strings and bytes wait in that
        rank's batch, pickled together in one ``pickle.dumps`` when the batch would fill a datagram, at the
        next flush or barrier, or before another call to that rank: the receiver unpickles the batch in one
        ``pickle.loads``, and each function is named once per batch.  Calls to one rank run in the order they
        were made.  A call made after a collective waits on a rank that is still in that collective until its
        program has left it (a function defined after the collective exists there by then).
        """
        if self._closed:
            self._check_open()
        if type(dest) is not int or not 0 <= dest < self.size:  # (the common case checked inline: it is per call)
            dest = checked_rank(operator.index(dest), self.size)  # a float rank is refused (TypeError), not truncated
        if fn not in self._references:
            self._reference_of(fn)
        if dest != self.rank and not self._busy and not self._flush_each_send:
            for arg in args:
                kind = type(arg)
                if kind not in _BATCHED_ARGUMENT_TYPES or (
                    (kind is str or kind is bytes) and len(arg) > BATCHED_TEXT_BYTES
                ):
                    break
            else:
                batch = self._batches[dest]
                if not batch:
                    self._batched_dests.add(dest)
                batch.append(fn)
                batch.append(args)
                if len(batch) >= self._batch_items:
                    self._pump(lambda: self._append_batch(dest))
                return
        self._call_alone(dest, fn, args)

    def _call_alone(
        self, dest: int, fn: Callable[..., object], args: tuple[Any, ...], asked: Callable[..., object] | None = None
    ) -> None:
        """A call pickled on its own (and the function of the ask it carries, *asked*, named by its errors)."""
        reference = self._references.get(fn) or self._reference_of(fn)
        buffers: list[pickle.PickleBuffer] = []
        try:
            body = pickle.dumps(args, 5, buffer_callback=buffers.append)
        except Exception as error:
            if asked is not None:
                raise TypeError(_unpicklable(asked, args[3], error).replace("rail.call", "rail.ask", 1)) from error
            raise TypeError(_unpicklable(fn, args, error)) from error
        payload = self._pack_call(asked or fn, reference, body, buffers)
        self._calls_staged += 1
        if self._busy:  # from a handler, while a send or a dispatch runs: after it
            self.after_handler(
                (lambda: self._run_call(payload)) if dest == self.rank else (lambda: self._append_call(dest, payload)),
                1,
            )
            return
        self._busy = True
        try:
            if dest == self.rank:
                self._run_call(payload)
            else:
                self._append_call(dest, payload)
            if self._nested or self._flush_requested or self._flush_each_send:
                self._drain()
        finally:
            self._busy = False

    def ask(self, dest: int, fn: Callable[..., object], *args: Any) -> Future:
        """Run ``fn(*args)`` on rank *dest* and return a :class:`Future` of what it returns (or raises).

        The ask travels as a call does (:meth:`call`: the same checks, errors, batches and datagrams), and its
        answer comes back as one.  :meth:`Future.result` and :func:`wait` make progress until the answer is
        there; ``rail.barrier()`` completes every ask made before it.  Allowed inside handlers (only waiting for
        an answer is not).  An exception raised by *fn* on *dest* is raised by ``result()`` on this rank as a
        :class:`~mailrail.errors.RemoteError` naming the rank, with its traceback; the job goes on.  Asks never
        answered when the rail is finalized are reported (``"unanswered"``)."""
        if self._closed:
            self._check_open()
        if type(dest) is not int or not 0 <= dest < self.size:
            dest = checked_rank(operator.index(dest), self.size)
        if fn not in self._references:
            self._reference_of(fn)
        ask_id = self._next_ask
        self._next_ask = ask_id + 1
        future = self._asks[ask_id] = Future(self, dest)
        if dest != self.rank and not self._busy and not self._flush_each_send:
            for arg in args:  # (_batchable, inline: it is per ask, see _run_calls)
                kind = type(arg)
                if kind not in _BATCHED_ARGUMENT_TYPES or (
                    (kind is str or kind is bytes) and len(arg) > BATCHED_TEXT_BYTES
                ):
                    break
            else:
                batch = self._batches[dest]
                if batch and batch[-2] is _ask:  # asks in a row join one group: number, function, arguments, ...
                    group = batch[-1]
                    group += (ask_id, fn, args)
                else:
                    if not batch:
                        self._batched_dests.add(dest)
                    self._grouped_dests.add(dest)
                    group = [ask_id, fn, args]
                    batch.append(_ask)
                    batch.append(group)
                if len(batch) + len(group) >= self._batch_items:
                    self._pump(lambda: self._append_batch(dest))
                return future
        try:
            self._call_alone(dest, _ask, (self.rank, ask_id, fn, args), asked=fn)
        except BaseException:
            del self._asks[ask_id]
            raise
        return future

    def _serve_ask(self, origin: int, ask_id: int, fn: Callable[..., object], args: tuple[Any, ...]) -> None:
        """Run an ask's function here and send its answer back: what it returned, or what it raised."""
        try:
            value = fn(*args)
        except Exception as error:
            self._answer_failed(origin, ask_id, error)
            return
        self._answer_to(origin, ask_id, False, value)

    def _answer_failed(self, origin: int, ask_id: int, error: BaseException) -> None:
        failure = (type(error).__qualname__, str(error), "".join(traceback.format_exception(error)))
        self._answer_to(origin, ask_id, True, failure)

    def _answer_to(self, origin: int, ask_id: int, failed: bool, value: Any) -> None:
        if origin == self.rank:
            self._take_answer(origin, ask_id, failed, value)
        elif not failed and _batchable((value,)):  # answers given inside a dispatch wait in the asker's batch too
            self._batch_answers(origin, [ask_id, value])
        else:
            try:
                self._call_alone(origin, _answer, (self.rank, ask_id, failed, value))
            except TypeError as error:  # an answer that cannot be pickled: the asker learns why
                self._answer_failed(origin, ask_id, error)

    def _batch_answers(self, origin: int, given: list[Any]) -> None:
        """Put answers (ask number, value, ...) in *origin*'s batch, in the group of answers last there if there is
        one; a batch that would fill a datagram is staged (after the running handler, inside one)."""
        batch = self._batches[origin]
        if batch and batch[-2] is _answer:
            group = batch[-1]
            group += given
        else:
            if not batch:
                self._batched_dests.add(origin)
            self._grouped_dests.add(origin)
            group = given
            batch.append(_answer)
            batch.append(group)
        if len(batch) + len(group) >= self._batch_items and origin not in self._staging_soon:
            self._stage_soon(origin)

    def _stage_soon(self, dest: int) -> None:
        """Stage *dest*'s batch once the running handler is done (or now, outside handlers)."""
        self._staging_soon.add(dest)
        self.after_handler(functools.partial(self._append_batch, dest))

    def _take_answer(self, source: int, ask_id: int, failed: bool, value: Any) -> None:
        future = self._asks.pop(ask_id, None)
        if future is None:
            raise ProtocolError(f"rank {source} answered ask {ask_id}, which rank {self.rank} is not waiting for")
        if failed:
            kind, message, remote_traceback = value
            future._settle(RemoteError(source, kind, message, remote_traceback), failed=True)
        else:
            future._settle(value, failed=False)

    def _run_internal(self, fn: Callable[..., object], args: tuple[Any, ...]) -> None:
        if fn is _ask:
            self._serve_ask(*args)
        else:
            self._take_answer(*args)

    def unanswered(self) -> int:
        """Asks made on this rank whose answer has not arrived."""
        return len(self._asks)

    def wait_for(self, futures: Sequence[Future]) -> None:
        """Make progress until every one of *futures* (of this rank's asks) is answered (see :func:`wait`)."""
        if self._busy or self._handler_depth:
            raise MailRailError(
                "waiting for an answer (Future.result(), mailrail.wait) inside a handler: answers arrive while this "
                "rank's handlers run, so a handler that waits would wait for itself; ask, return, and read the "
                "answer after the barrier or in a call the answering function makes"
            )
        self._check_open()
        # As in a barrier, what handlers send meanwhile leaves at once: the answers this rank gives while it waits
        # for its own may be what its askers wait for.
        self._flush_each_send = True
        try:
            if self._held:
                self._pump(self._run_held)
            self.flush()  # the asks waiting in their batches leave
            idle = 0
            for future in futures:
                while future._state is WAITING:
                    if self.poll():
                        idle = 0
                    else:  # nothing arrived: give the core to the ranks that have work (oversubscribed nodes)
                        idle += 1
                        time.sleep(0 if idle < _IDLE_POLLS else _IDLE_SLEEP_S)
        finally:
            self._flush_each_send = False

    def _reference_of(self, fn: Callable[..., object]) -> bytes:
        """*fn*'s reference on the wire (``module:qualname``), checked once per function."""
        check_by_reference(fn)
        name = f"{fn.__module__}:{fn.__qualname__}".encode()
        if len(name) > 0xFFFF:
            raise TypeError(f"rail.call: the name {name_of(fn)} is longer than {0xFFFF} bytes")
        reference = _NAME_LENGTH.pack(len(name)) + name
        self._references[fn] = reference
        return reference

    def _pack_call(
        self, fn: Callable[..., object], reference: bytes, body: bytes, buffers: list[pickle.PickleBuffer]
    ) -> bytes:
        if not buffers:  # the common case, small arguments: no buffer table
            payload = _NO_BUFFERS + reference + body
        else:
            raws = [buffer.raw() for buffer in buffers]
            parts = [_COUNT.pack(len(raws)), *(_LENGTH.pack(raw.nbytes) for raw in raws), reference]
            parts += [_LENGTH.pack(len(body)), body]
            for raw in raws:
                length = sum(map(len, parts))
                parts.append(b"\0" * (_aligned(length) - length))
                parts.append(raw.tobytes())
            payload = b"".join(parts)
        return payload

    def _append_batch(self, dest: int) -> None:
        """Stage *dest*'s batch of calls: one pickle, one segment (or the batch in halves, each its own, where the
        pickle is larger than a datagram)."""
        self._staging_soon.discard(dest)
        batch = self._batches[dest]
        if not batch:  # (staged already, by an earlier flush)
            return
        calls, items = self._batch_counts(dest, batch)
        self._batches[dest] = []
        self._batched_dests.discard(dest)
        self._grouped_dests.discard(dest)
        self._calls_staged += calls
        self._stage_batch(dest, batch, calls, items)

    def _stage_batch(self, dest: int, batch: list[Any], calls: int, items: int) -> None:
        payload = pickle.dumps(batch, 5)
        nbytes = len(payload)
        room = self.datagram_size - HEADER_SIZE
        # the next batches' length: what fills a datagram at this batch's bytes per item, a tenth to spare
        self._batch_items = max(2, int(0.9 * room * items / nbytes))
        if nbytes > room and calls > 1:  # (one call alone that large goes in pieces)
            for half in _halves(batch):
                self._stage_batch(dest, half, *_calls_and_items(half))
            return
        self._stage_segment(dest, KIND_CALLS, payload, calls)

    def _batch_counts(self, dest: int, batch: list[Any]) -> tuple[int, int]:
        """*dest*'s batch's calls and items (:func:`_calls_and_items`), without a look at each call where it holds
        no group (a batch of calls only: two items each)."""
        if dest in self._grouped_dests:
            return _calls_and_items(batch)
        return len(batch) // 2, len(batch)

    def _batched_calls(self) -> int:
        return sum(self._batch_counts(dest, self._batches[dest])[0] for dest in self._batched_dests)

    @property
    def calls_sent(self) -> int:
        """Calls made on this rank (to any rank, itself included), sent or still waiting to be."""
        return self._calls_staged + self._batched_calls()

    def _flush_batches(self) -> None:
        while self._batched_dests:
            self._append_batch(next(iter(self._batched_dests)))

    def _append_call(self, dest: int, payload: bytes) -> None:
        if self._batches[dest]:  # calls to one rank run in the order they were made
            self._append_batch(dest)
        self._stage_segment(dest, KIND_CALL, payload, 1)

    def _stage_segment(self, dest: int, kind: int, payload: bytes, calls: int) -> None:
        """One segment of *kind* in *dest*'s row; a payload larger than a datagram goes in pieces (see the module)."""
        room = self.datagram_size - HEADER_SIZE
        if len(payload) > room:
            view = memoryview(payload)
            for start in range(0, len(payload), room):
                last = start + room >= len(payload)
                number = self._epoch() << 8 | last << 7 | kind
                self._stage_one(dest, KIND_PIECE, view[start : start + room], calls if last else 0, number)
            return
        self._stage_one(dest, kind, payload, calls, self._epoch() if kind != KIND_RECORDS else 0)

    def _stage_one(self, dest: int, kind: int, payload: bytes | memoryview, calls: int, number: int = 0) -> None:
        nbytes = len(payload)
        fill = self._fill[dest]
        header_at = _aligned(fill)
        if fill and header_at + HEADER_SIZE + nbytes > self.datagram_size:
            self._transmit_row(dest)
            header_at = 0
        view = self._row_views[dest]
        if view is None:
            view = self._staging_row(dest).data
        HEADER.pack_into(view, header_at, number, MAGIC, kind, nbytes)
        start = header_at + HEADER_SIZE
        view[start : start + nbytes] = payload
        self._fill[dest] = start + nbytes
        self._tail_channel[dest] = -1
        self._staged_dests.add(dest)
        self._count[dest] += calls
        self._staged_records += calls

    def _function(self, name: bytes) -> Callable[..., object]:
        """The function a call names, imported once per name on this rank."""
        module, _, qualname = name.decode().partition(":")
        target = _resolve(module, qualname)
        if target is None:
            raise AttributeError(
                f"rank {self.rank} received a call of {module}.{qualname}, which module {module!r} on this rank lacks: "
                f"{_DEFINE_FUNCTIONS}"
            )
        self._functions[name] = target
        return target  # type: ignore[no-any-return]

    def _unpickled(self, data: memoryview, buffers: list[bytearray] | None = None) -> Any:
        """A call's arguments; a function among them (a visit's) that this rank cannot find is said in one line."""
        try:
            return pickle.loads(data, buffers=buffers)
        except (AttributeError, ImportError) as error:
            raise AttributeError(
                f"rank {self.rank} received a call naming a function it cannot find ({error}): {_DEFINE_FUNCTIONS}"
            ) from error

    def _run_call(self, payload: bytes | memoryview) -> None:
        view = memoryview(payload)
        (count,) = _COUNT.unpack_from(view, 0)
        offset = _COUNT.size + 8 * count
        (name_length,) = _NAME_LENGTH.unpack_from(view, offset)
        offset += _NAME_LENGTH.size
        name = bytes(view[offset : offset + name_length])
        offset += name_length
        fn = self._functions.get(name) or self._function(name)
        if not count:
            args = self._unpickled(view[offset:])
        else:
            lengths = [_LENGTH.unpack_from(view, _COUNT.size + 8 * i)[0] for i in range(count)]
            (body_length,) = _LENGTH.unpack_from(view, offset)
            offset += _LENGTH.size
            body = view[offset : offset + body_length]
            offset += body_length
            buffers = []
            for length in lengths:
                offset = _aligned(offset)
                buffers.append(bytearray(view[offset : offset + length]))  # own copies: the slot is released after
                offset += length
            args = self._unpickled(body, buffers)
        self.calls_received += 1
        self._handler_depth += 1
        try:
            if fn is _ask or fn is _answer:
                self._run_internal(fn, args)
            else:
                fn(*args)
        finally:
            self._handler_depth -= 1

    def _take_piece(self, source: int, number: int, piece: memoryview) -> None:
        """A piece of a segment larger than a datagram: the pieces from one rank arrive in order, one segment's
        after another's; the last one completes the segment, which runs as if it had come whole."""
        whole = self._pieces.get(source)
        if whole is None:
            whole = self._pieces[source] = bytearray()
        whole += piece
        if number & 0x80:
            del self._pieces[source]
            kind = number & 0x7F
            if kind == KIND_CALL:
                self._run_call(memoryview(whole))
            elif kind == KIND_CALLS:
                self._run_calls(source, memoryview(whole))
            else:
                raise ProtocolError(f"rank {source} sent the pieces of a segment of kind {kind}, not of calls")

    # -- calls after a collective this rank is still in ------------------------

    def _epoch(self) -> int:
        """The collectives this rank's program has left (their count, modulo 256): what its calls carry."""
        calls = self._collective_calls
        if calls is None:
            return 0
        return (calls.number - int(calls.depth > 0)) & 0xFF

    def _ahead(self, epoch: int) -> bool:
        """Whether a call sent at *epoch* comes from a rank that has left a collective this rank is still in."""
        return 0 < (epoch - self._epoch()) & 0xFF < 128

    def _hold(self, source: int, kind: int, number: int, payload: memoryview) -> None:
        """Keep a call for when this rank has left the collective its sender left (a copy: the datagram goes)."""
        self._held.append((source, kind, number, bytes(payload)))

    def _run_held(self) -> None:
        """Run the calls held for the collective this rank has now left, in the order they came."""
        held = self._held
        while held:
            source, kind, number, payload = held[0]
            if self._ahead(number >> 8 if kind == KIND_PIECE else number):
                return
            held.popleft()
            if kind == KIND_PIECE:
                self._take_piece(source, number, memoryview(payload))
            elif kind == KIND_CALLS:
                self._run_calls(source, memoryview(payload))
            else:
                self._run_call(memoryview(payload))

    def _run_calls(self, source: int, payload: memoryview) -> None:
        """Run a batch of calls from *source* (:meth:`_append_batch`), in order: serve its asks (their answers go
        back in one group) and settle the futures its answers are for."""
        try:
            batch = pickle.loads(payload)
        except (AttributeError, ImportError) as error:  # a function, or a module, this rank does not have
            raise AttributeError(
                f"rank {self.rank} received calls of a function it cannot find ({error}): {_DEFINE_FUNCTIONS}"
            ) from error
        calls = len(batch) // 2
        self._handler_depth += 1
        # Asks served and answers taken inline, in loops over their groups: they are as many as the calls, and the
        # frames of the general paths (_serve_ask, _answer_to, _take_answer) cost a tenth to a fifth of their rate.
        try:
            for at in range(0, len(batch), 2):
                fn = batch[at]
                if fn is _ask:
                    group = batch[at + 1]
                    calls += len(group) // 3 - 1
                    given: list[Any] = []
                    items = iter(group)
                    for ask_id, asked, args in zip(items, items, items):
                        try:
                            value = asked(*args)
                        except Exception as error:
                            self._answer_failed(source, ask_id, error)
                            continue
                        kind = type(value)
                        if kind not in _BATCHED_ARGUMENT_TYPES or (
                            (kind is str or kind is bytes) and len(value) > BATCHED_TEXT_BYTES
                        ):
                            self._answer_to(source, ask_id, False, value)
                            continue
                        given += (ask_id, value)
                    if given:
                        self._batch_answers(source, given)
                elif fn is _answer:
                    group = batch[at + 1]
                    calls += len(group) // 2 - 1
                    asks = self._asks
                    items = iter(group)
                    for ask_id, value in zip(items, items):
                        future = asks.pop(ask_id, None)
                        if future is None:
                            self._take_answer(source, ask_id, False, value)  # (it says what is wrong)
                        else:
                            future._state = ANSWERED
                            future._value = value
                else:
                    fn(*batch[at + 1])
        finally:
            self._handler_depth -= 1
            self.calls_received += calls

    # -- receiving -------------------------------------------------------------

    def poll(self) -> bool:
        """Receive at most one datagram and dispatch its segments (and run what handlers sent)."""
        self._check_open()
        if self._busy:
            return self._poll_once()
        if self._held:
            self._pump(self._run_held)
        received = False

        def once() -> None:
            nonlocal received
            received = self._poll_once()

        self._pump(once)
        return received

    def _poll_once(self) -> bool:
        rail = self.rail
        message = rail.receive()
        if message is None:
            return False
        try:
            self._dispatch(message)
        finally:
            rail.release_receive_buffer(message)
        return True

    def dispatch(self, message: Any) -> None:
        """Hand each segment of *message* to its channel's handler or run its call (barrier's handler).

        The caller releases the message after this returns, that is after what the handlers sent has left:
        a barrier's termination counts must never see the message released before its consequences sent.
        """
        if self._busy:
            self._dispatch(message)
        else:
            self._pump(lambda: self._dispatch(message))

    def _dispatch(self, message: Any) -> None:
        data = message.data
        view = data.data
        nbytes = message.nbytes
        source = message.source
        offset = 0
        channels = self._channels
        while offset < nbytes:
            if offset + HEADER_SIZE > nbytes:
                raise ProtocolError(self._malformed(message, offset, "it ends inside a segment header"))
            number, magic, kind, length = HEADER.unpack_from(view, offset)
            start = offset + HEADER_SIZE
            end = start + length
            if magic != MAGIC or end > nbytes:
                raise ProtocolError(self._malformed(message, offset, "no segment header"))
            if kind == KIND_RECORDS:
                if number >= len(channels):
                    raise ProtocolError(
                        self._malformed(message, offset, f"it names channel {number}, not opened on this rank")
                    )
                channel = channels[number]
                records = data[start:end].view(channel.dtype)
                channel.records_received += len(records)
                self._handler_depth += 1
                try:
                    channel.handler(source, records)
                finally:
                    self._handler_depth -= 1
            elif kind == KIND_BLOBS:
                if number >= len(channels) or not channels[number].blobs:
                    raise ProtocolError(
                        self._malformed(message, offset, f"it names channel {number}, no channel of blobs here")
                    )
                channel = channels[number]
                self._dispatch_blobs(channel, message, data, start, end)
            elif kind == KIND_CALL or kind == KIND_CALLS or kind == KIND_PIECE:
                if self._ahead(number >> 8 if kind == KIND_PIECE else number):  # (a rank's epochs only grow: its
                    self._hold(source, kind, number, view[start:end])  # later calls are held too, in order)
                elif kind == KIND_CALL:
                    self._run_call(view[start:end])
                elif kind == KIND_CALLS:
                    self._run_calls(source, view[start:end])
                else:
                    self._take_piece(source, number, view[start:end])
            else:
                raise ProtocolError(self._malformed(message, offset, f"a segment of unknown kind {kind}"))
            offset = _aligned(end)

    def _dispatch_blobs(self, channel: Channel, message: Any, data: np.ndarray, start: int, end: int) -> None:
        (count, parts) = _BLOB_COUNT.unpack_from(data.data, start)
        if parts != channel.parts:
            raise ProtocolError(
                self._malformed(
                    message,
                    start - HEADER_SIZE,
                    f"{parts} variable-size parts for channel {channel.number}'s {channel.parts}",
                )
            )
        fixed_at = start + _BLOB_COUNT.size
        offsets_at = _aligned(fixed_at + count * channel.record_size)
        data_at = offsets_at + 4 * (count + 1) * parts
        if channel.record_size:
            records = data[fixed_at : fixed_at + count * channel.record_size].view(channel.dtype)
        else:
            records = np.empty(count, dtype=channel.dtype)
        blobs = []
        for _ in range(parts):
            offsets = data[offsets_at : offsets_at + 4 * (count + 1)].view(np.int32)
            nbytes = int(offsets[-1])
            if data_at + nbytes > end:
                raise ProtocolError(self._malformed(message, start - HEADER_SIZE, "strings past the segment's end"))
            blobs.append(Blobs(offsets, data[data_at : data_at + nbytes]))
            offsets_at += 4 * (count + 1)
            data_at += nbytes
        channel.records_received += count
        self._handler_depth += 1
        try:
            channel.handler(message.source, records, *blobs)
        finally:
            self._handler_depth -= 1

    def _malformed(self, message: Any, offset: int, what: str) -> str:
        return (
            f"a {message.nbytes}-byte datagram from rank {message.source} is not a channel datagram ({what}, at byte "
            f"{offset}): barrier() "
            f"without a handler, containers and channels take only channel datagrams; pass handler= to barrier() "
            f"to process messages sent with rail.send, or send your records on a channel (rail.channels.open)"
        )

    # -- flushing and barrier ---------------------------------------------------

    def add_cache(self, flush: Callable[[], None], held: Callable[[], int]) -> None:
        """Register a sender-side cache (a container that combines work across calls before sending it).

        *flush* sends what the cache holds; it runs at the start of every :meth:`flush` and :meth:`barrier`,
        before the staging rows leave, so a barrier completes cached work too.  *held* counts the records
        the cache holds, reported by :meth:`staged` (``finalize()`` reports them as ``"staged"``).
        """
        self._caches.append((flush, held))

    @property
    def in_barrier(self) -> bool:
        """True while :meth:`barrier` runs: a sender-side cache must send at once then, not hold."""
        return self._flush_each_send

    def _flush_caches(self) -> None:
        for flush, _ in self._caches:
            flush()

    def flush(self) -> None:
        """Send every partial datagram (and run what handlers send meanwhile)."""
        self._check_open()
        if self._busy:  # from a handler: the running send or dispatch flushes when it is done
            self._flush_requested = True
            return
        self._flush_caches()
        self._pump(self._flush_staged)

    def _flush_staged(self) -> None:
        self._flush_batches()
        self._flush_rows()

    def _flush_rows(self) -> None:
        while self._staged_dests:
            self._transmit_row(next(iter(self._staged_dests)))

    def staged(self) -> int:
        """Records and calls accepted and not sent yet (staged, or waiting behind a running send)."""
        return (
            self._staged_records
            + self._batched_calls()
            + self._nested_items
            + len(self._held)
            + sum(held() for _, held in self._caches)
        )

    @collective
    def barrier(self) -> int:
        """Collective (``rail.barrier()`` calls it): flush, then dispatch arrivals until global quiescence.

        Everything handlers send meanwhile leaves at once, so when it returns every record and call sent by
        any rank before it, and everything those sent in turn, has been handled.  Returns the datagrams
        handled.
        """
        self._check_open()
        self.check_collective("barrier()")
        # Set before the flush: a handler run by the flush's own polls may send, and that must leave too.
        self._flush_each_send = True
        try:
            if self._held:
                self._pump(self._run_held)
            self.flush()
            handled: int = self.rail.barrier(handler=self.dispatch)
            return handled
        finally:
            self._flush_each_send = False

    def close(self) -> int:
        """At ``rail.finalize()``: no more use; returns the records and calls that were left staged."""
        if self._closed:
            return 0
        self._closed = True
        staged = self.staged()
        # Futures are not tracked by the garbage collector (mailrail.futures): asks left unanswered (the rail has
        # read unanswered() by now) would keep these channels alive through them.
        self._asks.clear()
        return staged


def name_of(fn: object) -> str:
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None) or repr(fn)
    return f"{module}.{qualname}" if module else str(qualname)


def _batchable(args: tuple[Any, ...]) -> bool:
    """Whether a call with *args* may wait in its destination's batch (see :data:`_BATCHED_ARGUMENT_TYPES`)."""
    for arg in args:
        kind = type(arg)
        if kind not in _BATCHED_ARGUMENT_TYPES or ((kind is str or kind is bytes) and len(arg) > BATCHED_TEXT_BYTES):
            return False
    return True


def _ask(origin: int, ask_id: int, fn: Callable[..., object], args: tuple[Any, ...]) -> None:
    """An ask on the wire, never called: alone, a call of ``_ask`` with the asking rank, the ask's number, the
    function and its arguments (served by :meth:`Channels._serve_ask`); in a batch, ``_ask`` and a group of asks in
    one list, number, function, arguments, number, ... (the asking rank is the batch's source)."""
    raise AssertionError("an ask is served by its rail's channels")


def _answer(source: int, ask_id: int, failed: bool, value: Any) -> None:
    """An answer on the wire, never called: alone, a call of ``_answer`` with the answering rank, the ask's number,
    whether it failed and the value (taken by :meth:`Channels._take_answer`); in a batch, ``_answer`` and a group
    of answers in one list, number, value, number, ... (none failed: a failure goes alone)."""
    raise AssertionError("an answer is taken by its rail's channels")


#: The items per ask or answer of a batch's group, by its marker.
_GROUP_WIDTHS: dict[Callable[..., object], int] = {_ask: 3, _answer: 2}


def _calls_and_items(batch: list[Any]) -> tuple[int, int]:
    """A batch's calls (asks and answers included) and its items (its own, and its groups')."""
    calls, items = len(batch) // 2, len(batch)
    for at in range(0, len(batch), 2):
        width = _GROUP_WIDTHS.get(batch[at])
        if width:
            group = len(batch[at + 1])
            calls += group // width - 1
            items += group
    return calls, items


def _halves(batch: list[Any]) -> tuple[list[Any], list[Any]]:
    """A batch of more than one call in two, each with about half its items (a lone group split in two groups)."""
    if len(batch) > 2:
        half = len(batch) // 4 * 2
        return batch[:half], batch[half:]
    marker, group = batch
    width = _GROUP_WIDTHS[marker]
    half = len(group) // width // 2 * width
    return [marker, group[:half]], [marker, group[half:]]


#: What to do when a rank lacks a function a call names.
_DEFINE_FUNCTIONS = (
    "define the functions that calls, asks and visits name at the top level of a module every rank imports (a "
    "script: before its first collective, or after it: calls wait until their rank has left it)"
)
#: Empty polls a waiting rank makes before it sleeps between polls, and how long it sleeps then.
_IDLE_POLLS = 64
_IDLE_SLEEP_S = 1e-4


def check_by_reference(fn: object) -> None:
    """*fn* must be importable by module and qualified name on every rank: no lambda, closure or bound method."""
    if not callable(fn):
        raise TypeError(f"rail.call: {reprlib.repr(fn)} is not callable")
    owner = getattr(fn, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType) and not isinstance(fn, type):
        raise TypeError(
            f"rail.call: {name_of(fn)} is a bound method: calls send a module-level function by reference "
            f"(and its instance would be pickled with every call); pass a module-level function and the data"
        )
    qualname = getattr(fn, "__qualname__", None)
    module = getattr(fn, "__module__", None)
    if qualname is None or module is None or "<" in qualname:
        kind = "a lambda" if qualname and "<lambda>" in qualname else "not a module-level callable"
        raise TypeError(
            f"rail.call: {name_of(fn)} is {kind}: calls send the function by reference (its module and name), "
            f"so it must be defined at the top level of a module every rank imports"
        )
    if _resolve(module, qualname) is not fn:
        raise TypeError(
            f"rail.call: {name_of(fn)} cannot be found by its name in module {module!r}: calls send the "
            f"function by reference, so it must be defined at the top level of a module every rank imports"
        )


def _resolve(module: str, qualname: str) -> Any:
    """The object *qualname* names in *module* (imported), or None where no such attribute exists."""
    target: Any = importlib.import_module(module)
    try:
        for part in qualname.split("."):
            target = getattr(target, part)
    except AttributeError:
        return None
    return target


def _unpicklable(fn: Callable[..., object], args: tuple[Any, ...], error: Exception) -> str:
    for index, arg in enumerate(args):
        try:
            pickle.dumps(arg, protocol=5, buffer_callback=lambda buffer: None)
        except Exception as why:  # the first argument that fails names the problem
            return (
                f"rail.call({name_of(fn)}, ...): argument {index} ({type(arg).__name__} {reprlib.repr(arg)}) cannot "
                f"be pickled: {why}"
            )
    return f"rail.call({name_of(fn)}, ...): the call cannot be pickled: {error}"
