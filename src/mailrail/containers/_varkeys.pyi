"""The hash and the hash table of variable-size keys, compiled (``_varkeys.pyx``; the reference is ``varkeys.py``)."""

from typing import Any

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

def hash_bytes(offsets: npt.NDArray[Any], data: npt.NDArray[np.uint8]) -> npt.NDArray[np.uint64]:
    """The hash of each key packed in *offsets* and *data*."""

def longest(offsets: npt.NDArray[Any]) -> int:
    """The length of the longest key packed in *offsets* (0 for none)."""

@disjoint_base
class BytesTable:
    """A set of byte-string keys with dense indices."""

    def __init__(self, capacity: int = 1024) -> None: ...
    def insert(
        self, offsets: npt.NDArray[Any], data: npt.NDArray[np.uint8]
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]: ...
    def count(
        self,
        offsets: npt.NDArray[Any],
        data: npt.NDArray[np.uint8],
        counts: npt.NDArray[np.int64],
        weights: npt.NDArray[np.int64] | None = None,
    ) -> int: ...
    def lookup(self, offsets: npt.NDArray[Any], data: npt.NDArray[np.uint8]) -> npt.NDArray[np.int64]: ...
    def erase(
        self, offsets: npt.NDArray[Any], data: npt.NDArray[np.uint8]
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
    def keys(
        self, large: bool = True, order: npt.NDArray[np.int64] | None = None
    ) -> tuple[npt.NDArray[Any], npt.NDArray[np.uint8]]: ...
    def hashes_of_keys(self) -> npt.NDArray[np.uint64]: ...
    def clear(self, keep: bool = False) -> None: ...
    def __len__(self) -> int: ...
    @property
    def nbytes(self) -> int: ...

@disjoint_base
class HotStrings:
    """A sender's direct-mapped cache of frequent strings and their counts."""

    def __init__(self, slots: int = 8192, ranks: int = 1) -> None: ...
    def hold(self, offsets: npt.NDArray[Any], data: npt.NDArray[np.uint8]) -> int: ...
    def take(
        self, everything: bool = False
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.uint8], npt.NDArray[np.int64], npt.NDArray[np.int64]]: ...
    def clear(self) -> None: ...
    @property
    def leaving(self) -> int: ...
    def __len__(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
