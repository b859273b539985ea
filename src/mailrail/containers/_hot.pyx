# cython: boundscheck=False, wraparound=False, initializedcheck=False
"""The CountingSet sender's lookup of one-word keys in its table of hot keys, compiled (``hot.py`` holds its
numpy reference, the same function, and chooses this one when it is built).

One pass over the batch, no branch on the outcome: a key is hot or not at random (about half and half for Zipf
keys), and a mispredicted branch per key costs more than the lookup itself (docs: performance, "Containers
and active messages").
"""

from libc.stdint cimport int64_t, uint64_t

#: Knuth's multiplicative constant: the hash of a one-word key (``CountingSet._hot_hashes``).
cdef uint64_t SEED = 0x9E3779B97F4A7C15ULL


def split_hot(
    const uint64_t[::1] words,
    const uint64_t[::1] table,
    unsigned int shift,
    double[::1] held,
    int64_t[::1] cold,
):
    """See :func:`mailrail.containers.hot.split_hot_numpy`: the same arguments, result and checks."""
    cdef Py_ssize_t count = words.shape[0], slots = table.shape[0], i, cold_count = 0
    cdef uint64_t hashed, slot
    cdef int hot
    if held.shape[0] != slots:
        raise ValueError(f"split_hot: {held.shape[0]} held counts for a table of {slots} slots")
    if cold.shape[0] < count:
        raise ValueError(f"split_hot: room for {cold.shape[0]} cold positions, {count} keys")
    if shift == 0 or shift >= 64 or slots != (<Py_ssize_t>1) << (64 - shift):
        raise ValueError(f"split_hot: a table of {slots} slots does not take slot = hash >> {shift}")
    with nogil:
        for i in range(count):
            hashed = words[i] * SEED
            slot = hashed >> shift
            hot = table[slot] == hashed
            held[slot] += hot
            cold[cold_count] = i  # written always, kept only when cold: no branch
            cold_count += 1 - hot
    return cold_count
