"""One rank's MailRail protocol state, without I/O (the h11 way): every state rule in one owner.

:class:`Endpoint` decides *what* happens and keeps everything the protocol
knows: which send slot is free, reserved, deferred or in flight (and the
in-flight order), the per-destination queues of sends waiting for credit, which
MPI call a send leaves by (the per-slot stream cache), what tag it carries,
which credits to return and to whom, when credit messages are polled, when an
idle rank yields, the messages the application holds, every counter and the
stall report.  A transport (:mod:`mailrail.transport`) only owns MPI handles,
request handles: the Endpoint's :meth:`~Endpoint.receive` step runs the
progress loop and calls the transport's narrow I/O interface (:class:`ProgressIO`)
for each MPI call; elsewhere the transport asks the Endpoint, makes the MPI call
it is told, and reports what MPI said.

This module is the specification; ``mailrail._protocol`` compiles the same
Endpoint method for method for the compiled transport (chosen once, in
:mod:`mailrail.transport`), and a Hypothesis test feeds both the same events.
Everything here is plain Python, unit-tested deterministically without ``mpiexec``.
"""

from __future__ import annotations

import operator
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from .counters import COUNTERS
from .deferred import DeferredSends
from .errors import (
    BufferOwnershipError,
    CreditStallError,
    FinalizedError,
    InvalidDestinationError,
    MailRailError,
    MessageSizeError,
    ProtocolError,
    ReleaseError,
)
from .flow.base import ANSWER, KIND_BITS, KIND_MASK, MIN_TAG_UB, FlowControl, credit_tag
from .pool import SlotPool

# Send-slot states.
FREE, HELD, QUEUED, IN_FLIGHT = 0, 1, 2, 3
STATE_NAMES = ("free", "reserved", "deferred", "in flight")

# How a send leaves (the fifth item of what submit() and drain_ready() hand out): the MPI call the
# transport makes for it.  Streams repeat (destination, size) per slot: the second time, the send
# becomes a persistent request, restarted from then on (Start is cheaper than Isend for a repeated stream).
ISEND_TAGGED = 0  # credits piggybacked in the tag: a one-off Isend; the slot's stream cache is left alone
START = 1  # the slot's persistent send for this (destination, size): Start it
CREATE = 2  # the second send of this (destination, size) from the slot: Send_init, then Start
ISEND_NEW = 3  # a new stream for the slot: Isend (the slot has no persistent send to free)
REPLACE = 4  # a new stream for the slot: Request_free its persistent send, then Isend

#: Queued destinations visited per drain when credits change silently (node mode).
NODE_DRAIN_WINDOW = 32

#: What submit() returns for a send that was deferred: ``(dest, nbytes, NO_SLOT, 0, 0)``.
NO_SLOT = -1


class ProgressIO(Protocol):
    """The MPI calls a transport makes for :meth:`Endpoint.receive`, which decides when and in what order."""

    def reclaim_sends(self) -> int:
        """Test the oldest sends in flight (the Endpoint's in-flight ring) and report what completed."""
        ...

    def poll_credits(self) -> None:
        """Hand every credit message that arrived to :meth:`Endpoint.credits_arrived`."""
        ...

    def start_send(self, dest: int, nbytes: int, slot: int, tag: int, action: int, deferred: bool) -> None:
        """Start a send as the Endpoint decided (*deferred*: it waited for credit); on failure tell
        :meth:`Endpoint.transmit_failed` and raise."""
        ...

    def send_credit_messages(self) -> None:
        """Send every credit message due (:meth:`Endpoint.next_credit_message`)."""
        ...

    def test_receive(self, slot: int) -> tuple[int, int, int, Any] | None:
        """Test receive slot *slot*'s posted receive: ``(source, tag, nbytes, data)`` if it completed, else
        None; one that completed with an error is re-posted (:meth:`Endpoint.head_reposted`) and raised."""
        ...

    def post_receive(self, slot: int) -> None:
        """Start receive slot *slot*'s receive; on failure tell :meth:`Endpoint.post_failed` and raise."""
        ...

    def idle(self) -> None:
        """Yield the core (or sleep): nothing arrived for a while."""
        ...


