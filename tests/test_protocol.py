"""Endpoint: send-slot ownership, deferral for credit, FIFO per destination, stall detection."""

from __future__ import annotations

import numpy as np
import pytest

from mailrail.errors import BufferOwnershipError, CreditStallError, InvalidDestinationError, MessageSizeError
from mailrail.flow import NodeCredits, RankCredits, Unconstrained
from mailrail.flow.node import LocalCounters
from mailrail.pool import SlotPool
from mailrail.protocol import FREE, HELD, IN_FLIGHT, QUEUED, Endpoint

DATAGRAM = 64
SIZE = 4


def endpoint(flow=None, *, rank=0, size=SIZE, slots=8, stall_timeout=0.0) -> Endpoint:
    flow = Unconstrained() if flow is None else flow
    return Endpoint(rank, size, SlotPool(slots, DATAGRAM), flow, stall_timeout=stall_timeout)


def rank_endpoint(per_pair=1, threshold=1, **kwargs) -> Endpoint:
    return endpoint(RankCredits(kwargs.get("size", SIZE), per_pair, threshold), **kwargs)


def reserve_buf(ep: Endpoint):
    slot = ep.reserve()
    assert slot is not None
    return slot, ep.send_pool.views[slot]


def send(ep: Endpoint, dest: int, nbytes: int = 8):
    """Reserve and submit; returns (slot, sent_now)."""
    slot, buf = reserve_buf(ep)
    _, _, sent = ep.submit(dest, buf, nbytes)
    assert sent in (None, slot)
    return slot, sent is not None


# -- lifecycle ----------------------------------------------------------------------


def test_reserve_submit_transmit_complete_lifecycle():
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    assert ep.send_state[slot] == HELD
    assert ep.submit(2, buf, 10) == (2, 10, slot)
    assert ep.send_state[slot] == IN_FLIGHT
    assert ep.tag_for(2) == 0
    assert ep.messages_sent == 1 and ep.bytes_sent == 10
    ep.send_completed(slot)
    assert ep.send_state[slot] == FREE
    assert ep.send_pool.free_count == 8


def test_reserve_returns_none_and_counts_failures_when_the_pool_is_empty():
    ep = endpoint(slots=2)
    assert ep.reserve() is not None
    assert ep.reserve() is not None
    assert ep.reserve() is None
    assert ep.reserve() is None
    assert ep.reserve_failures == 2


def test_completed_slot_can_be_reserved_and_sent_again():
    ep = endpoint(slots=1)
    slot, buf = reserve_buf(ep)
    ep.submit(1, buf, 1)
    ep.send_completed(slot)
    again, buf2 = reserve_buf(ep)
    assert again == slot and buf2 is buf
    assert ep.submit(1, buf2, 1)[2] == slot


def test_submit_accepts_a_numpy_view_at_the_slot_start():
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    assert ep.submit(1, buf[:8], 8) == (1, 8, slot)


def test_submit_accepts_zero_and_full_datagram_sizes():
    ep = endpoint()
    assert ep.submit(1, reserve_buf(ep)[1], 0)[1] == 0
    assert ep.submit(1, reserve_buf(ep)[1], DATAGRAM)[1] == DATAGRAM


@pytest.mark.parametrize("dest", [np.int64(3), np.int32(0), np.uint8(2)])
def test_numpy_integer_destination_is_accepted_and_normalized(dest):
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    normalized, nbytes, sent = ep.submit(dest, buf, np.int64(5))
    assert normalized == int(dest) and type(normalized) is int
    assert nbytes == 5 and type(nbytes) is int
    assert sent == slot


# -- errors ---------------------------------------------------------------------------


@pytest.mark.parametrize("dest", [-1, SIZE, SIZE + 10, True, False, 1.5, "3", None, np.float64(1.0)])
def test_invalid_destination_is_rejected_naming_it(dest):
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    with pytest.raises(InvalidDestinationError) as info:
        ep.submit(dest, buf, 1)
    message = str(info.value)
    assert repr(dest) in message
    assert f"0..{SIZE - 1}" in message
    # The reserved slot went back to the pool before the error: a failed send() leaks no buffer.
    assert ep.send_state[slot] == FREE and ep.send_pool.free_count == 8
    assert ep.send_buffers_reserved == 0 and ep.messages_sent == 0


