"""Endpoint: send-slot ownership, the in-flight ring, stream actions, deferral for credit, FIFO per
destination, received messages, the progress cadences, finalize and stall detection."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import FakeClock
from mailrail.counters import COUNTERS
from mailrail.errors import (
    BufferOwnershipError,
    CreditStallError,
    FinalizedError,
    InvalidDestinationError,
    MessageSizeError,
    ProtocolError,
    ReleaseError,
)
from mailrail.flow import AdaptiveCredits, NodeCredits, RankCredits, Unconstrained
from mailrail.flow.base import ANSWER, GIVE_BACK, GRANT, REQUEST, REVOKE, credit_tag
from mailrail.flow.node import LocalCounters
from mailrail.pool import SlotPool
from mailrail.protocol import (
    CREATE,
    FREE,
    HELD,
    IN_FLIGHT,
    ISEND_NEW,
    ISEND_TAGGED,
    NO_SLOT,
    QUEUED,
    REPLACE,
    START,
    Endpoint,
    Message,
)

DATAGRAM = 64
SIZE = 4
#: The progress rules of the tests' endpoints (each test that is about one of them sets its own).
TUNING = {"tag_ub": 32767, "head_patience": 64, "credit_poll_interval": 8, "idle_spins": 4}


def grant(count: int) -> int:
    """The tag of a credit message returning *count* credits."""
    return credit_tag(GRANT, count)


def endpoint(flow=None, *, rank=0, size=SIZE, slots=8, stall_timeout=0.0, recv_slots=16, **tuning) -> Endpoint:
    """An Endpoint with no receive posted yet: a released slot joins the ring, so release() returns it."""
    flow = Unconstrained() if flow is None else flow
    return Endpoint(
        rank,
        size,
        SlotPool(slots, DATAGRAM),
        flow,
        **{**TUNING, **tuning},
        stall_timeout=stall_timeout,
        recv_slots=recv_slots,
        clock=FakeClock(),
    )


def check_stall_at(ep: Endpoint, now: float) -> None:
    """The stall check with the Endpoint's clock at *now*."""
    ep.clock.now = now
    ep.check_stall()


def drain_at(ep: Endpoint, now: float) -> list[tuple[int, int, int, int, int]]:
    """Every send a drain lets leave (then its stall check), with the Endpoint's clock at *now*."""
    ep.clock.now = now
    return list(ep.drain_ready())


def rank_endpoint(per_pair=1, threshold=1, piggyback=True, **kwargs) -> Endpoint:
    return endpoint(RankCredits(kwargs.get("size", SIZE), per_pair, threshold, piggyback=piggyback), **kwargs)


def reserve_buf(ep: Endpoint):
    slot = ep.reserve()
    assert slot != NO_SLOT
    return slot, ep.send_pool.views[slot]


def send(ep: Endpoint, dest: int, nbytes: int = 8):
    """Reserve and submit; returns (slot, sent_now)."""
    slot, buf = reserve_buf(ep)
    _, _, sent, _, _ = ep.submit(dest, buf, nbytes)
    assert sent in (NO_SLOT, slot)
    return slot, sent != NO_SLOT


def drained(ep: Endpoint, now: float | None = None) -> list[tuple[int, int, int]]:
    """``(dest, slot, nbytes)`` of each send drain_ready() lets leave (with the clock at *now*, if given)."""
    if now is not None:
        ep.clock.now = now
    return [(dest, slot, nbytes) for dest, nbytes, slot, _, _ in list(ep.drain_ready())]


def arrive(ep: Endpoint, source: int, tag: int = 0, nbytes: int = 8, slot: int = 0) -> Message:
    return ep.arrived(source, tag, nbytes, slot, np.zeros(nbytes, np.uint8))


def complete_oldest(ep: Endpoint) -> int:
    """The transport found the oldest send in flight complete: its slot."""
    slot = ep.oldest_in_flight()
    assert slot != NO_SLOT
    ep.oldest_completed()
    return slot


# -- construction ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, value",
    [
        ("tag_ub", 0),
        ("head_patience", 0),
        ("credit_poll_interval", 0),
        ("idle_spins", -1),
        ("head_patience", 2.0),
        ("tag_ub", True),
    ],
)
def test_the_progress_rules_are_checked_at_construction(name, value):
    with pytest.raises(ValueError, match=f"{name}={value!r}"):
        endpoint(**{name: value})


# -- lifecycle ----------------------------------------------------------------------


def test_reserve_submit_transmit_complete_lifecycle():
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    assert ep.send_state[slot] == HELD and ep.reserved == 1 and ep.free_slots == 7
    assert ep.submit(2, buf, 10) == (2, 10, slot, 0, ISEND_NEW)
    assert ep.send_state[slot] == IN_FLIGHT and ep.in_flight == 1 and ep.reserved == 0
    assert ep.messages_sent == 1 and ep.bytes_sent == 10
    assert ep.pending_sends() == 1
    assert complete_oldest(ep) == slot
    assert ep.send_state[slot] == FREE and ep.free_slots == 8 and ep.in_flight == 0
    assert ep.oldest_in_flight() == NO_SLOT
    assert ep.pending_sends() == 0


def test_reserve_returns_no_slot_and_counts_failures_when_the_pool_is_empty():
    ep = endpoint(slots=2)
    assert ep.reserve() != NO_SLOT
    assert ep.reserve() != NO_SLOT
    assert ep.reserve() == NO_SLOT
    assert ep.reserve() == NO_SLOT
    assert ep.reserve_failures == 2 == ep.counters()["reserve_failures"]


def test_the_lowest_free_slot_is_handed_out_first_and_a_freed_slot_comes_back_first():
    ep = endpoint(slots=4)
    assert [ep.reserve() for _ in range(3)] == [0, 1, 2]
    for slot in (0, 1):
        ep.submit(1, ep.send_pool.views[slot], 1)
    complete_oldest(ep)  # slot 0: the hot slot is reused before the never-used slot 3
    assert ep.reserve() == 0
    assert ep.reserve() == 3
    assert ep.reserve() == NO_SLOT


