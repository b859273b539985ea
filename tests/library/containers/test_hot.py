"""The CountingSet sender's hot-key lookup: the compiled pass and its numpy reference give the same result."""

from __future__ import annotations

import importlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailrail.containers import hot
from mailrail.containers.hot import SEED, split_hot_numpy

COMPILED = importlib.import_module("mailrail.containers._hot").split_hot  # make test builds it: no skip
IMPLEMENTATIONS = [pytest.param(split_hot_numpy, id="numpy"), pytest.param(COMPILED, id="compiled")]


def test_the_compiled_pass_is_the_one_chosen():
    assert hot.IMPLEMENTATION == "compiled" and hot.split_hot is COMPILED


def table_of(hot_keys: np.ndarray, bits: int) -> tuple[np.ndarray, int]:
    """A direct-mapped table of 2**bits slots as CountingSet._hot_keys makes it: each hot key's hash at its slot
    (the first key of a slot wins), every other slot holding a hash of the next slot, which no key of its own has."""
    shift = 64 - bits
    slots = 1 << bits
    table = (np.arange(1, slots + 1, dtype=np.uint64) & np.uint64(slots - 1)) << np.uint64(shift)
    hashes = hot_keys * SEED
    slot = (hashes >> np.uint64(shift)).astype(np.intp)
    _, first = np.unique(slot, return_index=True)
    table[slot[first]] = hashes[first]
    return table, shift


@settings(max_examples=200, deadline=None)
@given(
    bits=st.integers(4, 12),
    hot_count=st.integers(0, 64),
    batch=st.integers(0, 3000),
    seed=st.integers(0, 2**32 - 1),
)
def test_compiled_and_numpy_agree(bits, hot_count, batch, seed):
    rng = np.random.default_rng(seed)
    hot_keys = rng.integers(0, 2**64, hot_count, dtype=np.uint64)
    table, shift = table_of(hot_keys, bits)
    # Hot keys, keys sharing a hot key's slot, and the empty slots' marks (a hash no key of that slot has).
    pool = np.concatenate([hot_keys, rng.integers(0, 2**64, 50, dtype=np.uint64), np.arange(40, dtype=np.uint64)])
    words = rng.choice(pool, batch) if batch else np.zeros(0, dtype=np.uint64)
    start = rng.integers(0, 5, len(table)).astype(np.float64)
    results = []
    for split in (split_hot_numpy, COMPILED):
        held, cold = start.copy(), np.full(batch + 3, -1, dtype=np.int64)
        count = split(words, table, shift, held, cold)
        results.append((count, cold[:count].copy(), held))
    (count, cold, held), (count_c, cold_c, held_c) = results
    assert count == count_c and np.array_equal(cold, cold_c) and np.array_equal(held, held_c)
    # and both are right: a key is hot exactly when it is the one its slot holds
    hashes = words * SEED
    is_hot = table[(hashes >> np.uint64(shift)).astype(np.intp)] == hashes
    assert cold.tolist() == np.flatnonzero(~is_hot).tolist()
    assert held.sum() - start.sum() == is_hot.sum()
    assert np.isin(words[is_hot], hot_keys).all()


@pytest.mark.parametrize("split", IMPLEMENTATIONS)
def test_bad_arguments_are_refused_naming_the_sizes(split):
    table, shift = table_of(np.arange(3, dtype=np.uint64), 4)
    words = np.arange(10, dtype=np.uint64)
    with pytest.raises(ValueError, match="15 held counts for a table of 16 slots"):
        split(words, table, shift, np.zeros(15), np.zeros(10, dtype=np.int64))
    with pytest.raises(ValueError, match="room for 9 cold positions, 10 keys"):
        split(words, table, shift, np.zeros(16), np.zeros(9, dtype=np.int64))
    with pytest.raises(ValueError, match="a table of 16 slots does not take slot = hash >> 59"):
        split(words, table, 59, np.zeros(16), np.zeros(10, dtype=np.int64))
