# The compiled credit ledger's C-level interface, cimported by mailrail._protocol (see _ledger.pyx).
cimport cython
from libc.stdint cimport int32_t, int64_t

# The credit messages' kinds and tag layout: the values of mailrail.flow.base (checked when _ledger imports).
cdef enum:
    GRANT = 0
    ANSWER = 1
    REQUEST = 2
    REVOKE = 3
    GIVE_BACK = 4
    KIND_BITS = 3
    KIND_MASK = 7

# The three modes.
cdef enum:
    RANK_MODE = 0
    NODE_MODE = 1
    ADAPTIVE_MODE = 2


cdef struct CreditMessage:
    int target
    int kind
    long long count


@cython.final
cdef class Outbox:
    """The credit messages a ledger decided to send, oldest first: a growable C ring (capacity a power of 2)."""
    cdef CreditMessage *ring
    cdef Py_ssize_t head, count, capacity

    cdef int grow(self) except -1

    cdef inline int push(self, int target, int kind, long long count) except -1:
        cdef CreditMessage *message
        if self.count == self.capacity:
            self.grow()
        message = &self.ring[(self.head + self.count) & (self.capacity - 1)]
        message.target = target
        message.kind = kind
        message.count = count
        self.count += 1
        return 0

    cdef inline bint pop(self, CreditMessage *message) noexcept:
        """The oldest message into *message*: False if there is none."""
        if not self.count:
            return False
        message[0] = self.ring[self.head]
        self.head = (self.head + 1) & (self.capacity - 1)
        self.count -= 1
        return True


# Adaptive mode, receiver side: what this rank knows of one sending node (adaptive.py's Lease), a record in
# a growable array found by node through an open-addressing table.  A record is *live* while adaptive.py's
# `leases` holds the node, and freed when it forgets it.  adaptive.py's ordered sets `revocable`, `parked`
# and `owing` are intrusive doubly linked lists over the records: `revocable` and `parked` share one pair
# of links (a node is in at most one of them), `owing` has its own.
cdef enum:
    REVOCABLE = 0
    PARKED = 1
    OWING = 2
    ORDERED_SETS = 3

cdef struct Lease:
    long long held, unreturned, owed, demand
    int node, target            # target: the rank the next grant goes to
    int granted_head, granted_tail  # the ranks granted since the last revoke: a list of granted entries (-1: none)
    int revoking                # revokes sent whose give-backs have not arrived
    int prev[2]
    int next[2]                 # links: [0] in revocable or parked, [1] in owing (-1: none)
    signed char member[2]       # which set each pair of links is in: -1 none, REVOCABLE/PARKED, OWING
    int next_free
    bint live, recheck

cdef struct OrderedSet:
    int head, tail, count


cdef class CreditLedger:
    cdef readonly bint credits_change_silently  # node and adaptive modes: other ranks refill the shared pool
    cdef readonly bint asks_for_credit          # adaptive mode
    cdef readonly long long credits_per_pair, return_threshold
    cdef readonly long long unreturned_total, unreturned_high_water, piggybacked
    cdef readonly long long requests_sent, requests_received, reclaimed, revokes_sent, given_back
    cdef readonly long long leases_high_water, waiting_high_water
    cdef readonly bint node_mode
    cdef readonly Outbox outbox                 # the credit messages due (see flow.base.FlowControl.outbox)
    cdef int mode
    cdef str mode_name                          # the mode table's name for it (what `name` reports)
    cdef bint shared                            # node and adaptive: credits (and tokens) in node-shared memory
    cdef long long max_tag, max_count
    cdef bint piggyback
    cdef int ranks, groups, ranks_per_group
    cdef int64_t *credits            # sender side, per destination rank: private (rank) or node-shared
    cdef int64_t *tokens             # adaptive: the node's request token per destination rank (node-shared)
    cdef int64_t *demands            # adaptive: the node's deferred sends per destination rank (node-shared)
    cdef const int32_t *group_map    # node/adaptive mode on real nodes: rank -> node, in node-shared memory
    cdef int64_t *owed_counts        # rank/node receiver side, per group: released, not yet returned
    cdef int64_t *unreturned_counts  # rank/node receiver side, per group: arrived, not yet returned
    cdef object _private             # the numpy arrays that own the private counters above
    cdef object owner                # keeps the memory behind credits/tokens/group_map alive
    # adaptive mode, receiver side
    cdef readonly long long recv_slots, lease, free
    cdef Lease *records
    cdef int record_capacity, free_records   # free_records: head of the free list of records (-1: none)
    cdef int *table                          # node -> record index (-1: empty), linear probing
    cdef int table_mask, table_used          # capacity - 1; records in the table
    cdef int last_node, last_index           # what find() found last (-1: nothing): a node's traffic, one lookup
    cdef int live_count                      # live records: len(leases)
    cdef long long share                     # a node's fair share, recv_slots // live_count (0: no lease)
    cdef int *waiting                        # FIFO ring of node ids (capacity a power of 2)
    cdef int waiting_head, waiting_count, waiting_mask
    cdef int *granted_table                  # rank -> granted entry (-1: empty), linear probing
    cdef int granted_mask, granted_used
    cdef int *granted_rank                   # per granted entry: the rank, and the next entry of its lease's
    cdef int *granted_next                   # list (or of the free list)
    cdef int granted_capacity, granted_free
    cdef OrderedSet sets[ORDERED_SETS]       # revocable, parked, owing

    cdef int group_of(self, int rank) noexcept
    cdef int checked(self, object rank, bint needs_pool) except -1

    # The per-message decisions, called by the compiled Endpoint without a Python frame.
    cdef bint try_take(self, int dest) noexcept
    cdef long long credits_for(self, int dest) noexcept
    cdef long long piggyback_for(self, int dest) noexcept
    cdef int arrival(self, int source, long long tag) except -1
    cdef int release(self, int source) except -1
    cdef int credit_message(self, int source, int kind, long long count) except -1
    cdef int ask_for(self, int dest, long long queued) except -1
    cdef bint deferred_to(self, int dest) noexcept
    cdef bint may_ask(self, int dest) noexcept
    cdef int undeferred_to(self, int dest, long long count) noexcept
    cdef int send_credits(self, int target, int kind, long long count) except -1

    # Adaptive mode.
    cdef int adaptive_arrival(self, int source) except -1
    cdef int adaptive_release(self, int source) except -1
    cdef int adaptive_message(self, int source, int kind, long long count) except -1
    cdef int requested(self, int source, long long demand) except -1
    cdef int given_back_from(self, int source, long long count) except -1
    cdef int settle(self, int index) except -1
    cdef void give_back_owed(self, int index) noexcept
    cdef int serve(self) except -1
    cdef int hand_out(self) except -1
    cdef int grant(self, int index, int kind, long long count) except -1
    cdef int revoke_idle(self) except -1
    cdef int forget_if_idle(self, int index) except -1
    # adaptive mode's containers
    cdef int find(self, int node) noexcept
    cdef int live_lease(self, int node) noexcept
    cdef void count_leases(self, int change) noexcept
    cdef int new_lease(self, int node, int target) except -1
    cdef int free_record(self, int index) noexcept
    cdef int grow_table(self) except -1
    cdef int note_granted(self, int index, int rank) except -1
    cdef int drop_granted(self, int index, bint revoke) except -1
    cdef int grow_records(self) except -1
    cdef int waiting_push(self, int node) except -1
    cdef void set_add(self, int which, int index) noexcept
    cdef void set_remove(self, int which, int index) noexcept
