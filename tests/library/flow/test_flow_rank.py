"""RankCredits: one credit window per (sender rank, receiver rank) pair."""

from __future__ import annotations

import pytest

from helpers import released
from mailrail.errors import ProtocolError
from mailrail.flow import RankCredits
from mailrail.flow.base import GRANT, REVOKE


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
    flow.on_credit_message(1, GRANT, 2)
    assert flow.available(1) == 2
    assert flow.try_acquire(1)


def test_credit_return_beyond_the_window_raises_protocol_error():
    flow = RankCredits(2, credits_per_pair=2, return_threshold=1)
    flow.try_acquire(1)
    with pytest.raises(ProtocolError) as info:
        flow.on_credit_message(1, GRANT, 2)
    assert "rank 1" in str(info.value)
    assert "3" in str(info.value)


def test_receiver_returns_credits_once_threshold_releases_gathered():
    flow = RankCredits(4, credits_per_pair=8, return_threshold=3)
    for _ in range(5):
        flow.on_arrival(2, 0)
    assert released(flow, 2) == []
    assert released(flow, 2) == []
    assert released(flow, 2) == [(2, GRANT, 3)]
    assert released(flow, 2) == []
    assert flow.unreturned[2] == 2
    assert flow.owed[2] == 1


def test_releases_are_counted_per_source():
    flow = RankCredits(3, credits_per_pair=4, return_threshold=2)
    flow.on_arrival(1, 0)
    flow.on_arrival(2, 0)
    assert released(flow, 1) == []
    assert released(flow, 2) == []  # one from each source: neither reached 2
    flow.on_arrival(1, 0)
    assert released(flow, 1) == [(1, GRANT, 2)]


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
    assert released(flow, 1) == [(1, GRANT, 2)]
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
        assert released(flow, 2) == []
    assert flow.take_piggyback(1) == 0  # owes nothing to rank 1
    assert flow.take_piggyback(2) == 3
    assert flow.take_piggyback(2) == 0  # taken once
    assert flow.owed[2] == 0
    assert flow.unreturned[2] == 0
    assert flow.piggybacked == 3
    # The threshold restarts from zero.
    for _ in range(7):
        flow.on_arrival(2, 0)
        assert released(flow, 2) == []
    flow.on_arrival(2, 0)
    assert released(flow, 2) == [(2, GRANT, 8)]


def test_piggyback_does_not_take_arrived_but_unreleased_credits():
    flow = RankCredits(2, credits_per_pair=8, return_threshold=8)
    flow.on_arrival(1, 0)
    flow.on_arrival(1, 0)
    flow.on_release(1)
    assert flow.take_piggyback(1) == 1
    assert flow.unreturned[1] == 1


def test_piggyback_respects_max_tag():
    flow = RankCredits(2, credits_per_pair=40, return_threshold=40, max_tag=15)
    for _ in range(33):
        flow.on_arrival(1, 0)
        flow.on_release(1)
    assert flow.take_piggyback(1) == 15
    assert flow.take_piggyback(1) == 15
    assert flow.take_piggyback(1) == 3
    assert flow.take_piggyback(1) == 0
    assert flow.piggybacked == 33
    assert flow.unreturned[1] == 0


def test_credit_messages_carry_at_most_what_the_tag_space_holds():
    flow = RankCredits(2, credits_per_pair=40, return_threshold=40, piggyback=False, max_tag=15 + 8 * 9)
    assert flow.max_count == 10  # (TAG_UB - 7) >> 3: the count shares the tag with the message kind
    for _ in range(40):
        flow.on_arrival(1, 0)
    messages = [message for _ in range(40) for message in released(flow, 1)]
    assert messages == [(1, GRANT, 10)] * 4


def test_a_tag_space_too_small_for_credit_messages_is_refused():
    with pytest.raises(ValueError, match="tag_ub=14 is too small for credit messages: at least 15"):
        RankCredits(2, credits_per_pair=1, return_threshold=1, max_tag=14)


def test_rank_mode_refuses_credit_messages_of_other_kinds():
    flow = RankCredits(2, credits_per_pair=1, return_threshold=1)
    with pytest.raises(ProtocolError, match=r"rank flow control got a credit message \(revoke, count 0\) from rank 1"):
        flow.on_credit_message(1, REVOKE, 0)
    with pytest.raises(ProtocolError, match=r"\(unknown kind 7, count 1\)"):
        flow.on_credit_message(1, 7, 1)


def test_piggyback_switch_off_leaves_owed_credits_for_credit_messages():
    flow = RankCredits(2, credits_per_pair=4, return_threshold=2, piggyback=False)
    flow.on_arrival(1, 0)
    flow.on_arrival(1, 0)
    assert released(flow, 1) == []
    assert flow.take_piggyback(1) == 0
    assert flow.piggybacked == 0
    assert flow.owed[1] == 1
    assert released(flow, 1) == [(1, GRANT, 2)]


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
