# cython: boundscheck=False, wraparound=False, initializedcheck=False, cdivision=True
"""Variable-size keys compiled: their hash and a hash table of them (``varkeys.py`` holds the Python reference of
both, the same functions, and chooses these when they are built).

Keys are byte strings packed as Arrow packs them (``offsets``, ``n + 1`` int32 or int64, and ``data``, uint8):
key ``i`` is ``data[offsets[i]:offsets[i + 1]]``.
"""

from libc.stdint cimport int32_t, int64_t, uint8_t, uint64_t, uintptr_t
from libc.stdlib cimport free, malloc, realloc
from libc.string cimport memcmp, memcpy, memset
from mailrail._offsets cimport check_offsets, offset_t

import numpy as np

cdef extern from *:
    """
    #define MAILRAIL_PREFETCH(address) __builtin_prefetch(address)
    /* 8 bytes in the machine's order (one load), and the mask keeping a word's first n bytes (1 <= n <= 7). */
    static inline unsigned long long mailrail_load8(const void* p) {
        unsigned long long w;
        __builtin_memcpy(&w, p, 8);
        return w;
    }
    #if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    #define MAILRAIL_FIRST_BYTES(n) (~0ULL << (64 - 8 * (n)))
    #else
    #define MAILRAIL_FIRST_BYTES(n) (~0ULL >> (64 - 8 * (n)))
    #endif
    /* A string's HotStrings slot from its five zero-padded words: varkeys.hot_slots_numpy, the multipliers
       varkeys.HOT_MULTIPLIERS as literals (immediate operands: none reloaded from memory per string). */
    static inline long long mailrail_hot_slot(unsigned long long w0, unsigned long long w1, unsigned long long w2,
                                              unsigned long long w3, unsigned long long w4, long long length,
                                              int shift) {
        unsigned long long h = (unsigned long long)length * 0xE7037ED1A0B428DBULL;
        h ^= w0 * 0x9E3779B97F4A7C15ULL;
        h ^= w1 * 0xBF58476D1CE4E5B9ULL;
        h ^= w2 * 0x94D049BB133111EBULL;
        h ^= w3 * 0xD6E8FEB86659FD93ULL;
        h ^= w4 * 0xA0761D6478BD642FULL;
        h ^= h >> 32;
        return shift < 64 ? (long long)((h * 0x8EBC6AF09C88C6E3ULL) >> shift) : 0;
    }
    /* Whether a slot's five words and length are a string's (zero-padded words). */
    static inline int mailrail_same_hot(const uint64_t* a, int a_length, const uint64_t* b,
                                        int b_length) {
        return ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4])
                | (uint64_t)(a_length ^ b_length)) == 0;
    }
    /* hash_one's rounds over a key of at most 40 bytes whose 40 bytes from its start may be read: five words,
       masked to the key (masks: HOT_MASKS[length]), each round kept only where the key has that word.  No branch
       depends on the length, which varies from key to key; the loop over words mispredicts at its end. */
    static inline uint64_t mailrail_rounds_short(const uint8_t* key, int64_t length, uint64_t h,
                                                 const uint64_t* masks) {
        uint64_t r, keep;
        int j;
        for (j = 0; j < 5; j++) {
            r = (h ^ (mailrail_load8(key + 8 * j) & masks[j])) * 0xBF58476D1CE4E5B9ULL;
            r ^= r >> 32;
            keep = (uint64_t)0 - (uint64_t)(8 * j < length);
            h = (r & keep) | (h & ~keep);
        }
        return h;
    }
    /* Whether two keys of the same length (at most 40 bytes, both readable 40 bytes from their starts) are equal. */
    static inline int mailrail_same_short(const uint8_t* a, const uint8_t* b, const uint64_t* masks) {
        return (((mailrail_load8(a) ^ mailrail_load8(b)) & masks[0])
                | ((mailrail_load8(a + 8) ^ mailrail_load8(b + 8)) & masks[1])
                | ((mailrail_load8(a + 16) ^ mailrail_load8(b + 16)) & masks[2])
                | ((mailrail_load8(a + 24) ^ mailrail_load8(b + 24)) & masks[3])
                | ((mailrail_load8(a + 32) ^ mailrail_load8(b + 32)) & masks[4])) == 0;
    }
    """
    uint64_t rounds_short "mailrail_rounds_short"(const uint8_t* key, int64_t length, uint64_t h,
                                                  const uint64_t* masks) noexcept nogil
    bint same_short "mailrail_same_short"(const uint8_t* a, const uint8_t* b, const uint64_t* masks) noexcept nogil
    bint same_hot "mailrail_same_hot"(const uint64_t* a, int32_t a_length, const uint64_t* b,
                                      int32_t b_length) noexcept nogil
    void prefetch "MAILRAIL_PREFETCH"(const void* address) noexcept nogil
    int count_trailing_zeros "__builtin_ctzll"(uint64_t bits) noexcept nogil
    int64_t hot_slot "mailrail_hot_slot"(uint64_t w0, uint64_t w1, uint64_t w2, uint64_t w3, uint64_t w4,
                                         int64_t length, int shift) noexcept nogil
    uint64_t load8 "mailrail_load8"(const void* address) noexcept nogil
    uint64_t first_bytes "MAILRAIL_FIRST_BYTES"(int64_t n) noexcept nogil

