"""Loss and recovery between nodes (PSM2's rules, and TCP's selective ones): the flow state on its own, then
inside the model, against closed forms for one flow under a fixed drop pattern, and conservation under random
loss."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mailrail.flow import MODE_NAMES
from mailrail_simulate.model import Workload, simulate
from mailrail_simulate.network import Network
from mailrail_simulate.params import ModelParams, ParamsError
from mailrail_simulate.reliability import (
    ACCEPT,
    ACK,
    DUPLICATE,
    HELD,
    NAK,
    NO_REPLY,
    OUT_OF_ORDER,
    Packet,
    ReceiveFlow,
    Reliability,
    SendFlow,
)


def _packets(count: int) -> list[Packet]:
    return [Packet((0, 0, i, 100, i), 100) for i in range(count)]


def _flows(window: int = 4, ack_interval: int = 2) -> Reliability:
    return Reliability(window, ack_interval, timeout_min=0.16, timeout_max=0.64, backoff=2.0)


def test_a_full_window_holds_packets_until_an_ack_frees_it():
    flows = _flows(window=3)
    flow = flows.send_flow(0, 1)
    out = [flows.submit(flow, packet, 0.0) for packet in _packets(5)]
    assert [len(batch) for batch in out] == [1, 1, 1, 0, 0]
    freed = flows.acknowledged(flow, 1, 0.5)  # cumulative: seq 0 and 1
    assert [packet.seq for packet in freed] == [3, 4]
    assert [packet.seq for packet in flow.unacked] == [2, 3, 4]


def test_every_ack_interval_th_packet_asks_for_an_ack():
    flows = _flows(window=100, ack_interval=4)
    flow = flows.send_flow(0, 1)
    sent = [packet for p in _packets(9) for packet in flows.submit(flow, p, 0.0)]
    assert [packet.seq for packet in sent if packet.ack_request] == [3, 7]


def test_the_receiver_accepts_in_order_naks_a_gap_once_and_drops_duplicates():
    flows = _flows(ack_interval=2)
    sender, receiver = flows.send_flow(0, 1), flows.receive_flow(0, 1)
    p0, p1, p2, p3 = (packet for p in _packets(4) for packet in flows.submit(sender, p, 0.0))
    assert flows.receive(receiver, p0, True) == (ACCEPT, NO_REPLY, 0)
    # p1 lost: p2 and p3 are out of order, NAKed once
    assert flows.receive(receiver, p2, True) == (OUT_OF_ORDER, NAK, 1)
    assert flows.receive(receiver, p3, True) == (OUT_OF_ORDER, NO_REPLY, 0)
    assert flows.receive(receiver, p1, True) == (ACCEPT, ACK, 1)  # it asked for an ACK (every 2nd)
    assert flows.receive(receiver, p0, True) == (DUPLICATE, NO_REPLY, 0)
    assert flows.receive(receiver, p3, True) == (OUT_OF_ORDER, NAK, 2)  # a new gap, a new NAK
    assert flows.naks == 2 and flows.discarded == 4


def test_a_payload_dropped_for_want_of_eager_bytes_is_naked_like_a_gap():
    flows = _flows()
    sender, receiver = flows.send_flow(0, 1), flows.receive_flow(0, 1)
    (p0,) = flows.submit(sender, _packets(1)[0], 0.0)
    assert flows.receive(receiver, p0, False) == (OUT_OF_ORDER, NAK, 0)
    assert receiver.expected == 0


def test_a_nak_goes_back_to_the_packet_it_names():
    flows = _flows(window=8)
    flow = flows.send_flow(0, 1)
    for packet in _packets(5):
        flows.submit(flow, packet, 0.0)
    delay, again = flows.nak(flow, 2, 1.0)  # 0 and 1 arrived
    assert delay == 0 and [packet.seq for packet in again] == [2, 3, 4]
    assert flows.retransmitted == 3 and [packet.attempts for packet in again] == [2, 2, 2]
    assert flow.deadline == pytest.approx(1.0 + 0.16)


def test_with_congestion_control_a_nak_holds_the_flow_then_lets_one_packet_go_and_acks_widen_it():
    """PSM2's CCA: window 1, the flow held for half to all of the timeout, the window doubling per ACK."""
    flows = Reliability(8, 4, 0.16, 0.64, 2.0, congestion_control=True, rng=random.Random(5))
    flow = flows.send_flow(0, 1)
    for packet in _packets(6):
        flows.submit(flow, packet, 0.0)
    delay, again = flows.nak(flow, 1, 1.0)
    assert 0.08 <= delay < 0.16 and again == []
    assert flows.submit(flow, _packets(1)[0], 1.0 + delay / 2) == []  # held: new packets wait too
    (first,) = flows.resume(flow, 1.0 + delay)
    assert first.seq == 1 and flow.cwin == 1
    assert [p.seq for p in flows.acknowledged(flow, 1, 1.5)] == [2, 3]  # window 2
    assert [p.seq for p in flows.acknowledged(flow, 3, 1.6)] == [4, 5, 6]  # window 4, 3 left to send
    assert flow.cwin == 4 and flows.retransmitted == 5  # 1..5 went twice


