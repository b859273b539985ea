"""Loss and its recovery between two ranks of different nodes, as PSM2 does it over Omni-Path.

Omni-Path's fabric is lossless (credit-based link-level flow control); what loses packets is the receiving
rank's *receive context*, which holds arrived packets until the rank's own progress takes them out (PSM2 is
a user-space driver: nothing else drains it).  The rules, with where PSM2 (``cornelisnetworks/opa-psm2``)
and the hfi1 driver have them; the Omni-Path parameter file gives the values' sources:

* A receive context holds at most ``recv_context_entries`` packets (hfi1's ``rcvhdrcnt``).  A packet that
  finds them all taken is dropped unseen (user contexts do not set hfi1's ``DONT_DROP_RHQ_FULL``): no NAK.
* Its eager payloads share ``recv_context_bytes`` (``eager_buffer_size``); a packet whose payload does not
  fit keeps its header only, and the receiver NAKs it when it sees it (``ips_proto_process_packet_error``).
* Each ordered pair of ranks is a *flow* with sequence numbers.  The receiver accepts only the next one
  expected; a later one is discarded and NAKed once until the expected one comes (go-back-N,
  ``ips_proto_is_expected_or_nak``); an earlier one is a duplicate, discarded.
* A sender keeps at most ``flow_window_packets`` unacknowledged packets per flow (``PSM2_FLOW_CREDITS``); the
  rest wait.  It asks an ACK of every ``ack_interval_packets``-th packet (``ips_flow_gen_ackflags``); ACKs are
  cumulative.  A NAK puts every unacknowledged packet from the one it names back on the wire.
* Its oldest unacknowledged packet has a timer, ``retransmit_timeout_min_s`` from its (re)transmission.
  When it expires the sender asks the receiver what it has (``OPCODE_ERR_CHK``): the receiver NAKs the first
  packet it misses, or ACKs everything; each expiry multiplies the timeout by ``retransmit_backoff`` up to
  ``retransmit_timeout_max_s`` (``ips_proto_timer_ack_callback``).
* A receiver sends at most one reply per flow per progress pass, the last it decided (``process_pending_acks``).

TCP's recovery, the virtual cluster's (*selective*, :class:`Reliability`'s keyword), differs in three rules:
the receiver keeps a packet that arrives after a gap (SACK) and hands it on once the gap is filled, in
order; it answers every packet after a gap with a duplicate ACK whose SACK blocks say what it holds, and the
sender sends again every packet it has not taken that was sent before one it holds (RACK's rule, RFC 8985:
on one path, a packet overtaken is lost), a lost retransmission included, not everything after the gap; and
when the oldest packet's timer
expires (``RTO``: the kernel's ``RtoMin`` doubling to ``RtoMax``), the sender itself sends again every
unacknowledged packet the receiver does not hold, with no ERR_CHK round trip.  Where TCP loses packets is
the receiving node's link queue (:mod:`.network`'s drop-tail), not the receiver; a packet its sender's own
full queue refuses is not lost but held back (:meth:`Reliability.held_back`): it waits for the next ACK, or,
with nothing in flight to bring one, for the probe timer (Linux arms it at the RTO).  With *reno*, a flow's
window is TCP's congestion window (RFC 5681): it starts at ``flow_window_packets`` (the slow-start
threshold too) and never passes it, grows by a packet per packet acknowledged below the threshold and by
one per window above it, halves when the receiver names a loss (once per window of packets, RFC 6582's
recovery point), and falls to one packet on a timeout, with the threshold at half the window; with
*initial_window*, it starts there instead (Linux's ten segments, RFC 6928) and slow-starts up to the threshold.
With *loss_probe* (Linux's tail-loss probe with RACK, RFC 8985), a flow with packets out and no loss being
recovered sends a probe *loss_probe* after its latest transmission or ACK: its SACK tells the sender which
packets sent before it never arrived, and those are sent again in fast recovery (the window halves, as for a
named loss) instead of waiting for the RTO.  One probe per episode, until an ACK moves the flow on.  The
model resends at the probe's time what the probe's SACK would name, a round trip early (microseconds on a
LAN, against the probe's milliseconds).

PSM2's congestion control (``IPS_PROTO_FLAG_CCA``) is active only where the driver gives it settings, so it
is a parameter (``congestion_control``): on a NAK it shrinks the flow's window to one packet, holds the
flow for a random half to all of the timeout, and doubles the window on each ACK after; its cut of the
path's injection rate is not modelled.  ACKs, NAKs and ERR_CHKs are not lost and cost no CPU.

This module is the protocol's state only, as plain objects (no SimPy, no network): :mod:`.model` moves its
packets and calls the timers.
"""

