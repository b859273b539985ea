"""AdaptiveCredits: receive slots lent to the sending nodes that ask, one rule at a time.

The whole protocol under random schedules is in tests/library/test_protocol_properties.py (a cluster
of Endpoints); these pin each rule and each error by value.
"""

from __future__ import annotations

import pytest

from mailrail.config import Config
from mailrail.errors import ConfigError, ProtocolError
from mailrail.flow import AdaptiveCredits, CreditBudget, credit_budget
from mailrail.flow.adaptive import LEASE_BYTES, QUEUE_ENTRY_BYTES
from mailrail.flow.base import ANSWER, GIVE_BACK, GRANT, REQUEST, REVOKE
from mailrail.flow.node import LocalCounters

RANKS_PER_NODE = 2
RANKS = 8  # nodes 0..3


def node_of(rank: int) -> int:
    return rank // RANKS_PER_NODE


def make(recv_slots: int = 8, lease: int = 4, threshold: int = 2, max_tag: int = 32767) -> AdaptiveCredits:
    """One rank's AdaptiveCredits, with its node's pool (empty) and tokens (1 each)."""
    return AdaptiveCredits(
        node_of,
        LocalCounters(RANKS, 0),
        LocalCounters(RANKS, 1),
        LocalCounters(RANKS, 0),
        recv_slots,
        lease,
        threshold,
        max_tag=max_tag,
    )


def sent(flow: AdaptiveCredits) -> list[tuple[int, int, int]]:
    messages = list(flow.outbox)
    flow.outbox.clear()
    return messages


def arrive(flow: AdaptiveCredits, source: int, times: int = 1) -> None:
    for _ in range(times):
        flow.on_arrival(source, 0)


def release(flow: AdaptiveCredits, source: int, times: int = 1) -> list[tuple[int, int, int]]:
    for _ in range(times):
        flow.on_release(source)
    return sent(flow)


def check_conserved(flow: AdaptiveCredits) -> None:
    leases = flow.leases.values()
    assert flow.free + sum(lease.held for lease in leases) == flow.recv_slots
    assert all(0 <= lease.owed <= lease.unreturned <= lease.held for lease in leases)
    assert flow.unreturned_total == sum(lease.unreturned for lease in leases)


# -- sizing ------------------------------------------------------------------------


def test_adaptive_is_never_refused_and_leases_an_eighth_of_the_slots():
    assert credit_budget("adaptive", recv_slots=512, ranks=16384, nodes=256, credit_threshold=2) == CreditBudget(64, 2)
    assert credit_budget("adaptive", recv_slots=3, ranks=10**6, nodes=10**5, credit_threshold=2) == CreditBudget(1, 2)
    assert credit_budget(
        "adaptive", recv_slots=64, ranks=4, nodes=1, credit_threshold=3, credits_per_pair=64
    ) == CreditBudget(64, 3)


def test_an_adaptive_lease_larger_than_the_slots_is_refused_by_value():
    with pytest.raises(
        ConfigError, match="MAILRAIL_CREDITS_PER_PAIR=65: adaptive mode's lease must be 1..MAILRAIL_RECV"
    ):
        credit_budget("adaptive", recv_slots=64, ranks=4, nodes=1, credit_threshold=2, credits_per_pair=65)


def test_zero_receive_slots_are_refused_by_value():
    with pytest.raises(ConfigError, match="MAILRAIL_RECV_POOL_SLOTS must be in 1..2147483647, got 0"):
        Config.from_env({"MAILRAIL_RECV_POOL_SLOTS": "0", "MAILRAIL_FLOW_CONTROL": "adaptive"})
    with pytest.raises(ValueError, match="recv_slots=0, lease=1 and credit_threshold=2 must be >= 1"):
        AdaptiveCredits(node_of, LocalCounters(1, 0), LocalCounters(1, 1), LocalCounters(1, 0), 0, 1, 2)


