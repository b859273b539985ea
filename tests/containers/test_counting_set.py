"""CountingSet: every operation against a numpy reference, under mpiexec in every flow-control mode (with
backpressure) and in memory (mailrail.testing's World, over seeds); errors; pending adds at finalize()."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import mpirun, program_path
from mailrail.containers.counting_set import CountingSet, byte_order, canonical, distinct_keys
from mailrail.testing import World

#: Batch sizes of the jobs by their number of ranks: 4 ranks on a small machine take turns.
SCALE = {2: "1", 4: "0.5"}
#: Small datagrams and pools: many datagrams per batch, constant backpressure.
TINY_POOLS = {"MAILRAIL_DATAGRAM_SIZE": "256", "MAILRAIL_SEND_POOL_SLOTS": "2", "MAILRAIL_RECV_POOL_SLOTS": "6"}

#: The parametrizations of the mpiexec tests of CountingSet, Set and Bag: every mode, tiny pools, the Python
#: transport once, one smoke run.
MPI_RUNS = [
    pytest.param(1, "none", 2, False, None, marks=pytest.mark.smoke),
    (2, "rank", 4, True, None),
    (3, "node", 4, True, None),
    (4, "adaptive", 4, True, None),
    (5, "adaptive", 2, True, "python"),
]


def load_program(name: str):
    """A test program as a module (its scenario functions run on mailrail.testing's ranks; main() is not run)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, program_path(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def job_env(mode: str, pools: bool, transport: str | None) -> dict[str, str]:
    env = {"MAILRAIL_FLOW_CONTROL": mode, "MAILRAIL_RANKS_PER_NODE": "2", **(TINY_POOLS if pools else {})}
    if transport:
        env["MAILRAIL_TRANSPORT"] = transport
    return env


def assert_staged(result: dict, ranks: int) -> None:
    """Work left pending at finalize() without a barrier: counted as staged and warned about; an error if strict."""
    for report in result["staged"]:
        assert 0 < report["report"]["staged"] <= report["pending"], report
        assert len(report["warnings"]) == 1 and "staged" in report["warnings"][0]
    for strict in result["strict"]:
        assert "left staged" in strict["error"], strict


# -- under mpiexec ------------------------------------------------------------------------------------------------


@pytest.mark.mpi
@pytest.mark.parametrize("seed, mode, ranks, pools, transport", MPI_RUNS)
def test_counting_set_matches_a_numpy_reference(seed, mode, ranks, pools, transport):
    result = mpirun(
        ranks,
        "containers_counting_set.py",
        "--seed",
        str(seed),
        "--scale",
        SCALE[ranks],
        env=job_env(mode, pools, transport),
    )
    assert result["failures"] == []
    assert len(result["checks"]) == ranks and min(result["checks"]) >= 60
    if pools:
        assert result["reserve_failures"] > 0  # backpressure happened
    errors = result["errors"]
    assert "float64" in errors["float keys"] and "int64" in errors["float keys"]
    assert "(2, 3)" in errors["2-D keys"]
    assert "CountingSet.count()" in errors["collective in a handler"]


@pytest.mark.mpi
def test_adds_pending_at_finalize_are_reported_as_staged():
    result = mpirun(2, "containers_counting_set.py", "--seed", "6", "--batches", "1", "--staged")
    assert result["failures"] == []
    assert_staged(result, 2)


# -- in memory ----------------------------------------------------------------------------------------------------


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**16), size=st.integers(1, 4))
def test_counting_set_in_memory_over_seeds(seed, size):
    program = load_program("containers_counting_set")
    world = World(size, seed=seed, datagram_size=256, send_pool_slots=2, recv_pool_slots=4)
    results = world.run(program.scenario, seed, 2, 0.15)
    assert [failure for result in results for failure in result["failures"]] == []


