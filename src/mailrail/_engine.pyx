# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False, binding=False
"""mailrail._engine: the compiled transport.

The same transport as :class:`mailrail.transport.python.PythonTransport`: a ring
of persistent wildcard receives polled at its head, a send pool whose slots keep
a persistent request per repeated (destination, size), in-flight sends reclaimed
a few at a time from the oldest.  Four interpreter calls per message cost about
2.5 us; here the four calls are C functions.

In the credit modes the compiled :class:`~mailrail._ledger.CreditLedger`
accounts every send, arrival and release, and the engine polls and returns
credit messages itself.  The sans-I/O :class:`~mailrail.protocol.Endpoint` is
called (see :class:`mailrail.transport.base.EndpointHooks`) only for what waits
for credit: it queues a send that has none, and drains the queues once credit
comes back.

No MPI header is needed: the MPI functions are those of the library mpi4py
loaded, resolved at run time by :mod:`mailrail.transport.compiled` and passed in
as addresses, with that library's layout facts (sizes of ``MPI_Status`` and
``MPI_Request``, offsets of ``MPI_SOURCE`` and ``MPI_TAG``, handle values).
Handles travel as ``intptr_t``: MPICH's int handles and Open MPI's pointer
handles both fit.

It never crashes the process: a failed construction step releases what
exists; an MPI error is a Python exception that leaves the engine usable; the
clean-up calls go on past MPI errors and raise the first once everything is
released; a pool that MPI may still use is never freed (docs/architecture.md).
"""

cimport cython
from cpython.long cimport PyLong_AsLongAndOverflow, PyLong_CheckExact, PyLong_FromVoidPtr
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.limits cimport LONG_MAX
from libc.stdint cimport INT32_MAX, intptr_t
from posix.time cimport nanosleep, timespec

from mailrail._ledger cimport CreditLedger

import atexit
import time
import weakref

from mpi4py import MPI

from mailrail.counters import TRANSPORT_COUNTERS
from mailrail.errors import BufferOwnershipError, FinalizedError, MailRailError, ReleaseError

cdef extern from "<sched.h>":
    int sched_yield() nogil

ctypedef int (*test_fn)(void *request, int *flag, void *status) noexcept nogil
ctypedef int (*start_fn)(void *request) noexcept nogil
ctypedef int (*get_count_fn)(const void *status, intptr_t datatype, int *count) noexcept nogil
ctypedef int (*isend_fn)(const void *buf, int count, intptr_t datatype, int dest, int tag, intptr_t comm,
                         void *request) noexcept nogil
ctypedef int (*recv_init_fn)(void *buf, int count, intptr_t datatype, int source, int tag, intptr_t comm,
                             void *request) noexcept nogil
ctypedef int (*request_fn)(void *request) noexcept nogil
ctypedef int (*wait_fn)(void *request, void *status) noexcept nogil
ctypedef int (*test_cancelled_fn)(const void *status, int *flag) noexcept nogil

#: Room for any MPI_Request handle and any MPI_Status (checked at construction).
cdef enum:
    REQUEST_BYTES = 16
    STATUS_BYTES = 256

# Send-slot states, as in mailrail.protocol.
cdef enum:
    FREE = 0
    HELD = 1
    QUEUED = 2
    IN_FLIGHT = 3

STATE_NAMES = ("free", "reserved", "deferred", "in flight")

ctypedef struct Request:
    unsigned char handle[REQUEST_BYTES]

ctypedef struct SendSlot:
    int dest, nbytes          # the (destination, size) this slot sent last; dest -1: none
    bint persistent           # persistent_request holds a persistent send for (dest, nbytes)
    bint inflight_persistent  # the send in flight is the persistent one
    Request persistent_request
    Request once_request      # Isend of a first (destination, size), or of a piggybacking send

cdef char credit_buffer[1]  # credit messages carry no payload (the count is the tag)

#: Pools of abandoned engines that MPI may still read (sends in flight) or write (a receive whose
#: cancellation failed): kept alive until the process ends rather than freed under MPI (see Engine.abandon).
_abandoned_send_pools = []
_abandoned_recv_pools = []

#: Engines not yet closed: abandoned before MPI_Finalize (mpi4py finalizes at exit, after the
#: atexit handlers registered later, such as this module's), so that no receive is still posted then.
_live_engines = weakref.WeakSet()


def _abandon_live_engines():
    for engine in list(_live_engines):
        try:
            engine.abandon()
        except Exception:  # one engine's MPI failure must not keep the others posted
            pass


atexit.register(_abandon_live_engines)


@cython.final
@cython.freelist(64)
@cython.no_gc  # its references (a view, the transport) never lead back to a message
cdef class Message:
    """An arrived message: ``data`` is a read-only view of ``nbytes`` bytes in the receive pool.

    Valid until ``MailRail.release_receive_buffer()``; copy what must outlive it.
    """

    cdef readonly int source
    cdef readonly Py_ssize_t nbytes
    cdef readonly object data
    cdef public Py_ssize_t _slot   # receive slot; -1 once released
    cdef public object _owner      # the transport that received it

    def __init__(self, int source, Py_ssize_t nbytes, object data, Py_ssize_t slot, object owner):
        self.source = source
        self.nbytes = nbytes
        self.data = data
        self._slot = slot
        self._owner = owner

    def __repr__(self):
        state = "released" if self._slot < 0 else f"slot {self._slot}"
        return f"Message(source={self.source}, nbytes={self.nbytes}, {state})"


