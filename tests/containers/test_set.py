"""Set: inserts, erases and contains against a numpy reference, under mpiexec in every flow-control mode (with
backpressure) and in memory (mailrail.testing's World, over seeds); errors; pending work at finalize()."""

from __future__ import annotations

import importlib.util
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import mpirun, program_path
from mailrail.containers.set import Set
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
def test_set_matches_a_numpy_reference(seed, mode, ranks, pools, transport):
    env = {"MAILRAIL_FLOW_CONTROL": mode, "MAILRAIL_RANKS_PER_NODE": "2", **(TINY_POOLS if pools else {})}
    if transport:
        env["MAILRAIL_TRANSPORT"] = transport
    result = mpirun(ranks, "containers_set.py", "--seed", str(seed), "--scale", SCALE[ranks], env=env)
    assert result["failures"] == []
    assert len(result["checks"]) == ranks and min(result["checks"]) >= 60
    if pools:
        assert result["reserve_failures"] > 0  # backpressure happened
    errors = result["errors"]
    assert "float64" in errors["float keys"] and "int64" in errors["float keys"]
    assert "(2, 2)" in errors["2-D erase"]
    assert "Set.contains()" in errors["collective in a handler"]


@pytest.mark.mpi
def test_inserts_and_erases_pending_at_finalize_are_reported_as_staged():
    result = mpirun(2, "containers_set.py", "--seed", "6", "--staged")
    assert result["failures"] == []
    for report in result["staged"]:
        assert 0 < report["report"]["staged"] <= report["pending"], report
        assert len(report["warnings"]) == 1 and "staged" in report["warnings"][0]
    for strict in result["strict"]:
        assert "left staged" in strict["error"], strict


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**16), size=st.integers(1, 4))
def test_set_in_memory_over_seeds(seed, size):
    program = load_program("containers_set")
    world = World(size, seed=seed, datagram_size=256, send_pool_slots=2, recv_pool_slots=4)
    results = world.run(program.scenario, seed, 0.15)
    assert [failure for result in results for failure in result["failures"]] == []


@pytest.mark.filterwarnings("ignore::mailrail.errors.UndeliveredWarning")
def test_set_in_memory_reports_pending_work_as_staged():
    program = load_program("containers_set")
    for result in World(3, seed=1).run(program.staged, False):
        assert 0 < result["report"]["staged"] <= result["pending"]
    for result in World(2, seed=2).run(program.staged, True):
        assert "left staged" in result["error"]


def test_erase_then_insert_separated_by_a_barrier_apply_in_order():
    def program(rail):
        keys = Set(rail, np.int64)
        keys.insert(np.arange(10))
        rail.barrier()
        keys.erase(np.arange(0, 10, 2))
        rail.barrier()
        keys.insert(np.array([0]))
        keys.erase(np.array([99]))  # absent: ignored
        return keys.contains(np.arange(11)).tolist(), keys.size(), sorted(keys.local().tolist())

    results = World(3, seed=4).run(program)
    expected = [True, True, False, True, False, True, False, True, False, True, False]
    assert all(contains == expected and size == 6 for contains, size, _ in results)
    assert sorted(key for _, _, local in results for key in local) == [0, 1, 3, 5, 7, 9]


def test_local_after_a_bare_barrier_sees_every_insert_and_erase():
    def program(rail):
        keys = Set(rail, np.int64)
        keys.insert(np.arange(6) + rail.rank)
        rail.barrier()
        keys.erase(np.array([0, 1]))
        rail.barrier()
        return sorted(keys.local().tolist())

    held = World(3, seed=2).run(program)
    assert sorted(key for part in held for key in part) == [2, 3, 4, 5, 6, 7]
