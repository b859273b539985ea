"""Values of any length at their owner: a column of strings by dense index, the lookups that answer with strings,
and the few vectorized operations over packed strings (:class:`~mailrail.channels.Blobs`) the containers need.

**The column** (:class:`StringColumn`).  A container's keys (or items) have dense indices ``0..n-1`` in its hash
table (:class:`~mailrail.containers.table.KeyTable`, :class:`~mailrail.containers.keys.StringTable`); a column keeps
one string per index: a start and a length per index (``int64`` arrays) into one arena of bytes (``uint8``).
Writing values appends their bytes at the arena's end, in one copy, and points the indices at them; the bytes they
replace (and those of erased keys) become *garbage*.  When the garbage exceeds the live bytes (and
:attr:`StringColumn.compact_floor`), the live values are written again back to back in dense order, into an arena
of twice their size: a compaction copies no more than the garbage written since the last one, so it costs O(1) per
byte written, amortized, and the arena never holds more than about twice the live bytes plus that floor and the
room to grow.  An index never written holds the empty string, the zero value of strings.  Every operation is a few
numpy passes over the indices and the bytes (reading values gathers each byte through one index array, in chunks):
none loops in Python per value.

**Lookups** (:class:`StringLookup`): a collective request and reply, as
:class:`~mailrail.containers.base.Lookup`, whose answers carry a string each beside a fixed-size part (a map's
value and whether the key was found; a parent's parent and whether the parent is a root).  Replies travel as
records with a variable-size part (segments of kind 2), each with the asker's position.

**Order.**  Strings compare by their bytes, as unsigned bytes from the first (``memcmp``, then the shorter first):
for ``str`` that is Python's order of ``str`` (UTF-8 keeps the order of code points).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from ..channels import Blobs
from .base import send_requests
from .keys import Strings

if TYPE_CHECKING:
    from .base import Container

__all__ = [
    "StringColumn",
    "StringLookup",
    "concat_blobs",
    "empty_blobs",
    "equal",
    "extremes",
    "less",
    "repeated",
    "unique_strings",
]

#: Bytes a gather reads through one index array at most (the array is 8 bytes per byte read).
_GATHER_CHUNK = 1 << 22


def _arrow() -> Any:
    import pyarrow as pa

    return pa


def empty_blobs() -> Blobs:
    """No strings."""
    return Blobs(np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.uint8))


def repeated(value: bytes, count: int) -> Blobs:
    """*value* *count* times, packed (one value for every key)."""
    offsets = np.arange(count + 1, dtype=np.int64) * len(value)
    return Blobs(offsets, np.tile(np.frombuffer(value, dtype=np.uint8), count))


def concat_blobs(parts: list[Blobs]) -> Blobs:
    """The strings of *parts*, in order, packed in one :class:`~mailrail.channels.Blobs` (offsets ``int64`` from 0);
    one numpy pass per part (a datagram's worth, not a string)."""
    if not parts:
        return empty_blobs()
    offsets = [np.zeros(1, dtype=np.int64)]
    datas = []
    base = 0
    for part in parts:
        ends = part.offsets.astype(np.int64, copy=False)
        first, last = int(ends[0]), int(ends[-1])
        offsets.append(ends[1:] - first + base)
        datas.append(part.data[first:last])
        base += last - first
    return Blobs(np.concatenate(offsets), np.concatenate(datas) if datas else np.zeros(0, dtype=np.uint8))


def _large(blobs: Blobs) -> Any:
    return blobs.arrow(_arrow().large_binary())


def equal(first: Blobs, second: Blobs) -> npt.NDArray[np.bool_]:
    """Whether each string of *first* has the same bytes as the string at the same position of *second*."""
    if not first.count:
        return np.zeros(0, dtype=np.bool_)
    import pyarrow.compute as pc

    return np.asarray(pc.equal(_large(first), _large(second)).to_numpy(zero_copy_only=False), dtype=np.bool_)


def less(first: Blobs, second: Blobs) -> npt.NDArray[np.bool_]:
    """Whether each string of *first* comes before the string at the same position of *second*, by bytes (see the
    module)."""
    if not first.count:
        return np.zeros(0, dtype=np.bool_)
    import pyarrow.compute as pc

    return np.asarray(pc.less(_large(first), _large(second)).to_numpy(zero_copy_only=False), dtype=np.bool_)


def extremes(
    groups: npt.NDArray[np.integer[Any]], values: Blobs, largest: bool
) -> tuple[npt.NDArray[Any], npt.NDArray[np.intp]]:
    """For each distinct group number of *groups* (one per string of *values*), the position of its smallest string
    by bytes (its largest with *largest*): ``(groups, positions)``, the groups ascending.  One sort (pyarrow's, by
    group then bytes)."""
    count = len(groups)
    if not count:
        return groups[:0], np.zeros(0, dtype=np.intp)
    pa = _arrow()
    import pyarrow.compute as pc

    table = pa.table({"group": np.asarray(groups), "value": _large(values)})
    order = np.asarray(
        pc.sort_indices(table, sort_keys=[("group", "ascending"), ("value", "descending" if largest else "ascending")]),
        dtype=np.intp,
    )
    ordered = np.asarray(groups)[order]
    first = np.ones(count, dtype=np.bool_)
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    return ordered[first], order[first]


def unique_strings(strings: Blobs) -> tuple[Blobs, npt.NDArray[np.int64]]:
    """The distinct strings of *strings* (in the order of their first occurrence) and, for each string, the
    position of its own among them; by one hash table of the batch."""
    from .keys import StringTable

    table = StringTable(max(1, strings.count))
    dense, _ = table.insert(strings)
    return table.keys(), dense


class StringColumn:
    """One string per dense index ``0..size-1`` of a container's table, on an arena of bytes (see the module).

    :meth:`fit` follows the table as it grows, :meth:`set` writes values at distinct indices, :meth:`get` reads
    them (packed afresh), :meth:`erase` follows the table's :meth:`~mailrail.containers.table.KeyTable.erase`.
    """

    #: Garbage below this many bytes is never compacted: a small column is not copied again and again.
    compact_floor = 1 << 16

    def __init__(self, capacity: int = 1024) -> None:
        capacity = max(1, capacity)
        self._starts = np.zeros(capacity, dtype=np.int64)
        self._lengths = np.zeros(capacity, dtype=np.int64)
        self._arena = np.empty(16 * capacity, dtype=np.uint8)
        self._fill = 0  # arena bytes written
        self._live = 0  # bytes of the values of indices 0..size-1
        self._size = 0
        #: Compactions so far (for tests and benchmarks).
        self.compactions = 0

    def __len__(self) -> int:
        return self._size

    @property
    def live(self) -> int:
        """Bytes of the values held."""
        return self._live

    @property
    def garbage(self) -> int:
        """Bytes of the arena that no value uses any more."""
        return self._fill - self._live

    @property
    def nbytes(self) -> int:
        """Bytes allocated: the arena and the starts and lengths, room to grow included."""
        return int(self._arena.nbytes + self._starts.nbytes + self._lengths.nbytes)

    def fit(self, size: int) -> None:
        """Hold indices ``0..size-1`` (the table grew to *size* keys): new indices hold the empty string."""
        if size > len(self._starts):
            room = max(size, 2 * len(self._starts))
            for name in ("_starts", "_lengths"):
                grown = np.zeros(room, dtype=np.int64)
                grown[: self._size] = getattr(self, name)[: self._size]
                setattr(self, name, grown)
        self._size = max(self._size, size)

    def lengths(self, at: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """The length of the value at each index."""
        lengths: npt.NDArray[np.int64] = self._lengths[at]
        return lengths

    def set(self, at: npt.NDArray[np.int64], values: Blobs) -> None:
        """``value[at[i]] = values[i]``: *at* are distinct indices below the size, as many as *values*."""
        if not len(at):
            return
        offsets = values.offsets.astype(np.int64, copy=False)
        first, last = int(offsets[0]), int(offsets[-1])
        nbytes = last - first
        if self._fill + nbytes > len(self._arena):
            self._grow(nbytes)
        start = self._fill
        self._arena[start : start + nbytes] = values.data[first:last]
        self._fill += nbytes
        self._live += nbytes - int(self._lengths[at].sum())
        self._starts[at] = offsets[:-1] + (start - first)
        self._lengths[at] = np.diff(offsets)
        self._compact_if_wasteful()

    def get(self, at: npt.NDArray[np.int64]) -> Blobs:
        """The values at indices *at* (-1: the empty string), packed afresh: ``int64`` offsets from 0."""
        at = np.asarray(at, dtype=np.int64)
        present = at >= 0
        if len(at) and not present.all():
            lengths = np.where(present, self._lengths[np.where(present, at, 0)], 0)
        else:
            lengths = self._lengths[at]
        offsets = np.zeros(len(at) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        return Blobs(offsets, self._gather(self._starts[np.where(present, at, 0)], lengths, offsets))

    def _gather(
        self, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64], offsets: npt.NDArray[np.int64]
    ) -> npt.NDArray[np.uint8]:
        """The bytes of the values starting at *starts*, back to back (*offsets*: where each one goes)."""
        total = int(offsets[-1])
        out = np.empty(total, dtype=np.uint8)
        count = len(starts)
        begin = 0
        while begin < count:  # in chunks of about _GATHER_CHUNK bytes: each chunk's index array is 8 bytes a byte
            end = int(np.searchsorted(offsets, offsets[begin] + _GATHER_CHUNK, side="right")) - 1
            end = min(count, max(end, begin + 1))
            low, high = int(offsets[begin]), int(offsets[end])
            if high > low:
                index = np.repeat(starts[begin:end] - offsets[begin:end], lengths[begin:end])
                index += np.arange(low, high, dtype=np.int64)
                np.take(self._arena, index, out=out[low:high])
            begin = end
        return out

    def erase(self, held: int, size: int, moved_from: npt.NDArray[np.int64], moved_to: npt.NDArray[np.int64]) -> None:
        """Follow the table's erasure that took it from *held* keys to *size*: ``(moved_from, moved_to)`` as its
        ``erase`` returned them (the last entries moved into the holes below *size*)."""
        if held == size:
            return
        tail = np.arange(size, held, dtype=np.int64)
        removed = np.concatenate([moved_to, tail[~np.isin(tail, moved_from)]])
        self._live -= int(self._lengths[removed].sum())
        self._starts[moved_to] = self._starts[moved_from]
        self._lengths[moved_to] = self._lengths[moved_from]
        self._lengths[size:held] = 0
        self._size = size
        self._compact_if_wasteful()

    def clear(self) -> None:
        """Forget every value (the memory the arena has is kept)."""
        self._lengths[: self._size] = 0
        self._fill = self._live = self._size = 0

    def _grow(self, nbytes: int) -> None:
        room = max(2 * len(self._arena), self._fill + nbytes)
        grown = np.empty(room, dtype=np.uint8)
        grown[: self._fill] = self._arena[: self._fill]
        self._arena = grown

    def _compact_if_wasteful(self) -> None:
        if self.garbage > max(self._live, self.compact_floor):
            self._compact()

    def _compact(self) -> None:
        """The live values written again back to back, in dense order, into an arena of twice their size."""
        size = self._size
        lengths = self._lengths[:size]
        offsets = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        live = self._gather(self._starts[:size], lengths, offsets)
        self._arena = np.empty(max(2 * len(live), 1024), dtype=np.uint8)
        self._arena[: len(live)] = live
        self._starts[:size] = offsets[:-1]
        self._fill = self._live = len(live)
        self.compactions += 1

    def __repr__(self) -> str:
        return f"<StringColumn: {self._size} values, {self._live} bytes live, {self.garbage} garbage>"


class StringLookup:
    """A collective request and reply whose answers are strings (see the module).

    *keys*: the keys' dtype, or their :class:`~mailrail.containers.keys.Strings`; *answer_dtype*: the fixed-size
    part of each answer; *answer* runs on the owner over a batch of keys (an array, or packed strings) and returns
    ``(fixed parts, strings)``, one of each per key, in arrays of their own (the replies take them over).
    :meth:`ask` returns them in the asker's order.
    """

    def __init__(
        self,
        container: Container,
        keys: np.dtype[Any] | Strings,
        answer_dtype: np.dtype[Any],
        answer: Callable[[Any], tuple[npt.NDArray[Any], Blobs]],
        what: str,
    ) -> None:
        self.container = container
        self.answer = answer
        self.answer_dtype = np.dtype(answer_dtype)
        self._string_keys = isinstance(keys, Strings)
        if isinstance(keys, Strings):
            self._requests = container._channel(
                np.dtype([("position", "<i8")]), self._on_request, f"{what} requests", blobs=True
            )
        else:
            self._requests = container._channel(
                np.dtype([("position", "<i8"), ("key", keys)]), self._on_request, f"{what} requests"
            )
        self._reply_dtype = np.dtype([("position", "<i8"), ("answer", self.answer_dtype)])
        self._replies = container._channel(self._reply_dtype, self._on_reply, f"{what} replies", blobs=True)
        # The running ask's answers as they come: (positions, fixed parts, strings) per arrival.
        self._pieces: list[tuple[npt.NDArray[np.int64], npt.NDArray[Any], Blobs]] | None = None

    @property
    def records_sent(self) -> int:
        """Requests and replies this rank sent."""
        return self._requests.records_sent + self._replies.records_sent

    def ask(self, keys: npt.NDArray[Any] | Blobs, owners: npt.NDArray[np.int64]) -> tuple[npt.NDArray[Any], Blobs]:
        """Collective, after the caller's ``_collective``: the owners' answers for *keys*, in their order."""
        count = keys.count if isinstance(keys, Blobs) else len(keys)
        pieces: list[tuple[npt.NDArray[np.int64], npt.NDArray[Any], Blobs]] = []
        self._pieces = pieces
        try:
            send_requests(self._requests, keys, owners)
            self.container.rail.barrier()  # every request answered, every reply arrived
        finally:
            self._pieces = None
        positions = np.concatenate([piece[0] for piece in pieces]) if pieces else np.zeros(0, dtype=np.int64)
        assert len(positions) == count, f"{len(positions)} answers to {count} keys"
        where = np.empty(count, dtype=np.intp)
        where[positions] = np.arange(count)
        fixed = np.concatenate([piece[1] for piece in pieces]) if pieces else np.zeros(0, dtype=self.answer_dtype)
        strings = concat_blobs([piece[2] for piece in pieces])
        return fixed[where], strings.take(where)

    def _on_request(self, source: int, requests: npt.NDArray[Any], keys: Blobs | None = None) -> None:
        fixed, strings = self.answer(keys if keys is not None else requests["key"])
        positions = requests["position"]
        if source == self.container.rank:  # this rank's own requests, inside its ask: no replies
            assert self._pieces is not None, "a request from this rank arrived outside its lookup"
            self._pieces.append((positions.copy(), np.array(fixed), strings.copy()))
            return
        replies = np.empty(len(positions), dtype=self._reply_dtype)
        replies["position"] = positions
        replies["answer"] = fixed
        self._replies.send(np.full(len(positions), source, dtype=np.int64), replies, strings, copy=False)

    def _on_reply(self, source: int, replies: npt.NDArray[Any], strings: Blobs) -> None:
        assert self._pieces is not None, "a reply arrived outside a lookup"
        self._pieces.append((replies["position"].copy(), replies["answer"].copy(), strings.copy()))