#: Keys ahead of the one probed whose slot (and then entry, and then bytes) a batch prefetches: a table larger
#: than the caches costs a few memory latencies per probe, and they overlap when the batch asks for them early.
cdef enum:
    AHEAD = 12

#: Slots up to which a table is taken to stay in the caches (1 MiB of slots) and batches skip the prefetching.
cdef int64_t CACHED_SLOTS = 1 << 17

#: The hash's starting state and mixing constants (``partition.py``'s: splitmix64).
cdef uint64_t SEED = 0x9E3779B97F4A7C15ULL
cdef uint64_t M1 = 0xBF58476D1CE4E5B9ULL
cdef uint64_t M2 = 0x94D049BB133111EBULL
cdef uint8_t NO_BYTES = 0
#: A slot's low 32 bits: its key's dense index + 1 (0: empty); all ones: a tombstone.
cdef uint64_t LOW = 0xFFFFFFFFULL
cdef uint64_t TOMBSTONE_SLOT = 0xFFFFFFFFULL

cdef enum:
    CACHE_LINE = 64
    #: A short key, in 8-byte words: hashed and compared without a loop over its words, and the longest string a
    #: HotStrings slot holds (longer ones always leave).
    HOT_WORDS = 5
    RING = 16  # strings ahead whose slot a HotStrings pass prefetches (a power of two)

#: Bytes allocated past the arena's room, so that a short key's words are read whole (``same_bytes``).
cdef int64_t SLACK = HOT_WORDS * 8

#: The mask keeping a word's first n bytes, n = 0..8 (machine byte order).
cdef uint64_t BYTE_MASKS[9]
cdef int _n
for _n in range(9):
    BYTE_MASKS[_n] = 0 if _n == 0 else (0xFFFFFFFFFFFFFFFF if _n == 8 else first_bytes(_n))

#: The masks of a string of each length up to HOT_WORDS * 8 bytes: its bytes in each of its words.
cdef uint64_t HOT_MASKS[HOT_WORDS * 8 + 1][HOT_WORDS]
cdef int _length, _word
for _length in range(HOT_WORDS * 8 + 1):
    for _word in range(HOT_WORDS):
        HOT_MASKS[_length][_word] = BYTE_MASKS[min(max(_length - 8 * _word, 0), 8)]


cdef inline uint64_t slot_value(uint64_t h, int64_t i) noexcept nogil:
    return (h & ~LOW) | <uint64_t>(i + 1)


cdef inline uint64_t mix(uint64_t z) noexcept nogil:
    z ^= z >> 30
    z *= M1
    z ^= z >> 27
    z *= M2
    z ^= z >> 31
    return z


cdef inline uint64_t hash_one(const uint8_t* key, int64_t length, const uint8_t* end) noexcept nogil:
    """``h = SEED ^ (length * M2)``; for each 8-byte word of the key, in the machine's byte order (the last one
    zero-padded), ``h = (h ^ word) * M1`` then ``h ^= h >> 32``; finally ``mix(h)`` (see
    ``varkeys.hash_bytes_numpy``).  *end*: where the key's buffer ends; a last partial word is read whole and
    masked where 8 bytes from it stay inside, else byte by byte."""
    cdef uint64_t h = SEED ^ (<uint64_t>length * M2)
    cdef uint64_t word
    cdef int64_t at = 0
    if length <= HOT_WORDS * 8 and key + HOT_WORDS * 8 <= end:
        return mix(rounds_short(key, length, h, HOT_MASKS[length]))
    while at + 8 <= length:
        word = load8(key + at)
        h = (h ^ word) * M1
        h ^= h >> 32
        at += 8
    if at < length:
        if key + at + 8 <= end:
            word = load8(key + at) & first_bytes(length - at)
        else:
            word = 0
            memcpy(&word, key + at, length - at)
        h = (h ^ word) * M1
        h ^= h >> 32
    return mix(h)


cdef inline bint same_bytes(const uint8_t* stored, const uint8_t* key, int64_t length, const uint8_t* end) noexcept nogil:
    """Whether *length* bytes at *stored* (in an arena readable SLACK bytes past its keys) and at *key* (in a buffer
    ending at *end*) are equal: word by word, the last partial word masked where *key*'s buffer allows."""
    cdef int64_t at = 0
    if length <= HOT_WORDS * 8 and key + HOT_WORDS * 8 <= end:
        return same_short(stored, key, HOT_MASKS[length])
    while at + 8 <= length:
        if load8(stored + at) != load8(key + at):
            return False
        at += 8
    if at == length:
        return True
    if key + at + 8 <= end:
        return ((load8(stored + at) ^ load8(key + at)) & first_bytes(length - at)) == 0
    return memcmp(stored + at, key + at, length - at) == 0


cdef inline const uint8_t* base_of(const uint8_t[::1] data) noexcept nogil:
    return &NO_BYTES if data.shape[0] == 0 else &data[0]


def hash_bytes(const offset_t[::1] offsets, const uint8_t[::1] data):
    """The hash of each key (uint64): see :func:`mailrail.containers.varkeys.hash_bytes_numpy`."""
    check_offsets(offsets, data.shape[0])
    cdef Py_ssize_t i, n = offsets.shape[0] - 1
    result = np.empty(n, dtype=np.uint64)
    cdef uint64_t[::1] out = result
    cdef const uint8_t* base = base_of(data)
    cdef const uint8_t* end = base + data.shape[0]
    with nogil:
        for i in range(n):
            out[i] = hash_one(base + offsets[i], offsets[i + 1] - offsets[i], end)
    return result