def test_completed_slot_can_be_reserved_and_sent_again():
    ep = endpoint(slots=1)
    slot, buf = reserve_buf(ep)
    ep.submit(1, buf, 1)
    complete_oldest(ep)
    again, buf2 = reserve_buf(ep)
    assert again == slot and buf2 is buf
    assert ep.submit(1, buf2, 1)[2] == slot


def test_submit_accepts_a_numpy_view_at_the_slot_start():
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    assert ep.submit(1, buf[:8], 8)[:3] == (1, 8, slot)


def test_submit_accepts_zero_and_full_datagram_sizes():
    ep = endpoint()
    assert ep.submit(1, reserve_buf(ep)[1], 0)[1] == 0
    assert ep.submit(1, reserve_buf(ep)[1], DATAGRAM)[1] == DATAGRAM


@pytest.mark.parametrize("dest", [np.int64(3), np.int32(0), np.uint8(2)])
def test_numpy_integer_destination_is_accepted_and_normalized(dest):
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    normalized, nbytes, sent, _, _ = ep.submit(dest, buf, np.int64(5))
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
    assert ep.send_state[slot] == FREE and ep.free_slots == 8
    assert ep.reserved == 0 and ep.messages_sent == 0 and ep.pending_sends() == 0
    assert ep.reserve() == slot  # and it is handed out again


@pytest.mark.parametrize("nbytes", [-1, DATAGRAM + 1, 2.0, "8", True])
def test_invalid_size_is_rejected_naming_it_and_the_datagram_size(nbytes):
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    with pytest.raises(MessageSizeError) as info:
        ep.submit(1, buf, nbytes)
    message = str(info.value)
    assert repr(nbytes) in message
    assert str(DATAGRAM) in message
    assert ep.send_state[slot] == FREE and ep.free_slots == 8
    assert ep.reserved == 0 and ep.messages_sent == 0


def test_reserved_buffers_are_counted_until_submitted():
    ep = endpoint()
    slots = [reserve_buf(ep) for _ in range(3)]
    assert ep.reserved == 3 == ep.counters()["send_buffers_reserved"] == ep.pending_sends()
    ep.submit(1, slots[0][1], 4)
    assert ep.reserved == 2 == ep.counters()["send_buffers_reserved"]
    assert ep.pending_sends() == 3  # two reserved, one in flight


def test_a_deferred_send_is_no_longer_counted_as_reserved():
    ep = rank_endpoint(per_pair=1)
    send(ep, 1)
    _, sent_now = send(ep, 1)
    assert not sent_now and ep.reserved == 0 and ep.deferred_total == 1
    assert ep.pending_sends() == 2  # one in flight, one deferred


@pytest.mark.parametrize("view", [lambda b: b[::2], lambda b: b[::-1][::-1][::3], lambda b: b.reshape(8, 8)[:, :2]])
def test_a_non_contiguous_view_of_a_slot_is_refused_naming_its_strides_and_nothing_changes(view):
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    strided = view(buf)
    with pytest.raises(BufferOwnershipError) as info:
        ep.submit(1, strided, 4)
    assert f"strides {strided.strides}" in str(info.value)
    assert ep.send_state[slot] == HELD and ep.reserved == 1 and ep.messages_sent == 0
    assert ep.submit(1, buf[:8], 4)[:3] == (1, 4, slot)  # the contiguous prefix is fine


def test_a_bad_destination_with_a_non_contiguous_view_leaves_the_slot_reserved():
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    with pytest.raises(InvalidDestinationError):
        ep.submit(99, buf[::2], 4)
    assert ep.send_state[slot] == HELD and ep.reserved == 1


def test_a_failed_send_of_a_buffer_already_sent_changes_nothing():
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    ep.submit(1, buf, 4)
    with pytest.raises(InvalidDestinationError):
        ep.submit(99, buf, 4)
    assert ep.send_state[slot] == IN_FLIGHT and ep.reserved == 0 and ep.in_flight == 1


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
    assert "once per reserve_send_buffer()" in str(info.value)
    assert ep.messages_sent == 1 and ep.in_flight == 1


def test_sending_a_completed_buffer_without_reserving_again_is_rejected():
    ep = endpoint()
    _, buf = reserve_buf(ep)
    ep.submit(1, buf, 1)
    complete_oldest(ep)
    with pytest.raises(BufferOwnershipError, match="free"):
        ep.submit(1, buf, 1)


def test_sending_a_deferred_buffer_again_is_rejected():
    ep = rank_endpoint(per_pair=1)
    send(ep, 1)
    slot, buf = reserve_buf(ep)
    assert ep.submit(1, buf, 1) == (1, 1, NO_SLOT, 0, 0)
    with pytest.raises(BufferOwnershipError) as info:
        ep.submit(2, buf, 1)
    assert "deferred" in str(info.value)
    assert ep.send_state[slot] == QUEUED
    assert ep.deferred_total == 1  # not queued twice


def test_completing_a_slot_that_is_not_in_flight_is_a_protocol_error():
    """The ring and the slot states must agree: a slot freed twice would be handed out twice."""
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    ep.submit(1, buf, 1)
    ep.send_state[slot] = HELD  # a corrupted state, as a double free would leave it
    with pytest.raises(ProtocolError, match=f"send slot {slot} completed while reserved"):
        ep.oldest_completed()


# -- the in-flight ring and head patience ---------------------------------------------


def test_sends_complete_oldest_first():
    ep = endpoint()
    slots = [send(ep, 1)[0] for _ in range(3)]
    assert ep.in_flight == 3
    assert [complete_oldest(ep) for _ in range(3)] == slots
    assert ep.free_slots == 8


