"""The incast plan shared by ``bench adversarial`` and ``mailrail simulate``: every victim reached, evenly,
whatever the message count; each rank even over its own targets; the same plan for the same seed."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailrail_tools.incast import choose_victims, destinations, spread


def received(ranks: int, victims: list[int], messages: int, seed: int = 3, partners: int = 0) -> np.ndarray:
    """Messages each rank receives when every rank sends its plan."""
    plans = [destinations(rank, ranks, victims, messages, seed, partners) for rank in range(ranks)]
    return np.bincount(np.concatenate(plans), minlength=ranks)


@settings(max_examples=300, deadline=None)
@given(
    ranks=st.integers(1, 80),
    victims_share=st.floats(0, 1),
    messages=st.integers(0, 50),
    partners=st.integers(0, 4),
    seed=st.integers(0, 1000),
)
def test_every_victim_is_reached_evenly_and_each_rank_is_even_over_its_targets(
    ranks, victims_share, messages, partners, seed
):
    victims = choose_victims(ranks, max(1, round(victims_share * ranks)), seed)
    counts = received(ranks, victims, messages, seed, partners)
    at_victims = counts[victims]
    if at_victims.sum() >= len(victims):
        assert at_victims.min() >= 1, at_victims  # nobody missed: the old plan reached only the first victims
    assert at_victims.max() - at_victims.min() <= 1, at_victims
    for rank in range(ranks):
        dests = destinations(rank, ranks, victims, messages, seed, partners)
        others = ranks - len(victims) - (rank not in victims)  # ranks that may be partners
        targets = len(victims) - (rank in victims) + min(partners, others)
        assert len(dests) == (messages if targets else 0)
        assert rank not in dests.tolist()
        if len(dests):
            per_target = np.unique(dests, return_counts=True)[1]
            low = per_target.min() if len(per_target) == targets else 0
            assert per_target.max() - low <= 1


def test_the_sweep_that_missed_most_victims_reaches_all_of_them():
    """The model's victim sweep: 36 messages per rank, 512 victims of 4,096 ranks."""
    victims = choose_victims(4096, 512, seed=1)
    at_victims = received(4096, victims, 36, seed=1)[victims]
    assert at_victims.min() >= 287 and at_victims.max() <= 288  # 4,095 x 36 / 512 = 287.9


def test_a_multiple_of_the_targets_is_the_old_plan():
    """Where every target gets the same count, the plan is the one the benchmark always made (the targets
    repeated, then shuffled by the rank's stream), so earlier recorded runs keep their meaning."""
    victims = [1, 4, 6]
    for rank in (0, 2):
        old = np.resize(np.array(victims, dtype=np.int64), 12)
        np.random.default_rng([5, rank]).shuffle(old)
        assert destinations(rank, 8, victims, 12, seed=5).tolist() == old.tolist()


def test_plans_follow_the_seed():
    victims = choose_victims(16, 4, seed=2)
    one = destinations(7, 16, victims, 40, seed=2, partners=3)
    assert np.array_equal(one, destinations(7, 16, victims, 40, seed=2, partners=3))
    assert not np.array_equal(one, destinations(7, 16, victims, 40, seed=3, partners=3))


def test_bad_arguments_name_the_value():
    with pytest.raises(ValueError, match="victims must be 1..8 .*got 9"):
        choose_victims(8, 9, seed=1)
    with pytest.raises(ValueError, match="rank must be 0..7; got 8"):
        destinations(8, 8, [0], 3, seed=1)
    with pytest.raises(ValueError, match="messages must be >= 0; got -1"):
        destinations(1, 8, [0], -1, seed=1)


def test_spread_of_counts():
    assert spread([3, 1, 2, 10]) == {"min": 1, "median": 2.5, "max": 10}
    assert spread([]) == {"min": 0, "median": 0, "max": 0}
