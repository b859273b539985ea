"""Record coalescing: many small fixed-size records packed per destination into datagrams.

Applications send 8-byte histogram keys or 40-byte edges by the million; one
MailRail message each would spend all the time in per-message Python.  A
:class:`Coalescer` takes a numpy array of records and their destinations,
partitions them by destination with one stable radix sort, and copies whole
slices into send buffers: no Python loop per record.  Full datagrams leave at
once; the remainder waits in a per-destination staging row until
:meth:`Coalescer.flush`.  Arriving records are handed back to the
application as record arrays (zero-copy views, valid during the handler).
Records a rank sends to itself never touch MPI: they go to the handler at
once, as one array (YGM delivers local messages the same way).

A Coalescer is one :class:`~mailrail.channels.Channel` of the rail's
:attr:`~mailrail.rail.MailRail.channels`: any number of them, of any record types, and the
containers (:mod:`mailrail.containers`) share one rail, its pools and its credits.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .channels import Channel
from .collectives import collective
from .rail import MailRail, Message

__all__ = ["Coalescer"]


class Coalescer:
    """Packs records of one numpy *dtype* per destination into datagrams of *rail*.

    *handler* receives ``(source, records)`` for each arriving run of records, where *records* is a
    read-only array of *dtype* viewing the receive buffer; copy what must outlive the call.  The handler
    may send more records.

    Collective: every rank makes the same Coalescers (and containers) in the same order; any number of
    them share one rail.  Records still staged at ``rail.finalize()`` are reported, as ``"staged"``,
    with an :class:`~mailrail.errors.UndeliveredWarning` (:class:`~mailrail.errors.UndeliveredError` if
    strict): call :meth:`flush` or :meth:`barrier` first.
    """

    @collective
    def __init__(
        self, rail: MailRail, dtype: np.dtype | type | str, handler: Callable[[int, np.ndarray], object]
    ) -> None:
        self.rail = rail
        self.dtype = np.dtype(dtype)
        self.handler = handler
        self.record_size = self.dtype.itemsize
        self._channel: Channel = rail.channels.open(self.dtype, handler, name=f"Coalescer of {self.dtype}")
        self.per_datagram = self._channel.per_datagram

    @property
    def records_sent(self) -> int:
        """Records handed to :meth:`send` (local ones included)."""
        return self._channel.records_sent

    @property
    def records_received(self) -> int:
        """Records handed to the handler."""
        return self._channel.records_received

    @property
    def datagrams_sent(self) -> int:
        """Datagrams the rail's channels sent (shared by every channel of the rail)."""
        return self.rail.channels.datagrams_sent

    def send(self, dests: np.ndarray, records: np.ndarray) -> None:
        """Queue ``records[i]`` for rank ``dests[i]``; full datagrams leave at once.

        *dests*: one destination rank per record, an array of any integer dtype (``np.int64``,
        ``np.uint32``, ...; a list of ints works) with values in ``0 .. rail.size - 1``; another dtype
        is refused with ``TypeError`` (a float rank would be truncated), a rank out of range with
        :class:`~mailrail.errors.InvalidDestinationError`.  *records*: an array of the Coalescer's
        *dtype*, as long as *dests*.  Both are copied into send buffers before the call returns.
        """
        self._channel.send(dests, records)

    def staged_records(self) -> int:
        """Records and calls of the rail's channels accepted and not sent yet."""
        return self.rail.channels.staged()

    def flush(self) -> None:
        """Send every partial datagram."""
        self.rail.channels.flush()

    def poll(self) -> bool:
        """Receive at most one datagram and hand its records to their handlers."""
        return self.rail.channels.poll()

    def deliver(self, message: Message) -> None:
        """Hand the records of *message* to their handlers (for custom receive loops)."""
        self.rail.channels.dispatch(message)

    @collective
    def barrier(self) -> None:
        """Flush, then wait for global quiescence while delivering arrivals (collective): ``rail.barrier()``."""
        self.rail.barrier()
