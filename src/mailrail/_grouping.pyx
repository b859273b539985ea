# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""Records grouped by destination rank, compiled: the counting sort of :func:`mailrail.channels.group_by_rank`.

One pass counts each rank's records, one pass copies each record to its rank's next place: the same result as the
reference's stable radix sort and gather (``channels.py``).  Both passes walk the four quarters of the batch side by
side, each with its own counters: a rank's counter is then not read back right after its own increment, which
would chain every record of a rank behind the last.
"""

from libc.stdint cimport int64_t, uint8_t, uint64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy

cdef enum:
    LANES = 4


cdef inline void _copy(uint8_t* out, const uint8_t* data, Py_ssize_t size) noexcept nogil:
    if size == 8:  # constant sizes: one load and one store each
        memcpy(out, data, 8)
    elif size == 4:
        memcpy(out, data, 4)
    elif size == 16:
        memcpy(out, data, 16)
    else:
        memcpy(out, data, size)


def group_by_rank(
    const int64_t[::1] dests, const uint8_t[::1] data, Py_ssize_t record_size, int64_t[::1] counts, uint8_t[::1] out
) -> int:
    """Count each rank's records into *counts* (one per rank) and return how many ranks have some; unless that is
    one, copy the records of *data* (``record_size`` bytes each, one per destination) into *out*, grouped by rank in
    ascending order and in their own order within a rank.  A destination outside ``0 .. len(counts) - 1`` raises
    ``ValueError`` (the callers checked them first: a bug)."""
    cdef Py_ssize_t n = dests.shape[0], ranks = counts.shape[0], quarter = (n + LANES - 1) // LANES
    cdef Py_ssize_t i, lane, rank, used = 0, bad = -1, start, stop
    cdef int64_t total = 0, d
    cdef int64_t* at
    if data.shape[0] != n * record_size or out.shape[0] != n * record_size:
        raise ValueError(f"{n} destinations for {data.shape[0]} and {out.shape[0]} bytes of {record_size}-byte records")
    at = <int64_t*>calloc(LANES * ranks + 1, sizeof(int64_t))  # lane-major: lane's counters, then its places
    if at == NULL:
        raise MemoryError()
    try:
        with nogil:
            for i in range(quarter):
                for lane in range(LANES):
                    if i + lane * quarter < n:
                        d = dests[i + lane * quarter]
                        if <uint64_t>d >= <uint64_t>ranks:
                            bad = i + lane * quarter
                            break
                        at[lane * ranks + d] += 1
                if bad >= 0:
                    break
            if bad < 0:
                for rank in range(ranks):
                    counts[rank] = 0
                    for lane in range(LANES):  # the counters become each lane's first place for the rank
                        d = at[lane * ranks + rank]
                        at[lane * ranks + rank] = total
                        total += d
                        counts[rank] += d
                    used += counts[rank] != 0
                if used > 1:
                    for i in range(quarter):
                        for lane in range(LANES):
                            start = i + lane * quarter
                            if start < n:
                                stop = lane * ranks + dests[start]
                                _copy(&out[0] + at[stop] * record_size, &data[0] + start * record_size, record_size)
                                at[stop] += 1
        if bad >= 0:
            raise ValueError(f"destination {dests[bad]} at position {bad} is not a rank of 0 .. {ranks - 1}")
        return used
    finally:
        free(at)