def test_the_static_modes_point_at_adaptive_when_slots_run_out():
    with pytest.raises(ConfigError, match="flow_control='adaptive'"):
        credit_budget("node", recv_slots=3, ranks=64, nodes=4, credit_threshold=2)


# -- the sender side ---------------------------------------------------------------


def test_a_node_asks_once_per_destination_until_answered():
    a, b = make(), make()  # two ranks of one node: b shares a's pool, tokens and demand
    b.pool, b.tokens, b.demand = a.pool, a.tokens, a.demand
    assert not a.try_acquire(6)  # no credit until asked
    a.ask(6, 5)
    b.ask(6, 9)  # the node already asked: nothing more
    a.ask(6, 5)
    assert sent(a) == [(6, REQUEST, 5)] and sent(b) == []
    assert a.requests_sent == 1 and b.requests_sent == 0
    b.on_credit_message(6, ANSWER, 3)  # the answer may reach any rank of the node
    assert a.available(6) == 3 and a.try_acquire(6)
    a.ask(6, 1)  # answered: the node may ask again
    assert sent(a) == [(6, REQUEST, 1)]


def test_a_grant_adds_credits_but_keeps_the_request_outstanding():
    flow = make()
    flow.ask(6, 2)
    sent(flow)
    flow.on_credit_message(6, GRANT, 2)
    assert flow.available(6) == 2
    flow.ask(6, 2)
    assert sent(flow) == []  # still waiting for the answer


def test_a_demand_beyond_the_tag_space_is_capped():
    flow = make(max_tag=15)
    flow.ask(6, 40)
    assert sent(flow) == [(6, REQUEST, 1)]


def test_a_revoke_gives_back_what_the_pool_holds_even_nothing():
    flow = make()
    flow.on_credit_message(6, GRANT, 3)
    assert flow.try_acquire(6)
    flow.on_credit_message(6, REVOKE, 0)
    assert sent(flow) == [(6, GIVE_BACK, 2)] and flow.available(6) == 0
    flow.on_credit_message(6, REVOKE, 0)
    assert sent(flow) == [(6, GIVE_BACK, 0)]


def test_sender_side_errors_name_the_rank():
    flow = make(recv_slots=4)
    with pytest.raises(ProtocolError, match="rank 6 answered a request this node did not make"):
        flow.on_credit_message(6, ANSWER, 1)
    flow = make(recv_slots=4)
    with pytest.raises(ProtocolError, match=r"rank 6 granted 5 credits, leaving this node 5 > its 4 receive slots"):
        flow.on_credit_message(6, GRANT, 5)
    with pytest.raises(ProtocolError, match=r"adaptive flow control got a credit message \(unknown kind 6, count 1\)"):
        flow.on_credit_message(6, 6, 1)


# -- the receiver side --------------------------------------------------------------


def test_a_request_is_answered_from_free_slots_at_most_a_lease_and_at_most_the_demand():
    flow = make(recv_slots=8, lease=4)
    flow.on_credit_message(2, REQUEST, 10)  # node 1 asks via rank 2
    assert sent(flow) == [(2, ANSWER, 4)]
    flow.on_credit_message(5, REQUEST, 1)  # node 2 asks for 1
    assert sent(flow) == [(5, ANSWER, 1)]
    assert flow.free == 3 and flow.lease_count() == 2 and flow.requests_received == 2
    check_conserved(flow)


def test_a_message_without_credit_is_refused_by_node_and_rank():
    flow = make()
    with pytest.raises(ProtocolError, match=r"node 1 \(via rank 3\) sent a message here without credit: it holds 0"):
        flow.on_arrival(3, 0)
    flow.on_credit_message(2, REQUEST, 1)
    arrive(flow, 3)  # any rank of node 1 uses the node's credit
    with pytest.raises(
        ProtocolError, match=r"node 1 \(via rank 2\) .* holds 1 credit\(s\) of this rank and 1 are in use"
    ):
        flow.on_arrival(2, 0)