def longest(const offset_t[::1] offsets):
    """The length of the longest key (0 for none): see :func:`mailrail.containers.varkeys.longest_numpy`."""
    cdef Py_ssize_t i, n = offsets.shape[0] - 1
    cdef int64_t most = 0, length
    with nogil:
        for i in range(n):
            length = offsets[i + 1] - offsets[i]
            if length > most:
                most = length
    return most


cdef packed struct Entry:
    int64_t start
    int64_t length


cdef class BytesTable:
    """A set of byte-string keys, each with a stable dense index ``0..len-1``: see
    :class:`mailrail.containers.varkeys.BytesTablePython`, whose methods these are, compiled.

    Open addressing with linear probing over a power-of-two slot array (load at most 1/2, tombstones included).
    A slot holds ``dense index + 1`` in its low 32 bits (0 empty, all ones a tombstone) and the high 32 bits of
    the key's hash in its high ones, so a probe reads the entry (the key's place in an arena of bytes, and its
    length: one cache line) and the key's bytes only for a key whose hash matches: a probe of a table larger than
    the caches costs about three misses, not five.  Per dense index also the key's full hash (for rebuilds) and
    its slot (for moves).
    """

    cdef uint64_t* slots
    cdef int64_t mask
    cdef Entry* entries
    cdef uint64_t* hashes
    cdef int64_t* slot_of
    cdef int64_t room  # dense entries allocated
    cdef int64_t size
    cdef int64_t tombstones
    cdef uint8_t* arena
    cdef int64_t arena_fill
    cdef int64_t arena_room
    cdef int64_t garbage  # arena bytes of erased keys
    cdef bint in_order  # the arena holds the keys in dense order, back to back
    cdef uint64_t* scratch  # a batch's hashes
    cdef Py_ssize_t scratch_room
    cdef int64_t initial  # the capacity clear() returns to

    def __init__(self, int64_t capacity=1024):
        if capacity < 0:
            raise ValueError(f"capacity must be >= 0; got {capacity}")
        if capacity >= 1 << 31:
            raise ValueError(f"capacity must be below 2**31; got {capacity}")
        self.initial = capacity
        self._allocate(capacity)

    def __dealloc__(self):
        self._free()

    cdef void _free(self) noexcept:
        free(self.slots)
        free(self.entries)
        free(self.hashes)
        free(self.slot_of)
        free(self.arena)
        free(self.scratch)
        self.scratch = NULL
        self.scratch_room = 0
        self.slots = NULL
        self.entries = NULL
        self.hashes = NULL
        self.slot_of = NULL
        self.arena = NULL

    cdef int _allocate(self, int64_t capacity) except -1:
        cdef int64_t slots = 16
        while slots < 2 * capacity:
            slots *= 2
        self._free()
        self.slots = <uint64_t*>malloc(slots * sizeof(uint64_t))
        self.room = slots // 2
        self.entries = <Entry*>malloc(self.room * sizeof(Entry))
        self.hashes = <uint64_t*>malloc(self.room * sizeof(uint64_t))
        self.slot_of = <int64_t*>malloc(self.room * sizeof(int64_t))
        self.arena_room = 16 * self.room
        self.arena = <uint8_t*>malloc(self.arena_room + SLACK)
        if not (self.slots and self.entries and self.hashes and self.slot_of and self.arena):
            self._free()
            raise MemoryError()
        memset(self.slots, 0, slots * sizeof(uint64_t))
        self.mask = slots - 1
        self.size = 0
        self.tombstones = 0
        self.arena_fill = 0
        self.garbage = 0
        self.in_order = True
        return 0

    cdef int _make_room(self) except -1:
        """Room for one more key: a free dense entry, and a load of at most 1/2 after it, tombstones included
        (rebuilt, the tombstones dropped, at a load of at most 3/8: rebuilds stay amortized O(1) per key)."""
        cdef int64_t slots = self.mask + 1
        if (self.size + self.tombstones + 1) * 2 <= slots and self.size < self.room:
            return 0
        while (self.size + 1) * 8 > slots * 3:
            slots *= 2
        if slots > 1 << 32:
            raise MemoryError("a BytesTable holds fewer than 2**31 keys")
        self._rebuild(slots)
        return 0

    cdef int _rebuild(self, int64_t slots) except -1:
        cdef int64_t room = slots // 2, i, p
        cdef uint64_t* fresh = <uint64_t*>malloc(slots * sizeof(uint64_t))
        if fresh == NULL:
            raise MemoryError()
        if room > self.room:
            if not (self._resize(<void**>&self.entries, room * sizeof(Entry))
                    and self._resize(<void**>&self.hashes, room * sizeof(uint64_t))
                    and self._resize(<void**>&self.slot_of, room * sizeof(int64_t))):
                free(fresh)
                raise MemoryError()
            self.room = room
        memset(fresh, 0, slots * sizeof(uint64_t))
        free(self.slots)
        self.slots = fresh
        self.mask = slots - 1
        self.tombstones = 0
        for i in range(self.size):
            p = <int64_t>(self.hashes[i] & <uint64_t>self.mask)
            while self.slots[p] != 0:
                p = (p + 1) & self.mask
            self.slots[p] = slot_value(self.hashes[i], i)
            self.slot_of[i] = p
        return 0

    cdef bint _resize(self, void** pointer, size_t nbytes) noexcept:
        cdef void* grown = realloc(pointer[0], nbytes)
        if grown == NULL:
            return False
        pointer[0] = grown
        return True

    cdef int _arena_room(self, int64_t nbytes) except -1:
        cdef int64_t room = self.arena_room
        if self.arena_fill + nbytes <= room:
            return 0
        if self.garbage > self.arena_fill // 2:
            self._compact()
            if self.arena_fill + nbytes <= self.arena_room:
                return 0
        while self.arena_fill + nbytes > room:
            room *= 2
        if not self._resize(<void**>&self.arena, room + SLACK):
            raise MemoryError()
        self.arena_room = room
        return 0

    cdef int _compact(self) except -1:
        """The live keys written again back to back, in dense order (the erased keys' bytes dropped)."""
        cdef uint8_t* fresh = <uint8_t*>malloc(self.arena_room + SLACK)
        cdef int64_t i, fill = 0
        if fresh == NULL:
            raise MemoryError()
        for i in range(self.size):
            memcpy(fresh + fill, self.arena + self.entries[i].start, self.entries[i].length)
            self.entries[i].start = fill
            fill += self.entries[i].length
        free(self.arena)
        self.arena = fresh
        self.arena_fill = fill
        self.garbage = 0
        self.in_order = True
        return 0

    cdef inline int64_t _find(
        self, const uint8_t* key, int64_t length, uint64_t h, const uint8_t* end, int64_t* stop
    ) noexcept nogil:
        """The key's dense index, or -1 with *stop* the empty slot its probe ended at (*end*: where the key's
        buffer ends)."""
        cdef int64_t p = <int64_t>(h & <uint64_t>self.mask), i
        cdef uint64_t slot, tag = h >> 32
        while True:
            slot = self.slots[p]
            if slot == 0:
                stop[0] = p
                return -1
            if (slot >> 32) == tag and (slot & LOW) != LOW:
                i = <int64_t>(slot & LOW) - 1
                if self.entries[i].length == length and same_bytes(self.arena + self.entries[i].start, key, length, end):
                    return i
            p = (p + 1) & self.mask

    cdef inline void _prefetch(self, const uint64_t* hashes, Py_ssize_t k, Py_ssize_t n) noexcept nogil:
        """Ask the memory for what probes of keys ahead of key *k* will read: the slot of key ``k + AHEAD``, the
        entry of key ``k + AHEAD / 2`` (its slot fetched by now), the bytes of key ``k + AHEAD / 4``."""
        cdef uint64_t slot
        if k + AHEAD < n:
            prefetch(&self.slots[hashes[k + AHEAD] & <uint64_t>self.mask])
        if k + AHEAD // 2 < n:
            slot = self.slots[hashes[k + AHEAD // 2] & <uint64_t>self.mask]
            if slot != 0 and (slot & LOW) != LOW:
                prefetch(&self.entries[(slot & LOW) - 1])
        if k + AHEAD // 4 < n:
            slot = self.slots[hashes[k + AHEAD // 4] & <uint64_t>self.mask]
            if slot != 0 and (slot & LOW) != LOW:
                prefetch(self.arena + self.entries[(slot & LOW) - 1].start)

    cdef uint64_t* _hash_scratch(self, Py_ssize_t n) except NULL:
        """The table's buffer for a batch's *n* hashes (grown as needed, kept: no allocation per batch)."""
        cdef Py_ssize_t room = self.scratch_room
        if n > room or self.scratch == NULL:
            room = max(n, 2 * room, 1024)
            if not self._resize(<void**>&self.scratch, room * sizeof(uint64_t)):
                raise MemoryError()
            self.scratch_room = room
        return self.scratch

    cdef int _insert_all(
        self,
        const offset_t* offsets,
        Py_ssize_t n,
        const uint8_t* base,
        const uint8_t* end,
        int64_t* dense,
        uint8_t* new,
        int64_t* counts,
        const int64_t* weights,
    ) except -1:
        """Inserts keys ``0..n-1`` (absent ones in the order of their first occurrence); where given, writes each
        key's dense index to *dense*, marks in *new* the positions that added their key, and adds each key's weight
        (1 without *weights*) to ``counts[dense index]`` (*counts* has room for ``size + n`` keys)."""
        cdef Py_ssize_t k
        cdef const uint8_t* key
        cdef int64_t length, i, stop
        cdef uint64_t h
        # A table larger than the caches: every hash first, then each probe with what later probes read prefetched.
        # A smaller one (a sender's table of held counts): each key hashed as it is probed, no prefetch to pay for.
        cdef bint ahead = self.mask + 1 > CACHED_SLOTS
        cdef uint64_t* hashes = self._hash_scratch(n) if ahead else NULL
        if ahead:
            with nogil:
                for k in range(n):
                    hashes[k] = hash_one(base + offsets[k], offsets[k + 1] - offsets[k], end)
        for k in range(n):
            key = base + offsets[k]
            length = offsets[k + 1] - offsets[k]
            if ahead:
                self._prefetch(hashes, k, n)
                h = hashes[k]
            else:
                h = hash_one(key, length, end)
            i = self._find(key, length, h, end, &stop)
            if i < 0:
                if (self.size + self.tombstones + 1) * 2 > self.mask + 1 or self.size >= self.room:
                    self._make_room()
                    self._find(key, length, h, end, &stop)  # the empty slot in the rebuilt table
                if self.arena_fill + length > self.arena_room:
                    self._arena_room(length)
                i = self.size
                self.size += 1
                self.slots[stop] = slot_value(h, i)
                self.slot_of[i] = stop
                self.hashes[i] = h
                self.entries[i].length = length
                self.entries[i].start = self.arena_fill
                if length:
                    memcpy(self.arena + self.arena_fill, key, length)
                self.arena_fill += length
                if new != NULL:
                    new[k] = 1
            if dense != NULL:
                dense[k] = i
            if counts != NULL:
                counts[i] += 1 if weights == NULL else weights[k]
        return 0

    def insert(self, const offset_t[::1] offsets, const uint8_t[::1] data):
        """Each key's dense index (int64), adding the absent ones in the order of their first occurrence, and
        whether each position added its key (bool)."""
        check_offsets(offsets, data.shape[0])
        cdef Py_ssize_t n = offsets.shape[0] - 1
        dense_array = np.empty(n, dtype=np.int64)
        new_array = np.zeros(n, dtype=np.bool_)
        cdef int64_t[::1] dense = dense_array
        cdef uint8_t[::1] new = new_array.view(np.uint8)
        cdef const uint8_t* base = base_of(data)
        if n:
            self._insert_all(&offsets[0], n, base, base + data.shape[0], &dense[0], &new[0], NULL, NULL)
        return dense_array, new_array

    def count(self, const offset_t[::1] offsets, const uint8_t[::1] data, int64_t[::1] counts, weights=None):
        """Inserts the keys as :meth:`insert` does and adds each key's weight (``weights[i]``, int64; 1 without
        *weights*) to ``counts[its dense index]``; returns how many keys it added.  *counts* must have room for
        every key the table may then hold (``len(table) + n``)."""
        check_offsets(offsets, data.shape[0])
        cdef Py_ssize_t n = offsets.shape[0] - 1
        cdef const int64_t[::1] by
        cdef const int64_t* weight = NULL
        if counts.shape[0] < self.size + n:
            raise ValueError(f"counts: room for {counts.shape[0]} keys, {self.size} held and {n} more to count")
        if weights is not None:
            by = weights
            if by.shape[0] != n:
                raise ValueError(f"weights: {by.shape[0]} for {n} keys")
            if n:
                weight = &by[0]
        cdef int64_t before = self.size
        cdef const uint8_t* base = base_of(data)
        if n:
            self._insert_all(&offsets[0], n, base, base + data.shape[0], NULL, NULL, &counts[0], weight)
        return self.size - before

    def lookup(self, const offset_t[::1] offsets, const uint8_t[::1] data):
        """Each key's dense index (int64), -1 where absent."""
        check_offsets(offsets, data.shape[0])
        cdef Py_ssize_t n = offsets.shape[0] - 1, k
        result = np.empty(n, dtype=np.int64)
        cdef int64_t[::1] dense = result
        cdef const uint8_t* base = base_of(data)
        cdef const uint8_t* end = base + data.shape[0]
        cdef int64_t length, stop
        cdef uint64_t* hashes = self._hash_scratch(n)
        with nogil:
            for k in range(n):
                hashes[k] = hash_one(base + offsets[k], offsets[k + 1] - offsets[k], end)
            for k in range(n):
                self._prefetch(hashes, k, n)
                length = offsets[k + 1] - offsets[k]
                dense[k] = self._find(base + offsets[k], length, hashes[k], end, &stop)
        return result

    def erase(self, const offset_t[::1] offsets, const uint8_t[::1] data):
        """Removes the keys present; returns ``(removed, moved_from, moved_to)`` as ``KeyTable.erase`` does."""
        check_offsets(offsets, data.shape[0])
        cdef Py_ssize_t n = offsets.shape[0] - 1, k
        removed_array = np.zeros(n, dtype=np.bool_)
        cdef uint8_t[::1] removed = removed_array.view(np.uint8)
        holes_array = np.empty(n, dtype=np.int64)
        cdef int64_t[::1] holes = holes_array
        cdef const uint8_t* base = base_of(data)
        cdef const uint8_t* end = base + data.shape[0]
        cdef int64_t length, stop, i, erased = 0
        for k in range(n):
            length = offsets[k + 1] - offsets[k]
            i = self._find(base + offsets[k], length, hash_one(base + offsets[k], length, end), end, &stop)
            if i >= 0:
                self.slots[self.slot_of[i]] = TOMBSTONE_SLOT
                self.tombstones += 1
                self.garbage += self.entries[i].length
                removed[k] = 1
                holes[erased] = i
                erased += 1
        cdef int64_t new_size = self.size - erased
        holes_array = np.sort(holes_array[:erased])
        moved_to = holes_array[holes_array < new_size]
        tail = np.ones(erased, dtype=np.bool_)
        tail[holes_array[holes_array >= new_size] - new_size] = False
        moved_from = new_size + np.flatnonzero(tail).astype(np.int64)
        cdef int64_t[::1] sources = moved_from
        cdef int64_t[::1] targets = moved_to
        cdef int64_t source, target
        for k in range(sources.shape[0]):
            source, target = sources[k], targets[k]
            self.hashes[target] = self.hashes[source]
            self.entries[target] = self.entries[source]
            self.slot_of[target] = self.slot_of[source]
            self.slots[self.slot_of[target]] = slot_value(self.hashes[target], target)
        if erased:
            self.in_order = False
        self.size = new_size
        return removed_array, moved_from, moved_to

    def keys(self, bint large=True, order=None):
        """The keys in dense order, or those at the dense indices *order* in its order, as fresh ``(offsets,
        data)``: int64 offsets from 0 (int32 if not *large*)."""
        cdef const int64_t[::1] picked
        cdef int64_t count = self.size, total = 0, i, j, fill = 0
        if order is not None:
            picked = np.ascontiguousarray(order, dtype=np.int64)
            count = picked.shape[0]
            for j in range(count):
                if picked[j] < 0 or picked[j] >= self.size:
                    raise IndexError(f"order: index {picked[j]} of a table of {self.size} keys")
                total += self.entries[picked[j]].length
        else:
            for i in range(self.size):
                total += self.entries[i].length
        if not large and total >= 2**31:
            raise OverflowError(f"{total} bytes of keys do not take int32 offsets")
        offsets_array = np.empty(count + 1, dtype=np.int64 if large else np.int32)
        data_array = np.empty(total, dtype=np.uint8)
        cdef uint8_t[::1] data = data_array
        cdef uint8_t* out = &data[0] if total else NULL
        cdef int64_t[::1] wide
        cdef int32_t[::1] narrow
        if large:
            wide = offsets_array
        else:
            narrow = offsets_array
        for j in range(count):
            i = j if order is None else picked[j]
            if large:
                wide[j] = fill
            else:
                narrow[j] = <int32_t>fill
            fill += self.entries[i].length
        if large:
            wide[count] = fill
        else:
            narrow[count] = <int32_t>fill
        if order is None and self.in_order and self.garbage == 0:
            if total:
                memcpy(out, self.arena, total)
        else:
            fill = 0
            for j in range(count):
                i = j if order is None else picked[j]
                memcpy(out + fill, self.arena + self.entries[i].start, self.entries[i].length)
                fill += self.entries[i].length
        return offsets_array, data_array

    def hashes_of_keys(self):
        """Each key's hash (uint64), in dense order: a fresh array."""
        result = np.empty(self.size, dtype=np.uint64)
        cdef uint64_t[::1] out = result
        cdef int64_t i
        for i in range(self.size):
            out[i] = self.hashes[i]
        return result

    def clear(self, bint keep=False):
        """Removes every key and returns to the initial capacity, or with *keep*, keeps the memory the table has
        (for as many keys again: no growth to pay for)."""
        if not keep:
            self._allocate(self.initial)
            return
        memset(self.slots, 0, (self.mask + 1) * sizeof(uint64_t))
        self.size = 0
        self.tombstones = 0
        self.arena_fill = 0
        self.garbage = 0
        self.in_order = True

    def __len__(self):
        return self.size

    @property
    def nbytes(self):
        """Bytes held: slots, dense entries and the arena, allocated room included."""
        return (self.mask + 1) * 8 + self.room * 32 + self.arena_room

    def __repr__(self):
        return f"BytesTable({self.size} keys, {self.mask + 1} slots, {self.arena_fill} bytes)"


cdef struct HotSlot:
    int64_t count  # held since the last take; 0: the slot takes any string
    int32_t length  # -1: never held a string
    int32_t spare
    int64_t misses  # other strings met here since this one was placed
    uint64_t words[HOT_WORDS]  # its bytes, zero-padded (a slot is one 64-byte cache line)


cdef class HotStrings:
    """A sender's direct-mapped cache of frequent strings and their counts: see
    :class:`mailrail.containers.varkeys.HotStringsPython`, whose methods these are, compiled."""

    cdef HotSlot* slots  # aligned to a cache line: a slot is one line, not parts of two
    cdef void* slots_memory  # what malloc gave (slots lies within it), for free
    cdef int shift
    cdef int64_t nslots
    cdef int64_t held  # slots with a count
    cdef uint64_t* held_bits  # which: a bit per slot (a take of everything visits just these, in slot order)
    # The leaving store: (count, string) records, in the order they left.
    cdef int64_t* out_offsets
    cdef int64_t* out_counts
    cdef uint8_t* out_data
    cdef int64_t out_size, out_room, out_fill, out_data_room
    cdef int32_t* out_owners  # each leaving record's owner
    cdef uint64_t ranks

    def __init__(self, int64_t slots=8192, int64_t ranks=1):
        if slots < 1 or slots & (slots - 1) or slots > 1 << 24:
            raise ValueError(f"slots must be a power of two from 1 to 2**24; got {slots}")
        if ranks < 1 or ranks > 1 << 31:
            raise ValueError(f"ranks must be from 1 to 2**31; got {ranks}")
        self.ranks = ranks
        self.nslots = slots
        self.shift = 64
        while (1 << (64 - self.shift)) < slots:
            self.shift -= 1
        self.slots_memory = malloc(slots * sizeof(HotSlot) + CACHE_LINE)
        self.slots = <HotSlot*>_aligned(self.slots_memory)
        self.out_room = 1024
        self.out_data_room = 16 * 1024
        self.out_offsets = <int64_t*>malloc((self.out_room + 1) * sizeof(int64_t))
        self.out_counts = <int64_t*>malloc(self.out_room * sizeof(int64_t))
        self.out_data = <uint8_t*>malloc(self.out_data_room)
        self.out_owners = <int32_t*>malloc(self.out_room * sizeof(int32_t))
        self.held_bits = <uint64_t*>malloc(self._held_words() * sizeof(uint64_t))
        if not (self.slots and self.out_offsets and self.out_counts and self.out_data and self.out_owners
                and self.held_bits):
            raise MemoryError()
        self.clear()

    def __dealloc__(self):
        free(self.slots_memory)
        free(self.out_offsets)
        free(self.out_counts)
        free(self.out_data)
        free(self.out_owners)
        free(self.held_bits)

    def clear(self):
        """Forget every string held and leaving."""
        cdef int64_t s
        memset(self.slots, 0, self.nslots * sizeof(HotSlot))
        memset(self.held_bits, 0, self._held_words() * sizeof(uint64_t))
        for s in range(self.nslots):
            self.slots[s].length = -1
        self.held = 0
        self.out_size = 0
        self.out_fill = 0
        self.out_offsets[0] = 0

    cdef int _leave(self, const uint8_t* key, int64_t length, int64_t count, const uint8_t* end) except -1:
        """A ``(count, string)`` record into the leaving store, with its owner (*end*: where the string's buffer
        ends, for its hash)."""
        cdef int64_t room
        cdef uint64_t h
        if self.out_size == self.out_room:
            room = 2 * self.out_room
            if not (_grow(<void**>&self.out_offsets, (room + 1) * sizeof(int64_t))
                    and _grow(<void**>&self.out_counts, room * sizeof(int64_t))
                    and _grow(<void**>&self.out_owners, room * sizeof(int32_t))):
                raise MemoryError()
            self.out_room = room
        if self.out_fill + length > self.out_data_room:
            room = 2 * self.out_data_room
            while self.out_fill + length > room:
                room *= 2
            if not _grow(<void**>&self.out_data, room):
                raise MemoryError()
            self.out_data_room = room
        if length:
            memcpy(self.out_data + self.out_fill, key, length)
        self.out_fill += length
        self.out_counts[self.out_size] = count
        h = hash_one(key, length, end)
        # floor(h * ranks / 2**64), as partition._multiply_high computes it
        self.out_owners[self.out_size] = <int32_t>((((h >> 32) * self.ranks) + (((h & LOW) * self.ranks) >> 32)) >> 32)
        self.out_size += 1
        self.out_offsets[self.out_size] = self.out_fill
        return 0

    cdef inline int64_t _place(self, const uint8_t* key, int64_t length, const uint8_t* end, uint64_t* w) noexcept nogil:
        """A string of at most ``HOT_WORDS * 8`` bytes as words into *w*, zero-padded (read whole where the buffer
        allows), and its slot."""
        cdef uint64_t w0, w1, w2, w3, w4
        cdef const uint64_t* masks = HOT_MASKS[length]
        cdef uint8_t padded[HOT_WORDS * 8]
        if key + HOT_WORDS * 8 > end:
            memset(padded, 0, HOT_WORDS * 8)
            memcpy(padded, key, length)
            key = padded
        w0 = load8(key) & masks[0]
        w1 = load8(key + 8) & masks[1]
        w2 = load8(key + 16) & masks[2]
        w3 = load8(key + 24) & masks[3]
        w4 = load8(key + 32) & masks[4]
        w[0], w[1], w[2], w[3], w[4] = w0, w1, w2, w3, w4
        return hot_slot(w0, w1, w2, w3, w4, length, self.shift)

    cdef inline int64_t _held_words(self) noexcept nogil:
        """The 64-bit words of ``held_bits``: a bit per slot."""
        return (self.nslots + 63) // 64

    cdef inline void _mark_held(self, int64_t s) noexcept nogil:
        """Slot *s* has just taken a count."""
        self.held_bits[s >> 6] |= 1ULL << (s & 63)
        self.held += 1

    cdef int _hold_all(self, const offset_t* offsets, Py_ssize_t n, const uint8_t* base, const uint8_t* end,
                       int64_t* counted) except -1:
        # Each string's words and slot are worked out RING strings ahead, into a ring, and its slot prefetched then:
        # the slots outgrow the first caches, and a string's words are read once.
        cdef Py_ssize_t k, ahead
        cdef int j, e
        cdef const uint8_t* key
        cdef int64_t length
        cdef HotSlot* slot
        cdef uint64_t ring_words[RING][HOT_WORDS]
        cdef int64_t ring_slot[RING]
        for ahead in range(min(<Py_ssize_t>RING, n)):
            self._ahead(offsets, ahead, base, end, ring_words[ahead], &ring_slot[ahead])
        for k in range(n):
            e = k & (RING - 1)
            key = base + offsets[k]
            length = offsets[k + 1] - offsets[k]
            if ring_slot[e] < 0:
                self._leave(key, length, 1, end)
            else:
                slot = &self.slots[ring_slot[e]]
                if same_hot(slot.words, slot.length, ring_words[e], <int32_t>length):
                    if slot.count == 0:
                        self._mark_held(ring_slot[e])
                    slot.count += 1
                    counted[0] += 1
                elif slot.count != 0 and slot.misses + 1 <= slot.count:
                    slot.misses += 1
                    self._leave(key, length, 1, end)
                else:
                    if slot.count != 0:
                        self._leave(<const uint8_t*>slot.words, slot.length, slot.count,
                                    <const uint8_t*>slot.words + HOT_WORDS * 8)
                    else:
                        self._mark_held(ring_slot[e])
                    slot.count = 1
                    slot.misses = 0
                    slot.length = <int32_t>length
                    for j in range(HOT_WORDS):
                        slot.words[j] = ring_words[e][j]
            if k + RING < n:
                self._ahead(offsets, k + RING, base, end, ring_words[e], &ring_slot[e])
        return 0

    cdef inline void _ahead(self, const offset_t* offsets, Py_ssize_t k, const uint8_t* base, const uint8_t* end,
                            uint64_t* w, int64_t* where) noexcept nogil:
        """String *k*'s words and slot (-1: too long to hold), its slot prefetched."""
        cdef int64_t length = offsets[k + 1] - offsets[k]
        if length > HOT_WORDS * 8:
            where[0] = -1
            return
        where[0] = self._place(base + offsets[k], length, end, w)
        prefetch(&self.slots[where[0]])

    def hold(self, const offset_t[::1] offsets, const uint8_t[::1] data):
        """Counts each string of the batch in its slot, or sends it to the leaving store (see the Python
        reference); returns how many of them a slot already held (the repeats combined)."""
        check_offsets(offsets, data.shape[0])
        cdef Py_ssize_t n = offsets.shape[0] - 1
        cdef const uint8_t* base = base_of(data)
        cdef int64_t counted = 0
        if n:
            self._hold_all(&offsets[0], n, base, base + data.shape[0], &counted)
        return counted

    def take(self, bint everything=False):
        """The leaving store's records grouped by owner (in the order they left within an owner) as fresh
        ``(offsets, data, counts, per_owner)`` (int64 offsets from 0; *per_owner*: each rank's number of them), and
        the store emptied; with *everything*, every slot's held count first joins them (the slot keeps its string,
        its count back to 0)."""
        cdef int64_t k, at, length
        cdef HotSlot* slot
        cdef uint64_t bits
        if everything and self.held:  # the slots with a count, in slot order, found by their bits
            for k in range(self._held_words()):
                bits = self.held_bits[k]
                self.held_bits[k] = 0
                while bits:
                    slot = &self.slots[64 * k + count_trailing_zeros(bits)]
                    bits &= bits - 1
                    self._leave(<const uint8_t*>slot.words, slot.length, slot.count,
                                <const uint8_t*>slot.words + HOT_WORDS * 8)
                    slot.count = 0
                    slot.misses = 0
            self.held = 0
        cdef int64_t n = self.out_size
        per_owner = np.zeros(self.ranks, dtype=np.int64)
        offsets = np.empty(n + 1, dtype=np.int64)
        data = np.empty(self.out_fill, dtype=np.uint8)
        counts = np.empty(n, dtype=np.int64)
        cdef int64_t[::1] per = per_owner
        cdef int64_t[::1] o = offsets
        cdef int64_t[::1] c = counts
        cdef uint8_t[::1] dv = data
        # A counting sort by owner: each owner's first record, then its first byte, then each record in place.
        cdef int64_t* slot_at = <int64_t*>malloc((self.ranks + 1) * sizeof(int64_t))
        cdef int64_t* byte_at = <int64_t*>malloc((self.ranks + 1) * sizeof(int64_t))
        if slot_at == NULL or byte_at == NULL:
            free(slot_at)
            free(byte_at)
            raise MemoryError()
        cdef int32_t r
        memset(byte_at, 0, (self.ranks + 1) * sizeof(int64_t))
        for k in range(n):
            per[self.out_owners[k]] += 1
            byte_at[self.out_owners[k] + 1] += self.out_offsets[k + 1] - self.out_offsets[k]
        slot_at[0] = 0
        for r in range(<int32_t>self.ranks):
            slot_at[r + 1] = slot_at[r] + per[r]
            byte_at[r + 1] += byte_at[r]
        o[n] = self.out_fill
        for k in range(n):
            r = self.out_owners[k]
            at = slot_at[r]
            slot_at[r] += 1
            length = self.out_offsets[k + 1] - self.out_offsets[k]
            o[at] = byte_at[r]
            c[at] = self.out_counts[k]
            if length:
                memcpy(&dv[byte_at[r]], self.out_data + self.out_offsets[k], length)
            byte_at[r] += length
        free(slot_at)
        free(byte_at)
        self.out_size = 0
        self.out_fill = 0
        return offsets, data, counts, per_owner

    @property
    def leaving(self):
        """Records in the leaving store."""
        return self.out_size

    def __len__(self):
        """Slots holding a count."""
        return self.held

    @property
    def nbytes(self):
        return self.nslots * sizeof(HotSlot) + self.nslots // 8 + self.out_room * 20 + self.out_data_room

    def __repr__(self):
        return f"HotStrings({self.held} of {self.nslots} slots held, {self.out_size} leaving)"


cdef void* _aligned(void* memory) noexcept nogil:
    """The first cache-line boundary in *memory* (allocated CACHE_LINE bytes larger; NULL stays NULL)."""
    if memory == NULL:
        return NULL
    return <void*>((<uintptr_t>memory + CACHE_LINE - 1) & ~<uintptr_t>(CACHE_LINE - 1))


cdef bint _grow(void** pointer, size_t nbytes) noexcept:
    cdef void* grown = realloc(pointer[0], nbytes)
    if grown == NULL:
        return False
    pointer[0] = grown
    return True
