"""Both transports over the in-memory MPI (:mod:`mailrail.testing.mpi`): scripted and Hypothesis-generated schedules.

Every test runs on the Python and the compiled transport (the ``kind`` fixture skips one that cannot
run over the fake, saying why).  Each rank is built by ``mailrail.testing.stack.make_rank`` as MailRail builds it;
nothing moves in the network until a test delivers it, so arrival orders, credit returns racing
payloads and finalize with messages in flight are all the test's choice.
"""

from __future__ import annotations

import collections
import zlib
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import payload
from mailrail.errors import (
    BufferOwnershipError,
    FinalizedError,
    InvalidDestinationError,
    MailRailError,
    MessageSizeError,
    ReleaseError,
)
from mailrail.flow import MODE_NAMES
from mailrail.testing.mpi import InMemoryMPI
from mailrail.testing.stack import CREDIT, DATA, IMPLEMENTATIONS, RankRail, finalize_all, make_ranks, unavailable


class Traffic:
    """Sends numbered payloads and checks what arrives: exactly once, in order per pair, the same bytes."""

    def __init__(self, world: InMemoryMPI, ranks: list[RankRail]) -> None:
        self.world, self.ranks = world, ranks
        self.sent: dict[tuple[int, int], list[int]] = collections.defaultdict(list)  # (src, dst) -> checksums
        self.received: dict[tuple[int, int], list[int]] = collections.defaultdict(list)
        self.held: list[collections.deque[Any]] = [collections.deque() for _ in ranks]
        self.numbers = collections.Counter[tuple[int, int]]()

    def send(self, source: int, dest: int, nbytes: int) -> bool:
        """One payload if a send buffer is free; False (nothing sent) on backpressure."""
        transport = self.ranks[source].transport
        buf = transport.reserve_send_buffer()
        if buf is None:
            return False
        data = payload(source, dest, self.numbers[source, dest], nbytes)
        self.numbers[source, dest] += 1
        buf[:nbytes] = np.frombuffer(data, np.uint8)
        transport.send(dest, buf, nbytes)
        self.sent[source, dest].append(zlib.crc32(data))
        return True

    def send_waiting(self, source: int, dest: int, nbytes: int, *, hold: int = 0) -> None:
        """One payload, pumping the network on backpressure."""
        for _ in range(10_000):
            if self.send(source, dest, nbytes):
                return
            self.pump(hold=hold)
        raise AssertionError(f"rank {source} found no send buffer")

    def receive(self, rank: int) -> bool:
        message = self.ranks[rank].transport.receive()
        if message is None:
            return False
        self.received[message.source, rank].append(zlib.crc32(bytes(message.data)))
        self.held[rank].append(message)
        return True

    def release(self, rank: int) -> bool:
        if not self.held[rank]:
            return False
        self.ranks[rank].transport.release_receive_buffer(self.held[rank].popleft())
        return True

    def pump(self, *, hold: int = 0, choice: int | None = None) -> None:
        """One message moves, then every rank receives once and releases all but *hold* messages."""
        self.world.deliver(choice)
        for rank in range(len(self.ranks)):
            self.receive(rank)
            while len(self.held[rank]) > hold:
                self.release(rank)

    def drain(self, limit: int = 20_000) -> None:
        """Deliver and receive until nothing is in flight, deferred or held anywhere."""
        for _ in range(limit):
            self.pump()
            if not self.world.in_flight() and not any(
                rail.pending_sends() or self.held[rail.rank] for rail in self.ranks
            ):
                # Idle receives may still find arrived messages (and credit polls are periodic).
                if not any(self.receive(rank) for rank in range(len(self.ranks))):
                    if not self.world.in_flight():
                        return
        raise AssertionError(f"traffic did not drain: {self.world.in_flight()} in flight, {self.counters()}")

    def counters(self) -> list[dict[str, int]]:
        return [rail.counters() for rail in self.ranks]

    def check_exactly_once_in_order(self) -> None:
        assert dict(self.received) == {pair: sums for pair, sums in self.sent.items() if sums}
        totals = self.counters()
        assert sum(c["messages_sent"] for c in totals) == sum(c["messages_received"] for c in totals)
        assert sum(c["bytes_sent"] for c in totals) == sum(c["bytes_received"] for c in totals)
        assert all(c["messages_received"] == c["messages_released"] for c in totals)

    def check_credit_bound(self, recv_slots: int) -> None:
        """Credits bound what is sent to a receiver and not yet re-posted by its receive slots."""
        data = self.world.context(DATA)
        for rank in range(len(self.ranks)):
            assert self.world.occupancy_high_water.get((rank, data), 0) <= recv_slots
            assert self.world.unexpected_high_water.get((rank, data), 0) == 0