@pytest.mark.parametrize("nbytes", [-1, DATAGRAM + 1, 2.0, "8", True])
def test_invalid_size_is_rejected_naming_it_and_the_datagram_size(nbytes):
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    with pytest.raises(MessageSizeError) as info:
        ep.submit(1, buf, nbytes)
    message = str(info.value)
    assert repr(nbytes) in message
    assert str(DATAGRAM) in message
    assert ep.send_state[slot] == FREE and ep.send_pool.free_count == 8
    assert ep.send_buffers_reserved == 0 and ep.messages_sent == 0


def test_reserved_buffers_are_counted_until_submitted():
    ep = endpoint()
    slots = [reserve_buf(ep) for _ in range(3)]
    assert ep.send_buffers_reserved == 3 == ep.transport_counters(0)["send_buffers_reserved"]
    ep.submit(1, slots[0][1], 4)
    assert ep.send_buffers_reserved == 2


def test_a_deferred_send_is_no_longer_counted_as_reserved():
    ep = rank_endpoint(per_pair=1)
    send(ep, 1)
    _, deferred = send(ep, 1)
    assert not deferred and ep.send_buffers_reserved == 0 and ep.deferred.total == 1


@pytest.mark.parametrize("view", [lambda b: b[::2], lambda b: b[::-1][::-1][::3], lambda b: b.reshape(8, 8)[:, :2]])
def test_a_non_contiguous_view_of_a_slot_is_refused_naming_its_strides_and_nothing_changes(view):
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    strided = view(buf)
    with pytest.raises(BufferOwnershipError) as info:
        ep.submit(1, strided, 4)
    assert f"strides {strided.strides}" in str(info.value)
    assert ep.send_state[slot] == HELD and ep.send_buffers_reserved == 1 and ep.messages_sent == 0
    assert ep.submit(1, buf[:8], 4) == (1, 4, slot)  # the contiguous prefix is fine


def test_a_bad_destination_with_a_non_contiguous_view_leaves_the_slot_reserved():
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    with pytest.raises(InvalidDestinationError):
        ep.submit(99, buf[::2], 4)
    assert ep.send_state[slot] == HELD and ep.send_buffers_reserved == 1


def test_a_failed_send_of_a_buffer_already_sent_changes_nothing():
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    ep.submit(1, buf, 4)
    with pytest.raises(InvalidDestinationError):
        ep.submit(99, buf, 4)
    assert ep.send_state[slot] == IN_FLIGHT and ep.send_buffers_reserved == 0


def test_the_stall_report_reads_the_counters_of_the_transport():
    ep = rank_endpoint(per_pair=1, stall_timeout=1.0)
    send(ep, 1)
    send(ep, 1)  # deferred
    counts = dict(ep.transport_counters(0), messages_received=7, messages_released=5, credit_messages_received=3)
    ep.counters = lambda: counts
    ep.check_stall(0.0)
    with pytest.raises(CreditStallError) as info:
        ep.check_stall(2.0)
    assert "received 7 message(s), released 5, got 3 credit message(s)" in str(info.value)


@pytest.mark.parametrize("foreign", [np.zeros(DATAGRAM, np.uint8), bytearray(DATAGRAM), b"abc"])
def test_foreign_buffer_is_rejected(foreign):
    ep = endpoint()
    with pytest.raises(BufferOwnershipError) as info:
        ep.submit(1, foreign, 1)
    assert type(foreign).__name__ in str(info.value)
    assert "reserve" in str(info.value)


def test_buffer_from_another_endpoints_pool_is_rejected():
    a, b = endpoint(), endpoint()
    _, buf = reserve_buf(b)
    with pytest.raises(BufferOwnershipError):
        a.submit(1, buf, 1)


def test_misaligned_view_of_a_reserved_slot_is_rejected():
    ep = endpoint()
    _, buf = reserve_buf(ep)
    with pytest.raises(BufferOwnershipError):
        ep.submit(1, buf[1:], 1)


def test_unreserved_slot_buffer_is_rejected():
    ep = endpoint()
    with pytest.raises(BufferOwnershipError, match="free"):
        ep.submit(1, ep.send_pool.views[3], 1)


def test_sending_the_same_buffer_twice_is_rejected():
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    ep.submit(1, buf, 1)
    with pytest.raises(BufferOwnershipError) as info:
        ep.submit(2, buf, 1)
    assert f"slot {slot}" in str(info.value)
    assert "in flight" in str(info.value)


