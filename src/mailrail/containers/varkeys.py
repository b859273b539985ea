"""Variable-size keys: their hash and a hash table of them, the Python reference and its compiled twin.

Keys here are byte strings (a ``str`` key is its UTF-8 bytes) packed as Arrow packs them: ``offsets`` (``n + 1``
ascending ``int32`` or ``int64``) and ``data`` (``uint8``), key ``i`` being ``data[offsets[i]:offsets[i + 1]]``.

**The hash** (:func:`hash_bytes`), fixed because every rank must compute the same owner for a key in every run,
in 64-bit arithmetic: ``h = 0x9E3779B97F4A7C15 ^ (length * 0x94D049BB133111EB)``; for each 8-byte word ``w`` of
the key, read in the machine's byte order (the last word zero-padded), ``h = (h ^ w) * 0xBF58476D1CE4E5B9`` then
``h ^= h >> 32``; at the end ``h = mix(h)``, splitmix64's finalizer, as for fixed-size keys
(:func:`~mailrail.containers.partition.hash_keys`).  One multiplication per word (each step a bijection of ``h``,
so no word's bits are lost on the way), the finalizer once: a word a fixed-size key's hash mixes fully costs
three times as much, and strings are several words.  The length comes first, so keys that differ only by
trailing zero bytes differ.  The owner of a key is the high part of ``hash * ranks`` (the same rule as for long
fixed-size keys); a rank's own table uses the low bits.  Hashes agree between platforms of the same byte order.

**The table** (:class:`BytesTable`) keeps keys with dense indices ``0..len-1``, as
:class:`~mailrail.containers.table.KeyTable` does for fixed-size keys: a container keeps its values in numpy arrays
indexed by them.  ``insert`` a batch (each key's index, and which positions added a key), ``lookup`` (the index or
-1), ``count`` (``insert``, and each key's weight, or 1, added to ``counts[its index]``: a histogram's kernel, with
no array of indices in between), ``erase`` (which positions removed a key, and how the last entries moved into the
holes: ``values[moved_to] = values[moved_from]``), ``keys()`` (all of them, packed, in dense order, or those at
given dense indices, in their order).

Both are compiled (``_varkeys.pyx``: a pass over the batch's bytes; open addressing over an arena of bytes)
where the package was built with a compiler, else the Python reference below (a numpy pass per 8-byte word of
the longest key; a ``dict`` of bytes).  :data:`IMPLEMENTATION` says which; the tests run both on the same inputs
and compare every result.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import numpy.typing as npt

from .partition import HASH_SEED, _multiply_high

__all__ = [
    "IMPLEMENTATION",
    "BytesTable",
    "BytesTablePython",
    "HOT_BYTES",
    "HotStrings",
    "HotStringsPython",
    "hash_bytes",
    "hash_bytes_numpy",
    "longest",
    "longest_numpy",
]

_SEED = np.uint64(HASH_SEED)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    z = z ^ (z >> np.uint64(30))
    z = z * _M1
    z = z ^ (z >> np.uint64(27))
    z = z * _M2
    return z ^ (z >> np.uint64(31))


def _checked(offsets: npt.ArrayLike, data: npt.ArrayLike) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8]]:
    """*offsets* as int64 and *data* as uint8, refused as the compiled functions refuse them."""
    starts = np.asarray(offsets)
    raw = np.asarray(data)
    if starts.ndim != 1 or starts.dtype not in (np.int32, np.int64) or raw.ndim != 1 or raw.dtype != np.uint8:
        raise ValueError("offsets must be a 1-D int32 or int64 array and data a 1-D uint8 array")
    if len(starts) == 0:
        raise ValueError("offsets: a batch of n keys has n + 1 offsets, got none")
    starts = starts.astype(np.int64, copy=False)
    if starts[0] < 0 or starts[-1] > len(raw):
        raise ValueError(f"offsets from {starts[0]} to {starts[-1]} for {len(raw)} bytes of data")
    descending = np.flatnonzero(starts[1:] < starts[:-1])
    if len(descending):
        i = int(descending[0])
        raise ValueError(f"offsets must ascend: offset {i + 1} ({starts[i + 1]}) is below offset {i}")
    return starts, raw


def hash_bytes_numpy(offsets: npt.ArrayLike, data: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """The hash of each key (uint64; see the module), in numpy: one pass per 8-byte word of the longest key."""
    starts, raw = _checked(offsets, data)
    lengths = np.diff(starts)
    h = _SEED ^ (lengths.astype(np.uint64) * _M2)
    padded = np.concatenate([raw, np.zeros(8, dtype=np.uint8)])  # a word read at the end stays inside
    words = (lengths + 7) // 8
    column = np.arange(8)
    for j in range(int(words.max()) if len(words) else 0):
        active = np.flatnonzero(words > j)
        at = starts[:-1][active] + 8 * j
        chunk = padded[at[:, None] + column]  # (k, 8) bytes
        chunk[column[None, :] >= (lengths[active] - 8 * j)[:, None]] = 0  # bytes past the key's end
        step = (h[active] ^ chunk.view(np.uint64)[:, 0]) * _M1
        h[active] = step ^ (step >> np.uint64(32))
    return _mix(h)


def longest_numpy(offsets: npt.ArrayLike) -> int:
    """The length of the longest key packed in *offsets* (``n + 1`` ascending offsets; 0 for no key)."""
    starts = np.asarray(offsets)
    return int(np.diff(starts).max()) if len(starts) > 1 else 0


class BytesTablePython:
    """The Python reference of the compiled ``BytesTable``: a ``dict`` from each key's bytes to its dense index,
    and the keys in dense order.  Same methods, same results (see the module)."""

    def __init__(self, capacity: int = 1024) -> None:
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0; got {capacity}")
        self._index: dict[bytes, int] = {}
        self._keys: list[bytes] = []

    @staticmethod
    def _split(offsets: npt.ArrayLike, data: npt.ArrayLike) -> list[bytes]:
        starts, raw = _checked(offsets, data)
        blob = raw.tobytes()
        bounds = starts.tolist()
        return [blob[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]

    def insert(
        self, offsets: npt.ArrayLike, data: npt.ArrayLike
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        keys = self._split(offsets, data)
        dense = np.empty(len(keys), dtype=np.int64)
        new = np.zeros(len(keys), dtype=np.bool_)
        index = self._index
        for position, key in enumerate(keys):
            found = index.get(key)
            if found is None:
                found = index[key] = len(self._keys)
                self._keys.append(key)
                new[position] = True
            dense[position] = found
        return dense, new

    def count(
        self,
        offsets: npt.ArrayLike,
        data: npt.ArrayLike,
        counts: npt.NDArray[np.int64],
        weights: npt.NDArray[np.int64] | None = None,
    ) -> int:
        starts, _ = _checked(offsets, data)
        n = len(starts) - 1
        if len(counts) < len(self._keys) + n:
            raise ValueError(f"counts: room for {len(counts)} keys, {len(self._keys)} held and {n} more to count")
        if weights is not None and len(weights) != n:
            raise ValueError(f"weights: {len(weights)} for {n} keys")
        dense, new = self.insert(offsets, data)
        np.add.at(counts, dense, 1 if weights is None else np.asarray(weights, dtype=np.int64))
        return int(new.sum())

    def lookup(self, offsets: npt.ArrayLike, data: npt.ArrayLike) -> npt.NDArray[np.int64]:
        index = self._index
        return np.array([index.get(key, -1) for key in self._split(offsets, data)], dtype=np.int64)

    def erase(
        self, offsets: npt.ArrayLike, data: npt.ArrayLike
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        keys = self._split(offsets, data)
        removed = np.zeros(len(keys), dtype=np.bool_)
        holes = []
        for position, key in enumerate(keys):
            found = self._index.pop(key, None)
            if found is not None:
                removed[position] = True
                holes.append(found)
        size = len(self._keys) - len(holes)
        ordered = np.sort(np.array(holes, dtype=np.int64))
        moved_to = ordered[ordered < size]
        tail = np.ones(len(holes), dtype=np.bool_)
        tail[ordered[ordered >= size] - size] = False
        moved_from = size + np.flatnonzero(tail).astype(np.int64)
        for source, target in zip(moved_from.tolist(), moved_to.tolist()):
            self._keys[target] = self._keys[source]
            self._index[self._keys[target]] = target
        del self._keys[size:]
        return removed, moved_from, moved_to

    def keys(
        self, large: bool = True, order: npt.ArrayLike | None = None
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.uint8]]:
        keys = self._keys
        if order is not None:
            picked = np.asarray(order, dtype=np.int64).tolist()
            for index in picked:
                if index < 0 or index >= len(keys):
                    raise IndexError(f"order: index {index} of a table of {len(keys)} keys")
            keys = [keys[index] for index in picked]
        lengths = np.array([len(key) for key in keys], dtype=np.int64)
        offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if not large and offsets[-1] >= 2**31:
            raise OverflowError(f"{offsets[-1]} bytes of keys do not take int32 offsets")
        data = np.frombuffer(b"".join(keys), dtype=np.uint8).copy()
        return offsets if large else offsets.astype(np.int32), data

    def hashes_of_keys(self) -> npt.NDArray[np.uint64]:
        offsets, data = self.keys()
        return hash_bytes_numpy(offsets, data)

    def clear(self, keep: bool = False) -> None:
        self._index.clear()
        self._keys.clear()

    def __len__(self) -> int:
        return len(self._keys)

    @property
    def nbytes(self) -> int:
        return sum(len(key) for key in self._keys)

    def __repr__(self) -> str:
        return f"BytesTablePython({len(self._keys)} keys)"


#: The longest string a :class:`HotStrings` slot holds (longer ones always leave), and its words.
HOT_BYTES = 40
_HOT_WORDS = HOT_BYTES // 8
#: The slot hash's multipliers: one per word of a held string, then the length's, then the final one's.
HOT_MULTIPLIERS = np.array(
    [
        0x9E3779B97F4A7C15,
        0xBF58476D1CE4E5B9,
        0x94D049BB133111EB,
        0xD6E8FEB86659FD93,
        0xA0761D6478BD642F,
        0xE7037ED1A0B428DB,
        0x8EBC6AF09C88C6E3,
    ],
    dtype=np.uint64,
)


def hot_slots_numpy(offsets: npt.ArrayLike, data: npt.ArrayLike, bits: int) -> npt.NDArray[np.int64]:
    """Each string's :class:`HotStrings` slot of ``2**bits`` (0 for strings longer than ``HOT_BYTES``, which no
    slot holds): its bytes zero-padded to five words ``w``, in the machine's byte order; ``h = length * M[5] ^
    w[0] * M[0] ^ ... ^ w[4] * M[4]``, ``h ^= h >> 32``, the slot the top *bits* of ``h * M[6]``
    (``M``: :data:`HOT_MULTIPLIERS`).  Five independent multiplications and no loop over the bytes: a slot
    needs a spread of strings, not a hash every rank agrees on."""
    starts, raw = _checked(offsets, data)
    lengths = np.diff(starts)
    count = len(lengths)
    padded = np.zeros((count, HOT_BYTES), dtype=np.uint8)
    short = lengths <= HOT_BYTES
    column = np.arange(HOT_BYTES)
    inside = short[:, None] & (column[None, :] < lengths[:, None])
    source = np.concatenate([raw, np.zeros(HOT_BYTES, dtype=np.uint8)])
    padded[inside] = source[(starts[:-1, None] + column[None, :])[inside]]
    words = padded.view(np.uint64)
    with np.errstate(over="ignore"):
        h = lengths.astype(np.uint64) * HOT_MULTIPLIERS[5]
        for j in range(_HOT_WORDS):
            h ^= words[:, j] * HOT_MULTIPLIERS[j]
        h ^= h >> np.uint64(32)
        slots = (h * HOT_MULTIPLIERS[6]) >> np.uint64(64 - bits) if bits else np.zeros(count, dtype=np.uint64)
    return np.where(short, slots, 0).astype(np.int64)


class HotStringsPython:
    """A sender's direct-mapped cache of frequent strings and their counts (the Python reference of the compiled
    ``HotStrings``; same methods, same results).

    :meth:`hold` takes a batch, and returns how many of its strings a slot already held (repeats combined).  Each
    string of at most :data:`HOT_BYTES` bytes goes to its slot
    (:func:`hot_slots_numpy`): the slot's own string adds one to its count; a slot with no count takes it (count
    1); else the slot counts a *miss*, and once its misses exceed its count the slot's string leaves with its
    count and the new one takes its place, while before that the new string leaves with count 1.  So a frequent
    string keeps its slot against rare ones, and a rare one that took a slot first gives it up soon.  Longer
    strings always leave.  Leaving means joining the *leaving store*, ``(count, string)`` records in order, which
    :meth:`take` hands out: the caller sends them to their owners.
    """

    def __init__(self, slots: int = 8192, ranks: int = 1) -> None:
        if slots < 1 or slots & (slots - 1) or slots > 1 << 24:
            raise ValueError(f"slots must be a power of two from 1 to 2**24; got {slots}")
        if ranks < 1 or ranks > 1 << 31:
            raise ValueError(f"ranks must be from 1 to 2**31; got {ranks}")
        self._ranks = ranks
        self._bits = slots.bit_length() - 1
        self._slots = slots
        self.clear()

    def clear(self) -> None:
        self._strings: list[bytes | None] = [None] * self._slots
        self._counts = [0] * self._slots
        self._misses = [0] * self._slots
        self._held = 0
        self._leaving: list[tuple[bytes, int]] = []

    def hold(self, offsets: npt.ArrayLike, data: npt.ArrayLike) -> int:
        slots = hot_slots_numpy(offsets, data, self._bits).tolist()
        strings, counts, misses = self._strings, self._counts, self._misses
        counted = 0
        for key, s in zip(BytesTablePython._split(offsets, data), slots):
            if len(key) > HOT_BYTES:
                self._leaving.append((key, 1))
                continue
            if strings[s] == key:
                self._held += counts[s] == 0
                counts[s] += 1
                counted += 1
                continue
            if counts[s]:
                misses[s] += 1
                if misses[s] <= counts[s]:
                    self._leaving.append((key, 1))
                    continue
                self._leaving.append((strings[s], counts[s]))
            else:
                self._held += 1
            strings[s], counts[s], misses[s] = key, 1, 0
        return counted

    def take(self, everything: bool = False) -> tuple[npt.NDArray[Any], ...]:
        """The leaving records grouped by owner (``floor(hash * ranks / 2**64)``, :func:`hash_bytes_numpy`), in
        the order they left within an owner: ``(offsets, data, counts, per_owner)``; the store emptied.  With
        *everything*, each slot's held count first leaves (the slot keeps its string, its count back to 0)."""
        if everything and self._held:
            for s in range(self._slots):
                if self._counts[s]:
                    self._leaving.append((self._strings[s], self._counts[s]))  # type: ignore[arg-type]
                    self._counts[s] = self._misses[s] = 0
            self._held = 0
        keys = [key for key, _ in self._leaving]
        offsets = np.zeros(len(keys) + 1, dtype=np.int64)
        np.cumsum([len(key) for key in keys], out=offsets[1:])
        data = np.frombuffer(b"".join(keys), dtype=np.uint8)
        counts = np.array([count for _, count in self._leaving], dtype=np.int64)
        self._leaving = []
        owners = _multiply_high(hash_bytes_numpy(offsets, data), self._ranks)
        order = np.argsort(owners, kind="stable")
        keys = [keys[i] for i in order.tolist()]
        np.cumsum([len(key) for key in keys], out=offsets[1:])
        data = np.frombuffer(b"".join(keys), dtype=np.uint8).copy()
        return offsets, data, counts[order], np.bincount(owners, minlength=self._ranks).astype(np.int64)

    @property
    def leaving(self) -> int:
        return len(self._leaving)

    def __len__(self) -> int:
        return self._held

    @property
    def nbytes(self) -> int:
        return 64 * self._slots

    def __repr__(self) -> str:
        return f"HotStringsPython({self._held} of {self._slots} slots held, {len(self._leaving)} leaving)"


def _compiled() -> Any:
    try:
        return importlib.import_module("mailrail.containers._varkeys")
    except ImportError:  # not built (no compiler at install): the Python reference
        return None


_COMPILED = _compiled()
#: The implementation of :func:`hash_bytes` and :class:`BytesTable`: ``"compiled"`` or ``"python"``, chosen once,
#: at import.
IMPLEMENTATION = "python" if _COMPILED is None else "compiled"
#: The hash of each key: the compiled pass where built, else :func:`hash_bytes_numpy`.
hash_bytes: Any = hash_bytes_numpy if _COMPILED is None else _COMPILED.hash_bytes
#: The longest key's length: the compiled pass where built, else :func:`longest_numpy`.
longest: Any = longest_numpy if _COMPILED is None else _COMPILED.longest
#: The table of variable-size keys: the compiled one where built, else :class:`BytesTablePython`.
BytesTable: Any = BytesTablePython if _COMPILED is None else _COMPILED.BytesTable
#: The sender's cache of frequent strings: the compiled one where built, else :class:`HotStringsPython`.
HotStrings: Any = HotStringsPython if _COMPILED is None else _COMPILED.HotStrings