def pattern_pairs(pattern: str, size: int) -> list[tuple[int, int]]:
    if pattern == "uniform":
        return [(s, d) for s in range(size) for d in range(size)]
    return [(s, 0) for s in range(size)]  # incast: everyone to rank 0, itself included


# -- scripted ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("flow_control", list(MODE_NAMES))
@pytest.mark.parametrize(("pattern", "size"), [("uniform", 2), ("uniform", 4), ("incast", 3), ("incast", 4)])
def test_every_message_arrives_once_in_order_with_its_bytes(kind, flow_control, pattern, size):
    with InMemoryMPI(size, seed=size) as world:
        ranks = make_ranks(world, kind, flow_control=flow_control, recv_pool_slots=8, ranks_per_node=2)
        traffic = Traffic(world, ranks)
        for round_number in range(6):
            for source, dest in pattern_pairs(pattern, size):
                traffic.send_waiting(source, dest, 1 + (7 * round_number + source) % 64, hold=1)
            world.deliver_random(3)
        traffic.drain()
        traffic.check_exactly_once_in_order()
        if flow_control != "none":
            traffic.check_credit_bound(8)
        assert all(report == dict.fromkeys(report, 0) for report in finalize_all(ranks))
        assert world.live_requests() == 0 and not any(world.posted(rank) for rank in range(size))


def adaptive_incast(kind: str) -> list[dict[str, int]]:
    """Three single-rank nodes send to rank 0, whose 2 receive slots are lent a credit at a time: nodes ask,
    wait, are revoked and give back; the application holds a message now and then."""
    with InMemoryMPI(4, seed=5) as world:
        ranks = make_ranks(world, kind, flow_control="adaptive", recv_pool_slots=2, send_pool_slots=4, ranks_per_node=1)
        traffic = Traffic(world, ranks)
        for round_number in range(8):
            for source in range(1, 4):
                traffic.send_waiting(source, 0, 1 + round_number, hold=round_number % 2)
            world.deliver_random(2)
        traffic.drain()
        traffic.check_exactly_once_in_order()
        traffic.check_credit_bound(2)
        counters = traffic.counters()
        assert all(report == dict.fromkeys(report, 0) for report in finalize_all(ranks))
        return counters


def test_adaptive_credits_are_asked_for_lent_and_revoked(kind):
    counters = adaptive_incast(kind)
    receiver, senders = counters[0], counters[1:]
    assert sum(c["credit_requests_sent"] for c in senders) == receiver["credit_requests_received"] > 3
    assert receiver["credit_revokes_sent"] > 0 and receiver["leases_high_water"] >= 2
    assert receiver["credit_window_high_water"] <= 2 and receiver["leases_now"] <= 2


def test_both_transports_lend_adaptive_credits_alike():
    for kind in IMPLEMENTATIONS:
        if reason := unavailable(kind):
            pytest.skip(reason)
    assert adaptive_incast("python") == adaptive_incast("compiled")


def test_without_credits_an_incast_overfills_the_receiver(kind):
    """The credit-bound check can fail: unconstrained senders outrun a receiver that does not receive."""
    with InMemoryMPI(4) as world:
        ranks = make_ranks(world, kind, flow_control="none", recv_pool_slots=4)
        traffic = Traffic(world, ranks)
        for source in range(1, 4):
            for _ in range(3):
                assert traffic.send(source, 0, 8)
        world.deliver_all()
        with pytest.raises(AssertionError):
            traffic.check_credit_bound(4)
        traffic.drain()
        traffic.check_exactly_once_in_order()


