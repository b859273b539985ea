"""A distributed counting set (a histogram of keys): YGM's ``counting_set``, in batches.

Each key is owned by one rank (:class:`~mailrail.containers.partition.HashPartitioner`).  :meth:`CountingSet.add`
is asynchronous: the sender routes each key to its owner, as a plain key or, where the batch repeats it, as one
``(count, key)`` record (*combining*, below), through the rail's channels; the owners count what arrives in their
handlers.  The next ``rail.barrier()``, or any collective operation, completes every pending ``add``.

**The owner** appends arrivals to a buffer (one copy per datagram) and counts them in bulk when something reads
its counts (a collective, :meth:`~CountingSet.local`) or when the buffer holds ``pending_bytes``.  Integer keys
are counted in a dense ``int64`` array indexed by the key's *block* (:meth:`HashPartitioner.block
<mailrail.containers.partition.HashPartitioner.block>`: its value read unsigned, divided by the number of ranks;
a rank owns one key per block), one ``bincount`` per settle as a block-distributed histogram does, and over as
few counts: while the blocks of the keys the rank has seen span at most ``max(dense_extent, dense_spread x
distinct keys counted)`` (the array, grown by half again on the side it grows, is at most 1.5 times that).  A rank
whose keys spread wider (negative keys read as large numbers: mixed signs of 4- and 8-byte keys spread wide, as
do keys not in the machine's byte order),
and every rank for keys of other dtypes, keeps its keys in a :class:`~mailrail.containers.table.KeyTable` beside
``int64`` counts (for good: it never goes back).  Results do not depend on the representation.

**Combining** duplicates on the sender costs a sort of the batch and saves nothing on keys that rarely repeat,
so the sender samples.  Its first ``add``, and every ``sample_every``-th after it, is combined exactly (one sort).
If that saves less than ``combine_threshold`` of the bytes, the batches up to the next sample go as plain keys
(the Coalescer histogram's bytes: 8 for a ``uint64`` key), and the next sample waits twice as long as the last
(up to ``sample_every_max`` adds; a sample that combines brings it back to ``sample_every``).  Else the sample's
most frequent keys, and the old table's keys held at least twice, become a small direct-mapped table of *hot*
keys.  The next batches look their keys up there (a hash lookup per key, no sort; one compiled pass for keys of
up to 8 bytes, :mod:`~mailrail.containers.hot`): the hot keys' counts are *held on the sender*, added up across
batches, and the rest go as plain keys; a batch whose hot keys are less than the threshold's share makes the
next batch a sample.

**A large add goes in parts** of ``batch_keys``, each handled as an add of its own: a sample then sorts a part,
not millions of keys, and each part's work stays within the caches, so one call of any size runs as fast as the
best chunking by hand.

**Plain keys wait** on the sender until ``send_batch_bytes`` of them can leave together: a send's fixed cost (its
sort by owner, a copy per destination) is paid once per 64 Ki 8-byte keys, not once per ``add``: sending the
few thousand keys an ``add`` of Zipf keys leaves uncombined cost a large part of sending the whole batch.

**Held counts** leave as one ``(count, key)`` record per hot key, and waiting keys as they are, at every
``rail.channels.flush()`` and ``rail.barrier()`` (the set is a cache of the channels: ``Channels.add_cache``);
held counts also before a sample replaces the table.  An ``add`` made while a barrier runs (from a handler)
sends its keys at once.  Keys and counts still held at ``rail.finalize()`` are reported as staged.

The collectives (:meth:`~CountingSet.count`, :meth:`~CountingSet.top`, :meth:`~CountingSet.size`,
:meth:`~CountingSet.total`) are called by every rank outside handlers and see every ``add`` issued before them.
"""

from __future__ import annotations

import operator
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from ..channels import Blobs, Rail, spans_in_turn
from ..collectives import collective
from . import varkeys
from .arrivals import Arrivals, Run
from .base import Container, Lookup, table_of
from .hot import split_hot
from .keys import (
    UINT_OF_SIZE,
    Strings,
    StringTable,
    canonical,
    fixed_dtype,
    is_string_type,
    keys_of_words,
    numpy_column,
    ranked,
    string_ranked,
)
from .partition import HASH_SEED, has_padding, hash_words, key_words, words_per_key
from .table import KeyTable, distinct_keys

__all__ = ["CountingSet", "StringCountingSet"]

#: The kinds of records an owner receives: plain keys, and ``(count, key)`` records.
_PLAIN, _PAIRS = 0, 1

_SEED = np.uint64(HASH_SEED)


class _HotKeys(NamedTuple):
    """A sender's direct-mapped table of keys worth combining, from its last sample (see the module).

    Slot ``hash >> shift`` (the hash's high bits, :meth:`CountingSet._hot_hashes`) holds one hot key.  An empty
    slot ``s`` holds a hash of slot ``s + 1`` (modulo the slots), which no key of slot ``s`` has, so comparing
    hashes needs no separate mark of the empty slots.
    """

    shift: np.uint64
    hashes: npt.NDArray[np.uint64]
    #: A ``(count, key)`` record per slot, its key the slot's hot key (the count is filled in per batch).
    records: npt.NDArray[Any]
    #: Their canonical words, compared to confirm equal hashes of keys longer than one word (a one-word key's
    #: hash is a bijection of it); empty for one-word keys.
    words: npt.NDArray[np.uint64]
    owners: npt.NDArray[Any]