def test_an_unfinished_oldest_send_moves_to_the_back_after_head_patience_calls():
    ep = endpoint(head_patience=3)
    a, b, c = (send(ep, 1)[0] for _ in range(3))
    ep.oldest_still_in_flight()
    ep.oldest_still_in_flight()
    assert ep.oldest_in_flight() == a  # patience not yet spent
    ep.oldest_still_in_flight()
    assert ep.oldest_in_flight() == b  # a rendezvous send to a slow receiver does not pin the pool
    assert complete_oldest(ep) == b
    # Patience counts afresh for each head: a completion resets it.
    ep.oldest_still_in_flight()
    ep.oldest_still_in_flight()
    assert ep.oldest_in_flight() == c
    ep.oldest_still_in_flight()
    assert ep.oldest_in_flight() == a
    assert [complete_oldest(ep) for _ in range(2)] == [a, c]


def test_a_head_patience_of_one_rotates_at_every_unfinished_test():
    ep = endpoint(head_patience=1)
    a, b = (send(ep, 1)[0] for _ in range(2))
    ep.oldest_still_in_flight()
    assert ep.oldest_in_flight() == b
    ep.oldest_still_in_flight()
    assert ep.oldest_in_flight() == a


def test_the_patience_spent_on_a_completed_head_does_not_carry_over():
    ep = endpoint(head_patience=3)
    a, b = (send(ep, 1)[0] for _ in range(2))
    ep.oldest_still_in_flight()
    ep.oldest_still_in_flight()
    assert complete_oldest(ep) == a
    ep.oldest_still_in_flight()
    ep.oldest_still_in_flight()
    assert ep.oldest_in_flight() == b  # only two waits on b: still the head


def test_abandon_forgets_the_sends_in_flight_and_their_persistent_sends():
    ep = endpoint()
    slot, buf = reserve_buf(ep)
    for _ in range(2):  # ISEND_NEW, then CREATE: the slot holds a persistent send
        ep.submit(1, buf, 8)
        complete_oldest(ep)
        reserve_buf(ep)
    assert ep.has_persistent(slot)
    ep.submit(1, buf, 8)
    other = send(ep, 2)[0]
    assert ep.abandon_in_flight() == [slot, other]
    assert ep.in_flight == 0 and ep.oldest_in_flight() == NO_SLOT
    assert not ep.has_persistent(slot)  # it stays with MPI: the transport must not free it


# -- which MPI call a send leaves by (the per-slot stream cache) -----------------------


def resend(ep: Endpoint, slot: int, dest: int, nbytes: int) -> int:
    """Send *slot* (it must be the free slot on top) to *dest*, complete it; the action it left by."""
    assert ep.reserve() == slot
    _, _, sent, tag, action = ep.submit(dest, ep.send_pool.views[slot], nbytes)
    assert sent == slot
    assert (tag != 0) == (action == ISEND_TAGGED)
    assert complete_oldest(ep) == slot
    return action


def test_a_repeated_stream_becomes_a_persistent_send_and_a_new_one_replaces_it():
    ep = endpoint(slots=1)
    actions = [resend(ep, 0, dest, nbytes) for dest, nbytes in [(1, 8), (1, 8), (1, 8), (2, 8), (2, 8), (2, 8)]]
    assert actions == [ISEND_NEW, CREATE, START, REPLACE, CREATE, START]
    assert ep.has_persistent(0)


def test_a_new_stream_after_a_replaced_one_has_nothing_to_free():
    ep = endpoint(slots=1)
    actions = [resend(ep, 0, dest, nbytes) for dest, nbytes in [(1, 8), (1, 8), (2, 8), (3, 8), (3, 8), (3, 4)]]
    # (2, 8) replaced the persistent (1, 8); (3, 8) follows a one-off, so it has none to free.
    assert actions == [ISEND_NEW, CREATE, REPLACE, ISEND_NEW, CREATE, REPLACE]
    assert not ep.has_persistent(0)


def test_the_same_destination_with_another_size_is_another_stream():
    ep = endpoint(slots=1)
    actions = [resend(ep, 0, 1, nbytes) for nbytes in (8, 16, 16, 8)]
    assert actions == [ISEND_NEW, ISEND_NEW, CREATE, REPLACE]


def test_each_slot_caches_its_own_stream():
    ep = endpoint(slots=2)
    first = [ep.submit(1, reserve_buf(ep)[1], 8)[4] for _ in range(2)]  # slots 0 and 1, both new
    complete_oldest(ep)
    complete_oldest(ep)
    # The free stack gives slot 1 (freed last) first: its stream repeats, slot 0's too.
    second = [ep.submit(1, reserve_buf(ep)[1], 8)[2:] for _ in range(2)]
    assert first == [ISEND_NEW, ISEND_NEW]
    assert second == [(1, 0, CREATE), (0, 0, CREATE)]


def test_a_piggybacked_send_is_a_one_off_that_leaves_the_stream_cache_alone():
    ep = rank_endpoint(per_pair=8, threshold=8)
    actions = [resend(ep, 0, 1, 8), resend(ep, 0, 1, 8)]  # slot 0 now holds (1, 8) as a persistent send
    assert actions == [ISEND_NEW, CREATE]
    ep.release(arrive(ep, 1))  # one credit owed to rank 1: the next payload to 1 carries it
    assert ep.reserve() == 0
    assert ep.submit(1, ep.send_pool.views[0], 8)[2:] == (0, 1, ISEND_TAGGED)
    complete_oldest(ep)
    assert ep.has_persistent(0)
    assert resend(ep, 0, 1, 8) == START  # the persistent send still stands
    ep.release(arrive(ep, 2))
    assert ep.reserve() == 0
    assert ep.submit(2, ep.send_pool.views[0], 8)[2:] == (0, 1, ISEND_TAGGED)  # another stream, tagged
    complete_oldest(ep)
    assert resend(ep, 0, 1, 8) == START  # still (1, 8)'s


