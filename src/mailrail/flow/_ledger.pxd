# The compiled credit ledger's C-level interface, cimported by mailrail._protocol (see _ledger.pyx).
from libc.stdint cimport int32_t, int64_t


cdef class CreditLedger:
    cdef readonly bint credits_change_silently  # node mode: another rank may refill the shared pool
    cdef readonly long long credits_per_pair, return_threshold
    cdef readonly long long unreturned_total, unreturned_high_water, piggybacked
    cdef readonly bint node_mode
    cdef long long max_tag
    cdef bint piggyback
    cdef int ranks, groups, ranks_per_group
    cdef int64_t *credits            # sender side, per destination rank: private (rank) or node-shared (node)
    cdef const int32_t *group_map    # node mode on real nodes: rank -> node, in node-shared memory
    cdef int64_t *owed_counts        # receiver side, per group: released, not yet returned
    cdef int64_t *unreturned_counts  # receiver side, per group: arrived, not yet returned
    cdef object _private             # the numpy arrays that own the private counters above
    cdef object owner                # keeps the memory behind credits/group_map alive (node mode)

    cdef int group_of(self, int rank) noexcept
    cdef int checked(self, object rank, bint needs_pool) except -1

    # The per-message decisions, called by the compiled Endpoint without a Python frame.
    cdef bint try_take(self, int dest) noexcept
    cdef long long piggyback_for(self, int dest) noexcept
    cdef int arrival(self, int source, long long tag) except -1
    cdef long long release(self, int source) noexcept
    cdef int credit_return(self, int source, long long count) except -1