def test_the_timer_backs_off_to_its_maximum_and_resets_on_progress():
    flows = _flows(window=8)
    flow = flows.send_flow(0, 1)
    for packet in _packets(3):
        flows.submit(flow, packet, 0.0)
    assert not flows.expired(flow, 0.1)
    expiries, now = [], 0.16
    for _ in range(4):
        assert flows.expired(flow, now)
        expiries.append(now)
        now = flow.deadline
    assert [round(b - a, 6) for a, b in zip(expiries, [*expiries[1:], now], strict=True)] == [0.32, 0.64, 0.64, 0.64]
    flows.acknowledged(flow, 0, now)
    assert flow.timeout == 0.16 and flow.deadline == pytest.approx(0.0 + 0.16)  # from packet 1's transmission


def test_an_error_check_naks_what_is_missing_or_acks_everything():
    flows = _flows()
    receiver = flows.receive_flow(0, 1)
    assert flows.error_check(receiver, 0) == (NAK, 0)
    receiver.expected = 3
    assert flows.error_check(receiver, 2) == (ACK, 2)


def _selective(window: int = 8) -> Reliability:
    return Reliability(window, 1, timeout_min=0.2, timeout_max=120.0, backoff=2.0, selective=True)


def test_selectively_the_receiver_holds_what_follows_a_gap_sacks_every_packet_after_it_and_hands_on_in_order():
    flows = _selective()
    sender, receiver = flows.send_flow(0, 1), flows.receive_flow(0, 1)
    p0, p1, p2, p3, p4 = (packet for p in _packets(5) for packet in flows.submit(sender, p, 0.0))
    assert flows.receive(receiver, p0, True) == (ACCEPT, ACK, 0)
    # p1 and p3 lost: p2 and p4 are held, each answered by a duplicate ACK naming the gap at 1
    assert flows.receive(receiver, p2, True) == (HELD, NAK, 1)
    assert flows.receive(receiver, p4, True) == (HELD, NAK, 1)
    assert flows.receive(receiver, p2, True) == (DUPLICATE, NAK, 1)  # held already: answered at once
    # p1 fills the first gap: p2 follows it, and the gap at 3 is named
    assert flows.receive(receiver, p1, True) == (ACCEPT, NAK, 3)
    assert [packet.seq for packet in flows.take_ready(receiver)] == [2]
    assert flows.take_ready(receiver) == []
    assert flows.receive(receiver, p3, True) == (ACCEPT, ACK, 4)  # a filled gap is acknowledged at once
    assert [packet.seq for packet in flows.take_ready(receiver)] == [4]
    assert flows.receive(receiver, p3, True) == (DUPLICATE, ACK, 4)  # no gap: a plain duplicate ACK
    assert receiver.expected == 5 and not receiver.held and flows.naks == 4


def test_selectively_a_packet_its_receiver_has_no_room_for_is_dropped_unanswered_and_sent_again():
    """TCP drops a segment its receive buffer cannot take, unanswered: not delivered (Hypothesis found the model
    delivering it), and recovered as any loss is; in the model, sent again once its timer expires."""
    flows = _selective()
    sender, receiver = flows.send_flow(0, 1), flows.receive_flow(0, 1)
    (p0,) = flows.submit(sender, _packets(1)[0], 0.0)
    assert flows.receive(receiver, p0, False) == (OUT_OF_ORDER, NO_REPLY, 0)
    assert receiver.expected == 0 and not receiver.held and flows.take_ready(receiver) == []
    # six senders, one node each, two messages to one victim whose context holds one payload: one is dropped
    load = Workload(ranks=6, ranks_per_node=1, victims=1, messages_per_rank=2, mode="none", recv_slots=4, seed=0)
    params = LOSSY.replace(
        send_cpu_s=1e-6,
        recv_cpu_s=3e-6,
        recv_context_entries=2,
        recv_context_bytes=4096,
        ingest_cpu_s=1e-6,
        copy_Bps=5e9,
        header_bytes=64,
        flow_window_packets=2,
        ack_interval_packets=1,
        selective_recovery=1,
        retransmit_timeout_min_s=1e-3,
        retransmit_timeout_max_s=4e-3,
    )
    result = simulate(load, params, check_invariants=True)
    assert result.status == "ok" and result.messages == 10
    assert result.dropped_packets == result.retransmitted_packets == result.timeouts == 1


