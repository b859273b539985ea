"""Property test: a simulated cluster of Endpoints under random interleavings of events.

N ranks (2..6) run the sans-I/O :class:`~mailrail.protocol.Endpoint` with rank- or
node-based credits, accounted either by the reference classes of :mod:`mailrail.flow`
(the Python transport's) or by the compiled ``CreditLedger`` (the compiled transport's).  An
in-memory network keeps one FIFO list of payloads and one of credit messages per (source,
destination) pair, like MPI's non-overtaking rule; a send completes only once its payload was
delivered (rendezvous), and the sender reclaims its sends as a transport does, testing the oldest
in flight (with head patience).  Each send's MPI call is checked against the requests a transport
would hold: a persistent send is only restarted for its own destination and size, and never
created over one that still exists.
Hypothesis picks the interleaving: application sends, payload deliveries, send reclaims,
application releases (in any order), credit deliveries and drains.  After every step the credit
and slot invariants are checked; at the end everything is drained and every message must have
been delivered exactly once.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from mailrail.counters import COUNTERS
from mailrail.flow import NodeCredits, RankCredits, credit_budget
from mailrail.flow.node import LocalCounters
from mailrail.pool import SlotPool
from mailrail.protocol import CREATE, IN_FLIGHT, ISEND_NEW, ISEND_TAGGED, NO_SLOT, REPLACE, START, Endpoint
from mailrail.transport import compiled

#: Who accounts the credits: the reference classes, or the compiled ledger.
LEDGERS = ("python", "compiled")

SLOT_SIZE = 16  # a payload is its 8-byte sequence number, in 8 or 16 bytes (two streams per destination)
SIZES = (8, 16)


@dataclass(frozen=True)
class Setup:
    ranks: int
    mode: str  # "rank" or "node"
    ranks_per_node: int
    recv_slots: int
    credit_threshold: int
    piggyback: bool
    send_slots: int
    head_patience: int = 64
    tag_ub: int = 32767  # small ones split credit returns and cap piggybacked credits

    @property
    def nodes(self) -> int:
        return -(-self.ranks // self.ranks_per_node)

    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node


class Cluster:
    def __init__(self, setup: Setup, ledger: str = "python") -> None:
        self.setup = setup
        n = self.n = setup.ranks
        senders = n if setup.mode == "rank" else setup.nodes
        budget = credit_budget(
            setup.mode, recv_slots=setup.recv_slots, ranks=n, nodes=setup.nodes, credit_threshold=setup.credit_threshold
        )
        self.per_pair = budget.credits_per_pair
        assert self.per_pair * senders <= setup.recv_slots
        if ledger == "compiled":  # node pools as the compiled ledger sees them: int64 counters in memory
            self.node_pools = [np.full(n, self.per_pair, dtype=np.int64) for _ in range(setup.nodes)]
        else:
            self.node_pools = [LocalCounters(n, self.per_pair) for _ in range(setup.nodes)]
        self.eps: list[Endpoint] = []
        for rank in range(n):
            if setup.mode == "rank" and ledger == "compiled":
                flow = compiled.credit_ledger(
                    "rank",
                    n,
                    budget.credits_per_pair,
                    budget.return_threshold,
                    piggyback=setup.piggyback,
                    max_tag=setup.tag_ub,
                )
            elif setup.mode == "rank":
                flow = RankCredits(
                    n, budget.credits_per_pair, budget.return_threshold, piggyback=setup.piggyback, max_tag=setup.tag_ub
                )
            elif ledger == "compiled":
                pool = self.node_pools[setup.node_of(rank)]
                flow = compiled.credit_ledger(
                    "node",
                    n,
                    budget.credits_per_pair,
                    budget.return_threshold,
                    nodes=setup.nodes,
                    ranks_per_node=setup.ranks_per_node,
                    pool=pool.ctypes.data,
                    owner=pool,
                )
            else:
                flow = NodeCredits(
                    setup.nodes,
                    setup.node_of,
                    self.node_pools[setup.node_of(rank)],
                    budget.credits_per_pair,
                    budget.return_threshold,
                )
            self.eps.append(
                Endpoint(
                    rank,
                    n,
                    SlotPool(setup.send_slots, SLOT_SIZE),
                    flow,
                    tag_ub=setup.tag_ub,
                    head_patience=setup.head_patience,
                    credit_poll_interval=8,
                    idle_spins=4,
                )
            )
        pairs = [(s, d) for s in range(n) for d in range(n)]
        self.payloads: dict[tuple[int, int], deque] = {p: deque() for p in pairs}  # (seq, tag, slot, nbytes)
        self.credit_msgs: dict[tuple[int, int], deque] = {p: deque() for p in pairs}  # count
        self.held: list[list] = [[] for _ in range(n)]  # per receiver: (message, seq)
        self.free_recv_slots = [list(range(setup.recv_slots - 1, -1, -1)) for _ in range(n)]
        # Per sender: slots whose payload was delivered (their send is complete) but not yet reclaimed.
        self.completed: list[set[int]] = [set() for _ in range(n)]
        # Per sender and slot: the (dest, nbytes) of the persistent send request a transport would hold.
        self.requests: list[list[tuple[int, int] | None]] = [[None] * setup.send_slots for _ in range(n)]
        self.actions: Counter = Counter()
        self.next_seq = [0] * n
        self.submitted: dict[tuple[int, int], list[int]] = {p: [] for p in pairs}
        self.transmitted: dict[tuple[int, int], list[int]] = {p: [] for p in pairs}
        self.delivered_order: dict[tuple[int, int], list[int]] = {p: [] for p in pairs}
        self.delivered: Counter = Counter()
        self.arrived = Counter()  # (src, dst) -> payloads arrived at dst from src
        self.returned = Counter()  # (receiver, sender) -> credits the receiver sent back (messages + tags)
        # Sending units: each rank (rank mode) or each node (node mode), as lists of ranks.
        if setup.mode == "rank":
            self.units = [[r] for r in range(n)]
        else:
            self.units = [[r for r in range(n) if setup.node_of(r) == node] for node in range(setup.nodes)]

    # -- events ---------------------------------------------------------------------

    def app_send(self, src: int, dst: int, nbytes: int = 8) -> None:
        ep = self.eps[src]
        slot = ep.reserve()
        if slot == NO_SLOT:
            return  # send pool exhausted: the application would retry later
        seq = self.next_seq[src]
        self.next_seq[src] += 1
        buf = ep.send_pool.views[slot]
        buf[:8] = memoryview(seq.to_bytes(8, "little"))
        self.submitted[src, dst].append(seq)
        dest, size, sent, tag, action = ep.submit(dst, buf, nbytes)
        assert (dest, size) == (dst, nbytes)
        if sent != NO_SLOT:
            assert sent == slot
            self._transmit(src, dst, nbytes, slot, tag, action)
        else:
            assert (tag, action) == (0, 0)

    def _transmit(self, src: int, dst: int, nbytes: int, slot: int, tag: int, action: int) -> None:
        """What a transport does with a send the Endpoint lets leave: the MPI call *action* for *slot*."""
        ep = self.eps[src]
        assert ep.send_state[slot] == IN_FLIGHT
        seq = int.from_bytes(bytes(ep.send_pool.views[slot][:8]), "little")
        sent = self.transmitted[src, dst]
        sent.append(seq)
        assert sent == self.submitted[src, dst][: len(sent)], (
            f"FIFO broken at transmission {src}->{dst}: sent {sent}, submitted {self.submitted[src, dst]}"
        )
        assert 0 <= tag <= self.setup.tag_ub
        assert (tag != 0) == (action == ISEND_TAGGED), (tag, action)
        requests, stream = self.requests[src], (dst, nbytes)
        if action == START:
            assert requests[slot] == stream, (
                f"slot {slot} restarts the persistent send of {requests[slot]} for {stream}"
            )
        elif action == CREATE:
            assert requests[slot] is None, f"slot {slot} creates a persistent send over {requests[slot]}'s"
            requests[slot] = stream
        elif action == REPLACE:
            assert requests[slot] not in (None, stream), f"slot {slot} replaces {requests[slot]} with {stream}"
            requests[slot] = None
        elif action == ISEND_NEW:
            assert requests[slot] is None, f"slot {slot} forgets its persistent send of {requests[slot]}"
        assert ep.has_persistent(slot) == (requests[slot] is not None)
        self.actions[action] += 1
        self.returned[src, dst] += tag
        self.payloads[src, dst].append((seq, tag, slot, nbytes))

    def drain(self, rank: int) -> bool:
        batch = list(self.eps[rank].drain_ready())
        assert len({dest for dest, _, _, _, _ in batch}) == len(batch), "drain sent two to one destination"
        for dest, nbytes, slot, tag, action in batch:
            self._transmit(rank, dest, nbytes, slot, tag, action)
        return bool(batch)

    def reclaim(self, rank: int) -> bool:
        """One test of the oldest send in flight, as a transport's reclaim loop makes it."""
        ep = self.eps[rank]
        slot = ep.oldest_in_flight()
        if slot == NO_SLOT:
            assert not self.completed[rank]
            return False
        assert ep.send_state[slot] == IN_FLIGHT
        if slot in self.completed[rank]:
            self.completed[rank].remove(slot)
            ep.oldest_completed()
            return True
        ep.oldest_still_in_flight()
        return False

    def deliver_payload(self, src: int, dst: int) -> None:
        seq, tag, slot, nbytes = self.payloads[src, dst].popleft()
        free = self.free_recv_slots[dst]
        assert free, f"rank {dst} overran its receive slots"
        recv_slot = free.pop()
        data = np.frombuffer(seq.to_bytes(8, "little") + bytes(nbytes - 8), np.uint8)
        message = self.eps[dst].arrived(src, tag, nbytes, recv_slot, data)  # ProtocolError on a send without credit
        assert (message.source, message.nbytes) == (src, nbytes) and message.data is data
        assert self.eps[dst].holds(message)
        assert slot not in self.completed[src]
        self.completed[src].add(slot)  # rendezvous: the send completes once matched
        self.arrived[src, dst] += 1
        self.delivered[src, dst, seq] += 1
        order = self.delivered_order[src, dst]
        order.append(seq)
        assert order == self.submitted[src, dst][: len(order)], f"FIFO broken on delivery {src}->{dst}"
        self.held[dst].append((message, recv_slot))

    def release(self, rank: int, index: int) -> None:
        message, recv_slot = self.held[rank].pop(index)
        ep = self.eps[rank]
        slot, credits = ep.release(message)
        assert slot == recv_slot and not ep.holds(message)
        self.free_recv_slots[rank].append(slot)
        if credits:
            assert 1 <= credits <= self.per_pair, f"rank {rank} returns {credits} credits to {message.source}"
            self.returned[rank, message.source] += credits
            while credits:  # in pieces of at most tag_ub (the count is the credit message's tag)
                part = ep.credit_part(credits)
                assert 1 <= part <= self.setup.tag_ub
                self.credit_msgs[rank, message.source].append(part)
                credits -= part

    def deliver_credit(self, src: int, dst: int) -> None:
        count = self.credit_msgs[src, dst].popleft()
        self.eps[dst].credits_arrived(src, count)

    # -- invariants -----------------------------------------------------------------

    def pool_values(self, node: int) -> list[int]:
        pool = self.node_pools[node]
        return pool.tolist() if isinstance(pool, np.ndarray) else list(pool.values)

    def sender_credits(self, unit: int, ranks: list[int], dst: int) -> int:
        if self.setup.mode == "rank":
            return self.eps[ranks[0]].flow.send_credits[dst]
        return self.pool_values(unit)[dst]

    def check_invariants(self) -> None:
        n = self.n
        for ep in self.eps:
            flow = ep.flow
            assert min(flow.owed) >= 0, f"rank {ep.rank}: negative owed credits {list(flow.owed)}"
            assert min(flow.unreturned) >= 0, f"rank {ep.rank}: negative unreturned {list(flow.unreturned)}"
            if self.setup.mode == "rank":
                assert min(flow.send_credits) >= 0, f"rank {ep.rank}: negative credits {list(flow.send_credits)}"
            # Every send slot is free, deferred or in flight (the simulated application sends what it
            # reserves at once), and the ring holds exactly the sends not yet reclaimed.
            on_the_wire = sum(len(self.payloads[ep.rank, d]) for d in range(n))
            assert ep.in_flight == on_the_wire + len(self.completed[ep.rank])
            assert ep.reserved == 0
            assert ep.free_slots + ep.deferred_total + ep.in_flight == self.setup.send_slots, "a send slot leaked"
            assert ep.pending_sends() == ep.deferred_total + ep.in_flight
            assert ep.held == len(self.held[ep.rank])
        for node in range(len(self.node_pools)):
            values = self.pool_values(node)
            assert min(values) >= 0, f"node {node}: negative shared credits {values}"
        for dst in range(n):
            granted = 0
            for unit, ranks in enumerate(self.units):
                credits = self.sender_credits(unit, ranks, dst)
                in_flight = sum(len(self.payloads[s, dst]) for s in ranks)
                # Arrived at dst but not yet given back (by credit message or tag).
                unreturned = sum(self.arrived[s, dst] - self.returned[dst, s] for s in ranks)
                returning = sum(
                    sum(self.credit_msgs[dst, s]) + sum(t for _, t, _, _ in self.payloads[dst, s]) for s in ranks
                )
                assert unreturned == self.eps[dst].flow.unreturned[unit], (
                    f"rank {dst} counts {self.eps[dst].flow.unreturned[unit]} unreturned from {ranks}, "
                    f"the network says {unreturned}"
                )
                assert unreturned <= self.per_pair, (
                    f"{unreturned} unreturned messages at {dst} from sender unit {ranks} > {self.per_pair}"
                )
                assert in_flight <= self.per_pair, f"{in_flight} in flight from {ranks} to {dst} without credit"
                total = credits + in_flight + unreturned + returning
                assert total == self.per_pair, (
                    f"credits for receiver {dst} from {ranks} not conserved: {total} != {self.per_pair}"
                )
                granted += total
            assert granted <= self.setup.recv_slots, f"{granted} credits granted for rank {dst}'s receive slots"

    # -- end ------------------------------------------------------------------------

    def quiesce(self) -> None:
        for _ in range(10_000):
            progress = False
            for rank in range(self.n):
                progress |= self.drain(rank)
            for pair, queue in self.payloads.items():
                while queue:
                    self.deliver_payload(*pair)
                    progress = True
            for rank in range(self.n):
                while self.eps[rank].in_flight:  # every send is complete now: head patience rotates past none
                    assert self.reclaim(rank), f"rank {rank} could not reclaim a completed send"
                    progress = True
            for rank in range(self.n):
                while self.held[rank]:
                    self.release(rank, 0)
                    progress = True
            for pair, queue in self.credit_msgs.items():
                while queue:
                    self.deliver_credit(*pair)
                    progress = True
            self.check_invariants()
            if not progress:
                return
        raise AssertionError("the cluster did not quiesce")