def test_deferred_sends_leave_when_credits_return(kind):
    with InMemoryMPI(2) as world:
        # 4 receive slots over 2 ranks: 2 credits per pair, returned one at a time (threshold 2).
        ranks = make_ranks(world, kind, flow_control="rank", recv_pool_slots=4, credit_threshold=2, piggyback=False)
        traffic = Traffic(world, ranks)
        for _ in range(6):
            assert traffic.send(0, 1, 16)
        counters = ranks[0].counters()
        assert (counters["messages_sent"], counters["deferred_now"], world.in_flight()) == (6, 4, 2)
        world.deliver_all()
        assert ranks[0].pending_sends() == 6  # the 2 sent still count until reclaimed
        assert ranks[0].transport.reclaim_sends() == 0 and ranks[0].pending_sends() == 4
        assert traffic.receive(1) and traffic.release(1)  # one credit comes back
        world.deliver_all()
        for _ in range(8):  # credits are polled every call while sends are deferred
            ranks[0].transport.receive()
        assert ranks[0].counters()["deferred_now"] == 3 and world.in_flight() == 1
        traffic.drain()
        traffic.check_exactly_once_in_order()
        traffic.check_credit_bound(4)
        assert ranks[0].counters()["deferred_sends"] == 4


@pytest.mark.parametrize("piggyback", [True, False])
def test_credits_ride_on_payloads_only_with_piggyback(kind, piggyback):
    with InMemoryMPI(2, seed=3) as world:
        ranks = make_ranks(world, kind, flow_control="rank", recv_pool_slots=8, piggyback=piggyback)
        traffic = Traffic(world, ranks)
        for _ in range(20):  # ping-pong-ish: each side sends while it owes the other credits
            traffic.send_waiting(0, 1, 12)
            traffic.send_waiting(1, 0, 12)
            traffic.pump()
            traffic.pump()
        traffic.drain()
        traffic.check_exactly_once_in_order()
        traffic.check_credit_bound(8)
        piggybacked = sum(c["credits_piggybacked"] for c in traffic.counters())
        returned = sum(c["credits_returned"] for c in traffic.counters())
        assert (piggybacked > 0) == piggyback
        assert piggybacked + returned + sum(rail.flow.available(1 - rail.rank) for rail in ranks) <= 2 * 8 + 40


def test_a_receiver_holding_every_slot_leaves_the_next_message_unmatched(kind):
    with InMemoryMPI(2) as world:
        ranks = make_ranks(world, kind, flow_control="none", recv_pool_slots=2)
        traffic = Traffic(world, ranks)
        for _ in range(3):
            assert traffic.send(0, 1, 4)
        world.deliver_all()
        assert traffic.receive(1) and traffic.receive(1)
        assert not traffic.receive(1) and world.unexpected(1, DATA) == 1 and ranks[1].held == 2
        assert traffic.release(1)  # the slot is re-posted and matches the waiting message
        assert world.unexpected(1, DATA) == 0 and traffic.receive(1)
        traffic.drain()
        traffic.check_exactly_once_in_order()
        assert ranks[1].counters()["held_high_water"] == 2


def test_a_rendezvous_send_stays_in_flight_until_matched(kind):
    with InMemoryMPI(2, eager_limit=0) as world:  # every payload is a rendezvous send
        ranks = make_ranks(world, kind, flow_control="none", recv_pool_slots=1, send_pool_slots=2)
        traffic = Traffic(world, ranks)
        assert traffic.send(0, 1, 32) and traffic.send(0, 1, 32)
        world.deliver_all()  # the first matches rank 1's one posted receive, the second waits unmatched
        for _ in range(100):  # past the head patience: the unmatched one rotates, and stays
            assert ranks[0].transport.reclaim_sends() == 1
        assert ranks[0].pending_sends() == 1 and world.unexpected(1, DATA) == 1
        with pytest.raises(RuntimeError, match="in flight"):
            ranks[0].transport.close()
        assert traffic.receive(1) and traffic.release(1)  # the slot is re-posted: it matches the second
        assert ranks[0].transport.reclaim_sends() == 0 and ranks[0].pending_sends() == 0
        traffic.drain()
        traffic.check_exactly_once_in_order()