def test_deferred_sends_leave_with_their_action_and_tag_too():
    ep = rank_endpoint(per_pair=1, threshold=1, slots=1)
    assert resend(ep, 0, 1, 8) == ISEND_NEW
    ep.credits_arrived(1, grant(1))
    assert resend(ep, 0, 1, 8) == CREATE  # the credit came back: it leaves at once
    assert ep.reserve() == 0  # no credit now: deferred
    assert ep.submit(1, ep.send_pool.views[0], 8) == (1, 8, NO_SLOT, 0, 0)
    assert list(ep.drain_ready()) == []
    ep.credits_arrived(1, grant(1))
    assert list(ep.drain_ready()) == [(1, 8, 0, 0, START)]


# -- a send whose MPI call failed ------------------------------------------------------


@pytest.mark.parametrize(
    "history, action",
    [
        ([], ISEND_NEW),  # a new stream
        ([(1, 8)], CREATE),  # the second send of (1, 8): Send_init + Start
        ([(1, 8), (1, 8)], START),  # the persistent send restarted
        ([(2, 8), (2, 8)], REPLACE),  # (2, 8)'s persistent send freed for (1, 8)
    ],
)
def test_a_failed_transmission_is_uncounted_and_frees_its_slot(history, action):
    ep = endpoint(slots=1)
    for dest, nbytes in history:
        resend(ep, 0, dest, nbytes)
    sent_before, bytes_before = ep.messages_sent, ep.bytes_sent
    assert ep.reserve() == 0
    assert ep.submit(1, ep.send_pool.views[0], 8)[2:] == (0, 0, action)
    ep.transmit_failed(0, 8, action)
    assert ep.messages_sent == sent_before and ep.bytes_sent == bytes_before  # a barrier must not wait for it
    assert ep.send_state[0] == FREE and ep.free_slots == 1 and ep.in_flight == 0 and ep.pending_sends() == 0
    # The stream is forgotten unless its persistent send still stands (a failed Start): the next send of
    # (1, 8) starts over from a one-off Isend, or restarts the request that still exists.
    assert ep.has_persistent(0) == (action == START)
    assert resend(ep, 0, 1, 8) == (START if action == START else ISEND_NEW)


def test_a_failed_transmission_must_be_in_flight():
    ep = endpoint()
    slot, _ = send(ep, 1)
    ep.oldest_completed()
    with pytest.raises(ProtocolError, match=f"send slot {slot} failed to start but is not in flight"):
        ep.transmit_failed(slot, 8, ISEND_NEW)
    assert ep.in_flight == 0 and ep.messages_sent == 1


def test_a_failed_piggybacked_send_leaves_the_persistent_send_of_its_slot_standing():
    ep = rank_endpoint(per_pair=4, threshold=4, slots=1)
    resend(ep, 0, 1, 8)
    resend(ep, 0, 1, 8)  # CREATE: slot 0 holds (1, 8)'s persistent send
    ep.release(arrive(ep, 1))
    assert ep.reserve() == 0
    assert ep.submit(1, ep.send_pool.views[0], 8)[2:] == (0, 1, ISEND_TAGGED)
    ep.transmit_failed(0, 8, ISEND_TAGGED)
    assert ep.has_persistent(0)
    assert resend(ep, 0, 1, 8) == START


def test_the_first_of_several_drained_sends_can_fail_to_start():
    ep = rank_endpoint(per_pair=1)
    send(ep, 1)
    send(ep, 2)
    first, _ = send(ep, 1)
    second, _ = send(ep, 2)
    ep.credits_arrived(1, grant(1))
    ep.credits_arrived(2, grant(1))
    ready = ep.drain_ready()
    dest, nbytes, slot, _, action = next(ready)  # the transport's MPI call for it fails: it stops iterating
    assert slot == first
    ep.transmit_failed(first, nbytes, action)
    ready.close()
    assert ep.send_state[first] == FREE and ep.in_flight == 2  # the two sent before; the failed one is gone
    assert ep.send_state[second] == QUEUED and ep.deferred_total == 1  # not handed out: still queued
    assert [slot for _, _, slot, _, _ in ep.drain_ready()] == [second]


# -- deferral and FIFO ---------------------------------------------------------------------


def test_send_without_credit_is_deferred_until_credit_returns():
    ep = rank_endpoint(per_pair=2)
    _, now1 = send(ep, 1)
    _, now2 = send(ep, 1)
    slot3, now3 = send(ep, 1)
    assert (now1, now2, now3) == (True, True, False)
    assert ep.send_state[slot3] == QUEUED and ep.in_flight == 2
    assert drained(ep) == []  # still no credit
    ep.credits_arrived(1, grant(1))
    assert drained(ep) == [(1, slot3, 8)]
    assert ep.send_state[slot3] == IN_FLIGHT and ep.in_flight == 3
    assert drained(ep) == []
    counters = ep.counters()
    assert counters["deferred_sends"] == 1 and counters["deferred_now"] == 0
    assert counters["credit_messages_received"] == 1


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
    arrive(ep, 3, tag=1)  # rank 3 sends us a payload carrying 1 credit
    assert drained(ep) == [(3, slot, 8)]


def test_newer_message_never_overtakes_an_older_queued_one_even_when_credit_appears():
    ep = rank_endpoint(per_pair=1)
    send(ep, 1)
    older, _ = send(ep, 1)
    ep.credits_arrived(1, grant(1))  # credit is available now, but `older` is still queued
    newer, now = send(ep, 1)
    assert not now, "the newer message overtook the queued one"
    assert drained(ep) == [(1, older, 8)]
    assert drained(ep) == []
    ep.credits_arrived(1, grant(1))
    assert drained(ep) == [(1, newer, 8)]


def test_drain_sends_at_most_one_per_destination_per_call_in_fifo_order():
    ep = rank_endpoint(per_pair=3)
    for _ in range(3):
        send(ep, 1)
    queued = [send(ep, 1)[0] for _ in range(3)]
    ep.credits_arrived(1, grant(3))
    order = []
    for _ in range(5):
        batch = drained(ep)
        assert len(batch) <= 1
        order += [slot for _, slot, _ in batch]
    assert order == queued