def test_released_credits_go_back_once_a_share_of_the_lease_gathered():
    flow = make(recv_slots=8, lease=4, threshold=2)
    flow.on_credit_message(2, REQUEST, 4)
    sent(flow)
    arrive(flow, 2, 4)
    assert release(flow, 3) == []  # held 4 // threshold 2: back in twos,
    assert release(flow, 2) == [(2, GRANT, 2)]  # to the rank whose message was released last
    assert release(flow, 2) == []
    assert release(flow, 3) == [(3, GRANT, 2)]
    assert flow.unreturned_total == 0 and flow.free == 4
    assert list(flow.leases[1].granted) == [2, 3]  # both were granted since the node's last revoke
    check_conserved(flow)


def test_a_revoke_goes_to_every_rank_granted_since_the_last_one():
    """A rank gets its grants before its revoke (one pair of ranks, one communicator), not before another
    rank's: so every rank that was granted credits gets the revoke, and the last give-back finds them all."""
    flow = make(recv_slots=4, lease=4, threshold=2)
    flow.on_credit_message(0, REQUEST, 4)  # node 0 takes all four
    assert sent(flow) == [(0, ANSWER, 4)]
    arrive(flow, 0, 2)
    arrive(flow, 1, 2)
    assert release(flow, 0) == [] and release(flow, 1, times=3) == [(1, GRANT, 2), (1, GRANT, 2)]
    assert list(flow.leases[0].granted) == [0, 1]
    flow.on_credit_message(4, REQUEST, 2)  # node 2 asks: nothing free, node 0 idle above its share
    assert sent(flow) == [(0, REVOKE, 0), (1, REVOKE, 0)] and flow.revokes_sent == 2
    assert flow.leases[0].revoking == 2 and not flow.leases[0].granted
    flow.on_credit_message(1, GIVE_BACK, 4)  # rank 1 finds the pool's four (its ranks wait for nothing)
    assert sent(flow) == [(4, ANSWER, 2)] and flow.leases[0].revoking == 1
    assert flow.leases[0].held == 0  # still a record: a give-back is on its way
    flow.on_credit_message(0, GIVE_BACK, 0)  # rank 0 finds nothing left: the round is over, node 0 forgotten
    assert 0 not in flow.leases and flow.free == 2
    with pytest.raises(ProtocolError, match="not revoked"):
        flow.on_credit_message(0, GIVE_BACK, 0)
    check_conserved(flow)


def test_a_revoke_with_nothing_granted_since_the_last_goes_to_the_rank_granted_last():
    flow = make(recv_slots=4, lease=4, threshold=2)
    flow.on_credit_message(0, REQUEST, 4)
    flow.on_credit_message(4, REQUEST, 1)
    assert sent(flow) == [(0, ANSWER, 4), (0, REVOKE, 0)]  # node 0 holds all four, idle: revoked at once
    flow.on_credit_message(0, GIVE_BACK, 1)  # it kept three for sends that wait
    assert sent(flow) == [(4, ANSWER, 1)] and flow.leases[0].recheck and not flow.leases[0].granted
    arrive(flow, 1)  # it used one: what it kept may be idle now
    flow.on_credit_message(6, REQUEST, 1)  # a third node: shares 1, node 0 holds 3
    # Nothing was granted to node 0 since its revoke, so every grant before it is in its pool: any rank will do,
    # and the one granted last gets it.
    assert sent(flow) == [(0, REVOKE, 0)] and flow.leases[0].revoking == 1
    check_conserved(flow)


