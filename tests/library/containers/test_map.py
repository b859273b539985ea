"""Map: every operation against a numpy reference, under mpiexec in every flow-control mode (with backpressure)
and in memory (mailrail.testing's World, over seeds); errors; pending work at finalize()."""

from __future__ import annotations

import numpy as np
import pytest

from containers_support import (
    MPI_RUNS,
    assert_reported_staged,
    load_program,
    over_seeds,
    scenario_in_memory,
    scenario_job,
)
from mailrail.containers.map import Map
from mailrail.testing import World

#: Map's datagrams: twice the other containers' tiny ones (a visit's call is larger than a record).
DATAGRAM_SIZE = 512
#: Every flow-control mode as for Set and Bag; the Python transport on 3 ranks.
MAP_RUNS = [*MPI_RUNS[:-1], (5, "rank", 3, True, "python")]


@pytest.mark.mpi
@pytest.mark.parametrize("seed, mode, ranks, pools, transport", MAP_RUNS)
def test_map_matches_a_numpy_reference(seed, mode, ranks, pools, transport):
    args = ("--seed", str(seed), "--count", "1200" if pools else "2000")
    result = scenario_job("containers_map.py", ranks, mode, pools, transport, *args, datagram_size=DATAGRAM_SIZE)
    assert len(result["checks"]) == ranks and min(result["checks"]) >= 55
    errors = result["errors"]
    assert "'average'" in errors["unknown op"]
    assert "lambda" in errors["lambda"]
    assert "Map.size()" in errors["collective in a visit"]
    assert_reported_staged(result["staged"])  # pending work at finalize() without a barrier


@over_seeds(max_examples=10)
def test_map_in_memory_over_seeds(seed, size):
    results = scenario_in_memory("containers_map", size, seed, 300, datagram_size=DATAGRAM_SIZE)
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
