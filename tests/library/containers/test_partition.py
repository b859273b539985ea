"""Keys to ranks: canonical key bytes, the fixed 64-bit hash (pinned: ranks of every run must agree), the hash
partitioner's spread and the block partitioner against numpy.array_split.  No MPI here."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailrail.containers.partition import (
    HASH_SEED,
    BlockPartitioner,
    HashPartitioner,
    has_padding,
    hash_keys,
    key_words,
    words_per_key,
)

MASK64 = (1 << 64) - 1
RECORD = np.dtype([("a", "<i4"), ("b", "<f8")])  # packed: 12 bytes, no padding
PADDED = np.dtype([("a", "u1"), ("b", "<u4")], align=True)  # 3 padding bytes after a


def reference_hash(data: bytes) -> int:
    """The documented algorithm in plain Python integers, one key's bytes at a time (the specification)."""

    def mix(z: int) -> int:
        z ^= z >> 30
        z = (z * 0xBF58476D1CE4E5B9) & MASK64
        z ^= z >> 27
        z = (z * 0x94D049BB133111EB) & MASK64
        return z ^ (z >> 31)

    data = data + bytes(-len(data) % 8)
    h = HASH_SEED
    for i in range(0, len(data), 8):
        h = mix(h ^ int.from_bytes(data[i : i + 8], "little"))
    return h


def random_keys(dtype: np.dtype, n: int, seed: int = 0) -> np.ndarray:
    raw = np.random.default_rng(seed).integers(0, 256, (n, dtype.itemsize), dtype=np.uint8)
    return raw.view(dtype).reshape(n)


# -- key_words --------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, width",
    [("u1", 1), ("i2", 1), ("<f4", 1), ("u8", 1), ("<f8", 1), ("S3", 1), ("S5", 1), ("S8", 1), ("S9", 2)]
    + [("S16", 2), ("U3", 2), (RECORD, 2), (PADDED, 1), ("c16", 2), ("M8[s]", 1)],
)
def test_key_words_are_the_bytes_zero_padded(dtype, width):
    dtype = np.dtype(dtype)
    keys = random_keys(dtype, 50)
    if dtype == PADDED:
        keys = keys.copy()
        keys.view(np.uint8).reshape(50, -1)[:, 1:4] = 0  # the reference below reads the padding as given
    words = key_words(keys)
    assert words.dtype == np.uint64 and words.shape == (50, width) == (50, words_per_key(dtype))
    for key, row in zip(keys, words):
        raw = key.tobytes()
        assert row.tobytes() == raw + bytes(8 * width - len(raw))


def test_key_words_of_8_byte_keys_are_a_view_and_of_strided_keys_a_copy():
    keys = np.arange(10, dtype=np.uint64)
    assert np.shares_memory(key_words(keys), keys)
    assert np.shares_memory(key_words(keys.view(np.float64)), keys)
    strided = np.arange(20, dtype=np.int64)[::2]
    assert key_words(strided)[:, 0].tolist() == list(range(0, 20, 2))
    big_endian = np.arange(3, dtype=">i4")
    assert key_words(big_endian).tolist() == [[0], [1 << 24], [2 << 24]]  # bytes as stored, read natively


def test_key_words_zero_structured_padding():
    assert has_padding(PADDED) and not has_padding(RECORD) and not has_padding("u8")
    keys = np.zeros(2, dtype=PADDED)
    keys["a"], keys["b"] = 7, 9
    keys.view(np.uint8).reshape(2, -1)[1, 1:4] = [1, 2, 3]  # garbage in the second record's padding
    words = key_words(keys)
    assert words[0, 0] == words[1, 0] == 7 | (9 << 32)
    assert hash_keys(keys)[0] == hash_keys(keys)[1]
    nested = np.dtype([("x", PADDED, (2,)), ("y", "u1")])  # padding inside a subarray of records
    value = np.zeros(1, dtype=nested)
    value.view(np.uint8)[:] = 0xFF
    assert key_words(value).tobytes() == bytes([0xFF, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF] * 2 + [0xFF] + [0] * 7)


def test_floats_are_keyed_by_their_bits():
    nan_bits = np.array([0x7FF8000000000000, 0x7FF8000000000001], dtype=np.uint64).view(np.float64)
    keys = np.concatenate([np.array([0.0, -0.0]), nan_bits, nan_bits[:1]])
    words = key_words(keys)[:, 0]
    assert words[0] != words[1]  # 0.0 and -0.0: different keys
    assert words[2] != words[3]  # NaNs with different payloads: different keys
    assert words[2] == words[4]  # NaNs with equal bits: the same key