def _sent(flows: Reliability, count: int, times: list[float]) -> tuple[SendFlow, ReceiveFlow, list[Packet]]:
    """*count* packets on one selective flow, the i-th sent at ``times[i]``."""
    flow, receiver = flows.send_flow(0, 1), flows.receive_flow(0, 1)
    packets = [packet for p, when in zip(_packets(count), times) for packet in flows.submit(flow, p, when)]
    assert len(packets) == count
    return flow, receiver, packets


def test_selectively_a_duplicate_ack_sends_again_what_was_sent_before_a_packet_held():
    """RACK's rule on one path: a packet not taken that was sent before one the receiver holds is lost, a lost
    retransmission too; one sent after the newest held packet may still be on its way."""
    flows = _selective()
    flow, receiver, (p0, p1, p2, p3, p4) = _sent(flows, 5, [0.0, 0.1, 0.2, 0.3, 0.4])
    flows.receive(receiver, p0, True)
    flows.receive(receiver, p3, True)  # p1 and p2 lost; p4 not arrived yet
    delay, again = flows.nak(flow, 1, 1.0, receiver)
    assert delay == 0 and [packet.seq for packet in again] == [1, 2]
    assert [packet.seq for packet in flow.unacked] == [1, 2, 3, 4] and flows.retransmitted == 2
    assert flow.deadline == pytest.approx(1.0 + 0.2)  # the oldest's timer restarted with its resend
    # the same SACK again (another duplicate ACK) names nothing new: what went again was sent after p3
    assert flows.nak(flow, 1, 1.1, receiver) == (0.0, [])
    # p1's resend is lost; p2's, which left after it (at 1.05, say), arrives, and so does p4: p1 goes again
    p2.sent_at = 1.05
    flows.receive(receiver, p2, True)
    flows.receive(receiver, p4, True)
    assert [packet.seq for packet in flows.nak(flow, 1, 1.2, receiver)[1]] == [1]
    assert flows.retransmitted == 3


def test_selectively_a_timeout_sends_again_what_the_receiver_does_not_hold():
    flows = _selective()
    sender, receiver = flows.send_flow(0, 1), flows.receive_flow(0, 1)
    p0, p1, p2, p3 = (packet for p in _packets(4) for packet in flows.submit(sender, p, 0.0))
    flows.receive(receiver, p2, True)  # p0, p1 and p3 lost; p2 held
    assert flows.expired(sender, 0.2)
    assert [packet.seq for packet in flows.timed_out(sender, receiver, 0.2)] == [0, 1, 3]
    assert sender.timeout == 0.4 and sender.deadline == pytest.approx(0.6)  # backed off
    assert flows.retransmitted == 3 and flows.timeouts == 1


def _probing(window: int = 8, initial: float = 0.0) -> Reliability:
    return Reliability(
        window,
        1,
        timeout_min=0.2,
        timeout_max=120.0,
        backoff=2.0,
        selective=True,
        reno=True,
        initial_window=initial,
        loss_probe=0.012,
    )


def test_a_tail_loss_probe_is_due_after_the_latest_transmission_and_sends_again_what_was_not_taken():
    flows = _probing()
    flow, receiver, (p0, p1, p2) = _sent(flows, 3, [0.0, 0.001, 0.002])
    assert flows.next_timer(flow) == pytest.approx(0.014)  # 12 ms after the latest transmission, before the RTO
    flows.receive(receiver, p0, True)
    assert flows.acknowledged(flow, 0, 0.003) == [] and flows.next_timer(flow) == pytest.approx(0.015)  # re-armed
    assert not flows.probe_due(flow, 0.0149) and flows.probe_due(flow, 0.015)
    assert [packet.seq for packet in flows.probe(flow, receiver, 0.015)] == [1, 2]  # the tail, lost
    assert flows.loss_probes == 1 and flows.retransmitted == 2 and flows.timeouts == 0
    assert flow.cwin == 4 and flow.deadline == pytest.approx(0.215)  # fast recovery: halved; the RTO from now
    assert flows.next_timer(flow) == pytest.approx(0.215)  # one probe an episode, none while recovering
    flows.receive(receiver, p1, True)
    flows.receive(receiver, p2, True)
    flows.acknowledged(flow, 2, 0.016)
    assert not flow.unacked and not flow.probed  # an ACK moved the flow on: the next episode may probe again


