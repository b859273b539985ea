"""Keys and items as the containers take them: the dtype check, conversion of a batch, and the helpers over keys'
bytes (distinct keys of a batch, their canonical form, their byte order).

Every container checks its key (or item, or value) type here once, at construction (:func:`fixed_dtype`), and
converts each batch it is given with :func:`as_keys`.  The hash and the owners are
:mod:`~mailrail.containers.partition`'s.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from .partition import has_padding, key_words

__all__ = [
    "UINT_OF_SIZE",
    "as_keys",
    "byte_order",
    "canonical",
    "distinct_keys",
    "fixed_dtype",
    "keys_of_words",
    "ranked",
]

#: The unsigned integer type of each size below 8 bytes.
UINT_OF_SIZE: dict[int, type[np.unsignedinteger[Any]]] = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def fixed_dtype(given: npt.DTypeLike, where: str, what: str = "keys") -> np.dtype[Any]:
    """*given* as a numpy dtype of fixed-size data, else ``TypeError`` naming *where* and *what*."""
    dtype = np.dtype(given)
    if dtype.hasobject or dtype.itemsize == 0:
        raise TypeError(f"{where}: {what} must have a fixed-size dtype (numbers, bytes, records); got {dtype}")
    return dtype


def as_keys(keys: Any, dtype: np.dtype[Any], where: str) -> npt.NDArray[Any]:
    """*keys* as a 1-D array of *dtype*: the same dtype, or one numpy converts to it without loss.

    An array of another dtype is converted only when numpy calls it safe (``int32`` keys for an ``int64``
    container), else ``TypeError`` names both dtypes.  A list of Python values is converted when every
    value survives: integers in the dtype's range for an integer container (``[1.5]`` for one is refused,
    not truncated), strings that encode to the width of a bytes container, and so on.
    """
    array = np.asarray(keys)
    if array.dtype != dtype:
        if isinstance(keys, np.ndarray) or array.dtype.kind not in "iub":
            # An array, or a list numpy read as floats, strings or records: only a safe cast.
            safe = np.can_cast(array.dtype, dtype, casting="safe")
            unicode_to_bytes = array.dtype.kind == "U" and dtype.kind == "S" and not isinstance(keys, np.ndarray)
            if not (safe or unicode_to_bytes or array.size == 0):
                raise TypeError(f"{where}: keys of dtype {array.dtype} for a container of dtype {dtype}")
        try:
            converted = np.asarray(array, dtype=dtype)
        except (TypeError, ValueError, OverflowError) as error:
            raise TypeError(f"{where}: keys cannot be converted to {dtype}: {error}") from error
        if array.dtype.kind in "iub" and dtype.kind in "iub" and not np.array_equal(converted, array):
            bad = array[converted != array][0]
            raise TypeError(f"{where}: key {bad} is out of the range of {dtype}")
        if array.dtype.kind == "U" and dtype.kind == "S" and not np.array_equal(converted.astype(array.dtype), array):
            raise TypeError(f"{where}: keys longer than {dtype.itemsize} bytes for a container of dtype {dtype}")
        array = converted
    if array.ndim != 1:
        raise ValueError(f"{where}: keys must be a 1-D array, got shape {array.shape}")
    return np.ascontiguousarray(array)


def keys_of_words(words: npt.NDArray[np.uint64], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """The keys of *dtype* whose canonical words (:func:`~mailrail.containers.partition.key_words`) are *words*."""
    count = words.shape[0]
    itemsize = dtype.itemsize
    uint = UINT_OF_SIZE.get(itemsize)
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
    if width == 1:  # a sort and a pass: a quarter faster than np.unique's general path
        ordered = np.sort(words[:, 0])
        starts_run = np.ones(len(ordered), dtype=bool)
        np.not_equal(ordered[1:], ordered[:-1], out=starts_run[1:])
        starts = np.flatnonzero(starts_run)
        counts = np.diff(starts, append=len(ordered))
        unique_words = ordered[starts].reshape(-1, 1)
    else:
        rows = np.ascontiguousarray(words).view(np.dtype((np.void, 8 * width))).reshape(-1)
        unique_rows, counts = np.unique(rows, return_counts=True)
        unique_words = np.ascontiguousarray(unique_rows).view(np.uint64).reshape(-1, width)
    return keys_of_words(unique_words, keys.dtype), counts.astype(np.int64), unique_words


def canonical(keys: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """*keys* with the padding bytes of a structured dtype zeroed (numpy's copies of such records leave their
    padding undefined); other keys as they are."""
    if not has_padding(keys.dtype):
        return keys
    return keys_of_words(key_words(keys), keys.dtype)


def byte_order(keys: npt.NDArray[Any]) -> npt.NDArray[np.intp]:
    """The stable permutation that sorts 1-D *keys* by their bytes, compared as unsigned bytes from the first
    (``memcmp``; structured padding zeroed): the deterministic order of ties, the same on every rank."""
    count = len(keys)
    if count == 0:
        return np.zeros(0, dtype=np.intp)
    raw = np.ascontiguousarray(key_words(keys)).view(np.uint8).reshape(count, -1)[:, : keys.dtype.itemsize]
    rows = np.ascontiguousarray(raw).view(np.dtype((np.void, keys.dtype.itemsize))).reshape(count)
    return np.argsort(rows, kind="stable")


def ranked(keys: npt.NDArray[Any], counts: npt.NDArray[np.int64]) -> npt.NDArray[np.intp]:
    """The permutation putting *counts* in descending order, ties in ascending order of the keys' bytes."""
    by_bytes = byte_order(keys)
    return by_bytes[np.argsort(-counts[by_bytes], kind="stable")]