def test_sending_a_completed_buffer_without_reserving_again_is_rejected():
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    ep.submit(1, buf, 1)
    ep.send_completed(slot)
    with pytest.raises(BufferOwnershipError, match="free"):
        ep.submit(1, buf, 1)


def test_sending_a_deferred_buffer_again_is_rejected():
    ep = rank_endpoint(per_pair=1)
    send(ep, 1)
    slot, buf = reserve_buf(ep)
    assert ep.submit(1, buf, 1)[2] is None
    with pytest.raises(BufferOwnershipError) as info:
        ep.submit(2, buf, 1)
    assert "deferred" in str(info.value)
    assert ep.send_state[slot] == QUEUED
    assert ep.deferred.total == 1  # not queued twice


# -- deferral and FIFO ---------------------------------------------------------------------


def test_send_without_credit_is_deferred_until_credit_returns():
    ep = rank_endpoint(per_pair=2)
    _, now1 = send(ep, 1)
    _, now2 = send(ep, 1)
    slot3, now3 = send(ep, 1)
    assert (now1, now2, now3) == (True, True, False)
    assert ep.send_state[slot3] == QUEUED
    assert ep.drain() == []  # still no credit
    ep.credits_arrived(1, 1)
    assert ep.drain() == [(1, slot3, 8)]
    assert ep.send_state[slot3] == IN_FLIGHT
    assert ep.drain() == []
    assert ep.protocol_counters()["deferred_sends"] == 1


def test_deferral_to_one_destination_does_not_block_others():
    ep = rank_endpoint(per_pair=1)
    send(ep, 1)
    _, now = send(ep, 1)
    assert not now
    _, now = send(ep, 2)
    assert now


def test_piggybacked_credits_in_an_arriving_tag_wake_the_queue():
    ep = rank_endpoint(per_pair=1)
    send(ep, 3)
    slot, _ = send(ep, 3)
    ep.arrived(3, 1, 8)  # rank 3 sends us a payload carrying 1 credit
    assert ep.drain() == [(3, slot, 8)]


def test_newer_message_never_overtakes_an_older_queued_one_even_when_credit_appears():
    ep = rank_endpoint(per_pair=1)
    send(ep, 1)
    older, _ = send(ep, 1)
    ep.credits_arrived(1, 1)  # credit is available now, but `older` is still queued
    newer, now = send(ep, 1)
    assert not now, "the newer message overtook the queued one"
    assert ep.drain() == [(1, older, 8)]
    assert ep.drain() == []
    ep.credits_arrived(1, 1)
    assert ep.drain() == [(1, newer, 8)]


def test_drain_sends_at_most_one_per_destination_per_call_in_fifo_order():
    ep = rank_endpoint(per_pair=3)
    for _ in range(3):
        send(ep, 1)
    queued = [send(ep, 1)[0] for _ in range(3)]
    ep.credits_arrived(1, 3)
    drained = []
    for _ in range(5):
        batch = ep.drain()
        assert len(batch) <= 1
        drained += [slot for _, slot, _ in batch]
    assert drained == queued


def test_drain_serves_every_destination_that_gained_credit():
    ep = rank_endpoint(per_pair=1)
    for dest in (1, 2, 3):
        send(ep, dest)
    queued = {dest: send(ep, dest)[0] for dest in (1, 2, 3)}
    ep.credits_arrived(3, 1)
    ep.credits_arrived(1, 1)
    assert sorted(ep.drain()) == [(1, queued[1], 8), (3, queued[3], 8)]


def test_node_mode_fifo_with_credits_refilled_silently_by_a_neighbour():
    pool = LocalCounters(SIZE, 1)
    me = NodeCredits(1, lambda r: 0, pool, 1, 1)
    neighbour = NodeCredits(1, lambda r: 0, pool, 1, 1)
    ep = endpoint(me)
    send(ep, 2)
    older, _ = send(ep, 2)
    neighbour.on_credit_return(2, 1)  # no event reaches `ep`
    newer, now = send(ep, 2)
    assert not now
    assert ep.drain() == [(2, older, 8)]
    pool.add(2, 1)
    assert ep.drain() == [(2, newer, 8)]


