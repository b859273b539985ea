# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The compiled Endpoint: :class:`mailrail.protocol.Endpoint`, method for method, for the compiled transport.

:mod:`mailrail.protocol` is the specification; this module makes the same
decisions with the same results, errors (same texts) and counters, the way
:mod:`mailrail.flow._ledger` compiles :mod:`mailrail.flow`.
``tests/library/test_protocol_compiled.py`` feeds both the same random events and
compares every result and every piece of observable state.

The per-message paths have ``cdef`` versions (declared in ``_protocol.pxd``)
that :mod:`mailrail.transport._compiled` calls without a Python frame; the
``def`` methods are thin wrappers over them (one implementation).  Credits go
through the compiled :class:`~mailrail.flow._ledger.CreditLedger`'s C methods, and the credit messages it
decides to send are popped from its :class:`~mailrail.flow._ledger.Outbox` in C.
What is off the per-message path (the deferred queues, the stall check and its
report, stop) calls the same Python :class:`~mailrail.deferred.DeferredSends`
the Python Endpoint uses.
"""

cimport cython
from cpython.dict cimport PyDict_GetItemWithError
from cpython.long cimport PyLong_AsLongAndOverflow, PyLong_CheckExact, PyLong_FromVoidPtr
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from cpython.object cimport PyObject
from libc.stdint cimport INT32_MAX

from mailrail.flow._ledger cimport CreditLedger

import operator
import time

from mailrail import protocol as _specification
from mailrail.counters import COUNTERS as _COUNTERS
from mailrail.deferred import DeferredSends
from mailrail.errors import (
    BufferOwnershipError,
    CreditStallError,
    FinalizedError,
    InvalidDestinationError,
    MailRailError,
    MessageSizeError,
    ProtocolError,
    ReleaseError,
)
from mailrail.flow import base as _base
from mailrail.flow.base import FlowControl
from mailrail.protocol import NODE_DRAIN_WINDOW as _NODE_DRAIN_WINDOW, STATE_NAMES as _STATE_NAMES

# The C enums of _protocol.pxd must be the specification's values: checked once, here, not by a comment.
if ((FREE, HELD, QUEUED, IN_FLIGHT) != (_specification.FREE, _specification.HELD, _specification.QUEUED,
                                        _specification.IN_FLIGHT)
        or (ISEND_TAGGED, START, CREATE, ISEND_NEW, REPLACE) != (
            _specification.ISEND_TAGGED, _specification.START, _specification.CREATE, _specification.ISEND_NEW,
            _specification.REPLACE)
        or NO_SLOT != _specification.NO_SLOT
        or (ANSWER, KIND_BITS) != (_base.ANSWER, _base.KIND_BITS)):
    raise ImportError("mailrail._protocol is out of step with mailrail.protocol's constants: rebuild it")

_DETACHED = "the credit ledger was detached from its shared memory (finalize())"


@cython.final
@cython.freelist(64)
@cython.no_gc  # its references (a view, the Endpoint) never lead back to a message
cdef class Message:
    """An arrived message: ``data`` is a read-only view of ``nbytes`` bytes from rank ``source``.

    ``data`` lies in the receive pool and is valid until
    :meth:`~mailrail.rail.MailRail.release_receive_buffer`; copy what must outlive it.
    """

    def __init__(self, int source, Py_ssize_t nbytes, object data, Py_ssize_t slot, object owner):
        self.source = source
        self.nbytes = nbytes
        self.data = data
        self._slot = slot
        self._owner = owner

    def __repr__(self):
        state = "released" if self._slot < 0 else f"slot {self._slot}"
        return f"Message(source={self.source}, nbytes={self.nbytes}, {state})"


cdef class ProgressIO:
    """The MPI calls a transport makes for :meth:`Endpoint.receive` (see ``mailrail.protocol.ProgressIO``);
    the compiled transport overrides every method."""

    cdef int reclaim(self) except -1:
        raise NotImplementedError
    cdef int poll_credits(self) except -1:
        raise NotImplementedError
    cdef int start_send(self, int dest, int nbytes, int slot, long long tag, int action, bint deferred) except -1:
        raise NotImplementedError
    cdef int send_credit_messages(self) except -1:
        raise NotImplementedError
    cdef Py_ssize_t test_receive(self, int slot) except -2:
        raise NotImplementedError
    cdef object payload(self, int slot, Py_ssize_t nbytes):
        raise NotImplementedError
    cdef int post_receive(self, int slot) except -1:
        raise NotImplementedError
    cdef int idle(self) except -1:
        raise NotImplementedError


@cython.final
cdef class _PythonIO(ProgressIO):
    """A Python :class:`mailrail.protocol.ProgressIO` seen as a ProgressIO: the tests drive both Endpoints'
    receive step with one recording I/O (no transport uses it)."""

    cdef object io, data

    def __init__(self, io):
        self.io = io

    cdef int reclaim(self) except -1:
        self.io.reclaim_sends()
        return 0
    cdef int poll_credits(self) except -1:
        self.io.poll_credits()
        return 0
    cdef int start_send(self, int dest, int nbytes, int slot, long long tag, int action, bint deferred) except -1:
        self.io.start_send(dest, nbytes, slot, tag, action, deferred)
        return 0
    cdef int send_credit_messages(self) except -1:
        self.io.send_credit_messages()
        return 0
    cdef Py_ssize_t test_receive(self, int slot) except -2:
        arrival = self.io.test_receive(slot)
        if arrival is None:
            return -1
        self.arrival_source, self.arrival_tag, nbytes, self.data = arrival
        return nbytes
    cdef object payload(self, int slot, Py_ssize_t nbytes):
        data, self.data = self.data, None
        return data
    cdef int post_receive(self, int slot) except -1:
        self.io.post_receive(slot)
        return 0
    cdef int idle(self) except -1:
        self.io.idle()
        return 0


@cython.final
cdef class Endpoint:
    """Send-slot lifecycle, deferred sends, credit bookkeeping, held messages and counters of one rank.

    The compiled :class:`mailrail.protocol.Endpoint` (same constructor, methods, results and errors).
    *flow*: a compiled :class:`~mailrail.flow._ledger.CreditLedger` (credit modes) or unconstrained
    flow control (a :class:`~mailrail.flow.base.FlowControl` without credits).
    """

    def __init__(self, rank, size, send_pool, flow, *, tag_ub, head_patience, credit_poll_interval, idle_spins,
                 stall_timeout=0.0, recv_slots=0, posted_receives=None, clock=time.monotonic):
        if self.state != NULL:
            raise RuntimeError("Endpoint is initialized once")
        _specification.check_settings(size, tag_ub, head_patience, credit_poll_interval, idle_spins)
        posted_receives = _specification.check_receive_settings(recv_slots, posted_receives)
        if recv_slots > INT32_MAX:
            raise ValueError(f"{recv_slots} receive slots: the compiled Endpoint takes 0..{INT32_MAX}")
        if isinstance(flow, CreditLedger):
            self.ledger = <CreditLedger>flow
        elif not (isinstance(flow, FlowControl) and not flow.has_credits):
            raise TypeError(f"the compiled Endpoint takes a compiled CreditLedger or unconstrained flow control, "
                            f"not {type(flow).__name__} (the Python Endpoint takes any FlowControl)")
        if not 1 <= send_pool.slot_size <= INT32_MAX:
            raise ValueError(f"send slots of {send_pool.slot_size} bytes: the compiled Endpoint takes 1..{INT32_MAX}")
        self.rank = rank
        self.size = size
        self.send_pool = send_pool
        self.datagram_size = send_pool.slot_size
        self.flow = flow
        self.has_credits = flow.has_credits
        self.flow_outbox = flow.outbox
        if self.ledger is not None:
            self.outbox = self.ledger.outbox
            self.asks = self.ledger.asks_for_credit
        self.silent = flow.credits_change_silently
        self.tag_ub = tag_ub
        self.head_patience = head_patience
        self.credit_poll_interval = credit_poll_interval
        self.idle_spins = idle_spins
        self.stall_timeout = stall_timeout
        self.clock = clock
        self.send_views = list(send_pool.views)
        self.slot_by_id = send_pool.slot_by_id
        cdef int slots = send_pool.slots, slot
        self.state = <unsigned char *>PyMem_Calloc(slots, 1)
        self.free_stack = <int *>PyMem_Calloc(slots, sizeof(int))
        self.ring = <int *>PyMem_Calloc(slots, sizeof(int))
        self.stream_dest = <int *>PyMem_Calloc(slots, sizeof(int))
        self.stream_nbytes = <int *>PyMem_Calloc(slots, sizeof(int))
        self.persistent = <unsigned char *>PyMem_Calloc(slots, 1)
        self.posted = <int *>PyMem_Calloc(max(recv_slots, 1), sizeof(int))
        self.parked = <int *>PyMem_Calloc(max(recv_slots, 1), sizeof(int))
        if (not self.state or not self.free_stack or not self.ring or not self.stream_dest or
                not self.stream_nbytes or not self.persistent or not self.posted or not self.parked):
            raise MemoryError()
        self.recv_slots, self.posted_receives = recv_slots, posted_receives
        for slot in range(recv_slots):  # all parked until the transport posts them (post_parked)
            self.parked[slot] = recv_slots - 1 - slot
        self.parked_count = recv_slots
        self.slots = slots
        for slot in range(slots):
            self.free_stack[slot] = slots - 1 - slot  # lowest slot on top: hot slots stay in cache
            self.stream_dest[slot] = self.stream_nbytes[slot] = -1
        self.free_count = slots
        self.deferred = DeferredSends(poll_window=_NODE_DRAIN_WINDOW if self.silent else None)
        self.deferred_queues = self.deferred.queues
        self.deferred_push = self.deferred.push
        self.deferred_pop = self.deferred.pop
        self.deferred_mark_ready = self.deferred.mark_ready

    def __dealloc__(self):
        PyMem_Free(self.state)
        PyMem_Free(self.free_stack)
        PyMem_Free(self.ring)
        PyMem_Free(self.stream_dest)
        PyMem_Free(self.stream_nbytes)
        PyMem_Free(self.persistent)
        PyMem_Free(self.posted)
        PyMem_Free(self.parked)

    # -- the send slots ----------------------------------------------------

    @property
    def free_slots(self):
        return self.free_count

    @property
    def in_flight(self):
        return self.ring_count

    @property
    def send_state(self):
        """Each send slot's state (a read-only snapshot; the Python Endpoint's is its live bytearray)."""
        return bytes(self.state[:self.slots])

    cdef int checked_slot(self, object slot) except -1:
        cdef long value = slot
        if not 0 <= value < self.slots:
            raise IndexError(f"send slot {slot!r} is out of range 0..{self.slots - 1}")
        return value

    def pending_sends(self):
        """Send buffers reserved and not yet sent, plus sends deferred or in flight."""
        return self.reserved + self.deferred_count + self.ring_count

    def reserve(self):
        """A free send slot, now reserved by the application, or :data:`NO_SLOT` (backpressure)."""
        return self.c_reserve()

    def submit(self, dest, buf, nbytes):
        """Take ownership of *buf* (a reserved send buffer) for *dest*: ``(dest, nbytes, slot, tag, action)``."""
        cdef int slot = self.c_submit(dest, buf, nbytes)
        return self.out_dest, self.out_nbytes, slot, self.out_tag, self.out_action

    cdef int c_submit(self, object dest, object buf, object nbytes) except -2:
        """submit(): the slot that leaves now (out_* say how) or NO_SLOT (deferred; out_dest/out_nbytes set)."""
        if self.stopped:
            raise _specification.finalized(f"send(dest={dest!r})")
        cdef int overflow = 0, slot
        cdef long rank = -1, size = -1
        # Exact ints in range are checked in C; anything else takes the specification's slow path.
        if PyLong_CheckExact(dest):
            rank = PyLong_AsLongAndOverflow(dest, &overflow)
        if overflow or not 0 <= rank < self.size:
            rank = self.checked_or_unreserved(self.checked_rank, dest, buf)
        overflow = 0
        if PyLong_CheckExact(nbytes):
            size = PyLong_AsLongAndOverflow(nbytes, &overflow)
        if overflow or not 0 <= size <= self.datagram_size:
            size = self.checked_or_unreserved(self.checked_size, nbytes, buf)
        cdef PyObject *found = PyDict_GetItemWithError(self.slot_by_id, PyLong_FromVoidPtr(<void *>buf))
        if found != NULL and self.send_views[<Py_ssize_t><object>found] is buf:
            slot = <object>found
        else:
            slot = self.slot_of(buf)
        cdef unsigned char current = self.state[slot]
        if current != HELD:
            raise _specification.not_reserved(slot, current)
        self.idle_calls = 0  # a rank that sends is busy, not idle
        self.reserved -= 1
        self.messages_sent += 1  # submitted: deferred sends count now
        self.bytes_sent += size
        if self.ledger is None:  # unconstrained: every send leaves at once
            return self.leave(<int>rank, <int>size, slot)
        self.pool_attached()
        if (not self.deferred_count or rank not in self.deferred_queues) and self.ledger.try_take(<int>rank):
            return self.leave(<int>rank, <int>size, slot)
        self.state[slot] = QUEUED  # the stall clock was reset when the queues last emptied (a drain)
        self.deferred_push(rank, slot, size)
        self.deferred_count += 1
        self.out_dest, self.out_nbytes, self.out_tag, self.out_action = <int>rank, <int>size, 0, 0
        if self.asks and self.ledger.deferred_to(<int>rank):  # adaptive: counted; no credit: ask
            self.ledger.ask_for(<int>rank, self.queued_for(<int>rank))
        return NO_SLOT

    cdef int pool_attached(self) except -1:
        """A node or adaptive ledger detached from its shared memory (finalize()) must not be used: raise,
        never crash."""
        if self.ledger.shared and self.ledger.credits == NULL:
            raise RuntimeError(_DETACHED)
        return 0

    cdef long queued_for(self, int dest) except -1:
        """deferred.queued_for(dest): the sends queued for *dest*."""
        queue = self.deferred_queues.get(dest)
        return len(queue) if queue else 0

    cdef int leave(self, int dest, int nbytes, int slot) noexcept:
        """*slot* leaves now for *dest* (its credit taken): in flight; out_* say its tag and MPI call."""
        self.state[slot] = IN_FLIGHT
        self.ring[(self.ring_head + self.ring_count) % self.slots] = slot
        self.ring_count += 1
        self.out_dest, self.out_nbytes = dest, nbytes
        cdef long long tag = 0 if self.ledger is None else self.ledger.piggyback_for(dest)
        self.out_tag = tag
        if tag:
            self.out_action = ISEND_TAGGED
        elif self.stream_dest[slot] == dest and self.stream_nbytes[slot] == nbytes:
            if self.persistent[slot]:
                self.out_action = START
            else:
                self.persistent[slot] = 1
                self.out_action = CREATE
        else:
            self.stream_dest[slot], self.stream_nbytes[slot] = dest, nbytes
            if self.persistent[slot]:
                self.persistent[slot] = 0
                self.out_action = REPLACE
            else:
                self.out_action = ISEND_NEW
        return slot

    def transmit_failed(self, int slot, int nbytes, int action):
        """The MPI call that was to start *slot*'s send failed: nothing of it is in flight."""
        self.c_transmit_failed(slot, nbytes, action)

    cdef int c_transmit_failed(self, int slot, int nbytes, int action) except -1:
        # An error path: finding the slot in the ring costs O(in flight), as in the specification.
        cdef int i = 0, j
        while i < self.ring_count and self.ring[(self.ring_head + i) % self.slots] != slot:
            i += 1
        if i == self.ring_count:
            raise ProtocolError(f"send slot {slot} failed to start but is not in flight")
        for j in range(i, self.ring_count - 1):
            self.ring[(self.ring_head + j) % self.slots] = self.ring[(self.ring_head + j + 1) % self.slots]
        self.ring_count -= 1
        if action != START and action != ISEND_TAGGED:  # neither touched the slot's persistent send
            self.stream_dest[slot] = self.stream_nbytes[slot] = -1
            self.persistent[slot] = 0
        self.messages_sent -= 1
        self.bytes_sent -= nbytes
        self.free_slot(slot)
        return 0

    def oldest_in_flight(self):
        """The slot whose send has been in flight longest (the one to test), or :data:`NO_SLOT`."""
        return self.c_oldest_in_flight()

    def oldest_completed(self):
        """The oldest send in flight completed (with an error or not): its slot is free again."""
        self.c_oldest_completed()

    def oldest_still_in_flight(self):
        """The oldest send has not completed: after head_patience such calls it moves to the back."""
        self.c_oldest_still_in_flight()

    def has_persistent(self, slot):
        """Whether *slot* holds a persistent send request (the transport frees those at close)."""
        return self.c_has_persistent(self.checked_slot(slot))

    def abandon_in_flight(self):
        """Forget the sends in flight without completing them (abandon): their slots, oldest first."""
        cdef list slots = []
        cdef int slot
        while self.ring_count:
            slot = self.ring[self.ring_head]
            self.ring_head = (self.ring_head + 1) % self.slots
            self.ring_count -= 1
            self.persistent[slot] = 0
            self.stream_dest[slot] = self.stream_nbytes[slot] = -1
            slots.append(slot)
        return slots

    cdef int refuse_slot(self, int slot) except -1:
        raise _specification.freed_twice(slot, self.state[slot])

    cdef int refuse_finalized(self, object call) except -1:
        raise _specification.finalized(call)

    cdef int refuse_release(self, object message) except -1:
        raise _specification.release_refused(
            message, type(message) is Message and (<Message>message)._owner is self)

    def slot_of(self, buf):
        """The send slot of *buf*: the reserved view itself, or a C-contiguous view starting at a slot."""
        slot = self.send_pool.slot_of(buf)
        if slot is None:
            raise _specification.not_from_the_pool(buf)
        return slot

    cdef long checked_or_unreserved(self, object check, object value, object buf) except? -1:
        """*check* (value), and if it raises, *buf*'s reserved slot back to the pool first (slow path)."""
        try:
            return check(value)
        except Exception:
            self.unreserve(buf)
            raise

    def unreserve(self, buf):
        """Give *buf*'s slot back to the pool if it is a reserved slot of this pool (a send() that raised)."""
        try:
            found = self.send_pool.slot_of(buf)
        except BufferOwnershipError:  # not identifiable as a slot: nothing changes
            return
        cdef int slot
        if found is not None:
            slot = found
            if self.state[slot] == HELD:
                self.state[slot] = FREE
                self.reserved -= 1
                self.free_stack[self.free_count] = slot
                self.free_count += 1

    def checked_rank(self, dest):
        """A destination rank as int: numpy integers accepted, the rest rejected by value (slow path)."""
        return _specification.checked_rank(dest, self.size)

    def checked_size(self, nbytes):
        """A payload size as int: numpy integers accepted, the rest rejected by value (slow path)."""
        return _specification.checked_size(nbytes, self.datagram_size)

    # -- deferred sends ----------------------------------------------------

    @property
    def deferred_total(self):
        return self.deferred_count

    def drain_ready(self):
        """Deferred sends that have credit now, at most one per destination, oldest first, each as submit()
        hands out a send that leaves; then the stall check (check_stall()).

        A generator, as the specification's: each send is taken from its queue as it is handed out."""
        self.c_drain_begin()
        cdef int slot = self.c_drain_next()
        while slot != NO_SLOT:
            yield self.out_dest, self.out_nbytes, slot, self.out_tag, self.out_action
            slot = self.c_drain_next()

    cdef int c_drain_begin(self) except -1:
        """Start a drain: c_drain_next() then hands out its sends one by one (the transport's loop)."""
        self.drain_candidates = iter(self.deferred.candidates()) if self.deferred_count else None
        return 0

    cdef int c_drain_next(self) except -2:
        """The next deferred send that leaves (out_* say how), or NO_SLOT once the drain is done (after its
        stall check)."""
        cdef int dest, slot, nbytes
        if self.drain_candidates is not None:  # only credit modes defer: the ledger is there
            self.pool_attached()
            for candidate in self.drain_candidates:
                dest = candidate
                if self.ledger.try_take(dest):
                    slot, nbytes = self.deferred_pop(dest)
                    self.deferred_count -= 1
                    if self.asks:
                        self.ledger.undeferred_to(dest, 1)
                    self.has_last_progress = False
                    if not self.silent and self.ledger.credits[dest]:
                        self.deferred_mark_ready(dest)
                    return self.leave(dest, nbytes, slot)
                elif self.asks and self.ledger.may_ask(dest):
                    self.ledger.ask_for(dest, self.queued_for(dest))
            self.drain_candidates = None
        if self.stall_timeout and self.deferred_count:
            self.check_stall()
        return NO_SLOT

    def stop(self):
        """finalize(): the application's calls raise from now on; the deferred sends are dropped (their
        slots free again).  Returns how many were dropped."""
        self.stopped = True
        dropped = self.deferred.clear()
        self.deferred_count = 0
        cdef int dest, slot
        for dest, slot, _ in dropped:
            self.state[slot] = FREE
            self.free_stack[self.free_count] = slot
            self.free_count += 1
            if self.asks and self.ledger.credits != NULL:  # never into node memory already freed (detached)
                self.ledger.undeferred_to(dest, 1)
        return len(dropped)

    def check_open(self, call):
        """Raise :class:`~mailrail.errors.FinalizedError` for *call* (e.g. ``"receive()"``) after finalize()."""
        if self.stopped:
            self.refuse_finalized(call)

    # -- progress ----------------------------------------------------------

    def credit_poll_due(self):
        """Whether this progress call polls credit messages."""
        return self.c_credit_poll_due()

    def idle(self):
        """A receive() found nothing: True when the rank should yield the core (or sleep) now."""
        return self.c_idle()

    def receive(self, io):
        """One progress step, then at most one arrived message (see the specification); *io*: a
        :class:`ProgressIO` (the compiled transport), or any object with the specification's I/O methods."""
        return self.c_receive(io if isinstance(io, ProgressIO) else _PythonIO(io))

    # -- receive slots -----------------------------------------------------

    def posted_slots(self):
        """The posted receive slots, head (tested next) first."""
        return [self.posted[(self.posted_head + i) % self.recv_slots] for i in range(self.posted_count)]

    def parked_slots(self):
        """The parked receive slots, the next one to post last."""
        return [self.parked[i] for i in range(self.parked_count)]

    def head_receive(self):
        """The receive slot tested next (the oldest posted), or :data:`NO_SLOT`."""
        return self.c_head_receive()

    def post_parked(self):
        """A parked slot to post now (it joins the ring's back), or :data:`NO_SLOT`."""
        return self.c_post_parked()

    def head_arrived(self):
        """The head receive completed with a message: it leaves the ring; a parked slot to post, or NO_SLOT."""
        return self.c_head_arrived()

    def head_reposted(self):
        """The head receive was started again: to the ring's back."""
        self.c_head_reposted()

    def post_failed(self, int slot):
        """The slot last put at the ring's back was not started (an MPI error): parked again."""
        self.c_post_failed(slot)

    cdef int c_post_failed(self, int slot) except -1:
        if not self.posted_count or self.posted[(self.posted_head + self.posted_count - 1) % self.recv_slots] != slot:
            raise ProtocolError(f"receive slot {slot} failed to post but is not the last posted")
        if self.parked_count >= self.recv_slots:  # never write past the stack (hand-made messages)
            self.refuse_receive_slot(slot)
        self.posted_count -= 1
        self.parked[self.parked_count] = slot
        self.parked_count += 1
        return 0

    def take_posted(self):
        """The posted slots, head first, for the transport to cancel: all parked from now on."""
        slots = self.posted_slots()
        if self.posted_count + self.parked_count > self.recv_slots:  # never write past the stack
            self.refuse_receive_slot(slots[len(slots) - 1])  # (wraparound is off: no [-1])
        cdef int slot
        for slot in reversed(slots):
            self.parked[self.parked_count] = slot
            self.parked_count += 1
        self.posted_count = 0
        return slots

    cdef int refuse_receive_slot(self, Py_ssize_t slot) except -1:
        raise _specification.receive_slot_refused(slot, self.recv_slots)

    cdef int refuse_empty_ring(self, str what) except -1:
        raise _specification.empty_ring(what)

    # -- receiver side -----------------------------------------------------

    def arrived(self, int source, long long tag, Py_ssize_t nbytes, Py_ssize_t slot, data):
        """A payload arrived in receive slot *slot* (*data*: its view): the message to hand out."""
        return self.c_arrived(source, tag, nbytes, slot, data)

    def release(self, message):
        """The application gives *message* back: its receive slot to post now, or :data:`NO_SLOT` (parked).
        Credit messages it causes are due."""
        return self.c_release(message)

    def holds(self, message):
        """Whether *message* was received here and is not yet released."""
        return type(message) is Message and (<Message>message)._owner is self and (<Message>message)._slot >= 0

    def receive_failed(self, int source, bint truncated, str reason):
        """The error to raise for a payload receive that completed with an MPI error (*reason*: MPI's text;
        *truncated*: ``MPI_ERR_TRUNCATE``); the transport re-posts its slot first."""
        return _specification.receive_error(source, self.size, self.datagram_size, truncated, reason)

    def credit_messages_due(self):
        """How many credit messages are due (the transport sends them with :meth:`next_credit_message`)."""
        return len(self.flow_outbox) if self.outbox is None else self.outbox.count

    def next_credit_message(self):
        """The oldest credit message due: ``(target rank, tag)`` for a zero-byte send on the credit
        communicator."""
        cdef int target
        cdef long long tag
        if self.outbox is None:  # unconstrained: its outbox is the FlowControl's deque (empty)
            target, kind, count = self.flow_outbox.popleft()
            self.credit_messages_sent += 1
            if kind <= ANSWER:
                self.credits_returned += count
            return target, _base.credit_tag(kind, count)
        if not self.c_next_credit_message(&target, &tag):
            raise IndexError("pop from an empty deque")  # as the specification's deque says
        return target, tag

    cdef int c_next_credit_message(self, int *target, long long *tag) except -1:
        """The oldest credit message due into *target* and *tag*: 1, or 0 if none is due."""
        cdef CreditMessage message
        if self.outbox is None or not self.outbox.pop(&message):
            return 0
        self.credit_messages_sent += 1
        if message.kind <= ANSWER:
            self.credits_returned += message.count
        target[0] = message.target
        tag[0] = message.count << KIND_BITS | message.kind
        return 1

    def credits_arrived(self, int source, long long tag):
        """A credit message with *tag* arrived from *source* (credit messages it causes join the outbox)."""
        self.c_credits_arrived(source, tag)

    cdef int c_credits_arrived(self, int source, long long tag) except -1:
        self.credit_messages_received += 1
        cdef int kind = tag & KIND_MASK
        if self.ledger is None:
            self.flow.on_credit_message(source, kind, tag >> KIND_BITS)  # unconstrained flow control refuses it
        else:
            if not 0 <= source < self.size:
                raise IndexError(f"rank {source} is out of range 0..{self.size - 1}")
            self.pool_attached()
            self.ledger.credit_message(source, kind, tag >> KIND_BITS)
        if kind <= ANSWER and self.deferred_count:
            self.deferred_mark_ready(source)
        return 0

    # -- diagnostics -------------------------------------------------------

    def check_stall(self):
        """Raise :class:`CreditStallError` if deferred sends made no progress for ``stall_timeout`` s of
        ``clock`` (the Endpoint's one time source, as the specification's)."""
        if not self.stall_timeout or not self.deferred_count:
            return
        cdef double waited, now = self.clock()
        if not self.has_last_progress:
            self.last_progress = now
            self.has_last_progress = True
        elif now - self.last_progress > self.stall_timeout:
            waited, self.last_progress = now - self.last_progress, now  # catchable: the clock restarts
            raise CreditStallError(self.stall_report(waited))

    def stall_report(self, waited):
        return _specification.stall_report(self, waited)

    def counters(self):
        """Every counter of :data:`~mailrail.counters.COUNTERS`, in its order."""
        return _specification.counters_of(self)
