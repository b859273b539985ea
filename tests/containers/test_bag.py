"""Bag: round-robin inserts, local inserts and rebalance against a numpy reference, under mpiexec in every
flow-control mode (with backpressure) and in memory (mailrail.testing's World, over seeds); errors; pending
inserts at finalize()."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import mpirun, program_path
from mailrail.containers.bag import Bag
from mailrail.testing import World

#: Batch sizes of the jobs by their number of ranks: 4 ranks on a small machine take turns.
SCALE = {2: "1", 4: "0.5"}
#: Small datagrams and pools: many datagrams per batch, constant backpressure.
TINY_POOLS = {"MAILRAIL_DATAGRAM_SIZE": "256", "MAILRAIL_SEND_POOL_SLOTS": "2", "MAILRAIL_RECV_POOL_SLOTS": "6"}


def load_program(name: str):
    """A test program as a module (its scenario functions run on mailrail.testing's ranks; main() is not run)."""
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
        (5, "adaptive", 2, True, "python"),
    ],
)
def test_bag_matches_a_numpy_reference(seed, mode, ranks, pools, transport):
    env = {"MAILRAIL_FLOW_CONTROL": mode, "MAILRAIL_RANKS_PER_NODE": "2", **(TINY_POOLS if pools else {})}
    if transport:
        env["MAILRAIL_TRANSPORT"] = transport
    result = mpirun(ranks, "containers_bag.py", "--seed", str(seed), "--scale", SCALE[ranks], env=env)
    assert result["failures"] == []
    assert len(result["checks"]) == ranks and min(result["checks"]) >= 40
    assert all(moved > 0 for moved in result["moved"].values())  # rebalance had work to do
    if pools:
        assert result["reserve_failures"] > 0  # backpressure happened
    errors = result["errors"]
    assert "float64" in errors["float items"] and "int64" in errors["float items"]
    assert "(2, 2)" in errors["2-D items"]
    assert "Bag.rebalance()" in errors["collective in a handler"]


@pytest.mark.mpi
def test_inserts_pending_at_finalize_are_reported_as_staged():
    result = mpirun(2, "containers_bag.py", "--seed", "6", "--staged")
    assert result["failures"] == []
    for report in result["staged"]:
        assert 0 < report["report"]["staged"] <= report["pending"], report
        assert len(report["warnings"]) == 1 and "staged" in report["warnings"][0]
    for strict in result["strict"]:
        assert "left staged" in strict["error"], strict


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**16), size=st.integers(1, 4))
def test_bag_in_memory_over_seeds(seed, size):
    program = load_program("containers_bag")
    world = World(size, seed=seed, datagram_size=256, send_pool_slots=2, recv_pool_slots=4)
    results = world.run(program.scenario, seed, 0.15)
    assert [failure for result in results for failure in result["failures"]] == []


@pytest.mark.filterwarnings("ignore::mailrail.errors.UndeliveredWarning")
def test_bag_in_memory_reports_pending_inserts_as_staged():
    program = load_program("containers_bag")
    for result in World(3, seed=1).run(program.staged, False):
        assert 0 < result["report"]["staged"] <= result["pending"]
    for result in World(2, seed=2).run(program.staged, True):
        assert "left staged" in result["error"]


def test_round_robin_continues_across_batches_from_each_rank():
    def program(rail):
        bag = Bag(rail, np.int64)
        for start in range(0, 7, 2):  # batches of 2, 2, 2, 1: items 0..6 of this rank
            bag.insert(np.arange(start, min(start + 2, 7)) + 100 * rail.rank)
        rail.barrier()
        return sorted(bag.local().tolist())

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
        return moved, bag.local().tolist()

    counts = [10, 0, 3, 0]
    results = World(4, seed=3).run(program, counts)
    assert {moved for moved, _ in results} == {6}  # targets 4, 3, 3, 3: rank 0 keeps 4 and gives 6
    assert [len(items) for _, items in results] == [4, 3, 3, 3]
    everything = sorted(item for _, items in results for item in items)
    assert everything == sorted(list(range(10)) + [2000, 2001, 2002])
