"""The adversarial benchmark's workload, without MPI: victims, message sizes, send orders."""

from __future__ import annotations

import collections

import pytest

from mailrail_tools.bench.adversarial import incast_ratio, make_plan, message_sizes
from mailrail_tools.incast import choose_victims


class FakeComm:
    """Enough of a communicator for make_plan: the alltoall answers what *inbound* says."""

    def __init__(self, rank: int, size: int, inbound: list | None = None) -> None:
        self.rank, self.size = rank, size
        self.inbound = inbound if inbound is not None else [[0, 0]] * size
        self.outbound = None

    def Get_rank(self) -> int:
        return self.rank

    def Get_size(self) -> int:
        return self.size

    def alltoall(self, values: list) -> list:
        self.outbound = values
        return self.inbound


def test_victims_are_distinct_sorted_and_follow_the_seed():
    victims = choose_victims(32, 5, seed=7)
    assert victims == sorted(set(victims)) and len(victims) == 5 and all(0 <= v < 32 for v in victims)
    assert choose_victims(32, 5, seed=7) == victims
    assert choose_victims(8, 8, seed=1) == list(range(8))


def test_message_sizes_by_count_or_by_bytes():
    assert message_sizes(4096, 3, None) == [4096] * 3
    assert message_sizes(4096, None, 10000) == [4096, 4096, 1808]
    assert message_sizes(4096, None, 8192) == [4096, 4096]
    assert message_sizes(4096, None, 0) == []


def test_incast_ratio_counts_sending_ranks_per_victim():
    assert incast_ratio(16, 1) == 15  # the lone victim has nobody to send to
    assert incast_ratio(16, 4) == 4
    assert incast_ratio(16, 16) == 1


@pytest.mark.parametrize("victims", [[5], [0, 3, 6], list(range(8))])
def test_every_rank_spreads_its_messages_evenly_over_the_other_victims(victims):
    sizes = message_sizes(64, 30, None)
    for rank in range(8):
        comm = FakeComm(rank, 8)
        plan = make_plan(comm, victims, sizes, seed=3)
        targets = [v for v in victims if v != rank]
        if not targets:
            assert plan.dests == [] and plan.sizes == []
            continue
        counts = collections.Counter(plan.dests)
        assert rank not in counts and set(counts) == set(targets)
        assert max(counts.values()) - min(counts.values()) <= 1
        # What the rank announces to each destination matches its plan.
        assert [row[0] for row in comm.outbound] == [counts.get(d, 0) for d in range(8)]
        assert sum(row[1] for row in comm.outbound) == sum(sizes)


def test_send_orders_differ_between_ranks_but_not_between_runs():
    victims, sizes = [0, 1, 2, 3], message_sizes(64, 40, None)
    orders = [make_plan(FakeComm(rank, 8), victims, sizes, seed=1).dests for rank in (4, 5)]
    assert orders[0] != orders[1]
    assert make_plan(FakeComm(4, 8), victims, sizes, seed=1).dests == orders[0]


def test_expected_counts_come_from_what_the_others_announce():
    inbound = [[0, 0], [3, 300], [2, 150], [0, 0]]
    plan = make_plan(FakeComm(0, 4, inbound), [0], [100, 100], seed=1)
    assert (plan.expected_messages, plan.expected_bytes) == (5, 450)
    assert plan.dests == []  # the lone victim sends nothing
