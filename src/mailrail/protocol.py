"""One rank's MailRail protocol state, without I/O (the h11 way).

:class:`Endpoint` decides *what* happens: which send slot is free, whether a
message may leave now or waits for credit, what tag it carries, which credits
to return and to whom.  The transports (:mod:`mailrail.transport`) only move
bytes and report events back; the compiled one asks the Endpoint through
:class:`~mailrail.transport.base.EndpointHooks`, which it implements.  Everything
here is plain Python, so it is unit-tested deterministically without ``mpiexec``.
"""

from __future__ import annotations

import operator
import time
from collections.abc import Callable

from .deferred import DeferredSends
from .errors import BufferOwnershipError, CreditStallError, InvalidDestinationError, MessageSizeError, ProtocolError
from .flow.base import FlowControl
from .pool import SlotPool

# Send-slot states.
FREE, HELD, QUEUED, IN_FLIGHT = 0, 1, 2, 3
_STATE_NAMES = {FREE: "free", HELD: "reserved", QUEUED: "deferred", IN_FLIGHT: "in flight"}

#: Queued destinations visited per drain when credits change silently (node mode).
NODE_DRAIN_WINDOW = 32


class Endpoint:
    """Send-pool ownership, deferred sends, credit bookkeeping and counters of one rank."""

    def __init__(
        self, rank: int, size: int, send_pool: SlotPool, flow: FlowControl, *, stall_timeout: float = 0.0
    ) -> None:
        self.rank = rank
        self.size = size
        self.send_pool = send_pool
        self.datagram_size = send_pool.slot_size
        self.flow = flow
        self.send_state = bytearray(send_pool.slots)
        self.deferred = DeferredSends(poll_window=NODE_DRAIN_WINDOW if flow.credits_change_silently else None)
        self.stall_timeout = stall_timeout
        # Hot-path shortcuts (looked up once, used per message).
        self._queued = self.deferred.queues
        self._try_acquire = flow.try_acquire
        self._last_progress: float | None = None
        # Counters (see stats()).
        self.messages_sent = 0
        self.bytes_sent = 0
        self.messages_received = 0
        self.bytes_received = 0
        self.messages_released = 0
        self.credit_messages_sent = 0
        self.credit_messages_received = 0
        self.credits_returned = 0
        self.reserve_failures = 0
        #: Where stall reports read the message counters: the transport's own (set by MailRail), so the
        #: report is true on the transport that counts them (the compiled one counts in C).
        self.counters: Callable[[], dict[str, int]] = lambda: self.transport_counters(held_high_water=0)

    # -- sender side -------------------------------------------------------

    def reserve(self) -> int | None:
        slot = self.send_pool.take()
        if slot is None:
            self.reserve_failures += 1
            return None
        self.send_state[slot] = HELD
        return slot

    def submit(self, dest: int, buf: object, nbytes: int) -> tuple[int, int, int | None]:
        """Take ownership of *buf* for *dest*.

        Returns ``(dest, nbytes, slot)`` normalized, with *slot* None when the send was deferred.
        """
        if type(dest) is not int or not 0 <= dest < self.size:
            dest = self._checked_or_unreserved(self.checked_rank, dest, buf)
        if type(nbytes) is not int or not 0 <= nbytes <= self.datagram_size:
            nbytes = self._checked_or_unreserved(self.checked_size, nbytes, buf)
        slot = self.send_pool.slot_of(buf)
        if slot is None:
            raise BufferOwnershipError(
                f"the buffer passed to send() (type {type(buf).__name__}) was not reserved from this "
                f"MailRail's send pool: use reserve_send_buffer()"
            )
        state = self.send_state[slot]
        if state != HELD:
            raise BufferOwnershipError(
                f"send buffer slot {slot} is {_STATE_NAMES[state]}, not reserved: a buffer is sent "
                f"once per reserve_send_buffer()"
            )
        self.messages_sent += 1  # submitted: deferred sends count now, as on the compiled transport
        self.bytes_sent += nbytes
        return dest, nbytes, (slot if self.admit(dest, slot, nbytes) else None)

    @property
    def send_buffers_reserved(self) -> int:
        """Send buffers reserved and not yet submitted: counted from the slot states when asked (a C scan
        of one byte per slot), so reserve() and submit() pay nothing for it."""
        return self.send_state.count(HELD)

    def _checked_or_unreserved(self, check: Callable[[object], int], value: object, buf: object) -> int:
        """*check* (value), and if it raises, *buf*'s reserved slot back to the pool first (slow path)."""
        try:
            return check(value)
        except Exception:
            self.unreserve(buf)
            raise

    def unreserve(self, buf: object) -> None:
        """Give *buf*'s slot back to the pool if it is a reserved slot of this pool (a send() that raised)."""
        try:
            slot = self.send_pool.slot_of(buf)
        except BufferOwnershipError:  # not identifiable as a slot: nothing changes
            return
        if slot is not None and self.send_state[slot] == HELD:
            self.send_state[slot] = FREE
            self.send_pool.give(slot)

    def admit(self, dest: int, slot: int, nbytes: int) -> bool:
        """Flow control's decision on a checked send: True if it leaves now, False if it was deferred."""
        if dest not in self._queued and self._try_acquire(dest):
            self.send_state[slot] = IN_FLIGHT
            return True
        self.send_state[slot] = QUEUED
        if not self.deferred.total:
            self._last_progress = None  # the stall clock starts now
        self.deferred.push(dest, slot, nbytes)
        return False

    def checked_rank(self, dest: object) -> int:
        """A destination rank as int: numpy integers accepted, the rest rejected by value (slow path)."""
        try:
            rank = operator.index(dest)  # type: ignore[arg-type]  # any object may be an index
        except TypeError:
            rank = None
        if isinstance(dest, bool) or rank is None:
            raise InvalidDestinationError(
                f"destination {dest!r} is not an integer rank (valid ranks are 0..{self.size - 1})"
            )
        if not 0 <= rank < self.size:
            raise InvalidDestinationError(f"destination {dest!r} is out of range: valid ranks are 0..{self.size - 1}")
        return rank

    def checked_size(self, nbytes: object) -> int:
        """A payload size as int: numpy integers accepted, the rest rejected by value (slow path)."""
        try:
            size = operator.index(nbytes)  # type: ignore[arg-type]  # any object may be an index
        except TypeError:
            size = None
        if isinstance(nbytes, bool) or size is None:
            raise MessageSizeError(
                f"nbytes={nbytes!r} is not an integer byte count (a message holds 0..{self.datagram_size} bytes)"
            )
        if not 0 <= size <= self.datagram_size:
            raise MessageSizeError(
                f"nbytes={nbytes!r} is out of range: a message holds 0..{self.datagram_size} bytes (the datagram size)"
            )
        return size

    def drain(self) -> list[tuple[int, int, int]]:
        """Deferred sends that now have credit: at most one per destination, oldest first."""
        deferred = self.deferred
        if not deferred.total:
            return []
        flow = self.flow
        ready = []
        for dest in deferred.candidates():
            if flow.try_acquire(dest):
                slot, nbytes = deferred.pop(dest)
                self.send_state[slot] = IN_FLIGHT
                ready.append((dest, slot, nbytes))
                if not flow.credits_change_silently and flow.available(dest):
                    deferred.mark_ready(dest)
        if ready:
            self._last_progress = None
        return ready

    def drain_ready(self, now: float | None = None) -> list[tuple[int, int, int]]:
        """:meth:`drain`, then the stall check (at *now*, default the monotonic clock)."""
        ready = self.drain()
        if self.stall_timeout:
            self.check_stall(time.monotonic() if now is None else now)
        return ready

    def mark_ready(self, dest: int) -> None:
        """Credit came back for *dest*: its queued sends are worth a look at the next drain."""
        self.deferred.mark_ready(dest)

    def tag_for(self, dest: int) -> int:
        """A payload leaves now for *dest*: its tag (the credits piggybacked on it)."""
        return self.flow.take_piggyback(dest)

    def send_completed(self, slot: int) -> None:
        if self.send_state[slot] != IN_FLIGHT:  # a slot freed twice would be handed out twice
            raise ProtocolError(f"send slot {slot} completed while {_STATE_NAMES[self.send_state[slot]]}")
        self.send_state[slot] = FREE
        self.send_pool.give(slot)

    # -- receiver side -----------------------------------------------------

    def arrived(self, source: int, tag: int, nbytes: int) -> None:
        self.messages_received += 1
        self.bytes_received += nbytes
        if self.flow.on_arrival(source, tag):
            self.deferred.mark_ready(source)

    def released(self, source: int) -> tuple[int, int] | None:
        """The application gave back a slot from *source*: a credit return ``(rank, count)`` to send, if due."""
        self.messages_released += 1
        credit_return = self.flow.on_release(source)
        if credit_return is not None:
            self.credit_messages_sent += 1
            self.credits_returned += credit_return[1]
        return credit_return

    def credits_arrived(self, source: int, count: int) -> None:
        self.credit_messages_received += 1
        self.flow.on_credit_return(source, count)
        self.deferred.mark_ready(source)

    # -- diagnostics -------------------------------------------------------

    def check_stall(self, now: float) -> None:
        """Raise :class:`CreditStallError` if deferred sends made no progress for ``stall_timeout`` s."""
        if not self.stall_timeout or not self.deferred.total:
            return
        if self._last_progress is None:
            self._last_progress = now
        elif now - self._last_progress > self.stall_timeout:
            waited, self._last_progress = now - self._last_progress, now  # catchable: the clock restarts
            raise CreditStallError(self.stall_report(waited))

    def stall_report(self, waited: float) -> str:
        lines = [
            f"rank {self.rank}: {self.deferred.total} deferred message(s) made no progress for "
            f"{waited:.1f} s ({self.flow.name} flow control, {self.flow.credits_per_pair} credits "
            f"per pair, return threshold {self.flow.return_threshold})"
        ]
        for dest in sorted(self.deferred.destinations())[:16]:
            lines.append(
                f"  destination {dest}: {self.deferred.queued_for(dest)} queued, "
                f"{self.flow.available(dest)} credit(s) available"
            )
        counts = self.counters()
        lines.append(
            f"  this rank received {counts['messages_received']} message(s), released "
            f"{counts['messages_released']}, got {counts['credit_messages_received']} credit message(s), "
            f"holds {counts.get('send_buffers_reserved', 0)} reserved send buffer(s) not yet sent"
        )
        return "\n".join(lines)

    def transport_counters(self, held_high_water: int) -> dict[str, int]:
        """The Python transport's :data:`~mailrail.counters.TRANSPORT_COUNTERS`, counted here."""
        return {
            "messages_sent": self.messages_sent,
            "bytes_sent": self.bytes_sent,
            "messages_received": self.messages_received,
            "bytes_received": self.bytes_received,
            "messages_released": self.messages_released,
            "reserve_failures": self.reserve_failures,
            "held_high_water": held_high_water,
            "credit_messages_sent": self.credit_messages_sent,
            "credit_messages_received": self.credit_messages_received,
            "credits_returned": self.credits_returned,
            "send_buffers_reserved": self.send_buffers_reserved,
        }

    def protocol_counters(self) -> dict[str, int]:
        """:data:`~mailrail.counters.PROTOCOL_COUNTERS`, on both transports."""
        return {
            "credits_piggybacked": getattr(self.flow, "piggybacked", 0),
            "deferred_sends": self.deferred.deferred_count,
            "deferred_now": self.deferred.total,
            "deferred_high_water": self.deferred.high_water,
            "credit_window_high_water": self.flow.unreturned_high_water,
            "credit_state_bytes": self.flow.credit_state_bytes(),
            "shared_credit_bytes": self.flow.shared_state_bytes(),
        }
