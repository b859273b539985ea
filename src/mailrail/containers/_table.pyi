"""One-word keys' probes of a KeyTable, compiled (``_table.pyx``; the reference: ``table.py``'s numpy passes)."""

from typing import Any

import numpy as np
import numpy.typing as npt

def insert_words(
    slots: npt.NDArray[Any],
    stored: npt.NDArray[np.uint64],
    slot_of: npt.NDArray[Any],
    words: npt.NDArray[np.uint64],
    hashes: npt.NDArray[np.uint64],
    start: int,
    size: int,
    limit: int,
    index: npt.NDArray[np.int64],
    new: npt.NDArray[np.uint8],
) -> tuple[int, int]:
    """Insert ``words[start:]`` while the table holds at most *limit* keys: ``(next position, size)``."""

def lookup_words(
    slots: npt.NDArray[Any],
    stored: npt.NDArray[np.uint64],
    words: npt.NDArray[np.uint64],
    hashes: npt.NDArray[np.uint64],
    index: npt.NDArray[np.int64],
) -> None:
    """Each key's dense index into *index* (-1 where absent)."""

def place(slots: npt.NDArray[Any], slot_of: npt.NDArray[Any], hashes: npt.NDArray[np.uint64]) -> None:
    """Put dense entries ``0..n-1`` into the empty slots of a rebuilt table, writing each one's slot."""