@pytest.mark.parametrize("flow_control", ["none", "rank"])
def test_finalize_with_messages_in_flight_counts_what_was_dropped(kind, flow_control):
    with InMemoryMPI(2) as world:
        ranks = make_ranks(world, kind, flow_control=flow_control, recv_pool_slots=4, send_pool_slots=8)
        traffic = Traffic(world, ranks)
        for _ in range(6):  # rank mode: 2 leave, 4 wait for credit
            assert traffic.send(0, 1, 8)
        world.deliver(None)  # one arrives at rank 1 and is received, one stays in the network
        assert traffic.receive(1)
        reserved = ranks[0].transport.reserve_send_buffer()
        assert reserved is not None
        reports = finalize_all(ranks)
        deferred = 4 if flow_control == "rank" else 0
        assert reports[0] == {"reserved": 1, "unreleased": 0, "deferred": deferred, "unreceived": 0}
        # rank 1 holds the first and never received the rest that left
        assert reports[1] == {"reserved": 0, "unreleased": 1, "deferred": 0, "unreceived": 5 - deferred}
        assert world.live_requests() == 0 and not world.posted(0) and not world.posted(1)
        assert world.unexpected(1, DATA) == world.unexpected(0, CREDIT) == 0


def test_abandon_with_sends_in_flight_cancels_receives_and_keeps_the_sends(kind):
    with InMemoryMPI(2, eager_limit=0) as world:
        ranks = make_ranks(world, kind, flow_control="none", recv_pool_slots=2)
        traffic = Traffic(world, ranks)
        for _ in range(2):
            assert traffic.send(0, 1, 24)
        ranks[0].transport.abandon()
        assert world.posted(0) == 0 and ranks[0].pending_sends() == 0
        world.deliver_all()  # the abandoned sends still complete: their pool was kept
        assert traffic.receive(1) and traffic.receive(1)
        assert traffic.received == traffic.sent
        ranks[1].transport.abandon()
        assert world.posted(1) == 0


def test_a_longer_message_raises_a_mailrail_error_naming_the_datagram_size(kind):
    with InMemoryMPI(2) as world:
        ranks = make_ranks(world, kind, flow_control="none", datagram_size=64)
        world.comm(0, DATA).Isend(np.zeros(200, np.uint8), 1, 0)  # as a rank with larger datagrams would
        world.deliver_all()
        with pytest.raises(MailRailError, match=r"longer than this rank's datagram_size \(64 bytes\)"):
            ranks[1].transport.receive()
        traffic = Traffic(world, ranks)
        assert traffic.send(0, 1, 5)
        world.deliver_all()
        assert traffic.receive(1)  # the rail goes on
        assert traffic.received[0, 1] == traffic.sent[0, 1]


def error_outcomes(kind: str) -> list[tuple[str, str]]:
    """What each misuse of the transport raises (type and message), in one fixed order."""
    outcomes = []

    def attempt(call: Any) -> None:
        try:
            call()
        except MailRailError as error:
            outcomes.append((type(error).__name__, str(error)))
        else:
            outcomes.append(("nothing", ""))

    with InMemoryMPI(2) as world:
        ranks = make_ranks(world, kind, flow_control="rank", recv_pool_slots=4)
        transport = ranks[0].transport
        for dest, nbytes in ((2, 4), (-1, 4), ("1", 4), (1, 65), (1, -1), (1, 2.0)):
            buf = transport.reserve_send_buffer()
            attempt(lambda dest=dest, buf=buf, nbytes=nbytes: transport.send(dest, buf, nbytes))
            outcomes.append(("reserved after", str(ranks[0].counters()["send_buffers_reserved"])))
        attempt(lambda: transport.send(1, np.zeros(64, np.uint8), 4))
        buf = transport.reserve_send_buffer()
        transport.send(1, buf, 4)
        attempt(lambda: transport.send(1, buf, 4))  # sent twice
        world.deliver_all()
        message = ranks[1].transport.receive()
        ranks[1].transport.release_receive_buffer(message)
        attempt(lambda: ranks[1].transport.release_receive_buffer(message))
        attempt(lambda: ranks[1].transport.release_receive_buffer("not a message"))
        ranks[0].stop()
        attempt(transport.reserve_send_buffer)
        attempt(lambda: transport.send(1, buf, 4))
        attempt(transport.receive)
        attempt(lambda: transport.release_receive_buffer(message))
    return outcomes