class _Candidates(NamedTuple):
    """Hot keys of the last table worth keeping (see ``CountingSet._still_hot``), as ``_hot_keys`` takes them."""

    keys: npt.NDArray[Any]
    rates: npt.NDArray[np.float64]
    words: npt.NDArray[np.uint64]
    hashes: npt.NDArray[np.uint64]
    owners: npt.NDArray[Any]


class _Batch:
    """Keys a sender holds back until *limit* of them can leave together, in a buffer of its own (made on first
    use and kept)."""

    def __init__(self, dtype: np.dtype[Any], limit: int) -> None:
        self.dtype = dtype
        self.limit = limit
        self.buffer: npt.NDArray[Any] | None = None
        self.fill = 0

    def append(self, keys: npt.NDArray[Any]) -> bool:
        """Keep a copy of *keys*; False (nothing kept) when they would take the buffer past its limit."""
        end = self.fill + len(keys)
        if end > self.limit:
            return False
        if self.buffer is None:
            self.buffer = np.empty(self.limit, dtype=self.dtype)
        self.buffer[self.fill : end] = keys
        self.fill = end
        return True

    def send(self, send: Callable[[npt.NDArray[Any]], None]) -> None:
        """``send(keys)`` the keys held, emptied first: keys a handler adds meanwhile start a batch of their own."""
        if not self.fill:
            return
        assert self.buffer is not None
        keys, self.buffer, self.fill = self.buffer[: self.fill], None, 0
        send(keys)
        if self.buffer is None:  # nothing added meanwhile: the buffer serves again
            self.buffer = keys.base

    def release(self) -> None:
        """Forget the keys held, keeping the buffer."""
        self.fill = 0


def _hold_on(channels: Any, counting: weakref.ReferenceType[CountingSet]) -> None:
    """Register a set's held hot counts as a cache of its rail's channels, through a weak reference: the
    channels keep their caches for good, and must not keep a set that is gone alive (it holds nothing then)."""

    def send() -> None:
        live = counting()
        if live is not None:
            live._send_held()

    def held() -> int:
        live = counting()
        return 0 if live is None else live._held_records()

    channels.add_cache(send, held)


