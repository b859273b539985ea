"""NodeCredits + LocalCounters: one shared credit pool per destination, per node."""

from __future__ import annotations

import pytest

from helpers import released
from mailrail.errors import ProtocolError
from mailrail.flow import NodeCredits, Unconstrained
from mailrail.flow.base import GRANT, REQUEST
from mailrail.flow.node import LocalCounters

RANKS_PER_NODE = 2


def node_of(rank: int) -> int:
    return rank // RANKS_PER_NODE


def make_node(ranks: int = 6, per_pair: int = 2, threshold: int = 1, local_ranks: int = 2):
    """*local_ranks* NodeCredits objects sharing one pool, as the ranks of one node do."""
    pool = LocalCounters(ranks, per_pair)
    nodes = (ranks + RANKS_PER_NODE - 1) // RANKS_PER_NODE
    flows = [NodeCredits(nodes, node_of, pool, per_pair, threshold) for _ in range(local_ranks)]
    return pool, flows


def test_local_counters():
    counters = LocalCounters(3, 2)
    assert [counters.load(i) for i in range(3)] == [2, 2, 2]
    assert counters.try_take(1)
    assert counters.try_take(1)
    assert not counters.try_take(1)
    assert counters.load(1) == 0
    counters.add(1, 5)
    assert counters.load(1) == 5
    assert counters.take_up_to(1, 3) == 3 and counters.load(1) == 2
    assert counters.take_up_to(1, 3) == 2 and counters.load(1) == 0
    assert counters.take_up_to(1, 3) == 0 and counters.load(1) == 0
    assert counters.nbytes == 3 * 8


def test_a_credit_return_above_the_tag_space_leaves_in_pieces():
    _, (receiver,) = make_node(ranks=4, per_pair=40, threshold=40, local_ranks=1)
    receiver.max_count = 16  # what a TAG_UB of 2**7 - 1 allows
    for _ in range(40):
        receiver.on_arrival(3, 0)
    messages = [message for _ in range(40) for message in released(receiver, 3)]
    assert messages == [(3, GRANT, 16), (3, GRANT, 16), (3, GRANT, 8)]


def test_node_mode_refuses_credit_messages_of_other_kinds():
    _, (flow,) = make_node(local_ranks=1)
    with pytest.raises(ProtocolError, match=r"node flow control got a credit message \(request, count 2\) from rank 3"):
        flow.on_credit_message(3, REQUEST, 2)


def test_acquire_until_the_shared_pool_is_exhausted():
    pool, (a, b) = make_node(per_pair=3)
    assert a.try_acquire(4)
    assert b.try_acquire(4)
    assert a.try_acquire(4)
    assert not b.try_acquire(4)  # the node's 3 credits for rank 4 are gone
    assert not a.try_acquire(4)
    assert a.available(4) == b.available(4) == 0
    assert a.available(5) == 3  # other destinations are untouched


def test_credit_return_to_one_rank_is_usable_by_its_neighbour_at_once():
    pool, (a, b) = make_node(per_pair=1)
    assert a.try_acquire(4)
    assert not b.try_acquire(4)
    a.on_credit_message(4, GRANT, 1)
    assert b.available(4) == 1
    assert b.try_acquire(4)


def test_receiver_counts_per_sending_node():
    _, (receiver,) = make_node(ranks=6, per_pair=2, threshold=2, local_ranks=1)
    # Ranks 2 and 3 are one node: together they may have 2 unreturned messages.
    receiver.on_arrival(2, 0)
    receiver.on_arrival(3, 0)
    with pytest.raises(ProtocolError) as info:
        receiver.on_arrival(3, 0)
    message = str(info.value)
    assert "node 1" in message
    assert "rank 3" in message
    assert "2 credits per node" in message


def test_other_sending_nodes_have_their_own_window():
    _, (receiver,) = make_node(ranks=6, per_pair=2, threshold=2, local_ranks=1)
    receiver.on_arrival(2, 0)
    receiver.on_arrival(3, 0)
    receiver.on_arrival(0, 0)
    receiver.on_arrival(5, 0)
    receiver.on_arrival(4, 0)
    assert list(receiver.unreturned) == [1, 2, 2]


def test_return_goes_to_the_rank_whose_release_crossed_the_threshold():
    _, (receiver,) = make_node(ranks=6, per_pair=4, threshold=2, local_ranks=1)
    receiver.on_arrival(2, 0)
    receiver.on_arrival(3, 0)
    receiver.on_arrival(3, 0)
    assert released(receiver, 2) == []
    assert released(receiver, 3) == [(3, GRANT, 2)]  # node 1's owed count reached 2 via rank 3
    assert receiver.unreturned[1] == 1
    assert released(receiver, 3) == []


def test_released_credits_reopen_the_node_window():
    _, (receiver,) = make_node(ranks=4, per_pair=1, threshold=1, local_ranks=1)
    receiver.on_arrival(1, 0)
    assert released(receiver, 1) == [(1, GRANT, 1)]
    receiver.on_arrival(0, 0)  # same node as rank 1: allowed again


def test_full_round_trip_between_two_nodes():
    # Node 0 = ranks 0, 1 (sharing pool0); node 1 = ranks 2, 3 (sharing pool1).
    pool0, (r0, r1) = make_node(ranks=4, per_pair=2, threshold=2)
    pool1, (r2, r3) = make_node(ranks=4, per_pair=2, threshold=2)
    assert r0.try_acquire(2)
    r2.on_arrival(0, 0)
    assert r1.try_acquire(2)
    r2.on_arrival(1, 0)
    assert not r0.try_acquire(2) and not r1.try_acquire(2)
    assert released(r2, 0) == []
    [(target, kind, count)] = released(r2, 1)
    assert (target, kind, count) == (1, GRANT, 2)
    r1.on_credit_message(2, GRANT, count)  # the credit message reaches rank 1 ...
    assert r0.available(2) == 2  # ... and rank 0 sees it immediately
    assert pool1.load(0) == 2  # node 1's pool was never touched


def test_tags_carry_no_credits_in_node_mode():
    _, (flow,) = make_node(local_ranks=1)
    assert flow.take_piggyback(3) == 0
    assert flow.on_arrival(3, 7) is False
    assert flow.available(3) == 2


def test_credits_change_silently_and_state_sizes():
    pool, (flow,) = make_node(ranks=6, local_ranks=1)
    assert flow.name == "node"
    assert flow.credits_change_silently is True
    assert flow.credit_state_bytes() == 2 * 3 * 8  # O(nodes) private state
    assert flow.shared_state_bytes() == pool.nbytes == 6 * 8


def test_unconstrained_never_defers_and_rejects_credit_returns():
    flow = Unconstrained()
    assert all(flow.try_acquire(7) for _ in range(1000))
    assert flow.available(7) is None
    assert released(flow, 3) == []
    with pytest.raises(AssertionError):
        flow.on_credit_message(3, GRANT, 1)
