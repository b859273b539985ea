# The compiled Endpoint's C-level interface, cimported by mailrail.transport._compiled (see _protocol.pyx).
cimport cython

from mailrail.flow._ledger cimport ANSWER, KIND_BITS, KIND_MASK, CreditLedger, CreditMessage, Outbox

# Send-slot states and how a send leaves: the values of mailrail.protocol (checked when the module imports).
cdef enum:
    FREE = 0
    HELD = 1
    QUEUED = 2
    IN_FLIGHT = 3

cdef enum:
    ISEND_TAGGED = 0
    START = 1
    CREATE = 2
    ISEND_NEW = 3
    REPLACE = 4

cdef enum:
    NO_SLOT = -1


@cython.final
cdef class Message:
    cdef readonly int source
    cdef readonly Py_ssize_t nbytes
    cdef readonly object data
    cdef public Py_ssize_t _slot   # receive slot; -1 once released
    cdef public object _owner      # the Endpoint that received it


cdef class ProgressIO:
    """The MPI calls a transport makes for Endpoint.c_receive() (mailrail.protocol.ProgressIO): the compiled
    transport overrides each, so the receive step costs C virtual calls, no Python frame."""
    cdef int arrival_source      # of the receive test_receive() found completed
    cdef long long arrival_tag
    cdef int reclaim(self) except -1  # the specification's reclaim_sends()
    cdef int poll_credits(self) except -1
    cdef int start_send(self, int dest, int nbytes, int slot, long long tag, int action, bint deferred) except -1
    cdef int send_credit_messages(self) except -1
    cdef Py_ssize_t test_receive(self, int slot) except -2  # its nbytes (arrival_* set), or -1: not yet
    cdef object payload(self, int slot, Py_ssize_t nbytes)  # the view handed out with the message
    cdef int post_receive(self, int slot) except -1
    cdef int idle(self) except -1