def test_sends_leave_at_once_again_after_the_deferred_queues_are_cleared():
    # finalize() clears the queues; the endpoint must not think a queue still exists.
    ep = rank_endpoint(per_pair=1)
    send(ep, 1)
    send(ep, 1)
    assert ep.deferred.clear() != []
    ep.credits_arrived(1, 1)
    _, now = send(ep, 1)
    assert now


def test_unconstrained_mode_never_defers():
    ep = endpoint(slots=100)
    assert all(send(ep, 1)[1] for _ in range(100))
    assert ep.deferred.total == 0


# -- receiver side -------------------------------------------------------------------


def test_receiver_counts_and_returns_credits_at_the_threshold():
    ep = rank_endpoint(per_pair=4, threshold=2)
    ep.arrived(2, 0, 10)
    ep.arrived(2, 0, 20)
    assert ep.released(2) is None
    assert ep.released(2) == (2, 2)
    counters = {**ep.transport_counters(held_high_water=0), **ep.protocol_counters()}
    assert counters["messages_received"] == 2
    assert counters["bytes_received"] == 30
    assert counters["messages_released"] == 2
    assert counters["credit_messages_sent"] == 1
    assert counters["credits_returned"] == 2
    assert counters["credit_window_high_water"] == 2


def test_the_tag_piggybacks_owed_credits():
    ep = rank_endpoint(per_pair=4, threshold=4)
    ep.arrived(1, 0, 1)
    ep.released(1)
    slot, now = send(ep, 1)
    assert now
    assert ep.tag_for(1) == 1
    assert ep.protocol_counters()["credits_piggybacked"] == 1


# -- stall detection -----------------------------------------------------------------


def stalled_endpoint(timeout: float) -> Endpoint:
    ep = rank_endpoint(per_pair=1, stall_timeout=timeout)
    send(ep, 2)
    send(ep, 2)
    send(ep, 2)
    return ep


def test_stall_raises_naming_the_starved_destination_and_queued_count():
    ep = stalled_endpoint(5.0)
    ep.check_stall(100.0)  # the clock starts
    ep.check_stall(104.9)
    with pytest.raises(CreditStallError) as info:
        ep.check_stall(105.5)
    message = str(info.value)
    assert "rank 0" in message
    assert "2 deferred message(s)" in message
    assert "destination 2: 2 queued" in message
    assert "0 credit(s) available" in message
    assert "rank flow control" in message


def test_no_stall_error_when_stall_timeout_is_zero():
    ep = stalled_endpoint(0.0)
    ep.check_stall(0.0)
    ep.check_stall(1e9)


def test_no_stall_error_without_deferred_sends():
    ep = rank_endpoint(per_pair=1, stall_timeout=1.0)
    send(ep, 1)
    ep.check_stall(0.0)
    ep.check_stall(1000.0)


def test_progress_restarts_the_stall_clock():
    ep = stalled_endpoint(5.0)
    ep.check_stall(0.0)
    ep.credits_arrived(2, 1)
    assert len(ep.drain()) == 1  # progress: one message left
    ep.check_stall(10.0)  # clock restarts here, no error although 10 s passed since 0
    ep.check_stall(14.0)
    with pytest.raises(CreditStallError, match="destination 2: 1 queued"):
        ep.check_stall(15.5)


def test_stall_clock_restarts_when_a_new_deferral_episode_begins():
    ep = rank_endpoint(per_pair=1, stall_timeout=5.0)
    send(ep, 1)
    send(ep, 1)
    ep.check_stall(0.0)
    ep.credits_arrived(1, 1)
    ep.drain()  # queue empty again
    ep.check_stall(3.0)  # nothing deferred: no clock
    send(ep, 1)  # deferred: a new episode
    ep.check_stall(20.0)
    ep.check_stall(24.0)
    with pytest.raises(CreditStallError):
        ep.check_stall(26.0)


def test_counters_report_deferral_statistics():
    ep = rank_endpoint(per_pair=1)
    send(ep, 1)
    send(ep, 1)
    send(ep, 1)
    counters = ep.protocol_counters()
    assert counters["deferred_sends"] == 2
    assert counters["deferred_now"] == 2
    assert counters["deferred_high_water"] == 2
    assert counters["credit_state_bytes"] == 3 * SIZE * 8
    assert counters["shared_credit_bytes"] == 0
    # A send counts when it is submitted, deferred or not (the same on both transports).
    assert ep.messages_sent == 3 and ep.bytes_sent == 3 * 8
