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

from .base import Container
from .keys import canonical, fixed_dtype

__all__ = ["Bag"]


class Bag(Container):
    """A distributed multiset of items of one fixed *dtype* (YGM's ``bag``).

    Construction is collective (every rank makes the same containers in the same order on the rail).  Items
    are records of any fixed-size dtype (numbers, fixed-width bytes, structured records).
    """

    kind = "Bag"

    def __init__(self, rail: Any, dtype: npt.DTypeLike) -> None:
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
        dests = (self._cursor + np.arange(count, dtype=np.int64)) % self.ranks
        self._cursor = (self._cursor + count) % self.ranks
        self._items_channel.send(dests, items)

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

    def size(self) -> int:
        """Collective: how many items the bag holds on all ranks (YGM's ``size``)."""
        self._collective("size")
        return self.channels.allreduce_sum(self._length)

    def rebalance(self) -> int:
        """Collective: even out the items over the ranks: afterwards each rank holds ``total // ranks`` or one more
        (YGM's ``rebalance``).  The ranks holding the most keep the extra ones, so the fewest items move; they
        move through the bag's channel, from the end of the ranks' arrays that hold too many.  The multiset of
        items is unchanged; the order of a rank's items is not kept.  Returns how many items moved (the same on
        every rank)."""
        self._collective("rebalance")
        lengths = np.array(self.channels.allgather(self._length), dtype=np.int64)
        base, extra = divmod(int(lengths.sum()), self.ranks)
        targets = np.full(self.ranks, base, dtype=np.int64)
        targets[np.argsort(-lengths, kind="stable")[:extra]] += 1  # the fullest ranks keep the extra items
        surplus = np.maximum(lengths - targets, 0)
        deficit = np.maximum(targets - lengths, 0)
        if surplus[self.rank]:
            # Surplus and deficit laid end to end, in rank order: this rank's surplus goes to the ranks whose
            # deficit overlaps it.
            give_end = int(surplus[: self.rank + 1].sum())
            give_start = give_end - int(surplus[self.rank])
            take_end = np.cumsum(deficit)
            take_start = take_end - deficit
            amounts = np.clip(np.minimum(give_end, take_end) - np.maximum(give_start, take_start), 0, None)
            dests = np.repeat(np.arange(self.ranks, dtype=np.int64), amounts)
            keep = int(targets[self.rank])
            leaving = self._items[keep : self._length].copy()
            self._length = keep
            self._items_channel.send(dests, leaving)
        self.rail.barrier()
        return int(surplus.sum())

    # -- local ---------------------------------------------------------------

    def local(self) -> npt.NDArray[Any]:
        """This rank's items, a copy (not collective: call ``rail.barrier()`` first to see pending inserts).
        Structured items come back with their padding bytes zeroed (numpy's copies do not keep padding, so it
        is not part of an item).  YGM's ``for_all`` over the local part."""
        return canonical(self._items[: self._length].copy())

    def __repr__(self) -> str:
        return f"<Bag of {self.dtype} on rank {self.rank}: {self._length} local items>"