@cython.final
cdef class Endpoint:
    cdef readonly int rank, size, head_patience, credit_poll_interval, idle_spins
    cdef readonly Py_ssize_t datagram_size
    cdef readonly long long tag_ub
    cdef public double stall_timeout
    cdef public object clock  # the one time source of the stall check (the specification's Endpoint.clock)
    cdef readonly bint has_credits, stopped
    cdef readonly object send_pool, flow, deferred
    cdef object flow_outbox           # unconstrained flow control's outbox (always empty); read only here
    cdef CreditLedger ledger          # the credit modes' ledger; None when unconstrained
    cdef Outbox outbox                # the ledger's outbox (None when unconstrained: its outbox stays empty)
    cdef bint silent                  # flow.credits_change_silently (node and adaptive modes)
    cdef bint asks                    # flow.asks_for_credit (adaptive mode)
    # counters (see mailrail.counters)
    cdef readonly long long messages_sent, bytes_sent, messages_received, bytes_received, messages_released
    cdef readonly long long reserve_failures, credit_messages_sent, credit_messages_received, credits_returned
    cdef readonly Py_ssize_t held, held_high_water, reserved
    # send slots: state per slot, the free stack, the in-flight ring (oldest at its head), the stream cache
    cdef int slots
    cdef unsigned char *state
    cdef int *free_stack
    cdef int free_count
    cdef int *ring
    cdef int ring_head, ring_count, head_waits
    cdef int *stream_dest
    cdef int *stream_nbytes
    cdef unsigned char *persistent
    cdef list send_views
    cdef dict slot_by_id
    # deferred sends: the DeferredSends object (one queue implementation), its bound methods, and
    # deferred_count, this Endpoint's own mirror of deferred.total (only the Endpoint pushes, pops, clears)
    cdef dict deferred_queues
    cdef object deferred_push, deferred_pop, deferred_mark_ready
    cdef int deferred_count
    cdef bint has_last_progress
    cdef double last_progress
    cdef object drain_candidates  # the drain in progress: its candidates() iterator
    cdef int calls_since_credit_poll, idle_calls
    # receive slots: the posted ones in posting order (a ring, its head tested next), the parked ones (a stack)
    cdef readonly int recv_slots, posted_receives, posted_count
    cdef int *posted
    cdef int posted_head
    cdef int *parked
    cdef int parked_count
    # what c_submit() (and a leaving send) decided: the send's destination, size, tag and MPI call
    cdef int out_dest, out_nbytes, out_action
    cdef long long out_tag

    # The per-message paths, called by the compiled transport without a Python frame.  The shortest are
    # defined here, inline (the transport compiles them into its own calls); what they raise is built by
    # the refuse_* methods of _protocol.pyx, which name the module's exceptions.
    cdef int c_submit(self, object dest, object buf, object nbytes) except -2
    cdef int leave(self, int dest, int nbytes, int slot) noexcept
    cdef int c_transmit_failed(self, int slot, int nbytes, int action) except -1
    cdef int c_credits_arrived(self, int source, long long tag) except -1
    cdef int c_next_credit_message(self, int *target, long long *tag) except -1
    cdef long queued_for(self, int dest) except -1
    cdef int c_drain_begin(self) except -1
    cdef int c_drain_next(self) except -2
    cdef int pool_attached(self) except -1
    cdef int checked_slot(self, object slot) except -1
    cdef long checked_or_unreserved(self, object check, object value, object buf) except? -1
    cdef int refuse_finalized(self, object call) except -1
    cdef int refuse_release(self, object message) except -1
    cdef int refuse_slot(self, int slot) except -1
    cdef int refuse_receive_slot(self, Py_ssize_t slot) except -1
    cdef int refuse_empty_ring(self, str what) except -1
    cdef int c_post_failed(self, int slot) except -1

    cdef inline int c_reserve(self) except -2:
        """reserve(): a free send slot, now reserved, or NO_SLOT (backpressure)."""
        if self.stopped:
            self.refuse_finalized("reserve_send_buffer()")
        if not self.free_count:
            self.reserve_failures += 1
            return NO_SLOT
        self.free_count -= 1
        cdef int slot = self.free_stack[self.free_count]
        self.state[slot] = HELD
        self.reserved += 1
        return slot

    cdef inline int free_slot(self, int slot) except -1:
        if self.state[slot] != IN_FLIGHT:  # a slot freed twice would be handed out twice
            self.refuse_slot(slot)
        self.state[slot] = FREE
        self.free_stack[self.free_count] = slot
        self.free_count += 1
        return 0

    # The in-flight ring: its head is the oldest send.
    cdef inline int c_oldest_in_flight(self) noexcept:
        return self.ring[self.ring_head] if self.ring_count else NO_SLOT

    cdef inline int c_oldest_completed(self) except -1:
        if not self.ring_count:
            raise IndexError("pop from an empty deque")  # as the specification's deque says
        cdef int slot = self.ring[self.ring_head]
        self.ring_head = (self.ring_head + 1) % self.slots
        self.ring_count -= 1
        self.head_waits = 0
        return self.free_slot(slot)

    cdef inline int c_oldest_still_in_flight(self) noexcept:
        self.head_waits += 1
        if self.head_waits >= self.head_patience:
            self.head_waits = 0
            if self.ring_count:  # rotate the ring by one: the head goes to the back
                self.ring[(self.ring_head + self.ring_count) % self.slots] = self.ring[self.ring_head]
                self.ring_head = (self.ring_head + 1) % self.slots
        return 0

    cdef inline bint c_has_persistent(self, int slot) noexcept:
        return self.persistent[slot] != 0

    # Progress.
    cdef inline bint c_credit_poll_due(self) noexcept:
        if not self.has_credits:
            return False
        self.calls_since_credit_poll += 1
        if self.deferred_count or self.calls_since_credit_poll >= self.credit_poll_interval:
            self.calls_since_credit_poll = 0
            return True
        return False

    cdef inline bint c_idle(self) noexcept:
        self.idle_calls += 1
        if self.idle_calls >= self.idle_spins:
            self.idle_calls = 0
            return True
        return False

    # Receive slots.
    cdef inline int c_head_receive(self) noexcept:
        return self.posted[self.posted_head] if self.posted_count else NO_SLOT

    cdef inline int c_post_parked(self) noexcept:
        """A parked slot to post now (it joins the ring's back), or NO_SLOT."""
        if not self.parked_count or self.posted_count >= self.posted_receives:
            return NO_SLOT
        self.parked_count -= 1
        cdef int slot = self.parked[self.parked_count]
        self.posted[(self.posted_head + self.posted_count) % self.recv_slots] = slot
        self.posted_count += 1
        return slot

    cdef inline int c_head_arrived(self) except -2:
        """The head receive completed with a message: it leaves the ring; a parked slot to post, or NO_SLOT."""
        if not self.posted_count:
            self.refuse_empty_ring("arrived")
        self.posted_head = (self.posted_head + 1) % self.recv_slots
        self.posted_count -= 1
        return self.c_post_parked()

    cdef inline int c_head_reposted(self) except -1:
        """The head receive was started again: to the ring's back."""
        if not self.posted_count:
            self.refuse_empty_ring("re-posted")
        self.posted[(self.posted_head + self.posted_count) % self.recv_slots] = self.posted[self.posted_head]
        self.posted_head = (self.posted_head + 1) % self.recv_slots
        return 0

    # The receiver side.
    cdef inline Message c_arrived(self, int source, long long tag, Py_ssize_t nbytes, Py_ssize_t slot, object data):
        """arrived(): the message to hand out."""
        self.messages_received += 1
        self.bytes_received += nbytes
        if self.ledger is not None:
            if not 0 <= source < self.size:  # never index the ledger out of range
                raise IndexError(f"rank {source} is out of range 0..{self.size - 1}")
            if self.ledger.credits == NULL:
                self.pool_attached()
            if self.ledger.arrival(source, tag) and self.deferred_count:
                self.deferred_mark_ready(source)
        self.held += 1
        if self.held > self.held_high_water:
            self.held_high_water = self.held
        self.idle_calls = 0
        cdef Message message = Message.__new__(Message)
        message.source = source
        message.nbytes = nbytes
        message.data = data
        message._slot = slot
        message._owner = self
        return message

    cdef inline int c_release(self, object message) except -2:
        """release(): the receive slot to post now (it joins the ring) or NO_SLOT (parked); credit messages it
        causes join the ledger's outbox."""
        if self.stopped:
            self.refuse_finalized("release_receive_buffer()")
        if type(message) is not Message or (<Message>message)._owner is not self or (<Message>message)._slot < 0:
            self.refuse_release(message)
        cdef Message m = <Message>message
        if m._slot >= self.recv_slots:
            self.refuse_receive_slot(m._slot)
        cdef int slot = <int>m._slot
        m._slot = -1
        self.held -= 1
        self.messages_released += 1
        if self.ledger is not None:
            if not 0 <= m.source < self.size:  # a Message made by hand: never index the ledger out of range
                raise IndexError(f"rank {m.source} is out of range 0..{self.size - 1}")
            if self.ledger.credits == NULL:
                self.pool_attached()
            self.ledger.release(m.source)
        if self.posted_count < self.posted_receives:
            self.posted[(self.posted_head + self.posted_count) % self.recv_slots] = slot
            self.posted_count += 1
            return slot
        if self.parked_count >= self.recv_slots:  # a message made by hand: never more parked than slots
            self.refuse_receive_slot(slot)
        self.parked[self.parked_count] = slot
        self.parked_count += 1
        return NO_SLOT

    # Credit messages.
    cdef inline bint c_credits_due(self) noexcept:
        """Whether credit messages are due (the transport sends them with c_next_credit_message())."""
        return self.outbox is not None and self.outbox.count != 0

    # The receive step (the specification's Endpoint.receive), inline: the compiled transport's receive()
    # runs it in its own frame, calling back its ProgressIO methods (C virtual calls).
    cdef inline object c_receive(self, ProgressIO io):
        cdef int slot, parked
        cdef Py_ssize_t nbytes
        if self.stopped:
            self.refuse_finalized("receive()")
        if self.ring_count:
            io.reclaim()
        if self.c_credit_poll_due():
            io.poll_credits()
        if self.deferred_count:
            self.c_drain_begin()
            slot = self.c_drain_next()
            while slot != NO_SLOT:  # a failed start raises: the rest stay queued
                io.start_send(self.out_dest, self.out_nbytes, slot, self.out_tag, self.out_action, True)
                slot = self.c_drain_next()
        if self.c_credits_due():
            io.send_credit_messages()
        if self.posted_count:
            slot = self.posted[self.posted_head]
            nbytes = io.test_receive(slot)
            if nbytes >= 0:
                parked = self.c_head_arrived()
                if parked != NO_SLOT:
                    io.post_receive(parked)
                return self.c_arrived(io.arrival_source, io.arrival_tag, nbytes, slot, io.payload(slot, nbytes))
        if self.c_idle():
            io.idle()
        return None