# Event kinds, weighted by repetition.  An event is drawn as one integer (much
# faster for Hypothesis than a tuple of draws) and decoded into (kind, a, b).
KINDS = ("send", "send", "send", "deliver", "deliver", "reclaim", "reclaim", "release", "release", "credit", "drain")
EVENTS = st.integers(0, len(KINDS) * 256 * 256 - 1)


def decode(event: int) -> tuple[str, int, int]:
    kind, rest = KINDS[event % len(KINDS)], event // len(KINDS)
    return kind, rest % 256, rest // 256


@st.composite
def setups(draw) -> Setup:
    ranks = draw(st.integers(2, 6))
    mode = draw(st.sampled_from(["rank", "node"]))
    ranks_per_node = draw(st.integers(1, ranks)) if mode == "node" else 1
    senders = ranks if mode == "rank" else -(-ranks // ranks_per_node)
    window = draw(st.integers(1, 5))  # credits per pair; small windows make sends wait
    return Setup(
        ranks=ranks,
        mode=mode,
        ranks_per_node=ranks_per_node,
        recv_slots=senders * window + draw(st.integers(0, senders - 1)),
        credit_threshold=draw(st.integers(1, 3)),
        piggyback=draw(st.booleans()),
        send_slots=draw(st.integers(1, 8)),
        head_patience=draw(st.integers(1, 4)),
        tag_ub=draw(st.sampled_from([1, 2, 3, 32767])),
    )


def step(cluster: Cluster, kind: str, a: int, b: int) -> None:
    n = cluster.n
    if kind == "send":
        # Half the sends go to rank 0: incast, the case credits exist for.
        cluster.app_send(a % n, b % n if b < 128 else 0, SIZES[a // 128])
    elif kind == "deliver":
        busy = [pair for pair, q in cluster.payloads.items() if q]
        if busy:
            cluster.deliver_payload(*busy[a % len(busy)])
    elif kind == "reclaim":
        cluster.reclaim(a % n)
    elif kind == "release":
        holders = [r for r in range(n) if cluster.held[r]]
        if holders:
            rank = holders[a % len(holders)]
            cluster.release(rank, b % len(cluster.held[rank]))
    elif kind == "credit":
        busy = [pair for pair, q in cluster.credit_msgs.items() if q]
        if busy:
            cluster.deliver_credit(*busy[a % len(busy)])
    else:
        cluster.drain(a % n)


@pytest.mark.parametrize("ledger", LEDGERS)
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups(), events=st.lists(EVENTS, min_size=60, max_size=250))
def test_random_interleavings_keep_credit_invariants_and_deliver_everything_once(ledger, setup, events):
    events = [decode(event) for event in events]
    note(f"decoded events: {events}")
    cluster = Cluster(setup, ledger)
    cluster.check_invariants()
    for kind, a, b in events:
        step(cluster, kind, a, b)
        cluster.check_invariants()

    cluster.quiesce()

    stuck = {
        ep.rank: {d: (ep.deferred.queued_for(d), ep.flow.available(d)) for d in ep.deferred.destinations()}
        for ep in cluster.eps
        if ep.deferred_total
    }
    assert not stuck, f"deferred sends stuck after quiescence, rank: {{dest: (queued, credits)}}: {stuck}"
    sent = Counter((s, d, seq) for (s, d), seqs in cluster.submitted.items() for seq in seqs)
    assert cluster.delivered == sent, "a message was lost or duplicated"
    assert all(count == 1 for count in cluster.delivered.values())
    for pair in cluster.submitted:
        assert cluster.delivered_order[pair] == cluster.submitted[pair], f"FIFO broken for {pair}"
    for ep in cluster.eps:
        counters = ep.counters()
        assert list(counters) == list(COUNTERS)
        assert ep.deferred_total == 0 == counters["deferred_now"]
        assert ep.free_slots == setup.send_slots and ep.in_flight == 0, "a send slot leaked"
        assert ep.pending_sends() == 0
        assert (
            ep.messages_sent
            == counters["messages_sent"]
            == sum(len(seqs) for (s, _), seqs in cluster.submitted.items() if s == ep.rank)
        )
        assert ep.messages_received == counters["messages_received"] == counters["messages_released"]
        assert ep.held == 0 and counters["held_high_water"] <= setup.recv_slots
        assert counters["credits_returned"] + counters["credits_piggybacked"] == sum(
            cluster.returned[ep.rank, s] for s in range(cluster.n)
        )


def test_the_simulation_sees_every_way_a_send_leaves():
    """Guard against a harness that never reaches the stream cache's branches: a long busy run uses
    all five MPI calls (piggybacked ones included)."""
    setup = Setup(
        ranks=3, mode="rank", ranks_per_node=1, recv_slots=9, credit_threshold=1, piggyback=True, send_slots=2
    )
    cluster = Cluster(setup)
    for i in range(240):  # each rank sends runs of one stream, to the next rank then the one after
        cluster.app_send(i % 3, (i % 3 + 1 + (i // 30) % 2) % 3, SIZES[(i // 60) % 2])
        cluster.quiesce()
    assert set(cluster.actions) == {ISEND_TAGGED, START, CREATE, ISEND_NEW, REPLACE}, cluster.actions


@pytest.mark.parametrize("ledger", LEDGERS)
def test_the_simulation_detects_a_send_without_credit(ledger):
    """Guard against a vacuous harness: bypassing the credit check must trip the invariants."""
    cluster = Cluster(
        Setup(ranks=2, mode="rank", ranks_per_node=1, recv_slots=2, credit_threshold=1, piggyback=False, send_slots=4),
        ledger,
    )
    assert cluster.per_pair == 1
    cluster.app_send(0, 1)
    cluster.eps[0].flow.send_credits[1] += 1  # forge a credit
    cluster.app_send(0, 1)
    with pytest.raises(AssertionError, match="without credit|not conserved"):
        cluster.check_invariants()


def test_the_simulation_detects_a_slot_freed_before_its_send_completed():
    """Guard against a vacuous reclaim model: completing a send whose payload is still on the wire trips it."""
    cluster = Cluster(
        Setup(ranks=2, mode="rank", ranks_per_node=1, recv_slots=4, credit_threshold=1, piggyback=False, send_slots=2)
    )
    cluster.app_send(0, 1)
    cluster.eps[0].oldest_completed()  # the transport wrongly reports the send complete
    with pytest.raises(AssertionError):
        cluster.check_invariants()
