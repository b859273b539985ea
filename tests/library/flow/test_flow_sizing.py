"""credit_budget: credits per pair and return thresholds from one receive-slot budget."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mailrail.errors import ConfigError
from mailrail.flow import CreditBudget, credit_budget


def test_rank_mode_divides_receive_slots_by_ranks():
    budget = credit_budget("rank", recv_slots=512, ranks=64, nodes=4, credit_threshold=2)
    assert budget == CreditBudget(credits_per_pair=8, return_threshold=4)


def test_rank_mode_rounds_down():
    assert credit_budget("rank", recv_slots=100, ranks=7, nodes=1, credit_threshold=1).credits_per_pair == 14


def test_node_mode_divides_receive_slots_by_nodes_not_ranks():
    budget = credit_budget("node", recv_slots=512, ranks=1024, nodes=16, credit_threshold=2)
    assert budget == CreditBudget(credits_per_pair=32, return_threshold=16)


def test_rank_mode_with_zero_credits_suggests_node_mode_or_a_larger_pool():
    with pytest.raises(ConfigError) as info:
        credit_budget("rank", recv_slots=8, ranks=16, nodes=2, credit_threshold=2)
    message = str(info.value)
    assert "0 credits" in message
    assert "flow_control='node'" in message
    assert "MAILRAIL_RECV_POOL_SLOTS=8" in message
    assert "at least 16" in message


def test_node_mode_with_zero_credits_suggests_a_larger_pool():
    with pytest.raises(ConfigError) as info:
        credit_budget("node", recv_slots=3, ranks=64, nodes=4, credit_threshold=2)
    message = str(info.value)
    assert "0 credits" in message
    assert "MAILRAIL_RECV_POOL_SLOTS=3" in message
    assert "at least 4" in message
    assert "flow_control='node'" not in message  # already node mode


def test_exactly_one_credit_per_pair_is_enough():
    budget = credit_budget("rank", recv_slots=16, ranks=16, nodes=1, credit_threshold=2)
    assert budget == CreditBudget(credits_per_pair=1, return_threshold=1)


def test_explicit_credits_per_pair_that_fits_is_used():
    budget = credit_budget("rank", recv_slots=64, ranks=8, nodes=2, credit_threshold=2, credits_per_pair=3)
    assert budget == CreditBudget(credits_per_pair=3, return_threshold=1)
    budget = credit_budget("rank", recv_slots=64, ranks=8, nodes=2, credit_threshold=1, credits_per_pair=8)
    assert budget.credits_per_pair == 8


def test_explicit_credits_per_pair_beyond_the_pool_is_rejected_rank_mode():
    with pytest.raises(ConfigError) as info:
        credit_budget("rank", recv_slots=64, ranks=8, nodes=2, credit_threshold=2, credits_per_pair=9)
    message = str(info.value)
    assert "MAILRAIL_CREDITS_PER_PAIR=9" in message
    assert "72" in message  # 9 x 8 ranks
    assert "MAILRAIL_RECV_POOL_SLOTS=64" in message


def test_explicit_credits_per_pair_is_checked_against_nodes_in_node_mode():
    # 9 x 2 nodes = 18 <= 64 even though 9 x 8 ranks would not fit.
    assert (
        credit_budget("node", recv_slots=64, ranks=8, nodes=2, credit_threshold=2, credits_per_pair=9).credits_per_pair
        == 9
    )
    with pytest.raises(ConfigError, match="MAILRAIL_CREDITS_PER_PAIR=33"):
        credit_budget("node", recv_slots=64, ranks=8, nodes=2, credit_threshold=2, credits_per_pair=33)


@pytest.mark.parametrize(
    "per_pair, threshold, expected",
    [
        (8, 1, 8),
        (8, 2, 4),
        (8, 3, 2),
        (8, 8, 1),
        (8, 100, 1),
        (1, 2, 1),
    ],
)
def test_return_threshold_is_a_fraction_of_the_window_and_at_least_one(per_pair, threshold, expected):
    budget = credit_budget("rank", recv_slots=per_pair * 4, ranks=4, nodes=1, credit_threshold=threshold)
    assert budget.credits_per_pair == per_pair
    assert budget.return_threshold == expected


@given(
    mode=st.sampled_from(["rank", "node"]),
    recv_slots=st.integers(1, 4096),
    ranks=st.integers(1, 512),
    nodes=st.integers(1, 64),
    credit_threshold=st.integers(1, 64),
)
def test_granted_credits_never_exceed_receive_slots(mode, recv_slots, ranks, nodes, credit_threshold):
    senders = ranks if mode == "rank" else nodes
    try:
        budget = credit_budget(mode, recv_slots=recv_slots, ranks=ranks, nodes=nodes, credit_threshold=credit_threshold)
    except ConfigError:
        assert recv_slots < senders
        return
    assert budget.credits_per_pair * senders <= recv_slots
    assert budget.credits_per_pair == recv_slots // senders
    assert 1 <= budget.return_threshold <= budget.credits_per_pair