def test_a_probe_finding_everything_arrived_sends_nothing_and_keeps_the_window():
    flows = _probing()
    flow, receiver, packets = _sent(flows, 2, [0.0, 0.0])
    for packet in packets:
        flows.receive(receiver, packet, True)  # arrived; the ACK is still on its way
    assert flows.probe(flow, receiver, 0.012) == [] and flow.cwin == 8 and flows.retransmitted == 0


def test_renos_window_starts_at_the_initial_window_and_slow_starts_to_the_threshold():
    flows = _probing(window=8, initial=3.3)
    flow = flows.send_flow(0, 1)
    out = [packet for p in _packets(10) for packet in flows.submit(flow, p, 0.0)]
    assert len(out) == 4  # while fewer than 3.3 are out, another goes
    freed = flows.acknowledged(flow, 1, 0.1)  # two acknowledged: the window grows by one per packet, to 5.3
    assert flow.cwin == pytest.approx(5.3) and len(freed) == 4 and len(flow.unacked) == 6
    flows.acknowledged(flow, 7, 0.2)
    assert flow.cwin == 8  # never past flow_window_packets


def test_a_drop_tail_port_drops_what_does_not_fit_and_a_full_uplink_refuses_its_sender():
    wire = 1000
    params = ModelParams(
        header_bytes=0,
        link_Bps=1e6,
        link_latency_s=0.0,
        switch_queue_bytes=2 * wire,
        drop_tail=1,
        flow_window_packets=4,
        retransmit_timeout_min_s=0.2,
        retransmit_timeout_max_s=0.2,
    )
    # one node's uplink holds two messages (the one leaving counts): its sender sees no room for a third
    network = Network(params, nodes=2)
    for _ in range(2):
        assert network.uplink_has_room(0.0, 0, wire)
        network.send(0.0, 0, 1, wire, droppable=True)
    assert not network.uplink_has_room(0.0, 0, wire) and network.uplink_has_room(1e-3, 0, wire)
    # three nodes' messages reach one port together: it holds two, the third is dropped there
    network = Network(params, nodes=4)
    assert [network.send(0.0, node, 3, wire, droppable=True)[1] is not None for node in range(3)] == [
        True,
        True,
        False,
    ]
    # control messages are never dropped
    assert network.send(0.0, 0, 3, wire, droppable=False)[1] is not None
    # a lossless fabric's uplink always has room (its links wait instead)
    assert Network(params.replace(drop_tail=0), nodes=2).uplink_has_room(0.0, 0, 10 * wire)


# -- inside the model ------------------------------------------------------------------------------

RATE, LATENCY, SIZE = 1e9, 1e-4, 4096
TIMEOUT = 0.16
LOSSY = ModelParams(
    send_cpu_s=0.0,
    recv_cpu_s=0.0,
    credit_cpu_s=0.0,
    header_bytes=0,
    link_Bps=RATE,
    link_latency_s=LATENCY,
    flow_window_packets=64,
    ack_interval_packets=16,
    retransmit_timeout_min_s=TIMEOUT,
    retransmit_timeout_max_s=4 * TIMEOUT,
    retransmit_backoff=2.0,
)


def _one_flow(messages: int) -> Workload:
    """Rank 1 (node 1) sends to rank 0 (node 0), the victim."""
    return Workload(ranks=2, ranks_per_node=1, victims=1, messages_per_rank=messages, mode="none", seed=3)