def test_key_errors_name_the_shape_and_dtype():
    with pytest.raises(ValueError, match=r"1-D.*\(2, 3\)"):
        key_words(np.zeros((2, 3)))
    with pytest.raises(ValueError, match=r"1-D.*\(\)"):
        hash_keys(np.uint64(3))
    with pytest.raises(TypeError, match="fixed-size.*object"):
        hash_keys(np.array(["a", None], dtype=object))
    with pytest.raises(TypeError, match="fixed-size"):
        HashPartitioner(4).owner(np.zeros(2, dtype=[("a", "u8"), ("o", object)]))


def test_empty_batches():
    assert key_words(np.zeros(0, dtype="S5")).shape == (0, 1)
    assert hash_keys(np.zeros(0, dtype=RECORD)).shape == (0,)
    assert HashPartitioner(3).owner(np.zeros(0, dtype=np.int64)).dtype == np.int64


# -- hash_keys ----------------------------------------------------------------


def test_hash_is_pinned():
    # Ranks of every run and version must agree: a change of algorithm reshuffles every container.
    # The first: splitmix64's first output from seed 0, a published reference value.
    assert int(hash_keys(np.array([0], dtype=np.uint64))[0]) == 0xE220A8397B1DCDAF
    assert int(hash_keys(np.array([b"mailrail"], dtype="S8"))[0]) == 0xEDABB73971F550BB
    assert int(hash_keys(np.array([b"hello, mailrail!"], dtype="S16"))[0]) == 0x89FAB66FCF38F1C2
    assert int(hash_keys(np.array([b"abc"], dtype="S3"))[0]) == 0x409643760A471523


@pytest.mark.parametrize("dtype", ["u1", "<i8", "<f8", "S5", "S16", "S23", RECORD, "<u2"])
def test_hash_matches_the_documented_algorithm(dtype):
    keys = random_keys(np.dtype(dtype), 200, seed=3)
    assert hash_keys(keys).tolist() == [reference_hash(key.tobytes()) for key in keys]


def test_hash_depends_on_the_key_only():
    keys = random_keys(np.dtype("S16"), 1000, seed=5)
    whole = hash_keys(keys)
    assert hash_keys(keys[::-1]).tolist() == whole[::-1].tolist()
    assert hash_keys(keys[::3]).tolist() == whole[::3].tolist()
    assert all(hash_keys(keys[i : i + 1])[0] == whole[i] for i in range(0, 1000, 97))
    assert len(set(whole.tolist())) == 1000


def test_one_word_keys_never_collide():
    keys = np.arange(1 << 16, dtype=np.uint64) << np.uint64(20)  # structured keys: only a few bits vary
    assert np.unique(hash_keys(keys)).size == keys.size


# -- HashPartitioner ----------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 2, 3, 7, 16, 64, 1000])
def test_hash_owners_are_in_range_and_deterministic(size):
    keys = np.arange(5000, dtype=np.int64)
    owners = HashPartitioner(size).owner(keys)
    assert owners.dtype == np.int64 and owners.shape == keys.shape
    assert owners.min() >= 0 and owners.max() < size
    assert np.array_equal(owners, HashPartitioner(size).owner(keys.copy()))


@pytest.mark.parametrize("dtype, size", [("<i8", 7), ("<i8", 16), ("<u4", 64), ("<i8", 100), ("S8", 12)])
def test_sequential_keys_spread_evenly(dtype, size):
    n = 100_000
    keys = np.arange(n).astype(dtype)
    counts = np.bincount(HashPartitioner(size).owner(keys), minlength=size)
    expected = n / size
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    # chi-square with size-1 degrees of freedom: mean size-1, sd sqrt(2(size-1)); lots of slack.
    assert chi2 < (size - 1) + 8 * np.sqrt(2 * (size - 1)) + 10, counts


def reference_owner(key: bytes, size: int) -> int:
    """HashPartitioner's documented owner, in Python integers."""
    if len(key) > 8:
        return (reference_hash(key) * size) >> 64
    p = int.from_bytes(key, sys.byteorder)  # zero-extended, read unsigned
    block, within = divmod(p, size)
    rotation = (((block * 0x9E3779B97F4A7C15) & MASK64) * size) >> 64
    return (within + rotation) % size


SIZES = (1, 2, 3, 5, 8, 1000, 1024, (1 << 31) + 11, 1 << 32)


