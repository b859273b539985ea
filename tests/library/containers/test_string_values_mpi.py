"""Maps to strings of any length and a disjoint set of strings as real mpiexec jobs on 2 to 4 ranks, in several
flow-control modes, on both transports, with tiny pools (backpressure), against a single-process answer (each visit
applied exactly once, counted in the values); and the same scenario in mailrail.testing's World over seeds."""

from __future__ import annotations

import pytest

from containers_support import SCALE, over_seeds, scenario_in_memory, scenario_job

RUNS = [
    pytest.param(1, "none", 2, False, None, marks=pytest.mark.smoke),
    (2, "rank", 4, True, None),
    (3, "adaptive", 3, True, "python"),
]


@pytest.mark.mpi
@pytest.mark.parametrize("seed, mode, ranks, pools, transport", RUNS)
def test_string_values_match_a_single_process_answer(seed, mode, ranks, pools, transport):
    args = ("--seed", str(seed), "--scale", SCALE.get(ranks, "0.5"))
    result = scenario_job("containers_string_values.py", ranks, mode, pools, transport, *args, datagram_size=512)
    assert len(result["checks"]) == ranks and min(result["checks"]) >= 10


@over_seeds(max_examples=4)
def test_string_values_in_memory_over_seeds(seed, size):
    scenario_in_memory("containers_string_values", size, seed, 0.2, datagram_size=512)