def test_drain_serves_every_destination_that_gained_credit():
    ep = rank_endpoint(per_pair=1)
    for dest in (1, 2, 3):
        send(ep, dest)
    queued = {dest: send(ep, dest)[0] for dest in (1, 2, 3)}
    ep.credits_arrived(3, grant(1))
    ep.credits_arrived(1, grant(1))
    assert sorted(drained(ep)) == [(1, queued[1], 8), (3, queued[3], 8)]


def test_node_mode_fifo_with_credits_refilled_silently_by_a_neighbour():
    pool = LocalCounters(SIZE, 1)
    me = NodeCredits(1, lambda r: 0, pool, 1, 1)
    neighbour = NodeCredits(1, lambda r: 0, pool, 1, 1)
    ep = endpoint(me)
    send(ep, 2)
    older, _ = send(ep, 2)
    neighbour.on_credit_message(2, GRANT, 1)  # no event reaches `ep`
    newer, now = send(ep, 2)
    assert not now
    assert drained(ep) == [(2, older, 8)]
    pool.add(2, 1)
    assert drained(ep) == [(2, newer, 8)]


def test_unconstrained_mode_never_defers():
    ep = endpoint(slots=100)
    assert all(send(ep, 1)[1] for _ in range(100))
    assert ep.deferred_total == 0


# -- finalize ---------------------------------------------------------------------------


def test_stop_drops_the_deferred_sends_and_frees_their_slots():
    ep = rank_endpoint(per_pair=1, slots=6)
    in_flight = [send(ep, dest)[0] for dest in (1, 2)]
    deferred = [send(ep, dest)[0] for dest in (1, 1, 2)]
    held, _ = reserve_buf(ep)
    assert ep.free_slots == 0 and ep.deferred_total == 3
    assert ep.stop() == 3
    assert ep.deferred_total == 0 and ep.counters()["deferred_now"] == 0
    assert all(ep.send_state[slot] == FREE for slot in deferred)
    assert ep.free_slots == 3
    # The sends in flight still complete (finalize waits for them); the reserved buffer stays counted.
    assert [ep.send_state[slot] for slot in in_flight] == [IN_FLIGHT, IN_FLIGHT]
    assert ep.send_state[held] == HELD and ep.reserved == 1
    assert [complete_oldest(ep) for _ in range(2)] == in_flight
    assert ep.free_slots == 5
    # Credit that comes back now wakes nothing: nothing is queued any more.
    ep.credits_arrived(1, grant(1))
    assert list(ep.drain_ready()) == []
    assert ep.stop() == 0  # stopping again drops nothing


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda ep, msg: ep.reserve(), "reserve_send_buffer() called after finalize()"),
        (lambda ep, msg: ep.submit(1, ep.send_pool.views[0], 1), "send(dest=1) called after finalize()"),
        (lambda ep, msg: ep.release(msg), "release_receive_buffer() called after finalize()"),
        (lambda ep, msg: ep.check_open("receive()"), "receive() called after finalize()"),
    ],
)
def test_after_stop_the_applications_calls_raise(call, words):
    ep = endpoint()
    ep.reserve()
    message = arrive(ep, 1)
    ep.check_open("receive()")  # open until stop()
    ep.stop()
    with pytest.raises(FinalizedError) as info:
        call(ep, message)
    assert str(info.value) == words


# -- receiver side -------------------------------------------------------------------


def test_an_arrived_message_carries_its_source_size_data_and_slot():
    ep = endpoint()
    data = np.arange(5, dtype=np.uint8)
    message = ep.arrived(3, 0, 5, 6, data)
    assert type(message) is Message
    assert (message.source, message.nbytes, message.data) == (3, 5, data)
    assert repr(message) == "Message(source=3, nbytes=5, slot 6)"
    assert ep.holds(message) and ep.held == 1
    assert ep.release(message) == 6 and not ep.credit_messages_due()  # unconstrained: no credits to return
    assert not ep.holds(message) and ep.held == 0
    assert repr(message) == "Message(source=3, nbytes=5, released)"


def test_holds_tells_this_endpoints_unreleased_messages_only():
    ep, other = endpoint(), endpoint()
    mine, theirs = arrive(ep, 1), arrive(other, 1)
    assert ep.holds(mine) and not ep.holds(theirs)
    assert not ep.holds("not a message") and not ep.holds(None)
    ep.release(mine)
    assert not ep.holds(mine)


def test_a_message_is_released_once_and_only_by_its_endpoint():
    ep, other = endpoint(), endpoint()
    message = arrive(ep, 2)
    with pytest.raises(ReleaseError, match="not a message received from this MailRail"):
        other.release(message)
    with pytest.raises(ReleaseError, match="'text' is not a message received from this MailRail"):
        ep.release("text")
    ep.release(message)
    with pytest.raises(ReleaseError, match="already released"):
        ep.release(message)
    assert ep.messages_released == 1 and ep.held == 0


def test_held_messages_and_their_high_water_are_counted():
    ep = endpoint()
    messages = [arrive(ep, 1, nbytes=n, slot=n) for n in (1, 2, 3)]
    ep.release(messages[0])
    arrive(ep, 2, nbytes=4, slot=0)
    assert ep.held == 3
    counters = ep.counters()
    assert counters["held_high_water"] == 3
    assert counters["messages_received"] == 4 and counters["bytes_received"] == 10
    assert counters["messages_released"] == 1


