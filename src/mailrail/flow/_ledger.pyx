# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled credit ledger: :mod:`mailrail.flow`'s rank and node credits for the compiled transport.

:class:`CreditLedger` makes exactly the decisions of
:class:`~mailrail.flow.rank.RankCredits` and :class:`~mailrail.flow.node.NodeCredits`
(the sans-I/O reference, which the Python transport runs), with the same errors;
``tests/flow/test_ledger.py`` drives both with the same random events and
compares every result.  The compiled Endpoint (``mailrail._protocol``) calls the
``cdef`` methods per message; Python calls the
:class:`~mailrail.flow.base.FlowControl` methods, which share them.
"""

from libc.stdint cimport int32_t, int64_t

import numpy as np

from mailrail.errors import ProtocolError

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
    """
    int64_t mailrail_load(int64_t *p) noexcept nogil
    int64_t mailrail_add(int64_t *p, int64_t v) noexcept nogil
    int mailrail_take(int64_t *p) noexcept nogil


cdef int64_t *_data(object array):
    """The address of a C-contiguous int64 numpy array's first element."""
    return <int64_t *><size_t>array.ctypes.data


cdef class CreditLedger:
    """Rank- or node-based credit accounting in C, with the interface and decisions of
    :class:`~mailrail.flow.rank.RankCredits` / :class:`~mailrail.flow.node.NodeCredits`.

    *mode* ``"rank"``: credits per (sender rank, receiver rank), optionally piggybacked
    in payload tags up to *max_tag*.  ``"node"``: the node's int64 credit counters at
    address *pool* (one per destination rank, shared by the node's ranks and updated
    atomically); sending ranks are grouped into *nodes* by an int32 rank-to-node map at
    address *node_map*, or as consecutive blocks of *ranks_per_node*; *owner* keeps that
    memory alive.
    """

    def __init__(self, str mode, int ranks, long long credits_per_pair, long long return_threshold, *,
                 bint piggyback=True, long long max_tag=32767, int nodes=0, int ranks_per_node=0,
                 node_map=None, pool=None, owner=None):
        if self._private is not None:
            raise RuntimeError("CreditLedger is initialized once")
        if ranks < 1 or credits_per_pair < 1 or return_threshold < 1 or max_tag < 1:
            raise ValueError("ranks, credits_per_pair, return_threshold and max_tag must be >= 1")
        if mode == "rank":
            self.groups = ranks
            credits = np.full(ranks, credits_per_pair, dtype=np.int64)
            self.credits = _data(credits)
        elif mode == "node":
            if nodes < 1 or pool is None or (node_map is None) == (ranks_per_node < 1):
                raise ValueError("node mode needs nodes >= 1, a pool address, and either ranks_per_node >= 1 "
                                 "or a node_map address")
            self.node_mode = self.credits_change_silently = True
            self.groups = nodes
            credits = None
            self.credits = <int64_t *><size_t>pool
            self.group_map = NULL if node_map is None else <const int32_t *><size_t>node_map
            self.owner = owner
        else:
            raise ValueError(f"mode must be 'rank' or 'node', not {mode!r}")
        self.ranks = ranks
        self.ranks_per_group = ranks_per_node if ranks_per_node > 0 else 1
        self.credits_per_pair = credits_per_pair
        self.return_threshold = return_threshold
        self.max_tag = max_tag
        self.piggyback = piggyback and not self.node_mode
        owed = np.zeros(self.groups, dtype=np.int64)
        unreturned = np.zeros(self.groups, dtype=np.int64)
        self.owed_counts, self.unreturned_counts = _data(owed), _data(unreturned)
        self._private = (owed, unreturned, credits)

    # -- the per-message decisions -------------------------------------------

    cdef int group_of(self, int rank) noexcept:
        return self.group_map[rank] if self.group_map != NULL else rank // self.ranks_per_group

    cdef bint try_take(self, int dest) noexcept:
        """Take one credit for *dest*: True if taken, False if none is left."""
        if self.node_mode:
            return mailrail_take(&self.credits[dest])
        if self.credits[dest] <= 0:
            return False
        self.credits[dest] -= 1
        return True

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
            self.credit_return(source, tag)
            return 1
        return 0

    cdef long long release(self, int source) noexcept:
        """The application released a payload from *source*: the credits to return to it now (0: none yet)."""
        cdef int group = self.group_of(source)
        self.owed_counts[group] += 1
        cdef long long count = self.owed_counts[group]
        if count < self.return_threshold:
            return 0
        self.owed_counts[group] = 0
        self.unreturned_counts[group] -= count
        self.unreturned_total -= count
        return count

    cdef int credit_return(self, int source, long long count) except -1:
        """A credit message from *source* returned *count* credits."""
        cdef long long now
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

    # -- the FlowControl interface, for Python -------------------------------

    cdef int checked(self, object rank, bint needs_pool) except -1:
        cdef long value = rank
        if not 0 <= value < self.ranks:
            raise IndexError(f"rank {value} is out of range 0..{self.ranks - 1}")
        if needs_pool and self.credits == NULL:
            raise RuntimeError("the credit ledger was detached from its shared memory (finalize())")
        return value

    @property
    def name(self) -> str:
        """The flow-control mode: ``"rank"`` or ``"node"``."""
        return "node" if self.node_mode else "rank"

    def try_acquire(self, dest) -> bool:
        """Take one credit for *dest*; True if one was taken."""
        return self.try_take(self.checked(dest, True))

    def available(self, dest) -> int:
        """Send credits usable for *dest* now."""
        cdef int rank = self.checked(dest, True)
        return mailrail_load(&self.credits[rank]) if self.node_mode else self.credits[rank]

    def take_piggyback(self, dest) -> int:
        """Credits to carry in the tag of a payload leaving for *dest* now."""
        return self.piggyback_for(self.checked(dest, False))

    def on_arrival(self, source, long long tag) -> bool:
        """Account one payload from *source*; True if its tag brought credits."""
        return bool(self.arrival(self.checked(source, True), tag))

    def on_release(self, source):
        """The application released a payload from *source*: ``(source, count)`` to return now, or None."""
        cdef int rank = self.checked(source, True)
        cdef long long count = self.release(rank)
        return (rank, count) if count else None

    def on_credit_return(self, source, long long count) -> None:
        """A credit message from *source* returned *count* credits."""
        self.credit_return(self.checked(source, True), count)

    def credit_state_bytes(self) -> int:
        """Private state: owed and unreturned per group, plus the credits per destination in rank mode."""
        return (2 * self.groups if self.node_mode else 3 * self.ranks) * sizeof(int64_t)

    def shared_state_bytes(self) -> int:
        """Bytes of credit state in node-shared memory (the node's pool)."""
        return self.ranks * sizeof(int64_t) if self.node_mode else 0

    def detach(self) -> None:
        """Forget the node-shared memory before it is freed: only the counters stay readable."""
        if self.node_mode:
            self.credits = NULL
            self.group_map = NULL
            self.ranks_per_group = 1
            self.owner = None

    # Receiver- and sender-side state, as live int64 views (what the reference classes expose as arrays).
    @property
    def owed(self):
        """Per sending group: credits released and not yet returned."""
        return self._private[0]

    @property
    def unreturned(self):
        """Per sending group: payloads arrived and not yet returned."""
        return self._private[1]

    @property
    def send_credits(self):
        """Rank mode: credits per destination rank (node mode keeps them in the node's pool)."""
        if self.node_mode:
            raise AttributeError("node credits live in the node's shared pool, not in the ledger")
        return self._private[2]
