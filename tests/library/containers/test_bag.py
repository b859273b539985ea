"""Bag: round-robin inserts, local inserts and rebalance against a numpy reference, under mpiexec in every
flow-control mode (with backpressure) and in memory (mailrail.testing's World, over seeds); errors; pending
inserts at finalize()."""

from __future__ import annotations

import numpy as np
import pytest

from containers_support import (
    MPI_RUNS,
    SCALE,
    assert_staged_in_memory,
    assert_staged_job,
    load_program,
    over_seeds,
    scenario_in_memory,
    scenario_job,
)
from mailrail.containers.bag import Bag
from mailrail.testing import World


@pytest.mark.mpi
@pytest.mark.parametrize("seed, mode, ranks, pools, transport", MPI_RUNS)
def test_bag_matches_a_numpy_reference(seed, mode, ranks, pools, transport):
    args = ("--seed", str(seed), "--scale", SCALE[ranks])
    result = scenario_job("containers_bag.py", ranks, mode, pools, transport, *args)
    assert len(result["checks"]) == ranks and min(result["checks"]) >= 40
    assert all(moved > 0 for moved in result["moved"].values())  # rebalance had work to do
    errors = result["errors"]
    assert "float64" in errors["float items"] and "int64" in errors["float items"]
    assert "(2, 2)" in errors["2-D items"]
    assert "Bag.rebalance()" in errors["collective in a handler"]


@pytest.mark.mpi
def test_inserts_pending_at_finalize_are_reported_as_staged():
    assert_staged_job("containers_bag.py")


@over_seeds(max_examples=6)
def test_bag_in_memory_over_seeds(seed, size):
    scenario_in_memory("containers_bag", size, seed, 0.15)


@pytest.mark.filterwarnings("ignore::mailrail.errors.UndeliveredWarning")
def test_bag_in_memory_reports_pending_inserts_as_staged():
    assert_staged_in_memory(load_program("containers_bag"))


def test_round_robin_continues_across_batches_from_each_rank():
    def program(rail):
        bag = Bag(rail, np.int64)
        for start in range(0, 7, 2):  # batches of 2, 2, 2, 1: items 0..6 of this rank
            bag.insert(np.arange(start, min(start + 2, 7)) + 100 * rail.rank)
        rail.barrier()
        return sorted(bag.local()["item"].to_pylist())

    held = World(3, seed=2).run(program)
    # Rank r's j-th item goes to rank (r + j) % 3.
    for rank in range(3):
        expected = sorted(100 * source + j for source in range(3) for j in range(7) if (source + j) % 3 == rank)
        assert held[rank] == expected


def test_rebalance_moves_local_inserts_to_the_emptiest_ranks():
    def program(rail, counts):
        bag = Bag(rail, np.uint32)
        bag.local_insert(np.arange(counts[rail.rank], dtype=np.uint32) + 1000 * rail.rank)
        moved = bag.rebalance()
        return moved, bag.local()["item"].to_pylist()

    counts = [10, 0, 3, 0]
    results = World(4, seed=3).run(program, counts)
    assert {moved for moved, _ in results} == {6}  # targets 4, 3, 3, 3: rank 0 keeps 4 and gives 6
    assert [len(items) for _, items in results] == [4, 3, 3, 3]
    everything = sorted(item for _, items in results for item in items)
    assert everything == sorted(list(range(10)) + [2000, 2001, 2002])
