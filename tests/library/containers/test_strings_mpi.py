"""CountingSet, Set and Map of str keys as real mpiexec jobs on 2 to 4 ranks, in every flow-control mode, on both
transports (the implementation knob), with tiny pools (backpressure), against a single-process answer; and the same
scenario in mailrail.testing's World over seeds."""

from __future__ import annotations

import pytest

from containers_support import (
    SCALE,
    assert_staged_in_memory,
    assert_staged_job,
    load_program,
    over_seeds,
    scenario_in_memory,
    scenario_job,
)

RUNS = [
    pytest.param(1, "none", 2, False, None, marks=pytest.mark.smoke),
    (2, "rank", 4, True, None),
    (3, "node", 4, True, "python"),
    (4, "adaptive", 3, True, None),
    pytest.param(5, "adaptive", 2, True, "python", marks=pytest.mark.smoke),
]


@pytest.mark.mpi
@pytest.mark.parametrize("seed, mode, ranks, pools, transport", RUNS)
def test_string_containers_match_a_single_process_answer(seed, mode, ranks, pools, transport):
    args = ("--seed", str(seed), "--scale", SCALE.get(ranks, "0.5"))
    result = scenario_job("containers_strings.py", ranks, mode, pools, transport, *args, datagram_size=512)
    assert len(result["checks"]) == ranks and min(result["checks"]) >= 13


@over_seeds(max_examples=4)
def test_string_containers_in_memory_over_seeds(seed, size):
    scenario_in_memory("containers_strings", size, seed, 0.2, datagram_size=512)


@pytest.mark.mpi
def test_strings_pending_at_finalize_are_reported_as_staged():
    assert_staged_job("containers_strings.py")


@pytest.mark.filterwarnings("ignore::mailrail.errors.UndeliveredWarning")
def test_strings_pending_in_memory_are_reported_as_staged():
    assert_staged_in_memory(load_program("containers_strings"))