from __future__ import annotations

import math
import random
from collections import deque

ACCEPT, DUPLICATE, OUT_OF_ORDER, HELD = range(4)  # what a receiver does with a packet (HELD: selective only)
NO_REPLY, ACK, NAK = range(3)  # what it answers


class Packet:
    """One MPI message between ranks of different nodes: what the model delivers, and its flow's number."""

    __slots__ = ("item", "nbytes", "seq", "ack_request", "attempts", "sent_at")

    def __init__(self, item: tuple[int, int, int, int, int], nbytes: int) -> None:
        self.item = item  # (kind, source, tag, nbytes, sender's slot): what the receiver's inbox takes
        self.nbytes = nbytes  # eager bytes it occupies in a receive context
        self.seq = -1
        self.ack_request = False
        self.attempts = 0  # times it left its window: after the first, its send is complete
        self.sent_at = 0.0  # its latest transmission


class SendFlow:
    """A sender's side of one flow: the window, what waits for it, the retransmission timer."""

    __slots__ = (
        "next_seq",
        "unacked",
        "waiting",
        "cwin",
        "paused_until",
        "timeout",
        "deadline",
        "timer_at",
        "threshold",
        "recover",
        "probe_at",
        "probed",
    )

    def __init__(self, window: int, timeout: float, initial_window: float = 0.0) -> None:
        self.next_seq = 0
        self.unacked: deque[Packet] = deque()  # sent, not acknowledged, oldest first
        self.waiting: deque[Packet] = deque()  # numbered, waiting for the window (or sent, and going again)
        self.cwin: float = initial_window or window  # how many may be unacknowledged now
        self.paused_until = 0.0  # congestion control holds the flow's packets until then
        self.timeout = timeout  # the oldest unacknowledged packet's
        self.deadline = 0.0  # when its timer expires
        self.timer_at: float | None = None  # when the model's pending timer event for this flow fires
        self.threshold: float = window  # Reno's slow-start threshold
        self.recover = 0  # a loss named below this sequence number belongs to the recovery under way
        self.probe_at = math.inf  # when its tail-loss probe is due (inf: none armed)
        self.probed = False  # a probe went, and no ACK has moved the flow on since


class ReceiveFlow:
    __slots__ = ("expected", "nak_sent", "held", "ready")

    def __init__(self) -> None:
        self.expected = 0  # the next sequence number it accepts
        self.nak_sent = False  # go-back-N: a NAK for `expected` is out, later packets are discarded without another
        self.held: dict[int, Packet] = {}  # selective recovery: arrived after a gap, kept until it fills
        self.ready: list[Packet] = []  # held packets the last accepted one put in order (take_ready)


