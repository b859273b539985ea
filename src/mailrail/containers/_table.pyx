# cython: boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""One-word keys' probes of a :class:`~mailrail.containers.table.KeyTable`, compiled: the same slots, the same dense
storage and the same results as the table's numpy passes (``table.py``), one key after another in C.

A slot holds ``dense index + 1`` (0 empty, -1 a tombstone); *stored* holds each dense entry's word (a one-word key
is its own fingerprint), *slot_of* each entry's slot; a key's probe starts at ``hash & mask`` and passes other keys
and tombstones up to the key or an empty slot.  New keys take dense indices in the order of their first occurrence
in the batch and the empty slot their probe ended at, so a batch's answers are the numpy passes' answers (which slot
a key sits in may differ, which nothing outside the table sees).  :func:`place` puts every entry into the slots
of a rebuilt table, for keys of any width (it needs only their hashes).
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t

cdef extern from *:
    """
    #define MAILRAIL_TABLE_PREFETCH(address) __builtin_prefetch(address)
    """
    void prefetch "MAILRAIL_TABLE_PREFETCH"(const void* address) noexcept nogil

ctypedef fused slot_t:
    int32_t
    int64_t

#: Keys ahead whose slot (and, half as far ahead, whose stored word) a probe prefetches: a table larger than the
#: caches costs a memory latency or two per key, and they overlap when asked for early.
cdef enum:
    AHEAD = 16


cdef inline void _prefetch(const slot_t* slots, const uint64_t* stored, const uint64_t* hashes, uint64_t mask,
                           Py_ssize_t k, Py_ssize_t n) noexcept nogil:
    cdef slot_t slot
    if k + AHEAD < n:
        prefetch(&slots[hashes[k + AHEAD] & mask])
    if k + AHEAD // 2 < n:
        slot = slots[hashes[k + AHEAD // 2] & mask]
        if slot > 0:
            prefetch(&stored[slot - 1])


cdef inline int64_t _find(const slot_t* slots, const uint64_t* stored, uint64_t word, uint64_t h, uint64_t mask,
                          int64_t* stop) noexcept nogil:
    """The dense index of the key *word* (its hash *h*), or -1 with *stop* the empty slot its probe ended at."""
    cdef int64_t p = <int64_t>(h & mask)
    cdef slot_t slot
    while True:
        slot = slots[p]
        if slot == 0:
            stop[0] = p
            return -1
        if slot > 0 and stored[slot - 1] == word:
            return slot - 1
        p = <int64_t>((<uint64_t>p + 1) & mask)


def insert_words(
    slot_t[::1] slots,
    uint64_t[::1] stored,
    slot_t[::1] slot_of,
    const uint64_t[::1] words,
    const uint64_t[::1] hashes,
    Py_ssize_t start,
    int64_t size,
    int64_t limit,
    int64_t[::1] index,
    uint8_t[::1] new,
):
    """Inserts the keys ``words[start:]`` (their *hashes*) into a table of *size* keys: each key's dense index into
    *index*, 1 into *new* where the position added its key.  Stops before a key that would make the table hold more
    than *limit* keys.  Returns ``(next, size)``: the first position not done, and the table's size after."""
    cdef Py_ssize_t k, n = words.shape[0]
    cdef uint64_t mask = <uint64_t>(slots.shape[0] - 1)
    if n != hashes.shape[0] or n != index.shape[0] or n != new.shape[0]:
        raise ValueError(f"words, hashes, index and new must be as long; got {n}, {hashes.shape[0]}, "
                         f"{index.shape[0]} and {new.shape[0]}")
    if slots.shape[0] & (slots.shape[0] - 1) or limit > stored.shape[0] or limit > slot_of.shape[0]:
        raise ValueError(f"a table of {slots.shape[0]} slots and {stored.shape[0]} entries takes no {limit} keys")
    if start >= n:
        return n, size
    cdef Py_ssize_t stopped = n
    cdef int64_t found, stop
    with nogil:
        for k in range(start, n):
            _prefetch(&slots[0], &stored[0], &hashes[0], mask, k, n)
            found = _find(&slots[0], &stored[0], words[k], hashes[k], mask, &stop)
            if found < 0:
                if size >= limit:
                    stopped = k
                    break
                slots[stop] = <slot_t>(size + 1)
                stored[size] = words[k]
                slot_of[size] = <slot_t>stop
                found = size
                new[k] = 1
                size += 1
            index[k] = found
    return stopped, size


def lookup_words(
    const slot_t[::1] slots,
    const uint64_t[::1] stored,
    const uint64_t[::1] words,
    const uint64_t[::1] hashes,
    int64_t[::1] index,
):
    """Each key's dense index into *index* (-1 where absent)."""
    cdef Py_ssize_t k, n = words.shape[0]
    cdef uint64_t mask = <uint64_t>(slots.shape[0] - 1)
    if n != hashes.shape[0] or n != index.shape[0]:
        raise ValueError(f"words, hashes and index must be as long; got {n}, {hashes.shape[0]} and {index.shape[0]}")
    if slots.shape[0] & (slots.shape[0] - 1):
        raise ValueError(f"a table has a power of two of slots; got {slots.shape[0]}")
    if n == 0:
        return
    cdef int64_t stop
    with nogil:
        for k in range(n):
            _prefetch(&slots[0], &stored[0], &hashes[0], mask, k, n)
            index[k] = _find(&slots[0], &stored[0], words[k], hashes[k], mask, &stop)


def place(slot_t[::1] slots, slot_t[::1] slot_of, const uint64_t[::1] hashes):
    """Puts dense entries ``0..n-1`` (their *hashes*) into the empty *slots* of a rebuilt table, each at the first
    empty slot from ``hash & mask`` on, and writes each one's slot into *slot_of*."""
    cdef Py_ssize_t i, n = hashes.shape[0]
    cdef uint64_t mask = <uint64_t>(slots.shape[0] - 1)
    cdef int64_t p
    if slots.shape[0] & (slots.shape[0] - 1) or n > slot_of.shape[0] or 2 * n > slots.shape[0]:
        raise ValueError(f"a table of {slots.shape[0]} slots and {slot_of.shape[0]} entries takes no {n} keys")
    with nogil:
        for i in range(n):
            p = <int64_t>(hashes[i] & mask)
            while slots[p] != 0:
                p = <int64_t>((<uint64_t>p + 1) & mask)
            slots[p] = <slot_t>(i + 1)
            slot_of[i] = <slot_t>p
