"""What an owner received and has not applied yet: the one buffer of arrivals every container's owner keeps.

A datagram holds hundreds to thousands of records: applying each arrival to a hash table at once would cost more
in numpy calls than in work, so an owner copies arrivals into an :class:`Arrivals` buffer (one copy per segment)
and applies them in bulk, when the buffer holds its *limit* of records or before anything reads the container.

Arrivals are kept in *runs*: consecutive arrivals of one kind (and tag) share a run, whose records are one
contiguous array (and, for records with variable-size parts, one :class:`~mailrail.channels.Blobs` per part: a
string key, or a string key and its string value).  An
*ordered* buffer keeps runs in arrival order (a set's inserts and erases, a map's operations: applying them in
runs, in order, is what applying each arrival at once would do); an unordered one keeps one run per kind, for
operations that commute (a counting set's additions).

Run buffers are borrowed from a few spare arrays per dtype and given back when applied: a rank's containers
share buffers whose memory is already mapped rather than each filling fresh memory (a page fault per 4 KiB costs
more than the copy into it), and an idle container holds none.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from ..channels import Blobs

__all__ = ["Arrivals", "Run"]

#: Spare run buffers by dtype (see the module).
_SPARES: dict[np.dtype[Any], list[npt.NDArray[Any]]] = {}
#: The most spare buffers kept per dtype.
_SPARES_PER_DTYPE = 2
#: Records a run of an ordered buffer has room for at first (it doubles as it fills).
_FIRST_ROOM = 4096


def _borrow(dtype: np.dtype[Any], room: int) -> npt.NDArray[Any]:
    """An array of at least *room* records of *dtype*: a spare if one is large enough, else a new one (its pages
    mapped as they fill)."""
    spares = _SPARES.get(dtype)
    if spares:
        for index, spare in enumerate(spares):
            if len(spare) >= room:
                return spares.pop(index)
    return np.empty(room, dtype=dtype)


def _give_back(buffer: npt.NDArray[Any]) -> None:
    spares = _SPARES.setdefault(buffer.dtype, [])
    if len(spares) < _SPARES_PER_DTYPE:
        spares.append(buffer)
    elif len(buffer) > len(spares[0]):
        spares[0] = buffer


class Run(NamedTuple):
    """Consecutive arrivals of one kind: their records (a view of the buffer, valid until the buffer is applied)
    and, for records with variable-size parts, those parts: the first in *blobs*, any others in *more*."""

    kind: int
    tag: object
    records: npt.NDArray[Any]
    blobs: Blobs | None
    more: tuple[Blobs, ...] = ()


class _Part:
    """One variable-size part of a run's records: offsets from 0, and bytes."""

    def __init__(self, room: int) -> None:
        self.offsets: npt.NDArray[np.int64] = _borrow(np.dtype(np.int64), room + 1)
        self.offsets[0] = 0
        self.data: npt.NDArray[np.uint8] = _borrow(np.dtype(np.uint8), 16 * room)
        self.data_fill = 0

    def append(self, fill: int, end: int, blobs: Blobs) -> None:
        if end + 1 > len(self.offsets):
            self.offsets = _Buffer._grown(self.offsets, fill + 1, end + 1)
        first = int(blobs.offsets[0])
        nbytes = int(blobs.offsets[-1]) - first
        if self.data_fill + nbytes > len(self.data):
            self.data = _Buffer._grown(self.data, self.data_fill, self.data_fill + nbytes)
        self.data[self.data_fill : self.data_fill + nbytes] = blobs.data[first : first + nbytes]
        np.add(blobs.offsets[1:], self.data_fill - first, out=self.offsets[fill + 1 : end + 1])
        self.data_fill += nbytes

    def blobs(self, fill: int) -> Blobs:
        return Blobs(self.offsets[: fill + 1], self.data[: self.data_fill])

    def release(self) -> None:
        _give_back(self.offsets)
        _give_back(self.data)