cdef int mpi_failed(int code) except -1:
    """Raise mpi4py's MPI.Exception for an MPI error code (its text names the error)."""
    raise MPI.Exception(code)


@cython.final
cdef class ErrorLog:
    """The first MPI error of a clean-up that goes on past errors, raised once everything is released."""

    cdef int code
    cdef str step

    cdef inline int note(self, int code, str step) noexcept:
        if code != 0 and self.code == 0:
            self.code, self.step = code, step
        return code

    cdef int raise_first(self) except -1:
        if self.code:
            raise MailRailError(f"MPI failed to {self.step} ({MPI.Exception(self.code)}); everything else "
                                f"was released") from MPI.Exception(self.code)
        return 0


cdef void *address(dict functions, str name) except NULL:
    cdef size_t value = functions.get(name) or 0
    if value == 0:
        raise KeyError(f"MPI function {name} not resolved")
    return <void *>value


@cython.final
cdef class Engine:
    """The compiled transport of one MailRail (built by :func:`mailrail.transport.compiled.make`).

    Implements :class:`mailrail.transport.base.Transport`.
    """

    cdef object __weakref__
    # MPI, resolved at run time
    cdef test_fn test
    cdef start_fn start
    cdef get_count_fn get_count
    cdef isend_fn isend, send_init
    cdef recv_init_fn recv_init
    cdef request_fn request_free, cancel
    cdef wait_fn wait
    cdef test_cancelled_fn test_cancelled
    cdef intptr_t comm, byte
    cdef int any_source, any_tag, source_offset, tag_offset, error_offset
    cdef unsigned char status[STATUS_BYTES]
    # Python objects
    cdef list send_views, recv_views
    cdef dict slot_by_id
    cdef object send_pool, endpoint
    # credit modes (ledger None when unconstrained)
    cdef CreditLedger ledger
    cdef object endpoint_admit, endpoint_mark_ready, endpoint_drain
    cdef int deferred, progress_calls, progress_interval
    cdef intptr_t credit_comm
    cdef long long tag_ub
    cdef Request *credit_recv         # ring of posted zero-byte receives for credit messages
    cdef int credit_receives, credit_head, credit_receives_made
    cdef bint credit_receives_cancelled
    cdef Request *credit_send         # ring of zero-byte credit returns in flight, grown on demand
    cdef int credit_send_head, credit_send_count, credit_send_capacity
    # pools
    cdef char *send_base
    cdef char *recv_base
    cdef int size, slot_size, send_slots, recv_slots, posted_limit
    cdef list recv_cache              # per receive slot: a view of cached_nbytes[slot] bytes, or None
    cdef Py_ssize_t *cached_nbytes
    # send side
    cdef unsigned char *send_state
    cdef SendSlot *send_slot
    cdef int *free_stack
    cdef int free_count
    cdef int *inflight
    cdef int inflight_head, inflight_count
    cdef int send_test_window, head_patience, head_waits
    # receive side
    cdef Request *recv_request
    cdef int *posted
    cdef int posted_head, posted_count
    cdef int *unposted
    cdef int unposted_count, receives_made
    cdef readonly Py_ssize_t held, held_high_water
    cdef int idle_calls, idle_spins
    cdef long idle_sleep_ns
    cdef bint stopped, closed
    cdef int reserved                 # send slots HELD: reserved by the application, not yet sent
    # counters (see mailrail.counters)
    cdef long long messages_sent, bytes_sent, messages_received, bytes_received, messages_released
    cdef long long reserve_failures, credit_messages_sent, credit_messages_received, credits_returned

    def __init__(self, *, mpi, intptr_t comm, send_pool, recv_pool, list recv_views, int posted_receives,
                 int size, endpoint, tuning, CreditLedger ledger=None, intptr_t credit_comm=0,
                 long long tag_ub=0):
        """*mpi*: the resolved library (:class:`mailrail.transport.compiled.MPILibrary`); *comm*,
        *credit_comm*: handles of the payload and credit communicators; *send_pool*, *recv_pool*:
        :class:`~mailrail.pool.SlotPool`; *recv_views*: the read-only views handed out per receive
        slot; *endpoint*: the :class:`~mailrail.transport.base.EndpointHooks`; *tuning*:
        :class:`~mailrail.transport.base.Tuning`; *ledger*: the credit modes' ledger, or None."""
        if self.send_views is not None or self.closed:
            raise RuntimeError("Engine is initialized once")
        try:
            self.bind_tuning(tuning)  # plain values first: a bad one reaches no C field
            self.bind_mpi(mpi, comm)
            self.bind_pools(send_pool, recv_pool, recv_views, posted_receives, size)
            self.bind_endpoint(endpoint)
            if ledger is not None:
                self.bind_credits(ledger, credit_comm, tag_ub)
            self.allocate()
            self.create_receives()  # from here on MPI requests exist
            if ledger is not None:
                self.create_credit_receives()
        except BaseException:
            # Release exactly what exists (every array pointer may be NULL, every count 0); the
            # first failure is the one to report.
            self.stopped = self.closed = True
            self.release_requests(ErrorLog())
            raise
        _live_engines.add(self)

    # -- construction, step by step ------------------------------------------

    cdef int bind_mpi(self, mpi, intptr_t comm) except -1:
        cdef dict functions = mpi.functions
        self.test = <test_fn>address(functions, "MPI_Test")
        self.start = <start_fn>address(functions, "MPI_Start")
        self.get_count = <get_count_fn>address(functions, "MPI_Get_count")
        self.isend = <isend_fn>address(functions, "MPI_Isend")
        self.send_init = <isend_fn>address(functions, "MPI_Send_init")
        self.recv_init = <recv_init_fn>address(functions, "MPI_Recv_init")
        self.request_free = <request_fn>address(functions, "MPI_Request_free")
        self.cancel = <request_fn>address(functions, "MPI_Cancel")
        self.wait = <wait_fn>address(functions, "MPI_Wait")
        self.test_cancelled = <test_cancelled_fn>address(functions, "MPI_Test_cancelled")
        if mpi.status_size > STATUS_BYTES or mpi.request_size > REQUEST_BYTES or not all(
                0 <= offset <= mpi.status_size - 4 for offset in (mpi.source_offset, mpi.tag_offset, mpi.error_offset)):
            raise ValueError(f"unsupported MPI layout: status of {mpi.status_size} bytes (MPI_SOURCE at "
                             f"{mpi.source_offset}, MPI_TAG at {mpi.tag_offset}, MPI_ERROR at {mpi.error_offset}), "
                             f"request of {mpi.request_size} bytes")
        self.source_offset, self.tag_offset, self.error_offset = mpi.source_offset, mpi.tag_offset, mpi.error_offset
        self.byte, self.any_source, self.any_tag = mpi.byte, mpi.any_source, mpi.any_tag
        self.comm = comm
        return 0

    cdef int bind_pools(self, send_pool, recv_pool, list recv_views, int posted_receives, int size) except -1:
        if send_pool.slot_size != recv_pool.slot_size or not 1 <= send_pool.slot_size <= INT32_MAX:
            raise ValueError(f"send and receive slots must have one size in 1..{INT32_MAX} bytes, got "
                             f"{send_pool.slot_size} and {recv_pool.slot_size}")
        if len(recv_views) != recv_pool.slots or not 1 <= posted_receives <= recv_pool.slots or size < 1:
            raise ValueError(f"need a view per receive slot, 1 <= posted_receives ({posted_receives}) <= receive "
                             f"slots ({recv_pool.slots}) and size ({size}) >= 1")
        self.send_pool = send_pool
        self.send_views = list(send_pool.views)
        self.slot_by_id = send_pool.slot_by_id
        self.send_base = <char *><size_t>send_pool.slab.ctypes.data
        self.recv_views = recv_views
        self.recv_base = <char *><size_t>recv_pool.slab.ctypes.data
        self.recv_cache = [None] * recv_pool.slots
        self.slot_size = send_pool.slot_size
        self.send_slots, self.recv_slots = send_pool.slots, recv_pool.slots
        self.posted_limit = posted_receives
        self.size = size
        return 0

    cdef int bind_tuning(self, tuning) except -1:
        cdef dict bounds = {"send_test_window": (1, INT32_MAX), "head_patience": (1, INT32_MAX),
                            "credit_poll_interval": (1, INT32_MAX), "credit_receives": (1, 1 << 20),
                            "idle_spins": (0, INT32_MAX), "idle_sleep_ns": (0, LONG_MAX)}
        for name, (low, high) in bounds.items():
            value = getattr(tuning, name)
            if type(value) is not int or not low <= value <= high:
                raise ValueError(f"tuning {name}={value!r} is out of range {low}..{high} ({tuning!r})")
        self.send_test_window = tuning.send_test_window
        self.head_patience = tuning.head_patience
        self.idle_spins = tuning.idle_spins
        self.idle_sleep_ns = tuning.idle_sleep_ns
        self.progress_interval = tuning.credit_poll_interval
        self.credit_receives = tuning.credit_receives
        return 0

    cdef int bind_endpoint(self, endpoint) except -1:
        self.endpoint = endpoint
        self.endpoint_admit = endpoint.admit
        self.endpoint_mark_ready = endpoint.mark_ready
        self.endpoint_drain = endpoint.drain_ready
        return 0

    cdef int bind_credits(self, CreditLedger ledger, intptr_t credit_comm, long long tag_ub) except -1:
        if not 1 <= tag_ub <= INT32_MAX:
            raise ValueError(f"tag_ub {tag_ub} is out of range 1..{INT32_MAX}")
        self.ledger = ledger
        self.credit_comm = credit_comm
        self.tag_ub = tag_ub
        return 0

    cdef int allocate(self) except -1:
        self.send_state = <unsigned char *>PyMem_Calloc(self.send_slots, 1)
        self.send_slot = <SendSlot *>PyMem_Calloc(self.send_slots, sizeof(SendSlot))
        self.free_stack = <int *>PyMem_Calloc(self.send_slots, sizeof(int))
        self.inflight = <int *>PyMem_Calloc(self.send_slots, sizeof(int))
        self.recv_request = <Request *>PyMem_Calloc(self.recv_slots, sizeof(Request))
        self.posted = <int *>PyMem_Calloc(self.recv_slots, sizeof(int))
        self.unposted = <int *>PyMem_Calloc(self.recv_slots, sizeof(int))
        self.cached_nbytes = <Py_ssize_t *>PyMem_Calloc(self.recv_slots, sizeof(Py_ssize_t))
        if self.ledger is not None:
            self.credit_recv = <Request *>PyMem_Calloc(self.credit_receives, sizeof(Request))
        if (not self.send_state or not self.send_slot or not self.free_stack or not self.inflight or
                not self.recv_request or not self.posted or not self.unposted or not self.cached_nbytes or
                (self.ledger is not None and not self.credit_recv)):
            raise MemoryError()
        cdef int slot
        for slot in range(self.send_slots):
            self.send_slot[slot].dest = -1
            self.free_stack[slot] = self.send_slots - 1 - slot  # lowest slot on top: hot slots stay cached
        self.free_count = self.send_slots
        return 0

    cdef int create_receives(self) except -1:
        """One persistent wildcard receive per slot; the first posted_limit started, the rest parked."""
        cdef int slot
        for slot in range(self.recv_slots):
            self.check(self.recv_init(self.recv_base + <Py_ssize_t>slot * self.slot_size, self.slot_size,
                                      self.byte, self.any_source, self.any_tag, self.comm,
                                      self.recv_request[slot].handle))
            self.receives_made = slot + 1
        for slot in range(self.posted_limit):
            self.post_receive(slot)
        for slot in range(self.recv_slots - 1, self.posted_limit - 1, -1):
            self.unposted[self.unposted_count] = slot
            self.unposted_count += 1
        return 0

    cdef int create_credit_receives(self) except -1:
        cdef int i
        for i in range(self.credit_receives):
            self.check(self.recv_init(credit_buffer, 0, self.byte, self.any_source, self.any_tag,
                                      self.credit_comm, self.credit_recv[i].handle))
            self.credit_receives_made = i + 1
            self.check(self.start(self.credit_recv[i].handle))
        return 0

    def __dealloc__(self):
        # MPI requests are freed by close() or abandon(); here only this object's own memory.
        PyMem_Free(self.credit_send)
        PyMem_Free(self.credit_recv)
        PyMem_Free(self.cached_nbytes)
        PyMem_Free(self.send_state)
        PyMem_Free(self.send_slot)
        PyMem_Free(self.free_stack)
        PyMem_Free(self.inflight)
        PyMem_Free(self.recv_request)
        PyMem_Free(self.posted)
        PyMem_Free(self.unposted)

    def __del__(self):
        # Collected without close(): posted receives would write into a freed pool.
        if not self.closed:
            self.abandon()

    # -- internals ------------------------------------------------------------

    cdef inline int check(self, int code) except -1:
        if code != 0:
            mpi_failed(code)
        return 0

    cdef int post_receive(self, int slot) except -1:
        self.check(self.start(self.recv_request[slot].handle))
        self.posted[(self.posted_head + self.posted_count) % self.recv_slots] = slot
        self.posted_count += 1
        return 0

    cdef int free_slot(self, int slot) noexcept:
        self.send_state[slot] = FREE
        self.free_stack[self.free_count] = slot
        self.free_count += 1
        return 0

    cdef int unreserve(self, int slot) noexcept:
        """A reserved slot whose send() raised goes back to the pool."""
        if self.send_state[slot] == HELD:
            self.reserved -= 1
            self.free_slot(slot)
        return 0

    cdef int pin_pools(self) except -1:
        """MPI may still use this engine's pools (a request not known to be complete): never free them."""
        if not any(pool is self.send_pool for pool in _abandoned_send_pools):
            _abandoned_send_pools.append(self.send_pool)
        if not any(views is self.recv_views for views in _abandoned_recv_pools):
            _abandoned_recv_pools.append(self.recv_views)
        return 0

    cdef int receive_failed(self, int slot, int code) except -1:
        """The head receive completed with an error (it is inactive now): re-post it at the tail, raise."""
        cdef int source = (<int *>(self.status + self.source_offset))[0]
        (<int *>(self.status + self.error_offset))[0] = 0  # MPICH never writes it: no stale error later
        self.posted_head = (self.posted_head + 1) % self.recv_slots
        self.posted_count -= 1
        error = MPI.Exception(code)
        origin = f" from rank {source}" if 0 <= source < self.size else ""
        restart = self.start(self.recv_request[slot].handle)
        if restart == 0:
            self.posted[(self.posted_head + self.posted_count) % self.recv_slots] = slot
            self.posted_count += 1
        else:  # parked: posted again when another arrives
            self.unposted[self.unposted_count] = slot
            self.unposted_count += 1
        if error.Get_error_class() == MPI.ERR_TRUNCATE:
            raise MailRailError(
                f"a message longer than this rank's datagram_size ({self.slot_size} bytes) arrived{origin} "
                f"({error}): every rank of a rail must use the same datagram_size") from error
        raise MailRailError(f"receiving a message{origin} failed: {error}") from error

    cdef int send_failed(self, int slot, int code) except -1:
        """The send in slot *slot* completed with an error: the slot is free again; raise."""
        self.free_slot(slot)
        error = MPI.Exception(code)
        raise MailRailError(f"a send of {self.send_slot[slot].nbytes} bytes (send slot {slot}) failed: "
                            f"{error}") from error

    cdef int reclaim(self) except -1:
        """Reclaim completed sends, a few from the oldest (a slow one rotates to the back)."""
        cdef int budget = self.send_test_window, flag, slot, code
        cdef SendSlot *s
        cdef void *request
        while self.inflight_count and budget:
            slot = self.inflight[self.inflight_head]
            s = &self.send_slot[slot]
            request = <void *>s.persistent_request.handle if s.inflight_persistent else <void *>s.once_request.handle
            code = self.test(request, &flag, self.status)
            if code:  # it completed, with an error
                self.inflight_head = (self.inflight_head + 1) % self.send_slots
                self.inflight_count -= 1
                self.head_waits = 0
                self.send_failed(slot, code)
            if not flag:
                self.head_waits += 1
                if self.head_waits >= self.head_patience:  # a slow send must not pin the pool
                    self.head_waits = 0
                    self.inflight[(self.inflight_head + self.inflight_count) % self.send_slots] = slot
                    self.inflight_head = (self.inflight_head + 1) % self.send_slots
                return 0
            self.inflight_head = (self.inflight_head + 1) % self.send_slots
            self.inflight_count -= 1
            self.head_waits = 0
            self.free_slot(slot)
            budget -= 1
        return 0

    cdef void idle(self) noexcept:
        cdef timespec pause
        self.idle_calls += 1
        if self.idle_calls < self.idle_spins:
            return
        self.idle_calls = 0
        with nogil:
            if self.idle_sleep_ns > 0:
                pause.tv_sec = self.idle_sleep_ns // 1000000000
                pause.tv_nsec = self.idle_sleep_ns % 1000000000
                nanosleep(&pause, NULL)
            else:
                sched_yield()

    cdef long checked_int(self, object value, long upper, bint is_rank, object buf) except? -1:
        """A rank or byte count: exact ints in range fast, anything else through the Endpoint's checks
        (a refused value gives *buf* back to the pool if it is a reserved slot)."""
        cdef int overflow
        cdef long v
        if PyLong_CheckExact(value):
            v = PyLong_AsLongAndOverflow(value, &overflow)
            if not overflow and 0 <= v <= upper:
                return v
        try:
            return self.endpoint.checked_rank(value) if is_rank else self.endpoint.checked_size(value)
        except BaseException:
            try:
                found = self.send_pool.slot_of(buf)
            except BufferOwnershipError:  # not identifiable as a slot: nothing changes
                found = None
            if found is not None:
                self.unreserve(<int>found)
            raise

    cdef int slot_of(self, object buf) except -1:
        found = self.slot_by_id.get(PyLong_FromVoidPtr(<void *>buf))
        if found is not None and self.send_views[<Py_ssize_t>found] is buf:
            return found
        found = self.send_pool.slot_of(buf)  # a contiguous view at a slot's start, or None
        if found is None:
            raise BufferOwnershipError(
                f"the buffer passed to send() (type {type(buf).__name__}) was not reserved from this "
                f"MailRail's send pool: use reserve_send_buffer()")
        return found

    cdef int transmit(self, int dest, int slot, int nbytes, int tag) noexcept:
        """Start the send of *slot*; 0, or the MPI error code (then nothing is in flight for the slot)."""
        cdef SendSlot *s = &self.send_slot[slot]
        cdef char *buf = self.send_base + <Py_ssize_t>slot * self.slot_size
        cdef int code
        if tag != 0:  # piggybacked credits: a one-off send that leaves the slot's cache alone
            code = self.isend(buf, nbytes, self.byte, dest, tag, self.comm, s.once_request.handle)
            s.inflight_persistent = False
        elif s.dest == dest and s.nbytes == nbytes:
            # The second time a slot repeats (destination, size): persistent from then on.
            if not s.persistent:
                code = self.send_init(buf, nbytes, self.byte, dest, 0, self.comm, s.persistent_request.handle)
                if code:
                    return code
                s.persistent = True
            code = self.start(s.persistent_request.handle)
            s.inflight_persistent = True
        else:
            if s.persistent:
                s.persistent = False
                code = self.request_free(s.persistent_request.handle)
                if code:
                    return code
            s.dest = dest
            s.nbytes = nbytes
            code = self.isend(buf, nbytes, self.byte, dest, 0, self.comm, s.once_request.handle)
            s.inflight_persistent = False
        if code:
            return code
        self.inflight[(self.inflight_head + self.inflight_count) % self.send_slots] = slot
        self.inflight_count += 1
        return 0

    cdef int drain_deferred(self) except -1:
        """Send the queued sends the Endpoint finds credit for now."""
        cdef int dest, slot, nbytes, code
        for dest, slot, nbytes in self.endpoint_drain():
            if not 0 <= slot < self.send_slots or self.send_state[slot] != QUEUED:
                raise RuntimeError(f"the Endpoint drained send slot {slot}, which is not deferred")
            self.send_state[slot] = IN_FLIGHT
            self.deferred -= 1
            code = self.transmit(dest, slot, nbytes, <int>self.ledger.piggyback_for(dest))
            if code:
                self.send_failed(slot, code)
        return 0

    cdef int next_credit_message(self, int *source, int *count) except -1:
        """The oldest posted credit receive, if its message arrived: 1 with its source and count (the
        receive is re-posted), 0 if none arrived."""
        cdef int flag, code
        cdef void *request = self.credit_recv[self.credit_head].handle
        code = self.test(request, &flag, self.status)
        if flag and not code:
            code = (<int *>(self.status + self.error_offset))[0]
            (<int *>(self.status + self.error_offset))[0] = 0
        if code:  # it completed with an error: post it again, at the back of the ring
            self.credit_head = (self.credit_head + 1) % self.credit_receives
            self.start(request)
            error = MPI.Exception(code)
            raise MailRailError(f"receiving a credit message failed: {error}") from error
        if not flag:
            return 0
        source[0] = (<int *>(self.status + self.source_offset))[0]
        count[0] = (<int *>(self.status + self.tag_offset))[0]
        self.check(self.start(request))
        self.credit_head = (self.credit_head + 1) % self.credit_receives
        return 1

    cdef int poll_credits(self) except -1:
        """Apply every credit message that arrived, oldest posted receive first."""
        cdef int source, count
        while self.next_credit_message(&source, &count):
            self.credit_messages_received += 1
            self.ledger.credit_return(source, count)
            # Node credits change silently (any local rank may refill them): drains poll instead.
            if self.deferred and not self.ledger.node_mode:
                self.endpoint_mark_ready(source)
        return 0

    cdef int grow_credit_sends(self) except -1:
        cdef int capacity = 2 * self.credit_send_capacity if self.credit_send_capacity else 16, i
        cdef Request *ring = <Request *>PyMem_Calloc(capacity, sizeof(Request))
        if ring == NULL:
            raise MemoryError()
        for i in range(self.credit_send_count):
            ring[i] = self.credit_send[(self.credit_send_head + i) % self.credit_send_capacity]
        PyMem_Free(self.credit_send)
        self.credit_send = ring
        self.credit_send_head = 0
        self.credit_send_capacity = capacity
        return 0

    cdef int return_credits(self, int target, long long count) except -1:
        """Send *count* credits back to *target*: zero-byte messages, the count in the tag (in pieces
        above tag_ub)."""
        cdef long long part
        cdef int flag
        cdef Request *request
        self.credit_messages_sent += 1
        self.credits_returned += count
        while count > 0:
            part = count if count < self.tag_ub else self.tag_ub
            if self.credit_send_count == self.credit_send_capacity:
                self.grow_credit_sends()
            request = &self.credit_send[(self.credit_send_head + self.credit_send_count) %
                                        self.credit_send_capacity]
            self.check(self.isend(credit_buffer, 0, self.byte, target, <int>part, self.credit_comm, request.handle))
            self.credit_send_count += 1
            count -= part
        cdef int code
        while self.credit_send_count:  # forget completed returns, oldest first
            code = self.test(self.credit_send[self.credit_send_head].handle, &flag, self.status)
            if not flag and not code:
                break
            self.credit_send_head = (self.credit_send_head + 1) % self.credit_send_capacity
            self.credit_send_count -= 1
            self.check(code)  # completed with an error: forgotten, then raised
        return 0

    cdef object payload_view(self, int slot, Py_ssize_t nbytes):
        """The read-only view of *nbytes* bytes in receive slot *slot* (cached per slot and size)."""
        full = self.recv_views[slot]
        if nbytes == self.slot_size:
            return full
        if self.cached_nbytes[slot] != nbytes or self.recv_cache[slot] is None:
            self.recv_cache[slot] = full[:nbytes]
            self.cached_nbytes[slot] = nbytes
        return self.recv_cache[slot]

    cdef int raise_stopped(self, str call) except -1:
        raise FinalizedError(f"{call} called after finalize()")

    # -- the transport interface: the four per-message calls ------------------

    def reserve_send_buffer(self):
        """A writable ``datagram_size``-byte view from the send pool, or None (backpressure)."""
        if self.stopped:
            self.raise_stopped("reserve_send_buffer()")
        if not self.free_count and self.inflight_count:
            self.reclaim()
        if not self.free_count:
            self.reserve_failures += 1
            return None
        self.free_count -= 1
        cdef int slot = self.free_stack[self.free_count]
        self.send_state[slot] = HELD
        self.reserved += 1
        return self.send_views[slot]

    def send(self, dest, buf, nbytes):
        """Send the first *nbytes* of *buf* to rank *dest*; without credit the send is deferred."""
        if self.stopped:
            raise FinalizedError(f"send(dest={dest!r}) called after finalize()")
        # Checked in the Python transport's order; from the first check on, a send() that raises gives a
        # reserved buffer back to the pool.
        cdef long rank = self.checked_int(dest, self.size - 1, True, buf)
        cdef long size = self.checked_int(nbytes, self.slot_size, False, buf)
        cdef int slot = self.slot_of(buf)
        if self.send_state[slot] != HELD:
            raise BufferOwnershipError(
                f"send buffer slot {slot} is {STATE_NAMES[self.send_state[slot]]}, not reserved: a buffer is "
                f"sent once per reserve_send_buffer()")
        self.idle_calls = 0  # a rank that sends is busy, not idle
        cdef int tag = 0, code
        if self.ledger is not None:
            if not self.deferred and self.ledger.try_take(<int>rank):
                tag = <int>self.ledger.piggyback_for(<int>rank)
            elif self.admit(<int>rank, slot, <int>size):  # FIFO per destination: the Endpoint decides
                tag = <int>self.ledger.piggyback_for(<int>rank)
            else:
                self.send_state[slot] = QUEUED
                self.reserved -= 1
                self.deferred += 1
                self.messages_sent += 1
                self.bytes_sent += size
                return
        code = self.transmit(<int>rank, slot, <int>size, tag)
        if code:
            self.unreserve(slot)
            error = MPI.Exception(code)
            raise MailRailError(f"send(dest={rank}, nbytes={size}) failed: {error}") from error
        self.send_state[slot] = IN_FLIGHT
        self.reserved -= 1
        self.messages_sent += 1
        self.bytes_sent += size

    cdef int admit(self, int rank, int slot, int size) except -1:
        """The Endpoint's decision on a send without credit at hand (a refusal gives the slot back)."""
        try:
            return self.endpoint_admit(rank, slot, size)
        except BaseException:
            self.unreserve(slot)
            raise

    def receive(self):
        """Make progress, then return one arrived :class:`Message` (arrival order, any source) or None."""
        if self.stopped:
            self.raise_stopped("receive()")
        if self.inflight_count:
            self.reclaim()
        # Credit messages are polled every few calls (every MPI test drives progress and contends for
        # the shared-memory queues), and on every call while sends wait for credit.
        if self.ledger is not None:
            self.progress_calls += 1
            if self.deferred or self.progress_calls >= self.progress_interval:
                self.progress_calls = 0
                self.poll_credits()
                if self.deferred:
                    self.drain_deferred()
        cdef int slot, flag, count, source, brought, code
        cdef Message message
        if self.posted_count:
            slot = self.posted[self.posted_head]
            code = self.test(self.recv_request[slot].handle, &flag, self.status)
            if code or (flag and (<int *>(self.status + self.error_offset))[0]):
                # Open MPI may report a truncated receive in the status alone
                self.receive_failed(slot, code or (<int *>(self.status + self.error_offset))[0])
            if flag:
                self.posted_head = (self.posted_head + 1) % self.recv_slots
                self.posted_count -= 1
                source = (<int *>(self.status + self.source_offset))[0]
                self.check(self.get_count(self.status, self.byte, &count))
                self.messages_received += 1
                self.bytes_received += count
                if self.ledger is not None:
                    brought = self.ledger.arrival(source, (<int *>(self.status + self.tag_offset))[0])
                    if brought and self.deferred:
                        self.endpoint_mark_ready(source)
                self.held += 1
                if self.held > self.held_high_water:
                    self.held_high_water = self.held
                if self.unposted_count:  # fewer posted receives than slots: post a parked one
                    self.unposted_count -= 1
                    self.post_receive(self.unposted[self.unposted_count])
                self.idle_calls = 0
                message = Message.__new__(Message)
                message.source = source
                message.nbytes = count
                message.data = self.payload_view(slot, count)
                message._slot = slot
                message._owner = self
                return message
        self.idle()
        return None

    def release_receive_buffer(self, message):
        """Give *message*'s slot back: re-post its receive; return credits when due."""
        if self.stopped:
            self.raise_stopped("release_receive_buffer()")
        if type(message) is not Message or (<Message>message)._owner is not self:
            raise ReleaseError(f"{message!r} is not a message received from this MailRail")
        cdef Message m = <Message>message
        if m._slot < 0:
            raise ReleaseError(f"{message!r} was already released")
        cdef int slot = <int>m._slot
        m._slot = -1
        self.held -= 1
        self.messages_released += 1
        if self.posted_count < self.posted_limit:
            self.post_receive(slot)
        else:
            self.unposted[self.unposted_count] = slot
            self.unposted_count += 1
        cdef long long count
        if self.ledger is not None:
            count = self.ledger.release(m.source)
            if count:
                self.return_credits(m.source, count)

    # -- the transport interface: progress, shutdown, counters ----------------

    @property
    def name(self):
        """``"compiled"``."""
        return "compiled"

    def pending_sends(self):
        """Sends deferred or in flight, and send buffers reserved but not sent."""
        return self.inflight_count + self.deferred + self.reserved

    def reclaim_sends(self):
        """Reclaim completed sends (a few, oldest first); return how many are still in flight."""
        self.reclaim()
        return self.inflight_count

    def stop(self):
        """Refuse the application's calls from now on, and forget the deferred sends (the Endpoint
        dropped and counted them)."""
        self.stopped = True
        cdef int slot
        for slot in range(self.send_slots):
            if self.send_state[slot] == QUEUED:
                self.send_state[slot] = FREE
        self.deferred = 0

    def discard_arrivals(self):
        """Re-post arrived messages without handing them out, drop arrived credit messages; return how
        many payloads were discarded."""
        cdef long count = 0
        cdef int flag, slot, source, credits, code
        while self.posted_count:
            slot = self.posted[self.posted_head]
            code = self.test(self.recv_request[slot].handle, &flag, self.status)
            if code or (flag and (<int *>(self.status + self.error_offset))[0]):
                self.receive_failed(slot, code or (<int *>(self.status + self.error_offset))[0])
            if not flag:
                break
            self.posted_head = (self.posted_head + 1) % self.recv_slots
            self.posted_count -= 1
            self.post_receive(slot)
            count += 1
        if self.credit_receives_made and not self.credit_receives_cancelled:
            while self.next_credit_message(&source, &credits):
                pass
        return count

    def cancel_receives(self):
        """Cancel every posted receive; return how many payload receives had matched a message.

        Goes on past MPI errors: every receive is cancelled and completed (or its pool kept alive),
        then the first error is raised."""
        cdef ErrorLog log = ErrorLog()
        cdef long matched = self.cancel_all_receives(log)
        log.raise_first()
        return matched

    cdef long cancel_all_receives(self, ErrorLog log) except -1:
        cdef long matched = 0
        cdef int cancelled, i
        cdef void *request
        while self.posted_count:
            request = self.recv_request[self.posted[self.posted_head]].handle
            self.posted_head = (self.posted_head + 1) % self.recv_slots
            self.posted_count -= 1
            log.note(self.cancel(request), "cancel a posted receive")
            if log.note(self.wait(request, self.status), "complete a cancelled receive"):
                self.pin_pools()  # not known to be complete: MPI may still write into its slot
            elif (log.note(self.test_cancelled(self.status, &cancelled), "test a cancelled receive") == 0 and
                    not cancelled and (<int *>(self.status + self.source_offset))[0] != self.any_source):
                matched += 1
        if not self.credit_receives_cancelled:  # zero-byte receives: they write into no pool
            for i in range(self.credit_receives_made):
                request = self.credit_recv[i].handle
                log.note(self.cancel(request), "cancel a credit receive")
                log.note(self.wait(request, self.status), "complete a cancelled credit receive")
            self.credit_receives_cancelled = True
        return matched

    def close(self):
        """Free every MPI request (receives cancelled and sends completed first).

        Goes on past MPI errors, then raises the first."""
        if self.inflight_count:
            raise RuntimeError(f"close() with {self.inflight_count} send(s) in flight")
        if self.posted_count:
            raise RuntimeError(f"close() with {self.posted_count} receive(s) posted: cancel_receives() first")
        cdef ErrorLog log = ErrorLog()
        self.closed = True
        _live_engines.discard(self)
        self.release_requests(log, True)
        log.raise_first()

    cdef int release_requests(self, ErrorLog log, bint wait_credit_sends=False) except -1:
        """Release what exists of the requests, in order, going on past MPI errors (noted in *log*):
        posted receives cancelled and completed, credit returns completed (*wait_credit_sends*) or
        left to complete, then every inactive persistent request freed.  Sends still in flight are
        the caller's (abandon keeps their pool).  Safe whatever step of construction failed."""
        cdef int slot
        cdef SendSlot *s
        self.cancel_all_receives(log)
        while self.credit_send_count:  # zero-byte sends of a static buffer
            if wait_credit_sends:
                log.note(self.wait(self.credit_send[self.credit_send_head].handle, self.status),
                         "complete a credit return")
            else:  # a peer that left may never take it: MPI frees it when it completes
                log.note(self.request_free(self.credit_send[self.credit_send_head].handle), "free a credit return")
            self.credit_send_head = (self.credit_send_head + 1) % self.credit_send_capacity
            self.credit_send_count -= 1
        if self.send_slot != NULL:
            for slot in range(self.send_slots):
                s = &self.send_slot[slot]
                if s.persistent:
                    s.persistent = False
                    log.note(self.request_free(s.persistent_request.handle), "free a persistent send")
                s.dest = -1
        for slot in range(self.receives_made):
            log.note(self.request_free(self.recv_request[slot].handle), "free a receive")
        self.receives_made = 0
        for slot in range(self.credit_receives_made):
            log.note(self.request_free(self.credit_recv[slot].handle), "free a credit receive")
        self.credit_receives_made = 0
        return 0

    def abandon(self):
        """Local clean-up of a transport that is collected without finalize(): cancel and free the
        receives (MPI must not write into freed pools); sends still in flight keep their pool alive.

        Never blocks on a peer; goes on past MPI errors, then raises the first."""
        cdef int slot, i
        if self.closed:
            return
        self.stopped = self.closed = True
        _live_engines.discard(self)
        if MPI.Is_finalized() or not MPI.Is_initialized():
            if self.inflight_count or self.posted_count:  # MPI is gone: nothing writes any more, but be safe
                self.pin_pools()
            return
        cdef ErrorLog log = ErrorLog()
        if self.inflight_count:  # they complete with their sends: keep their requests and the pool
            self.pin_pools()
            for i in range(self.inflight_count):
                slot = self.inflight[(self.inflight_head + i) % self.send_slots]
                if self.send_slot[slot].inflight_persistent:
                    self.send_slot[slot].persistent = False
            self.inflight_count = 0
        self.release_requests(log)
        log.raise_first()

    def counters(self):
        """The transport's counters (see :data:`mailrail.counters.TRANSPORT_COUNTERS`)."""
        values = {"messages_sent": self.messages_sent, "bytes_sent": self.bytes_sent,
                  "messages_received": self.messages_received, "bytes_received": self.bytes_received,
                  "messages_released": self.messages_released, "reserve_failures": self.reserve_failures,
                  "held_high_water": self.held_high_water, "credit_messages_sent": self.credit_messages_sent,
                  "credit_messages_received": self.credit_messages_received,
                  "credits_returned": self.credits_returned, "send_buffers_reserved": self.reserved}
        return {name: values[name] for name in TRANSPORT_COUNTERS}