def test_receiver_counts_and_returns_credits_at_the_threshold():
    ep = rank_endpoint(per_pair=4, threshold=2)
    first, second = arrive(ep, 2, nbytes=10, slot=5), arrive(ep, 2, nbytes=20, slot=3)
    assert ep.release(first) == 5 and not ep.credit_messages_due()
    assert ep.release(second) == 3
    assert ep.credit_messages_due() == 1
    assert list(ep.flow.outbox) == [(2, GRANT, 2)]  # two credits due to the message's source, rank 2
    assert ep.counters()["credit_messages_sent"] == 0  # counted as they are handed to the transport
    assert ep.next_credit_message() == (2, 2 << 3)
    assert not ep.credit_messages_due()
    counters = ep.counters()
    assert counters["messages_received"] == 2
    assert counters["bytes_received"] == 30
    assert counters["messages_released"] == 2
    assert counters["credit_messages_sent"] == 1
    assert counters["credits_returned"] == 2
    assert counters["credit_window_high_water"] == 2


def test_the_tag_piggybacks_owed_credits():
    ep = rank_endpoint(per_pair=4, threshold=4)
    ep.release(arrive(ep, 1))
    slot, buf = reserve_buf(ep)
    assert ep.submit(1, buf, 8) == (1, 8, slot, 1, ISEND_TAGGED)
    assert ep.counters()["credits_piggybacked"] == 1
    assert send(ep, 1)[1]  # nothing owed any more: the next one is untagged
    assert ep.counters()["credits_piggybacked"] == 1


def test_a_credit_return_above_the_tag_space_leaves_in_pieces():
    """The count shares the tag with the message kind: at most (TAG_UB - 7) >> 3 credits per message."""
    ep = endpoint(RankCredits(SIZE, 12, 12, piggyback=False, max_tag=31), tag_ub=31)
    for message in [arrive(ep, 1) for _ in range(12)]:
        ep.release(message)
    messages = []
    while ep.credit_messages_due():
        messages.append(ep.next_credit_message())
    assert messages == [(1, 3 << 3)] * 4
    assert ep.counters()["credit_messages_sent"] == 4 and ep.counters()["credits_returned"] == 12


def test_an_endpoint_refuses_a_tag_space_too_small_for_credit_messages():
    with pytest.raises(ValueError, match="Endpoint tag_ub=14 must be an integer >= 15"):
        endpoint(tag_ub=14)


def test_credit_messages_of_every_kind_reach_the_flow_control_decoded():
    received = []

    class Recording(Unconstrained):
        name = "recording"

        def on_credit_message(self, source, kind, count):
            received.append((source, kind, count))

    ep = endpoint(Recording())
    for kind in (GRANT, ANSWER, REQUEST, REVOKE, GIVE_BACK):
        ep.credits_arrived(2, credit_tag(kind, 5))
    assert received == [(2, kind, 5) for kind in (GRANT, ANSWER, REQUEST, REVOKE, GIVE_BACK)]
    assert ep.counters()["credit_messages_received"] == 5


# -- progress cadences -----------------------------------------------------------------


def test_credit_messages_are_polled_every_interval_calls_while_nothing_waits_for_credit():
    ep = rank_endpoint(per_pair=1, credit_poll_interval=3)
    assert [ep.credit_poll_due() for _ in range(7)] == [False, False, True, False, False, True, False]


def test_credit_messages_are_polled_at_every_call_while_sends_wait_for_credit():
    ep = rank_endpoint(per_pair=1, credit_poll_interval=3)
    assert ep.credit_poll_due() is False  # one call of the interval spent
    send(ep, 1)
    send(ep, 1)  # deferred
    assert [ep.credit_poll_due() for _ in range(4)] == [True] * 4
    ep.credits_arrived(1, grant(1))
    assert len(list(ep.drain_ready())) == 1
    # Nothing waits any more: the interval counts afresh from the last poll.
    assert [ep.credit_poll_due() for _ in range(3)] == [False, False, True]


def test_without_credits_there_is_nothing_to_poll():
    ep = endpoint(credit_poll_interval=1)
    assert not any(ep.credit_poll_due() for _ in range(10))


def test_an_idle_rank_yields_after_idle_spins_empty_calls():
    ep = endpoint(idle_spins=3)
    assert [ep.idle() for _ in range(7)] == [False, False, True, False, False, True, False]


@pytest.mark.parametrize("busy", ["arrival", "send"])
def test_an_arrival_or_a_send_makes_the_rank_busy_again(busy):
    ep = endpoint(idle_spins=3)
    assert [ep.idle(), ep.idle()] == [False, False]
    if busy == "arrival":
        arrive(ep, 1)
    else:
        send(ep, 1)
    assert [ep.idle(), ep.idle(), ep.idle()] == [False, False, True]


def test_zero_idle_spins_yields_at_every_empty_call():
    ep = endpoint(idle_spins=0)
    assert all(ep.idle() for _ in range(3))


# -- stall detection -----------------------------------------------------------------


def stalled_endpoint(timeout: float) -> Endpoint:
    ep = rank_endpoint(per_pair=1, stall_timeout=timeout)
    send(ep, 2)
    send(ep, 2)
    send(ep, 2)
    return ep


def test_stall_raises_naming_the_starved_destination_and_queued_count():
    ep = stalled_endpoint(5.0)
    check_stall_at(ep, 100.0)  # the clock starts
    check_stall_at(ep, 104.9)
    with pytest.raises(CreditStallError) as info:
        check_stall_at(ep, 105.5)
    message = str(info.value)
    assert "rank 0" in message
    assert "2 deferred message(s)" in message
    assert "destination 2: 2 queued" in message
    assert "0 credit(s) available" in message
    assert "rank flow control" in message


def test_drain_ready_checks_for_a_stall_at_the_time_it_is_given():
    ep = stalled_endpoint(5.0)
    assert drain_at(ep, 100.0) == []
    assert drain_at(ep, 104.0) == []
    with pytest.raises(CreditStallError, match="destination 2: 2 queued"):
        drain_at(ep, 106.0)
    assert drain_at(ep, 110.0) == []  # catchable: the clock restarted at 106