def test_a_node_waiting_alone_is_answered_by_its_own_released_credits():
    flow = make(recv_slots=4, lease=3, threshold=1)  # back once all it holds gathered
    flow.on_credit_message(0, REQUEST, 3)
    flow.on_credit_message(2, REQUEST, 1)
    assert sent(flow) == [(0, ANSWER, 3), (2, ANSWER, 1)]  # nothing free now; shares are 2
    arrive(flow, 2)
    flow.on_credit_message(3, REQUEST, 3)  # node 1 asks again holding 1 of the 4: node 0 is revoked
    assert sent(flow) == [(0, REVOKE, 0)] and list(flow.waiting) == [1]
    assert release(flow, 2) == [(2, ANSWER, 1)]  # its own released credit answers it at once
    assert flow.leases[1].demand == 0 and not flow.waiting
    check_conserved(flow)


def test_a_node_holding_every_slot_keeps_its_standing_window_and_its_request_stands():
    """A node holding every slot asks whenever its pool runs dry between two returns of its window.  It
    gets nothing more by asking, so its own released credits do not answer it (that was a request and an
    answer every few messages): they come back as its window does, and its request stands, the token out,
    so its ranks ask no more.  Free slots answer it, in its turn."""
    flow = make(recv_slots=2, lease=2, threshold=1)  # back once all it holds gathered
    flow.on_credit_message(2, REQUEST, 2)
    assert sent(flow) == [(2, ANSWER, 2)]
    arrive(flow, 2, 2)
    assert release(flow, 2) == []  # 1 owed of 2 held: kept back
    flow.on_credit_message(3, REQUEST, 3)  # the node asks again (its pool is empty), holding every slot
    assert sent(flow) == [] and list(flow.waiting) == [1]
    assert release(flow, 3) == [(3, GRANT, 2)]  # its window, not an answer: the request stands
    assert flow.leases[1].demand == 3 and list(flow.waiting) == [1]
    arrive(flow, 2, 2)
    assert release(flow, 2, times=2) == [(2, GRANT, 2)]
    flow.on_credit_message(4, REQUEST, 1)  # node 2 asks: shares are 1, node 1 holds 2 in its pool
    assert sent(flow) == [(2, REVOKE, 0), (3, REVOKE, 0)] and list(flow.waiting) == [1, 2]
    flow.on_credit_message(2, GIVE_BACK, 2)  # its ranks wait for nothing now
    # In line order: node 1's standing request is answered (its token goes home) with one credit, not both:
    # node 2 waits behind it, and node 1 holds its share.  Then node 2's.
    assert sent(flow) == [(2, ANSWER, 1), (4, ANSWER, 1)]
    flow.on_credit_message(3, GIVE_BACK, 0)  # rank 3 found the pool empty
    assert not flow.waiting and flow.given_back == 2 and flow.free == 0 and not flow.leases[1].revoking
    check_conserved(flow)


def test_a_node_waiting_alone_at_its_share_keeps_its_standing_window():
    """Node 0 holds its share (2 of 4, node 1 the other 2) and asks alone: nothing more can come to it without
    another node's credits, so its released credits come back as its window, not one by one as answers to
    request after request, and its request stands."""
    flow = make(recv_slots=4, lease=2, threshold=1)  # back once all it holds gathered
    flow.on_credit_message(0, REQUEST, 2)
    flow.on_credit_message(2, REQUEST, 2)
    assert sent(flow) == [(0, ANSWER, 2), (2, ANSWER, 2)]
    arrive(flow, 0, 2)
    flow.on_credit_message(1, REQUEST, 4)  # alone in line, at its share
    assert sent(flow) == [] and list(flow.waiting) == [0]
    assert release(flow, 0) == []  # not answered with one credit
    assert release(flow, 1) == [(1, GRANT, 2)]  # its window
    assert list(flow.waiting) == [0] and flow.leases[0].demand == 4 and flow.requests_received == 3
    check_conserved(flow)


