"""A vectorized hash set of fixed-dtype keys with dense storage: the index every container is built on.

A rank's share of a distributed container (a counting set, a map, a set...) receives operations in batches of
thousands of keys; a Python ``dict`` would cost a Python step per key.  :class:`KeyTable` does each batch in a
few numpy passes: open addressing with linear probing over a power-of-two slot array, where each *round*
advances every still-unresolved key of the batch by one slot at once.  Load stays at most 1/2, so rounds are
few (a handful on average, a few dozen at worst for millions of keys).

Keys live *densely* at indices ``0..len-1`` (new keys appended in batch order): a container keeps its values in
its own numpy arrays indexed by that dense index (``counts[index] += 1``), and the table tells it how entries move
when keys are erased (:meth:`KeyTable.erase`).  Keys are compared and hashed by their bytes (see
:mod:`mailrail.containers.partition`: ``0.0`` and ``-0.0`` are different keys, structured padding is ignored).

Slots hold ``dense index + 1``; 0 is an empty slot and -1 a *tombstone* (an erased key's slot, which probes
pass over).  A tombstone whose next slot is empty is turned back into an empty slot at once (no probe can need
to pass it), the rest are purged when the table is rebuilt.  The slot of a key is taken from the *low* bits of
its hash: :class:`~mailrail.containers.partition.HashPartitioner` chooses the owning rank from the *high* bits,
so a rank's keys still spread over all of its slots.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from .partition import as_keys, has_padding, hash_words, key_words, words_per_key

__all__ = ["Erased", "Inserted", "KeyTable"]

_EMPTY = 0
_TOMBSTONE = -1
#: The fewest slots a table has.
MIN_SLOTS = 16
#: Tombstones freed per erase are found walking back along runs of them; longer runs wait for a rebuild.
_MAX_TOMBSTONE_ROUNDS = 64

_Index = npt.NDArray[np.int64]


class Inserted(NamedTuple):
    """What :meth:`KeyTable.insert` did for each key of the batch."""

    #: The dense index of each key (int64), existing or just added.
    dense: _Index
    #: Whether this position added its key (bool): only the first occurrence of a key new to the table.
    new: npt.NDArray[np.bool_]


class Erased(NamedTuple):
    """What :meth:`KeyTable.erase` did: which keys went, and how the dense entries moved to stay compact.

    A container keeps parallel value arrays aligned with ``values[moved_to] = values[moved_from]`` followed by
    ``values = values[:len(table)]``.  Each of ``moved_from``/``moved_to`` holds distinct indices, every
    ``moved_to`` is below the new length and every ``moved_from`` at or above it (they never overlap, so the
    one fancy assignment is safe); ``moved_to`` are the erased keys' old indices below the new length, and
    ``moved_from`` the surviving indices at or above it, both ascending (the last survivors fill the holes).
    """

    #: Whether this position erased its key (bool): only the first occurrence of a key that was present.
    removed: npt.NDArray[np.bool_]
    #: Dense indices whose entries moved (int64, ascending, each >= the new length).
    moved_from: _Index
    #: Where each of them moved (int64, ascending, each < the new length: an erased key's old index).
    moved_to: _Index


def _slots_for(keys: int, load_eighths: int) -> int:
    """The fewest slots (a power of two, at least MIN_SLOTS) holding *keys* at a load of at most eighths/8."""
    slots = MIN_SLOTS
    while keys * 8 > slots * load_eighths:
        slots *= 2
    return slots


class KeyTable:
    """A set of keys of one fixed *dtype*, each with a stable dense index ``0..len-1`` (see the module).

    *capacity* keys fit before the first growth.  The table grows (doubling, all keys rehashed at once) to keep
    the load, live keys plus tombstones, at most 1/2; it does not shrink except by :meth:`clear`.  After a
    rebuild the load is at most 3/8, so at least 1/8 of the slots are inserted before the next: rebuilding stays
    amortized O(1) per key even when erasing and inserting keep adding tombstones.  Other work is proportional to
    the batch, never to the table.

    Batches are 1-D arrays of *dtype*; other dtypes are cast when numpy casts them safely (``int32`` keys into an
    ``int64`` table, ``S5`` into ``S16``), else refused with ``TypeError``.
    """

    def __init__(self, dtype: npt.DTypeLike, capacity: int = 1024) -> None:
        self.dtype: np.dtype[Any] = np.dtype(dtype)
        if self.dtype.hasobject or self.dtype.itemsize == 0:
            raise TypeError(f"keys must have a fixed-size dtype (numbers, fixed-width bytes, records); got {dtype}")
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0; got {capacity}")
        self._width = words_per_key(self.dtype)
        # Keys a multiple of 8 bytes long are kept in their canonical words (uint64, float64, S16...); others apart,
        # as raw bytes (a void dtype: numpy copies records field by field, which is slower and skips padding).
        self._shared = self.dtype.itemsize == 8 * self._width
        self._padded = has_padding(self.dtype)  # then kept as their canonical bytes: padding zeroed
        self._raw_dtype = np.dtype((np.void, self.dtype.itemsize))
        self._initial_slots = _slots_for(capacity, 4)
        self._allocate(self._initial_slots)

    # -- storage -------------------------------------------------------------

    def _allocate(self, slots: int) -> None:
        """Fresh, empty arrays for *slots* slots: dense storage for slots/2 keys, the most the load allows."""
        # int32 slots halve the memory the probes gather from while slot numbers fit (below 2**30 keys).
        small = slots <= 1 << 31
        self._slots: npt.NDArray[np.signedinteger[Any]] = np.zeros(slots, dtype=np.int32 if small else np.int64)
        self._mask = slots - 1
        dense = slots // 2
        self._words: npt.NDArray[np.uint64] = np.zeros((dense, self._width), dtype=np.uint64)
        self._raw: npt.NDArray[np.void] = (
            self._words.view(self._raw_dtype).reshape(dense) if self._shared else np.zeros(dense, self._raw_dtype)
        )
        self._keys: npt.NDArray[Any] = self._raw.view(self.dtype)
        # each dense entry's slot, for moving it
        self._slot_of: npt.NDArray[np.signedinteger[Any]] = np.zeros(dense, dtype=np.int32 if small else np.int64)
        # What probes compare, one uint64 per key: a one-word key itself, else its hash (equal hashes are then
        # confirmed on the whole key, once per hit rather than once per probed slot).
        self._fingerprints: npt.NDArray[np.uint64] = (
            self._words[:, 0] if self._width == 1 else np.zeros(dense, dtype=np.uint64)
        )
        # The arrays indexed by dense index, which move together.
        self._dense_arrays: list[npt.NDArray[Any]] = [self._words, self._slot_of]
        if not self._shared:
            self._dense_arrays.append(self._raw)
        if self._width > 1:
            self._dense_arrays.append(self._fingerprints)
        self._size = 0
        self._tombstones = 0

    def _rebuild(self, slots: int) -> None:
        """Rehashes every key into *slots* fresh slots (tombstones dropped); dense indices do not change."""
        n = self._size
        old = [array[:n] for array in self._dense_arrays]
        hashes = hash_words(self._words[:n]) if self._width == 1 else self._fingerprints[:n]
        self._allocate(slots)
        for array, entries in zip(self._dense_arrays, old):
            array[:n] = entries
        self._size = n
        # Distinct keys: a key losing a slot to another, or finding one taken, just moves on.
        ids = np.arange(n, dtype=np.int64)
        pos = self._home(hashes)
        while ids.size:
            free = np.flatnonzero(self._slots[pos] == _EMPTY)
            self._slots[pos[free]] = ids[free] + 1  # several keys may write one slot: one of them wins
            won = free[self._slots[pos[free]] == ids[free] + 1]
            self._slot_of[ids[won]] = pos[won]
            moving = np.ones(ids.size, dtype=bool)
            moving[won] = False
            ids, pos = ids[moving], (pos[moving] + 1) & self._mask

    def _home(self, hashes: npt.NDArray[np.uint64]) -> _Index:
        """Each key's first slot: the low bits of its hash (the partitioner used the high ones)."""
        return (hashes & np.uint64(self._mask)).astype(np.int64)

    def _as_words(self, keys: npt.ArrayLike) -> tuple[npt.NDArray[np.void] | None, npt.NDArray[np.uint64]]:
        """The batch's canonical words (partition.key_words) and, where the table keeps keys apart from their
        words and without padding, its raw bytes (a void array)."""
        array = as_keys(keys)
        if array.dtype != self.dtype:
            if not np.can_cast(array.dtype, self.dtype, "safe"):
                raise TypeError(f"keys of dtype {array.dtype} do not cast safely to the table's dtype {self.dtype}")
            array = array.astype(self.dtype)
        array = np.ascontiguousarray(array)
        raw = None if self._shared or self._padded else array.view(self._raw_dtype)
        return raw, key_words(array)

    def _fingerprint(self, words: npt.NDArray[np.uint64], hashes: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        """The batch's fingerprints (see :meth:`_allocate`): its one-word keys, else their hashes."""
        return words[:, 0] if self._width == 1 else hashes

    def _equal(
        self, dense: _Index, fingerprints: npt.NDArray[np.uint64], words: npt.NDArray[np.uint64], rows: _Index
    ) -> npt.NDArray[np.bool_]:
        """Whether the stored keys at *dense* equal the keys with these *fingerprints*, whose words are
        ``words[rows]`` (looked at only to confirm equal hashes of keys longer than one word)."""
        equal: npt.NDArray[np.bool_] = self._fingerprints[dense] == fingerprints
        if self._width > 1:
            same_hash = np.flatnonzero(equal)
            confirmed = (self._words[dense[same_hash]] == words[rows[same_hash]]).all(axis=1)
            equal[same_hash[~confirmed]] = False
        return equal

    # -- probing -------------------------------------------------------------

    def _probe(self, words: npt.NDArray[np.uint64], hashes: npt.NDArray[np.uint64]) -> tuple[_Index, _Index]:
        """Each key's dense index (-1 if absent) and, for absent keys, the empty slot that ended its probe."""
        n = hashes.shape[0]
        query = self._fingerprint(words, hashes)
        index = np.full(n, -1, dtype=np.int64)
        stop = np.zeros(n, dtype=np.int64)
        active = np.arange(n, dtype=np.int64)
        pos = self._home(hashes)
        while active.size:
            slot = self._slots[pos]
            empty = slot == _EMPTY
            stop[active[empty]] = pos[empty]
            occupied = np.flatnonzero(slot > 0)
            dense = slot[occupied] - 1
            hit = self._equal(dense, query[occupied], words, active[occupied])
            index[active[occupied[hit]]] = dense[hit]
            going = ~empty
            going[occupied[hit]] = False
            active, query, pos = active[going], query[going], (pos[going] + 1) & self._mask
        return index, stop

    def lookup(self, keys: npt.ArrayLike) -> _Index:
        """The dense index of each key of the 1-D batch *keys* (int64), -1 where the key is absent."""
        _, words = self._as_words(keys)
        return self._probe(words, hash_words(words))[0]

    def __contains__(self, key: object) -> bool:
        """Whether one key is present (for tests and interactive use: batches go through :meth:`lookup`)."""
        return bool(self.lookup(np.asarray([key], dtype=self.dtype))[0] >= 0)

    # -- inserting -----------------------------------------------------------

    def insert(self, keys: npt.ArrayLike) -> Inserted:
        """Adds the keys of the 1-D batch *keys* that are absent: ``(dense, new)`` per position (see
        :class:`Inserted`).  New keys take the next dense indices in the order of their first occurrence in the
        batch; a key occurring several times is added once, at its first occurrence."""
        raw, words = self._as_words(keys)
        n = words.shape[0]
        hashes = hash_words(words)
        index, stop = self._probe(words, hashes)
        new = np.zeros(n, dtype=bool)
        missing = np.flatnonzero(index < 0)
        if missing.size == 0:
            return Inserted(index, new)
        # Room for them all (duplicates counted only when that decides whether to grow).
        room = self._mask // 2 + 1 - self._size - self._tombstones
        if missing.size > room:
            distinct = self._count_distinct(words[missing], hashes[missing])
            if distinct > room:
                self._rebuild(max(self._mask + 1, _slots_for(self._size + distinct, 3)))
                stop[missing] = self._home(hashes[missing])
        first = self._size
        self._claim(missing, words[missing], hashes[missing], stop[missing], index, raw)
        self._renumber(first, missing, index, new)
        return Inserted(index, new)

    def _count_distinct(self, words: npt.NDArray[np.uint64], hashes: npt.NDArray[np.uint64]) -> int:
        """How many distinct keys the rows of *words* hold: exactly, unless two of them have the same 64-bit hash,
        when it may count a few too many (the safe side: it only sizes the table).  A sort, not ``np.unique``,
        which hashes and is several times slower."""
        if words.shape[0] < 2:
            return int(words.shape[0])
        if self._width == 1:  # the hash is a bijection of one word: the words themselves sort as well
            ordered = np.sort(words[:, 0])
            return 1 + int(np.count_nonzero(ordered[1:] != ordered[:-1]))
        rows = words[np.argsort(hashes)]  # equal keys have equal hashes: neighbours after this sort
        return 1 + int(np.count_nonzero((rows[1:] != rows[:-1]).any(axis=1)))

    def _claim(
        self,
        missing: _Index,
        words: npt.NDArray[np.uint64],
        hashes: npt.NDArray[np.uint64],
        pos: _Index,
        index: _Index,
        raw: npt.NDArray[np.void] | None,
    ) -> None:
        """Gives each absent key (batch positions *missing*) a dense index: probing on from *pos*, it takes the
        first empty slot, or finds there a copy of itself that took it earlier in this batch.

        Keys reaching the same empty slot in one round all write a distinct negative marker into it; the one
        whose marker stays wins the slot, the losers look at that same slot again next round (where a copy of
        themselves may now sit).  Dense indices are handed out in claiming order: see :meth:`_renumber`.
        """
        active = np.arange(missing.size, dtype=np.int64)  # rows of words, hashes: of missing keys only
        query = self._fingerprint(words, hashes)
        while active.size:
            slot = self._slots[pos]
            empty = np.flatnonzero(slot == _EMPTY)
            occupied = np.flatnonzero(slot > 0)
            # Claims of empty slots.
            pos_empty = pos[empty]
            marker = -2 - active[empty]
            self._slots[pos_empty] = marker
            won = empty[self._slots[pos_empty] == marker]
            dense = np.arange(self._size, self._size + won.size, dtype=np.int64)
            pos_won = pos[won]
            self._slots[pos_won] = dense + 1
            self._slot_of[dense] = pos_won
            batch = missing[active[won]]
            self._store(dense, query[won], words[active[won]], None if raw is None else raw[batch])
            index[batch] = dense
            self._size += won.size
            # Occupied slots (read before this round's claims): a copy of the key that claimed it earlier?
            stored = slot[occupied] - 1
            hit = self._equal(stored, query[occupied], words, active[occupied])
            index[missing[active[occupied[hit]]]] = stored[hit]
            # Tombstones and other keys' slots: on to the next slot; claim losers: this slot again.
            going = np.ones(active.size, dtype=bool)
            going[won] = False
            going[occupied[hit]] = False
            step = slot != _EMPTY
            pos = (pos + step) & self._mask
            active, query, pos = active[going], query[going], pos[going]

    def _store(
        self,
        dense: _Index,
        fingerprints: npt.NDArray[np.uint64],
        words: npt.NDArray[np.uint64],
        raw: npt.NDArray[np.void] | None,
    ) -> None:
        """Writes keys at *dense*: their canonical words, fingerprints, and their bytes unless in the words (*raw*,
        or with padding, the canonical bytes)."""
        self._fingerprints[dense] = fingerprints  # for one-word keys, a view of the words: all there is to write
        if self._width > 1:
            self._words[dense] = words
        if not self._shared:
            if raw is None:
                raw = np.ascontiguousarray(words.view(np.uint8)[:, : self.dtype.itemsize]).view(self._raw_dtype)[:, 0]
            self._raw[dense] = raw

    def _renumber(self, first: int, missing: _Index, index: _Index, new: npt.NDArray[np.bool_]) -> None:
        """Reorders the dense indices ``first..len-1`` just handed out from claiming order to the order of their
        keys' first occurrence in the batch (deterministic, independent of the slots), and marks those
        occurrences *new*."""
        added = self._size - first
        claimed = index[missing] - first  # claiming order of the key at each missing position
        if claimed.size == added:  # no duplicates: the missing positions are the first occurrences
            order, first_seen = claimed, missing
        else:
            _, first_of = np.unique(claimed, return_index=True)  # claimed ids are exactly 0..added-1
            first_of.sort()  # positions in `missing` of first occurrences, in batch order
            order, first_seen = claimed[first_of], missing[first_of]
        renumbered = np.empty(added, dtype=np.int64)
        renumbered[order] = np.arange(first, self._size, dtype=np.int64)
        index[missing] = renumbered[claimed]
        new[first_seen] = True
        block = slice(first, self._size)
        for array in self._dense_arrays:
            array[block] = array[block][order]
        self._slots[self._slot_of[block]] = np.arange(first + 1, self._size + 1, dtype=np.int64)

    # -- erasing -------------------------------------------------------------

    def erase(self, keys: npt.ArrayLike) -> Erased:
        """Removes the keys of the 1-D batch *keys* that are present (absent ones and repeats are ignored).

        The dense storage stays compact: the last surviving entries move into the erased keys' indices.  The
        result (:class:`Erased`) says which positions erased a key and how entries moved: apply
        ``values[moved_to] = values[moved_from]; values = values[:len(table)]`` to each parallel value array.
        Read the erased keys' values first (:meth:`lookup` before erasing) if the container needs them.
        """
        _, words = self._as_words(keys)
        index = self._probe(words, hash_words(words))[0]
        removed = np.zeros(index.shape[0], dtype=bool)
        present = np.flatnonzero(index >= 0)
        holes, first_of = np.unique(index[present], return_index=True)  # ascending dense indices
        removed[present[first_of]] = True
        erased = holes.size
        if erased == 0:
            return Erased(removed, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        freed = self._slot_of[holes]
        self._slots[freed] = _TOMBSTONE
        self._tombstones += erased
        length = self._size - erased
        moved_to = holes[holes < length]
        tail_hole = np.zeros(erased, dtype=bool)
        tail_hole[holes[holes >= length] - length] = True
        moved_from = length + np.flatnonzero(~tail_hole)
        for array in self._dense_arrays:
            array[moved_to] = array[moved_from]
        self._slots[self._slot_of[moved_to]] = moved_to + 1
        self._size = length
        self._free_tombstones(freed)
        return Erased(removed, moved_from, moved_to)

    def _free_tombstones(self, candidates: npt.NDArray[np.signedinteger[Any]]) -> None:
        """Empties tombstones whose next slot is empty: a probe passing one would stop at that next slot anyway,
        so none needs it.  Each round walks one slot back along runs of tombstones."""
        for _ in range(_MAX_TOMBSTONE_ROUNDS):
            candidates = candidates[self._slots[candidates] == _TOMBSTONE]
            candidates = candidates[self._slots[(candidates + 1) & self._mask] == _EMPTY]
            if candidates.size == 0:
                return
            self._slots[candidates] = _EMPTY
            self._tombstones -= candidates.size
            candidates = (candidates - 1) & self._mask

    # -- the rest ------------------------------------------------------------

    @property
    def keys(self) -> npt.NDArray[Any]:
        """The keys in dense order (a read-only view, ``keys[i]`` has dense index ``i``; valid until the next
        insert, erase or clear)."""
        view = self._keys[: self._size]
        view.flags.writeable = False
        return view

    def __len__(self) -> int:
        return self._size

    def clear(self) -> None:
        """Removes every key and returns to the initial capacity (freeing the memory of a grown table)."""
        self._allocate(self._initial_slots)

    @property
    def capacity(self) -> int:
        """How many keys fit before the table grows (half the slots: fewer while tombstones hold slots)."""
        return (self._mask + 1) // 2

    @property
    def nbytes(self) -> int:
        """Bytes held by the table's arrays (slots and dense storage, allocated capacity included)."""
        return self._slots.nbytes + sum(array.nbytes for array in self._dense_arrays)

    def __repr__(self) -> str:
        return f"KeyTable({self.dtype}, {self._size} keys, {self._mask + 1} slots)"
