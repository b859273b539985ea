# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False, binding=False
"""mailrail.transport._compiled: the compiled transport (its Python half is :mod:`mailrail.transport.compiled`).

The same transport as :class:`mailrail.transport.python.PythonTransport`: a ring
of persistent wildcard receives polled at its head, per send slot a one-off and
a persistent send request, in-flight sends reclaimed a few at a time from the
oldest, rings of zero-byte credit receives and credit messages sent.  Four
interpreter calls per message cost more than MPI's own work; here the four
calls are C functions.

It keeps only MPI handles and the credit request rings.  Every protocol
decision and all protocol state (send-slot states, the in-flight order, which
MPI call a send leaves by, deferral, credits, held messages, counters, which
receive slots are posted or parked, the order of the progress steps, the idle
policy) belong to the compiled :class:`mailrail._protocol.Endpoint`
(``protocol.py`` compiled method for method), whose ``cdef`` methods it calls
without a Python frame; its receive step calls back this transport's
:class:`~mailrail._protocol.ProgressIO` methods (C virtual calls) for each MPI
call.

No MPI header is needed: the MPI functions are those of the library mpi4py
loaded, resolved at run time by :mod:`mailrail.transport.compiled` and passed in
as addresses, with that library's layout facts (sizes of ``MPI_Status`` and
``MPI_Request``, offsets of ``MPI_SOURCE`` and ``MPI_TAG``, handle values).
Handles travel as ``intptr_t``: MPICH's int handles and Open MPI's pointer
handles both fit.

It never crashes the process: a failed construction step releases what
exists; an MPI error is a Python exception that leaves the transport usable; the
clean-up calls go on past MPI errors and raise the first once everything is
released; a pool that MPI may still use is never freed (docs/architecture.md).
"""

cimport cython
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from libc.limits cimport LONG_MAX
from libc.stdint cimport INT32_MAX, intptr_t
from posix.time cimport nanosleep, timespec

from mailrail._protocol cimport CREATE, ISEND_TAGGED, NO_SLOT, REPLACE, START, Endpoint, Message, ProgressIO

import atexit
import weakref

from mpi4py import MPI

from mailrail.errors import MailRailError
from mailrail.protocol import completion_error, credit_receive_error, send_error  # the texts, written once

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

ctypedef struct Request:
    unsigned char handle[REQUEST_BYTES]

ctypedef struct SendRequests:
    Request persistent_request  # the slot's persistent send, while the Endpoint says it has one
    Request once_request        # a one-off Isend (a new stream, or credits piggybacked in the tag)
    bint inflight_persistent    # the send in flight is the persistent one
    int nbytes                  # the size of the send in flight (for its error message)

cdef char credit_buffer[1]  # credit messages carry no payload (their meaning is the tag)

#: Pools of abandoned transports that MPI may still read (sends in flight) or write (a receive whose
#: cancellation failed): kept alive until the process ends rather than freed under MPI (see abandon()).
_abandoned_send_pools = []
_abandoned_recv_pools = []

#: Transports not yet closed: abandoned before MPI_Finalize (mpi4py finalizes at exit, after the
#: atexit handlers registered later, such as this module's), so that no receive is still posted then.
_live_transports = weakref.WeakSet()


def _abandon_live_transports():
    for transport in list(_live_transports):
        try:
            transport.abandon()
        except Exception:  # one transport's MPI failure must not keep the others posted
            pass