class Message:
    """An arrived message: ``data`` is a read-only view of ``nbytes`` bytes from rank ``source``.

    ``data`` lies in the receive pool and is valid until
    :meth:`~mailrail.rail.MailRail.release_receive_buffer`; copy what must outlive it.
    """

    __slots__ = ("source", "nbytes", "data", "_slot", "_owner")

    def __init__(self, source: int, nbytes: int, data: Any, slot: int, owner: object) -> None:
        self.source = source
        self.nbytes = nbytes
        self.data = data
        self._slot = slot  # receive slot; -1 once released
        self._owner = owner  # the Endpoint that received it

    def __repr__(self) -> str:
        state = "released" if self._slot < 0 else f"slot {self._slot}"
        return f"Message(source={self.source}, nbytes={self.nbytes}, {state})"


class Endpoint:
    """Send-slot lifecycle, deferred sends, credit bookkeeping, held messages and counters of one rank.

    *flow*: the flow-control strategy (:mod:`mailrail.flow`, or the compiled ledger with its interface);
    *tag_ub*: the largest tag, which caps one credit message; *head_patience*, *credit_poll_interval*,
    *idle_spins*: the progress rules (see :class:`~mailrail.transport.base.Tuning`); *stall_timeout*: seconds
    of *clock* (default :func:`time.monotonic`) that deferred sends may wait without progress.
    """

    def __init__(
        self,
        rank: int,
        size: int,
        send_pool: SlotPool,
        flow: FlowControl,
        *,
        tag_ub: int,
        head_patience: int,
        credit_poll_interval: int,
        idle_spins: int,
        stall_timeout: float = 0.0,
        recv_slots: int = 0,
        posted_receives: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        check_settings(size, tag_ub, head_patience, credit_poll_interval, idle_spins)
        posted_receives = check_receive_settings(recv_slots, posted_receives)
        self.rank = rank
        self.size = size
        self.send_pool = send_pool
        self.datagram_size = send_pool.slot_size
        self.flow = flow
        self.has_credits = flow.has_credits
        # The credit messages due, (target, kind, count): the flow strategy appends, only this Endpoint
        # reads (credit_messages_due, next_credit_message).
        self._outbox = flow.outbox
        self.tag_ub = tag_ub
        self.head_patience = head_patience
        self.credit_poll_interval = credit_poll_interval
        self.idle_spins = idle_spins
        self.stall_timeout = stall_timeout
        self.clock = clock
        self.stopped = False
        # Send slots: state per slot, a free stack (lowest slot on top: hot slots stay in cache),
        # the in-flight slots oldest first, and per slot the stream it sent last.
        slots = send_pool.slots
        self.send_state = bytearray(slots)
        self._free = list(range(slots - 1, -1, -1))
        self._in_flight: deque[int] = deque()
        self._head_waits = 0
        self._stream_dest = [-1] * slots
        self._stream_nbytes = [-1] * slots
        self._persistent = bytearray(slots)
        # Receive slots: the posted receives in posting order (wildcard receives match in that order, so
        # only the head is tested), and a stack of parked slots (all of them until the transport posts):
        # at most posted_receives (MAILRAIL_MAX_RECVS) are posted, the rest wait for a posted one to be taken.
        self.recv_slots = recv_slots
        self.posted_receives = posted_receives
        self._posted: deque[int] = deque()
        self._parked = list(range(recv_slots - 1, -1, -1))
        self.deferred = DeferredSends(poll_window=NODE_DRAIN_WINDOW if flow.credits_change_silently else None)
        self._last_progress: float | None = None
        self._calls_since_credit_poll = 0
        self._idle_calls = 0
        # Counters (see mailrail.counters).
        self.messages_sent = 0
        self.bytes_sent = 0
        self.messages_received = 0
        self.bytes_received = 0
        self.messages_released = 0
        self.reserve_failures = 0
        self.held = 0
        self.held_high_water = 0
        self.credit_messages_sent = 0
        self.credit_messages_received = 0
        self.credits_returned = 0
        self.reserved = 0

    # -- the send slots ----------------------------------------------------

    @property
    def free_slots(self) -> int:
        return len(self._free)

    @property
    def in_flight(self) -> int:
        return len(self._in_flight)

    def pending_sends(self) -> int:
        """Send buffers reserved and not yet sent, plus sends deferred or in flight."""
        return self.reserved + self.deferred.total + len(self._in_flight)

    def reserve(self) -> int:
        """A free send slot, now reserved by the application, or :data:`NO_SLOT` (backpressure)."""
        if self.stopped:
            raise finalized("reserve_send_buffer()")
        if not self._free:
            self.reserve_failures += 1
            return NO_SLOT
        slot = self._free.pop()
        self.send_state[slot] = HELD
        self.reserved += 1
        return slot

    def submit(self, dest: Any, buf: Any, nbytes: Any) -> tuple[int, int, int, int, int]:
        """Take ownership of *buf* (a reserved send buffer) for *dest*.

        Returns ``(dest, nbytes, slot, tag, action)``, *dest* and *nbytes* normalized: the send leaves now
        by *action* with *tag*, or waits for credit (*slot* :data:`NO_SLOT`).  A refused send raises and
        gives a reserved buffer back to the pool (except a non-contiguous view: it stays reserved).
        """
        if self.stopped:
            raise finalized(f"send(dest={dest!r})")
        if type(dest) is not int or not 0 <= dest < self.size:
            dest = self._checked_or_unreserved(self.checked_rank, dest, buf)
        if type(nbytes) is not int or not 0 <= nbytes <= self.datagram_size:
            nbytes = self._checked_or_unreserved(self.checked_size, nbytes, buf)
        slot = self.slot_of(buf)
        state = self.send_state[slot]
        if state != HELD:
            raise not_reserved(slot, state)
        self._idle_calls = 0  # a rank that sends is busy, not idle
        self.reserved -= 1
        self.messages_sent += 1  # submitted: deferred sends count now
        self.bytes_sent += nbytes
        flow = self.flow
        if dest not in self.deferred.queues and flow.try_acquire(dest):
            return self._leave(dest, nbytes, slot)
        self.send_state[slot] = QUEUED  # the stall clock was reset when the queues last emptied (a drain)
        self.deferred.push(dest, slot, nbytes)
        if flow.asks_for_credit:
            flow.on_deferred(dest, self.deferred.queued_for(dest))
        return dest, nbytes, NO_SLOT, 0, 0

    def _leave(self, dest: int, nbytes: int, slot: int) -> tuple[int, int, int, int, int]:
        """*slot* leaves now for *dest* (its credit taken): in flight, its tag and the MPI call to make."""
        self.send_state[slot] = IN_FLIGHT
        self._in_flight.append(slot)
        tag = self.flow.take_piggyback(dest)
        if tag:
            return dest, nbytes, slot, tag, ISEND_TAGGED
        if self._stream_dest[slot] == dest and self._stream_nbytes[slot] == nbytes:
            if self._persistent[slot]:
                return dest, nbytes, slot, 0, START
            self._persistent[slot] = 1
            return dest, nbytes, slot, 0, CREATE
        self._stream_dest[slot], self._stream_nbytes[slot] = dest, nbytes
        if self._persistent[slot]:
            self._persistent[slot] = 0
            return dest, nbytes, slot, 0, REPLACE
        return dest, nbytes, slot, 0, ISEND_NEW

    def transmit_failed(self, slot: int, nbytes: int, action: int) -> None:
        """The MPI call that was to start *slot*'s send failed: nothing of it is in flight.

        The slot is free again and the message uncounted (it never left, so a barrier must not wait
        for it); the slot's stream is forgotten unless its persistent send still stands (a failed Start,
        or a failed piggybacking Isend, which never touches it).  Its credit stays taken: an MPI error
        ends the job by default.  An error path, so finding the slot in the ring may cost O(in flight).
        """
        try:
            self._in_flight.remove(slot)
        except ValueError:
            raise ProtocolError(f"send slot {slot} failed to start but is not in flight") from None
        if action not in (START, ISEND_TAGGED):
            self._stream_dest[slot] = self._stream_nbytes[slot] = -1
            self._persistent[slot] = 0
        self.messages_sent -= 1
        self.bytes_sent -= nbytes
        self._free_slot(slot)

    def oldest_in_flight(self) -> int:
        """The slot whose send has been in flight longest (the one to test), or :data:`NO_SLOT`."""
        return self._in_flight[0] if self._in_flight else NO_SLOT

    def oldest_completed(self) -> None:
        """The oldest send in flight completed (with an error or not): its slot is free again."""
        slot = self._in_flight.popleft()
        self._head_waits = 0
        self._free_slot(slot)

    def oldest_still_in_flight(self) -> None:
        """The oldest send has not completed: after :attr:`head_patience` such calls it moves to the back,
        so a rendezvous send to a slow receiver does not pin the whole send pool."""
        self._head_waits += 1
        if self._head_waits >= self.head_patience:
            self._head_waits = 0
            self._in_flight.rotate(-1)

    def has_persistent(self, slot: int) -> bool:
        """Whether *slot* holds a persistent send request (the transport frees those at close)."""
        return bool(self._persistent[slot])

    def abandon_in_flight(self) -> list[int]:
        """Forget the sends in flight without completing them (abandon): their slots, oldest first.  Their
        persistent requests stay with MPI (the transport must not free them), so their streams are forgotten."""
        slots = list(self._in_flight)
        self._in_flight.clear()
        for slot in slots:
            self._persistent[slot] = 0
            self._stream_dest[slot] = self._stream_nbytes[slot] = -1
        return slots

    def _free_slot(self, slot: int) -> None:
        if self.send_state[slot] != IN_FLIGHT:  # a slot freed twice would be handed out twice
            raise freed_twice(slot, self.send_state[slot])
        self.send_state[slot] = FREE
        self._free.append(slot)

    def slot_of(self, buf: Any) -> int:
        """The send slot of *buf*: the reserved view itself, or a C-contiguous view starting at a slot."""
        slot = self.send_pool.slot_of(buf)
        if slot is None:
            raise not_from_the_pool(buf)
        return slot

    def _checked_or_unreserved(self, check: Any, value: object, buf: object) -> int:
        """*check* (value), and if it raises, *buf*'s reserved slot back to the pool first (slow path)."""
        try:
            checked: int = check(value)
        except Exception:
            self.unreserve(buf)
            raise
        return checked

    def unreserve(self, buf: object) -> None:
        """Give *buf*'s slot back to the pool if it is a reserved slot of this pool (a send() that raised)."""
        try:
            slot = self.send_pool.slot_of(buf)
        except BufferOwnershipError:  # not identifiable as a slot: nothing changes
            return
        if slot is not None and self.send_state[slot] == HELD:
            self.send_state[slot] = FREE
            self.reserved -= 1
            self._free.append(slot)

    def checked_rank(self, dest: object) -> int:
        """A destination rank as int: numpy integers accepted, the rest rejected by value (slow path)."""
        return checked_rank(dest, self.size)

    def checked_size(self, nbytes: object) -> int:
        """A payload size as int: numpy integers accepted, the rest rejected by value (slow path)."""
        return checked_size(nbytes, self.datagram_size)

    # -- deferred sends ----------------------------------------------------

    @property
    def deferred_total(self) -> int:
        return self.deferred.total

    def drain_ready(self) -> Iterator[tuple[int, int, int, int, int]]:
        """Deferred sends that have credit now, at most one per destination, oldest first, each as submit()
        hands out a send that leaves; then the stall check (:meth:`check_stall`):
        :class:`~mailrail.errors.CreditStallError` when they made no progress for the stall timeout.

        A generator: each send is taken from its queue as it is handed out, so a transport whose MPI call
        fails mid-way (and stops iterating) leaves the rest queued, not in flight without a request.
        """
        deferred = self.deferred
        if deferred.total:
            flow = self.flow
            for dest in deferred.candidates():
                if flow.try_acquire(dest):
                    slot, nbytes = deferred.pop(dest)
                    if flow.asks_for_credit:
                        flow.on_undeferred(dest, 1)
                    self._last_progress = None
                    if not flow.credits_change_silently and flow.available(dest):
                        deferred.mark_ready(dest)
                    yield self._leave(dest, nbytes, slot)
                elif flow.asks_for_credit:
                    flow.ask(dest, deferred.queued_for(dest))
        if self.stall_timeout and deferred.total:
            self.check_stall()

    def stop(self) -> int:
        """finalize(): the application's calls raise from now on; the deferred sends are dropped (their
        slots free again).  Returns how many were dropped."""
        self.stopped = True
        dropped = self.deferred.clear()
        for dest, slot, _ in dropped:
            self.send_state[slot] = FREE
            self._free.append(slot)
            if self.flow.asks_for_credit:
                self.flow.on_undeferred(dest, 1)
        return len(dropped)

    def check_open(self, call: str) -> None:
        """Raise :class:`~mailrail.errors.FinalizedError` for *call* (e.g. ``"receive()"``) after finalize()."""
        if self.stopped:
            raise finalized(call)

    # -- progress ----------------------------------------------------------

    def credit_poll_due(self) -> bool:
        """Whether this progress call polls credit messages: every call while sends wait for credit, else
        every :attr:`credit_poll_interval` calls (every MPI test drives progress and contends for the
        shared-memory queues, so test less)."""
        if not self.has_credits:
            return False
        self._calls_since_credit_poll += 1
        if self.deferred.total or self._calls_since_credit_poll >= self.credit_poll_interval:
            self._calls_since_credit_poll = 0
            return True
        return False

    def idle(self) -> bool:
        """A receive() found nothing: True when the rank should yield the core (or sleep) now, after
        :attr:`idle_spins` empty calls (on an oversubscribed machine the rank that has work runs)."""
        self._idle_calls += 1
        if self._idle_calls >= self.idle_spins:
            self._idle_calls = 0
            return True
        return False

    def receive(self, io: ProgressIO) -> Message | None:
        """One progress step, then at most one arrived message: the order of a transport's receive(),
        written once.  Reclaim sends (free slots first), poll credit messages when due (credits let
        deferred sends go), start the deferred sends that have credit, send the credit messages due, test
        the head receive; nothing arrived: maybe yield the core."""
        if self.stopped:
            raise finalized("receive()")
        if self._in_flight:
            io.reclaim_sends()
        if self.has_credits and self.credit_poll_due():
            io.poll_credits()
        if self.deferred.total:
            for dest, nbytes, slot, tag, action in self.drain_ready():  # a failed start raises: the rest stay
                io.start_send(dest, nbytes, slot, tag, action, True)
        if self._outbox:
            io.send_credit_messages()
        posted = self._posted
        if posted:
            slot = posted[0]
            arrival = io.test_receive(slot)
            if arrival is not None:
                posted.popleft()
                if self._parked and len(posted) < self.posted_receives:
                    io.post_receive(self._post_parked())
                source, tag, nbytes, data = arrival
                return self.arrived(source, tag, nbytes, slot, data)
        if self.idle():
            io.idle()
        return None

    # -- receive slots -----------------------------------------------------

    @property
    def posted_count(self) -> int:
        return len(self._posted)

    def posted_slots(self) -> list[int]:
        """The posted receive slots, head (tested next) first."""
        return list(self._posted)

    def parked_slots(self) -> list[int]:
        """The parked receive slots, the next one to post last."""
        return list(self._parked)

    def head_receive(self) -> int:
        """The receive slot tested next (the oldest posted), or :data:`NO_SLOT`."""
        return self._posted[0] if self._posted else NO_SLOT

    def post_parked(self) -> int:
        """A parked slot to post now (it joins the ring's back), or :data:`NO_SLOT` when posted_receives
        are posted or none is parked; the transport posts them all at construction."""
        if self._parked and len(self._posted) < self.posted_receives:
            return self._post_parked()
        return NO_SLOT

    def _post_parked(self) -> int:
        slot = self._parked.pop()
        self._posted.append(slot)
        return slot

    def head_arrived(self) -> int:
        """The head receive completed with a message: it leaves the ring.  Returns a parked slot to post in
        its place (fewer receives posted than slots), or :data:`NO_SLOT`."""
        if not self._posted:
            raise empty_ring("arrived")
        self._posted.popleft()
        return self.post_parked()

    def head_reposted(self) -> None:
        """The head receive was started again (an arrival discarded, or a receive that failed): to the back."""
        if not self._posted:
            raise empty_ring("re-posted")
        self._posted.rotate(-1)

    def post_failed(self, slot: int) -> None:
        """The slot last put at the ring's back was not started (an MPI error): parked again."""
        if not self._posted or self._posted[-1] != slot:
            raise ProtocolError(f"receive slot {slot} failed to post but is not the last posted")
        if len(self._parked) >= self.recv_slots:  # (only hand-made messages can have filled it)
            raise receive_slot_refused(slot, self.recv_slots)
        self._posted.pop()
        self._parked.append(slot)

    def take_posted(self) -> list[int]:
        """The posted slots, head first, for the transport to cancel: all parked from now on."""
        slots = list(self._posted)
        if len(slots) + len(self._parked) > self.recv_slots:  # (only hand-made messages can have filled it)
            raise receive_slot_refused(slots[-1], self.recv_slots)
        self._posted.clear()
        self._parked.extend(reversed(slots))
        return slots

    # -- receiver side -----------------------------------------------------

    def arrived(self, source: int, tag: int, nbytes: int, slot: int, data: Any) -> Message:
        """A payload arrived in receive slot *slot* (*data*: its view): the message to hand out."""
        self.messages_received += 1
        self.bytes_received += nbytes
        if self.flow.on_arrival(source, tag) and self.deferred.total:
            self.deferred.mark_ready(source)
        self.held += 1
        if self.held > self.held_high_water:
            self.held_high_water = self.held
        self._idle_calls = 0
        return Message(source, nbytes, data, slot, self)

    def release(self, message: Any) -> int:
        """The application gives *message* back: its receive slot, to post now (it joins the ring's back),
        or :data:`NO_SLOT` (posted_receives are posted: it is parked).  Credit messages it causes are due."""
        if self.stopped:
            raise finalized("release_receive_buffer()")
        if type(message) is not Message or message._owner is not self:
            raise release_refused(message, False)
        slot: int = message._slot
        if slot < 0:
            raise release_refused(message, True)
        if slot >= self.recv_slots:
            raise receive_slot_refused(slot, self.recv_slots)
        message._slot = -1
        self.held -= 1
        self.messages_released += 1
        self.flow.on_release(message.source)
        if len(self._posted) < self.posted_receives:
            self._posted.append(slot)
            return slot
        if len(self._parked) >= self.recv_slots:  # a message made by hand: never more parked than slots
            raise receive_slot_refused(slot, self.recv_slots)
        self._parked.append(slot)
        return NO_SLOT

    def holds(self, message: Any) -> bool:
        """Whether *message* was received here and is not yet released."""
        return type(message) is Message and message._owner is self and message._slot >= 0

    def receive_failed(self, source: int, truncated: bool, reason: str) -> MailRailError:
        """The error to raise for a payload receive that completed with an MPI error (*reason*: MPI's text;
        *truncated*: ``MPI_ERR_TRUNCATE``); the transport re-posts its slot first."""
        return receive_error(source, self.size, self.datagram_size, truncated, reason)

    def credit_messages_due(self) -> int:
        """How many credit messages are due (the transport sends them with :meth:`next_credit_message`)."""
        return len(self._outbox)

    def next_credit_message(self) -> tuple[int, int]:
        """The oldest credit message due: ``(target rank, tag)`` for a zero-byte send on the credit
        communicator."""
        target, kind, count = self._outbox.popleft()
        self.credit_messages_sent += 1
        if kind <= ANSWER:
            self.credits_returned += count
        return target, credit_tag(kind, count)

    def credits_arrived(self, source: int, tag: int) -> None:
        """A credit message with *tag* arrived from *source* (credit messages it causes join the outbox)."""
        self.credit_messages_received += 1
        kind = tag & KIND_MASK
        self.flow.on_credit_message(source, kind, tag >> KIND_BITS)
        if kind <= ANSWER and self.deferred.total:
            self.deferred.mark_ready(source)

    # -- diagnostics -------------------------------------------------------

    def check_stall(self) -> None:
        """Raise :class:`CreditStallError` if deferred sends made no progress for ``stall_timeout`` s of
        :attr:`clock` (the Endpoint's one time source: every stall decision reads it, and only it)."""
        if not self.stall_timeout or not self.deferred.total:
            return
        now = self.clock()
        if self._last_progress is None:
            self._last_progress = now
        elif now - self._last_progress > self.stall_timeout:
            waited, self._last_progress = now - self._last_progress, now  # catchable: the clock restarts
            raise CreditStallError(self.stall_report(waited))

    def stall_report(self, waited: float) -> str:
        return stall_report(self, waited)

    def counters(self) -> dict[str, int]:
        """Every counter of :data:`~mailrail.counters.COUNTERS`, in its order."""
        return counters_of(self)


# -- What both Endpoints say: the errors and reports, written once.  These are off the per-message path,
# so the compiled Endpoint (mailrail._protocol) calls these same functions rather than a copy.


def check_settings(size: int, tag_ub: int, head_patience: int, credit_poll_interval: int, idle_spins: int) -> None:
    """An Endpoint's integer settings, refused by name and value (both Endpoints' constructors)."""
    for name, value, low in (
        ("size", size, 1),
        ("tag_ub", tag_ub, MIN_TAG_UB),
        ("head_patience", head_patience, 1),
        ("credit_poll_interval", credit_poll_interval, 1),
        ("idle_spins", idle_spins, 0),
    ):
        if type(value) is not int or value < low:
            raise ValueError(f"Endpoint {name}={value!r} must be an integer >= {low}")


def check_receive_settings(recv_slots: int, posted_receives: int | None) -> int:
    """The receive slots and how many are posted at once (all by default), refused by name and value."""
    posted = recv_slots if posted_receives is None else posted_receives
    if type(recv_slots) is not int or recv_slots < 0:
        raise ValueError(f"Endpoint recv_slots={recv_slots!r} must be an integer >= 0")
    low = min(1, recv_slots)  # one at least, if there are receive slots
    if type(posted) is not int or not low <= posted <= recv_slots:
        raise ValueError(f"Endpoint posted_receives={posted!r} must be an integer in {low}..{recv_slots}")
    return posted


def _integer(value: object) -> int | None:
    """*value* as an int when it is an integer (numpy integers too; not a bool), else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]  # any object may be an index
    except TypeError:
        return None


def checked_rank(dest: object, size: int) -> int:
    """*dest* as a rank of 0..size-1: numpy integers accepted, the rest refused by value."""
    rank = _integer(dest)
    if rank is None:
        raise InvalidDestinationError(f"destination {dest!r} is not an integer rank (valid ranks are 0..{size - 1})")
    if not 0 <= rank < size:
        raise InvalidDestinationError(f"destination {dest!r} is out of range: valid ranks are 0..{size - 1}")
    return rank


def checked_size(nbytes: object, datagram_size: int) -> int:
    """*nbytes* as a payload size of 0..datagram_size: numpy integers accepted, the rest refused by value."""
    size = _integer(nbytes)
    if size is None:
        raise MessageSizeError(
            f"nbytes={nbytes!r} is not an integer byte count (a message holds 0..{datagram_size} bytes)"
        )
    if not 0 <= size <= datagram_size:
        raise MessageSizeError(
            f"nbytes={nbytes!r} is out of range: a message holds 0..{datagram_size} bytes (the datagram size)"
        )
    return size


def finalized(call: str) -> FinalizedError:
    """The error of *call* (``"receive()"``, ``"send(dest=3)"``) after finalize()."""
    return FinalizedError(f"{call} called after finalize()")


def not_from_the_pool(buf: object) -> BufferOwnershipError:
    return BufferOwnershipError(
        f"the buffer passed to send() (type {type(buf).__name__}) was not reserved from this "
        f"MailRail's send pool: use reserve_send_buffer()"
    )


def not_reserved(slot: int, state: int) -> BufferOwnershipError:
    return BufferOwnershipError(
        f"send buffer slot {slot} is {STATE_NAMES[state]}, not reserved: a buffer is sent once per "
        f"reserve_send_buffer()"
    )


def freed_twice(slot: int, state: int) -> ProtocolError:
    """A send slot completed that is not in flight: freeing it would hand it out twice."""
    return ProtocolError(f"send slot {slot} completed while {STATE_NAMES[state]}")


def release_refused(message: object, received_here: bool) -> ReleaseError:
    if not received_here:
        return ReleaseError(f"{message!r} is not a message received from this MailRail")
    return ReleaseError(f"{message!r} was already released")


def empty_ring(what: str) -> ProtocolError:
    """A head receive *what* (``"arrived"``, ``"re-posted"``) while none is posted."""
    return ProtocolError(f"a receive {what} with none posted")


def receive_slot_refused(slot: int, recv_slots: int) -> ProtocolError:
    """A receive slot that cannot be given back or parked: out of range, or more parked than slots (only
    messages made by hand get there)."""
    if not 0 <= slot < recv_slots:
        return ProtocolError(f"receive slot {slot} is out of range 0..{recv_slots - 1}")
    return ProtocolError(f"receive slot {slot} cannot be parked: more parked than the {recv_slots} receive slots")


def receive_error(source: int, size: int, datagram_size: int, truncated: bool, reason: str) -> MailRailError:
    """The error of a payload receive that completed with an MPI error (*reason*: MPI's text)."""
    origin = f" from rank {source}" if 0 <= source < size else ""
    if truncated:
        return MailRailError(
            f"a message longer than this rank's datagram_size ({datagram_size} bytes) arrived{origin} "
            f"({reason}): every rank of a rail must use the same datagram_size"
        )
    return MailRailError(f"receiving a message{origin} failed: {reason}")


def send_error(dest: int, nbytes: int, reason: str, *, deferred: bool) -> MailRailError:
    """The error of a send whose MPI call failed to start it (it was uncounted and its slot freed)."""
    if deferred:
        return MailRailError(f"a deferred send of {nbytes} bytes to rank {dest} failed: {reason}")
    return MailRailError(f"send(dest={dest}, nbytes={nbytes}) failed: {reason}")


def completion_error(slot: int, nbytes: int, reason: str) -> MailRailError:
    """The error of a send that completed with an MPI error (its slot is free again)."""
    return MailRailError(f"a send of {nbytes} bytes (send slot {slot}) failed: {reason}")


def credit_receive_error(reason: str) -> MailRailError:
    """The error of a credit message whose receive completed with an MPI error (re-posted)."""
    return MailRailError(f"receiving a credit message failed: {reason}")


def stall_report(endpoint: Any, waited: float) -> str:
    """What a :class:`~mailrail.errors.CreditStallError` says of *endpoint* (either implementation)."""
    flow, deferred = endpoint.flow, endpoint.deferred
    lines = [
        f"rank {endpoint.rank}: {deferred.total} deferred message(s) made no progress for "
        f"{waited:.1f} s ({flow.name} flow control, {flow.credits_per_pair} credits "
        f"per pair, return threshold {flow.return_threshold})"
    ]
    for dest in sorted(deferred.destinations())[:16]:
        lines.append(
            f"  destination {dest}: {deferred.queued_for(dest)} queued, {flow.available(dest)} credit(s) available"
        )
    lines.extend(flow.stall_lines(deferred.destinations()))
    lines.append(
        f"  this rank received {endpoint.messages_received} message(s), released "
        f"{endpoint.messages_released}, got {endpoint.credit_messages_received} credit message(s), "
        f"holds {endpoint.reserved} reserved send buffer(s) not yet sent"
    )
    return "\n".join(lines)


def counters_of(endpoint: Any) -> dict[str, int]:
    """Every counter of :data:`~mailrail.counters.COUNTERS` of *endpoint* (either implementation), in order."""
    flow, deferred = endpoint.flow, endpoint.deferred
    values = {
        "messages_sent": endpoint.messages_sent,
        "bytes_sent": endpoint.bytes_sent,
        "messages_received": endpoint.messages_received,
        "bytes_received": endpoint.bytes_received,
        "messages_released": endpoint.messages_released,
        "reserve_failures": endpoint.reserve_failures,
        "held_high_water": endpoint.held_high_water,
        "credit_messages_sent": endpoint.credit_messages_sent,
        "credit_messages_received": endpoint.credit_messages_received,
        "credits_returned": endpoint.credits_returned,
        "send_buffers_reserved": endpoint.reserved,
        "credits_piggybacked": flow.piggybacked,
        "deferred_sends": deferred.deferred_count,
        "deferred_now": deferred.total,
        "deferred_high_water": deferred.high_water,
        "credit_window_high_water": flow.unreturned_high_water,
        "credit_requests_sent": flow.requests_sent,
        "credit_requests_received": flow.requests_received,
        "credits_reclaimed": flow.reclaimed,
        "credit_revokes_sent": flow.revokes_sent,
        "credits_given_back": flow.given_back,
        "leases_now": flow.lease_count(),
        "leases_high_water": flow.leases_high_water,
        "waiting_high_water": flow.waiting_high_water,
        "credit_state_bytes": flow.credit_state_bytes(),
        "shared_credit_bytes": flow.shared_state_bytes(),
    }
    return {name: values[name] for name in COUNTERS}
