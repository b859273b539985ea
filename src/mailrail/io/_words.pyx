# cython: boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Lines split into words, compiled (``words.py`` holds the Arrow reference, the same function, and chooses this
one when it is built).

One pass over the lines' bytes, no branch on whether a byte ends or begins a word: every byte is copied to the
output and the output position advances past it only when it is not whitespace; a word's start is written at
every byte and kept (the word count advanced) only where a word begins.  Words end at line ends because each line
begins as if after whitespace.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t
from libc.string cimport memcpy
from mailrail._offsets cimport check_offsets, offset_t

import numpy as np

cdef extern from *:
    """
    #include <stdint.h>
    #include <string.h>
    /* Where the first ASCII whitespace byte (0x20, 0x09-0x0D) is among the 8 at p; 8 if none.  Little-endian:
       the 8 bytes as one word, a byte's high bit set where it is 0x20 (exactly: no borrow crosses a byte) or
       between 0x09 and 0x0D (exactly, as "hasbetween" in Bit Twiddling Hacks), the lowest set bit found. */
    static inline int mailrail_first_space(const uint8_t* p) {
    #if defined(__GNUC__) && defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        const uint64_t ones = 0x0101010101010101ULL, low = 0x7F7F7F7F7F7F7F7FULL, high = 0x8080808080808080ULL;
        uint64_t x, low7, t, found;
        memcpy(&x, p, 8);
        low7 = x & low;
        t = x ^ (ones * 0x20);
        found = ~(((t & low) + low) | t | low);
        found |= (ones * (127 + 14) - low7) & ~x & (low7 + ones * (127 - 8)) & high;
        return found ? __builtin_ctzll(found) >> 3 : 8;
    #else
        int i;
        for (i = 0; i < 8; i++) {
            if (p[i] == 0x20 || (uint8_t)(p[i] - 0x09) < 5) return i;
        }
        return 8;
    #endif
    }
    """
    int first_space "mailrail_first_space"(const uint8_t* p) noexcept nogil

ctypedef fused word_offset_t:
    int32_t
    int64_t

#: 1 for the bytes ``bytes.split()`` splits on (0x20 and 0x09-0x0D), else 0.
cdef uint8_t SPACE[256]
cdef int _byte
for _byte in range(256):
    SPACE[_byte] = _byte == 0x20 or 0x09 <= _byte <= 0x0D
cdef uint8_t NO_BYTES = 0
#: Below this many bytes of lines, the words' offsets are int32.
cdef int64_t NARROW_BYTES = 1LL << 31


cdef inline bint is_valid(const uint8_t* validity, int64_t bit) noexcept nogil:
    return validity == NULL or (validity[bit >> 3] >> (bit & 7)) & 1


cdef Py_ssize_t split_into(
    const offset_t* offsets,
    Py_ssize_t lines,
    const uint8_t* data,
    const uint8_t* validity,
    int64_t first_bit,
    uint8_t* out,
    word_offset_t* starts,
) noexcept nogil:
    """Write the words of the lines to *out*, back to back, and where each begins to *starts* (its last entry the
    end of the last word); the number of words."""
    cdef Py_ssize_t line, words = 0
    cdef int64_t at, end, position = 0
    cdef int length
    for line in range(lines):
        if not is_valid(validity, first_bit + line):
            continue
        at = offsets[line]
        end = offsets[line + 1]
        while at < end:
            if SPACE[data[at]]:
                at += 1
                continue
            starts[words] = <word_offset_t>position
            words += 1
            while True:  # the word, 8 bytes at a time while the line has 8 more
                if at + 8 <= end:
                    length = first_space(data + at)
                    memcpy(out + position, data + at, 8)  # (the bytes past the word are overwritten next)
                    at += length
                    position += length
                    if length < 8:
                        break
                else:
                    while at < end and not SPACE[data[at]]:
                        out[position] = data[at]
                        at += 1
                        position += 1
                    break
    starts[words] = <word_offset_t>position
    return words


def split_words(
    const offset_t[::1] offsets,
    const uint8_t[::1] data,
    const uint8_t[::1] validity,
    int64_t first_bit,
    bint wide=False,
):
    """The words of lines packed as Arrow packs them (line ``i`` is ``data[offsets[i]:offsets[i + 1]]``; a line
    whose bit ``first_bit + i`` of *validity* is 0 is null, and has no words; an empty *validity*: no nulls), as
    ``(word_offsets, word_data)``: ``word_offsets`` int32 when the lines hold fewer than 2**31 bytes (and not
    *wide*), else int64.  See :func:`mailrail.io.words.split_words_arrow`."""
    check_offsets(offsets, data.shape[0])
    cdef Py_ssize_t lines = offsets.shape[0] - 1, words
    cdef int64_t nbytes = offsets[lines] - offsets[0]
    if validity.shape[0] != 0 and validity.shape[0] * 8 < first_bit + lines:
        raise ValueError(f"a validity bitmap of {validity.shape[0]} bytes for bits {first_bit} to {first_bit + lines}")
    # At most one word every two bytes of a line, rounded up: fewer than nbytes / 2 + lines.
    cdef Py_ssize_t bound = nbytes // 2 + lines + 1
    word_data = np.empty(max(nbytes, 1), dtype=np.uint8)
    cdef uint8_t[::1] out = word_data
    cdef const uint8_t* base = &NO_BYTES if data.shape[0] == 0 else &data[0]
    cdef const uint8_t* bits = NULL if validity.shape[0] == 0 else &validity[0]
    cdef int32_t[::1] starts32
    cdef int64_t[::1] starts64
    if nbytes < NARROW_BYTES and not wide:
        word_offsets = np.empty(bound, dtype=np.int32)
        starts32 = word_offsets
        with nogil:
            words = split_into(&offsets[0], lines, base, bits, first_bit, &out[0], &starts32[0])
    else:
        word_offsets = np.empty(bound, dtype=np.int64)
        starts64 = word_offsets
        with nogil:
            words = split_into(&offsets[0], lines, base, bits, first_bit, &out[0], &starts64[0])
    return word_offsets[: words + 1], word_data[: word_offsets[words]]
