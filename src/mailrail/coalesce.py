"""Record coalescing: many small fixed-size records packed per destination into datagrams.

Applications send 8-byte histogram keys or 40-byte edges by the million; one
MailRail message each would spend all the time in per-message Python.  A
:class:`Coalescer` takes a numpy array of records and their destinations,
partitions them by destination with one stable radix sort, and copies whole
slices into send buffers: no Python loop per record.  Full datagrams leave at
once; the remainder waits in a per-destination staging row until
:meth:`Coalescer.flush`.  Arriving datagrams are handed back to the
application as record arrays (zero-copy views, valid during the handler).
Records a rank sends to itself never touch MPI: they go to the handler at
once, as one array (YGM delivers local messages the same way).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .errors import InvalidDestinationError, MailRailError, MessageSizeError
from .rail import MailRail, Message

#: Most arrivals handled after each datagram sent.
POLLS_PER_SEND = 4


def rank_sort_dtype(ranks: int) -> type:
    """The narrowest unsigned type for rank numbers: numpy's stable sort is a radix sort for it."""
    return np.uint16 if ranks <= 1 << 16 else np.uint32


class Coalescer:
    """Packs records of one numpy *dtype* per destination into datagrams of *rail*.

    *handler* receives, for each arriving datagram, ``(source, records)`` where
    *records* is a read-only array of *dtype* viewing the receive buffer; copy
    what must outlive the call.  The handler may send more records.

    One Coalescer at a time per rail: datagrams carry no record type.  A new Coalescer on a
    rail replaces the previous one, which must have nothing staged (else the new one is
    refused with :class:`~mailrail.errors.MailRailError`); the replaced one raises
    :class:`~mailrail.errors.MailRailError` at its next use.  For two record types at once, use
    two :class:`~mailrail.rail.MailRail` objects.  Records still staged at ``rail.finalize()`` are
    reported, as ``"staged"``, with an :class:`~mailrail.errors.UndeliveredWarning`
    (:class:`~mailrail.errors.UndeliveredError` if strict): call :meth:`flush` or :meth:`barrier` first.
    """

    def __init__(
        self, rail: MailRail, dtype: np.dtype | type | str, handler: Callable[[int, np.ndarray], object]
    ) -> None:
        self.rail = rail
        self.dtype = np.dtype(dtype)
        self.handler = handler
        self.record_size = self.dtype.itemsize
        self.per_datagram = rail.datagram_size // self.record_size
        if self.per_datagram == 0:
            raise MessageSizeError(
                f"a {self.record_size}-byte record does not fit in a {rail.datagram_size}-byte datagram"
            )
        rail._attach_coalescer(self)  # refused while the previous one holds records; it is retired
        # Staging rows for partial datagrams, one per destination, allocated on first use:
        # holding a send buffer per destination instead could pin the whole send pool.
        self._staged: dict[int, np.ndarray] = {}
        self._staged_count: dict[int, int] = {}
        self.records_sent = 0
        self.records_received = 0
        self.datagrams_sent = 0
        self._rank_dtype = rank_sort_dtype(rail.size)
        # A handler may send while send() is still packing (it runs from poll()): such
        # nested sends wait here and go out right after, so staging rows stay consistent.
        self._sending = False
        self._nested: list[tuple[np.ndarray, np.ndarray]] = []
        self._flush_each_send = False  # inside barrier(): nothing may stay staged
        self._flush_requested = False

    # -- sending -----------------------------------------------------------

    def send(self, dests: np.ndarray, records: np.ndarray) -> None:
        """Queue ``records[i]`` for rank ``dests[i]``; full datagrams leave at once.

        *dests*: one destination rank per record, an array of any integer dtype (``np.int64``,
        ``np.uint32``, ...; a list of ints works) with values in ``0 .. rail.size - 1``; another dtype
        is refused with ``TypeError`` (a float rank would be truncated), a rank out of range with
        :class:`~mailrail.errors.InvalidDestinationError`.  *records*: an array of the Coalescer's
        *dtype*, as long as *dests*.  Both are copied into send buffers before the call returns.
        """
        if self.rail._coalescer is not self:
            self._retired()
        records = np.asarray(records)
        if records.dtype != self.dtype:
            raise TypeError(f"records have dtype {records.dtype}, this coalescer packs {self.dtype}")
        dests = np.asarray(dests)
        if dests.shape != records.shape[:1]:
            raise ValueError(f"{len(dests)} destinations for {len(records)} records")
        if len(dests) == 0:
            return
        if not np.issubdtype(dests.dtype, np.integer):
            raise TypeError(f"dests have dtype {dests.dtype}: destination ranks must be integers")
        if self._sending:
            self._nested.append((dests.copy(), records.copy()))
            return
        self._pump(lambda: self._partition_and_send(dests, records))

    def _pump(self, action: Callable[[], None]) -> None:
        """Run *action*, then every send and flush that handlers asked for meanwhile."""
        self._sending = True
        try:
            action()
            while self._nested or self._flush_requested or (self._flush_each_send and self._anything_staged()):
                while self._nested:
                    self._partition_and_send(*self._nested.pop(0))
                if self._flush_requested or self._flush_each_send:
                    self._flush_requested = False
                    self._flush_staged()
        finally:
            self._sending = False

    def _retired(self) -> None:
        raise MailRailError(
            f"this Coalescer (records of dtype {self.dtype}) was replaced by a later Coalescer on the same rail: "
            f"one Coalescer at a time per rail (datagrams carry no record type); use a second MailRail for a "
            f"second record type"
        )

    def _anything_staged(self) -> bool:
        return any(self._staged_count.values())

    def staged_records(self) -> int:
        """Records accepted by :meth:`send` that have not left yet (staged, or waiting behind a running send)."""
        return sum(self._staged_count.values()) + sum(len(records) for _, records in self._nested)

    def _partition_and_send(self, dests: np.ndarray, records: np.ndarray) -> None:
        low, high = int(dests.min()), int(dests.max())
        if low < 0 or high >= self.rail.size:
            bad = low if low < 0 else high
            raise InvalidDestinationError(f"destination {bad} is out of range: valid ranks are 0..{self.rail.size - 1}")
        ranks: np.ndarray = dests.astype(self._rank_dtype, copy=False)
        order = np.argsort(ranks, kind="stable")  # radix sort for 16-bit keys: O(n)
        sorted_records = records[order]
        counts = np.bincount(ranks, minlength=self.rail.size)
        self.records_sent += len(records)
        ends = np.cumsum(counts)
        # Destinations in turn from the next rank on, this one last: ranks do not all start on
        # rank 0, and local work runs after the remote ranks have theirs.
        rank = self.rail.rank
        dests_used = np.flatnonzero(counts)
        dests_used = np.roll(dests_used, -int(np.searchsorted(dests_used, rank + 1)))
        for dest in dests_used.tolist():
            end = int(ends[dest])
            start = end - int(counts[dest])
            if dest == rank:
                self._deliver_locally(sorted_records[start:end])
            else:
                self._send_to(dest, sorted_records[start:end])

    def _deliver_locally(self, records: np.ndarray) -> None:
        # A copy of MPI's shared-memory copy and a datagram per few records saved: the handler
        # gets them directly, read-only as arrivals are; what it sends meanwhile waits in _nested.
        records.flags.writeable = False
        self.records_received += len(records)
        self.handler(self.rail.rank, records)

    def _send_to(self, dest: int, records: np.ndarray) -> None:
        per = self.per_datagram
        staged = self._staged_count.get(dest, 0)
        if staged:  # top up the partial datagram first, keeping the records in order
            take = min(per - staged, len(records))
            self._staged[dest][staged : staged + take] = records[:take]
            staged += take
            records = records[take:]
            if staged < per:
                self._staged_count[dest] = staged
                return
            self._transmit(dest, self._staged[dest])
            staged = 0
        full = len(records) - len(records) % per
        for offset in range(0, full, per):
            self._transmit(dest, records[offset : offset + per])
        rest = len(records) - full
        if rest:
            row = self._staged.get(dest)
            if row is None:
                row = self._staged[dest] = np.empty(per, dtype=self.dtype)
            row[:rest] = records[full:]
        self._staged_count[dest] = rest

    def _transmit(self, dest: int, records: np.ndarray) -> None:
        rail = self.rail
        buf = rail.reserve_send_buffer()
        while buf is None:  # backpressure: deliver what arrives until a buffer frees up
            self.poll()
            buf = rail.reserve_send_buffer()
        nbytes = records.nbytes
        buf[:nbytes] = records.view(np.uint8)
        rail.send(dest, buf, nbytes)
        self.datagrams_sent += 1
        # Receive aggressively: whatever arrived (a few at most), so peers' credits come back soon.
        for _ in range(POLLS_PER_SEND):
            if not self.poll():
                break

    def flush(self) -> None:
        """Send every partial datagram."""
        if self.rail._coalescer is not self:
            self._retired()
        if self._sending:  # called from a handler: the running send() flushes when it is done
            self._flush_requested = True
            return
        self._pump(self._flush_staged)

    def _flush_staged(self) -> None:
        for dest, count in list(self._staged_count.items()):
            if count:
                self._staged_count[dest] = 0
                self._transmit(dest, self._staged[dest][:count])

    # -- receiving ---------------------------------------------------------

    def poll(self) -> bool:
        """Receive at most one datagram and hand its records to the handler."""
        if self.rail._coalescer is not self:
            self._retired()
        message = self.rail.receive()
        if message is None:
            return False
        self.deliver(message)
        self.rail.release_receive_buffer(message)
        return True

    def deliver(self, message: Message) -> None:
        """Hand the records of *message* to the handler (for barrier handlers and custom loops)."""
        if self.rail._coalescer is not self:
            self._retired()
        if message.nbytes % self.record_size:
            raise MailRailError(
                f"a {message.nbytes}-byte datagram from rank {message.source} is not a "
                f"whole number of {self.record_size}-byte records"
            )
        records = message.data.view(self.dtype)
        self.records_received += len(records)
        self.handler(message.source, records)

    def barrier(self) -> None:
        """Flush, then wait for global quiescence while delivering arrivals (collective).

        Records the handler sends meanwhile leave at once (no staging), so the
        barrier's message counts see them.
        """
        # Set before the flush: a handler run by the flush's own polls may send records, and those
        # must leave too, or the barrier could end with them still staged.
        self._flush_each_send = True
        try:
            self.flush()
            self.rail.barrier(handler=self.deliver)
        finally:
            self._flush_each_send = False