def test_the_stall_report_tells_this_ranks_own_counters():
    ep = rank_endpoint(per_pair=2, stall_timeout=1.0, slots=9)
    for dest in (1, 2, 3, 1, 2, 3):
        send(ep, dest)  # every credit to 1, 2 and 3 in use
    for dest in (1, 2, 3):
        ep.credits_arrived(dest, grant(1))
    send(ep, 1)
    send(ep, 1)  # deferred
    for _ in range(5):
        ep.release(arrive(ep, 1))
    arrive(ep, 2)
    arrive(ep, 3)  # 7 received, 5 released
    reserve_buf(ep)
    check_stall_at(ep, 0.0)
    with pytest.raises(CreditStallError) as info:
        check_stall_at(ep, 2.0)
    assert (
        "this rank received 7 message(s), released 5, got 3 credit message(s), "
        "holds 1 reserved send buffer(s) not yet sent"
    ) in str(info.value)


def test_no_stall_error_when_stall_timeout_is_zero():
    ep = stalled_endpoint(0.0)
    check_stall_at(ep, 0.0)
    check_stall_at(ep, 1e9)
    assert drain_at(ep, 1e10) == []


def test_no_stall_error_without_deferred_sends():
    ep = rank_endpoint(per_pair=1, stall_timeout=1.0)
    send(ep, 1)
    check_stall_at(ep, 0.0)
    check_stall_at(ep, 1000.0)


def test_progress_restarts_the_stall_clock():
    ep = stalled_endpoint(5.0)
    check_stall_at(ep, 0.0)
    ep.credits_arrived(2, grant(1))
    assert len(drained(ep, now=10.0)) == 1  # progress: one message left; the clock restarts here
    check_stall_at(ep, 14.0)  # no error although 14 s passed since 0
    with pytest.raises(CreditStallError, match="destination 2: 1 queued"):
        check_stall_at(ep, 15.5)


def test_stall_clock_restarts_when_a_new_deferral_episode_begins():
    ep = rank_endpoint(per_pair=1, stall_timeout=5.0)
    send(ep, 1)
    send(ep, 1)
    check_stall_at(ep, 0.0)
    ep.credits_arrived(1, grant(1))
    drained(ep, now=1.0)  # queue empty again
    check_stall_at(ep, 3.0)  # nothing deferred: no clock
    send(ep, 1)  # deferred: a new episode
    check_stall_at(ep, 20.0)
    check_stall_at(ep, 24.0)
    with pytest.raises(CreditStallError):
        check_stall_at(ep, 26.0)


# -- counters ----------------------------------------------------------------------------


def test_counters_are_every_documented_counter_in_order():
    assert list(endpoint().counters()) == list(COUNTERS)
    assert list(rank_endpoint().counters()) == list(COUNTERS)


def test_counters_report_deferral_statistics():
    ep = rank_endpoint(per_pair=1)
    send(ep, 1)
    send(ep, 1)
    send(ep, 1)
    counters = ep.counters()
    assert counters["deferred_sends"] == 2
    assert counters["deferred_now"] == 2
    assert counters["deferred_high_water"] == 2
    assert counters["credit_state_bytes"] == 3 * SIZE * 8
    assert counters["shared_credit_bytes"] == 0
    # A send counts when it is submitted, deferred or not (the same on both transports).
    assert counters["messages_sent"] == 3 and counters["bytes_sent"] == 3 * 8


# -- adaptive credits: asking ------------------------------------------------------------


