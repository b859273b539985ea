"""Map: every operation against a numpy reference, under mpiexec in every flow-control mode (with backpressure)
and in memory (mailrail.testing's World, over seeds); errors; pending work at finalize()."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import mpirun, program_path
from mailrail.containers.map import Map
from mailrail.testing import World

#: Small datagrams and pools: many datagrams and calls per batch, constant backpressure.
TINY_POOLS = {"MAILRAIL_DATAGRAM_SIZE": "512", "MAILRAIL_SEND_POOL_SLOTS": "2", "MAILRAIL_RECV_POOL_SLOTS": "6"}


def load_program(name: str):
    """A test program as a module (its functions run on mailrail.testing's ranks; main() is not run).  Visits
    send their functions by reference: registered in sys.modules, the module's functions can be found."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, program_path(f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.mpi
@pytest.mark.parametrize(
    "seed, mode, ranks, pools, transport",
    [
        pytest.param(1, "none", 2, False, None, marks=pytest.mark.smoke),
        (2, "rank", 4, True, None),
        (3, "node", 4, True, None),
        (4, "adaptive", 4, True, None),
        (5, "rank", 3, True, "python"),
    ],
)
def test_map_matches_a_numpy_reference(seed, mode, ranks, pools, transport):
    env = {"MAILRAIL_FLOW_CONTROL": mode, "MAILRAIL_RANKS_PER_NODE": "2", **(TINY_POOLS if pools else {})}
    if transport:
        env["MAILRAIL_TRANSPORT"] = transport
    result = mpirun(ranks, "containers_map.py", "--seed", str(seed), "--count", "1200" if pools else "2000", env=env)
    assert result["failures"] == []
    assert len(result["checks"]) == ranks and min(result["checks"]) >= 55
    if pools:
        assert result["reserve_failures"] > 0  # backpressure happened
    errors = result["errors"]
    assert "'average'" in errors["unknown op"]
    assert "lambda" in errors["lambda"]
    assert "Map.size()" in errors["collective in a visit"]
    for staged in result["staged"]:  # pending work at finalize() without a barrier
        assert 0 < staged["report"]["staged"] <= staged["pending"], staged
        assert len(staged["warnings"]) == 1 and "staged" in staged["warnings"][0]


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 2**16), size=st.integers(1, 4))
def test_map_in_memory_over_seeds(seed, size):
    program = load_program("containers_map")
    world = World(size, seed=seed, datagram_size=512, send_pool_slots=2, recv_pool_slots=4)
    results = world.run(program.scenario, seed, 300)
    assert [failure for result in results for failure in result["failures"]] == []
    assert all(result["checks"] >= 55 for result in results)


@pytest.mark.filterwarnings("ignore::mailrail.errors.UndeliveredWarning")
def test_map_in_memory_reports_pending_work_as_staged():
    program = load_program("containers_map")
    for result in World(3, seed=1).run(program.staged):
        assert 0 < result["report"]["staged"] <= result["pending"], result  # (warnings: see the mpiexec test)


def count_up(keys, values):
    values += 1


def test_a_key_repeated_in_one_batch_is_visited_once_per_occurrence():
    def program(rail):
        counts = Map(rail, np.int64, np.int64)
        counts.visit(np.array([5, 5, 5, 7, 5, 7]), count_up)
        rail.barrier()
        return counts.get(np.array([5, 7, 8]))

    for values, found in World(2, seed=3).run(program):
        assert values.tolist() == [8, 4, 0] and found.tolist() == [True, True, False]


def test_insert_keeps_the_first_value_and_assign_the_last_of_one_batch():
    def program(rail):
        first = Map(rail, np.int64, np.int64)
        last = Map(rail, np.int64, np.int64)
        if rail.rank == 0:
            first.insert([1, 1, 2, 1], [10, 11, 20, 12])
            last.assign([1, 1, 2, 1], [10, 11, 20, 12])
        rail.barrier()
        first.insert([2], [99])  # present: keeps 20
        return first.get([1, 2])[0].tolist(), last.get([1, 2])[0].tolist()

    for firsts, lasts in World(3, seed=5).run(program):
        assert firsts == [10, 20] and lasts == [12, 20]


def test_a_map_in_the_arguments_of_a_call_arrives_as_the_receivers_part():
    # One process per rank (as under mpiexec): outside a visit, a handle finds the one part of its map here.
    def program(rail):
        table = Map(rail, np.int64, np.int64)
        rail.call(0, assign_here, table)
        rail.barrier()
        return table.get([17])

    values, found = World(1, seed=1).run(program)[0]
    assert values.tolist() == [4] and found.tolist() == [True]


def assign_here(table):
    table.assign([17], [4])


def test_lambda_and_unknown_op_are_refused_before_anything_is_sent():
    def program(rail):
        table = Map(rail, np.int64, np.int64)
        with pytest.raises(TypeError, match="lambda"):
            table.visit([1], lambda keys, values: None)
        with pytest.raises(ValueError, match="'mean'"):
            table.reduce([1], [1], "mean")
        with pytest.raises(ValueError, match=r"2 keys but values of shape \(3,\)"):
            table.assign([1, 2], [1, 2, 3])
        return table.size(), rail.channels.staged()

    assert World(2, seed=2).run(program) == [(0, 0), (0, 0)]
