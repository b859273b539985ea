"""A distributed counting set (a histogram of keys): YGM's ``counting_set``, in batches.

Each key is owned by one rank (:class:`~mailrail.containers.partition.HashPartitioner`), which keeps it in a
:class:`~mailrail.containers.table.KeyTable` beside an ``int64`` count.  :meth:`CountingSet.add` is
asynchronous: the batch's duplicates are combined on the sender first (one ``(count, key)`` record per distinct
key, so skewed keys such as Zipf-distributed words cost far less traffic than uniform ones), and the records go
to the owners through one channel of the rail; the owners add the counts in their handlers.  The next
``rail.barrier()``, or any collective operation, completes every pending ``add``.

The collectives (:meth:`~CountingSet.count`, :meth:`~CountingSet.top`, :meth:`~CountingSet.size`,
:meth:`~CountingSet.total`) are called by every rank outside handlers and see every ``add`` issued before them.
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np
import numpy.typing as npt

from .base import Container, Lookup, as_keys
from .partition import has_padding, hash_words, key_words
from .table import KeyTable

__all__ = ["CountingSet", "byte_order", "canonical", "distinct_keys"]

_UINT_OF_SIZE: dict[int, type[np.unsignedinteger[Any]]] = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def _keys_of_words(words: npt.NDArray[np.uint64], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """The keys of *dtype* whose canonical words (:func:`~mailrail.containers.partition.key_words`) are *words*."""
    count = words.shape[0]
    itemsize = dtype.itemsize
    uint = _UINT_OF_SIZE.get(itemsize)
    if uint is not None and words.shape[1] == 1:  # zero-extended numbers of 1, 2 or 4 bytes
        return words[:, 0].astype(uint).view(dtype)
    raw = np.ascontiguousarray(words).view(np.uint8).reshape(count, 8 * words.shape[1])
    if raw.shape[1] != itemsize:
        raw = np.ascontiguousarray(raw[:, :itemsize])
    return raw.view(dtype).reshape(count)


def distinct_keys(keys: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64], npt.NDArray[np.uint64]]:
    """The distinct keys of a 1-D batch (equal by their bytes), how often each occurs, and their canonical words.

    Keys come back sorted by their canonical words, in canonical form (structured padding zeroed).  One sort of
    the batch: what a sender pays to send each distinct key once.
    """
    words = key_words(keys)
    width = words.shape[1]
    if width == 1:
        unique, counts = np.unique(words[:, 0], return_counts=True)
        unique_words = unique.reshape(-1, 1)
    else:
        rows = np.ascontiguousarray(words).view(np.dtype((np.void, 8 * width))).reshape(-1)
        unique_rows, counts = np.unique(rows, return_counts=True)
        unique_words = np.ascontiguousarray(unique_rows).view(np.uint64).reshape(-1, width)
    return _keys_of_words(unique_words, keys.dtype), counts.astype(np.int64), unique_words


def canonical(keys: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """*keys* with the padding bytes of a structured dtype zeroed (numpy's copies of such records leave their
    padding undefined); other keys as they are."""
    if not has_padding(keys.dtype):
        return keys
    return _keys_of_words(key_words(keys), keys.dtype)


def byte_order(keys: npt.NDArray[Any]) -> npt.NDArray[np.intp]:
    """The stable permutation that sorts 1-D *keys* by their bytes, compared as unsigned bytes from the first
    (``memcmp``; structured padding zeroed): the deterministic order of ties, the same on every rank."""
    count = len(keys)
    if count == 0:
        return np.zeros(0, dtype=np.intp)
    raw = np.ascontiguousarray(key_words(keys)).view(np.uint8).reshape(count, -1)[:, : keys.dtype.itemsize]
    rows = np.ascontiguousarray(raw).view(np.dtype((np.void, keys.dtype.itemsize))).reshape(count)
    return np.argsort(rows, kind="stable")


def _ranked(keys: npt.NDArray[Any], counts: npt.NDArray[np.int64]) -> npt.NDArray[np.intp]:
    """The permutation putting *counts* in descending order, ties in ascending order of the keys' bytes."""
    by_bytes = byte_order(keys)
    return by_bytes[np.argsort(-counts[by_bytes], kind="stable")]