class Reliability:
    """The flow rules above over every flow of a job, with the counts a run reports.  *congestion_control*
    (with *rng* for its random delays) turns on PSM2's reaction to a NAK, see :meth:`nak`."""

    def __init__(
        self,
        window: int,
        ack_interval: int,
        timeout_min: float,
        timeout_max: float,
        backoff: float,
        *,
        congestion_control: bool = False,
        selective: bool = False,
        reno: bool = False,
        initial_window: float = 0.0,
        loss_probe: float = 0.0,
        rng: random.Random | None = None,
    ) -> None:
        self.window, self.ack_interval, self.selective, self.reno = window, ack_interval, selective, reno
        self.initial_window, self.loss_probe = initial_window, loss_probe
        self.timeout_min, self.timeout_max, self.backoff = timeout_min, timeout_max, backoff
        self.congestion_control, self.rng = congestion_control, rng or random.Random(0)
        self.send_flows: dict[tuple[int, int], SendFlow] = {}
        self.receive_flows: dict[tuple[int, int], ReceiveFlow] = {}
        self.numbered = 0  # packets submitted (each sent once, and again when lost)
        self.retransmitted = 0  # packets sent again
        self.timeouts = 0  # timer expiries (each sends an ERR_CHK)
        self.loss_probes = 0  # tail-loss probes sent
        self.naks = 0
        self.discarded = 0  # packets that reached a receiver's progress and were thrown away (out of order, dup)

    def send_flow(self, source: int, dest: int) -> SendFlow:
        flow = self.send_flows.get((source, dest))
        if flow is None:
            flow = self.send_flows[(source, dest)] = SendFlow(self.window, self.timeout_min, self.initial_window)
        return flow

    def receive_flow(self, source: int, dest: int) -> ReceiveFlow:
        flow = self.receive_flows.get((source, dest))
        if flow is None:
            flow = self.receive_flows[(source, dest)] = ReceiveFlow()
        return flow

    # -- the sender --------------------------------------------------------------------------------

    def _ack_every(self, flow: SendFlow) -> int:
        """Every how many packets an ACK is asked: PSM2 derives it from the window (a quarter of it, at
        least every 2nd packet once congestion control shrank it); TCP's receiver decides alone."""
        if self.reno or flow.cwin >= self.window:
            return self.ack_interval
        return max(self.ack_interval * flow.cwin // self.window, 2)

    def submit(self, flow: SendFlow, packet: Packet, now: float) -> list[Packet]:
        """*packet* numbered on *flow*: what goes out now (it, if the window has room)."""
        packet.seq = flow.next_seq
        self.numbered += 1
        every = self._ack_every(flow)
        packet.ack_request = packet.seq % every == every - 1
        flow.next_seq += 1
        flow.waiting.append(packet)
        return self._open_window(flow, now)

    def _open_window(self, flow: SendFlow, now: float) -> list[Packet]:
        """What leaves now: waiting packets, oldest first, while the window has room and the flow is not held."""
        out: list[Packet] = []
        if now < flow.paused_until:
            return out
        while flow.waiting and len(flow.unacked) < flow.cwin:
            packet = flow.waiting.popleft()
            if not flow.unacked:
                flow.timeout, flow.deadline = self.timeout_min, now + self.timeout_min
            packet.sent_at = now
            packet.attempts += 1
            if packet.attempts > 1:
                self.retransmitted += 1
            flow.unacked.append(packet)
            out.append(packet)
        if out:
            self._arm_probe(flow, now)
        return out

    def _arm_probe(self, flow: SendFlow, now: float) -> None:
        """The tail-loss probe, due *loss_probe* from *now*: only with packets out, none probed for yet, and no
        loss being recovered (Linux probes in its Open state only)."""
        recovering = flow.unacked and flow.unacked[0].seq < flow.recover
        armed = self.loss_probe and flow.unacked and not flow.probed and not recovering
        flow.probe_at = now + self.loss_probe if armed else math.inf

    def next_timer(self, flow: SendFlow) -> float:
        """When the flow's next timer is due: its tail-loss probe or its oldest packet's retransmission timeout."""
        return min(flow.deadline, flow.probe_at)

    def acknowledged(self, flow: SendFlow, seq: int, now: float) -> list[Packet]:
        """An ACK of every packet up to *seq*: what the freed window lets out (congestion control doubles a
        shrunk window on each ACK)."""
        acknowledged = self._drop_acknowledged(flow, seq)
        if acknowledged:
            flow.probed = False
            self._arm_probe(flow, now)
        if self.reno:
            for _ in range(acknowledged):
                flow.cwin += 1 if flow.cwin < flow.threshold else 1 / flow.cwin
            flow.cwin = min(flow.cwin, self.window)
        elif acknowledged and flow.cwin < self.window:
            flow.cwin = min(2 * flow.cwin, self.window)
        return self._open_window(flow, now)

    def _drop_acknowledged(self, flow: SendFlow, seq: int) -> int:
        """The packets up to *seq* acknowledged: how many were not before."""
        if not flow.unacked or flow.unacked[0].seq > seq:
            return 0
        count = 0
        while flow.unacked and flow.unacked[0].seq <= seq:
            flow.unacked.popleft()
            count += 1
        if flow.unacked:  # the new oldest packet's timer runs from its own transmission
            flow.timeout = self.timeout_min
            flow.deadline = flow.unacked[0].sent_at + self.timeout_min
        return count

    def nak(
        self, flow: SendFlow, seq: int, now: float, receiver: ReceiveFlow | None = None
    ) -> tuple[float, list[Packet]]:
        """A NAK of *seq* (everything before it arrived): every unacknowledged packet goes back to the head of
        the queue, and the window lets out what it can: (delay, packets).  Selectively, a duplicate ACK: the
        packets *receiver*'s SACK blocks show lost go again.  With congestion control, PSM2
        shrinks the window to one packet and holds the flow for a random half to all of the timeout
        (``ips_proto_process_nak``): the delay after which the model calls :meth:`resume`; else at once."""
        self._drop_acknowledged(flow, seq - 1)
        if self.selective:  # what the SACK shows lost goes again, ahead of what the freed window lets out
            assert receiver is not None, "selective recovery reads the receiver's SACK blocks"
            # RACK orders transmissions by time, and packets sent together by sequence
            newest_held = max(((packet.sent_at, packet.seq) for packet in receiver.held.values()), default=None)
            again = self._not_taken(flow, receiver, before=newest_held) if newest_held else []
            if again:
                self._recover(flow, again[0].seq)
            for packet in again:
                self._resend(flow, packet, now)
            return 0.0, again + self._open_window(flow, now)
        flow.waiting.extendleft(reversed(flow.unacked))
        flow.unacked.clear()
        if not self.congestion_control:
            return 0.0, self._open_window(flow, now)
        flow.cwin = 1
        delay = self.rng.uniform(flow.timeout / 2, flow.timeout)
        flow.paused_until = now + delay
        return delay, []

    @staticmethod
    def _not_taken(flow: SendFlow, receiver: ReceiveFlow, before: tuple[float, float]) -> list[Packet]:
        """The unacknowledged packets last sent before *before* (a time, and a sequence number among packets
        sent then) that *receiver* has neither accepted nor holds."""
        return [
            packet
            for packet in flow.unacked
            if (packet.sent_at, packet.seq) < before
            and packet.seq >= receiver.expected
            and packet.seq not in receiver.held
        ]

    def _recover(self, flow: SendFlow, seq: int) -> None:
        """A loss of *seq* learnt from the receiver: a new one starts a recovery (Reno's window halves once for
        the window's losses), and no tail-loss probe goes until it is over."""
        if seq >= flow.recover:
            if self.reno:
                flow.threshold = flow.cwin = max(flow.cwin / 2, 1.0)
            flow.recover = flow.next_seq
        flow.probe_at = math.inf

    def held_back(self, flow: SendFlow, packets: list[Packet]) -> None:
        """The sender's own link queue had no room for *packets* (oldest first): none left.  One sent before
        stays unacknowledged, for its timer to send again; the others go back to the head of the queue (not
        lost, nor sent again when they go) and leave when the window next opens: on an ACK, or :meth:`resume`
        when nothing of the flow is in flight to bring one."""
        for packet in reversed(packets):
            packet.attempts -= 1
            if packet.attempts:
                self.retransmitted -= 1
                continue
            flow.unacked.remove(packet)
            flow.waiting.appendleft(packet)

    def _resend(self, flow: SendFlow, packet: Packet, now: float) -> None:
        packet.sent_at = now
        packet.attempts += 1
        self.retransmitted += 1
        if packet is flow.unacked[0]:  # a retransmission restarts the timer (RFC 6298, 5.3)
            flow.deadline = now + flow.timeout

    def timed_out(self, flow: SendFlow, receiver: ReceiveFlow, now: float) -> list[Packet]:
        """Selective recovery after :meth:`expired`: TCP sends again every unacknowledged packet the receiver
        does not hold (what its SACK blocks told the sender), oldest first."""
        again = [packet for packet in flow.unacked if packet.seq not in receiver.held]
        if self.reno:  # the window falls to one packet; those sent again go regardless, as TCP's RTO resends
            flow.threshold, flow.cwin = max(flow.cwin / 2, 2.0), 1.0
        flow.recover = flow.next_seq
        flow.probe_at = math.inf
        for packet in again:
            self._resend(flow, packet, now)
        flow.deadline = now + flow.timeout
        return again

    def probe_due(self, flow: SendFlow, now: float) -> bool:
        """Whether the flow's tail-loss probe is due at *now*."""
        return bool(flow.unacked) and now >= flow.probe_at

    def probe(self, flow: SendFlow, receiver: ReceiveFlow, now: float) -> list[Packet]:
        """The tail-loss probe at :meth:`probe_due`: what the receiver has not taken (neither accepted nor
        holds) is sent again, as fast recovery does with what RACK marks lost after the probe's SACK.  The
        retransmission timeout then runs from now (Linux re-arms it after a probe)."""
        self.loss_probes += 1
        flow.probed = True
        flow.probe_at = math.inf
        lost = self._not_taken(flow, receiver, before=(now, math.inf))
        if lost:
            self._recover(flow, lost[0].seq)
        for packet in lost:
            self._resend(flow, packet, now)
        flow.deadline = now + flow.timeout
        return lost

    def resume(self, flow: SendFlow, now: float) -> list[Packet]:
        """The end of a congestion-control hold: what goes out."""
        return self._open_window(flow, now)

    def expired(self, flow: SendFlow, now: float) -> bool:
        """The flow's timer at *now*: True if it expired (the model sends an ERR_CHK naming the newest
        unacknowledged packet); the next deadline is set either way."""
        if not flow.unacked or now < flow.deadline:
            return False
        self.timeouts += 1
        flow.timeout = min(flow.timeout * self.backoff, self.timeout_max)
        flow.deadline = now + flow.timeout
        return True

    def answered(
        self, flow: SendFlow, reply: int, seq: int, now: float, receiver: ReceiveFlow | None = None
    ) -> tuple[float, list[Packet]]:
        """The sender gets an ACK or NAK of *seq* (from *receiver*, whose SACK blocks selective recovery reads):
        (delay, what goes out after it: again, or newly through the window)."""
        if reply == NAK:
            return self.nak(flow, seq, now, receiver)
        return 0.0, self.acknowledged(flow, seq, now)

    # -- the receiver ------------------------------------------------------------------------------

    def receive(self, flow: ReceiveFlow, packet: Packet, payload_kept: bool) -> tuple[int, int, int]:
        """The receiver's progress takes *packet* out of its context: (verdict, reply, the sequence number the
        reply names).  A packet whose payload was dropped for want of eager bytes is NAKed like a gap (PSM2's TID
        error); with selective recovery (TCP) it is gone unanswered, as Linux drops a segment its receive buffer
        cannot take (``tcp_data_queue``: ``TCPRcvQDrop``, no ACK), and recovered as any loss is."""
        if self.selective and not payload_kept:
            self.discarded += 1
            return OUT_OF_ORDER, NO_REPLY, 0
        if packet.seq < flow.expected or packet.seq in flow.held:
            self.discarded += 1
            if self.selective:  # TCP answers a duplicate at once (RFC 5681, 4.2), SACKing what it holds
                return self._sack(flow, DUPLICATE) if flow.held else (DUPLICATE, ACK, flow.expected - 1)
            return (DUPLICATE, ACK, flow.expected - 1) if packet.ack_request else (DUPLICATE, NO_REPLY, 0)
        if self.selective:
            return self._receive_selectively(flow, packet)
        if packet.seq > flow.expected or not payload_kept:
            self.discarded += 1
            return self._name_gap(flow, OUT_OF_ORDER)
        flow.expected += 1
        flow.nak_sent = False
        return (ACCEPT, ACK, packet.seq) if packet.ack_request else (ACCEPT, NO_REPLY, 0)

    def _receive_selectively(self, flow: ReceiveFlow, packet: Packet) -> tuple[int, int, int]:
        if packet.seq > flow.expected:  # kept, and answered
            flow.held[packet.seq] = packet
            return self._sack(flow, HELD)
        flow.expected += 1
        filled = bool(flow.held)
        while flow.expected in flow.held:
            flow.ready.append(flow.held.pop(flow.expected))
            flow.expected += 1
        if flow.held:  # another gap behind the one filled
            return self._sack(flow, ACCEPT)
        if filled or packet.ack_request:  # a filled gap is acknowledged at once
            return ACCEPT, ACK, flow.expected - 1
        return ACCEPT, NO_REPLY, 0

    def _sack(self, flow: ReceiveFlow, verdict: int) -> tuple[int, int, int]:
        """TCP's answer to a packet while a gap is open: a duplicate ACK naming the gap, its SACK blocks saying
        what is held (the sender reads them from *flow*)."""
        self.naks += 1
        return verdict, NAK, flow.expected

    def _name_gap(self, flow: ReceiveFlow, verdict: int) -> tuple[int, int, int]:
        """A packet after the gap at ``flow.expected``: a NAK of it, unless one is out already."""
        if flow.nak_sent:
            return verdict, NO_REPLY, 0
        flow.nak_sent = True
        self.naks += 1
        return verdict, NAK, flow.expected

    def take_ready(self, flow: ReceiveFlow) -> list[Packet]:
        """The held packets the last accepted one put in order: the receiver hands them on after it."""
        ready, flow.ready = flow.ready, []
        return ready

    def error_check(self, flow: ReceiveFlow, newest: int) -> tuple[int, int]:
        """An ERR_CHK naming the sender's newest unacknowledged packet: NAK the first one missing (whatever
        NAK is already out), or ACK everything."""
        if flow.expected <= newest:
            flow.nak_sent = True
            self.naks += 1
            return NAK, flow.expected
        return ACK, flow.expected - 1

    def check_at_rest(self) -> None:
        """Every packet every flow numbered was accepted once and acknowledged (AssertionError otherwise)."""
        for (source, dest), flow in self.send_flows.items():
            received = self.receive_flows.get((source, dest))
            accepted = received.expected if received is not None else 0
            held = len(received.held) if received is not None else 0
            if flow.unacked or flow.waiting or accepted != flow.next_seq or held:
                raise AssertionError(
                    f"flow {source}->{dest}: numbered {flow.next_seq}, accepted {accepted}, "
                    f"{len(flow.unacked)} unacknowledged, {len(flow.waiting)} waiting, {held} held"
                )
