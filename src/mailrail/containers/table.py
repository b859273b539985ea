"""A vectorized hash set of fixed-dtype keys with dense storage: the index every container is built on.

A rank's share of a distributed container (a counting set, a map, a set...) receives operations in batches of
hundreds to thousands of keys; a Python ``dict`` would cost a Python step per key.  :class:`KeyTable` does each
batch in a few numpy passes: open addressing with linear probing over a power-of-two slot array.  Load stays at
most 1/2, so most keys sit in their first slot, but a batch of a few hundred keys nearly always holds some that
probe a dozen slots or more, and every numpy pass has a fixed cost however few keys it holds.  So a probe
looks at one slot per key and pass while many keys are left (at least one pass, over the whole batch; more while
over :data:`WINDOW_KEYS` keys are left), then at the next :data:`WINDOW` - 1 slots of each key left at once
(one gather of a row of slots per key), and finishes the last few keys (at most :data:`SCALAR_KEYS`) one slot
at a time in plain Python: a batch of hundreds of keys costs a few dozen numpy calls, not a few dozen per slot
of its longest probe.  Inserting and erasing finish their last few keys in Python the same way.

Keys live *densely* at indices ``0..len-1`` (new keys appended in batch order): a container keeps its values in
its own numpy arrays indexed by that dense index (``counts[index] += 1``), and the table tells it how entries move
when keys are erased (:meth:`KeyTable.erase`).  Keys are compared and hashed by their bytes (see
:mod:`mailrail.containers.partition`: ``0.0`` and ``-0.0`` are different keys, structured padding is ignored).

Slots hold ``dense index + 1``; 0 is an empty slot and -1 a *tombstone* (an erased key's slot, which probes
pass over).  A tombstone whose next slot is empty is turned back into an empty slot at once (no probe can need
to pass it), the rest are purged when the table is rebuilt.  The slot of a key is taken from the *low* bits of
its hash, which does not decide the owning rank (:class:`~mailrail.containers.partition.HashPartitioner` uses a
key's block for keys of up to 8 bytes, the hash's *high* bits for longer ones), so a rank's keys spread over all
of its slots.
"""

from __future__ import annotations

import importlib
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
from numpy.lib.stride_tricks import sliding_window_view

from .keys import fixed_dtype, keys_of_words
from .partition import as_keys, has_padding, hash_words, key_words, words_per_key

__all__ = ["IMPLEMENTATION", "Erased", "Inserted", "KeyTable", "distinct_keys"]


def _compiled() -> Any:
    try:
        return importlib.import_module("mailrail.containers._table")
    except ImportError:  # not built (no compiler at install): the numpy passes do it all
        return None


#: The probes of one-word keys (8-byte keys and narrower) and the placement of every key in a rebuilt table:
#: compiled (``_table.pyx``, one key after another in C) where the package was built with a compiler, else None
#: and the numpy passes below.
ONE_WORD = _compiled()
#: ``"compiled"`` where one-word keys are probed in C, else ``"numpy"``: chosen once, at import.
IMPLEMENTATION = "numpy" if ONE_WORD is None else "compiled"