class CountingSet(Container):
    """A distributed multiset of keys of one fixed *dtype* with their counts (YGM's ``counting_set``).

    Construction is collective (every rank makes the same containers in the same order on the rail).  Keys of
    any fixed-size dtype (integers, floats, fixed-width bytes such as ``S16``, structured records) are equal
    exactly when their bytes are (see :mod:`mailrail.containers.partition`).
    """

    kind = "CountingSet"
    #: Arrived records buffered before one table insert applies them all (a read applies them at once).
    pending_limit = 1 << 16

    def __init__(self, rail: Any, dtype: npt.DTypeLike) -> None:
        super().__init__(rail)
        self.dtype: np.dtype[Any] = np.dtype(dtype)
        if self.dtype.hasobject or self.dtype.itemsize == 0:
            raise TypeError(f"CountingSet: keys must have a fixed-size dtype (numbers, bytes, records); got {dtype}")
        self._table = KeyTable(self.dtype)
        self._counts: npt.NDArray[np.int64] = np.zeros(self._table.capacity, dtype=np.int64)
        self._record_dtype = np.dtype([("count", np.int64), ("key", self.dtype)])
        self._pending: list[npt.NDArray[Any]] = []  # arrived records not yet in the table (see _on_add)
        self._pending_records = 0
        self._adds = self._open(self._record_dtype, self._on_add, "adds")
        self._counter = Lookup(self, self.dtype, np.dtype(np.int64), self._counts_of, "count")

    def _keys(self, keys: Any, operation: str) -> npt.NDArray[Any]:
        return as_keys(keys, self.dtype, f"{self.kind}.{operation}()")

    # -- asynchronous --------------------------------------------------------

    def add(self, keys: npt.ArrayLike) -> None:
        """Count each key of the 1-D batch *keys* once more (asynchronous; YGM's ``async_insert``).

        Duplicates in the batch are combined here, then one record per distinct key goes to its owner.  The
        next ``rail.barrier()`` or collective completes it.  Allowed inside handlers.  Raises before anything is
        sent: ``TypeError`` for keys of another dtype numpy does not cast safely, ``ValueError`` unless 1-D.
        """
        keys = self._keys(keys, "add")
        if len(keys) == 0:
            return
        unique, counts, words = distinct_keys(keys)
        records = np.zeros(len(unique), dtype=self._record_dtype)  # zeros: structured keys keep clean padding
        records["count"] = counts
        records["key"] = unique
        self._adds.send(self.partitioner.owner_of_hashes(hash_words(words)), records)

    def _on_add(self, source: int, records: npt.NDArray[Any]) -> None:
        # A datagram holds a few hundred records: a table insert per datagram would cost more in numpy calls
        # than in work, so arrivals wait in a buffer, applied in one insert when it fills or before a read.
        # Additions commute: when they are applied does not change any count.
        if len(records) >= self.pending_limit:
            self._apply(records)
            return
        self._pending.append(records.copy())
        self._pending_records += len(records)
        if self._pending_records >= self.pending_limit:
            self._settle()

    def _settle(self) -> None:
        """Apply the buffered arrivals: called before anything reads the local counts."""
        if self._pending:
            pending = self._pending[0] if len(self._pending) == 1 else np.concatenate(self._pending)
            self._pending, self._pending_records = [], 0
            self._apply(pending)

    def _apply(self, records: npt.NDArray[Any]) -> None:
        dense = self._table.insert(records["key"]).dense
        if len(self._table) > len(self._counts):
            grown = np.zeros(max(2 * len(self._counts), len(self._table)), dtype=np.int64)
            grown[: len(self._counts)] = self._counts
            self._counts = grown
        np.add.at(self._counts, dense, records["count"])

    # -- collective ----------------------------------------------------------

    def _counts_of(self, keys: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """This rank's count of each of *keys* (0 for a key it does not hold)."""
        self._settle()
        index = self._table.lookup(keys)
        found = index >= 0
        counts = np.zeros(len(keys), dtype=np.int64)
        counts[found] = self._counts[index[found]]
        return counts

    def count(self, keys: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Collective: the count of each key of the 1-D batch *keys*, wherever it lives, in the caller's order
        (``int64``; 0 for a key never added).  Each rank asks about its own batch (empty if it has none).
        YGM's ``count`` (one key, collective)."""
        keys = self._keys(keys, "count")
        self._collective("count")
        return self._counter.ask(keys, self.partitioner.owner(keys))

    def top(self, k: int) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
        """Collective: the *k* keys with the highest counts and their counts, ``(keys, counts)``, in descending
        order of count, ties in ascending order of the keys' bytes: the same arrays on every rank (fewer than
        *k* when fewer keys were added).  Each rank sends its own top *k* to every rank, which merge them.
        YGM's ``topk``."""
        try:
            k = operator.index(k)
        except TypeError:
            raise TypeError(f"{self.kind}.top(): k must be an integer, got {type(k).__name__} {k!r}") from None
        if k < 0:
            raise ValueError(f"{self.kind}.top(): k must be >= 0, got {k}")
        self._collective("top")
        keys, counts = self._local_top(k)
        gathered = self.channels.allgather((keys, counts))
        all_keys = np.concatenate([theirs[0] for theirs in gathered])
        all_counts = np.concatenate([theirs[1] for theirs in gathered])
        best = _ranked(all_keys, all_counts)[:k]  # a key lives on one rank: no duplicates to combine
        return canonical(all_keys[best]), all_counts[best]

    def _local_top(self, k: int) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
        """This rank's top *k* in the global order (count descending, ties by key bytes), as copies."""
        self._settle()
        held = len(self._table)
        keys, counts = self._table.keys, self._counts[:held]
        if k == 0:
            return keys[:0].copy(), counts[:0].copy()
        if k < held:
            # The k-th largest count: everything above it is in, ties at it are decided by their bytes.
            threshold = np.partition(counts, held - k)[held - k]
            candidates = np.flatnonzero(counts >= threshold)
            keys, counts = keys[candidates], counts[candidates]
        best = _ranked(keys, counts)[:k]
        return keys[best].copy(), counts[best].copy()

    def size(self) -> int:
        """Collective: how many distinct keys the set holds (YGM's ``size``)."""
        self._collective("size")
        self._settle()
        return self.channels.allreduce_sum(len(self._table))

    def total(self) -> int:
        """Collective: the sum of all counts: how many keys were added in all (YGM: a ``for_all`` sum)."""
        self._collective("total")
        self._settle()
        return self.channels.allreduce_sum(int(self._counts[: len(self._table)].sum()))

    # -- local ---------------------------------------------------------------

    def local(self) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
        """This rank's keys and their counts, as copies (not collective: no pending ``add`` is completed;
        call ``rail.barrier()`` first to see them).  YGM's ``for_all`` over the local part."""
        self._settle()
        held = len(self._table)
        return canonical(self._table.keys.copy()), self._counts[:held].copy()

    def __repr__(self) -> str:
        return f"<CountingSet of {self.dtype} on rank {self.rank}: {len(self._table)} local keys>"
