"""KeyTable, the vectorized hash set of fixed-dtype keys, against a Python model: dense indices, the order new keys
take, erase's moves applied to a parallel value array, growth and tombstones.  Every test runs twice: with one-word
keys probed by the compiled kernels (``_table.pyx``) and by the numpy passes alone.  No MPI here."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mailrail.containers.table as table_module
from mailrail.containers.partition import key_words
from mailrail.containers.table import KeyTable, distinct_keys

COMPILED = importlib.import_module("mailrail.containers._table")  # make test builds it: no skip


@pytest.fixture(autouse=True, params=["compiled", "numpy"])
def implementation(request, monkeypatch):
    """Every test with one-word keys probed in C, and again by the numpy passes alone."""
    monkeypatch.setattr(table_module, "ONE_WORD", COMPILED if request.param == "compiled" else None)
    return request.param


RECORD = np.dtype([("a", "<i4"), ("b", "<f8")])  # packed (align=False): 12 bytes
PADDED = np.dtype([("a", "u1"), ("b", "<u4")], align=True)


def pool_of(dtype: np.dtype, size: int, seed: int) -> np.ndarray:
    """*size* keys of *dtype* with distinct bytes (all 256 for one-byte dtypes): the keys batches draw from."""
    if dtype.itemsize == 1:
        return np.arange(256, dtype=np.uint8).view(dtype)
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (size * 2, dtype.itemsize), dtype=np.uint8)
    if dtype.kind == "S":
        raw[rng.random(size * 2) < 0.3, -2:] = 0  # short strings, NUL-padded as numpy stores them
    raw = np.unique(raw, axis=0)[:size]
    rng.shuffle(raw)
    keys = raw.view(dtype).reshape(-1)
    if dtype == np.float64:
        keys[:3] = [0.0, -0.0, np.nan]
    return keys


def table_state_is_consistent(table: KeyTable, pool: np.ndarray, values: np.ndarray) -> None:
    """The container's view: ``values`` (pool numbers, moved as erase says) still match the table's keys."""
    n = len(table)
    assert values.shape == (n,) and table.keys.shape == (n,)
    assert table.keys.dtype == pool.dtype
    assert key_words(table.keys).tobytes() == key_words(pool[values]).tobytes()  # the bytes, padding zeroed
    assert np.array_equal(table.lookup(pool[values]), np.arange(n))
    assert (n + table._tombstones) * 2 <= table._slots.size  # the load bound, tombstones included


class Model:
    """A dict from key bytes to dense index, kept the way the table promises to keep its dense storage."""

    def __init__(self, pool: np.ndarray) -> None:
        self.pool = pool
        self.index: dict[bytes, int] = {}
        self.values = np.zeros(0, dtype=np.int64)  # pool number of the key at each dense index

    def key(self, number: int) -> bytes:
        return key_words(self.pool[number : number + 1]).tobytes()  # padding zeroed: records differing only there

    def lookup(self, numbers: list[int]) -> list[int]:
        return [self.index.get(self.key(k), -1) for k in numbers]

    def insert(self, numbers: list[int]) -> tuple[list[int], list[bool]]:
        index, new = [], []
        for k in numbers:
            key = self.key(k)
            new.append(key not in self.index)
            if new[-1]:
                self.index[key] = len(self.index)
                self.values = np.append(self.values, k)
            index.append(self.index[key])
        return index, new

    def erase(self, numbers: list[int]) -> list[bool]:
        removed = []
        for k in numbers:
            removed.append(self.index.pop(self.key(k), None) is not None)
        return removed


OPS = st.lists(
    st.tuples(st.sampled_from(["insert", "insert", "lookup", "erase"]), st.lists(st.integers(0, 255), max_size=40)),
    max_size=25,
)
DTYPES = [np.dtype(d) for d in ("u1", "<i8", "<f8", "S5", "S16", "S1")] + [RECORD, PADDED]


@settings(max_examples=200, deadline=None)
@given(dtype=st.sampled_from(DTYPES), pool_size=st.sampled_from([8, 64, 256]), capacity=st.integers(0, 40), ops=OPS)
def test_table_behaves_like_a_dict(dtype, pool_size, capacity, ops):
    pool = pool_of(dtype, pool_size, seed=pool_size)
    model = Model(pool)
    table = KeyTable(dtype, capacity=capacity)
    for op, numbers in ops:
        numbers = [k % pool.size for k in numbers]
        keys = pool[numbers]
        if op == "lookup":
            assert table.lookup(keys).tolist() == model.lookup(numbers)
        elif op == "insert":
            dense, new = table.insert(keys)
            expected_dense, expected_new = model.insert(numbers)
            assert dense.tolist() == expected_dense and new.tolist() == expected_new
            assert dense.dtype == np.int64 and new.dtype == bool
        else:
            old_length = len(table)
            removed, moved_from, moved_to = table.erase(keys)
            assert removed.tolist() == model.erase(numbers)
            check_moves(model, old_length, len(table), moved_from, moved_to)
        table_state_is_consistent(table, pool, model.values)
        assert sorted(model.index.values()) == list(range(len(table)))
        assert all(model.index[model.key(k)] == i for i, k in enumerate(model.values.tolist()))


def check_moves(model: Model, old_length: int, length: int, moved_from: np.ndarray, moved_to: np.ndarray) -> None:
    """Erase's moves are exactly the documented ones; applied to the model's values, they keep it aligned."""
    erased_before = [i for i, k in enumerate(model.values.tolist()) if model.key(k) not in model.index]
    assert old_length - length == len(erased_before)
    assert moved_to.tolist() == [i for i in erased_before if i < length]
    assert moved_from.tolist() == [i for i in range(length, old_length) if i not in erased_before]
    assert moved_from.dtype == moved_to.dtype == np.int64
    values = model.values.copy()
    values[moved_to] = values[moved_from]
    model.values = values[:length]
    model.index = {model.key(k): i for i, k in enumerate(model.values.tolist())}


def test_new_keys_take_dense_indices_in_first_occurrence_order():
    table = KeyTable(np.int64)
    dense, new = table.insert(np.array([50, 7, 50, 3, 7, 9]))
    assert dense.tolist() == [0, 1, 0, 2, 1, 3]
    assert new.tolist() == [True, True, False, True, False, True]
    dense, new = table.insert(np.array([9, 11, 3, 11]))
    assert dense.tolist() == [3, 4, 2, 4] and new.tolist() == [False, True, False, False]
    assert table.keys.tolist() == [50, 7, 3, 9, 11]
    assert table.lookup(np.array([3, 4, 11, 50])).tolist() == [2, -1, 4, 0]
    assert len(table) == 5 and 11 in table and 4 not in table


def test_erase_moves_the_last_survivors_into_the_holes():
    table = KeyTable(np.uint64)
    table.insert(np.arange(10, dtype=np.uint64) * 100)
    values = np.arange(10) * 1.5  # a container's parallel array: the value of key 100*i is 1.5*i
    removed, moved_from, moved_to = table.erase(np.array([200, 900, 500, 200, 4200], dtype=np.uint64))
    assert removed.tolist() == [True, True, True, False, False]
    assert len(table) == 7
    assert moved_to.tolist() == [2, 5]  # holes below the new length 7 (9 was the last: no move needed)
    assert moved_from.tolist() == [7, 8]
    values[moved_to] = values[moved_from]
    values = values[: len(table)]
    assert table.keys.tolist() == [0, 100, 700, 300, 400, 800, 600]
    assert np.array_equal(values, table.keys / 100 * 1.5)
    removed, moved_from, moved_to = table.erase(np.array([12345], dtype=np.uint64))
    assert removed.tolist() == [False] and moved_from.size == moved_to.size == 0 and len(table) == 7


def test_empty_batches_and_empty_table():
    table = KeyTable("S5")
    assert table.lookup(np.zeros(0, dtype="S5")).shape == (0,)
    dense, new = table.insert(np.zeros(0, dtype="S5"))
    assert dense.shape == new.shape == (0,)
    assert table.lookup(np.array([b"abc"])).tolist() == [-1]
    removed, moved_from, moved_to = table.erase(np.array([b"abc"]))
    assert removed.tolist() == [False] and len(table) == 0 and table.keys.shape == (0,)


def test_growth_keeps_every_key_and_the_load_at_most_half():
    table = KeyTable(np.uint64, capacity=0)
    keys = np.random.default_rng(1).integers(0, 1 << 64, 50_000, dtype=np.uint64, endpoint=False)
    for batch in np.array_split(keys, 37):
        table.insert(batch)
        assert len(table) * 2 <= table._slots.size
    assert len(table) == np.unique(keys).size
    assert np.array_equal(table.lookup(table.keys), np.arange(len(table)))
    assert table.capacity >= len(table)


def test_many_duplicates_do_not_grow_the_table():
    table = KeyTable(np.int64, capacity=16)
    slots = table._slots.size
    for i in range(5):
        table.insert(np.full(100_000, i))  # far more positions than slots: only 5 distinct keys
    assert len(table) == 5 and table._slots.size == slots


def test_churn_reuses_tombstones_without_growing():
    rng = np.random.default_rng(7)
    table = KeyTable(np.int64, capacity=1000)
    slots = table._slots.size
    live = np.unique(rng.integers(0, 1 << 40, 1000))
    table.insert(live)
    for _ in range(200):  # replace a tenth of the keys each time: tombstones pile up and are purged
        gone = rng.choice(live, 100, replace=False)
        fresh = rng.integers(0, 1 << 40, 100)
        table.erase(gone)
        table.insert(fresh)
        live = np.union1d(np.setdiff1d(live, gone), fresh)
        assert len(table) == live.size
        assert (len(table) + table._tombstones) * 2 <= table._slots.size
    assert table._slots.size <= 2 * slots
    assert np.array_equal(np.sort(table.keys), live)


def test_keys_are_their_bytes():
    table = KeyTable(np.float64)
    nan_bits = np.array([0x7FF8000000000000, 0x7FF8000000000001], dtype=np.uint64).view(np.float64)
    dense, new = table.insert(np.concatenate([[0.0, -0.0], nan_bits, nan_bits[:1]]))
    assert dense.tolist() == [0, 1, 2, 3, 2]  # 0.0 and -0.0 differ, as do the two NaNs; equal NaN bits match
    padded = KeyTable(PADDED)
    records = np.zeros(2, dtype=PADDED)
    records["a"], records["b"] = 1, 2
    records.view(np.uint8).reshape(2, -1)[1, 1:4] = 0xEE  # only the padding differs
    assert padded.insert(records).dense.tolist() == [0, 0]
    assert padded.keys.tobytes() == records[:1].tobytes()  # kept with the padding zeroed
    short = KeyTable(np.dtype([("a", "<u2"), ("b", "u1")], align=True))  # 4 bytes: kept apart from its words
    records = np.zeros(3, dtype=short.dtype)
    records.view(np.uint8)[:] = 0xAB
    records["b"] = [1, 2, 1]
    assert short.insert(records).dense.tolist() == [0, 1, 0]
    assert short.keys.view(np.uint8).tolist() == [0xAB, 0xAB, 1, 0, 0xAB, 0xAB, 2, 0]


def test_safe_casts_only():
    table = KeyTable(np.int64)
    assert table.insert(np.array([1, 2], dtype=np.int32)).dense.tolist() == [0, 1]
    assert table.lookup([2, 1, 5]).tolist() == [1, 0, -1]
    with pytest.raises(TypeError, match="uint64.*int64"):
        table.insert(np.array([1], dtype=np.uint64))
    strings = KeyTable("S16")
    strings.insert(np.array([b"abc"], dtype="S3"))
    assert strings.lookup(np.array([b"abc"], dtype="S16")).tolist() == [0]


def test_errors_name_the_shape_and_dtype():
    with pytest.raises(TypeError, match="object"):
        KeyTable(object)
    table = KeyTable(np.int64)
    with pytest.raises(ValueError, match=r"\(2, 2\)"):
        table.insert(np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(TypeError, match="object"):
        table.lookup(np.array([1, None], dtype=object))
    with pytest.raises(ValueError, match="-1"):
        KeyTable(np.int64, capacity=-1)


def test_keys_view_is_read_only_and_clear_resets():
    table = KeyTable(np.int64, capacity=4)
    initial = table.nbytes
    table.insert(np.arange(1000))
    with pytest.raises(ValueError):
        table.keys[0] = 5
    assert table.nbytes > initial
    table.clear()
    assert len(table) == 0 and table.nbytes == initial and table.lookup([3]).tolist() == [-1]
    assert table.insert(np.array([3, 4])).dense.tolist() == [0, 1]


def test_nbytes_counts_separate_key_storage():
    shared, separate = KeyTable(np.uint64, capacity=100), KeyTable("S5", capacity=100)
    assert separate.nbytes == shared.nbytes + separate._keys.nbytes  # S5 keys apart from their words


@pytest.mark.parametrize("dtype", ["S16", "S5", RECORD])
def test_colliding_hashes_are_told_apart(monkeypatch, dtype):
    # A hash with 4 values: every probe meets equal fingerprints of other keys, and long runs of occupied slots.
    monkeypatch.setattr(table_module, "hash_words", lambda words: words[:, -1] & np.uint64(3))
    pool = pool_of(np.dtype(dtype), 200, seed=9)
    model = Model(pool)
    table = KeyTable(dtype, capacity=8)
    rng = np.random.default_rng(4)
    for _ in range(30):
        numbers = rng.integers(0, pool.size, 30).tolist()
        if rng.random() < 0.6:
            dense, new = table.insert(pool[numbers])
            assert (dense.tolist(), new.tolist()) == model.insert(numbers)
        else:
            old_length = len(table)
            removed, moved_from, moved_to = table.erase(pool[numbers])
            assert removed.tolist() == model.erase(numbers)
            check_moves(model, old_length, len(table), moved_from, moved_to)
        assert table.lookup(pool).tolist() == model.lookup(list(range(pool.size)))
        table_state_is_consistent(table, pool, model.values)


#: Module settings that send probes and claims down each of their paths: the defaults; every key in Python; a
#: slot per key and pass until none is left (no windows); windows until none is left (no Python).
PROBE_MODES = {
    "default": {},
    "python": {"SCALAR_KEYS": 10**9},
    "one-slot passes": {"SCALAR_KEYS": 0, "WINDOW_KEYS": 0},
    "windows": {"SCALAR_KEYS": 0, "WINDOW_KEYS": 10**9},
}


def slots_are_consistent(table: KeyTable) -> None:
    """Each live key's slot holds its dense index + 1, no other slot holds one, no claim marker is left behind,
    and the tombstone count is exact."""
    n = len(table)
    slots = table._slots
    assert slots.min() >= -1
    assert np.count_nonzero(slots == -1) == table._tombstones
    assert np.array_equal(np.sort(slots[slots > 0]), np.arange(1, n + 1))
    assert np.array_equal(slots[table._slot_of[:n]], np.arange(1, n + 1))


@pytest.mark.parametrize("mode", PROBE_MODES)
@pytest.mark.parametrize("dtype", ["<u8", "S16", "S5", RECORD])
@pytest.mark.parametrize("clustered", [False, True], ids=["spread", "clustered"])
def test_every_probe_path_gives_the_same_answers(monkeypatch, mode, dtype, clustered):
    for name, value in PROBE_MODES[mode].items():
        monkeypatch.setattr(table_module, name, value)
    pool_size, sizes = 3000, [1, 3, 8, 9, 40, 300, 1500]
    if clustered:  # 8 hashes, the last 8 slots: probes of hundreds of slots, wrapping around the slot array
        top = np.uint64(2**64 - 8)
        monkeypatch.setattr(table_module, "hash_words", lambda words: (words[:, -1] & np.uint64(7)) | top)
        pool_size, sizes = 400, [1, 3, 8, 9, 40, 200]
    pool = pool_of(np.dtype(dtype), pool_size, seed=11)
    model = Model(pool)
    table = KeyTable(dtype, capacity=0)
    rng = np.random.default_rng(12)
    for _ in range(30):
        numbers = rng.integers(0, pool.size, rng.choice(sizes)).tolist()
        op = rng.choice(["insert", "insert", "lookup", "erase"])
        if op == "lookup":
            assert table.lookup(pool[numbers]).tolist() == model.lookup(numbers)
        elif op == "insert":
            dense, new = table.insert(pool[numbers])
            assert (dense.tolist(), new.tolist()) == model.insert(numbers)
        else:
            old_length = len(table)
            removed, moved_from, moved_to = table.erase(pool[numbers])
            assert removed.tolist() == model.erase(numbers)
            check_moves(model, old_length, len(table), moved_from, moved_to)
        slots_are_consistent(table)
        table_state_is_consistent(table, pool, model.values)
    assert table.lookup(pool).tolist() == model.lookup(list(range(pool.size)))


def test_probes_wrap_around_the_end_of_the_slots(monkeypatch):
    # Every key's first slot is one of the last two: each probe but the first wraps around to slot 0 and on.
    monkeypatch.setattr(table_module, "hash_words", lambda words: words[:, 0] | np.uint64(2**64 - 2))
    table = KeyTable(np.uint64, capacity=30)  # 64 slots
    keys = np.arange(30, dtype=np.uint64) * 7
    assert table.insert(keys).dense.tolist() == list(range(30))
    assert table._slots.size == 64 and table._slots[:28].all() and table._slots[-2:].all()
    assert table.lookup(keys[::-1]).tolist() == list(range(29, -1, -1))
    assert table.lookup(keys + 1).tolist() == [-1] * 30
    removed, moved_from, moved_to = table.erase(keys[:15])
    assert removed.all() and moved_to.tolist() == list(range(15)) and moved_from.tolist() == list(range(15, 30))
    assert table.lookup(keys).tolist() == [-1] * 15 + list(range(15))
    slots_are_consistent(table)


def test_a_lone_key_in_a_batch():
    table = KeyTable("S16")
    assert table.insert(np.array([b"k"])).dense.tolist() == [0]
    assert table.insert(np.array([b"k", b"k", b"j"])).new.tolist() == [False, False, True]
    assert b"k" in table and b"j" in table and b"i" not in table
    assert table.erase(np.array([b"k"])).removed.tolist() == [True]
    assert b"k" not in table and table.keys.tolist() == [b"j"]


@pytest.mark.parametrize("mode", PROBE_MODES)
@pytest.mark.parametrize("erased", [3, 19], ids=["first-slot-tombstone", "later-tombstone"])
def test_a_tombstone_is_never_taken_for_a_key(monkeypatch, mode, erased):
    # A tombstone (-1) or an empty slot (0) minus one is a valid index from the end of the dense storage:
    # the key stored there must not be taken for the key probing past that slot.
    for name, value in PROBE_MODES[mode].items():
        monkeypatch.setattr(table_module, name, value)
    monkeypatch.setattr(table_module, "hash_words", lambda words: words[:, 0].copy())  # first slot: key % 16
    table = KeyTable(np.uint64, capacity=8)  # 16 slots, dense storage for 8 keys
    for keys in [3], [19], [8, 9, 10, 11], [35], [12]:  # one by one: 3, 19, 35 in slots 3, 4, 5
        table.insert(np.array(keys, dtype=np.uint64))
    assert table._slots[3:6].tolist() == [1, 2, 7] and table._slots.size == 16
    table.erase(np.array([erased], dtype=np.uint64))  # a tombstone on the way to 35, now second to last
    batch = np.array([35, *range(100, 110)], dtype=np.uint64)
    assert table.lookup(batch).tolist() == [6] + [-1] * 10
    slots_are_consistent(table)


def test_the_compiled_probes_are_the_ones_chosen():
    assert table_module.IMPLEMENTATION == "compiled"


def test_a_batch_larger_than_the_room_rebuilds_midway_and_answers_as_numpy(monkeypatch):
    # 50,000 keys with repeats into a table made for 16: several rebuilds inside one insert, tombstones between.
    rng = np.random.default_rng(3)
    batches = [rng.integers(0, 1 << 62, 20000, dtype=np.uint64) for _ in range(3)]
    batches[1][:4000] = batches[0][::5]  # keys seen before
    answers = []
    for one_word in (COMPILED, None):
        monkeypatch.setattr(table_module, "ONE_WORD", one_word)
        table = KeyTable(np.uint64, capacity=16)
        seen = []
        for number, batch in enumerate(batches):
            seen.append(table.insert(batch))
            if number == 1:
                seen.append(table.erase(batch[:7000]))
        seen.append(table.lookup(np.concatenate(batches)))
        slots_are_consistent(table)
        answers.append((seen, table.keys.copy(), len(table)))
    (compiled, compiled_keys, compiled_length), (numpy, numpy_keys, numpy_length) = answers
    assert compiled_length == numpy_length and np.array_equal(compiled_keys, numpy_keys)
    for mine, theirs in zip(compiled, numpy):
        for a, b in zip(mine, theirs) if isinstance(mine, tuple) else [(mine, theirs)]:
            np.testing.assert_array_equal(a, b)


def test_the_kernels_refuse_mismatched_arrays():
    slots = np.zeros(16, dtype=np.int32)
    stored = np.zeros(8, dtype=np.uint64)
    words = np.arange(3, dtype=np.uint64)
    with pytest.raises(ValueError, match="must be as long; got 3, 2"):
        COMPILED.lookup_words(slots, stored, words, words[:2], np.empty(3, dtype=np.int64))
    with pytest.raises(ValueError, match="a table of 16 slots and 8 entries takes no 9 keys"):
        COMPILED.insert_words(
            slots,
            stored,
            np.zeros(8, dtype=np.int32),
            words,
            words,
            0,
            0,
            9,
            np.empty(3, np.int64),
            np.zeros(3, np.uint8),
        )


# -- a batch's distinct keys ------------------------------------------------------------------------------------


def test_distinct_keys_combines_equal_bytes_and_keeps_canonical_keys():
    record = np.dtype([("a", "u1"), ("b", "<u4")], align=True)
    keys = np.zeros(4, dtype=record)
    keys["a"], keys["b"] = [1, 2, 1, 1], [10, 20, 10, 11]
    keys.view(np.uint8).reshape(4, 8)[:, 1:4] = [[1, 2, 3], [4, 5, 6], [7, 8, 9], [0, 0, 0]]  # padding garbage
    unique, counts, words = distinct_keys(keys)
    assert sorted(zip(unique["a"].tolist(), unique["b"].tolist(), counts.tolist())) == [
        (1, 10, 2),
        (1, 11, 1),
        (2, 20, 1),
    ]
    assert not unique.view(np.uint8).reshape(3, 8)[:, 1:4].any()
    assert words.shape == (3, 1)
    for dtype in (np.int8, np.int16, np.int32, np.uint64, np.float32, "S3", "S16", "S20"):
        keys = np.arange(-5, 7).astype(dtype)
        unique, counts, _ = distinct_keys(np.concatenate([keys, keys[:4]]))
        assert unique.dtype == np.dtype(dtype) and sorted(unique.tolist()) == sorted(keys.tolist())
        assert sorted(counts.tolist()) == [1] * 8 + [2] * 4


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["<u8", "<i4", "<f8", "u1", "S16"]),
    st.lists(st.integers(0, 40), min_size=0, max_size=400),
)
def test_distinct_keys_counts_each_key_once_by_its_bytes(dtype, draws):
    """Every key once, with how often it occurs, and its canonical words: compared, by bytes, with a Counter."""
    from collections import Counter

    dtype = np.dtype(dtype)
    palette = np.array([0, 1, 255, 2**31 - 1, 7, 1 << 20, 3, 9, 12, 40] * 5)[:41]
    if dtype.kind == "f":
        palette = np.array([0.0, -0.0, 1.5, np.inf, -2.25] * 9)[:41]
    keys = palette[draws].astype(dtype) if dtype.kind != "S" else np.array([b"k%d" % d * 3 for d in draws], "S16")
    unique, counts, words = distinct_keys(keys)
    assert unique.dtype == dtype and counts.dtype == np.int64 and words.dtype == np.uint64
    assert dict(zip((k.tobytes() for k in unique), counts.tolist(), strict=True)) == Counter(k.tobytes() for k in keys)
    assert np.array_equal(words, key_words(unique))