@pytest.mark.parametrize("drops", [0, 1, 3])
def test_a_message_lost_unseen_d_times_costs_d_timeouts_and_round_trips(drops):
    """Its timer expires after the minimum, the ERR_CHK gets a NAK, the retransmission resets the timer: each
    loss costs timeout + 2 latencies (zero-byte control messages), then it arrives as a lossless one would.
    One more expiry ends every run: the packet asked no ACK (only every 16th does), so an ERR_CHK gets one."""

    def drop(source, dest, seq, attempt):
        return source == 1 and attempt <= drops

    result = simulate(_one_flow(1), LOSSY, check_invariants=True, drop=drop)
    lossless = 2 * SIZE / RATE + LATENCY
    assert result.runtime_s == pytest.approx(drops * (TIMEOUT + 2 * LATENCY) + lossless, rel=1e-9)
    assert (result.dropped_packets, result.retransmitted_packets, result.timeouts) == (drops, drops, drops + 1)
    assert result.messages == 1


def test_a_gap_is_naked_by_the_next_packet_and_the_sender_goes_back_n():
    """n packets back to back, the first lost: the second's arrival NAKs it, every packet goes again."""
    n = 10

    def drop(source, dest, seq, attempt):
        return seq == 0 and attempt == 1

    result = simulate(_one_flow(n), LOSSY, check_invariants=True, drop=drop)
    serialize = SIZE / RATE
    nak_at = 3 * serialize + 2 * LATENCY  # the second packet's arrival, then the NAK's way back
    assert n * serialize < nak_at  # (every packet left before the NAK came back)
    assert result.runtime_s == pytest.approx(nak_at + (n + 1) * serialize + LATENCY, rel=1e-9)
    assert (result.dropped_packets, result.retransmitted_packets, result.timeouts) == (1, n, 1)
    assert result.messages == n


TCP_LIKE = LOSSY.replace(selective_recovery=1, ack_interval_packets=1, retransmit_timeout_max_s=120.0)


def test_selectively_a_lost_packet_is_named_by_the_next_and_sent_again_alone():
    """n packets back to back, the first lost: the second's arrival names it, and only it goes again (TCP's
    fast retransmit with SACK); the receiver then hands on everything it held."""
    n = 10

    def drop(source, dest, seq, attempt):
        return seq == 0 and attempt == 1

    result = simulate(_one_flow(n), TCP_LIKE, check_invariants=True, drop=drop)
    serialize = SIZE / RATE
    nak_at = 3 * serialize + 2 * LATENCY
    assert n * serialize < nak_at
    assert result.runtime_s == pytest.approx(nak_at + 2 * serialize + LATENCY, rel=1e-9)
    assert (result.dropped_packets, result.retransmitted_packets, result.timeouts) == (1, 1, 0)
    assert result.messages == n


@pytest.mark.parametrize("drops", [1, 2])
def test_selectively_a_lost_last_packet_waits_for_the_retransmission_timeout(drops):
    """Nothing follows the last packet to name it: the RTO (its minimum, then doubled) sends it again."""
    n = 4

    def drop(source, dest, seq, attempt):
        return seq == n - 1 and attempt <= drops

    result = simulate(_one_flow(n), TCP_LIKE, check_invariants=True, drop=drop)
    serialize = SIZE / RATE
    waited = sum(TIMEOUT * 2**k for k in range(drops))  # 0.16, then 0.16 + 0.32
    assert result.runtime_s == pytest.approx(waited + 2 * serialize + LATENCY, rel=1e-9)
    assert (result.dropped_packets, result.retransmitted_packets, result.timeouts) == (drops, drops, drops)


def test_selectively_a_lost_last_packet_is_sent_again_by_the_tail_loss_probe():
    """With a probe, a lost tail costs the probe's time after the last ACK, not the RTO: the ACK of packet
    n-2 reaches the sender at n serializations and two latencies, the probe resends the last one then."""
    n, probe = 4, 0.01

    def drop(source, dest, seq, attempt):
        return seq == n - 1 and attempt == 1

    result = simulate(_one_flow(n), TCP_LIKE.replace(loss_probe_s=probe), check_invariants=True, drop=drop)
    serialize = SIZE / RATE
    last_ack = n * serialize + 2 * LATENCY
    assert result.runtime_s == pytest.approx(last_ack + probe + 2 * serialize + LATENCY, rel=1e-9)
    assert (result.dropped_packets, result.retransmitted_packets, result.timeouts, result.loss_probes) == (1, 1, 0, 1)


def test_a_drop_tail_queue_smaller_than_one_datagram_is_refused():
    with pytest.raises(ParamsError, match="a link queue of 1000 bytes with drop_tail=1"):
        simulate(_one_flow(1), TCP_LIKE.replace(drop_tail=1, switch_queue_bytes=1000))