@pytest.mark.parametrize("dtype", ["<u8", "<i8", "<i4", "u1", "S3", "S9", "S16"])
def test_owner_is_the_documented_function(dtype):
    rng = np.random.default_rng(2)
    raw = rng.integers(0, 1 << 64, 2000, dtype=np.uint64, endpoint=False)
    raw = np.concatenate([raw, np.array([0, 1, (1 << 63), MASK64], dtype=np.uint64)])
    itemsize = np.dtype(dtype).itemsize
    keys = np.frombuffer(np.repeat(raw, -(-itemsize // 8)).tobytes()[: len(raw) * itemsize], dtype=dtype)
    for size in SIZES:
        owners = HashPartitioner(size).owner(keys)
        # every byte of each key (a bytes_ scalar would drop trailing zeros)
        assert owners.tolist() == [reference_owner(keys[i : i + 1].tobytes(), size) for i in range(len(keys))], size


@pytest.mark.parametrize("size", SIZES)
def test_every_block_of_consecutive_keys_has_one_key_per_rank_and_blocks_invert(size):
    partitioner = HashPartitioner(size)
    rng = np.random.default_rng(size % 1000)
    blocks = np.unique(rng.integers(0, MASK64 // size, 50, dtype=np.uint64))
    if size <= 1024:  # whole blocks: each rank once
        words = (blocks[:, None] * np.uint64(size) + np.arange(size, dtype=np.uint64)).reshape(-1, 1)
        owners = partitioner.owner_of_words(words).reshape(len(blocks), size)
        assert (np.sort(owners, axis=1) == np.arange(size)).all()
    for rank in {0, 1 % size, size - 1}:
        words = partitioner.words_of(blocks, rank)
        assert (partitioner.owner_of_words(words.reshape(-1, 1)) == rank).all()
        assert np.array_equal(partitioner.block(words), blocks)


@pytest.mark.parametrize("stride", [2, 3, 8, 16, 1000])
@pytest.mark.parametrize("size", [2, 3, 16, 100])
def test_keys_in_a_stride_spread_evenly(size, stride):
    n = 100_000
    counts = np.bincount(HashPartitioner(size).owner(np.arange(n, dtype=np.uint64) * np.uint64(stride)), minlength=size)
    expected = n / size
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < (size - 1) + 8 * np.sqrt(2 * (size - 1)) + 10, counts


def test_hash_partitioner_size_errors():
    for size in (0, -1, (1 << 32) + 1):
        with pytest.raises(ValueError, match=str(size)):
            HashPartitioner(size)


# -- BlockPartitioner ---------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(length=st.integers(0, 300), size=st.integers(1, 40))
def test_blocks_match_array_split(length, size):
    blocks = BlockPartitioner(length, size)
    indices = np.arange(length)
    parts = np.array_split(indices, size)
    owners = blocks.owner(indices)
    offsets = blocks.local_offsets(indices)
    assert owners.dtype == offsets.dtype == np.int64
    for rank, part in enumerate(parts):
        assert blocks.count(rank) == part.size
        start, stop = blocks.start(rank), blocks.stop(rank)
        assert (start, stop) == (int(blocks.offsets[rank]), int(blocks.offsets[rank + 1]))
        assert np.array_equal(indices[start:stop], part)
        assert np.all(owners[part] == rank)
        assert np.array_equal(offsets[part], np.arange(part.size))
    assert blocks.offsets[-1] == length


def test_block_owner_keeps_the_shape_and_takes_any_integer_type():
    blocks = BlockPartitioner(10, 4)  # blocks of 3, 3, 2, 2
    assert blocks.owner(np.array([[0, 9], [3, 6]], dtype=np.uint8)).tolist() == [[0, 3], [1, 2]]
    assert blocks.local_offsets([2, 5, 6, 9]).tolist() == [2, 2, 0, 1]
    assert blocks.owner(np.array([], dtype=np.int32)).shape == (0,)


def test_block_index_errors_name_the_value_and_range():
    blocks = BlockPartitioner(10, 4)
    with pytest.raises(IndexError, match=r"index 10 is out of range 0\.\.9"):
        blocks.owner(np.array([3, 10, 11]))
    with pytest.raises(IndexError, match=r"index -1 is out of range 0\.\.9"):
        blocks.local_offsets([0, -1])
    with pytest.raises(IndexError, match=f"index {MASK64} is out of range"):
        blocks.owner(np.array([1, MASK64], dtype=np.uint64))  # not wrapped to -1
    with pytest.raises(IndexError, match="index 0 is out of range.*empty"):
        BlockPartitioner(0, 3).owner([0])
    with pytest.raises(TypeError, match="integers.*float64"):
        blocks.owner(np.array([1.0]))
    with pytest.raises(IndexError, match=r"rank 4 is out of range 0\.\.3"):
        blocks.start(4)
    with pytest.raises(IndexError, match="rank -1"):
        blocks.stop(-1)
    with pytest.raises(ValueError, match="-5"):
        BlockPartitioner(-5, 2)
    with pytest.raises(ValueError, match="size.*0"):
        BlockPartitioner(5, 0)