@pytest.mark.filterwarnings("ignore::mailrail.errors.UndeliveredWarning")
def test_counting_set_in_memory_reports_pending_adds_as_staged():
    program = load_program("containers_counting_set")
    results = World(3, seed=1).run(program.staged, False)
    for result in results:
        assert 0 < result["report"]["staged"] <= result["pending"]
    for result in World(2, seed=2).run(program.staged, True):
        assert "left staged" in result["error"]


def test_a_handler_adding_while_the_barrier_runs_is_counted():
    """Adds sent from inside handlers, two levels deep, are complete when the collective returns."""

    def program(rail):
        counting = CountingSet(rail, np.uint64)

        def relay(source, hops):
            counting.add(np.full(3, hops[0], dtype=np.uint64))
            if hops[0]:
                channel.send_to((rail.rank + 1) % rail.size, hops - 1)

        channel = rail.channels.open(np.int64, relay, name="relay")
        channel.send_to((rail.rank + 1) % rail.size, np.array([2]))
        return counting.count(np.arange(4, dtype=np.uint64)).tolist(), counting.total()

    for counts, total in World(3, seed=5).run(program):
        assert counts == [9, 9, 9, 0] and total == 27


def test_one_rank_needs_no_messages():
    def program(rail):
        counting = CountingSet(rail, "S16")
        counting.add(np.array([b"b", b"a", b"b", b"c", b"b", b"a"], dtype="S16"))
        return counting.top(2), counting.size(), counting.total(), counting.local()

    [((keys, counts), size, total, (local_keys, local_counts))] = World(1, seed=0).run(program)
    assert keys.tolist() == [b"b", b"a"] and counts.tolist() == [3, 2]
    assert (size, total) == (3, 6)
    assert sorted(zip(local_keys.tolist(), local_counts.tolist())) == [(b"a", 2), (b"b", 3), (b"c", 1)]


# -- the helpers ---------------------------------------------------------------------------------------------------


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


def test_byte_order_is_memcmp_order_and_canonical_zeroes_padding():
    keys = np.array([b"b", b"ab", b"a", b"\xff", b""], dtype="S2")
    assert keys[byte_order(keys)].tolist() == [b"", b"a", b"ab", b"b", b"\xff"]
    numbers = np.array([256, 1, -1], dtype="<i4")  # bytes 00 01.., 01 00.., ff ff..
    assert numbers[byte_order(numbers)].tolist() == [256, 1, -1]
    assert len(byte_order(numbers[:0])) == 0
    record = np.dtype([("a", "u1"), ("b", "<u2")], align=True)
    garbage = np.frombuffer(bytes([1, 9, 2, 0, 3, 7, 4, 0]), dtype=record)
    clean = canonical(garbage)
    assert clean.view(np.uint8).tolist() == [1, 0, 2, 0, 3, 0, 4, 0]
    assert canonical(numbers) is numbers


def test_an_empty_set_answers_with_empty_arrays_of_its_dtype():
    record = np.dtype([("a", "u1"), ("b", "<u4")], align=True)

    def program(rail):
        counting = CountingSet(rail, record)
        keys, counts = counting.top(3)
        asked = counting.count(np.zeros(2, dtype=record))
        return keys.dtype, len(keys), counts.dtype, asked.tolist(), counting.size(), counting.total()

    for result in World(2, seed=0).run(program):
        assert result == (record, 0, np.dtype(np.int64), [0, 0], 0, 0)


def test_local_after_a_bare_barrier_sees_every_add():
    """No collective of the set's own: rail.barrier() alone, then local() (arrivals wait in a buffer until read)."""

    def program(rail):
        counting = CountingSet(rail, np.int64)
        counting.add(np.array([5, 5, 6, 7 + rail.rank]))
        rail.barrier()
        keys, counts = counting.local()
        return dict(zip(keys.tolist(), counts.tolist()))

    held = World(3, seed=1).run(program)
    merged = {key: count for part in held for key, count in part.items()}
    assert sum(len(part) for part in held) == len(merged)  # each key on one rank
    assert merged == {5: 6, 6: 3, 7: 1, 8: 1, 9: 1}
