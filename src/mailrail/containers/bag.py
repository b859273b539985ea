"""A distributed bag (multiset) of items: YGM's ``bag``, in batches.

A bag keeps every item it is given, duplicates included, somewhere: items have no owner.  Like YGM's bag,
:meth:`Bag.insert` spreads a rank's items over the ranks *round-robin*: each rank keeps a cursor, starting at
its own rank, and its ``j``-th item overall goes to rank ``(rank + j) % ranks``, across batches.  Every rank's
share is then even up to one item per inserting rank, whatever the pattern of inserts, and a batch costs one
send.  :meth:`Bag.rebalance` evens the shares exactly, to one item.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..channels import Blobs, Rail
from ..collectives import collective
from .base import Container, table_of
from .keys import Strings, canonical, fixed_dtype, is_string_type, numpy_column

__all__ = ["Bag", "StringBag"]


class Bag(Container):
    """A distributed multiset of items of one fixed *dtype* (YGM's ``bag``).

    Construction is collective (every rank makes the same containers in the same order on the rail).  Items
    are records of any fixed-size dtype (numbers, fixed-width bytes, structured records).
    """

    kind = "Bag"

    def __new__(cls, rail: Rail, dtype: Any) -> Bag:
        # Bag(rail, str) and Bag(rail, bytes) are bags of strings of any length.
        if cls is Bag and is_string_type(dtype):
            return super().__new__(StringBag)
        return super().__new__(cls)

    @collective
    def __init__(self, rail: Rail, dtype: npt.DTypeLike) -> None:
        super().__init__(rail)
        self.dtype: np.dtype[Any] = fixed_dtype(dtype, "Bag", "items")
        self._items: npt.NDArray[Any] = np.empty(1024, dtype=self.dtype)
        self._length = 0
        self._cursor = self.rank  # the rank the next inserted item goes to
        self._items_channel = self._channel(self.dtype, self._on_items, "items")

    def _keys(self, keys: Any, operation: str) -> npt.NDArray[Any]:
        raise TypeError(
            f"{self.kind}.{operation}(): a bag's items have no owner (insert spreads them round-robin); "
            f"use a Set or a CountingSet to place items by key"
        )

    def _as_items(self, items: npt.ArrayLike, operation: str) -> npt.NDArray[Any]:
        """*items* as a 1-D array of the bag's dtype (converted only when numpy calls it safe), else an error."""
        where = f"{self.kind}.{operation}()"
        array = np.asarray(items)
        if array.dtype != self.dtype:
            if isinstance(items, np.ndarray) and not np.can_cast(array.dtype, self.dtype, casting="safe"):
                raise TypeError(f"{where}: items of dtype {array.dtype} for a bag of dtype {self.dtype}")
            try:
                array = np.asarray(items, dtype=self.dtype)
            except (TypeError, ValueError) as error:
                raise TypeError(f"{where}: items cannot be converted to {self.dtype}: {error}") from error
        if array.ndim != 1:
            raise ValueError(f"{where}: items must be a 1-D array, got shape {array.shape}")
        return array

    # -- asynchronous --------------------------------------------------------

    def insert(self, items: npt.ArrayLike) -> None:
        """Put each item of the 1-D batch *items* in the bag, round-robin over the ranks (asynchronous; YGM's
        ``async_insert``).  The next ``rail.barrier()`` or collective completes it.  Allowed inside handlers.
        Raises before anything is sent: ``TypeError`` for items of another dtype numpy does not cast safely,
        ``ValueError`` unless 1-D."""
        items = self._as_items(items, "insert")
        count = len(items)
        if count == 0:
            return
        for part in self._parts(count):
            chunk = items[part]
            dests = (self._cursor + np.arange(len(chunk), dtype=np.int64)) % self.ranks
            self._cursor = (self._cursor + len(chunk)) % self.ranks
            self._items_channel.send(dests, chunk)

    def local_insert(self, items: npt.ArrayLike) -> None:
        """Put the items of the 1-D batch *items* in this rank's own share, at once: no message (YGM's
        ``local_insert``).  For data each rank already holds (read from its file, say); :meth:`rebalance`
        evens the shares afterwards.  Same errors as :meth:`insert`."""
        items = self._as_items(items, "local_insert")
        if len(items):
            self._append(items)

    def _on_items(self, source: int, items: npt.NDArray[Any]) -> None:
        self._append(items)

    def _append(self, items: npt.NDArray[Any]) -> None:
        end = self._length + len(items)
        if end > len(self._items):
            grown = np.empty(max(2 * len(self._items), end), dtype=self.dtype)
            grown[: self._length] = self._items[: self._length]
            self._items = grown
        self._items[self._length : end] = items
        self._length = end

    # -- collective ----------------------------------------------------------

    @collective
    def size(self) -> int:
        """Collective: how many items the bag holds on all ranks (YGM's ``size``)."""
        self._collective("size")
        return self.channels.allreduce_sum(self._length)

    @collective
    def rebalance(self) -> int:
        """Collective: even out the items over the ranks: afterwards each rank holds ``total // ranks`` or one more
        (YGM's ``rebalance``).  The ranks holding the most keep the extra ones, so the fewest items move; they
        move through the bag's channel, from the end of the ranks' arrays that hold too many.  The multiset of
        items is unchanged; the order of a rank's items is not kept.  Returns how many items moved (the same on
        every rank)."""
        self._collective("rebalance")
        moved, keep, dests = self._rebalancing(self.channels.allgather(self._length))
        if dests is not None:
            self._send_surplus(keep, dests)
        self.rail.barrier()
        return moved

    def _rebalancing(self, counts: list[int]) -> tuple[int, int, npt.NDArray[np.int64] | None]:
        """From every rank's item count: the items that move in all, how many this rank keeps, and the rank each
        of its others goes to (None when it gives none)."""
        lengths = np.array(counts, dtype=np.int64)
        base, extra = divmod(int(lengths.sum()), self.ranks)
        targets = np.full(self.ranks, base, dtype=np.int64)
        targets[np.argsort(-lengths, kind="stable")[:extra]] += 1  # the fullest ranks keep the extra items
        surplus = np.maximum(lengths - targets, 0)
        deficit = np.maximum(targets - lengths, 0)
        if not surplus[self.rank]:
            return int(surplus.sum()), int(lengths[self.rank]), None
        # Surplus and deficit laid end to end, in rank order: this rank's surplus goes to the ranks whose
        # deficit overlaps it.
        give_end = int(surplus[: self.rank + 1].sum())
        give_start = give_end - int(surplus[self.rank])
        take_end = np.cumsum(deficit)
        take_start = take_end - deficit
        amounts = np.clip(np.minimum(give_end, take_end) - np.maximum(give_start, take_start), 0, None)
        dests = np.repeat(np.arange(self.ranks, dtype=np.int64), amounts)
        return int(surplus.sum()), int(targets[self.rank]), dests

    def _send_surplus(self, keep: int, dests: npt.NDArray[np.int64]) -> None:
        leaving = self._items[keep : self._length].copy()
        self._length = keep
        self._items_channel.send(dests, leaving)

    # -- local ---------------------------------------------------------------

    def local(self) -> Any:
        """This rank's items, a ``pyarrow.Table`` of one column, ``item`` (a struct column for structured items),
        in no particular order (not collective: call ``rail.barrier()`` first to see pending inserts).  YGM's
        ``for_all`` over the local part."""
        return table_of({"item": canonical(self._items[: self._length].copy())})

    def _absorb(self, table: Any, where: str) -> None:
        self.insert(numpy_column(table.column(0), self.dtype))

    def reduce_by_key(self, target: Any, op: Any = "add") -> None:
        """Reduce this rank's items into the Map *target*, asynchronously, with the Map's ``reduce`` semantics
        (YGM's ``reduce_by_key``): items that are records with fields ``key`` and ``value`` give
        ``target.reduce(keys, values, op)``; other items are keys with the value 1 (``"add"`` counts them).
        Not collective: call it on every rank to reduce the whole bag; the next barrier completes it."""
        items = canonical(self._items[: self._length])
        names = self.dtype.names or ()
        if "key" in names and "value" in names:
            target.reduce(items["key"], items["value"], op)
        else:
            target.reduce(items, 1, op)

    def __repr__(self) -> str:
        return f"<Bag of {self.dtype} on rank {self.rank}: {self._length} local items>"


_NOTHING = np.dtype([])


class StringBag(Bag):
    """``Bag(rail, str)`` or ``Bag(rail, bytes)``: a bag of strings of any length, with :class:`Bag`'s operations
    (see :mod:`mailrail.containers.keys` for what a batch may be); a rank keeps its strings packed, one array of
    offsets and one of bytes, as Arrow does."""

    @collective
    def __init__(self, rail: Rail, kind: type) -> None:  # (Bag.__init__'s setup is for fixed-size items)
        Container.__init__(self, rail)
        self._strings = Strings(kind)
        #: ``str`` or ``bytes``.
        self.dtype = kind  # type: ignore[assignment]
        self._offsets = np.zeros(1025, dtype=np.int64)
        self._data = np.empty(1 << 14, dtype=np.uint8)
        self._length = 0
        self._cursor = self.rank
        self._items_channel = self._channel(_NOTHING, self._on_string_items, "items", blobs=True)

    def insert(self, items: Any) -> None:
        """Put each string of the batch *items* in the bag, round-robin over the ranks (see :meth:`Bag.insert`)."""
        blobs = self._string_keys(items, "insert")
        if blobs.count == 0:
            return
        dests = (self._cursor + np.arange(blobs.count, dtype=np.int64)) % self.ranks
        self._cursor = (self._cursor + blobs.count) % self.ranks
        self._items_channel.send(dests, None, blobs)

    def local_insert(self, items: Any) -> None:
        """Put the strings of *items* in this rank's own share at once (see :meth:`Bag.local_insert`)."""
        self._append(self._string_keys(items, "local_insert"))

    def _on_string_items(self, source: int, records: npt.NDArray[Any], blobs: Blobs) -> None:
        self._append(blobs)

    def _append(self, blobs: Blobs) -> None:  # type: ignore[override]
        count, first, nbytes = blobs.count, int(blobs.offsets[0]), blobs.nbytes
        end, fill = self._length + count, int(self._offsets[self._length])
        if end + 1 > len(self._offsets):
            self._offsets = np.concatenate([self._offsets, np.zeros(max(len(self._offsets), count + 1), np.int64)])
        if fill + nbytes > len(self._data):
            grown = np.empty(max(2 * len(self._data), fill + nbytes), dtype=np.uint8)
            grown[:fill] = self._data[:fill]
            self._data = grown
        self._data[fill : fill + nbytes] = blobs.data[first : first + nbytes]
        np.add(blobs.offsets[1:], fill - first, out=self._offsets[self._length + 1 : end + 1])
        self._length = end

    def _packed_items(self) -> Blobs:
        return Blobs(self._offsets[: self._length + 1], self._data[: int(self._offsets[self._length])])

    @collective
    def rebalance(self) -> int:
        """Collective: even out the strings over the ranks (see :meth:`Bag.rebalance`)."""
        self._collective("rebalance")
        moved, keep, dests = self._rebalancing(self.channels.allgather(self._length))
        if dests is not None:
            leaving = Blobs(self._offsets[keep : self._length + 1], self._data).copy()
            self._length = keep
            self._items_channel.send(dests, None, leaving)
        self.rail.barrier()
        return moved

    def local(self) -> Any:
        """This rank's strings, a ``pyarrow.Table`` of one column, ``item`` (a copy; see :meth:`Bag.local`)."""
        return table_of({"item": self._strings.arrow(self._packed_items().copy())})  # type: ignore[union-attr]

    def _absorb(self, table: Any, where: str) -> None:
        self.insert(table.column(0))

    def reduce_by_key(self, target: Any, op: Any = "add") -> None:
        """Reduce this rank's strings into the Map *target* (of string keys), each with the value 1
        (``"add"`` counts them; see :meth:`Bag.reduce_by_key`)."""
        target.reduce(self._strings.arrow(self._packed_items()), 1, op)  # type: ignore[union-attr]

    def __repr__(self) -> str:
        return f"<Bag of {self._strings} on rank {self.rank}: {self._length} local items>"
