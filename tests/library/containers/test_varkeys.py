"""Variable-size keys' kernels: the hash (pinned, and as documented), the compiled table and its Python reference
fed the same random operations, the compiled and numpy hashes on random batches, and bad input refused alike."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailrail.containers import varkeys
from mailrail.containers.varkeys import BytesTablePython, hash_bytes_numpy

COMPILED = importlib.import_module("mailrail.containers._varkeys")  # make test builds it: no skip
HASHES = [pytest.param(hash_bytes_numpy, id="numpy"), pytest.param(COMPILED.hash_bytes, id="compiled")]
TABLES = [pytest.param(BytesTablePython, id="python"), pytest.param(COMPILED.BytesTable, id="compiled")]
MASK = (1 << 64) - 1


def spec_hash(key: bytes) -> int:
    """The hash as the module documents it, in Python integers (little-endian words: this machine's order)."""

    def mix(z: int) -> int:
        z ^= z >> 30
        z = (z * 0xBF58476D1CE4E5B9) & MASK
        z ^= z >> 27
        z = (z * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)

    h = 0x9E3779B97F4A7C15 ^ ((len(key) * 0x94D049BB133111EB) & MASK)
    for at in range(0, len(key), 8):
        h = ((h ^ int.from_bytes(key[at : at + 8].ljust(8, b"\0"), "little")) * 0xBF58476D1CE4E5B9) & MASK
        h ^= h >> 32
    return mix(h)


def packed(keys: list[bytes], dtype: type = np.int64, lead: bytes = b"") -> tuple[np.ndarray, np.ndarray]:
    """*keys* as offsets and data (the data starting with *lead*, which no key covers: offsets need not start at 0)."""
    lengths = np.array([len(key) for key in keys], dtype=np.int64)
    offsets = np.zeros(len(keys) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return (offsets + len(lead)).astype(dtype), np.frombuffer(lead + b"".join(keys), dtype=np.uint8).copy()


def test_the_compiled_kernels_are_the_ones_chosen():
    assert varkeys.IMPLEMENTATION == "compiled"
    assert varkeys.hash_bytes is COMPILED.hash_bytes and varkeys.BytesTable is COMPILED.BytesTable


@pytest.mark.parametrize("hash_bytes", HASHES)
def test_the_hash_is_pinned_and_as_documented(hash_bytes):
    # Pinned: every rank of every run must agree on owners, so a change here reshuffles every string key.
    pinned = {
        b"": 0xE220A8397B1DCDAF,
        b"a": 0x38A64F54A8E92B5F,
        b"a\0": 0xD99C73C571D31479,  # trailing zero bytes make another key
        b"abcdefgh": 0xC1E60B6CDFAF5EB9,
        "über".encode(): 0xFE62C3FDB9CA11B2,
        "東京".encode(): 0x9DEFDB00B0976EEF,
        b"0123456789abcdefX": 0x7C241C8F1705A201,
    }
    keys = list(pinned)
    for dtype in (np.int32, np.int64):
        got = hash_bytes(*packed(keys, dtype, lead=b"xyz"))
        assert [int(h) for h in got] == list(pinned.values()) == [spec_hash(key) for key in keys]


keys_strategy = st.lists(st.binary(max_size=40), max_size=200)


@settings(max_examples=200, deadline=None)
@given(keys=keys_strategy, wide=st.booleans(), lead=st.binary(max_size=9))
def test_compiled_and_numpy_hashes_agree(keys, wide, lead):
    offsets, data = packed(keys, np.int64 if wide else np.int32, lead)
    compiled, reference = COMPILED.hash_bytes(offsets, data), hash_bytes_numpy(offsets, data)
    assert compiled.dtype == reference.dtype == np.uint64
    assert compiled.tolist() == reference.tolist() == [spec_hash(key) for key in keys]


operations = st.lists(
    st.tuples(st.sampled_from(["insert", "lookup", "erase"]), st.lists(st.binary(max_size=12), max_size=40)),
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(steps=operations, small=st.sampled_from([st.binary(max_size=2), st.binary(max_size=12)]))
def test_compiled_and_python_tables_agree_step_by_step(steps, small):
    compiled, reference = COMPILED.BytesTable(4), BytesTablePython(4)
    model: list[bytes] = []  # the keys in dense order, as the module documents it
    for operation, keys in steps:
        offsets, data = packed(keys)
        results = [getattr(table, operation)(offsets, data) for table in (compiled, reference)]
        flat = [
            tuple(np.asarray(part).tolist() for part in (result if isinstance(result, tuple) else (result,)))
            for result in results
        ]
        assert flat[0] == flat[1], (operation, keys)
        if operation == "insert":
            for key in keys:
                if key not in model:
                    model.append(key)
            assert [model[i] for i in flat[0][0]] == keys
        elif operation == "lookup":
            assert flat[0][0] == [model.index(key) if key in model else -1 for key in keys]
        else:
            _, moved_from, moved_to = results[0]
            gone = {key for key in keys if key in model}
            assert sum(flat[0][0]) == len(gone)
            for source, target in zip(moved_from.tolist(), moved_to.tolist()):
                model[target] = model[source]
            model = model[: len(model) - len(gone)]
            assert not gone & set(model)
        for table in (compiled, reference):
            assert len(table) == len(model)
            key_offsets, key_data = table.keys()
            stored = key_data.tobytes()
            assert [stored[key_offsets[i] : key_offsets[i + 1]] for i in range(len(model))] == model
            assert table.hashes_of_keys().tolist() == [spec_hash(key) for key in model]


@pytest.mark.parametrize("table_class", TABLES)
def test_a_table_grows_compacts_and_clears(table_class):
    table = table_class(2)
    keys = [f"key {i} ".encode() * (i % 5) for i in range(5000)]
    dense, new = table.insert(*packed(keys + keys[:100]))
    assert new.sum() == len(set(keys)) and len(table) == len(set(keys))
    removed, _, _ = table.erase(*packed(keys[::2]))
    assert removed.sum() == len(set(keys[::2]))
    survivors = [key for key in dict.fromkeys(keys) if key not in set(keys[::2])]
    assert sorted(table.lookup(*packed(survivors)).tolist()) == list(range(len(survivors)))
    assert (table.lookup(*packed(keys[::2])) == -1).all()
    offsets, data = table.keys(large=False)
    assert offsets.dtype == np.int32 and len(offsets) == len(survivors) + 1
    table.insert(*packed([b"fresh" * 50] * 3))  # more bytes after erasing: the arena compacts, keys stay
    assert table.lookup(*packed(survivors[:10] + [b"fresh" * 50])).min() >= 0
    table.clear()
    assert len(table) == 0 and table.lookup(*packed(keys[:3])).tolist() == [-1, -1, -1]


@pytest.mark.parametrize(
    "kernel",
    [*HASHES, *(pytest.param(t().insert, id=f"{t.__name__}.insert") for t in (BytesTablePython, COMPILED.BytesTable))],
)
def test_bad_offsets_are_refused_alike(kernel):
    data = np.frombuffer(b"abcdef", dtype=np.uint8).copy()
    with pytest.raises(ValueError, match="offsets from 0 to 9 for 6 bytes of data"):
        kernel(np.array([0, 9], dtype=np.int64), data)
    with pytest.raises(ValueError, match=r"offsets must ascend: offset 2 \(1\) is below offset 1"):
        kernel(np.array([0, 3, 1], dtype=np.int64), data)
    with pytest.raises(ValueError, match="n \\+ 1 offsets, got none"):
        kernel(np.zeros(0, dtype=np.int64), data)


# Strings of any length and content: empty, ASCII, non-ASCII (UTF-8 of up to 4 bytes a character), long ones (past
# several 8-byte words), and raw bytes; few distinct ones, so that a batch repeats them.
strings = st.one_of(
    st.binary(max_size=40),
    st.text(max_size=24).map(str.encode),
    st.sampled_from([b"", b"a", b"ab", "über".encode(), "東京".encode(), b"x" * 7, b"x" * 8, b"x" * 9, b"y" * 200]),
)


@settings(max_examples=150, deadline=None)
@given(
    batches=st.lists(st.lists(strings, max_size=60), max_size=8),
    weighted=st.booleans(),
    wide=st.booleans(),
    lead=st.binary(max_size=9),
)
def test_compiled_and_python_count_agree(batches, weighted, wide, lead):
    # count() is insert() and a histogram of the dense indices: compiled and Python alike, and as a dict counts.
    tables = [COMPILED.BytesTable(2), BytesTablePython(2)]
    counts = [np.zeros(1, dtype=np.int64) for _ in tables]
    expected: dict[bytes, int] = {}
    for number, keys in enumerate(batches):
        offsets, data = packed(keys, np.int64 if wide else np.int32, lead)
        weights = np.arange(1, len(keys) + 1, dtype=np.int64) * (number + 1) if weighted else None
        for index, table in enumerate(tables):
            if len(counts[index]) < len(table) + len(keys):
                grown = np.zeros(len(table) + len(keys), dtype=np.int64)
                grown[: len(counts[index])] = counts[index]
                counts[index] = grown
            before = len(table)
            added = table.count(offsets, data, counts[index], weights)
            assert added == len(table) - before
        for position, key in enumerate(keys):
            expected[key] = expected.get(key, 0) + (1 if weights is None else int(weights[position]))
    order = list(expected)  # dense order: first occurrences
    for table, table_counts in zip(tables, counts):
        key_offsets, key_data = table.keys()
        stored = key_data.tobytes()
        assert [stored[key_offsets[i] : key_offsets[i + 1]] for i in range(len(table))] == order
        assert table_counts[: len(table)].tolist() == [expected[key] for key in order]
        assert not table_counts[len(table) :].any()


@pytest.mark.parametrize("table_class", TABLES)
def test_count_refuses_too_few_counts_and_weights_alike(table_class):
    table = table_class(4)
    offsets, data = packed([b"a", b"b", b"a"])
    with pytest.raises(ValueError, match="counts: room for 2 keys, 0 held and 3 more to count"):
        table.count(offsets, data, np.zeros(2, dtype=np.int64))
    with pytest.raises(ValueError, match="weights: 2 for 3 keys"):
        table.count(offsets, data, np.zeros(3, dtype=np.int64), np.ones(2, dtype=np.int64))
    assert len(table) == 0  # refused before anything was inserted
    counts = np.zeros(3, dtype=np.int64)
    assert table.count(offsets, data, counts, np.array([5, 6, 7], dtype=np.int64)) == 2
    assert counts.tolist() == [12, 6, 0]


@settings(max_examples=100, deadline=None)
@given(keys=st.lists(strings, max_size=50, unique=True), picks=st.lists(st.integers(0, 49), max_size=80))
def test_compiled_and_python_keys_in_an_order_agree(keys, picks):
    order = np.array([pick for pick in picks if pick < len(keys)], dtype=np.int64)
    for table in (COMPILED.BytesTable(2), BytesTablePython(2)):
        table.insert(*packed(keys))
        for large in (True, False):
            offsets, data = table.keys(large=large, order=order)
            stored = data.tobytes()
            assert offsets.dtype == (np.int64 if large else np.int32)
            assert [stored[offsets[i] : offsets[i + 1]] for i in range(len(order))] == [keys[i] for i in order]
        with pytest.raises(IndexError, match=f"order: index {len(keys)} of a table of {len(keys)} keys"):
            table.keys(order=np.array([len(keys)], dtype=np.int64))


@settings(max_examples=100, deadline=None)
@given(keys=st.lists(strings, max_size=50), wide=st.booleans(), lead=st.binary(max_size=9))
def test_compiled_and_numpy_longest_agree(keys, wide, lead):
    offsets, _ = packed(keys, np.int64 if wide else np.int32, lead)
    assert COMPILED.longest(offsets) == varkeys.longest_numpy(offsets) == max(map(len, keys), default=0)


@pytest.mark.parametrize("hash_bytes", HASHES)
def test_a_last_word_is_hashed_alike_inside_and_at_the_end_of_the_buffer(hash_bytes):
    # The compiled hash reads a key of up to 40 bytes as five whole words where 40 bytes from it stay inside the
    # buffer, a longer key's last partial word whole where 8 bytes do, and byte by byte at the buffer's end: each key
    # of every length, followed by a few bytes, by many, and last in its buffer, hashes the same.
    for length in range(0, 50):
        key = bytes(range(1, length + 1))
        inside = hash_bytes(*packed([key, b"\xff" * 9]))[0]
        well_inside = hash_bytes(*packed([key, b"\xff" * 48]))[0]
        last = hash_bytes(*packed([b"\xff" * 9, key]))[1]
        assert int(inside) == int(well_inside) == int(last) == spec_hash(key)


# -- HotStrings: a sender's cache of frequent strings --------------------------------------------------------------

HOT = [pytest.param(varkeys.HotStringsPython, id="python"), pytest.param(COMPILED.HotStrings, id="compiled")]


def owner_of(key: bytes, ranks: int) -> int:
    return (spec_hash(key) * ranks) >> 64


def leaving(taken: tuple[np.ndarray, ...]) -> list[tuple[bytes, int]]:
    offsets, data, counts, _ = taken
    raw = data.tobytes()
    return [(raw[offsets[i] : offsets[i + 1]], int(counts[i])) for i in range(len(counts))]


small_keys = st.lists(st.binary(max_size=48) | st.sampled_from([b"the", b"of", b"a", b"and", b"x" * 40, b"y" * 41]))


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(small_keys, max_size=6),
    slots=st.sampled_from([1, 2, 8, 64]),
    ranks=st.integers(1, 5),
    takes=st.lists(st.booleans(), min_size=6, max_size=6),
    wide=st.booleans(),
    lead=st.binary(max_size=9),
)
def test_compiled_and_python_hot_strings_agree_and_lose_nothing(batches, slots, ranks, takes, wide, lead):
    tables = [cache(slots, ranks) for cache in (varkeys.HotStringsPython, COMPILED.HotStrings)]
    total: dict[bytes, int] = {}
    added: dict[bytes, int] = {}
    for batch, everything in zip(batches, takes, strict=False):
        offsets, data = packed(batch, np.int64 if wide else np.int32, lead)
        assert tables[0].hold(offsets, data) == tables[1].hold(offsets, data)
        assert len(tables[0]) == len(tables[1]) and tables[0].leaving == tables[1].leaving
        taken = [table.take(everything) for table in tables]
        for part in range(4):
            np.testing.assert_array_equal(taken[0][part], taken[1][part])
        records = leaving(taken[1])
        # Grouped by owner, each owner's count as said.
        owners = [owner_of(key, ranks) for key, _ in records]
        assert owners == sorted(owners)
        assert np.bincount(owners, minlength=ranks).tolist() == taken[1][3].tolist()
        for key in batch:
            added[key] = added.get(key, 0) + 1
        for key, count in records:
            assert count >= 1
            total[key] = total.get(key, 0) + count
    last = [leaving(table.take(everything=True)) for table in tables]
    assert last[0] == last[1]
    for key, count in last[1]:
        total[key] = total.get(key, 0) + count
    assert all(len(table) == 0 and table.leaving == 0 for table in tables)
    assert total == added  # every string counted exactly once, across slots and leaving records


@pytest.mark.parametrize("cache", HOT)
def test_a_frequent_string_keeps_its_slot_and_rare_ones_leave(cache):
    table = cache(1)  # one slot: every string meets every other
    offsets, data = packed([b"hot"] * 5 + [b"rare1", b"rare2"] + [b"hot"] * 3)
    assert table.hold(offsets, data) == 7  # the hot string's repeats; the rare ones leave at once
    assert leaving(table.take()) == [(b"rare1", 1), (b"rare2", 1)]
    assert len(table) == 1
    assert leaving(table.take(everything=True)) == [(b"hot", 8)]
    # Kept with no count, the slot takes the next string at once.
    offsets, data = packed([b"new", b"hot"])
    assert table.hold(offsets, data) == 0
    # "hot" then met "new" in the slot: it left at once, before "new"'s count.
    assert leaving(table.take(everything=True)) == [(b"hot", 1), (b"new", 1)]


@pytest.mark.parametrize("cache", HOT)
def test_a_rare_string_that_came_first_gives_its_slot_up(cache):
    table = cache(1)
    offsets, data = packed([b"rare", b"hot", b"hot", b"hot"])
    table.hold(offsets, data)
    # "rare" (count 1) gives its slot to "hot" at its second miss; "hot"'s first leaves with count 1.
    assert leaving(table.take()) == [(b"hot", 1), (b"rare", 1)]
    assert leaving(table.take(everything=True)) == [(b"hot", 2)]


@pytest.mark.parametrize("cache", HOT)
def test_hot_strings_refuse_bad_sizes_and_offsets(cache):
    for slots in (0, 3, 1 << 25):
        with pytest.raises(ValueError, match=f"slots must be a power of two.*got {slots}"):
            cache(slots)
    with pytest.raises(ValueError, match="ranks must be from 1 to 2\\*\\*31; got 0"):
        cache(8, 0)
    with pytest.raises(ValueError, match="offsets must ascend"):
        cache(8).hold(np.array([0, 3, 1], dtype=np.int64), np.zeros(4, dtype=np.uint8))


@pytest.mark.parametrize("count", [15, 16, 17, 1000])
def test_long_batches_of_hot_strings_agree_around_the_compiled_ring(count):
    # The compiled pass works 16 strings ahead: batches shorter, as long, one longer and much longer than that.
    rng = np.random.default_rng(count)
    vocabulary = [bytes(rng.integers(97, 123, rng.integers(0, 45))) for _ in range(60)]
    keys = [vocabulary[i] for i in np.minimum(rng.zipf(1.3, count) - 1, 59)]
    offsets, data = packed(keys)
    tables = [varkeys.HotStringsPython(8, 3), COMPILED.HotStrings(8, 3)]
    assert tables[0].hold(offsets, data) == tables[1].hold(offsets, data)
    for everything in (False, True):
        taken = [table.take(everything) for table in tables]
        for part in range(4):
            np.testing.assert_array_equal(taken[0][part], taken[1][part])
