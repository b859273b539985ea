# Offsets of variable-size records, Arrow's layout (record i is data[offsets[i]:offsets[i + 1]]): their index
# types, and the check every compiled kernel over them makes before it reads (or writes) by them.
cimport cython
from libc.stdint cimport int32_t, int64_t

ctypedef fused offset_t:
    int32_t
    int64_t


cdef inline int check_offsets(const offset_t[::1] offsets, Py_ssize_t nbytes) except -1:
    """Offsets must be ascending, within the data: a wrong one would read (and write) outside it."""
    cdef Py_ssize_t i, n = offsets.shape[0]
    cdef bint descends = False
    if n == 0:
        raise ValueError("offsets: n records have n + 1 offsets, got none")
    if offsets[0] < 0 or offsets[n - 1] > nbytes:
        raise ValueError(f"offsets from {offsets[0]} to {offsets[n - 1]} for {nbytes} bytes of data")
    # No exit from the loop: the compiler can then compare many offsets at once; the place is found after.
    with cython.boundscheck(False), cython.wraparound(False):
        for i in range(n - 1):
            descends |= offsets[i + 1] < offsets[i]
    if descends:
        for i in range(n - 1):
            if offsets[i + 1] < offsets[i]:
                raise ValueError(f"offsets must ascend: offset {i + 1} ({offsets[i + 1]}) is below offset {i}")
    return 0