_EMPTY = 0
_TOMBSTONE = -1
#: The fewest slots a table has.
MIN_SLOTS = 16
#: Tombstones freed per erase are found walking back along runs of them; longer runs wait for a rebuild.
_MAX_TOMBSTONE_ROUNDS = 64
#: Slots gathered per key in one pass after the first (a power of two, at most MIN_SLOTS): the slots after the
#: first, and the last column a sentinel (see :meth:`KeyTable._probe_windows`).
WINDOW = 16
#: Keys still probing when the rest is done key by key in Python (a numpy pass costs about as much as a Python
#: probe of several keys).
SCALAR_KEYS = 8
#: Keys still probing above which a pass looks at one slot per key: a window per key costs more than several
#: such passes once most keys end within a slot or two of where they are.
WINDOW_KEYS = 512
#: Row k: which columns of a window come before column k.
_BEFORE = np.arange(WINDOW)[None, :] < np.arange(WINDOW)[:, None]
_WINDOW_SHIFT = WINDOW.bit_length() - 1

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
        self.dtype: np.dtype[Any] = fixed_dtype(dtype, "KeyTable")
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
        # The slots, followed by a copy of the first WINDOW - 1 (refreshed before each probe): each slot's window of
        # the WINDOW slots from it on, wrapping around, is then a row of one strided view.
        self._extended: npt.NDArray[np.signedinteger[Any]] = np.zeros(
            slots + WINDOW - 1, dtype=np.int32 if small else np.int64
        )
        self._slots: npt.NDArray[np.signedinteger[Any]] = self._extended[:slots]
        self._windows: npt.NDArray[np.signedinteger[Any]] = sliding_window_view(self._extended, WINDOW)
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
        if ONE_WORD is not None:
            ONE_WORD.place(self._slots, self._slot_of, hashes)
            return
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
        return (hashes & np.uint64(self._mask)).view(np.int64)  # below 2**63: the same numbers

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

    def _probe(
        self, words: npt.NDArray[np.uint64], hashes: npt.NDArray[np.uint64], want_stop: bool = False
    ) -> tuple[_Index, _Index]:
        """Each key's dense index (-1 if absent) and, if *want_stop*, for absent keys the empty slot that ended its
        probe (else the second array is meaningless).

        A probe passes occupied slots of other keys and tombstones, and ends at the key or at an empty slot.  The
        first pass looks at every key's first slot (batches of at most SCALAR_KEYS keys go straight to Python);
        the keys left probe on as :meth:`_probe_on` says."""
        n = hashes.shape[0]
        query = self._fingerprint(words, hashes)
        pos = self._home(hashes)
        if n <= SCALAR_KEYS:
            index = np.full(n, -1, dtype=np.int64)
            stop = np.zeros(n, dtype=np.int64) if want_stop else index
            self._probe_scalar(range(n), query.tolist(), pos.tolist(), words, index, stop if want_stop else None)
            return index, stop
        slot = self._slots[pos]
        dense = slot - 1  # -1 or -2 for empty slots and tombstones: valid indices, ruled out by `slot > 0`
        hit = self._fingerprints[dense] == query
        hit &= slot > _EMPTY
        if self._width > 1:
            self._confirm(hit, dense, words, None)
        index = np.where(hit, dense, np.int64(-1))
        stop = pos  # where the keys ending at an empty slot this pass ended; the others' are written later
        rows = np.flatnonzero((slot != _EMPTY) > hit)  # neither found nor at an empty slot
        if rows.size:
            self._probe_on(rows, query[rows], (pos[rows] + 1) & self._mask, words, index, stop if want_stop else None)
        return index, stop

    def _probe_on(
        self,
        rows: _Index,
        query: npt.NDArray[np.uint64],
        pos: _Index,
        words: npt.NDArray[np.uint64],
        index: _Index,
        stop: _Index | None,
    ) -> None:
        """Probes on from *pos* for the keys at batch positions *rows*, with these fingerprints *query*: a slot per
        key and pass while more than WINDOW_KEYS keys are left, then windows, then one key at a time."""
        while rows.size > WINDOW_KEYS:
            slot = self._slots[pos]
            dense = slot - 1
            hit = self._fingerprints[dense] == query
            hit &= slot > _EMPTY
            if self._width > 1:
                self._confirm(hit, dense, words, rows)
            index[rows[hit]] = dense[hit]
            if stop is not None:
                stop[rows] = pos
            keep = np.flatnonzero((slot != _EMPTY) > hit)
            rows, query, pos = rows[keep], query[keep], (pos[keep] + 1) & self._mask
        if rows.size > SCALAR_KEYS:
            rows, query, pos = self._probe_windows(rows, query, pos, words, index, stop)
        if rows.size:
            self._probe_scalar(rows.tolist(), query.tolist(), pos.tolist(), words, index, stop)

    def _probe_windows(
        self,
        rows: _Index,
        query: npt.NDArray[np.uint64],
        pos: _Index,
        words: npt.NDArray[np.uint64],
        index: _Index,
        stop: _Index | None,
    ) -> tuple[_Index, npt.NDArray[np.uint64], _Index]:
        """Probes WINDOW - 1 slots per key and pass, while more than SCALAR_KEYS keys are left; returns those left.

        A pass gathers each key's WINDOW slots from *pos* on (one row each), takes its first empty slot among
        them (the last column counts as one: a sentinel), and compares the key with the keys in the occupied
        slots before it, whose dense index is written to *index* when they match.  Keys whose row ends without a
        match at a true empty slot are absent (their *stop*); the others probe on from the sentinel column."""
        mask = self._mask
        self._extended[mask + 1 :] = self._extended[: WINDOW - 1]  # the wrapped-around copy, up to date
        last = WINDOW - 1
        while True:
            window = self._windows[pos]  # (keys, WINDOW), a copy
            empty = window == _EMPTY
            empty[:, last] = True
            first_empty = empty.argmax(axis=1)
            before = _BEFORE[first_empty]
            before &= window > _EMPTY
            cells = np.flatnonzero(before)  # occupied slots before the first empty one, row by row
            at = cells >> _WINDOW_SHIFT  # the row of each: which key
            dense = window.reshape(-1)[cells] - 1
            hit = self._fingerprints[dense] == query[at]
            if self._width > 1:
                self._confirm(hit, dense, words, rows[at])
            found = at[hit]
            index[rows[found]] = dense[hit]
            if stop is not None:  # meaningful for the keys that end now at an empty slot
                stop[rows] = (pos + first_empty) & mask
            going = first_empty == last
            going &= window[:, last] != _EMPTY
            going[found] = False
            keep = np.flatnonzero(going)
            rows, query, pos = rows[keep], query[keep], (pos[keep] + last) & mask
            if rows.size <= SCALAR_KEYS:
                return rows, query, pos

    def _probe_scalar(
        self,
        rows: range | list[int],
        query: list[int],
        pos: list[int],
        words: npt.NDArray[np.uint64],
        index: _Index,
        stop: _Index | None,
    ) -> None:
        """Probes key by key in Python, slot by slot: for the few keys left, cheaper than any numpy pass."""
        slots = self._slots.data
        fingerprints = self._fingerprints.data
        mask = self._mask
        for row, fingerprint, p in zip(rows, query, pos):
            while True:
                slot = slots[p]
                if slot > _EMPTY:
                    if fingerprints[slot - 1] == fingerprint and self._same_key(slot - 1, words, row):
                        index[row] = slot - 1
                        break
                elif slot == _EMPTY:
                    if stop is not None:
                        stop[row] = p
                    break
                p = (p + 1) & mask

    def _confirm(
        self,
        hit: npt.NDArray[np.bool_],
        dense: npt.NDArray[np.signedinteger[Any]],
        words: npt.NDArray[np.uint64],
        rows: _Index | None,
    ) -> None:
        """Keeps in *hit* (equal fingerprints of keys longer than one word: equal hashes) only the stored keys at
        *dense* that equal the batch's ``words[rows]`` (``words`` itself when *rows* is None)."""
        same_hash = np.flatnonzero(hit)
        batch = words[same_hash] if rows is None else words[rows[same_hash]]
        confirmed = (self._words[dense[same_hash]] == batch).all(axis=1)
        hit[same_hash[~confirmed]] = False

    def _same_key(self, dense: int, words: npt.NDArray[np.uint64], row: int) -> bool:
        """Whether the stored key at *dense*, whose fingerprint equals that of ``words[row]``, is that key."""
        return self._width == 1 or bool((self._words[dense] == words[row]).all())

    def lookup(self, keys: npt.ArrayLike) -> _Index:
        """The dense index of each key of the 1-D batch *keys* (int64), -1 where the key is absent."""
        _, words = self._as_words(keys)
        hashes = hash_words(words)
        if self._width == 1 and ONE_WORD is not None:
            index = np.empty(len(hashes), dtype=np.int64)
            ONE_WORD.lookup_words(self._slots, self._fingerprints, words[:, 0], hashes, index)
            return index
        return self._probe(words, hashes)[0]

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
        if self._width == 1 and self._shared and ONE_WORD is not None:
            return self._insert_one_word(words[:, 0], hashes)
        index, stop = self._probe(words, hashes, want_stop=True)
        new = np.zeros(n, dtype=bool)
        missing = np.flatnonzero(index < 0)
        if missing.size == 0:
            return Inserted(index, new)
        # Room for them all (duplicates counted only when that decides whether to grow).
        room = self._mask // 2 + 1 - self._size - self._tombstones
        at_empty = True  # each missing key's stop is the empty slot that ended its probe
        if missing.size > room:
            distinct = self._count_distinct(words[missing], hashes[missing])
            if distinct > room:
                self._rebuild(max(self._mask + 1, _slots_for(self._size + distinct, 3)))
                stop[missing] = self._home(hashes[missing])
                at_empty = False
        first = self._size
        if missing.size == n:
            in_order = self._claim(missing, words, hashes, stop, index, raw, at_empty)
        else:
            missing_raw = None if raw is None else raw[missing]
            in_order = self._claim(
                missing, words[missing], hashes[missing], stop[missing], index, missing_raw, at_empty
            )
        if in_order:  # dense indices already in batch order, no duplicates
            new[missing] = True
        else:
            self._renumber(first, missing, index, new)
        return Inserted(index, new)

    def _insert_one_word(self, words: npt.NDArray[np.uint64], hashes: npt.NDArray[np.uint64]) -> Inserted:
        """:meth:`insert` of 8-byte keys (their own words), compiled: as many keys as the load allows at a time,
        then a rebuild (doubling, or in place where tombstones held the room), until the batch is done."""
        n = len(words)
        index = np.empty(n, dtype=np.int64)
        new = np.zeros(n, dtype=bool)
        done = 0
        while True:
            limit = self._mask // 2 + 1 - self._tombstones  # live keys the load allows: at most 1/2 with tombstones
            done, self._size = ONE_WORD.insert_words(
                self._slots,
                self._fingerprints,
                self._slot_of,
                words,
                hashes,
                done,
                self._size,
                limit,
                index,
                new.view(np.uint8),
            )
            if done == n:
                return Inserted(index, new)
            self._rebuild(max(self._mask + 1, _slots_for(self._size + 1, 3)))

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
        at_empty: bool,
    ) -> bool:
        """Gives each absent key (batch positions *missing*; *words*, *hashes*, *pos* and *raw* are theirs, row by
        row) a dense index: probing on from *pos* (each an empty slot if *at_empty*), it takes the first empty
        slot, or finds there a copy of itself that took it earlier in this batch.  Returns whether every key took
        a slot, in row order: then they are distinct and their dense indices follow the batch order.

        Keys reaching the same empty slot in one pass all write a distinct negative marker into it; the one
        whose marker stays wins the slot, the losers look at that same slot again next pass (where a copy of
        themselves may now sit).  Once at most SCALAR_KEYS keys are left, they go on one by one in Python.
        Dense indices are handed out in claiming order: see :meth:`_renumber`.
        """
        rows = np.arange(missing.size, dtype=np.int64)  # rows of words, hashes, pos, raw
        query = self._fingerprint(words, hashes)
        in_order = True
        while rows.size > SCALAR_KEYS:
            # Claims of empty slots.
            if at_empty:  # the first pass, at the empty slots that ended the keys' probes
                slot = None
                empty, pos_empty = rows, pos
            else:
                slot = self._slots[pos]
                empty = np.flatnonzero(slot == _EMPTY)
                pos_empty = pos[empty]
            marker = -2 - empty
            self._slots[pos_empty] = marker
            won_here = self._slots[pos_empty] == marker
            all_won = bool(won_here.all())
            won = empty if all_won else empty[won_here]
            pos_won = pos_empty if all_won else pos[won]
            first, last = self._size, self._size + won.size
            self._slots[pos_won] = np.arange(first + 1, last + 1, dtype=np.int64)
            self._slot_of[first:last] = pos_won
            at = rows if won is rows else rows[won]
            self._store(slice(first, last), query[won], words[at], None if raw is None else raw[at])
            index[missing if won.size == missing.size else missing[at]] = np.arange(first, last, dtype=np.int64)
            self._size = last
            if won.size == rows.size:
                return in_order
            in_order = False
            going = np.ones(rows.size, dtype=bool)
            going[won] = False
            if slot is None:  # every key was at an empty slot: the losers look at it again
                at_empty = False
                keep = np.flatnonzero(going)
                rows, query, pos = rows[keep], query[keep], pos[keep]
                continue
            # Occupied slots (read before this pass's claims): a copy of the key that claimed it earlier?
            occupied = np.flatnonzero(slot > _EMPTY)
            stored = slot[occupied] - 1
            hit = self._equal(stored, query[occupied], words, rows[occupied])
            index[missing[rows[occupied[hit]]]] = stored[hit]
            # Tombstones and other keys' slots: on to the next slot; claim losers: this slot again.
            going[occupied[hit]] = False
            pos = (pos + (slot != _EMPTY)) & self._mask
            keep = np.flatnonzero(going)
            rows, query, pos = rows[keep], query[keep], pos[keep]
        if rows.size:
            all_new = self._claim_scalar(rows.tolist(), query.tolist(), pos.tolist(), missing, words, index, raw)
            in_order = in_order and all_new
        return in_order

    def _claim_scalar(
        self,
        rows: list[int],
        query: list[int],
        pos: list[int],
        missing: _Index,
        words: npt.NDArray[np.uint64],
        index: _Index,
        raw: npt.NDArray[np.void] | None,
    ) -> bool:
        """:meth:`_claim` for the last few keys, one at a time in Python; returns whether each took a slot."""
        slots = self._slots.data
        fingerprints = self._fingerprints.data
        mask = self._mask
        all_new = True
        for row, fingerprint, p in zip(rows, query, pos):
            while True:
                slot = slots[p]
                if slot == _EMPTY:
                    dense = self._size
                    slots[p] = dense + 1
                    self._slot_of[dense] = p
                    one = slice(row, row + 1)
                    fingerprint_array = np.array([fingerprint], dtype=np.uint64)
                    self._store(
                        slice(dense, dense + 1), fingerprint_array, words[one], None if raw is None else raw[one]
                    )
                    index[missing[row]] = dense
                    self._size = dense + 1
                    break
                if slot > _EMPTY and fingerprints[slot - 1] == fingerprint and self._same_key(slot - 1, words, row):
                    index[missing[row]] = slot - 1
                    all_new = False
                    break
                p = (p + 1) & mask
        return all_new

    def _store(
        self,
        dense: slice,
        fingerprints: npt.NDArray[np.uint64],
        words: npt.NDArray[np.uint64],
        raw: npt.NDArray[np.void] | None,
    ) -> None:
        """Writes keys at the *dense* indices: their canonical words, fingerprints, and their bytes unless in the
        words (*raw*, or with padding, the canonical bytes)."""
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
            by_id = np.argsort(claimed, kind="stable")  # claimed ids are exactly 0..added-1
            ids = claimed[by_id]
            starts = np.empty(ids.size, dtype=bool)
            starts[0] = True
            np.not_equal(ids[1:], ids[:-1], out=starts[1:])
            first_of = by_id[starts]  # each id's first position in `missing` (a stable sort)
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
        if present.size == 0:
            return Erased(removed, np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        # The distinct dense indices, ascending, and where each first occurs (a stable sort: np.unique's way).
        order = np.argsort(index[present], kind="stable")
        holes = index[present[order]]
        distinct = np.empty(holes.size, dtype=bool)
        distinct[0] = True
        np.not_equal(holes[1:], holes[:-1], out=distinct[1:])
        if not distinct.all():
            holes, order = holes[distinct], order[distinct]
        removed[present[order]] = True
        erased = holes.size
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
        so none needs it.  Each round walks one slot back along runs of tombstones (*candidates* are tombstones);
        once at most SCALAR_KEYS walks are left, they go on one by one in Python."""
        mask = self._mask
        for walked in range(_MAX_TOMBSTONE_ROUNDS):
            if walked:
                candidates = candidates[self._slots[candidates] == _TOMBSTONE]
            if candidates.size <= SCALAR_KEYS:
                self._free_tombstones_scalar(candidates.tolist(), _MAX_TOMBSTONE_ROUNDS - walked)
                return
            candidates = candidates[self._slots[(candidates + 1) & mask] == _EMPTY]
            self._slots[candidates] = _EMPTY
            self._tombstones -= candidates.size
            candidates = (candidates - 1) & mask

    def _free_tombstones_scalar(self, candidates: list[int], rounds: int) -> None:
        """:meth:`_free_tombstones` for a few tombstones, walking back at most *rounds* slots from each."""
        slots = self._slots.data
        mask = self._mask
        for candidate in candidates:
            for _ in range(rounds):
                if slots[candidate] != _TOMBSTONE or slots[(candidate + 1) & mask] != _EMPTY:
                    break
                slots[candidate] = _EMPTY
                self._tombstones -= 1
                candidate = (candidate - 1) & mask

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
        return self._extended.nbytes + sum(array.nbytes for array in self._dense_arrays)

    def __repr__(self) -> str:
        return f"KeyTable({self.dtype}, {self._size} keys, {self._mask + 1} slots)"


def distinct_keys(keys: npt.NDArray[Any]) -> tuple[npt.NDArray[Any], npt.NDArray[np.int64], npt.NDArray[np.uint64]]:
    """The distinct keys of a 1-D batch (equal by their bytes), how often each occurs, and their canonical words:
    what a sender pays to send each distinct key once.  Keys come back in canonical form (structured padding
    zeroed), in no order a caller may rely on.

    Keys of one word go into a scratch :class:`KeyTable` when its probes are compiled: linear in the batch, where a
    sort's cost per key grows with the batch (out of the caches).  Otherwise, and for wider keys, one sort.
    """
    words = key_words(keys)
    width = words.shape[1]
    if width == 1 and ONE_WORD is not None:
        scratch = KeyTable(np.uint64, len(words))
        dense = scratch.insert(words[:, 0]).dense
        unique_words = scratch._words[: len(scratch)]
        counts = np.bincount(dense, minlength=len(scratch)).astype(np.int64, copy=False)
    elif width == 1:  # a sort and a pass: a quarter faster than np.unique's general path
        ordered = np.sort(words[:, 0])
        starts_run = np.ones(len(ordered), dtype=bool)
        np.not_equal(ordered[1:], ordered[:-1], out=starts_run[1:])
        starts = np.flatnonzero(starts_run)
        counts = np.diff(starts, append=len(ordered)).astype(np.int64, copy=False)
        unique_words = ordered[starts].reshape(-1, 1)
    else:
        rows = np.ascontiguousarray(words).view(np.dtype((np.void, 8 * width))).reshape(-1)
        unique_rows, row_counts = np.unique(rows, return_counts=True)
        unique_words = np.ascontiguousarray(unique_rows).view(np.uint64).reshape(-1, width)
        counts = row_counts.astype(np.int64, copy=False)
    return keys_of_words(unique_words, keys.dtype), counts, unique_words
