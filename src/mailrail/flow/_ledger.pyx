# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled credit ledger: :mod:`mailrail.flow`'s rank, node and adaptive credits for the compiled transport.

:class:`CreditLedger` makes exactly the decisions of
:class:`~mailrail.flow.rank.RankCredits`, :class:`~mailrail.flow.node.NodeCredits` and
:class:`~mailrail.flow.adaptive.AdaptiveCredits` (the sans-I/O reference, which the
Python transport runs), with the same errors, and puts the same credit messages in
the same order into its :class:`Outbox`; ``tests/library/flow/test_ledger.py`` drives both
with the same random events and compares every result.  The compiled Endpoint
(``mailrail._protocol``) calls the ``cdef`` methods per message and pops the outbox
in C; Python calls the :class:`~mailrail.flow.base.FlowControl` methods, which
share them, and the outbox's deque face.

Adaptive mode's receiver state is C: lease records in a growable array (with a free
list), found by node through an open-addressing table; the FIFO of waiting nodes a
growable ring; adaptive.py's insertion-ordered sets ``revocable`` and ``owing``
intrusive doubly linked lists over the records (a membership flag per record), so
they iterate in the same order.  Per-message work is O(1) and allocates no Python
object; memory grows to the most records (leases and waiting nodes) ever held at once.
"""

from cpython.mem cimport PyMem_Free, PyMem_Malloc, PyMem_Realloc
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.string cimport memcpy

import numpy as np

from mailrail.errors import ProtocolError
from mailrail.flow import base as _base
from mailrail.flow.adaptive import GRANTED_BYTES as _GRANTED_BYTES
from mailrail.flow.adaptive import LEASE_BYTES as _LEASE_BYTES, QUEUE_ENTRY_BYTES as _QUEUE_ENTRY_BYTES
from mailrail.flow.base import max_credit_count, unknown_kind

# The C enums of _ledger.pxd must be flow.base's values: checked once, here.
if ((GRANT, ANSWER, REQUEST, REVOKE, GIVE_BACK, KIND_BITS, KIND_MASK) != (
        _base.GRANT, _base.ANSWER, _base.REQUEST, _base.REVOKE, _base.GIVE_BACK, _base.KIND_BITS, _base.KIND_MASK)):
    raise ImportError("mailrail.flow._ledger is out of step with mailrail.flow.base's credit kinds: rebuild it")

cdef long long LEASE_BYTES = _LEASE_BYTES
cdef long long QUEUE_ENTRY_BYTES = _QUEUE_ENTRY_BYTES
cdef long long GRANTED_BYTES = _GRANTED_BYTES
#: The ledger's kinds (its constructor's *kind*): the mode table (flow/modes.py) says which mode keeps which.
RANK_LEDGER, NODE_LEDGER, ADAPTIVE_LEDGER = RANK_MODE, NODE_MODE, ADAPTIVE_MODE
_DETACHED = "the credit ledger was detached from its shared memory (finalize())"

cdef extern from *:
    """
    /* Node pools are updated by every rank of the node: C11-style atomics on the shared counters. */
    static inline int64_t mailrail_load(int64_t *p) { return __atomic_load_n(p, __ATOMIC_ACQUIRE); }
    static inline int64_t mailrail_add(int64_t *p, int64_t v) {
        return __atomic_add_fetch(p, v, __ATOMIC_ACQ_REL);
    }
    /* Decrement only if positive: a node never overdraws its credits. */
    static inline int mailrail_take(int64_t *p) {
        int64_t seen = __atomic_load_n(p, __ATOMIC_ACQUIRE);
        while (seen > 0)
            if (__atomic_compare_exchange_n(p, &seen, seen - 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return 1;
        return 0;
    }
    /* Take min(value, most), never below zero: what was taken. */
    static inline int64_t mailrail_take_up_to(int64_t *p, int64_t most) {
        int64_t seen = __atomic_load_n(p, __ATOMIC_ACQUIRE), taken;
        while (seen > 0 && most > 0) {
            taken = seen < most ? seen : most;
            if (__atomic_compare_exchange_n(p, &seen, seen - taken, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
                return taken;
        }
        return 0;
    }
    """
    int64_t mailrail_load(int64_t *p) noexcept nogil
    int64_t mailrail_add(int64_t *p, int64_t v) noexcept nogil
    int mailrail_take(int64_t *p) noexcept nogil
    int64_t mailrail_take_up_to(int64_t *p, int64_t most) noexcept nogil


cdef int64_t *_data(object array):
    """The address of a C-contiguous int64 numpy array's first element."""
    return <int64_t *><size_t>array.ctypes.data


# Open-addressing tables (linear probing; capacity a power of 2, at most half full): int slots holding entry
# indices (-1: empty), an entry's key the int at keys + index * stride (a struct array's field, or an int array).

cdef inline int key_of(const char *keys, Py_ssize_t stride, int index) noexcept:
    return (<const int *>(keys + index * stride))[0]


cdef inline int home_slot(int key, int mask) noexcept:
    cdef uint32_t x = <uint32_t>key
    x = ((x >> 16) ^ x) * 0x45d9f3bU
    x = ((x >> 16) ^ x) * 0x45d9f3bU
    return <int>(((x >> 16) ^ x) & <uint32_t>mask)


cdef int table_find(const int *table, int mask, const char *keys, Py_ssize_t stride, int key) noexcept:
    """The entry of *key*, or -1."""
    cdef int slot = home_slot(key, mask), index
    while True:
        index = table[slot]
        if index < 0 or key_of(keys, stride, index) == key:
            return index
        slot = (slot + 1) & mask


cdef void table_insert(int *table, int mask, int key, int index) noexcept:
    """Enter *index* (whose key, *key*, is not in the table)."""
    cdef int slot = home_slot(key, mask)
    while table[slot] >= 0:
        slot = (slot + 1) & mask
    table[slot] = index


cdef void table_remove(int *table, int mask, const char *keys, Py_ssize_t stride, int index) noexcept:
    """Remove *index* (backward-shift deletion: no tombstones)."""
    cdef int hole = home_slot(key_of(keys, stride, index), mask), slot, home
    while table[hole] != index:
        hole = (hole + 1) & mask
    slot = hole
    while True:
        slot = (slot + 1) & mask
        if table[slot] < 0:
            break
        home = home_slot(key_of(keys, stride, table[slot]), mask)
        # the entry at slot may move into the hole unless its home lies cyclically in (hole, slot]
        if (hole < slot and hole < home <= slot) or (hole > slot and (home > hole or home <= slot)):
            continue
        table[hole] = table[slot]
        hole = slot
    table[hole] = -1


cdef int *table_grown(int *old, int old_capacity, const char *keys, Py_ssize_t stride) except NULL:
    """A table of twice the capacity with *old*'s entries (*old* is freed)."""
    cdef int capacity = 2 * old_capacity, i
    cdef int *table = <int *>PyMem_Malloc(capacity * sizeof(int))
    if table == NULL:
        raise MemoryError()
    for i in range(capacity):
        table[i] = -1
    for i in range(old_capacity):
        if old[i] >= 0:
            table_insert(table, capacity - 1, key_of(keys, stride, old[i]), old[i])
    PyMem_Free(old)
    return table


cdef int *new_table(int capacity) except NULL:
    cdef int *table = <int *>PyMem_Malloc(capacity * sizeof(int)), i
    if table == NULL:
        raise MemoryError()
    for i in range(capacity):
        table[i] = -1
    return table


cdef class Outbox:
    """The credit messages a ledger decided to send, ``(target rank, kind, count)``, oldest first.

    The compiled Endpoint pushes and pops them in C; from Python it behaves as the deque a
    :class:`~mailrail.flow.base.FlowControl`'s ``outbox`` is: ``len``, truth, :meth:`popleft`,
    :meth:`append`, :meth:`clear` and iteration (over a snapshot).
    """

    def __cinit__(self):
        self.ring = <CreditMessage *>PyMem_Malloc(8 * sizeof(CreditMessage))
        if self.ring == NULL:
            raise MemoryError()
        self.capacity = 8

    def __dealloc__(self):
        PyMem_Free(self.ring)

    cdef int grow(self) except -1:
        cdef Py_ssize_t capacity = 2 * self.capacity, i
        cdef CreditMessage *ring = <CreditMessage *>PyMem_Malloc(capacity * sizeof(CreditMessage))
        if ring == NULL:
            raise MemoryError()
        for i in range(self.count):
            ring[i] = self.ring[(self.head + i) & (self.capacity - 1)]
        PyMem_Free(self.ring)
        self.ring, self.head, self.capacity = ring, 0, capacity
        return 0

    def __len__(self):
        return self.count

    def __bool__(self):
        return self.count != 0

    def popleft(self):
        """The oldest message, ``(target, kind, count)``; IndexError when empty (as a deque's)."""
        cdef CreditMessage message
        if not self.pop(&message):
            raise IndexError("pop from an empty deque")
        return message.target, message.kind, message.count

    def append(self, item):
        """Add ``(target, kind, count)`` at the end."""
        target, kind, count = item
        self.push(target, kind, count)

    def clear(self):
        self.head = self.count = 0

    def __iter__(self):
        cdef Py_ssize_t i
        cdef CreditMessage *message
        snapshot = []
        for i in range(self.count):
            message = &self.ring[(self.head + i) & (self.capacity - 1)]
            snapshot.append((message.target, message.kind, message.count))
        return iter(snapshot)

    def __repr__(self):
        return f"Outbox({list(self)!r})"


cdef class CreditLedger:
    """Rank-, node- or adaptive credit accounting in C, with the interface and decisions of
    :class:`~mailrail.flow.rank.RankCredits` / :class:`~mailrail.flow.node.NodeCredits` /
    :class:`~mailrail.flow.adaptive.AdaptiveCredits`.

    *kind* :data:`RANK_LEDGER`: credits per (sender rank, receiver rank), optionally piggybacked
    in payload tags up to *max_tag*.  :data:`NODE_LEDGER`: the node's int64 credit counters at
    address *pool* (one per destination rank, shared by the node's ranks and updated
    atomically).  :data:`ADAPTIVE_LEDGER`: *credits_per_pair* is the lease, *return_threshold* the
    credit threshold; the node's int64 pool (starting at 0), request tokens (starting at 1)
    and deferred sends (starting at 0) per destination rank at addresses *pool*, *tokens*
    and *demand*; *recv_slots* the receive slots lent.  Node and
    adaptive modes group sending ranks into *nodes* by an int32 rank-to-node map at
    address *node_map*, or as consecutive blocks of *ranks_per_node*; *owner* keeps that
    memory alive.  *max_tag* (MPI's ``TAG_UB``) bounds piggybacked counts and each
    credit message's count (:func:`~mailrail.flow.base.max_credit_count`).  *name*: the mode's, as
    :attr:`name` reports it (the mode table passes both).
    """

    def __cinit__(self):
        self.outbox = Outbox()
        self.free_records = -1
        cdef int which
        for which in range(ORDERED_SETS):
            self.sets[which].head = self.sets[which].tail = -1
            self.sets[which].count = 0

    def __init__(self, int kind, str name, int ranks, long long credits_per_pair, long long return_threshold, *,
                 bint piggyback=True, long long max_tag=32767, int nodes=0, int ranks_per_node=0,
                 node_map=None, pool=None, tokens=None, demand=None, long long recv_slots=0, owner=None):
        if self._private is not None:
            raise RuntimeError("CreditLedger is initialized once")
        if kind == ADAPTIVE_MODE and (recv_slots < 1 or credits_per_pair < 1 or return_threshold < 1):
            raise ValueError(f"recv_slots={recv_slots}, lease={credits_per_pair} and credit_threshold="
                             f"{return_threshold} must be >= 1")
        if ranks < 1 or credits_per_pair < 1 or return_threshold < 1 or max_tag < 1:
            raise ValueError("ranks, credits_per_pair, return_threshold and max_tag must be >= 1")
        max_count = max_credit_count(max_tag)  # ValueError below MIN_TAG_UB, as the reference's
        credits = None
        self.mode_name = name
        if kind == RANK_MODE:
            self.mode = RANK_MODE
            self.groups = ranks
            credits = np.full(ranks, credits_per_pair, dtype=np.int64)
            self.credits = _data(credits)
        elif kind == NODE_MODE or kind == ADAPTIVE_MODE:
            if nodes < 1 or pool is None or (node_map is None) == (ranks_per_node < 1):
                raise ValueError(f"{name} mode needs nodes >= 1, a pool address, and either ranks_per_node >= 1 "
                                 f"or a node_map address")
            if kind == ADAPTIVE_MODE and (tokens is None or demand is None):
                raise ValueError(f"{name} mode needs tokens and demand addresses")
            self.mode = kind
            self.shared = self.credits_change_silently = True
            self.node_mode = kind == NODE_MODE
            self.asks_for_credit = kind == ADAPTIVE_MODE
            self.groups = nodes
            self.credits = <int64_t *><size_t>pool
            if kind == ADAPTIVE_MODE:
                self.tokens = <int64_t *><size_t>tokens
                self.demands = <int64_t *><size_t>demand
            self.group_map = NULL if node_map is None else <const int32_t *><size_t>node_map
            self.owner = owner
        else:
            raise ValueError(f"kind must be RANK_LEDGER, NODE_LEDGER or ADAPTIVE_LEDGER ({RANK_MODE}, {NODE_MODE} "
                             f"or {ADAPTIVE_MODE}), not {kind!r}")
        self.max_count = max_count
        self.ranks = ranks
        self.ranks_per_group = ranks_per_node if ranks_per_node > 0 else 1
        self.credits_per_pair = credits_per_pair
        self.return_threshold = return_threshold
        self.max_tag = max_tag
        self.piggyback = piggyback and self.mode == RANK_MODE
        if self.mode == ADAPTIVE_MODE:
            self.recv_slots = self.free = recv_slots
            self.lease = credits_per_pair
            self.table = new_table(16)
            self.granted_table = new_table(16)
            self.waiting = <int *>PyMem_Malloc(8 * sizeof(int))
            if self.waiting == NULL:
                raise MemoryError()
            self.table_mask, self.granted_mask, self.waiting_mask = 15, 15, 7
            self.granted_free = -1
            self.last_node = self.last_index = -1
            self.grow_records()
            self._private = (None, None, None)
            return
        owed = np.zeros(self.groups, dtype=np.int64)
        unreturned = np.zeros(self.groups, dtype=np.int64)
        self.owed_counts, self.unreturned_counts = _data(owed), _data(unreturned)
        self._private = (owed, unreturned, credits)

    def __dealloc__(self):
        PyMem_Free(self.records)
        PyMem_Free(self.table)
        PyMem_Free(self.waiting)
        PyMem_Free(self.granted_table)
        PyMem_Free(self.granted_rank)
        PyMem_Free(self.granted_next)

    # -- the per-message decisions -------------------------------------------

    cdef int group_of(self, int rank) noexcept:
        return self.group_map[rank] if self.group_map != NULL else rank // self.ranks_per_group

    cdef bint try_take(self, int dest) noexcept:
        """Take one credit for *dest*: True if taken, False if none is left."""
        if self.shared:
            return mailrail_take(&self.credits[dest])
        if self.credits[dest] <= 0:
            return False
        self.credits[dest] -= 1
        return True

    cdef long long credits_for(self, int dest) noexcept:
        """Send credits usable for *dest* now."""
        return mailrail_load(&self.credits[dest]) if self.shared else self.credits[dest]

    cdef long long piggyback_for(self, int dest) noexcept:
        """Credits owed to *dest* that ride in the tag of a payload leaving for it now (rank mode)."""
        if not self.piggyback:
            return 0
        cdef long long count = self.owed_counts[dest]
        if count:
            if count > self.max_tag:
                count = self.max_tag
            self.owed_counts[dest] -= count
            self.unreturned_counts[dest] -= count
            self.unreturned_total -= count
            self.piggybacked += count
        return count

    cdef int arrival(self, int source, long long tag) except -1:
        """Account one payload from *source*: 1 if its tag brought credits, else 0."""
        if self.mode == ADAPTIVE_MODE:
            return self.adaptive_arrival(source)
        cdef int group = self.group_of(source)
        self.unreturned_counts[group] += 1
        cdef long long unreturned = self.unreturned_counts[group]
        self.unreturned_total += 1
        if self.unreturned_total > self.unreturned_high_water:
            self.unreturned_high_water = self.unreturned_total
        if unreturned > self.credits_per_pair:
            if self.node_mode:
                raise ProtocolError(
                    f"node {group} (via rank {source}) has {unreturned} unreturned messages here but only "
                    f"{self.credits_per_pair} credits per node: a send without credit")
            raise ProtocolError(f"rank {source} has {unreturned} unreturned messages here but only "
                                f"{self.credits_per_pair} credits per pair: a send without credit")
        if tag and not self.node_mode:  # piggybacked credits obey the same bound
            self.credit_message(source, GRANT, tag)
            return 1
        return 0

    cdef int release(self, int source) except -1:
        """The application released a payload from *source*: credit messages it causes go to the outbox."""
        if self.mode == ADAPTIVE_MODE:
            return self.adaptive_release(source)
        cdef int group = self.group_of(source)
        self.owed_counts[group] += 1
        cdef long long count = self.owed_counts[group]
        if count < self.return_threshold:
            return 0
        self.owed_counts[group] = 0
        self.unreturned_counts[group] -= count
        self.unreturned_total -= count
        return self.send_credits(source, GRANT, count)

    cdef int send_credits(self, int target, int kind, long long count) except -1:
        """Credits to *target* in pieces of at most max_count; only the first piece of an ANSWER answers."""
        while count > self.max_count:
            self.outbox.push(target, kind, self.max_count)
            count -= self.max_count
            kind = GRANT
        return self.outbox.push(target, kind, count)

    cdef int credit_message(self, int source, int kind, long long count) except -1:
        """A credit message of *kind* carrying *count* arrived from *source*."""
        cdef long long now
        if self.mode == ADAPTIVE_MODE:
            return self.adaptive_message(source, kind, count)
        if kind != GRANT:
            raise unknown_kind(source, kind, count, self.mode_name)
        if self.node_mode:
            now = mailrail_add(&self.credits[source], count)
            if now > self.credits_per_pair:
                raise ProtocolError(f"rank {source} returned {count} credits, leaving this node {now} > "
                                    f"{self.credits_per_pair} credits per node")
            return 0
        self.credits[source] += count
        now = self.credits[source]
        if now > self.credits_per_pair:
            raise ProtocolError(f"rank {source} returned {count} credits, leaving {now} > "
                                f"{self.credits_per_pair} credits per pair")
        return 0

    cdef int ask_for(self, int dest, long long queued) except -1:
        """*queued* sends wait for *dest* without credit: adaptive mode asks (once per node: the token)."""
        if self.mode != ADAPTIVE_MODE:
            return 0
        if mailrail_take(&self.tokens[dest]):
            self.requests_sent += 1
            self.outbox.push(dest, REQUEST, queued if queued < self.max_count else self.max_count)
        return 0

    cdef bint deferred_to(self, int dest) noexcept:
        """A send to *dest* was deferred: adaptive mode counts it for the node; True if the node's pool is empty
        and it may ask (then the caller asks, with how many wait: adaptive.py's on_deferred)."""
        if self.mode != ADAPTIVE_MODE:
            return False
        mailrail_add(&self.demands[dest], 1)
        return not mailrail_load(&self.credits[dest]) and mailrail_load(&self.tokens[dest]) > 0

    cdef bint may_ask(self, int dest) noexcept:
        """Whether the node's token for *dest* is there to take (so counting the waiting sends is worth it)."""
        return self.mode == ADAPTIVE_MODE and mailrail_load(&self.tokens[dest]) > 0

    cdef int undeferred_to(self, int dest, long long count) noexcept:
        """*count* deferred sends to *dest* left or were dropped (adaptive mode)."""
        if self.mode == ADAPTIVE_MODE:
            mailrail_add(&self.demands[dest], -count)
        return 0

    # -- adaptive mode: what adaptive.py decides ------------------------------

    cdef int adaptive_message(self, int source, int kind, long long count) except -1:
        cdef long long now, spare
        if kind == GRANT or kind == ANSWER:
            now = mailrail_add(&self.credits[source], count)
            if kind == ANSWER:
                if mailrail_add(&self.tokens[source], 1) > 1:
                    raise ProtocolError(f"rank {source} answered a request this node did not make")
            if now > self.recv_slots:
                raise ProtocolError(f"rank {source} granted {count} credits, leaving this node {now} > its "
                                    f"{self.recv_slots} receive slots")
            return 0
        if kind == REVOKE:  # give back what the node's waiting sends will not use
            spare = mailrail_load(&self.credits[source]) - mailrail_load(&self.demands[source])
            if spare > self.max_count:
                spare = self.max_count
            return self.outbox.push(source, GIVE_BACK,
                                    mailrail_take_up_to(&self.credits[source], spare) if spare > 0 else 0)
        if kind == REQUEST:
            return self.requested(source, count)
        if kind == GIVE_BACK:
            return self.given_back_from(source, count)
        raise unknown_kind(source, kind, count, "adaptive")

    cdef int adaptive_arrival(self, int source) except -1:
        cdef int node = self.group_of(source)
        cdef int index = self.live_lease(node)
        cdef Lease *lease = &self.records[index] if index >= 0 else NULL
        cdef long long held = 0, in_use = 0
        if lease == NULL or lease.unreturned >= lease.held:
            if lease != NULL:
                held, in_use = lease.held, lease.unreturned
            raise ProtocolError(
                f"node {node} (via rank {source}) sent a message here without credit: it holds {held} "
                f"credit(s) of this rank and {in_use} are in use")
        lease.unreturned += 1
        self.unreturned_total += 1
        if self.unreturned_total > self.unreturned_high_water:
            self.unreturned_high_water = self.unreturned_total
        if lease.recheck:  # it used what it kept: what is left may be idle now
            lease.recheck = False
            self.set_add(REVOCABLE, index)
        return 0

    cdef int adaptive_release(self, int source) except -1:
        cdef int node = self.group_of(source)
        cdef int index = self.live_lease(node)
        if index < 0 or self.records[index].owed >= self.records[index].unreturned:
            raise ProtocolError(f"node {node} (via rank {source}) has no message here to release")
        cdef long long free = self.free
        self.records[index].owed += 1
        self.records[index].target = source
        self.settle(index)
        if self.waiting_count and (self.free > free or self.sets[REVOCABLE].count):  # else serve() has nothing to do
            self.serve()
        return 0

    cdef int settle(self, int index) except -1:
        """What becomes of the lease's released credits: while another node waits, those above the node's
        fair share are reclaimed; the rest go back at once if it waits alone below its share, or once
        held // credit_threshold gathered, else they are kept owed (adaptive.py's _settle)."""
        cdef Lease *lease = &self.records[index]
        cdef long long owed = lease.owed, take
        if not owed:
            return 0
        cdef bint others = self.waiting_count > (1 if lease.demand else 0)
        if others:
            take = lease.held - self.share
            if take > owed:
                take = owed
            if take > 0:  # above its share: those slots go to the queue
                lease.owed = owed = owed - take
                lease.held -= take
                lease.unreturned -= take
                self.unreturned_total -= take
                self.free += take
                self.reclaimed += take
                if not owed:
                    self.set_remove(OWING, index)
                    return self.forget_if_idle(index)
        if lease.demand and not others and lease.held < self.share:
            # It waits alone below its share: these answer it, at once (at its share, its request stands).
            self.give_back_owed(index)
            self.waiting_head = self.waiting_count = 0
            return self.grant(index, ANSWER, owed)
        # owed >= max(1, held // credit_threshold) without a division (per release): owed >= 1 here, and
        # owed >= held // T exactly when (owed + 1) * T > held.
        if (owed + 1) * self.return_threshold > lease.held:
            self.give_back_owed(index)
            return self.grant(index, GRANT, owed)
        self.set_add(OWING, index)
        return 0

    cdef void give_back_owed(self, int index) noexcept:
        """The lease's owed credits go back to its node: no longer in use here (adaptive.py's _give_back_owed)."""
        cdef Lease *lease = &self.records[index]
        lease.unreturned -= lease.owed
        self.unreturned_total -= lease.owed
        lease.owed = 0
        self.set_remove(OWING, index)

    cdef int requested(self, int source, long long demand) except -1:
        cdef int node = self.group_of(source)
        cdef int index = self.live_lease(node)
        if index < 0:
            index = self.new_lease(node, source)
            if self.live_count > self.leases_high_water:
                self.leases_high_water = self.live_count
            while self.sets[PARKED].head != -1:  # one more node: every share shrinks, a parked node may be above
                self.set_add(REVOCABLE, self.sets[PARKED].head)
        elif self.records[index].demand:
            raise ProtocolError(f"node {node} (via rank {source}) asked for credits again before its answer")
        else:
            self.records[index].target = source
        self.requests_received += 1
        self.records[index].demand = demand if demand > 1 else 1
        self.waiting_push(node)
        if self.waiting_count > self.waiting_high_water:
            self.waiting_high_water = self.waiting_count
        return self.serve()

    cdef int given_back_from(self, int source, long long count) except -1:
        cdef int node = self.group_of(source)
        cdef int index = self.live_lease(node)
        cdef Lease *lease = &self.records[index] if index >= 0 else NULL
        if lease == NULL or not lease.revoking:
            raise ProtocolError(f"node {node} (via rank {source}) gave back {count} credit(s) that were not revoked")
        if count > lease.held - lease.unreturned:
            raise ProtocolError(
                f"node {node} (via rank {source}) gave back {count} credit(s) but held only "
                f"{lease.held - lease.unreturned} unused")
        lease.revoking -= 1
        if count == self.max_count:  # a full message: its pool may hold more
            self.set_add(REVOCABLE, index)
        elif not lease.revoking and count < lease.held - lease.unreturned:
            lease.recheck = True  # it kept some: look again once it used them (an arrival)
        lease.held -= count
        self.free += count
        self.given_back += count
        self.forget_if_idle(index)
        return self.serve()

    cdef int serve(self) except -1:
        """Serve waiting nodes in order from the free slots; while some wait and none is free, the owed
        credits come back now and idle ones by a revoke (adaptive.py's _serve)."""
        cdef int index, following
        cdef long long free
        while True:
            if self.waiting_count and self.free:
                self.hand_out()
            if not self.waiting_count or not self.sets[OWING].count:
                break
            # Others wait: shares above fair are reclaimed (or answer a lone waiter).  Settling a node removes
            # at most that node from `owing` and adds none: the saved successor stays valid.
            free = self.free
            index = self.sets[OWING].head
            while index != -1:
                following = self.records[index].next[1]
                if not self.records[index].live:
                    raise KeyError(self.records[index].node)
                self.settle(index)
                index = following
            if self.free == free:  # nothing above a fair share was owed: the rest is in use or in pools
                break
        if self.waiting_count:
            self.revoke_idle()
        return 0

    cdef int hand_out(self) except -1:
        """Free slots to the nodes in line below their fair share, in line order, each up to its share (one at
        least for a node holding nothing); the others keep their places (adaptive.py's _hand_out): the ring
        is compacted in place, the kept nodes written behind the head in their order."""
        cdef int count = self.waiting_count, kept = 0, i, node, index
        cdef long long room, grant
        cdef Lease *lease
        for i in range(count):
            node = self.waiting[(self.waiting_head + i) & self.waiting_mask]
            index = self.live_lease(node)
            if index < 0:
                raise KeyError(node)
            lease = &self.records[index]
            if lease.held:
                room = self.share - lease.held
            else:
                room = self.share if self.share > 1 else 1
            if not self.free or room <= 0:
                self.waiting[(self.waiting_head + kept) & self.waiting_mask] = node
                kept += 1
                continue
            grant = self.free
            if lease.demand < grant:
                grant = lease.demand
            if self.lease < grant:
                grant = self.lease
            if room < grant:
                grant = room
            self.free -= grant
            lease.held += grant
            self.grant(index, ANSWER, grant)
        self.waiting_count = kept
        return 0

    cdef int grant(self, int index, int kind, long long count) except -1:
        if kind == ANSWER:
            self.records[index].demand = 0
        self.send_credits(self.records[index].target, kind, count)
        self.note_granted(index, self.records[index].target)
        self.set_add(REVOCABLE, index)
        return 0

    cdef int revoke_idle(self) except -1:
        """Every node granted credits since its last revoke that holds more than its fair share gets a REVOKE,
        unless all its credits are here or a revoke is already on its way; those within their share are
        parked (adaptive.py's _revoke_idle)."""
        cdef int index = self.sets[REVOCABLE].head, following
        cdef long long share = self.share
        cdef Lease *lease
        while index != -1:
            lease = &self.records[index]
            following = lease.next[0]
            if not lease.live:
                raise KeyError(lease.node)
            if not lease.revoking:
                self.set_remove(REVOCABLE, index)
                if lease.held <= share:
                    self.set_add(PARKED, index)
                elif lease.held > lease.unreturned:  # to every rank granted since the last revoke (adaptive.py)
                    if lease.granted_head >= 0:
                        self.drop_granted(index, True)
                    else:
                        lease.revoking = 1
                        self.revokes_sent += 1
                        self.outbox.push(lease.target, REVOKE, 0)
            index = following
        return 0

    cdef int forget_if_idle(self, int index) except -1:
        cdef Lease *lease = &self.records[index]
        if not lease.held and not lease.demand and not lease.revoking:
            lease.live = False  # del leases[node]
            self.count_leases(-1)
            self.set_remove(REVOCABLE, index)
            self.set_remove(PARKED, index)
            self.set_remove(OWING, index)
            self.drop_granted(index, False)
            self.free_record(index)
        return 0

    # -- adaptive mode's containers ---------------------------------------------

    cdef int find(self, int node) noexcept:
        """The record of *node*, or -1."""
        if node == self.last_node:  # a node's messages come in runs: skip the hash and the probe
            return self.last_index
        cdef int index = table_find(self.table, self.table_mask, <const char *>&self.records[0].node, sizeof(Lease),
                                    node)
        if index >= 0:
            self.last_node, self.last_index = node, index
        return index

    cdef int live_lease(self, int node) noexcept:
        """adaptive.py's leases.get(node): the live record of *node*, or -1."""
        cdef int index = self.find(node)
        return index if index >= 0 and self.records[index].live else -1

    cdef void count_leases(self, int change) noexcept:
        """len(leases) changes by *change*, and with it every node's fair share."""
        self.live_count += change
        self.share = self.recv_slots // self.live_count if self.live_count else 0

    cdef int new_lease(self, int node, int target) except -1:
        """A new live lease of *node* (which has none): a record from the free list, entered in the table."""
        cdef int index
        cdef Lease *lease
        if (self.table_used + 1) * 2 > self.table_mask + 1:
            self.grow_table()
        if self.free_records < 0:
            self.grow_records()
        index = self.free_records
        self.free_records = self.records[index].next_free
        table_insert(self.table, self.table_mask, node, index)
        self.table_used += 1
        lease = &self.records[index]
        lease.node, lease.target = node, target
        lease.held = lease.unreturned = lease.owed = lease.demand = 0
        lease.granted_head = lease.granted_tail = -1
        lease.revoking = 0
        lease.recheck = False
        lease.member[0] = lease.member[1] = -1
        lease.prev[0] = lease.next[0] = lease.prev[1] = lease.next[1] = -1
        lease.live = True
        self.count_leases(1)
        return index

    cdef int free_record(self, int index) noexcept:
        """Remove record *index* from the table and free it."""
        table_remove(self.table, self.table_mask, <const char *>&self.records[0].node, sizeof(Lease), index)
        self.table_used -= 1
        if index == self.last_index:
            self.last_node = self.last_index = -1
        self.records[index].live = False
        self.records[index].next_free = self.free_records
        self.free_records = index
        return 0

    cdef int grow_table(self) except -1:
        self.table = table_grown(self.table, self.table_mask + 1, <const char *>&self.records[0].node, sizeof(Lease))
        self.table_mask = 2 * self.table_mask + 1
        return 0

    cdef int note_granted(self, int index, int rank) except -1:
        """Lease *index*'s node was granted credits at *rank*: the rank joins the lease's list (at its end) unless
        it is there (a rank is of one node, so in one list at most)."""
        cdef int entry, capacity, i
        cdef int *ranks
        cdef int *nexts
        cdef Lease *lease
        if table_find(self.granted_table, self.granted_mask, <const char *>self.granted_rank, sizeof(int), rank) >= 0:
            return 0
        if (self.granted_used + 1) * 2 > self.granted_mask + 1:
            self.granted_table = table_grown(self.granted_table, self.granted_mask + 1,
                                             <const char *>self.granted_rank, sizeof(int))
            self.granted_mask = 2 * self.granted_mask + 1
        if self.granted_free < 0:
            capacity = 2 * self.granted_capacity if self.granted_capacity else 8
            ranks = <int *>PyMem_Realloc(self.granted_rank, capacity * sizeof(int))
            if ranks == NULL:
                raise MemoryError()
            self.granted_rank = ranks
            nexts = <int *>PyMem_Realloc(self.granted_next, capacity * sizeof(int))
            if nexts == NULL:
                raise MemoryError()
            self.granted_next = nexts
            for i in range(capacity - 1, self.granted_capacity - 1, -1):
                nexts[i] = self.granted_free
                self.granted_free = i
            self.granted_capacity = capacity
        entry = self.granted_free
        self.granted_free = self.granted_next[entry]
        self.granted_rank[entry] = rank
        self.granted_next[entry] = -1
        table_insert(self.granted_table, self.granted_mask, rank, entry)
        self.granted_used += 1
        lease = &self.records[index]
        if lease.granted_tail < 0:
            lease.granted_head = entry
        else:
            self.granted_next[lease.granted_tail] = entry
        lease.granted_tail = entry
        return 0

    cdef int drop_granted(self, int index, bint revoke) except -1:
        """Empty lease *index*'s list of granted ranks, sending each a REVOKE if *revoke*."""
        cdef Lease *lease = &self.records[index]
        cdef int entry = lease.granted_head, following
        while entry >= 0:
            following = self.granted_next[entry]
            if revoke:
                lease.revoking += 1
                self.revokes_sent += 1
                self.outbox.push(self.granted_rank[entry], REVOKE, 0)
            table_remove(self.granted_table, self.granted_mask, <const char *>self.granted_rank, sizeof(int), entry)
            self.granted_used -= 1
            self.granted_next[entry] = self.granted_free
            self.granted_free = entry
            entry = following
        lease.granted_head = lease.granted_tail = -1
        return 0

    cdef int grow_records(self) except -1:
        cdef int capacity = 2 * self.record_capacity if self.record_capacity else 8, i
        cdef Lease *records = <Lease *>PyMem_Realloc(self.records, capacity * sizeof(Lease))
        if records == NULL:
            raise MemoryError()
        self.records = records
        for i in range(capacity - 1, self.record_capacity - 1, -1):  # the lowest new record on top
            records[i].live = records[i].recheck = False
            records[i].member[0] = records[i].member[1] = -1
            records[i].next_free = self.free_records
            self.free_records = i
        self.record_capacity = capacity
        return 0

    cdef int waiting_push(self, int node) except -1:
        cdef int capacity = self.waiting_mask + 1, i
        cdef int *ring
        if self.waiting_count == capacity:
            ring = <int *>PyMem_Malloc(2 * capacity * sizeof(int))
            if ring == NULL:
                raise MemoryError()
            for i in range(self.waiting_count):
                ring[i] = self.waiting[(self.waiting_head + i) & self.waiting_mask]
            PyMem_Free(self.waiting)
            self.waiting, self.waiting_head, self.waiting_mask = ring, 0, 2 * capacity - 1
        self.waiting[(self.waiting_head + self.waiting_count) & self.waiting_mask] = node
        self.waiting_count += 1
        return 0

    # Insertion-ordered sets as adaptive.py's dicts of None: adding a member keeps its place, removing and
    # adding again moves it to the end; adding to revocable takes a node out of parked, and back.
    cdef void set_add(self, int which, int index) noexcept:
        cdef Lease *lease = &self.records[index]
        cdef int link = 1 if which == OWING else 0
        cdef OrderedSet *ordered = &self.sets[which]
        if lease.member[link] == which:
            return
        if lease.member[link] >= 0:
            self.set_remove(lease.member[link], index)
        lease.member[link] = which
        lease.prev[link], lease.next[link] = ordered.tail, -1
        if ordered.tail >= 0:
            self.records[ordered.tail].next[link] = index
        else:
            ordered.head = index
        ordered.tail = index
        ordered.count += 1

    cdef void set_remove(self, int which, int index) noexcept:
        cdef Lease *lease = &self.records[index]
        cdef int link = 1 if which == OWING else 0
        cdef OrderedSet *ordered = &self.sets[which]
        if lease.member[link] != which:
            return
        lease.member[link] = -1
        if lease.prev[link] >= 0:
            self.records[lease.prev[link]].next[link] = lease.next[link]
        else:
            ordered.head = lease.next[link]
        if lease.next[link] >= 0:
            self.records[lease.next[link]].prev[link] = lease.prev[link]
        else:
            ordered.tail = lease.prev[link]
        ordered.count -= 1

    # -- the FlowControl interface, for Python -------------------------------

    cdef int checked(self, object rank, bint needs_pool) except -1:
        cdef long value = rank
        if not 0 <= value < self.ranks:
            raise IndexError(f"rank {value} is out of range 0..{self.ranks - 1}")
        if needs_pool and self.credits == NULL:
            raise RuntimeError(_DETACHED)
        return value

    @property
    def name(self) -> str:
        """The flow-control mode's name (the mode table's)."""
        return self.mode_name

    @property
    def has_credits(self) -> bool:
        """Always: every mode a ledger keeps has credits (unconstrained mode needs none)."""
        return True

    def try_acquire(self, dest) -> bool:
        """Take one credit for *dest*; True if one was taken."""
        return self.try_take(self.checked(dest, True))

    def available(self, dest) -> int:
        """Send credits usable for *dest* now."""
        return self.credits_for(self.checked(dest, True))

    def take_piggyback(self, dest) -> int:
        """Credits to carry in the tag of a payload leaving for *dest* now."""
        return self.piggyback_for(self.checked(dest, False))

    def ask(self, dest, long long queued) -> None:
        """*queued* sends wait for *dest* and this rank found no credit for it: adaptive mode asks."""
        if self.mode == ADAPTIVE_MODE:
            self.ask_for(self.checked(dest, True), queued)

    def on_deferred(self, dest, long long queued) -> None:
        """A send to *dest* was deferred (*queued* wait now): adaptive mode counts it, and asks if need be."""
        cdef int rank
        if self.mode == ADAPTIVE_MODE:
            rank = self.checked(dest, True)
            if self.deferred_to(rank):
                self.ask_for(rank, queued)

    def on_undeferred(self, dest, long long count) -> None:
        """*count* deferred sends to *dest* left or were dropped (adaptive mode counts them)."""
        if self.mode == ADAPTIVE_MODE:
            self.undeferred_to(self.checked(dest, True), count)

    def on_arrival(self, source, long long tag) -> bool:
        """Account one payload from *source*; True if its tag brought credits."""
        return bool(self.arrival(self.checked(source, True), tag))

    def on_release(self, source) -> None:
        """The application released a payload from *source* (credit messages it causes go to the outbox)."""
        self.release(self.checked(source, True))

    def on_credit_message(self, source, int kind, long long count) -> None:
        """A credit message of *kind* carrying *count* arrived from *source*."""
        self.credit_message(self.checked(source, True), kind, count)

    def lease_count(self) -> int:
        """Nodes that hold credits of this rank now (adaptive mode)."""
        cdef int index, count = 0
        if self.mode == ADAPTIVE_MODE:
            for index in range(self.record_capacity):
                if self.records[index].live and self.records[index].held:
                    count += 1
        return count

    def credit_state_bytes(self) -> int:
        """Private state: rank mode owed, unreturned and credits per rank; node mode owed and unreturned per
        node; adaptive mode what adaptive.py counts of its leases and queues."""
        if self.mode == ADAPTIVE_MODE:
            return (LEASE_BYTES * self.live_count
                    + QUEUE_ENTRY_BYTES * (self.waiting_count + self.sets[REVOCABLE].count + self.sets[PARKED].count
                                           + self.sets[OWING].count)
                    + GRANTED_BYTES * self.granted_used)
        return (2 * self.groups if self.node_mode else 3 * self.ranks) * sizeof(int64_t)

    def shared_state_bytes(self) -> int:
        """Bytes of credit state in node-shared memory (the node's pool, and adaptive mode's tokens and demand)."""
        if self.mode == ADAPTIVE_MODE:
            return 3 * self.ranks * sizeof(int64_t)
        return self.ranks * sizeof(int64_t) if self.node_mode else 0

    def stall_lines(self, destinations) -> list:
        """What a stall report says of this mode's state beyond credits per destination (adaptive mode)."""
        if self.mode != ADAPTIVE_MODE:
            return []
        asked = [d for d in destinations if mailrail_load(&self.tokens[self.checked(d, True)]) == 0]
        lines = [
            f"  this node asked {len(asked)} of them for credit and awaits the answer"
            + (f" ({', '.join(map(str, asked[:16]))})" if asked else "")
        ]
        cdef int index, revoking = 0
        for index in range(self.record_capacity):
            if self.records[index].live:
                revoking += self.records[index].revoking
        lines.append(
            f"  as a receiver: {self.recv_slots - self.free} of {self.recv_slots} slots lent to "
            f"{self.lease_count()} node(s), {self.waiting_count} node(s) waiting, {revoking} revoke(s) unanswered"
        )
        return lines

    def detach(self) -> None:
        """Forget the node-shared memory before it is freed: only the counters stay readable."""
        if self.shared:
            self.credits = NULL
            self.tokens = NULL
            self.demands = NULL
            self.group_map = NULL
            self.ranks_per_group = 1
            self.owner = None

    def adaptive_state(self) -> dict:
        """Adaptive mode's receiver state as adaptive.py keeps it (for tests): ``free``, ``leases`` (node ->
        ``(target, held, unreturned, owed, demand, revoking, recheck, granted ranks)``), and the nodes in ``waiting``,
        ``revocable``, ``parked`` and ``owing``, in order."""
        if self.mode != ADAPTIVE_MODE:
            raise AttributeError(f"{self.name} mode has no leases")
        cdef int index, i, entry
        cdef Lease *lease
        leases = {}
        for index in range(self.record_capacity):
            lease = &self.records[index]
            if lease.live:
                granted = []
                entry = lease.granted_head
                while entry >= 0:
                    granted.append(self.granted_rank[entry])
                    entry = self.granted_next[entry]
                leases[lease.node] = (lease.target, lease.held, lease.unreturned, lease.owed, lease.demand,
                                      lease.revoking, bool(lease.recheck), granted)
        waiting = [self.waiting[(self.waiting_head + i) & self.waiting_mask] for i in range(self.waiting_count)]
        cdef list nodes
        ordered = []
        for which, link in ((REVOCABLE, 0), (PARKED, 0), (OWING, 1)):
            nodes = []
            index = self.sets[which].head
            while index != -1:
                nodes.append(self.records[index].node)
                index = self.records[index].next[link]
            ordered.append(nodes)
        revocable, parked, owing = ordered
        return {"free": self.free, "leases": leases, "waiting": waiting, "revocable": revocable, "parked": parked,
                "owing": owing}

    # Receiver- and sender-side state, as live int64 views (what the reference classes expose as arrays).
    @property
    def owed(self):
        """Rank and node modes, per sending group: credits released and not yet returned."""
        if self.mode == ADAPTIVE_MODE:
            raise AttributeError("adaptive mode keeps owed credits per lease (adaptive_state())")
        return self._private[0]

    @property
    def unreturned(self):
        """Rank and node modes, per sending group: payloads arrived and not yet returned."""
        if self.mode == ADAPTIVE_MODE:
            raise AttributeError("adaptive mode keeps unreturned credits per lease (adaptive_state())")
        return self._private[1]

    @property
    def send_credits(self):
        """Rank mode: credits per destination rank (node and adaptive modes keep them in the node's pool)."""
        if self.shared:
            raise AttributeError(f"{self.name} credits live in the node's shared pool, not in the ledger")
        return self._private[2]
