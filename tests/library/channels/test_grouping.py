"""Records grouped by destination rank (``channels.group_by_rank``), compiled and numpy alike: every record once, ranks
ascending, each rank's records in their own order, the counts, no copy when one rank has them all; a destination
outside the ranks refused by the compiled pass, naming it."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mailrail import channels

COMPILED = channels._compiled_grouping()
IMPLEMENTATIONS = ["numpy", pytest.param("compiled", marks=pytest.mark.skipif(COMPILED is None, reason="not built"))]
DTYPES = [np.uint64, np.uint32, np.dtype("S16"), np.dtype([("a", "<i4"), ("b", "<f8"), ("c", "u1")]), np.uint8]


@pytest.fixture(params=IMPLEMENTATIONS)
def implementation(request, monkeypatch):
    monkeypatch.setattr(channels, "GROUPING", COMPILED if request.param == "compiled" else None)
    return request.param


def expected(dests: np.ndarray, records: np.ndarray, ranks: int) -> tuple[np.ndarray, np.ndarray]:
    order = sorted(range(len(dests)), key=lambda i: (int(dests[i]), i))
    return records[np.array(order, dtype=np.intp)], np.array([int((dests == r).sum()) for r in range(ranks)])


def records_of(dtype: np.dtype, count: int, seed: int) -> np.ndarray:
    raw = np.random.default_rng(seed).integers(0, 256, count * np.dtype(dtype).itemsize, dtype=np.uint8)
    return raw.view(dtype)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    ranks=st.integers(1, 70),
    dests=st.lists(st.integers(0, 69), min_size=1, max_size=300),
    dtype=st.sampled_from(DTYPES),
    dest_dtype=st.sampled_from([np.int64, np.uint16, np.int32, np.uint64]),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_record_once_ranks_ascending_and_each_ranks_own_order(
    implementation, ranks, dests, dtype, dest_dtype, seed
):
    dests_array = (np.array(dests) % ranks).astype(dest_dtype)
    records = records_of(np.dtype(dtype), len(dests), seed)
    grouped, counts = channels.group_by_rank(dests_array, records, ranks)
    want, want_counts = expected(dests_array, records, ranks)
    assert grouped.dtype == records.dtype
    assert grouped.tobytes() == want.tobytes()
    assert counts.tolist() == want_counts.tolist()


def test_one_rank_gets_the_records_themselves(implementation):
    records = np.arange(10, dtype=np.uint64)
    grouped, counts = channels.group_by_rank(np.full(10, 3), records, 5)
    assert grouped is records
    assert counts.tolist() == [0, 0, 0, 10, 0]


def test_a_strided_batch_is_grouped_from_its_values(implementation):
    records = np.arange(40, dtype=np.uint64)[::2]
    dests = np.arange(20) % 3
    grouped, counts = channels.group_by_rank(dests, records, 3)
    assert grouped.tolist() == [*range(0, 40, 6), *range(2, 40, 6), *range(4, 40, 6)]
    assert counts.tolist() == [7, 7, 6]


@pytest.mark.skipif(COMPILED is None, reason="not built")
@pytest.mark.parametrize("bad", [-1, 4, 2**40])
def test_the_compiled_pass_refuses_a_destination_outside_the_ranks(bad):
    dests = np.array([0, 1, bad, 2], dtype=np.int64)
    counts = np.empty(4, dtype=np.int64)
    records = np.zeros(4, dtype=np.uint64)
    with pytest.raises(ValueError, match=rf"destination {bad} at position 2 is not a rank of 0 \.\. 3"):
        COMPILED.group_by_rank(dests, records.view(np.uint8), 8, counts, np.empty(32, np.uint8))