class CountingSet(Container):
    """A distributed multiset of keys of one fixed *dtype* with their counts (YGM's ``counting_set``).

    Construction is collective (every rank makes the same containers in the same order on the rail).  Keys of
    any fixed-size dtype (integers, floats, fixed-width bytes such as ``S16``, structured records) are equal
    exactly when their bytes are (see :mod:`mailrail.containers.partition`).  The class attributes below tune
    the owners' storage and the senders' combining (see the module); no setting changes a result.
    """

    kind = "CountingSet"
    #: Bytes of arrivals an owner buffers per channel (plain keys, ``(count, key)`` records) before counting them.
    pending_bytes = 8 << 20
    #: Integer keys are counted densely while the keys a rank has seen span at most this many values...
    dense_extent = 1 << 22
    #: ... or this many times the distinct keys it has counted, whichever is more.
    dense_spread = 4
    #: The sender combines exactly (a sort) its first add and every sample_every-th add after it.
    sample_every = 32
    #: While samples find nothing to combine, each comes after twice as many adds as the last, up to this many.
    sample_every_max = 512
    #: Combining goes on when a sample (or a batch combined on hot keys) saves this fraction of the bytes.
    combine_threshold = 0.1
    #: Plain keys wait on the sender until this many bytes of them can leave together (see the module).
    send_batch_bytes = 1 << 19
    #: The most hot keys a sender combines between samples.
    hot_keys_max = 1 << 12

    def __new__(cls, rail: Rail, dtype: Any) -> CountingSet:
        # CountingSet(rail, str) and CountingSet(rail, bytes) are sets of strings of any length.
        if cls is CountingSet and is_string_type(dtype):
            return super().__new__(StringCountingSet)
        return super().__new__(cls)

    @collective
    def __init__(self, rail: Rail, dtype: npt.DTypeLike) -> None:
        super().__init__(rail)
        self.dtype: np.dtype[Any] = fixed_dtype(dtype, "CountingSet")
        self._key_dtype = self.dtype
        self._record_dtype = np.dtype([("count", np.int64), ("key", self.dtype)])
        self._width = words_per_key(self.dtype)
        self._padded = has_padding(self.dtype)
        self._own_words = self.dtype.itemsize == 8 and not self._padded
        # The owner's storage: integer keys in a dense array of counts by block (the partitioner's: one key of
        # this rank per block), until they spread too wide; then, or for other keys, a table and counts.
        self._integers = self.dtype.kind in "iu"
        if self._integers:
            self._word_uint = UINT_OF_SIZE.get(self.dtype.itemsize, np.uint64)  # keys read as their words
            self._block_max = int(
                self.partitioner.block(np.array([(1 << (8 * self.dtype.itemsize)) - 1], np.uint64))[0]
            )
        self._dense: npt.NDArray[np.int64] | None = None  # counts of the keys of blocks base, base + 1, ...
        self._base = 0
        self._table: KeyTable | None = None if self._integers else KeyTable(self.dtype)
        self._counts: npt.NDArray[np.int64] = np.zeros(0 if self._table is None else self._table.capacity, np.int64)
        # Arrivals: additions commute, so one run per kind, counted in bulk (see _on_keys).
        self._arrivals = Arrivals(
            [self.dtype, self._record_dtype],
            [self.pending_bytes // self.dtype.itemsize, self.pending_bytes // self._record_dtype.itemsize],
            self._count_run,
            ordered=False,
        )
        # The sender's plain keys (those not combined), waiting to leave together (see the module).
        self._waiting = _Batch(self.dtype, max(1, self.send_batch_bytes // self.dtype.itemsize))
        # The sender's combining (see the module): plain batches until the next sample, and the hot keys.
        self._until_sample = 0
        self._sample_interval = 0  # adds from a sample to the next: sample_every, doubled while nothing combines
        self._hot: _HotKeys | None = None
        # The hot keys' counts held across adds, by slot of the hot table (float64: a bincount's weights, exact
        # below 2**53), sent at the next flush or barrier; None while nothing is held.
        self._hot_held: npt.NDArray[Any] | None = None
        self._held_batches = 0  # the batches whose hot keys' counts are held
        self._adds = self._channel(self._record_dtype, self._on_pairs, "adds")
        self._plain = self._channel(self.dtype, self._on_plain, "keys")
        self._counter = Lookup(self, self.dtype, np.dtype(np.int64), self._counts_of, "count")
        _hold_on(self.channels, weakref.ref(self))

    @property
    def dense(self) -> bool:
        """Whether this rank counts its keys in a dense array (integer keys in a narrow range; see the module),
        rather than in a hash table.  Local, and as of the last time this rank counted its arrivals."""
        return self._table is None

    # -- asynchronous: the sender --------------------------------------------

    def add(self, keys: npt.ArrayLike) -> None:
        """Count each key of the 1-D batch *keys* once more (asynchronous; YGM's ``async_insert``).

        Each key goes to its owner as a plain key, or with its duplicates combined into one ``(count, key)``
        record, or, for a hot key, into a count held on this rank until the next flush or barrier (see the
        module's *Combining*).  The next ``rail.barrier()`` or collective completes it.  Allowed inside
        handlers.  Raises before anything is sent: ``TypeError`` for keys of another dtype numpy does not cast
        safely, ``ValueError`` unless 1-D.
        """
        keys = self._keys(keys, "add")
        for part in self._parts(len(keys)):  # a sample then sorts a part, not a batch of millions
            self._add_batch(keys[part])

    def _add_batch(self, keys: npt.NDArray[Any]) -> None:
        if self._until_sample == 0:
            self._add_sample(keys)
            return
        self._until_sample -= 1
        if self._hot is None:
            self._send_plain(keys)
        else:
            # The words of 8-byte keys are the keys themselves: no key_words call (its checks cost per batch).
            words = keys.view(np.uint64).reshape(-1, 1) if self._own_words else key_words(keys)
            self._add_hot(keys, words, self._hot)

    def _hot_hashes(self, words: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        """The hash the hot table files keys by: for one-word keys their word times an odd constant (a bijection,
        one operation, its high bits well spread: Knuth's multiplicative hash), else
        :func:`~mailrail.containers.partition.hash_words`."""
        return words[:, 0] * _SEED if self._width == 1 else hash_words(words)

    def _saves(self, plain: int, pairs: int, keys: int) -> bool:
        """Whether sending *plain* keys and *pairs* records for a batch of *keys* saves the threshold's bytes."""
        sent = plain * self.dtype.itemsize + pairs * self._record_dtype.itemsize
        return sent <= (1 - self.combine_threshold) * keys * self.dtype.itemsize

    def _add_sample(self, keys: npt.NDArray[Any]) -> None:
        """Combine the batch exactly, send it, and decide how the next batches go (see the module)."""
        carried = self._still_hot()
        self._send_held()  # the held counts are by slot of the hot table, which the sample replaces
        unique, counts, words = distinct_keys(keys)
        owners = self.partitioner.owner_of_words(words)
        repeated = counts > 1
        pairs = int(np.count_nonzero(repeated))
        single = ~repeated
        self._plain.send(owners[single], unique[single])
        self._send_pairs(owners[repeated], unique[repeated], counts[repeated])
        combining = self._saves(len(unique) - pairs, pairs, len(keys))
        self._sample_interval = self._next_sample_interval(combining)
        self._until_sample = self._sample_interval - 1
        self._hot = self._hot_keys(unique, counts, words, owners, carried) if combining else None

    def _next_sample_interval(self, combining: bool) -> int:
        """Adds from this sample to the next: ``sample_every`` while combining pays; else twice the last interval,
        up to ``sample_every_max``.  Samples that find nothing to combine come half as often each time: a sample
        (a sort, then its send) costs several plain sends of its batch, which keys that never repeat would pay for
        nothing."""
        if combining:
            return self.sample_every
        return min(max(2 * self._sample_interval, self.sample_every), self.sample_every_max)

    def _add_hot(self, keys: npt.NDArray[Any], words: npt.NDArray[np.uint64], hot: _HotKeys) -> None:
        """Add the batch's hot keys to the counts held on the sender (or, inside a barrier, send one record per
        hot key at once), send the others as plain keys.  One-word keys go through :func:`~.hot.split_hot`
        (compiled, one pass); longer ones through a few numpy calls, whose fixed cost on batches of thousands
        of keys is what combining must win back."""
        in_barrier = self.channels.in_barrier  # nothing may stay behind: this batch's hot keys go now
        held = self._hot_held
        # Counted into the held counts before anything is sent: a handler run by a send may swap the table.
        tally = np.zeros(len(hot.hashes)) if in_barrier or held is None else held
        if self._width == 1:
            cold = np.empty(len(keys), dtype=np.int64)
            cold = cold[: split_hot(words[:, 0], hot.hashes, int(hot.shift), tally, cold)]
        else:
            hashes = self._hot_hashes(words)
            slot = (hashes >> hot.shift).view(np.int64)
            is_hot = hot.hashes[slot] == hashes
            candidates = np.flatnonzero(is_hot)  # equal hashes of longer keys: confirm on the words
            same = (hot.words[slot[candidates]] == words[candidates]).all(axis=1)
            is_hot[candidates[~same]] = False
            tally += np.bincount(slot, weights=is_hot, minlength=len(hot.hashes))  # float64: exact below 2**53
            cold = (~is_hot).nonzero()[0]  # positions, then gathers: masks (random branches) cost several times more
        if in_barrier:
            self._send_tally(hot, tally)
        elif held is None:
            self._hot_held, self._held_batches = tally, 1
        else:
            self._held_batches += 1
        self._send_plain(keys[cold])
        if not self._saves(len(cold), 0, len(keys)):
            self._until_sample = 0  # the hot keys went cold: sample the next batch

    def _send_tally(self, hot: _HotKeys, tally: npt.NDArray[Any]) -> None:
        """Send one ``(count, key)`` record per hot key with a count in *tally* (by slot of *hot*)."""
        present = tally.nonzero()[0]
        records = hot.records[present]
        records["count"] = tally[present]
        self._adds.send(hot.owners[present], records)

    def _send_plain(self, keys: npt.NDArray[Any]) -> None:
        """Plain keys wait on the sender for more (see the module's *Plain keys wait*); inside a barrier, or too
        many to wait, they leave now, after those waiting."""
        if self.channels.in_barrier or not self._waiting.append(keys):
            self._send_waiting()
            self._send_now(keys)

    def _send_now(self, keys: npt.NDArray[Any]) -> None:
        self._plain.send(self.partitioner.owner(keys), keys)

    def _send_waiting(self) -> None:
        """Send the plain keys waiting on the sender."""
        self._waiting.send(self._send_now)

    def _send_held(self) -> None:
        """Send what the sender holds: the plain keys waiting, the hot keys' counts (the rail's channels call it at
        every flush and barrier)."""
        self._send_waiting()
        held, hot = self._hot_held, self._hot
        if held is None:
            return
        self._hot_held = None  # first: an add from a handler run while they leave holds afresh
        assert hot is not None
        self._send_tally(hot, held)

    def _held_records(self) -> int:
        """How many keys and ``(count, key)`` records the sender holds (``finalize()`` reports them as staged)."""
        held = 0 if self._hot_held is None else int(np.count_nonzero(self._hot_held))
        return held + self._waiting.fill

    def _still_hot(self) -> _Candidates | None:
        """The hot keys held at least twice since the table was made, with their count per batch: a sample sees
        one batch, and keys that repeat across batches but not within one are worth holding too."""
        hot, held = self._hot, self._hot_held
        if hot is None or held is None:
            return None
        kept = np.flatnonzero(held >= 2)
        words = hot.words[kept] if self._width > 1 else np.zeros((len(kept), 0), dtype=np.uint64)
        rates = held[kept] / self._held_batches
        return _Candidates(hot.records["key"][kept], rates, words, hot.hashes[kept], hot.owners[kept])

    def _hot_keys(
        self,
        unique: npt.NDArray[Any],
        counts: npt.NDArray[np.int64],
        words: npt.NDArray[np.uint64],
        owners: npt.NDArray[Any],
        carried: _Candidates | None = None,
    ) -> _HotKeys | None:
        """The direct-mapped table of a sample's repeated keys and the *carried* hot keys of the last table, the
        most frequent first (the most frequent wins a shared slot; a key in both gets one slot)."""
        scores: npt.NDArray[Any] = counts
        hashes = self._hot_hashes(words)
        if carried is not None and len(carried.keys):
            scores = np.concatenate([scores, carried.rates])
            unique = np.concatenate([unique, carried.keys])
            if self._width > 1:
                words = np.concatenate([words, carried.words])
            hashes = np.concatenate([hashes, carried.hashes])
            owners = np.concatenate([owners, carried.owners.astype(owners.dtype)])
        if len(scores) == 0:
            return None
        ranked = np.argsort(-scores, kind="stable")[: self.hot_keys_max]
        slots = 16
        while slots < 2 * len(ranked):
            slots *= 2
        shift = np.uint64(64 - (slots.bit_length() - 1))
        slot = (hashes[ranked] >> shift).astype(np.intp)
        _, first = np.unique(slot, return_index=True)  # the first of each slot in `ranked`: its hottest key
        chosen, slot = ranked[first], slot[first]
        table_hashes = (np.arange(1, slots + 1, dtype=np.uint64) & np.uint64(slots - 1)) << shift
        table_hashes[slot] = hashes[chosen]
        records = np.zeros(slots, dtype=self._record_dtype)
        records["key"][slot] = unique[chosen]
        table_words = np.zeros((slots if self._width > 1 else 0, self._width), dtype=np.uint64)
        if self._width > 1:
            table_words[slot] = words[chosen]
        table_owners = np.zeros(slots, dtype=owners.dtype)
        table_owners[slot] = owners[chosen]
        return _HotKeys(shift, table_hashes, records, table_words, table_owners)

    def _send_pairs(self, owners: npt.NDArray[Any], keys: npt.NDArray[Any], counts: npt.NDArray[np.int64]) -> None:
        if len(keys) == 0:
            return
        # zeros for structured keys with padding: the record's padding stays clean
        records = (np.zeros if self._padded else np.empty)(len(keys), dtype=self._record_dtype)
        records["count"] = counts
        records["key"] = keys
        self._adds.send(owners, records)

    # -- asynchronous: the owner ---------------------------------------------

    def _on_plain(self, source: int, keys: npt.NDArray[Any]) -> None:
        # A datagram holds thousands of keys at most: counting per datagram would cost more in numpy calls than
        # in work, so arrivals wait, counted in bulk when enough are there or before a read.  Additions
        # commute: when they are applied does not change any count.
        self._arrivals.add(_PLAIN, keys)

    def _on_pairs(self, source: int, records: npt.NDArray[Any]) -> None:
        self._arrivals.add(_PAIRS, records)

    def _apply_arrivals(self) -> None:
        """Count the arrivals waiting: called before anything reads the local counts."""
        self._arrivals.apply_all()

    def _count_run(self, run: Run) -> None:
        if run.kind == _PLAIN:
            self._count(run.records, run.records[:0], np.zeros(0, dtype=np.int64))
        else:
            self._count(run.records["key"][:0], run.records["key"], run.records["count"])

    def _count(
        self,
        plain: npt.NDArray[Any],
        pair_keys: npt.NDArray[Any],
        pair_counts: npt.NDArray[np.int64],
    ) -> None:
        """Add one to the count of each of the *plain* keys, and *pair_counts* to those of *pair_keys*."""
        if self._table is None and self._count_dense(plain, pair_keys, pair_counts):
            return
        table = self._table if self._table is not None else self._to_table()
        for keys, counts in ((plain, None), (pair_keys, pair_counts)):
            if len(keys) == 0:
                continue
            index = table.insert(keys).dense
            distinct = len(table)
            if distinct > len(self._counts):
                grown = np.zeros(max(2 * len(self._counts), distinct), dtype=np.int64)
                grown[: len(self._counts)] = self._counts
                self._counts = grown
            if counts is not None:
                np.add.at(self._counts, index, counts)
            elif 8 * len(keys) >= distinct:  # a bincount costs the table's length: for large batches only
                self._counts[:distinct] += np.bincount(index, minlength=distinct)
            else:
                np.add.at(self._counts, index, 1)

    def _blocks(self, keys: npt.NDArray[Any]) -> npt.NDArray[np.uint64]:
        """The partitioner's block of each integer key this rank owns (distinct per key): its index in the dense
        counts, before the base.  A fresh array."""
        if self._own_words:
            return self.partitioner.block(keys.view(np.uint64))
        return self.partitioner.block(keys.view(self._word_uint).astype(np.uint64))

    def _count_dense(
        self,
        plain: npt.NDArray[Any],
        pair_keys: npt.NDArray[Any],
        pair_counts: npt.NDArray[np.int64],
    ) -> bool:
        """Count into the dense array, grown to cover the keys; False (nothing counted) if they spread too wide."""
        plain_blocks = self._blocks(plain)
        pair_blocks = self._blocks(pair_keys)
        plain_bounds = (int(plain_blocks.min()), int(plain_blocks.max())) if len(plain_blocks) else None
        pair_bounds = (int(pair_blocks.min()), int(pair_blocks.max())) if len(pair_blocks) else None
        bounds = [span for span in (plain_bounds, pair_bounds) if span is not None]
        if not bounds:
            return True
        fresh = self._dense is None
        if not self._cover(min(low for low, _ in bounds), max(high for _, high in bounds)):
            return False
        dense = self._dense
        assert dense is not None
        if plain_bounds is not None:
            # One bincount over the blocks' own range, added to that stretch of the counts; the first time, over the
            # whole dense array, which it then becomes (no second array of counts to fill).
            low, high = (self._base, self._base + len(dense) - 1) if fresh else plain_bounds
            offsets = np.subtract(plain_blocks, np.uint64(low), out=plain_blocks).view(np.int64)
            start = low - self._base
            if 4 * len(offsets) < high - low + 1:  # few keys over a wide range: a bincount would cost the range
                np.add.at(dense, offsets + start, 1)
            else:
                counted = np.bincount(offsets, minlength=high - low + 1)
                if fresh:
                    self._dense = dense = counted
                else:
                    dense[start : start + high - low + 1] += counted
        if pair_bounds is not None:
            np.add.at(dense, (pair_blocks - np.uint64(self._base)).view(np.int64), pair_counts)
        return True

    def _cover(self, low: int, high: int) -> bool:
        """Grow the dense array to cover the blocks *low* to *high*, unless it would span too many (see the
        module): then False, nothing changed.  It grows by half again on the side it grows, for keys to come."""
        dense, base = self._dense, self._base
        if dense is None:
            new_low, new_high, counted = low, high, 0
        else:
            if base <= low and high < base + len(dense):
                return True
            new_low, new_high = min(low, base), max(high, base + len(dense) - 1)
            counted = int(np.count_nonzero(dense))
        span = new_high - new_low + 1
        if span > max(self.dense_extent, self.dense_spread * counted):
            return False
        if dense is not None:
            if new_low < base:
                new_low = max(0, new_low - span // 2)
            if new_high >= base + len(dense):
                new_high = min(self._block_max, new_high + span // 2)
        grown = np.zeros(new_high - new_low + 1, dtype=np.int64)
        if dense is not None:
            grown[base - new_low : base - new_low + len(dense)] = dense
        self._dense, self._base = grown, new_low
        return True

    def _keys_at(self, offsets: npt.NDArray[np.intp]) -> npt.NDArray[Any]:
        """This rank's keys at *offsets* of the dense array, in the set's dtype."""
        blocks = offsets.astype(np.uint64) + np.uint64(self._base)
        return keys_of_words(self.partitioner.words_of(blocks, self.rank).reshape(-1, 1), self.dtype)

    def _to_table(self) -> KeyTable:
        """Move the dense counts into a table, for good: the keys spread too wide for a dense array."""
        dense = self._dense
        present = np.flatnonzero(dense) if dense is not None else np.zeros(0, dtype=np.intp)
        table = KeyTable(self.dtype, capacity=max(1024, 2 * len(present)))
        self._counts = np.zeros(table.capacity, dtype=np.int64)
        if dense is not None:
            self._counts[table.insert(self._keys_at(present)).dense] = dense[present]
        self._table, self._dense = table, None
        return table

    def _counted(self) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
        """This rank's keys and counts, counted arrivals only (views of the table's, or fresh arrays)."""
        if self._table is not None:
            return self._table.keys, self._counts[: len(self._table)]
        if self._dense is None:
            return np.zeros(0, dtype=self.dtype), np.zeros(0, dtype=np.int64)
        present = np.flatnonzero(self._dense)
        return self._keys_at(present), self._dense[present]

    def _distinct(self) -> int:
        """How many keys this rank holds, counted arrivals only."""
        if self._table is not None:
            return len(self._table)
        return 0 if self._dense is None else int(np.count_nonzero(self._dense))

    def _total(self) -> int:
        """The sum of this rank's counts, counted arrivals only."""
        if self._table is not None:
            return int(self._counts[: len(self._table)].sum())
        return 0 if self._dense is None else int(self._dense.sum())

    # -- collective ----------------------------------------------------------

    def _counts_of(self, keys: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """This rank's count of each of *keys* (0 for a key it does not hold)."""
        self._apply_arrivals()
        counts = np.zeros(len(keys), dtype=np.int64)
        if self._table is not None:
            index = self._table.lookup(keys)
            found = index >= 0
            counts[found] = self._counts[index[found]]
        elif self._dense is not None:  # the keys are this rank's (a Lookup asks their owner): blocks are distinct
            blocks = self._blocks(keys)
            low, high = np.uint64(self._base), np.uint64(self._base + len(self._dense) - 1)
            inside = np.flatnonzero((blocks >= low) & (blocks <= high))
            counts[inside] = self._dense[(blocks[inside] - low).view(np.int64)]
        return counts

    @collective
    def count(self, keys: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Collective: the count of each key of the 1-D batch *keys*, wherever it lives, in the caller's order
        (``int64``; 0 for a key never added).  Each rank asks about its own batch (empty if it has none).
        YGM's ``count`` (one key, collective)."""
        keys = self._keys(keys, "count")
        self._collective("count")
        return self._counter.ask(keys, self.partitioner.owner(keys))

    @collective
    def top(self, k: int) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
        """Collective: the *k* keys with the highest counts and their counts, ``(keys, counts)``, in descending
        order of count, ties in ascending order of the keys' bytes: the same arrays on every rank (fewer than
        *k* when fewer keys were added).  Each rank sends its own top *k* to every rank, which merge them.
        YGM's ``topk``."""
        k = self._top_k(k)
        self._collective("top")
        keys, counts = self._local_top(k)
        gathered = self.channels.allgather((keys, counts))
        all_keys = np.concatenate([theirs[0] for theirs in gathered])
        all_counts = np.concatenate([theirs[1] for theirs in gathered])
        best = ranked(all_keys, all_counts)[:k]  # a key lives on one rank: no duplicates to combine
        return canonical(all_keys[best]), all_counts[best]

    def _top_k(self, k: int) -> int:
        try:
            k = operator.index(k)
        except TypeError:
            raise TypeError(f"{self.kind}.top(): k must be an integer, got {type(k).__name__} {k!r}") from None
        if k < 0:
            raise ValueError(f"{self.kind}.top(): k must be >= 0, got {k}")
        return k

    def _local_top(self, k: int) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64]]:
        """This rank's top *k* in the global order (count descending, ties by key bytes), as copies."""
        self._apply_arrivals()
        keys, counts = self._counted()
        distinct = len(keys)
        if k == 0:
            return keys[:0].copy(), counts[:0].copy()
        if k < distinct:
            # The k-th largest count: everything above it is in, ties at it are decided by their bytes.
            threshold = np.partition(counts, distinct - k)[distinct - k]
            candidates = np.flatnonzero(counts >= threshold)
            keys, counts = keys[candidates], counts[candidates]
        best = ranked(keys, counts)[:k]
        return keys[best].copy(), counts[best].copy()

    @collective
    def size(self) -> int:
        """Collective: how many distinct keys the set holds (YGM's ``size``)."""
        self._collective("size")
        self._apply_arrivals()
        return self.channels.allreduce_sum(self._distinct())

    @collective
    def total(self) -> int:
        """Collective: the sum of all counts: how many keys were added in all (YGM: a ``for_all`` sum)."""
        self._collective("total")
        self._apply_arrivals()
        return self.channels.allreduce_sum(self._total())

    @collective
    def clear(self) -> None:
        """Collective: empty the set on every rank (YGM's ``clear``), keeping its memory for what comes next.

        Every add issued before it, on any rank, is completed and then forgotten with the rest.
        """
        self._collective("clear")
        self._arrivals.clear()
        self._waiting.release()
        self._hot_held = None
        self._held_batches = 0
        if self._dense is not None:
            self._dense[:] = 0  # the pages stay mapped: the next counts do not fault them in again
        if self._table is not None:
            self._table.clear()
            self._counts[:] = 0
        # A rank that left the barrier first may already add again, and a slower rank still in it would take
        # those adds into the buffers just emptied: no rank adds again before every rank has cleared.
        self.channels.allreduce_sum(0)

    # -- local ---------------------------------------------------------------

    def local(self) -> Any:
        """This rank's keys and their counts, a ``pyarrow.Table`` of columns ``key`` and ``count`` (``int64``), in
        no particular order (not collective: no pending ``add`` is completed; call ``rail.barrier()`` first to see
        them).  YGM's ``for_all`` over the local part."""
        self._apply_arrivals()
        keys, counts = self._counted()
        return table_of({"key": canonical(keys.copy()), "count": counts.copy()})

    def _absorb(self, table: Any, where: str) -> None:
        keys = self._keys(numpy_column(table.column(0), self.dtype), "collect")
        if "count" not in table.column_names:
            self.add(keys)
            return
        counts = np.asarray(table.column("count").to_numpy(), dtype=np.int64)
        self._send_pairs(self.partitioner.owner(keys), keys, counts)

    def __repr__(self) -> str:
        return f"<CountingSet of {self.dtype} on rank {self.rank}: {self._distinct()} local keys>"


#: A string's ``(count, string)`` record: the count is the fixed-size part, the string travels beside it.
_COUNT = np.dtype([("count", np.int64)])
_NOTHING = np.dtype([])


def _room_for(counts: npt.NDArray[np.int64], needed: int) -> npt.NDArray[np.int64]:
    """*counts*, or a copy grown to at least twice its length when it has fewer than *needed* entries."""
    if needed <= len(counts):
        return counts
    grown = np.zeros(max(2 * len(counts), needed), dtype=np.int64)
    grown[: len(counts)] = counts
    return grown


class StringCountingSet(CountingSet):
    """``CountingSet(rail, str)`` or ``CountingSet(rail, bytes)``: counts of strings of any length.

    The same operations as :class:`CountingSet` over strings (see :mod:`mailrail.containers.keys` for what a
    batch may be); ``top`` returns its keys as a pyarrow array.  Owners count in a
    :class:`~mailrail.containers.keys.StringTable` (compiled: open addressing over an arena of bytes).

    **Combining.**  A sender counts the strings it meets often in a cache of its own (a
    :class:`~mailrail.containers.varkeys.HotStrings`: ``hot_slots`` slots of one cache line, a string of up to 40
    bytes in each, one compiled pass per batch), and its counts leave as ``(count, string)`` records at the next
    flush or barrier.  Other strings (those of a slot a more frequent one holds, those a slot gives up, those
    longer than 40 bytes) leave as records too, ``leaving_max`` of them together: a string costs more than a
    number to send and to count (its bytes, a table probe by hash and bytes rather than a dense array), so the
    frequent strings are counted where they are met, in a cache of fixed size (4 MiB at the default ``hot_slots``,
    made at the first add), not a table of every string the sender has seen; a flush or barrier visits only the
    slots that hold a count.  When a batch counted less than ``combine_threshold`` of its strings in the cache
    (strings that rarely repeat), the next adds go as plain strings, twice as many each time (from
    ``sample_every`` up to ``sample_every_max``), before the sender tries the cache again.
    """

    #: The sender's cache of frequent strings, in slots of one string each (see the class).
    hot_slots = 1 << 16
    #: Records a sender lets gather before they leave together (see the class).
    leaving_max = 1 << 14

    @collective
    def __init__(self, rail: Rail, kind: type) -> None:  # (CountingSet.__init__'s setup is for fixed-size keys)
        Container.__init__(self, rail)
        self._strings = Strings(kind)
        #: ``str`` or ``bytes``.
        self.dtype = kind  # type: ignore[assignment]
        self._string_table = StringTable()
        self._counts = np.zeros(1024, dtype=np.int64)
        self._arrivals = Arrivals(
            [_NOTHING, _COUNT],
            [self.pending_bytes // 16, self.pending_bytes // 24],
            self._count_run,
            ordered=False,
            blobs=frozenset({_PLAIN, _PAIRS}),
        )
        # The sender's combining (see the class).
        self._hot_strings: Any = None  # made at the first add: a set that only receives needs none
        self._plain_adds = 0  # adds left to send as plain strings
        self._sample_interval = 0
        self._adds = self._channel(_COUNT, self._on_string_pairs, "adds", blobs=True)
        self._plain = self._channel(_NOTHING, self._on_string_plain, "keys", blobs=True)
        self._counter = Lookup(self, self._strings, np.dtype(np.int64), self._counts_of, "count")
        _hold_on(self.channels, weakref.ref(self))

    @property
    def dense(self) -> bool:
        return False

    # -- the sender --------------------------------------------------------------

    def add(self, keys: Any) -> None:
        """Count each string of the batch *keys* once more (asynchronous; see :meth:`CountingSet.add`).  Raises
        before anything is sent: ``TypeError`` for keys of another type, ``ValueError`` for nulls,
        :class:`~mailrail.errors.MessageSizeError` for a string longer than a datagram takes (naming both)."""
        blobs = self._string_keys(keys, "add")
        if blobs.count == 0:
            return
        if self.channels.in_barrier or self._plain_adds:  # nothing may stay behind in a barrier
            self._plain_adds = max(0, self._plain_adds - 1)
            self._plain.send(Strings.owners(blobs, self.partitioner), None, blobs)
            return
        if self._hot_strings is None:
            self._hot_strings = varkeys.HotStrings(self.hot_slots, self.partitioner.size)
        counted = self._hot_strings.hold(blobs.offsets, blobs.data)
        combining = counted >= self.combine_threshold * blobs.count  # else strings that rarely repeat
        self._sample_interval = self._next_sample_interval(combining)
        if not combining:  # plain adds for a while
            self._plain_adds = self._sample_interval
        if self._hot_strings.leaving >= self.leaving_max:
            self._send_leaving()

    def _send_held(self) -> None:
        """Send every string held with its count (the rail's channels call it at every flush and barrier)."""
        self._send_leaving(everything=True)

    def _send_leaving(self, everything: bool = False) -> None:
        """Send the records leaving the cache, and with *everything* its held counts too (see the class)."""
        hot = self._hot_strings
        if hot is None or not (hot.leaving or (everything and len(hot))):  # nothing to send (a flush's usual case)
            return
        offsets, data, counts, per_owner = hot.take(everything)
        records = np.empty(len(counts), dtype=_COUNT)
        records["count"] = counts
        # Grouped by owner already: each owner's records leave in one send of their own, nothing to sort or copy.
        for owner, start, end in spans_in_turn(per_owner, self.rank):
            part = Blobs(offsets[start : end + 1], data)
            self._adds.send(np.full(end - start, owner, dtype=np.int64), records[start:end], part, copy=False)

    def _held_records(self) -> int:
        hot = self._hot_strings
        return 0 if hot is None else len(hot) + hot.leaving

    # -- the owner ---------------------------------------------------------------

    def _on_string_plain(self, source: int, records: npt.NDArray[Any], blobs: Blobs) -> None:
        self._arrivals.add(_PLAIN, records, blobs)

    def _on_string_pairs(self, source: int, records: npt.NDArray[Any], blobs: Blobs) -> None:
        self._arrivals.add(_PAIRS, records, blobs)

    def _count_run(self, run: Run) -> None:
        assert run.blobs is not None
        table = self._string_table
        self._counts = _room_for(self._counts, len(table) + run.blobs.count)
        table.count(run.blobs, self._counts, run.records["count"] if run.kind == _PAIRS else None)

    def _counts_of(self, keys: Any) -> npt.NDArray[np.int64]:
        self._apply_arrivals()
        table = self._string_table
        index = table.lookup(keys)
        counts = np.zeros(len(index), dtype=np.int64)
        found = index >= 0
        counts[found] = self._counts[index[found]]
        return counts

    def _counted(self) -> tuple[Any, npt.NDArray[np.int64]]:
        table = self._string_table
        return table.keys(), self._counts[: len(table)]

    def _distinct(self) -> int:
        return len(self._string_table)

    def _total(self) -> int:
        return int(self._counts[: len(self._string_table)].sum())

    # -- collective ----------------------------------------------------------------

    @collective
    def count(self, keys: Any) -> npt.NDArray[np.int64]:
        """Collective: the count of each string of the batch *keys* (``int64``, 0 for a key never added), in the
        caller's order."""
        blobs = self._string_keys(keys, "count")
        self._collective("count")
        return self._counter.ask(blobs, Strings.owners(blobs, self.partitioner))

    @collective
    def top(self, k: int) -> tuple[Any, npt.NDArray[np.int64]]:
        """Collective: the *k* strings with the highest counts, as a pyarrow array, and their counts, descending,
        ties in ascending order of the strings' bytes: the same on every rank."""
        k = self._top_k(k)
        self._collective("top")
        keys, counts = self._local_top(k)
        gathered = self.channels.allgather((keys, counts))
        import pyarrow as pa

        all_keys = pa.concat_arrays([theirs[0] for theirs in gathered])
        all_counts = np.concatenate([theirs[1] for theirs in gathered])
        best = string_ranked(all_keys, all_counts)[:k]
        return all_keys.take(best), all_counts[best]

    def _local_top(self, k: int) -> tuple[Any, npt.NDArray[np.int64]]:
        self._apply_arrivals()
        blobs, counts = self._counted()
        keys = self._strings.arrow(blobs)  # type: ignore[union-attr]
        if k < len(counts):
            threshold = np.partition(counts, len(counts) - k)[len(counts) - k]
            candidates = np.flatnonzero(counts >= threshold)
            keys, counts = keys.take(candidates), counts[candidates]
        best = string_ranked(keys, counts)[:k]
        return keys.take(best), counts[best].copy()

    @collective
    def clear(self) -> None:
        """Collective: empty the set on every rank, as :meth:`CountingSet.clear`."""
        self._collective("clear")
        self._arrivals.clear()
        if self._hot_strings is not None:
            self._hot_strings.clear()
        self._string_table.clear(keep=True)
        self._counts[:] = 0
        self.channels.allreduce_sum(0)

    def local(self) -> Any:
        """This rank's strings and their counts, a ``pyarrow.Table`` of columns ``key`` and ``count``, in no
        particular order (not collective: call ``rail.barrier()`` first to see every add)."""
        self._apply_arrivals()
        blobs, counts = self._counted()
        return table_of({"key": self._strings.arrow(blobs), "count": counts.copy()})  # type: ignore[union-attr]

    def _absorb(self, table: Any, where: str) -> None:
        keys = self._string_keys(table.column(0), "collect")
        if "count" not in table.column_names:
            self.add(table.column(0))
            return
        records = np.empty(keys.count, dtype=_COUNT)
        records["count"] = np.asarray(table.column("count").to_numpy(), dtype=np.int64)
        self._adds.send(Strings.owners(keys, self.partitioner), records, keys)

    def __repr__(self) -> str:
        return f"<CountingSet of {self._strings} on rank {self.rank}: {self._distinct()} local keys>"