class _Buffer:
    """One run's storage: records, and *parts* variable-size parts of each (:class:`_Part`)."""

    def __init__(self, kind: int, tag: object, dtype: np.dtype[Any], room: int, parts: int) -> None:
        self.kind, self.tag = kind, tag
        self.records = _borrow(dtype, room)
        self.fill = 0
        self.parts = [_Part(room) for _ in range(parts)]

    def append(self, records: npt.NDArray[Any], blobs: tuple[Blobs, ...]) -> None:
        end = self.fill + len(records)
        if end > len(self.records):
            self.records = self._grown(self.records, self.fill, end)
        self.records[self.fill : end] = records
        for part, given in zip(self.parts, blobs, strict=True):
            part.append(self.fill, end, given)
        self.fill = end

    @staticmethod
    def _grown(buffer: npt.NDArray[Any], kept: int, needed: int) -> npt.NDArray[Any]:
        grown = _borrow(buffer.dtype, max(2 * len(buffer), needed))
        grown[:kept] = buffer[:kept]
        _give_back(buffer)
        return grown

    def run(self) -> Run:
        parts = [part.blobs(self.fill) for part in self.parts]
        return Run(self.kind, self.tag, self.records[: self.fill], parts[0] if parts else None, tuple(parts[1:]))

    def release(self) -> None:
        _give_back(self.records)
        for part in self.parts:
            part.release()


class Arrivals:
    """Records an owner received and has not applied yet, in runs (see the module), applied by ``apply(run)``.

    *dtypes*: the records' dtype of each kind (kinds are ``0..len(dtypes)-1``); *blobs*: the kinds whose records
    have a variable-size part (a set), or how many variable-size parts each kind's records have (a dict).
    *limit*: records held before they are applied; for an unordered buffer, a list of one limit per kind, to which
    each kind's run is preallocated (a kind's run that would pass its limit is applied, with the others, before it
    takes more).  *ordered*: runs in arrival order, else one run per kind.
    """

    def __init__(
        self,
        dtypes: list[np.dtype[Any]],
        limit: int | list[int],
        apply: Callable[[Run], object],
        *,
        ordered: bool,
        blobs: frozenset[int] | dict[int, int] = frozenset(),
    ) -> None:
        self.dtypes = [np.dtype(dtype) for dtype in dtypes]
        if ordered != isinstance(limit, int):
            raise TypeError("Arrivals: an ordered buffer takes one limit, an unordered one a limit per kind")
        self.limits = [max(1, limit)] * len(self.dtypes) if isinstance(limit, int) else [max(1, n) for n in limit]
        self.ordered = ordered
        #: How many variable-size parts each kind's records have (kinds not named: none).
        self.parts = dict(blobs) if isinstance(blobs, dict) else dict.fromkeys(blobs, 1)
        self._apply = apply
        self._runs: list[_Buffer] = []
        self._by_kind: dict[int, _Buffer] = {}
        #: Records held.
        self.count = 0

    def add(
        self, kind: int, records: npt.NDArray[Any], blobs: Blobs | tuple[Blobs, ...] | None = None, tag: object = None
    ) -> None:
        """Keep a copy of *records* (and their variable-size parts *blobs*: a :class:`~mailrail.channels.Blobs`, or a
        tuple of one per part) of *kind*, applying what is held when the limit is reached."""
        if self.ordered:
            last = self._runs[-1] if self._runs else None
            if last is None or last.kind != kind or last.tag is not tag:
                last = _Buffer(kind, tag, self.dtypes[kind], max(_FIRST_ROOM, len(records)), self.parts.get(kind, 0))
                self._runs.append(last)
        else:
            last = self._by_kind.get(kind)
            if last is not None and last.fill + len(records) > self.limits[kind]:
                self.apply_all()  # before it would pass its limit: the run's buffer is never copied to grow
                last = None
            if last is None:
                room = max(self.limits[kind], len(records))
                last = self._by_kind[kind] = _Buffer(kind, tag, self.dtypes[kind], room, self.parts.get(kind, 0))
                self._runs.append(last)
        last.append(records, () if blobs is None else (blobs,) if isinstance(blobs, Blobs) else blobs)
        self.count += len(records)
        if (self.count if self.ordered else last.fill) >= self.limits[kind]:
            self.apply_all()

    def apply_all(self) -> None:
        """Apply every run held, in order, and empty the buffer (whatever applying raises)."""
        if not self.count:
            return
        runs, self._runs, self._by_kind, self.count = self._runs, [], {}, 0
        try:
            for buffer in runs:
                self._apply(buffer.run())
        finally:
            for buffer in runs:
                buffer.release()

    def clear(self) -> None:
        """Forget the runs held, unapplied, and give their buffers back to the spares."""
        runs, self._runs, self._by_kind, self.count = self._runs, [], {}, 0
        for buffer in runs:
            buffer.release()
