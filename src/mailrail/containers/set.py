"""A distributed set of keys: YGM's ``set``, in batches.

Each key is owned by one rank (:class:`~mailrail.containers.partition.HashPartitioner`), which keeps it in a
:class:`~mailrail.containers.table.KeyTable`.  :meth:`Set.insert` and :meth:`Set.erase` are asynchronous: the
batch's duplicates are dropped on the sender, and each distinct key goes to its owner through the rail's
channels; the next ``rail.barrier()``, or any collective operation, completes them.

**Order.**  Inserts and erases of *one* key issued between two collectives (or barriers) are applied in no
defined order, even when one rank issued both: the rail delivers datagrams out of order.  Separate them by a
barrier when the order matters (``insert``, barrier, ``erase`` leaves the key out).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..channels import Blobs, Rail
from ..collectives import collective
from .arrivals import Arrivals, Run
from .base import Container, Lookup, table_of
from .keys import Strings, StringTable, canonical, fixed_dtype, is_string_type, numpy_column
from .table import KeyTable, distinct_keys

__all__ = ["Set", "StringSet"]

#: The kinds of arrivals an owner applies, in order.
_INSERT, _ERASE = 0, 1


class Set(Container):
    """A distributed set of keys of one fixed *dtype* (YGM's ``set``).

    Construction is collective (every rank makes the same containers in the same order on the rail).  Keys of
    any fixed-size dtype are equal exactly when their bytes are (see :mod:`mailrail.containers.partition`).
    """

    kind = "Set"
    #: Arrived keys buffered before one table operation applies them (a read applies them at once).
    pending_limit = 1 << 16

    def __new__(cls, rail: Rail, dtype: Any) -> Set:
        # Set(rail, str) and Set(rail, bytes) are sets of strings of any length.
        if cls is Set and is_string_type(dtype):
            return super().__new__(StringSet)
        return super().__new__(cls)

    @collective
    def __init__(self, rail: Rail, dtype: npt.DTypeLike) -> None:
        super().__init__(rail)
        self.dtype: np.dtype[Any] = fixed_dtype(dtype, "Set")
        self._key_dtype = self.dtype
        self._table = KeyTable(self.dtype)
        # Arrivals not yet applied, in arrival order (see _on_insert).
        self._arrivals = Arrivals([self.dtype, self.dtype], self.pending_limit, self._apply_run, ordered=True)
        self._inserts = self._channel(self.dtype, self._on_insert, "inserts")
        self._erases = self._channel(self.dtype, self._on_erase, "erases")
        self._finder = Lookup(self, self.dtype, np.dtype(np.bool_), self._contains_here, "contains")

    # -- asynchronous --------------------------------------------------------

    def insert(self, keys: npt.ArrayLike) -> None:
        """Add each key of the 1-D batch *keys* (asynchronous; YGM's ``async_insert``); a key already present
        stays once.  The next ``rail.barrier()`` or collective completes it.  Allowed inside handlers.  Raises
        before anything is sent: ``TypeError`` for keys of another dtype numpy does not cast safely,
        ``ValueError`` unless 1-D."""
        self._send(self._inserts, self._keys(keys, "insert"))

    def erase(self, keys: npt.ArrayLike) -> None:
        """Remove each key of the 1-D batch *keys* that is present (asynchronous; YGM's ``async_erase``); absent
        keys are ignored.  Not ordered with inserts of the same key before the same barrier (see the module)."""
        self._send(self._erases, self._keys(keys, "erase"))

    def _send(self, channel: Any, keys: npt.NDArray[Any]) -> None:
        for part in self._parts(len(keys)):
            unique, _, words = distinct_keys(keys[part])
            channel.send(self.partitioner.owner_of_words(words), unique)

    def _on_insert(self, source: int, keys: npt.NDArray[Any]) -> None:
        # A datagram holds a few hundred keys: one table operation per datagram would cost more in numpy calls
        # than in work, so arrivals wait, in arrival order, until enough are there or something reads the set.
        self._arrivals.add(_INSERT, keys)

    def _on_erase(self, source: int, keys: npt.NDArray[Any]) -> None:
        self._arrivals.add(_ERASE, keys)

    def _apply_arrivals(self) -> None:
        """Apply the arrivals waiting, in arrival order, each run of inserts (or erases) as one batch."""
        self._arrivals.apply_all()

    def _apply_run(self, run: Run) -> None:
        if run.kind == _ERASE:
            self._table.erase(run.records)
        else:
            self._table.insert(run.records)

    # -- collective ----------------------------------------------------------

    def _contains_here(self, keys: npt.NDArray[Any]) -> npt.NDArray[np.bool_]:
        self._apply_arrivals()
        found: npt.NDArray[np.bool_] = self._table.lookup(keys) >= 0
        return found

    @collective
    def contains(self, keys: npt.ArrayLike) -> npt.NDArray[np.bool_]:
        """Collective: whether each key of the 1-D batch *keys* is in the set, in the caller's order (``bool``).
        Each rank asks about its own batch (empty if it has none).  YGM's ``count`` (0 or 1, collective)."""
        keys = self._keys(keys, "contains")
        self._collective("contains")
        return self._finder.ask(keys, self.partitioner.owner(keys))

    @collective
    def size(self) -> int:
        """Collective: how many keys the set holds (YGM's ``size``)."""
        self._collective("size")
        self._apply_arrivals()
        return self.channels.allreduce_sum(len(self._table))

    # -- local ---------------------------------------------------------------

    def local(self) -> Any:
        """This rank's keys, a ``pyarrow.Table`` of one column, ``key`` (not collective: call ``rail.barrier()``
        first to see pending inserts and erases).  YGM's ``for_all`` over the local part."""
        self._apply_arrivals()
        return table_of({"key": canonical(self._table.keys.copy())})

    def _absorb(self, table: Any, where: str) -> None:
        self.insert(numpy_column(table.column(0), self.dtype))

    def __repr__(self) -> str:
        return f"<Set of {self.dtype} on rank {self.rank}: {len(self._table)} local keys>"


_NOTHING = np.dtype([])


class StringSet(Set):
    """``Set(rail, str)`` or ``Set(rail, bytes)``: a set of strings of any length, with :class:`Set`'s operations
    (see :mod:`mailrail.containers.keys` for what a batch may be).  Owners keep them in a
    :class:`~mailrail.containers.keys.StringTable`; ``insert`` and ``erase`` send each distinct string of a batch
    once."""

    @collective
    def __init__(self, rail: Rail, kind: type) -> None:  # (Set.__init__'s setup is for fixed-size keys)
        Container.__init__(self, rail)
        self._strings = Strings(kind)
        #: ``str`` or ``bytes``.
        self.dtype = kind  # type: ignore[assignment]
        self._string_table = StringTable()
        self._arrivals = Arrivals(
            [_NOTHING, _NOTHING], self.pending_limit, self._apply_string_run, ordered=True, blobs=frozenset({0, 1})
        )
        self._inserts = self._channel(_NOTHING, self._on_string_insert, "inserts", blobs=True)
        self._erases = self._channel(_NOTHING, self._on_string_erase, "erases", blobs=True)
        self._finder = Lookup(self, self._strings, np.dtype(np.bool_), self._contains_here, "contains")

    def insert(self, keys: Any) -> None:
        """Add each string of the batch *keys* (asynchronous; see :meth:`Set.insert`)."""
        self._send_strings(self._inserts, self._string_keys(keys, "insert"))

    def erase(self, keys: Any) -> None:
        """Remove each string of the batch *keys* that is present (asynchronous; see :meth:`Set.erase`)."""
        self._send_strings(self._erases, self._string_keys(keys, "erase"))

    def _send_strings(self, channel: Any, blobs: Blobs) -> None:
        if blobs.count == 0:
            return
        distinct = StringTable(blobs.count)
        distinct.insert(blobs)
        channel.send(self.partitioner.owner_of_hashes(distinct.hashes()), None, distinct.keys())

    def _on_string_insert(self, source: int, records: npt.NDArray[Any], blobs: Blobs) -> None:
        self._arrivals.add(_INSERT, records, blobs)

    def _on_string_erase(self, source: int, records: npt.NDArray[Any], blobs: Blobs) -> None:
        self._arrivals.add(_ERASE, records, blobs)

    def _apply_string_run(self, run: Run) -> None:
        assert run.blobs is not None
        if run.kind == _ERASE:
            self._string_table.erase(run.blobs)
        else:
            self._string_table.insert(run.blobs)

    def _contains_here(self, keys: Any) -> npt.NDArray[np.bool_]:
        self._apply_arrivals()
        found: npt.NDArray[np.bool_] = self._string_table.lookup(keys) >= 0
        return found

    @collective
    def contains(self, keys: Any) -> npt.NDArray[np.bool_]:
        """Collective: whether each string of the batch *keys* is in the set, in the caller's order."""
        blobs = self._string_keys(keys, "contains")
        self._collective("contains")
        return self._finder.ask(blobs, Strings.owners(blobs, self.partitioner))

    @collective
    def size(self) -> int:
        """Collective: how many strings the set holds."""
        self._collective("size")
        self._apply_arrivals()
        return self.channels.allreduce_sum(len(self._string_table))

    def local(self) -> Any:
        """This rank's strings, a ``pyarrow.Table`` of one column, ``key`` (see :meth:`Set.local`)."""
        self._apply_arrivals()
        return table_of({"key": self._strings.arrow(self._string_table.keys())})  # type: ignore[union-attr]

    def _absorb(self, table: Any, where: str) -> None:
        self.insert(table.column(0))

    def __repr__(self) -> str:
        return f"<Set of {self._strings} on rank {self.rank}: {len(self._string_table)} local keys>"
