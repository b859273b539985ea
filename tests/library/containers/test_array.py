"""Array: local fill, set, reduce and gather against a numpy reference, under mpiexec in every flow-control mode
(with backpressure, and once on the Python transport) and in memory (mailrail.testing's World, over seeds);
subarray elements (feature vectors); errors raised before anything is sent."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from containers_support import job_env, load_program, over_seeds, tiny_world
from helpers import mpirun
from mailrail.containers.array import Array, _distinct, _strictly_increasing
from mailrail.containers.ops import UFUNCS
from mailrail.errors import MessageSizeError
from mailrail.testing import World

#: Every phase the program checks, for kinds that reduce.
NUMERIC_CHECKS = {
    "local fill",
    "gather with repeats",
    "gather sorted distinct",
    "gather reversed",
    "sets to distinct indices",
    "concurrent sets of one index",
    "set of one element to many indices",
    "reduce add",
    "reduce min",
    "reduce max",
    "reduce from inside calls",
    "sets and reductions together",
    "errors",
    "unchanged by errors",
}


@pytest.mark.mpi
@pytest.mark.parametrize(
    "seed, mode, ranks, kind, length, pools, transport",
    [
        pytest.param(1, "none", 2, "features", 500, False, None, marks=pytest.mark.smoke),
        (2, "rank", 4, "int64", 333, True, None),
        (3, "node", 4, "vector", 333, True, None),
        (4, "adaptive", 4, "int64", 1000, True, None),
        (5, "adaptive", 3, "record", 100, True, None),
        (6, "node", 2, "features", 200, False, "python"),
        (7, "rank", 4, "features", 3, False, None),  # fewer elements than ranks: rank 3 owns none
        (8, "none", 1, "vector", 100, False, None),
    ],
)
def test_array_matches_a_numpy_reference(seed, mode, ranks, kind, length, pools, transport):
    env = job_env(mode, pools, transport)
    result = mpirun(ranks, "array_ops.py", "--kind", kind, "--length", str(length), "--seed", str(seed), env=env)
    expected = NUMERIC_CHECKS | ({"reduce bitwise_or"} if kind == "int64" else set())
    if kind == "record":
        expected = {check for check in expected if "reduc" not in check} | {"reduce refused on records"}
    assert set(result["checks"]) == expected
    assert result["sent"] == result["received"] > 0  # every update record applied once: none lost, none extra
    if pools and ranks > 1:
        assert result["reserve_failures"] > 0  # backpressure happened
    messages = result["messages"]
    assert f"Array.set: index {length} is out of range 0..{length - 1}" in messages
    assert any(m.startswith("Array.gather: index") for m in messages)


@over_seeds(max_examples=8, kind=st.sampled_from(["int64", "vector", "record"]))
def test_array_in_memory_over_seeds(seed, size, kind):
    program = load_program("array_ops")
    results = tiny_world(size, seed).run(program.exercise, kind, 60, seed)
    assert len({len(result["checks"]) for result in results}) == 1


def test_a_reduce_is_combined_on_the_sender():
    def program(rail):
        array = Array(rail, 10, np.int64)
        hubs = np.array([7, 2, 7, 7, 2, 9] * 500)
        array.reduce(hubs, np.ones(len(hubs), np.int64))
        rail.barrier()
        array.reduce(hubs, 1600, "max")  # one value for every index
        return array._updates.records_sent, array.gather(np.arange(10))

    for sent, values in World(3, seed=4).run(program):
        assert sent == 6  # three distinct indices per call, whatever the batch's length
        assert values.tolist() == [0, 0, 3000, 0, 0, 0, 0, 4500, 0, 1600]


def test_subarray_elements_are_feature_vectors():
    features = np.dtype((np.float32, 64))

    def program(rail):
        array = Array(rail, 50, features)
        start, view = array.local_view()
        assert view.shape == (array.blocks.count(rail.rank), 64) and view.dtype == np.float32
        view[:] = (start + np.arange(len(view)))[:, None] + np.arange(64, dtype=np.float32) / 64
        array.barrier()
        wanted = np.array([49, 0, 0, 13, 49])
        got = array.gather(wanted)
        array.reduce(np.array([3, 3]), np.ones((2, 64), np.float32), "add")
        return got, array.gather(np.array([3]))

    for got, three in World(4, seed=1).run(program):
        assert got.shape == (5, 64) and got.dtype == np.float32
        assert np.array_equal(got, np.array([49, 0, 0, 13, 49])[:, None] + np.arange(64, dtype=np.float32) / 64)
        assert np.array_equal(three[0], 3 + 4 * 2 + np.arange(64, dtype=np.float32) / 64)


def test_local_view_is_a_writable_view_of_the_block_local_a_table_and_owner_follows_the_blocks():
    def program(rail):
        array = Array(rail, 10, np.int32)  # blocks of 3, 3, 2, 2
        start, view = array.local_view()
        view[:] = np.arange(start, start + len(view)) * 10
        again = array.local_view()[1]
        assert np.array_equal(again, view)
        table = array.local()
        assert table.column_names == ["index", "value"]
        assert table["index"].to_pylist() == list(range(start, start + len(view)))
        assert table["value"].to_pylist() == (np.arange(start, start + len(view)) * 10).tolist()
        rail.barrier()
        return start, len(view), array.owner(np.arange(10)).tolist(), array.gather(np.arange(10)).tolist()

    results = World(4, seed=2).run(program)
    assert [(start, count) for start, count, _, _ in results] == [(0, 3), (3, 3), (6, 2), (8, 2)]
    for _, _, owners, values in results:
        assert owners == [0, 0, 0, 1, 1, 1, 2, 2, 3, 3]
        assert values == [10 * i for i in range(10)]


def test_an_empty_array_and_empty_batches():
    def program(rail):
        array = Array(rail, 0, np.dtype((np.float64, 3)))
        array.set([], np.zeros((0, 3)))
        array.reduce(np.array([], np.int64), np.zeros((0, 3)), "min")
        got = array.gather([])
        try:
            array.gather([0])
        except IndexError as error:
            return got.shape, str(error)
        return got.shape, ""

    for shape, error in World(2, seed=0).run(program):
        assert shape == (0, 3)
        assert error == "Array.gather: index 0 is out of range empty (length 0)"


def test_construction_errors():
    def program(rail):
        raised = {}
        for name, make in [
            ("negative", lambda: Array(rail, -1)),
            ("not an integer", lambda: Array(rail, 2.5)),
            ("objects", lambda: Array(rail, 4, object)),
            ("too large", lambda: Array(rail, 4, np.dtype((np.float32, 64)))),  # 264-byte records, 256-byte datagrams
        ]:
            try:
                make()
            except (TypeError, ValueError, MessageSizeError) as error:
                raised[name] = f"{type(error).__name__}: {error}"
        return raised

    (raised,) = World(1, seed=0, datagram_size=256).run(program)
    assert raised["negative"] == "ValueError: Array: length must be >= 0, got -1"
    assert raised["not an integer"] == "TypeError: Array: length must be an integer, got 2.5"
    assert raised["objects"].startswith(
        "TypeError: Array: elements must have a fixed-size dtype (numbers, bytes, records); got object"
    )
    assert raised["too large"].startswith("MessageSizeError: a 264-byte record does not fit in a 256-byte datagram")


def test_reduce_ops_are_checked_against_the_element_dtype():
    def program(rail):
        raised = []
        array = Array(rail, 4, np.uint8)
        for op in ["average", np.divide, np.sqrt, np.frompyfunc(lambda a, b: a, 2, 1)]:
            try:
                array.reduce([0], [1], op)
            except (TypeError, ValueError) as error:
                raised.append(str(error))
        array.reduce([1, 1, 2], [3, 5, 6], np.bitwise_xor)
        array.reduce([3], [200], np.add)
        array.reduce([3], [100], np.add)  # wraps around, as uint8 does
        return raised, array.gather(np.arange(4)).tolist()

    (raised, values), _ = World(2, seed=3).run(program)
    assert "unknown op 'average'" in raised[0]
    assert raised[1] == "Array.reduce: op divide on uint8 elements gives float64, not uint8"
    assert "sqrt is not a binary ufunc" in raised[2]
    assert "is not one of numpy's own binary ufuncs" in raised[3]
    assert values == [0, 0, 0, (300 * 2) % 256]


def test_the_op_table_starts_with_the_named_reductions():
    assert UFUNCS[:3] == [np.add, np.minimum, np.maximum]
    assert len(set(UFUNCS)) == len(UFUNCS) and all(u.nin == 2 and u.nout == 1 for u in UFUNCS)
    assert np.bitwise_or in UFUNCS and len(UFUNCS) < 1 << 16


@settings(max_examples=50, deadline=None)
@given(
    index=st.lists(st.integers(0, 99), max_size=60).map(lambda v: np.array(v, dtype=np.int64)),
    length=st.sampled_from([100, 10_000]),  # a bitmap (for 25 indices or more), then np.unique
)
def test_distinct_finds_each_index_once_with_its_position(index, length):
    distinct, position = _distinct(index, length)
    assert np.array_equal(distinct, np.unique(index))
    assert np.array_equal(distinct[position], index)
    assert _strictly_increasing(distinct)
    assert _strictly_increasing(index) == (len(index) < 2 or bool(np.all(np.diff(index) > 0)))


@pytest.mark.mpi
def test_the_documented_example_runs_as_written():
    ranks = 3
    result = mpirun(ranks, "array_example.py")
    assert result["total_degree"] == 2 * 5000 * ranks
    assert result["owners"] == [0, ranks - 1]
    for index, row in zip(result["wanted"], result["near"]):
        assert row == ([-1.0] * 4 if index in (0, 1) else [float(index)] * 4)