def adaptive_endpoint(**kwargs) -> Endpoint:
    """Rank 0 of a node of ranks 0-1 (SIZE ranks, nodes of two), receive slots 4, leases of 2."""
    pool, tokens, demand = LocalCounters(SIZE, 0), LocalCounters(SIZE, 1), LocalCounters(SIZE, 0)
    flow = AdaptiveCredits(lambda r: r // 2, pool, tokens, demand, 4, 2, 2)
    return endpoint(flow, **kwargs)


def test_a_deferred_send_asks_for_credit_once_and_its_answer_lets_the_queue_go():
    ep = adaptive_endpoint()
    assert send(ep, 3)[1] is False and send(ep, 3)[1] is False  # no credit before asking: both wait
    assert [ep.next_credit_message() for _ in range(ep.credit_messages_due())] == [(3, credit_tag(REQUEST, 1))]
    assert ep.counters()["credit_requests_sent"] == 1
    assert list(ep.drain_ready()) == [] and not ep.credit_messages_due()  # still waiting: no second request
    ep.credits_arrived(3, credit_tag(ANSWER, 2))
    assert [dest for dest, *_ in ep.drain_ready()] == [3]  # one per destination per drain
    assert [dest for dest, *_ in ep.drain_ready()] == [3]
    assert ep.deferred_total == 0 and not ep.credit_messages_due()


def test_a_drain_that_finds_no_credit_asks_again_once_the_answer_came():
    ep = adaptive_endpoint()
    for _ in range(3):
        send(ep, 2)
    ep.next_credit_message()  # the request, for 1 waiting send
    ep.credits_arrived(2, credit_tag(ANSWER, 1))
    assert len(list(ep.drain_ready())) == 1  # the answer's one credit: two still wait
    assert list(ep.drain_ready()) == []  # no credit: the drain asks, with how many wait
    assert ep.next_credit_message() == (2, credit_tag(REQUEST, 2))


def test_the_stall_report_of_adaptive_mode_tells_what_was_asked_and_what_is_lent():
    ep = adaptive_endpoint(stall_timeout=1.0)
    send(ep, 3)
    ep.credits_arrived(1, credit_tag(REQUEST, 5))  # rank 1 (this node) asks this rank: a lease of 2 lent
    check_stall_at(ep, 0.0)
    with pytest.raises(CreditStallError) as info:
        check_stall_at(ep, 2.0)
    report = str(info.value)
    assert "(adaptive flow control, 2 credits per pair, return threshold 2)" in report
    assert "destination 3: 1 queued, 0 credit(s) available" in report
    assert "this node asked 1 of them for credit and awaits the answer (3)" in report
    assert "as a receiver: 2 of 4 slots lent to 1 node(s), 0 node(s) waiting" in report


# -- the receive ring (MAILRAIL_MAX_RECVS) and the receive step --------------------------


class StepIO:
    """A transport's I/O for Endpoint.receive(): records the calls in order; *arrivals* are what the head
    receive finds, one per test (None: nothing yet)."""

    def __init__(self, ep: Endpoint, arrivals=()) -> None:
        self.ep, self.arrivals, self.calls, self.grants = ep, list(arrivals), [], 1

    def reclaim_sends(self) -> None:
        self.calls.append("reclaim_sends")
        self.ep.oldest_completed()  # every send completes at once

    def poll_credits(self) -> None:
        self.calls.append("poll_credits")
        if self.grants:  # one credit message from rank 1 arrived
            self.grants -= 1
            self.ep.credits_arrived(1, grant(1))

    def start_send(self, dest, nbytes, slot, tag, action, deferred) -> None:
        self.calls.append(("start_send", dest, deferred))

    def send_credit_messages(self) -> None:
        while self.ep.credit_messages_due():
            self.calls.append(("credit_message", self.ep.next_credit_message()))

    def test_receive(self, slot):
        self.calls.append(("test_receive", slot))
        arrival = self.arrivals.pop(0) if self.arrivals else None
        return None if arrival is None else (*arrival, np.zeros(arrival[2], np.uint8))

    def post_receive(self, slot) -> None:
        self.calls.append(("post_receive", slot))

    def idle(self) -> None:
        self.calls.append("idle")


def posted_endpoint(recv_slots: int, posted_receives: int, flow=None, **kwargs) -> Endpoint:
    ep = endpoint(flow, recv_slots=recv_slots, posted_receives=posted_receives, **kwargs)
    posts = []
    while (slot := ep.post_parked()) != NO_SLOT:
        posts.append(slot)
    assert posts == list(range(posted_receives))  # the transport posts the lowest slots first
    return ep


def test_fewer_posted_receives_than_slots_park_the_rest_and_post_one_per_arrival():
    ep = posted_endpoint(4, 2)
    assert ep.posted_slots() == [0, 1] and ep.parked_slots() == [3, 2] and ep.head_receive() == 0
    io = StepIO(ep, [(1, 0, 8)])
    first = ep.receive(io)
    assert io.calls == [("test_receive", 0), ("post_receive", 2)]  # a parked slot takes the taken one's place
    assert first._slot == 0 and ep.posted_slots() == [1, 2] and ep.parked_slots() == [3]
    assert ep.head_arrived() == 3 and ep.posted_slots() == [2, 3] and ep.parked_slots() == []
    assert ep.head_arrived() == NO_SLOT and ep.posted_slots() == [3]  # nothing parked: the ring shrinks
    assert ep.release(first) == 0 and ep.posted_slots() == [3, 0]  # fewer than 2 posted: post it
    second = arrive(ep, 1, slot=1)
    assert ep.release(second) == NO_SLOT and ep.parked_slots() == [1]  # 2 posted: parked
    assert ep.head_arrived() == 1 and ep.posted_slots() == [0, 1]  # the parked slot goes next


def test_a_failed_post_parks_the_slot_and_a_reposted_head_goes_to_the_back():
    ep = posted_endpoint(3, 2)
    ep.head_reposted()
    assert ep.posted_slots() == [1, 0]
    with pytest.raises(ProtocolError, match="receive slot 1 failed to post but is not the last posted"):
        ep.post_failed(1)
    ep.post_failed(0)
    assert ep.posted_slots() == [1] and ep.parked_slots() == [2, 0]
    assert ep.post_parked() == 0 and ep.post_parked() == NO_SLOT
    assert ep.take_posted() == [1, 0] and ep.posted_count == 0 and ep.parked_slots() == [2, 0, 1]
    with pytest.raises(ProtocolError, match="a receive arrived with none posted"):
        ep.head_arrived()


def test_a_hand_made_message_cannot_give_back_a_slot_the_endpoint_does_not_have():
    ep = posted_endpoint(2, 1)
    with pytest.raises(ProtocolError, match=r"receive slot 2 is out of range 0\.\.1"):
        ep.release(arrive(ep, 1, slot=2))
    assert ep.release(arrive(ep, 1, slot=1)) == NO_SLOT  # slot 1 was parked already: now twice
    with pytest.raises(ProtocolError, match="cannot be parked: more parked than the 2 receive slots"):
        ep.release(arrive(ep, 1, slot=1))


@pytest.mark.parametrize(("recv_slots", "posted"), [(0, 1), (2, 0), (2, 3), (-1, None), (2, 1.0)])
def test_an_endpoint_refuses_impossible_receive_settings(recv_slots, posted):
    with pytest.raises(ValueError, match="Endpoint (recv_slots|posted_receives)="):
        endpoint(recv_slots=recv_slots, posted_receives=posted)


def test_the_receive_step_runs_the_progress_steps_in_their_order():
    ep = posted_endpoint(4, 4, rank_endpoint(per_pair=1, threshold=1).flow, credit_poll_interval=1)
    send(ep, 1)  # in flight: reclaimed first
    send(ep, 1)  # no credit left for rank 1: deferred until poll_credits brings one
    ep.release(arrive(ep, 2, slot=3))  # a credit return to rank 2 is due
    io = StepIO(ep)
    assert ep.receive(io) is None
    assert io.calls == [
        "reclaim_sends",  # first: a completed send frees its slot
        "poll_credits",  # a send waits: every call polls; the grant lets it go
        ("start_send", 1, True),
        ("credit_message", (2, grant(1))),
        ("test_receive", 0),
    ]
    for _ in range(3):  # idle_spins=4 empty calls, then the core is yielded
        io.calls.clear()
        ep.receive(io)
    assert io.calls == ["poll_credits", ("test_receive", 0), "idle"]  # nothing in flight any more
    ep.stop()
    with pytest.raises(FinalizedError, match=r"receive\(\) called after finalize\(\)"):
        ep.receive(io)