EXPECTED_ERRORS = [
    InvalidDestinationError,
    InvalidDestinationError,
    InvalidDestinationError,
    MessageSizeError,
    MessageSizeError,
    MessageSizeError,
    BufferOwnershipError,
    BufferOwnershipError,
    ReleaseError,
    ReleaseError,
    FinalizedError,
    FinalizedError,
    FinalizedError,
    FinalizedError,
]


def test_misuse_raises_the_documented_errors_and_gives_refused_buffers_back(kind):
    outcomes = error_outcomes(kind)
    raised = [name for name, _ in outcomes if name != "reserved after"]
    assert raised == [error.__name__ for error in EXPECTED_ERRORS]
    assert [count for name, count in outcomes if name == "reserved after"] == ["0"] * 6


def test_both_transports_raise_the_same_errors_with_the_same_messages():
    for kind in IMPLEMENTATIONS:
        if reason := unavailable(kind):
            pytest.skip(reason)
    assert error_outcomes("python") == error_outcomes("compiled")


# -- generated schedules ------------------------------------------------------------------------------


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    size = draw(st.integers(2, 4))
    flow_control = draw(st.sampled_from(list(MODE_NAMES)))
    knobs = {
        "flow_control": flow_control,
        "recv_pool_slots": draw(st.sampled_from([4, 8])),
        "send_pool_slots": draw(st.sampled_from([2, 4, 8])),
        "credit_threshold": draw(st.integers(1, 3)),
        "piggyback": draw(st.booleans()),
        "ranks_per_node": draw(st.integers(1, size)),
    }
    rank, choice = st.integers(0, size - 1), st.integers(0, 15)
    step = st.one_of(
        st.tuples(st.just("send"), rank, rank, st.integers(0, 64)),
        st.tuples(st.just("deliver"), choice),
        st.tuples(st.just("receive"), rank),
        st.tuples(st.just("release"), rank),
    )
    return {
        "size": size,
        "eager_limit": draw(st.sampled_from([None, 0, 16])),
        "knobs": knobs,
        "steps": draw(st.lists(step, min_size=5, max_size=80)),
        "seed": draw(st.integers(0, 2**16)),
    }


def run_schedule(kind: str, scenario: dict[str, Any]) -> dict[str, Any]:
    """Play *scenario*'s steps on *kind*, then drain; check the properties; return what was observed."""
    with InMemoryMPI(scenario["size"], eager_limit=scenario["eager_limit"], seed=scenario["seed"]) as world:
        ranks = make_ranks(world, kind, **scenario["knobs"])
        traffic = Traffic(world, ranks)
        arrivals = []
        for step in scenario["steps"]:
            if step[0] == "send":
                traffic.send(step[1], step[2], step[3])
            elif step[0] == "deliver":
                world.deliver(step[1])
            elif step[0] == "receive":
                if traffic.receive(step[1]):
                    arrivals.append((step[1], traffic.held[step[1]][-1].source))
            else:
                traffic.release(step[1])
        before_drain = traffic.counters()
        traffic.drain()
        traffic.check_exactly_once_in_order()
        if scenario["knobs"]["flow_control"] != "none":
            traffic.check_credit_bound(scenario["knobs"]["recv_pool_slots"])
        reports = finalize_all(ranks)
        assert all(report == dict.fromkeys(report, 0) for report in reports)
        assert world.live_requests() == 0
        return {"arrivals": arrivals, "before_drain": before_drain, "after": traffic.counters()}


SCHEDULES = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SCHEDULES
@given(scenario=scenarios())
def test_generated_schedules_deliver_exactly_once_in_order_within_credits_python(scenario):
    run_schedule("python", scenario)


@SCHEDULES
@given(scenario=scenarios())
def test_generated_schedules_deliver_exactly_once_in_order_within_credits_compiled(scenario):
    if reason := unavailable("compiled"):
        pytest.skip(reason)
    run_schedule("compiled", scenario)


@SCHEDULES
@given(scenario=scenarios())
def test_both_transports_observe_the_same_schedule_alike(scenario):
    """Same steps, same arrivals (which rank received whose message when) and the same counters."""
    if reason := unavailable("compiled"):
        pytest.skip(reason)
    assert run_schedule("python", scenario) == run_schedule("compiled", scenario)