def test_a_receive_context_smaller_than_one_datagram_is_refused():
    with pytest.raises(ParamsError, match="recv_context_bytes=1000"):
        simulate(_one_flow(1), LOSSY.replace(recv_context_bytes=1000))


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"recv_context_entries": 8}, "flow_window_packets and retransmit_timeout_min_s"),
        ({"drop_tail": 1}, "drop_tail=1: a drop-tail queue loses packets"),
        ({"selective_recovery": 2}, "selective_recovery=2: 0"),
        ({"flow_window_packets": 4, "retransmit_timeout_min_s": 1.0}, "retransmit_timeout_max_s=0.0"),
        ({"ack_interval_packets": 0}, "ack_interval_packets=0"),
        ({"retransmit_backoff": 0.5}, "retransmit_backoff=0.5"),
        ({"initial_window_bytes": 14480}, "initial_window_bytes=14480: a congestion window's, so reno_window=1"),
        ({"loss_probe_s": 0.012}, "loss_probe_s=0.012: TCP's tail-loss probe, so selective_recovery=1"),
    ],
)
def test_loss_parameters_that_cannot_recover_are_refused_naming_the_value(change, message):
    with pytest.raises(ParamsError, match=message):
        ModelParams(**change)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    mode=st.sampled_from(MODE_NAMES),
    ranks=st.integers(2, 10),
    per_node=st.integers(1, 4),
    victims=st.integers(1, 2),
    messages=st.integers(0, 40),
    recv_slots=st.integers(4, 40),
    entries=st.integers(1, 8),
    eager=st.sampled_from([0, 4096, 3 * 4096]),
    window=st.integers(1, 8),
    ack_interval=st.integers(1, 4),
    drop_percent=st.integers(0, 40),
    ingest=st.sampled_from([0.0, 1e-6]),
    congestion_control=st.sampled_from([0, 1]),
    selective=st.sampled_from([0, 1]),
    tcp=st.sampled_from([0, 1]),
    queue=st.sampled_from([0, 4096 + 64, 3 * (4096 + 64)]),
    seed=st.integers(0, 1000),
)
def test_loss_conserves_every_message_and_every_credit(
    mode,
    ranks,
    per_node,
    victims,
    messages,
    recv_slots,
    entries,
    eager,
    window,
    ack_interval,
    drop_percent,
    ingest,
    congestion_control,
    selective,
    tcp,
    queue,
    seed,
):
    """Random jobs on tiny receive contexts (and tiny drop-tail link queues, or none), with random packets lost
    on top (the first three attempts of each), with and without congestion control, with go-back-N or
    selective recovery: every message arrives exactly once, every flow ends acknowledged, every credit comes
    home (the model's own end check), and what was lost was sent again."""
    load = Workload(
        ranks=ranks,
        ranks_per_node=min(per_node, ranks),
        victims=min(victims, ranks),
        messages_per_rank=messages,
        mode=mode,
        recv_slots=recv_slots,
        seed=seed,
    )
    params = LOSSY.replace(
        send_cpu_s=1e-6,
        recv_cpu_s=3e-6,
        credit_cpu_s=1e-6,
        recv_context_entries=entries,
        recv_context_bytes=eager,
        ingest_cpu_s=ingest,
        copy_Bps=5e9,
        flow_window_packets=window,
        ack_interval_packets=ack_interval,
        congestion_control=congestion_control,
        selective_recovery=selective,
        # with selective recovery, TCP's window too: from Linux's initial window, with tail-loss probes
        reno_window=selective * tcp,
        initial_window_bytes=selective * tcp * 2 * (4096 + 64),
        loss_probe_s=selective * tcp * 5e-4,
        drop_tail=int(queue > 0),
        switch_queue_bytes=queue or LOSSY.switch_queue_bytes,
        header_bytes=64,
        retransmit_timeout_min_s=1e-3,
        retransmit_timeout_max_s=4e-3,
    )
    stream = random.Random(seed)
    lost = {key: stream.randrange(100) < drop_percent for key in range(4096)}

    def drop(source, dest, seq, attempt):
        return attempt <= 3 and lost[hash((source, dest, seq, attempt)) % 4096]

    result = simulate(load, params, check_invariants=True, drop=drop)
    if result.status == "refused":
        return
    assert result.status == "ok"
    assert result.messages == result.payload_bytes // 4096
    if result.dropped_packets:
        assert result.retransmitted_packets > 0