atexit.register(_abandon_live_transports)


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
cdef class CompiledTransport(ProgressIO):
    """The compiled transport of one MailRail (built by :func:`mailrail.transport.compiled.make`).

    Implements :class:`mailrail.transport.base.Transport` for a compiled :class:`mailrail._protocol.Endpoint`.
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
    cdef intptr_t comm, credit_comm, byte
    cdef int any_source, any_tag, source_offset, tag_offset, error_offset
    cdef unsigned char status[STATUS_BYTES]
    # the protocol
    cdef Endpoint endpoint
    # Python objects
    cdef list send_views, recv_views
    cdef object send_pool
    # pools
    cdef char *send_base
    cdef char *recv_base
    cdef int slot_size, send_slots, recv_slots
    cdef list recv_cache              # per receive slot: a view of cached_nbytes[slot] bytes, or None
    cdef Py_ssize_t *cached_nbytes
    # send side: per slot its requests; reclaiming tests a window of the oldest
    cdef SendRequests *send_requests
    cdef int send_test_window
    # receive side: a persistent receive per slot (which are posted, in what order, is the Endpoint's)
    cdef Request *recv_request
    cdef int receives_made
    cdef long idle_sleep_ns
    cdef bint closed
    # credit modes (credit_comm 0 when unconstrained)
    cdef Request *credit_recv         # ring of posted zero-byte receives for credit messages
    cdef int credit_receives, credit_head, credit_receives_made
    cdef bint credit_receives_cancelled
    cdef Request *credit_send         # ring of zero-byte credit messages in flight, grown on demand
    cdef int credit_send_head, credit_send_count, credit_send_capacity

    def __init__(self, *, mpi, intptr_t comm, intptr_t credit_comm, send_pool, recv_pool, list recv_views,
                 int posted_receives, Endpoint endpoint, tuning):
        """*mpi*: the resolved library (:class:`mailrail.transport.compiled.MPILibrary`); *comm*,
        *credit_comm*: handles of the payload and credit communicators (credit_comm 0: none, unconstrained);
        *send_pool*, *recv_pool*: :class:`~mailrail.pool.SlotPool`; *recv_views*: the read-only views handed
        out per receive slot; *endpoint*: the compiled :class:`mailrail._protocol.Endpoint` over *send_pool*;
        *tuning*: :class:`~mailrail.transport.base.Tuning` (send_test_window, credit_receives and
        idle_sleep_ns are the transport's; the rest are the Endpoint's)."""
        if self.send_views is not None or self.closed:
            raise RuntimeError("CompiledTransport is initialized once")
        try:
            self.bind_tuning(tuning)  # plain values first: a bad one reaches no C field
            self.bind_mpi(mpi, comm, credit_comm)
            self.bind_pools(send_pool, recv_pool, recv_views, posted_receives)
            self.bind_endpoint(endpoint, posted_receives)
            self.allocate()
            self.create_receives()  # from here on MPI requests exist
            if self.credit_comm:
                self.create_credit_receives()
        except BaseException:
            # Release exactly what exists (every array pointer may be NULL, every count 0); the
            # first failure is the one to report.
            self.closed = True
            self.release_requests(ErrorLog())
            raise
        _live_transports.add(self)

    # -- construction, step by step ------------------------------------------

    cdef int bind_tuning(self, tuning) except -1:
        cdef dict bounds = {"send_test_window": (1, INT32_MAX), "credit_receives": (1, 1 << 20),
                            "idle_sleep_ns": (0, LONG_MAX)}
        for name, (low, high) in bounds.items():
            value = getattr(tuning, name)
            if type(value) is not int or not low <= value <= high:
                raise ValueError(f"tuning {name}={value!r} is out of range {low}..{high} ({tuning!r})")
        self.send_test_window = tuning.send_test_window
        self.idle_sleep_ns = tuning.idle_sleep_ns
        self.credit_receives = tuning.credit_receives
        return 0

    cdef int bind_mpi(self, mpi, intptr_t comm, intptr_t credit_comm) except -1:
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
        self.credit_comm = credit_comm
        return 0

    cdef int bind_pools(self, send_pool, recv_pool, list recv_views, int posted_receives) except -1:
        # posted_receives is the Endpoint's rule (bind_endpoint checks they agree); here only its range
        if send_pool.slot_size != recv_pool.slot_size or not 1 <= send_pool.slot_size <= INT32_MAX:
            raise ValueError(f"send and receive slots must have one size in 1..{INT32_MAX} bytes, got "
                             f"{send_pool.slot_size} and {recv_pool.slot_size}")
        if len(recv_views) != recv_pool.slots or not 1 <= posted_receives <= recv_pool.slots:
            raise ValueError(f"need a view per receive slot and 1 <= posted_receives ({posted_receives}) <= "
                             f"receive slots ({recv_pool.slots})")
        self.send_pool = send_pool
        self.send_views = list(send_pool.views)
        self.send_base = <char *><size_t>send_pool.slab.ctypes.data
        self.recv_views = recv_views
        self.recv_base = <char *><size_t>recv_pool.slab.ctypes.data
        self.recv_cache = [None] * recv_pool.slots
        self.slot_size = send_pool.slot_size
        self.send_slots, self.recv_slots = send_pool.slots, recv_pool.slots
        return 0

    cdef int bind_endpoint(self, Endpoint endpoint, int posted_receives) except -1:
        if endpoint is None or endpoint.send_pool is not self.send_pool:
            raise ValueError("the compiled transport needs the compiled Endpoint of its send pool")
        if (endpoint.recv_slots != self.recv_slots or endpoint.posted_receives != posted_receives
                or endpoint.posted_count):
            raise ValueError("the Endpoint's receive slots and posted receives must be the transport's, none posted")
        if endpoint.has_credits != (self.credit_comm != 0):
            raise ValueError(f"{endpoint.flow.name} flow control needs "
                             f"{'a credit communicator' if endpoint.has_credits else 'no credit communicator'}")
        self.endpoint = endpoint
        return 0

    cdef int allocate(self) except -1:
        self.send_requests = <SendRequests *>PyMem_Calloc(self.send_slots, sizeof(SendRequests))
        self.recv_request = <Request *>PyMem_Calloc(self.recv_slots, sizeof(Request))
        self.cached_nbytes = <Py_ssize_t *>PyMem_Calloc(self.recv_slots, sizeof(Py_ssize_t))
        if self.credit_comm:
            self.credit_recv = <Request *>PyMem_Calloc(self.credit_receives, sizeof(Request))
        if (not self.send_requests or not self.recv_request or
                not self.cached_nbytes or (self.credit_comm and not self.credit_recv)):
            raise MemoryError()
        return 0

    cdef int create_receives(self) except -1:
        """One persistent wildcard receive per slot; those the Endpoint says started, the rest parked."""
        cdef int slot
        for slot in range(self.recv_slots):
            self.check(self.recv_init(self.recv_base + <Py_ssize_t>slot * self.slot_size, self.slot_size,
                                      self.byte, self.any_source, self.any_tag, self.comm,
                                      self.recv_request[slot].handle))
            self.receives_made = slot + 1
        slot = self.endpoint.c_post_parked()
        while slot != NO_SLOT:
            self.post_receive(slot)
            slot = self.endpoint.c_post_parked()
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
        PyMem_Free(self.send_requests)
        PyMem_Free(self.recv_request)

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
        """Start *slot*'s receive, which the Endpoint put at the ring's back (parked again if MPI fails)."""
        cdef int code = self.start(self.recv_request[slot].handle)
        if code:
            self.endpoint.c_post_failed(slot)
            mpi_failed(code)
        return 0

    cdef int pin_pools(self) except -1:
        """MPI may still use this transport's pools (a request not known to be complete): never free them."""
        if not any(pool is self.send_pool for pool in _abandoned_send_pools):
            _abandoned_send_pools.append(self.send_pool)
        if not any(views is self.recv_views for views in _abandoned_recv_pools):
            _abandoned_recv_pools.append(self.recv_views)
        return 0

    cdef int receive_failed(self, int slot, int code) except -1:
        """The head receive completed with an error (it is inactive now): re-post it at the tail, raise."""
        cdef int source = (<int *>(self.status + self.source_offset))[0]
        (<int *>(self.status + self.error_offset))[0] = 0  # MPICH never writes it: no stale error later
        self.endpoint.c_head_reposted()
        error = MPI.Exception(code)
        restart = self.start(self.recv_request[slot].handle)
        if restart != 0:
            # Open MPI 4 frees a persistent request that completed with an error and leaves
            # MPI_REQUEST_NULL in its place (Open MPI 5 and MPICH keep it inactive): make it again.
            restart = self.recv_init(self.recv_base + <Py_ssize_t>slot * self.slot_size, self.slot_size,
                                     self.byte, self.any_source, self.any_tag, self.comm,
                                     self.recv_request[slot].handle)
            if restart == 0:
                restart = self.start(self.recv_request[slot].handle)
        if restart != 0:  # parked: posted again when another arrives
            self.endpoint.c_post_failed(slot)
        raise self.endpoint.receive_failed(source, error.Get_error_class() == MPI.ERR_TRUNCATE, str(error)) from error

    cdef int reclaim(self) except -1:
        """(ProgressIO) Reclaim completed sends, a few from the oldest (the Endpoint moves a slow one back)."""
        cdef Endpoint endpoint = self.endpoint
        cdef int budget = self.send_test_window, flag, slot, code
        cdef SendRequests *s
        cdef void *request
        while endpoint.ring_count and budget:
            slot = endpoint.c_oldest_in_flight()
            s = &self.send_requests[slot]
            request = <void *>s.persistent_request.handle if s.inflight_persistent else <void *>s.once_request.handle
            code = self.test(request, &flag, self.status)
            if code:  # it completed, with an error
                endpoint.c_oldest_completed()
                error = MPI.Exception(code)
                raise completion_error(slot, s.nbytes, str(error)) from error
            if not flag:
                endpoint.c_oldest_still_in_flight()
                return 0
            endpoint.c_oldest_completed()
            budget -= 1
        return 0

    cdef int idle(self) except -1:
        """(ProgressIO) Yield the core, or sleep."""
        cdef timespec pause
        with nogil:
            if self.idle_sleep_ns > 0:
                pause.tv_sec = self.idle_sleep_ns // 1000000000
                pause.tv_nsec = self.idle_sleep_ns % 1000000000
                nanosleep(&pause, NULL)
            else:
                sched_yield()
        return 0

    cdef int start_send(self, int dest, int nbytes, int slot, long long tag, int action, bint deferred) except -1:
        """(ProgressIO) Start the send the Endpoint decided; an MPI failure gives it back to the Endpoint and
        raises (*deferred*: it waited for credit)."""
        cdef int code = self.transmit(slot, dest, nbytes, tag, action)
        if code:
            self.endpoint.c_transmit_failed(slot, nbytes, action)
            error = MPI.Exception(code)
            raise send_error(dest, nbytes, str(error), deferred=deferred) from error
        return 0

    cdef Py_ssize_t test_receive(self, int slot) except -2:
        """(ProgressIO) The head receive (*slot*): its size if it completed (arrival_* set), else -1; one that
        completed with an error is re-posted at the back, then raised."""
        cdef int flag, count
        cdef int code = self.test(self.recv_request[slot].handle, &flag, self.status)
        if code or (flag and (<int *>(self.status + self.error_offset))[0]):
            # Open MPI may report a truncated receive in the status alone
            self.receive_failed(slot, code or (<int *>(self.status + self.error_offset))[0])
        if not flag:
            return -1
        self.check(self.get_count(self.status, self.byte, &count))
        self.arrival_source = (<int *>(self.status + self.source_offset))[0]
        self.arrival_tag = (<int *>(self.status + self.tag_offset))[0]
        return count

    cdef int transmit(self, int slot, int dest, int nbytes, long long tag, int action) noexcept:
        """Start *slot*'s send by the MPI call the Endpoint chose; 0, or the MPI error code (then nothing
        of it is in flight, and no request is left that the Endpoint does not know of)."""
        cdef SendRequests *s = &self.send_requests[slot]
        cdef char *buf = self.send_base + <Py_ssize_t>slot * self.slot_size
        cdef int code
        s.nbytes = nbytes
        if action == START:  # the slot's persistent send for this (destination, size)
            s.inflight_persistent = True
            return self.start(s.persistent_request.handle)
        if action == CREATE:  # the stream's second send: persistent from now on
            s.inflight_persistent = True
            code = self.send_init(buf, nbytes, self.byte, dest, 0, self.comm, s.persistent_request.handle)
            if code:
                return code
            code = self.start(s.persistent_request.handle)
            if code:  # the Endpoint forgets the persistent send: free it
                self.request_free(s.persistent_request.handle)
            return code
        if action == REPLACE:  # a new stream: the old persistent send goes
            code = self.request_free(s.persistent_request.handle)
            if code:
                return code
        # ISEND_TAGGED (credits piggybacked in the tag), ISEND_NEW or REPLACE: a one-off send
        s.inflight_persistent = False
        return self.isend(buf, nbytes, self.byte, dest, <int>tag if action == ISEND_TAGGED else 0, self.comm,
                          s.once_request.handle)

    cdef int next_credit_arrival(self, int *source, int *tag) except -1:
        """The oldest posted credit receive, if its message arrived: 1 with its source and tag (the
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
            raise credit_receive_error(str(error)) from error
        if not flag:
            return 0
        source[0] = (<int *>(self.status + self.source_offset))[0]
        tag[0] = (<int *>(self.status + self.tag_offset))[0]
        self.check(self.start(request))
        self.credit_head = (self.credit_head + 1) % self.credit_receives
        return 1

    cdef int poll_credits(self) except -1:
        """(ProgressIO) Hand every credit message that arrived to the Endpoint, oldest posted receive first."""
        cdef int source, tag
        while self.next_credit_arrival(&source, &tag):
            self.endpoint.c_credits_arrived(source, tag)
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

    cdef int send_credit_messages(self) except -1:
        """(ProgressIO) Send the credit messages the Endpoint has due: zero-byte messages, their meaning in the tag (the
        Endpoint's, at most tag_ub)."""
        cdef int target, flag, code
        cdef long long tag
        cdef Request *request
        while self.endpoint.c_next_credit_message(&target, &tag):
            if self.credit_send_count == self.credit_send_capacity:
                self.grow_credit_sends()
            request = &self.credit_send[(self.credit_send_head + self.credit_send_count) %
                                        self.credit_send_capacity]
            self.check(self.isend(credit_buffer, 0, self.byte, target, <int>tag, self.credit_comm, request.handle))
            self.credit_send_count += 1
        while self.credit_send_count:  # forget completed credit messages, oldest first
            code = self.test(self.credit_send[self.credit_send_head].handle, &flag, self.status)
            if not flag and not code:
                break
            self.credit_send_head = (self.credit_send_head + 1) % self.credit_send_capacity
            self.credit_send_count -= 1
            self.check(code)  # completed with an error: forgotten, then raised
        return 0

    cdef object payload(self, int slot, Py_ssize_t nbytes):
        """(ProgressIO) The read-only view of *nbytes* bytes in receive slot *slot* (cached per slot and size)."""
        full = self.recv_views[slot]
        if nbytes == self.slot_size:
            return full
        if self.cached_nbytes[slot] != nbytes or self.recv_cache[slot] is None:
            self.recv_cache[slot] = full[:nbytes]
            self.cached_nbytes[slot] = nbytes
        return self.recv_cache[slot]

    # -- the transport interface: the four per-message calls ------------------

    @property
    def name(self):
        """``"compiled"``."""
        return "compiled"

    def reserve_send_buffer(self):
        """A writable ``datagram_size``-byte view from the send pool, or None (backpressure)."""
        cdef Endpoint endpoint = self.endpoint
        if endpoint.stopped:
            endpoint.check_open("reserve_send_buffer()")
        if not endpoint.free_count and endpoint.ring_count:
            self.reclaim()
        cdef int slot = endpoint.c_reserve()
        return None if slot < 0 else self.send_views[slot]

    def send(self, dest, buf, nbytes):
        """Hand *buf* to the Endpoint for *dest*; start its send if it leaves now (else it is deferred)."""
        cdef Endpoint endpoint = self.endpoint
        cdef int slot = endpoint.c_submit(dest, buf, nbytes)
        if slot < 0:
            if endpoint.c_credits_due():  # deferred: adaptive mode asks for credit
                self.send_credit_messages()
            return
        self.start_send(endpoint.out_dest, endpoint.out_nbytes, slot, endpoint.out_tag, endpoint.out_action, False)

    def receive(self):
        """Make progress (reclaim sends, credits, deferred sends), then return one arrived message or None: the
        Endpoint's receive step, calling this transport's ProgressIO methods."""
        return self.endpoint.c_receive(self)

    def release_receive_buffer(self, message):
        """Give *message*'s slot back: re-post its receive if the Endpoint says so; send the credit messages due."""
        cdef Endpoint endpoint = self.endpoint
        cdef int slot = endpoint.c_release(message)
        if slot != NO_SLOT:
            self.post_receive(slot)
        if endpoint.c_credits_due():
            self.send_credit_messages()

    # -- the transport interface: progress and shutdown ------------------------

    def reclaim_sends(self):
        """Reclaim completed sends (a few, oldest first); return how many are still in flight."""
        self.reclaim()
        return self.endpoint.ring_count

    def discard_arrivals(self):
        """Re-post arrived messages without handing them out, drop arrived credit messages; return how
        many payloads were discarded."""
        cdef long count = 0
        cdef int slot = self.endpoint.c_head_receive(), source, tag
        while slot != NO_SLOT and self.test_receive(slot) >= 0:
            self.endpoint.c_head_reposted()
            self.post_receive(slot)
            count += 1
            slot = self.endpoint.c_head_receive()
        if self.credit_receives_made and not self.credit_receives_cancelled:
            while self.next_credit_arrival(&source, &tag):
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
        cdef int cancelled, i, slot
        cdef void *request
        for slot in (self.endpoint.take_posted() if self.endpoint is not None else ()):
            request = self.recv_request[slot].handle
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
        """Free every MPI request (receives cancelled and sends completed first); the Endpoint is stopped.

        Goes on past MPI errors, then raises the first."""
        if self.closed:
            return
        if self.endpoint.ring_count:
            raise RuntimeError(f"close() with {self.endpoint.ring_count} send(s) in flight")
        if self.endpoint.posted_count:
            raise RuntimeError(f"close() with {self.endpoint.posted_count} receive(s) posted: cancel_receives() first")
        cdef ErrorLog log = ErrorLog()
        self.closed = True
        _live_transports.discard(self)
        if not self.endpoint.stopped:  # the requests are gone: no call may reach them any more
            self.endpoint.stop()
        self.release_requests(log, True)
        log.raise_first()

    cdef int release_requests(self, ErrorLog log, bint wait_credit_sends=False) except -1:
        """Release what exists of the requests, in order, going on past MPI errors (noted in *log*):
        posted receives cancelled and completed, credit messages sent completed (*wait_credit_sends*) or
        left to complete, then every inactive persistent request freed.  Sends still in flight are
        the caller's (abandon keeps their pool).  Safe whatever step of construction failed."""
        cdef int slot
        self.cancel_all_receives(log)
        while self.credit_send_count:  # zero-byte sends of a static buffer
            if wait_credit_sends:
                log.note(self.wait(self.credit_send[self.credit_send_head].handle, self.status),
                         "complete a credit message")
            else:  # a peer that left may never take it: MPI frees it when it completes
                log.note(self.request_free(self.credit_send[self.credit_send_head].handle), "free a credit message")
            self.credit_send_head = (self.credit_send_head + 1) % self.credit_send_capacity
            self.credit_send_count -= 1
        if self.send_requests != NULL and self.endpoint is not None:
            for slot in range(self.send_slots):
                if self.endpoint.c_has_persistent(slot):
                    log.note(self.request_free(self.send_requests[slot].persistent_request.handle),
                             "free a persistent send")
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
        if self.closed:
            return
        self.closed = True
        _live_transports.discard(self)
        cdef Endpoint endpoint = self.endpoint
        if not endpoint.stopped:  # the requests go: no call may reach them any more
            endpoint.stop()
        if MPI.Is_finalized() or not MPI.Is_initialized():
            if endpoint.ring_count or endpoint.posted_count:  # MPI is gone: nothing writes any more, but be safe
                self.pin_pools()
            return
        cdef ErrorLog log = ErrorLog()
        cdef int i, slot
        if endpoint.ring_count:  # they complete with their sends: keep their requests and the pool
            self.pin_pools()
            for i in range(endpoint.ring_count):
                slot = endpoint.ring[(endpoint.ring_head + i) % endpoint.slots]
                if endpoint.c_has_persistent(slot) and not self.send_requests[slot].inflight_persistent:
                    # a one-off send is in flight: the slot's inactive persistent send can go
                    log.note(self.request_free(self.send_requests[slot].persistent_request.handle),
                             "free a persistent send")
            endpoint.abandon_in_flight()  # their persistent requests stay with MPI
        self.release_requests(log)
        log.raise_first()
