"""Set: inserts, erases and contains against a numpy reference, under mpiexec in every flow-control mode (with
backpressure) and in memory (mailrail.testing's World, over seeds); errors; pending work at finalize()."""

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
from mailrail.containers.set import Set
from mailrail.testing import World


@pytest.mark.mpi
@pytest.mark.parametrize("seed, mode, ranks, pools, transport", MPI_RUNS)
def test_set_matches_a_numpy_reference(seed, mode, ranks, pools, transport):
    args = ("--seed", str(seed), "--scale", SCALE[ranks])
    result = scenario_job("containers_set.py", ranks, mode, pools, transport, *args)
    assert len(result["checks"]) == ranks and min(result["checks"]) >= 60
    errors = result["errors"]
    assert "float64" in errors["float keys"] and "int64" in errors["float keys"]
    assert "(2, 2)" in errors["2-D erase"]
    assert "Set.contains()" in errors["collective in a handler"]


@pytest.mark.mpi
def test_inserts_and_erases_pending_at_finalize_are_reported_as_staged():
    assert_staged_job("containers_set.py")


@over_seeds(max_examples=6)
def test_set_in_memory_over_seeds(seed, size):
    scenario_in_memory("containers_set", size, seed, 0.15)


@pytest.mark.filterwarnings("ignore::mailrail.errors.UndeliveredWarning")
def test_set_in_memory_reports_pending_work_as_staged():
    assert_staged_in_memory(load_program("containers_set"))


def test_erase_then_insert_separated_by_a_barrier_apply_in_order():
    def program(rail):
        keys = Set(rail, np.int64)
        keys.insert(np.arange(10))
        rail.barrier()
        keys.erase(np.arange(0, 10, 2))
        rail.barrier()
        keys.insert(np.array([0]))
        keys.erase(np.array([99]))  # absent: ignored
        return keys.contains(np.arange(11)).tolist(), keys.size(), sorted(keys.local()["key"].to_pylist())

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
        return sorted(keys.local()["key"].to_pylist())

    held = World(3, seed=2).run(program)
    assert sorted(key for part in held for key in part) == [2, 3, 4, 5, 6, 7]