def test_freed_slots_go_to_the_nodes_below_their_share_in_line_order():
    flow = make(recv_slots=6, lease=6, threshold=1)
    flow.on_credit_message(0, REQUEST, 6)  # node 0 takes all six
    assert sent(flow) == [(0, ANSWER, 6)]
    arrive(flow, 0, 6)
    flow.on_credit_message(2, REQUEST, 6)  # node 1 asks: shares 3
    flow.on_credit_message(4, REQUEST, 6)  # node 2 asks: shares 2
    flow.on_credit_message(1, REQUEST, 6)  # node 0 asks too, last in line, above its share
    assert sent(flow) == [] and list(flow.waiting) == [1, 2, 0]
    # Node 0's released credits above its share are reclaimed while others wait, each freed slot to the first
    # node in line below its share; node 0 keeps its place in line, its request standing.
    assert release(flow, 0, times=2) == [(2, ANSWER, 1), (4, ANSWER, 1)]
    assert list(flow.waiting) == [0] and flow.reclaimed == 2 and flow.free == 0
    check_conserved(flow)


def test_a_slot_nobody_in_line_may_take_is_not_offered_again_on_every_release():
    """7 slots, 3 nodes: shares of 2, one slot left over.  Nodes 0 and 1 wait at their shares, so nobody in
    line may take it; a release that frees nothing and grants nothing does not walk the line again (per
    message, that would cost the line's length): only the window's return looks."""
    flow = make(recv_slots=7, lease=7, threshold=1)
    for rank in (0, 2, 4):
        flow.on_credit_message(rank, REQUEST, 2)
    assert sent(flow) == [(0, ANSWER, 2), (2, ANSWER, 2), (4, ANSWER, 2)] and flow.free == 1
    arrive(flow, 0, 2)
    flow.on_credit_message(1, REQUEST, 4)
    flow.on_credit_message(3, REQUEST, 4)
    assert sent(flow) == [] and list(flow.waiting) == [0, 1] and flow.free == 1
    serves = []
    serve = flow._serve
    flow._serve = lambda: (serves.append(1), serve())  # type: ignore[method-assign]
    assert release(flow, 0) == [] and not serves
    assert release(flow, 1) == [(1, GRANT, 2)] and len(serves) == 1  # the window's return: parked, looked at
    assert list(flow.waiting) == [0, 1] and flow.free == 1
    check_conserved(flow)


def test_while_another_node_waits_released_credits_are_reclaimed_for_it():
    flow = make(recv_slots=2, lease=2, threshold=1)
    flow.on_credit_message(0, REQUEST, 5)  # node 0 takes both slots
    assert sent(flow) == [(0, ANSWER, 2)]
    arrive(flow, 0, 2)
    flow.on_credit_message(4, REQUEST, 5)  # node 2 waits: nothing free, node 0's credits are all here
    assert sent(flow) == [] and list(flow.waiting) == [2]
    assert release(flow, 1) == [(4, ANSWER, 1)]  # reclaimed from node 0, served to node 2 at once
    assert flow.reclaimed == 1
    assert release(flow, 0) == [(0, GRANT, 1)]  # nobody waits now: back to node 0
    check_conserved(flow)


def test_a_node_within_its_share_keeps_its_standing_window_while_others_wait():
    """Two nodes hold their fair share (2 of 4 each) and both asked for more: nothing is free, nothing is
    reclaimed, and each node's released credits go back to it once its threshold gathered, as when nobody
    waits: a standing window, not a request and an answer per message."""
    flow = make(recv_slots=4, lease=2, threshold=1)  # back once all it holds gathered
    flow.on_credit_message(0, REQUEST, 2)
    flow.on_credit_message(2, REQUEST, 2)
    assert sent(flow) == [(0, ANSWER, 2), (2, ANSWER, 2)]
    arrive(flow, 0, 2)
    arrive(flow, 2, 2)
    flow.on_credit_message(0, REQUEST, 5)
    flow.on_credit_message(2, REQUEST, 5)
    assert sent(flow) == [] and list(flow.waiting) == [0, 1]  # each within its share: no revoke
    assert release(flow, 0) == [] and release(flow, 3) == []  # one of two back: kept owed
    assert release(flow, 1) == [(1, GRANT, 2)]
    assert release(flow, 2) == [(2, GRANT, 2)]
    assert flow.reclaimed == 0 and flow.revokes_sent == 0 and list(flow.parked) == [0, 1]
    check_conserved(flow)


