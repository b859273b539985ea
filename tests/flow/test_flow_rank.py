"""RankCredits: one credit window per (sender rank, receiver rank) pair."""

from __future__ import annotations

import pytest

from mailrail.errors import ProtocolError
from mailrail.flow import RankCredits


def test_acquire_until_exhausted_per_destination():
    flow = RankCredits(3, credits_per_pair=2, return_threshold=1)
    assert flow.available(1) == 2
    assert flow.try_acquire(1)
    assert flow.try_acquire(1)
    assert not flow.try_acquire(1)
    assert not flow.try_acquire(1)
    assert flow.available(1) == 0
    # Other destinations have their own window.
    assert flow.available(2) == 2
    assert flow.try_acquire(2)


def test_credit_return_restores_the_window():
    flow = RankCredits(2, credits_per_pair=2, return_threshold=1)
    flow.try_acquire(1)
    flow.try_acquire(1)
    flow.on_credit_return(1, 2)
    assert flow.available(1) == 2
    assert flow.try_acquire(1)


def test_credit_return_beyond_the_window_raises_protocol_error():
    flow = RankCredits(2, credits_per_pair=2, return_threshold=1)
    flow.try_acquire(1)
    with pytest.raises(ProtocolError) as info:
        flow.on_credit_return(1, 2)
    assert "rank 1" in str(info.value)
    assert "3" in str(info.value)


def test_receiver_returns_credits_once_threshold_releases_gathered():
    flow = RankCredits(4, credits_per_pair=8, return_threshold=3)
    for _ in range(5):
        flow.on_arrival(2, 0)
    assert flow.on_release(2) is None
    assert flow.on_release(2) is None
    assert flow.on_release(2) == (2, 3)
    assert flow.on_release(2) is None
    assert flow.unreturned[2] == 2
    assert flow.owed[2] == 1


def test_releases_are_counted_per_source():
    flow = RankCredits(3, credits_per_pair=4, return_threshold=2)
    flow.on_arrival(1, 0)
    flow.on_arrival(2, 0)
    assert flow.on_release(1) is None
    assert flow.on_release(2) is None  # one from each source: neither reached 2
    flow.on_arrival(1, 0)
    assert flow.on_release(1) == (1, 2)


def test_arrival_beyond_the_window_raises_protocol_error():
    flow = RankCredits(3, credits_per_pair=2, return_threshold=2)
    flow.on_arrival(1, 0)
    flow.on_arrival(1, 0)
    with pytest.raises(ProtocolError) as info:
        flow.on_arrival(1, 0)
    assert "rank 1" in str(info.value)
    assert "2 credits per pair" in str(info.value)


def test_returned_credits_reopen_the_receiver_window():
    flow = RankCredits(2, credits_per_pair=2, return_threshold=2)
    flow.on_arrival(1, 0)
    flow.on_arrival(1, 0)
    flow.on_release(1)
    assert flow.on_release(1) == (1, 2)
    flow.on_arrival(1, 0)
    flow.on_arrival(1, 0)  # no ProtocolError: the window was returned


def test_arrival_tag_carries_piggybacked_credits_to_the_sender_side():
    flow = RankCredits(2, credits_per_pair=4, return_threshold=4)
    for _ in range(3):
        flow.try_acquire(1)
    assert flow.on_arrival(1, 0) is False
    assert flow.on_arrival(1, 2) is True
    assert flow.available(1) == 3


def test_piggyback_takes_owed_credits():
    flow = RankCredits(3, credits_per_pair=8, return_threshold=8)
    for _ in range(3):
        flow.on_arrival(2, 0)
        assert flow.on_release(2) is None
    assert flow.take_piggyback(1) == 0  # owes nothing to rank 1
    assert flow.take_piggyback(2) == 3
    assert flow.take_piggyback(2) == 0  # taken once
    assert flow.owed[2] == 0
    assert flow.unreturned[2] == 0
    assert flow.piggybacked == 3
    # The threshold restarts from zero.
    for _ in range(7):
        flow.on_arrival(2, 0)
        assert flow.on_release(2) is None
    flow.on_arrival(2, 0)
    assert flow.on_release(2) == (2, 8)


def test_piggyback_does_not_take_arrived_but_unreleased_credits():
    flow = RankCredits(2, credits_per_pair=8, return_threshold=8)
    flow.on_arrival(1, 0)
    flow.on_arrival(1, 0)
    flow.on_release(1)
    assert flow.take_piggyback(1) == 1
    assert flow.unreturned[1] == 1


def test_piggyback_respects_max_tag():
    flow = RankCredits(2, credits_per_pair=10, return_threshold=10, max_tag=4)
    for _ in range(9):
        flow.on_arrival(1, 0)
        flow.on_release(1)
    assert flow.take_piggyback(1) == 4
    assert flow.take_piggyback(1) == 4
    assert flow.take_piggyback(1) == 1
    assert flow.take_piggyback(1) == 0
    assert flow.piggybacked == 9
    assert flow.unreturned[1] == 0


def test_piggyback_switch_off_leaves_owed_credits_for_credit_messages():
    flow = RankCredits(2, credits_per_pair=4, return_threshold=2, piggyback=False)
    flow.on_arrival(1, 0)
    flow.on_arrival(1, 0)
    assert flow.on_release(1) is None
    assert flow.take_piggyback(1) == 0
    assert flow.piggybacked == 0
    assert flow.owed[1] == 1
    assert flow.on_release(1) == (1, 2)


def test_unreturned_high_water_tracks_all_senders():
    flow = RankCredits(3, credits_per_pair=4, return_threshold=2)
    flow.on_arrival(1, 0)
    flow.on_arrival(2, 0)
    flow.on_arrival(2, 0)
    assert flow.unreturned_total == 3
    flow.on_release(2)
    flow.on_release(2)
    assert flow.unreturned_total == 1
    assert flow.unreturned_high_water == 3


def test_not_silent_and_reports_private_state_size():
    flow = RankCredits(5, credits_per_pair=1, return_threshold=1)
    assert flow.name == "rank"
    assert flow.credits_change_silently is False
    assert flow.credit_state_bytes() == 3 * 5 * 8
    assert flow.shared_state_bytes() == 0
