"""Which rank owns a key: the keys' canonical bytes, a portable 64-bit hash of them, and two partitioners.

Keys of up to 8 bytes are dealt out in blocks of one key per rank (consecutive keys exactly evenly), longer keys
by the hash (:class:`HashPartitioner`); array indices in contiguous blocks (:class:`BlockPartitioner`).

Distributed containers route every operation to the rank that owns its key, so every rank must compute the
same owner for the same key, in every run: the hash here is a fixed, documented function of the key's bytes
(no Python ``hash``, which is salted per process).  Everything is vectorized over a batch of keys: the only
Python loop is over the few 64-bit words of one key.

**Keys are their bytes.**  A key array of any fixed-size dtype (integers, floats, fixed-width bytes such as
``S16``, structured records) is read as raw memory, so two keys are equal exactly when their bytes are equal:
``0.0`` and ``-0.0`` are *different* keys, and a NaN equals another NaN only with the same bits.  Structured
dtypes with padding (``align=True``) have their padding bytes *zeroed* in the canonical form
(:func:`key_words`), so two records with equal fields are the same key whatever garbage the padding holds.
Other dtypes with undefined bytes (``np.longdouble`` on x86, 10 significant bytes in 16) are not supported
meaningfully.  Bytes are read in the machine's order: hashes agree between platforms of the same byte order.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "BlockPartitioner",
    "HashPartitioner",
    "as_keys",
    "has_padding",
    "hash_keys",
    "hash_words",
    "key_words",
    "words_per_key",
]

#: The hash's starting state (splitmix64's increment, the golden ratio in 64 bits).
HASH_SEED = 0x9E3779B97F4A7C15
_SEED = np.uint64(HASH_SEED)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30 = np.uint64(30)
_S27 = np.uint64(27)
_S31 = np.uint64(31)
_S32 = np.uint64(32)
_LOW32 = np.uint64(0xFFFFFFFF)

_UINT_OF_SIZE: dict[int, type[np.unsignedinteger[Any]]] = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def as_keys(keys: npt.ArrayLike) -> npt.NDArray[Any]:
    """*keys* as a 1-D array of a fixed-size dtype, else a clear error (an object array has no bytes to hash)."""
    array = np.asarray(keys)
    if array.dtype.hasobject:
        raise TypeError(f"keys must have a fixed-size dtype (numbers, fixed-width bytes, records); got {array.dtype}")
    if array.ndim != 1:
        raise ValueError(f"keys must be a 1-D array; got shape {array.shape}")
    if array.dtype.itemsize == 0:
        raise TypeError(f"keys must have a dtype of at least one byte; got {array.dtype}")
    return array


def _cover(dtype: np.dtype[Any], offset: int, covered: npt.NDArray[np.bool_]) -> None:
    """Marks the bytes of *dtype* (placed at *offset*) that belong to a field: what is left is padding."""
    if dtype.names is not None:
        fields = dtype.fields
        assert fields is not None
        for name in dtype.names:
            field_dtype, field_offset = fields[name][:2]
            _cover(field_dtype, offset + field_offset, covered)
    elif dtype.subdtype is not None and dtype.subdtype[0].names is not None:
        base, shape = dtype.subdtype
        for i in range(int(np.prod(shape))):  # a subarray of records: each element has its own padding
            _cover(base, offset + i * base.itemsize, covered)
    else:
        covered[offset : offset + dtype.itemsize] = True


@lru_cache(maxsize=256)
def _padding_mask(dtype: np.dtype[Any]) -> npt.NDArray[np.uint64] | None:
    """For a structured *dtype* with padding bytes, the (w,) word mask that zeroes them; else None."""
    if dtype.names is None:
        return None
    words = -(-dtype.itemsize // 8)
    covered = np.zeros(words * 8, dtype=bool)
    _cover(dtype, 0, covered)
    if covered[: dtype.itemsize].all():
        return None
    mask = np.where(covered, np.uint8(0xFF), np.uint8(0)).view(np.uint64)
    mask.flags.writeable = False
    return mask


def has_padding(dtype: npt.DTypeLike) -> bool:
    """Whether *dtype* is a structured dtype with padding bytes, which :func:`key_words` zeroes."""
    return _padding_mask(np.dtype(dtype)) is not None


def words_per_key(dtype: npt.DTypeLike) -> int:
    """How many 64-bit words :func:`key_words` gives per key of *dtype* (its itemsize rounded up to 8 bytes)."""
    return max(1, -(-np.dtype(dtype).itemsize // 8))


def key_words(keys: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """The canonical form of a 1-D key array: an ``(n, w)`` uint64 matrix of each key's bytes.

    Each row is the key's ``itemsize`` bytes followed by zeros up to a multiple of 8 (``w = ceil(itemsize / 8)``,
    1 for keys of up to 8 bytes), read as native 64-bit words; padding bytes of structured dtypes are zeroed.
    Keys are equal exactly when their rows are equal, which is what tables compare and what :func:`hash_keys`
    hashes.  For 8-byte dtypes without padding (``uint64``, ``float64``, ``S8``...) of a C-contiguous array this
    is a view of *keys* (no copy): treat it as read-only.  Raises ``ValueError`` unless *keys* is 1-D and
    ``TypeError`` for object dtypes.
    """
    array = np.ascontiguousarray(as_keys(keys))
    n = array.shape[0]
    itemsize = array.dtype.itemsize
    raw = array.view(np.uint8).reshape(n, itemsize)  # works for every fixed dtype, records included
    uint = _UINT_OF_SIZE.get(itemsize)
    words: npt.NDArray[np.uint64]
    if uint is np.uint64:
        words = raw.view(np.uint64)  # (n, 1), no copy
    elif uint is not None:
        words = raw.view(uint).astype(np.uint64)  # (n, 1): zero-extended
    else:
        w = words_per_key(array.dtype)
        padded = np.zeros((n, w * 8), dtype=np.uint8)
        padded[:, :itemsize] = raw
        words = padded.view(np.uint64)
    mask = _padding_mask(array.dtype)
    if mask is not None:
        words = words & mask
    return words


def _mix(z: npt.NDArray[np.uint64], scratch: npt.NDArray[np.uint64]) -> None:
    """splitmix64's finalizer (Stafford's variant 13) in place, a bijection of 64-bit words; *scratch* is one
    preallocated temporary (a temporary per step costs a large part of the hash's time)."""
    np.right_shift(z, _S30, out=scratch)
    z ^= scratch
    z *= _M1
    np.right_shift(z, _S27, out=scratch)
    z ^= scratch
    z *= _M2
    np.right_shift(z, _S31, out=scratch)
    z ^= scratch


def hash_words(words: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """The hash of each row of a :func:`key_words` matrix (see :func:`hash_keys`; a fresh array)."""
    if words.ndim != 2:
        raise ValueError(f"words must be an (n, w) matrix; got shape {words.shape}")
    h = np.full(words.shape[0], _SEED, dtype=np.uint64)
    scratch = np.empty_like(h)
    for j in range(words.shape[1]):
        h ^= words[:, j]
        _mix(h, scratch)
    return h


def hash_keys(keys: npt.ArrayLike) -> npt.NDArray[np.uint64]:
    """A deterministic 64-bit hash of each key's canonical bytes: the same on every rank, run and platform of
    the same byte order.

    The algorithm, fixed because ranks must agree (changing it reshuffles the partition of longer keys):
    ``h = 0x9E3779B97F4A7C15``; for each 64-bit word ``x`` of the key (:func:`key_words`), ``h = mix(h ^ x)``,
    where ``mix`` is splitmix64's finalizer (``z ^= z >> 30; z *= 0xBF58476D1CE4E5B9; z ^= z >> 27;
    z *= 0x94D049BB133111EB; z ^= z >> 31``, arithmetic modulo 2**64).  ``mix`` is a bijection, so keys of up to
    8 bytes never collide, and it spreads every input bit over all 64 output bits: both the high bits
    (:class:`HashPartitioner`'s owner of longer keys) and the low bits (a rank's own table,
    :class:`~mailrail.containers.table.KeyTable`) are well mixed, and independent of each other.
    """
    return hash_words(key_words(keys))


def _multiply_high(h: npt.NDArray[np.uint64], size: int) -> npt.NDArray[np.int64]:
    """``floor(h * size / 2**64)`` for ``size <= 2**32``, exactly, in 64-bit arithmetic (split into halves)."""
    n = np.uint64(size)
    high = (h >> _S32) * n  # < 2**32 * size <= 2**64: no overflow
    low = ((h & _LOW32) * n) >> _S32  # < size
    return ((high + low) >> _S32).astype(np.int64)


class HashPartitioner:
    """Keys to ranks ``0..size-1``: consecutive keys exactly evenly, any other distribution evenly by a hash.

    **Keys of up to 8 bytes** are their word ``p`` (:func:`key_words`: the bytes, zero-extended, read as an
    unsigned 64-bit number; a negative integer reads as a large one).  The words fall in *blocks* of *size*
    consecutive values, block ``q = p // size``, and each block is dealt out once around the ranks from a
    rotation of its own::

        owner = (p % size + rotation(q)) % size
        rotation(q) = floor(((q * 0x9E3779B97F4A7C15) mod 2**64) * size / 2**64)

    (the rotation is Knuth's multiplicative hash of the block, its high part reduced to a rank as Lemire's
    multiply-high does).  So every block of *size* consecutive keys has exactly one key on every rank: vertex ids,
    indices and small hot keys spread exactly evenly, and a rank's keys in a range of ``n`` values have distinct
    blocks, ``n / size`` of them, in which an owner counts them densely (as
    :class:`~mailrail.containers.CountingSet` does: :meth:`block`, :meth:`words_of`).  Keys that share a residue
    (all even keys, a stride of *size*) spread by the rotation, which is even for blocks in any arithmetic
    progression (the three-distance theorem of the golden ratio).  Four numpy operations per key for a
    power-of-two *size*, where the hash of every byte would take ten.

    **Longer keys** (fixed-width strings, records) go by the high part of ``hash * size``
    (``floor(hash * size / 2**64)``, :func:`hash_keys`): no division, exactly uniform up to one part in
    ``2**64 / size`` for any *size*.

    Either way the owner is a fixed function of the key's bytes and *size*: the same on every rank, in every run.
    The owner does not depend on the low bits of :func:`hash_keys`, which a rank's own hash table uses
    (:class:`~mailrail.containers.table.KeyTable`), so a rank's keys spread over all of its slots.
    """

    def __init__(self, size: int) -> None:
        if not 1 <= size <= 1 << 32:
            raise ValueError(f"size must be a number of ranks from 1 to 2**32; got {size}")
        self.size = int(size)
        self._size = np.uint64(size)
        # A power-of-two size: blocks by a shift, the rotation by the high bits, the sum modulo by a mask.
        power = size & (size - 1) == 0
        self._bits = np.uint64(size.bit_length() - 1) if power else None
        self._top = np.uint64(64 - (size.bit_length() - 1)) if power and size > 1 else None
        self._mask = np.uint64(size - 1)

    def owner(self, keys: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The rank owning each key of the 1-D array *keys* (int64, in ``0..size-1``)."""
        return self.owner_of_words(key_words(keys))

    def owner_of_words(self, words: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        """The rank owning each key, from its :func:`key_words` matrix (``(n, w)`` uint64)."""
        if words.ndim != 2:
            raise ValueError(f"words must be an (n, w) matrix; got shape {words.shape}")
        if words.shape[1] > 1:
            return _multiply_high(hash_words(words), self.size)
        p = words[:, 0]
        if self.size == 1:
            return np.zeros(len(p), dtype=np.int64)
        if self._top is not None and self._bits is not None:  # in place on one fresh array: every sender's per-key work
            owners = p >> self._bits
            owners *= _SEED
            owners >>= self._top
            owners += p
            owners &= self._mask
            return owners.view(np.int64)
        blocks = p // self._size
        within = p - blocks * self._size
        blocks *= _SEED
        rotated = _multiply_high(blocks, self.size)
        rotated += within.view(np.int64)
        np.subtract(rotated, self.size, out=rotated, where=rotated >= self.size)
        return rotated

    def owner_of_hashes(self, hashes: npt.NDArray[np.uint64]) -> npt.NDArray[np.int64]:
        """The rank owning each key of these 64-bit *hashes*: ``floor(hash * size / 2**64)``, the rule of keys
        longer than 8 bytes, and of variable-size keys (:func:`~mailrail.containers.varkeys.hash_bytes`)."""
        if self.size == 1:
            return np.zeros(len(hashes), dtype=np.int64)
        return _multiply_high(hashes, self.size)

    def block(self, words: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        """The block ``p // size`` of each one-word key's word *p* (a 1-D uint64 array; a fresh array): one rank's
        keys have distinct blocks."""
        return words >> self._bits if self._bits is not None else words // self._size

    def words_of(self, blocks: npt.NDArray[np.uint64], rank: int) -> npt.NDArray[np.uint64]:
        """The word of the one key of each block in *blocks* (uint64) that rank *rank* owns: :meth:`block`'s
        inverse on that rank's keys."""
        if self.size == 1:
            return blocks.copy()
        rotation = _multiply_high(blocks * _SEED, self.size)
        within = (rank - rotation) % self.size
        return blocks * self._size + within.astype(np.uint64)

    def __repr__(self) -> str:
        return f"HashPartitioner(size={self.size})"


class BlockPartitioner:
    """Indices ``0..length-1`` of a distributed array to ranks ``0..size-1`` in contiguous blocks.

    Blocks are as even as possible and ordered by rank, like ``numpy.array_split``: the first ``length % size``
    ranks hold ``length // size + 1`` indices, the others ``length // size`` (possibly none, when
    ``length < size``).  Indices are integers in ``0..length-1`` (no negative indices from the end): others raise
    ``IndexError`` naming the first bad one.
    """

    def __init__(self, length: int, size: int) -> None:
        if length < 0:
            raise ValueError(f"length must be >= 0; got {length}")
        if size < 1:
            raise ValueError(f"size must be a number of ranks >= 1; got {size}")
        self.length = int(length)
        self.size = int(size)
        self._base, self._extra = divmod(self.length, self.size)
        # indices below this are in the first, longer blocks
        self._boundary = self._extra * (self._base + 1)

    def _check_rank(self, rank: int) -> int:
        if not 0 <= rank < self.size:
            raise IndexError(f"rank {rank} is out of range 0..{self.size - 1}")
        return int(rank)

    def start(self, rank: int) -> int:
        """The first index rank *rank* owns."""
        rank = self._check_rank(rank)
        return rank * self._base + min(rank, self._extra)

    def stop(self, rank: int) -> int:
        """One past the last index rank *rank* owns (``start(rank)`` for an empty block)."""
        return self.start(rank) + self.count(rank)

    def count(self, rank: int) -> int:
        """How many indices rank *rank* owns."""
        return self._base + (1 if self._check_rank(rank) < self._extra else 0)

    @property
    def offsets(self) -> npt.NDArray[np.int64]:
        """The ``size + 1`` block boundaries: rank ``r`` owns ``offsets[r]:offsets[r + 1]``."""
        ranks = np.arange(self.size + 1, dtype=np.int64)
        return ranks * self._base + np.minimum(ranks, self._extra)

    def _check_indices(self, indices: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """*indices* as int64, each in ``0..length-1``, else ``IndexError`` naming the first that is not."""
        array = np.asarray(indices)
        if array.dtype.kind not in "iu":
            raise TypeError(f"indices must be integers; got dtype {array.dtype}")
        if array.dtype.kind == "u":
            bad = array >= self.length  # compared unsigned: a huge uint64 does not wrap to a negative
        else:
            bad = (array < 0) | (array >= self.length)
        if bad.any():
            first = array.reshape(-1)[int(np.argmax(bad.reshape(-1)))]
            valid = f"0..{self.length - 1}" if self.length else "empty (length 0)"
            raise IndexError(f"index {first} is out of range {valid}")
        return array.astype(np.int64, copy=False)

    def _owner(self, index: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        if self._base == 0:  # length < size: one index per rank, in the first `length` ranks
            return index.copy()
        long_block = index // (self._base + 1)
        short_block = self._extra + (index - self._boundary) // self._base
        return np.where(index < self._boundary, long_block, short_block)

    def owner(self, indices: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """The rank owning each index (int64, same shape as *indices*)."""
        return self._owner(self._check_indices(indices))

    def local_offsets(self, indices: npt.ArrayLike) -> npt.NDArray[np.int64]:
        """Each index's position in its owner's block: ``index - start(owner(index))``."""
        index = self._check_indices(indices)
        owner = self._owner(index)
        return index - (owner * self._base + np.minimum(owner, self._extra))

    def __repr__(self) -> str:
        return f"BlockPartitioner(length={self.length}, size={self.size})"