def test_a_new_node_shrinks_the_shares_and_an_idle_node_above_its_share_is_revoked():
    flow = make(recv_slots=4, lease=4)
    flow.on_credit_message(0, REQUEST, 2)
    flow.on_credit_message(2, REQUEST, 2)
    sent(flow)
    arrive(flow, 2, 2)
    flow.on_credit_message(2, REQUEST, 1)  # free 0; shares 2: neither above, both parked
    assert sent(flow) == [] and list(flow.parked) == [0, 1]
    flow.on_credit_message(4, REQUEST, 1)  # a third node: shares 1, node 0 idle above its share
    assert sent(flow) == [(0, REVOKE, 0)]  # node 1 is above its share too, but all its credits are here
    assert not flow.parked and not flow.revocable
    flow.on_credit_message(0, GIVE_BACK, 2)
    # Node 1, first in line, holds 2 of its share of 1: it keeps its place, its request standing; node 2 gets
    # its share.  The other slot stays free for a node below its share.
    assert sent(flow) == [(4, ANSWER, 1)] and list(flow.waiting) == [1] and flow.free == 1
    check_conserved(flow)


def test_idle_credits_are_revoked_when_a_node_waits_and_none_is_free():
    flow = make(recv_slots=4, lease=4)
    flow.on_credit_message(0, REQUEST, 4)  # node 0 holds all four and stops sending
    sent(flow)
    flow.on_credit_message(4, REQUEST, 2)
    assert sent(flow) == [(0, REVOKE, 0)] and flow.revokes_sent == 1
    flow.on_credit_message(1, REQUEST, 1)  # a rank of node 0 asks meanwhile: no second revoke
    assert sent(flow) == []
    flow.on_credit_message(0, GIVE_BACK, 4)
    assert sent(flow) == [(4, ANSWER, 2), (1, ANSWER, 1)]  # in the order they asked, each to the rank that asked
    assert flow.given_back == 4 and flow.free == 1
    check_conserved(flow)


def test_a_node_whose_credits_are_all_here_is_not_revoked():
    flow = make(recv_slots=1, lease=1)
    flow.on_credit_message(0, REQUEST, 1)
    sent(flow)
    arrive(flow, 0)
    flow.on_credit_message(4, REQUEST, 1)
    assert sent(flow) == []  # node 0's one credit is a message here: its release frees it
    assert release(flow, 0) == [(4, ANSWER, 1)]


def test_owed_credits_below_the_threshold_are_reclaimed_when_a_node_starts_waiting():
    flow = make(recv_slots=4, lease=4, threshold=1)  # send back only once all four gathered
    flow.on_credit_message(0, REQUEST, 4)
    sent(flow)
    arrive(flow, 0, 2)
    assert release(flow, 0, 2) == []  # two owed, kept back
    flow.on_credit_message(4, REQUEST, 2)
    assert sent(flow) == [(4, ANSWER, 2)]  # the owed two serve node 2 at once: nobody waits, no revoke
    assert flow.reclaimed == 2
    check_conserved(flow)


def test_a_give_back_that_was_not_asked_for_or_exceeds_the_unused_credits_is_refused():
    flow = make(recv_slots=4, lease=4)
    with pytest.raises(ProtocolError, match=r"node 0 \(via rank 1\) gave back 2 credit\(s\) that were not revoked"):
        flow.on_credit_message(1, GIVE_BACK, 2)
    flow.on_credit_message(0, REQUEST, 4)
    arrive(flow, 0, 3)
    flow.on_credit_message(4, REQUEST, 1)
    assert (0, REVOKE, 0) in sent(flow)
    with pytest.raises(ProtocolError, match=r"gave back 2 credit\(s\) but held only 1 unused"):
        flow.on_credit_message(0, GIVE_BACK, 2)


