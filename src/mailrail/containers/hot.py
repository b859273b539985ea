"""The CountingSet sender's lookup of one-word keys in its table of hot keys: numpy reference and compiled twin.

A sender that combines keys (:mod:`mailrail.containers.counting_set`, *Combining*) looks every key of a batch
up in a direct-mapped table: slot ``hash >> shift`` of ``2 ** (64 - shift)`` slots holds one hot key's hash,
the hash of a one-word key being its word times Knuth's constant (a bijection, so equal hashes mean equal
keys).  A hot key's count goes to ``held[slot]``; the others leave as plain keys.  :func:`split_hot` is the
compiled ``_hot.split_hot`` when it is built (one pass), else :func:`split_hot_numpy` (six numpy passes,
slower: docs, performance); both give the same result, which a test checks
on random tables and batches.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np
import numpy.typing as npt

from .partition import HASH_SEED

__all__ = ["split_hot", "split_hot_numpy", "IMPLEMENTATION"]

#: A one-word key's hash is its word times Knuth's multiplicative constant (``_hot.pyx`` has it too).
SEED = np.uint64(HASH_SEED)


def split_hot_numpy(
    words: npt.NDArray[np.uint64],
    table: npt.NDArray[np.uint64],
    shift: int,
    held: npt.NDArray[np.float64],
    cold: npt.NDArray[np.int64],
) -> int:
    """Add one to ``held[slot]`` for each key of *words* whose hash *table* holds at its slot (``hash >> shift``),
    write the positions of the other keys, in order, to the start of *cold*; return how many those are.

    *words*: the batch's keys as uint64 (1-D); *table*: ``2 ** (64 - shift)`` hashes; *held*: one float64
    count per slot (exact below 2**53, as a ``bincount``'s weights are); *cold*: room for every key.
    """
    _check(len(words), len(table), shift, len(held), len(cold))
    hashes = words * SEED
    slot = (hashes >> np.uint64(shift)).view(np.int64)
    is_hot = table[slot] == hashes
    held += np.bincount(slot, weights=is_hot, minlength=len(table))
    positions = (~is_hot).nonzero()[0]  # positions, then gathers: masks (random branches) cost more
    cold[: len(positions)] = positions
    return len(positions)


def _check(count: int, slots: int, shift: int, held: int, cold: int) -> None:
    if held != slots:
        raise ValueError(f"split_hot: {held} held counts for a table of {slots} slots")
    if cold < count:
        raise ValueError(f"split_hot: room for {cold} cold positions, {count} keys")
    if not 0 < shift < 64 or slots != 1 << (64 - shift):
        raise ValueError(f"split_hot: a table of {slots} slots does not take slot = hash >> {shift}")


def _compiled() -> Any:
    try:
        return importlib.import_module("mailrail.containers._hot").split_hot
    except ImportError:  # not built (no compiler at install): the numpy reference
        return None


_COMPILED = _compiled()
#: The implementation :func:`split_hot` is: ``"compiled"`` or ``"numpy"``, chosen once, at import.
IMPLEMENTATION = "numpy" if _COMPILED is None else "compiled"
split_hot = split_hot_numpy if _COMPILED is None else _COMPILED