def test_a_second_request_before_the_answer_is_refused():
    flow = make(recv_slots=1, lease=1)
    flow.on_credit_message(0, REQUEST, 1)
    flow.on_credit_message(2, REQUEST, 1)  # node 1 waits
    with pytest.raises(ProtocolError, match=r"node 1 \(via rank 3\) asked for credits again before its answer"):
        flow.on_credit_message(3, REQUEST, 1)


def test_a_lease_record_is_forgotten_once_its_node_holds_nothing():
    flow = make(recv_slots=2, lease=2)
    flow.on_credit_message(0, REQUEST, 2)
    sent(flow)
    flow.on_credit_message(4, REQUEST, 1)
    assert sent(flow) == [(0, REVOKE, 0)]
    assert flow.credit_state_bytes() == 2 * LEASE_BYTES + QUEUE_ENTRY_BYTES  # two records; node 2 queued
    flow.on_credit_message(0, GIVE_BACK, 2)
    assert sent(flow) == [(4, ANSWER, 1)]
    assert list(flow.leases) == [2] and flow.lease_count() == 1  # node 0's record is gone
    assert flow.leases_high_water == 2 and flow.waiting_high_water == 1


def test_fifo_service_bounds_every_wait_by_the_nodes_queued_ahead():
    """One slot, four nodes that always have sends waiting: a node that asks is answered after at most the
    three others were served once each (round-robin), and every revoke is answered by what the pool holds."""
    flow = make(recv_slots=1, lease=1)
    rank_of = {0: 0, 1: 2, 2: 4, 3: 6}  # each node sends from one rank
    pool = dict.fromkeys(rank_of, 0)
    asked_at: dict[int, int] = {}  # node -> answers served when it asked
    served = 0
    waits = []
    for node in rank_of:
        flow.on_credit_message(rank_of[node], REQUEST, 3)
        asked_at[node] = served
    for _ in range(40):
        for target, kind, count in sent(flow):
            node = node_of(target)
            if kind == ANSWER:
                pool[node] += count
                waits.append(served - asked_at.pop(node))
                served += 1
            elif kind == GRANT:
                pool[node] += count
            else:
                assert kind == REVOKE
                flow.on_credit_message(target, GIVE_BACK, pool[node])
                pool[node] = 0
        for node, credits in pool.items():  # each node sends what it holds; the receiver releases at once
            for _ in range(credits):
                arrive(flow, rank_of[node])
                flow.on_release(rank_of[node])
            pool[node] = 0
        for node in rank_of:  # an empty pool and sends waiting: ask (once)
            if node not in asked_at and not pool[node]:
                flow.on_credit_message(rank_of[node], REQUEST, 3)
                asked_at[node] = served
        check_conserved(flow)
    assert served >= 20 and max(waits) <= 3, waits


def test_stall_lines_tell_what_was_asked_and_what_is_lent():
    flow = make(recv_slots=4, lease=2)
    flow.ask(6, 3)
    flow.on_credit_message(2, REQUEST, 2)
    lines = flow.stall_lines([6, 7])
    assert lines[0] == "  this node asked 1 of them for credit and awaits the answer (6)"
    assert lines[1] == "  as a receiver: 2 of 4 slots lent to 1 node(s), 0 node(s) waiting, 0 revoke(s) unanswered"


def test_shared_state_is_the_pool_and_the_tokens():
    flow = make()
    assert flow.name == "adaptive" and flow.credits_change_silently and flow.asks_for_credit
    assert flow.shared_state_bytes() == 3 * RANKS * 8
    assert flow.credit_state_bytes() == 0
