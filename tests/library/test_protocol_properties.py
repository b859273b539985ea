"""Property test: a simulated cluster of Endpoints under random interleavings of events.

N ranks (2..6) run the sans-I/O :class:`~mailrail.protocol.Endpoint` with rank-, node-based or
adaptive credits, accounted either by the reference classes of :mod:`mailrail.flow`
(the Python transport's) or by the compiled ``CreditLedger`` (the compiled transport's).  An
in-memory network keeps one FIFO list of payloads and one of credit messages per (source,
destination) pair, like MPI's non-overtaking rule (so requests race grants, revokes race
give-backs, in every order the pairs allow); a send completes only once its payload was
delivered (rendezvous), and the sender reclaims its sends as a transport does, testing the oldest
in flight (with head patience).  Each send's MPI call is checked against the requests a transport
would hold: a persistent send is only restarted for its own destination and size, and never
created over one that still exists.
Hypothesis picks the interleaving: application sends, payload deliveries, send reclaims,
application releases (in any order), credit deliveries and drains, on adversarial setups (one
receive slot, more sending nodes than slots, ranks that stop sending mid-stream because the
schedule sends no more from them).  After every step the credit and slot invariants are checked
(credits conserved per sender unit and receiver, every message arriving with a slot; in adaptive
mode also each node's one request token, and every answer going, in line order, to a node below its
share: FIFO service among them, hence a bounded wait); at the end everything is drained, no send may be left waiting
(no deadlock, no starvation) and every message must have been delivered exactly once.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from helpers import adaptive_state
from mailrail.counters import COUNTERS
from mailrail.flow import AdaptiveCredits, NodeCredits, RankCredits, credit_budget
from mailrail.flow.base import ANSWER, GIVE_BACK, GRANT, KIND_BITS, KIND_MASK, REQUEST, REVOKE
from mailrail.flow.modes import compiled_ledger
from mailrail.flow.node import LocalCounters
from mailrail.pool import SlotPool
from mailrail.protocol import CREATE, IN_FLIGHT, ISEND_NEW, ISEND_TAGGED, NO_SLOT, REPLACE, START, Endpoint

#: Who accounts the credits: the reference classes, or the compiled ledger.
LEDGERS = ("python", "compiled")

SLOT_SIZE = 16  # a payload is its 8-byte sequence number, in 8 or 16 bytes (two streams per destination)
SIZES = (8, 16)


@dataclass(frozen=True)
class Setup:
    ranks: int
    mode: str  # "rank", "node" or "adaptive"
    ranks_per_node: int
    recv_slots: int
    credit_threshold: int
    piggyback: bool
    send_slots: int
    head_patience: int = 64
    tag_ub: int = 32767  # small ones split credit messages and cap piggybacked credits and requests
    posted_receives: int | None = None  # MAILRAIL_MAX_RECVS: fewer than recv_slots parks the rest

    @property
    def nodes(self) -> int:
        return -(-self.ranks // self.ranks_per_node)

    def node_of(self, rank: int) -> int:
        return rank // self.ranks_per_node


def counters(ledger: str, length: int, initial: int):
    """A node's shared counters as each ledger sees them: int64 memory (compiled) or LocalCounters."""
    return np.full(length, initial, dtype=np.int64) if ledger == "compiled" else LocalCounters(length, initial)


def values(counters) -> list[int]:
    return counters.tolist() if isinstance(counters, np.ndarray) else list(counters.values)


def free_slots(flow) -> int:
    """An adaptive receiver's slots not lent (either ledger)."""
    return flow.free if hasattr(flow, "free") else flow.free_slots


class Cluster:
    def __init__(self, setup: Setup, ledger: str = "python") -> None:
        self.setup = setup
        n = self.n = setup.ranks
        budget = credit_budget(
            setup.mode, recv_slots=setup.recv_slots, ranks=n, nodes=setup.nodes, credit_threshold=setup.credit_threshold
        )
        self.per_pair = budget.credits_per_pair
        if setup.mode != "adaptive":
            senders = n if setup.mode == "rank" else setup.nodes
            assert self.per_pair * senders <= setup.recv_slots
        # Node and adaptive modes: per node, the shared pool (per destination rank) and, adaptive, the tokens.
        initial = self.per_pair if setup.mode == "node" else 0
        self.node_pools = [counters(ledger, n, initial) for _ in range(setup.nodes)]
        self.node_tokens = [counters(ledger, n, 1) for _ in range(setup.nodes)]
        self.node_demand = [counters(ledger, n, 0) for _ in range(setup.nodes)]
        self.eps: list[Endpoint] = []
        for rank in range(n):
            self.eps.append(
                Endpoint(
                    rank,
                    n,
                    SlotPool(setup.send_slots, SLOT_SIZE),
                    self._flow(rank, ledger, budget),
                    tag_ub=setup.tag_ub,
                    head_patience=setup.head_patience,
                    credit_poll_interval=8,
                    idle_spins=4,
                    recv_slots=setup.recv_slots,
                    posted_receives=setup.posted_receives,
                )
            )
            while self.eps[-1].post_parked() != NO_SLOT:  # as a transport posts its receives
                pass
        pairs = [(s, d) for s in range(n) for d in range(n)]
        self.payloads: dict[tuple[int, int], deque] = {p: deque() for p in pairs}  # (seq, tag, slot, nbytes)
        self.credit_msgs: dict[tuple[int, int], deque] = {p: deque() for p in pairs}  # tags
        self.held: list[list] = [[] for _ in range(n)]  # per receiver: (message, seq)
        # Per sender: slots whose payload was delivered (their send is complete) but not yet reclaimed.
        self.completed: list[set[int]] = [set() for _ in range(n)]
        # Per sender and slot: the (dest, nbytes) of the persistent send request a transport would hold.
        self.requests: list[list[tuple[int, int] | None]] = [[None] * setup.send_slots for _ in range(n)]
        self.actions: Counter = Counter()
        self.kinds: Counter = Counter()  # credit messages sent, by kind
        self.next_seq = [0] * n
        self.submitted: dict[tuple[int, int], list[int]] = {p: [] for p in pairs}
        self.transmitted: dict[tuple[int, int], list[int]] = {p: [] for p in pairs}
        self.delivered_order: dict[tuple[int, int], list[int]] = {p: [] for p in pairs}
        self.delivered: Counter = Counter()
        self.arrived = Counter()  # (src, dst) -> payloads arrived at dst from src
        self.returned = Counter()  # (receiver, sender) -> credits the receiver sent back (messages + tags)
        # Adaptive: per receiver, the nodes waiting for an answer in the order their requests arrived.
        self.line: list[deque[int]] = [deque() for _ in range(n)]
        # Sending units: each rank (rank mode) or each node (node, adaptive), as lists of ranks.
        if setup.mode == "rank":
            self.units = [[r] for r in range(n)]
        else:
            self.units = [[r for r in range(n) if setup.node_of(r) == node] for node in range(setup.nodes)]

    def _flow(self, rank: int, ledger: str, budget):
        setup, n = self.setup, self.n
        if setup.mode == "rank":
            if ledger == "compiled":
                return compiled_ledger(
                    "rank",
                    n,
                    budget.credits_per_pair,
                    budget.return_threshold,
                    piggyback=setup.piggyback,
                    max_tag=setup.tag_ub,
                )
            return RankCredits(
                n, budget.credits_per_pair, budget.return_threshold, piggyback=setup.piggyback, max_tag=setup.tag_ub
            )
        node = setup.node_of(rank)
        pool, tokens, demand = self.node_pools[node], self.node_tokens[node], self.node_demand[node]
        if ledger == "compiled":
            placement = {"nodes": setup.nodes, "ranks_per_node": setup.ranks_per_node, "max_tag": setup.tag_ub}
            if setup.mode == "node":
                return compiled_ledger(
                    "node",
                    n,
                    budget.credits_per_pair,
                    budget.return_threshold,
                    pool=pool.ctypes.data,
                    owner=pool,
                    **placement,
                )
            return compiled_ledger(
                "adaptive",
                n,
                budget.credits_per_pair,
                budget.return_threshold,
                recv_slots=setup.recv_slots,
                pool=pool.ctypes.data,
                tokens=tokens.ctypes.data,
                demand=demand.ctypes.data,
                owner=(pool, tokens, demand),
                **placement,
            )
        if setup.mode == "node":
            return NodeCredits(
                setup.nodes,
                setup.node_of,
                pool,
                budget.credits_per_pair,
                budget.return_threshold,
                max_tag=setup.tag_ub,
            )
        return AdaptiveCredits(
            setup.node_of,
            pool,
            tokens,
            demand,
            setup.recv_slots,
            budget.credits_per_pair,
            budget.return_threshold,
            max_tag=setup.tag_ub,
        )

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
        self._post_credit_messages(src)

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
        return self._post_credit_messages(rank) or bool(batch)

    def _post_credit_messages(self, rank: int) -> bool:
        """What a transport does after each call: send the credit messages the Endpoint has due."""
        ep, sent = self.eps[rank], False
        answered = []
        while ep.credit_messages_due():
            target, tag = ep.next_credit_message()
            kind, count = tag & KIND_MASK, tag >> KIND_BITS
            assert 0 < tag <= self.setup.tag_ub and kind <= GIVE_BACK, f"rank {rank} sends tag {tag}"
            assert count >= (0 if kind in (REVOKE, GIVE_BACK) else 1), f"rank {rank} sends an empty {kind}"
            if kind <= ANSWER:
                self.returned[rank, target] += count
                if kind == ANSWER:
                    answered.append(self.setup.node_of(target))
            self.kinds[kind] += 1
            self.credit_msgs[rank, target].append(tag)
            sent = True
        line = self.line[rank]
        if answered:
            # FIFO service among the nodes below their share: an answer passes over only nodes that hold
            # credits (a node holding nothing is below any share), whose requests stand.
            leases = adaptive_state(self.eps[rank].flow)["leases"]
        for node in answered:
            assert node in line, f"rank {rank} answered node {node}, which is not in line: {list(line)}"
            for ahead in list(line)[: line.index(node)]:
                assert leases[ahead][1] > 0, f"rank {rank} answered node {node} before node {ahead}, which holds 0"
            line.remove(node)
        return sent

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
        ep = self.eps[dst]
        recv_slot = ep.head_receive()  # wildcard receives match in posting order: the ring's head
        assert recv_slot != NO_SLOT, f"rank {dst} overran its posted receives"
        parked = ep.parked_slots()
        posted = ep.head_arrived()
        assert posted == (parked[-1] if parked else NO_SLOT), "a parked slot was not posted in its place"
        data = np.frombuffer(seq.to_bytes(8, "little") + bytes(nbytes - 8), np.uint8)
        message = ep.arrived(src, tag, nbytes, recv_slot, data)  # ProtocolError on a send without credit
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
        posted = ep.posted_count
        slot = ep.release(message)
        assert slot == (recv_slot if posted < ep.posted_receives else NO_SLOT) and not ep.holds(message)
        self._post_credit_messages(rank)

    def deliver_credit(self, src: int, dst: int) -> None:
        tag = self.credit_msgs[src, dst].popleft()
        if tag & KIND_MASK == REQUEST:
            self.line[dst].append(self.setup.node_of(src))
        self.eps[dst].credits_arrived(src, tag)
        self._post_credit_messages(dst)

    # -- invariants -----------------------------------------------------------------

    def in_flight_credits(self, src: int, dst: int, kinds: tuple[int, ...]) -> int:
        return sum(tag >> KIND_BITS for tag in self.credit_msgs[src, dst] if tag & KIND_MASK in kinds)

    def sender_credits(self, unit: int, ranks: list[int], dst: int) -> int:
        if self.setup.mode == "rank":
            return self.eps[ranks[0]].flow.send_credits[dst]
        return values(self.node_pools[unit])[dst]

    def check_invariants(self) -> None:
        n, setup = self.n, self.setup
        for ep in self.eps:
            flow = ep.flow
            if setup.mode != "adaptive":
                assert min(flow.owed) >= 0, f"rank {ep.rank}: negative owed credits {list(flow.owed)}"
                assert min(flow.unreturned) >= 0, f"rank {ep.rank}: negative unreturned {list(flow.unreturned)}"
            if setup.mode == "rank":
                assert min(flow.send_credits) >= 0, f"rank {ep.rank}: negative credits {list(flow.send_credits)}"
            # Every send slot is free, deferred or in flight (the simulated application sends what it
            # reserves at once), and the ring holds exactly the sends not yet reclaimed.
            on_the_wire = sum(len(self.payloads[ep.rank, d]) for d in range(n))
            assert ep.in_flight == on_the_wire + len(self.completed[ep.rank])
            assert ep.reserved == 0
            assert ep.free_slots + ep.deferred_total + ep.in_flight == setup.send_slots, "a send slot leaked"
            assert ep.pending_sends() == ep.deferred_total + ep.in_flight
            assert ep.held == len(self.held[ep.rank])
            # Never more messages here than receive slots: every arrival had one.
            assert len(self.held[ep.rank]) <= flow.unreturned_total <= setup.recv_slots
            # Every receive slot is posted, parked or held, once; as many posted as MAX_RECVS and the held
            # ones allow (a parked slot is posted as soon as a posted one is taken).
            posted, parked = ep.posted_slots(), ep.parked_slots()
            held = [slot for _, slot in self.held[ep.rank]]
            assert sorted(posted + parked + held) == list(range(setup.recv_slots)), "a receive slot leaked"
            assert len(posted) == min(ep.posted_receives, setup.recv_slots - len(held)), (posted, parked, held)
        for node in range(len(self.node_pools)):
            pool = values(self.node_pools[node])
            assert min(pool) >= 0, f"node {node}: negative shared credits {pool}"
        if setup.mode == "adaptive":
            self.check_adaptive()
            return
        for dst in range(n):
            granted = 0
            for unit, ranks in enumerate(self.units):
                credits = self.sender_credits(unit, ranks, dst)
                in_flight = sum(len(self.payloads[s, dst]) for s in ranks)
                # Arrived at dst but not yet given back (by credit message or tag).
                unreturned = sum(self.arrived[s, dst] - self.returned[dst, s] for s in ranks)
                returning = sum(
                    self.in_flight_credits(dst, s, (GRANT,)) + sum(t for _, t, _, _ in self.payloads[dst, s])
                    for s in ranks
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
            assert granted <= setup.recv_slots, f"{granted} credits granted for rank {dst}'s receive slots"

    def check_adaptive(self) -> None:
        """Each receiver's slots are free or lent, and every lent credit is somewhere: in its node's pool, a
        grant on its way, a payload on its way or arrived and not yet returned, or a give-back on its way.
        Each node has one request token per receiver: in its memory, or a request, a wait or an answer."""
        n, setup = self.n, self.setup
        for dst in range(n):
            flow = self.eps[dst].flow
            lent = 0
            for unit, ranks in enumerate(self.units):
                pool = values(self.node_pools[unit])[dst]
                granting = sum(self.in_flight_credits(dst, s, (GRANT, ANSWER)) for s in ranks)
                giving_back = sum(self.in_flight_credits(s, dst, (GIVE_BACK,)) for s in ranks)
                in_flight = sum(len(self.payloads[s, dst]) for s in ranks)
                lent += pool + granting + giving_back + in_flight
                waiting_sends = sum(self.eps[s].deferred.queued_for(dst) for s in ranks)
                assert values(self.node_demand[unit])[dst] == waiting_sends, f"node {unit}'s demand for {dst}"
                token = values(self.node_tokens[unit])[dst]
                asking = sum(1 for s in ranks for t in self.credit_msgs[s, dst] if t & KIND_MASK == REQUEST)
                answering = sum(1 for s in ranks for t in self.credit_msgs[dst, s] if t & KIND_MASK == ANSWER)
                waiting = self.line[dst].count(unit)
                assert token + asking + waiting + answering == 1, (
                    f"node {unit}'s request token for rank {dst}: {token} here, {asking} request(s), {waiting} "
                    f"wait(s), {answering} answer(s)"
                )
            # Lent credits that came back as payloads: arrived, not yet sent back nor reclaimed.
            lent += flow.unreturned_total
            assert lent + free_slots(flow) == setup.recv_slots, (
                f"rank {dst}'s {setup.recv_slots} slots: {free_slots(flow)} free, {lent} lent"
            )

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
    mode = draw(st.sampled_from(["rank", "node", "adaptive"]))
    ranks_per_node = draw(st.integers(1, ranks)) if mode != "rank" else 1
    senders = ranks if mode == "rank" else -(-ranks // ranks_per_node)
    if mode == "adaptive":  # any number of slots: down to one, fewer than the sending nodes
        recv_slots = draw(st.integers(1, 2 * senders + 2))
    else:
        window = draw(st.integers(1, 5))  # credits per pair; small windows make sends wait
        recv_slots = senders * window + draw(st.integers(0, senders - 1))
    return Setup(
        ranks=ranks,
        mode=mode,
        ranks_per_node=ranks_per_node,
        recv_slots=recv_slots,
        credit_threshold=draw(st.integers(1, 3)),
        piggyback=draw(st.booleans()),
        send_slots=draw(st.integers(1, 8)),
        head_patience=draw(st.integers(1, 4)),
        tag_ub=draw(st.sampled_from([15, 23, 31, 32767])),  # 1, 2, 3 or 4095 credits per credit message
        posted_receives=draw(st.one_of(st.none(), st.integers(1, recv_slots))),
    )


def step(cluster: Cluster, kind: str, a: int, b: int, senders: int = 0) -> None:
    """One event; *senders*: a bit mask of the ranks that still send (0: all)."""
    n = cluster.n
    if kind == "send":
        # Half the sends go to rank 0: incast, the case credits exist for.
        if not senders or senders >> (a % n) & 1:
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
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(setup=setups(), events=st.lists(EVENTS, min_size=60, max_size=250), senders=st.integers(0, 63))
def test_random_interleavings_keep_credit_invariants_and_deliver_everything_once(ledger, setup, events, senders):
    """*senders*: in the second half of the schedule only these ranks send (the others stop mid-stream,
    perhaps holding credits they no longer use)."""
    events = [decode(event) for event in events]
    note(f"decoded events: {events}")
    cluster = Cluster(setup, ledger)
    cluster.check_invariants()
    for i, (kind, a, b) in enumerate(events):
        step(cluster, kind, a, b, senders if i >= len(events) // 2 else 0)
        cluster.check_invariants()

    cluster.quiesce()
    for src in range(cluster.n):  # after a quiet spell every pair talks once more: no credit is stuck anywhere
        for dst in range(cluster.n):
            cluster.app_send(src, dst)
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
        # Nothing held: every slot is posted (up to MAX_RECVS) or parked, ready to be reused.
        assert ep.posted_count == ep.posted_receives and len(ep.parked_slots()) == setup.recv_slots - ep.posted_count
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


@pytest.mark.parametrize("ledger", LEDGERS)
def test_the_simulation_reaches_every_kind_of_adaptive_credit_message(ledger):
    """Guard against a harness that never revokes: one slot, three sending nodes, the first stops mid-stream
    holding credit; every kind of credit message is sent, and everything is still delivered."""
    setup = Setup(
        ranks=4, mode="adaptive", ranks_per_node=1, recv_slots=1, credit_threshold=1, piggyback=False, send_slots=4
    )
    cluster = Cluster(setup, ledger)
    cluster.app_send(1, 0)
    cluster.deliver_credit(1, 0)  # rank 1's request: answered with the one slot
    cluster.deliver_credit(0, 1)
    for sender in (2, 3):
        cluster.app_send(sender, 0)
        cluster.deliver_credit(sender, 0)  # they wait: rank 1's credit is in flight, then revoked
    cluster.check_invariants()
    cluster.quiesce()
    assert set(cluster.kinds) >= {ANSWER, REQUEST, REVOKE, GIVE_BACK}, cluster.kinds
    assert all(not ep.deferred_total for ep in cluster.eps)
    assert sum(cluster.delivered.values()) == 3


@pytest.mark.parametrize("ledger", LEDGERS)
def test_the_simulation_detects_a_forged_adaptive_credit(ledger):
    """Guard against a vacuous conservation check: a credit that no receiver lent trips it."""
    setup = Setup(
        ranks=2, mode="adaptive", ranks_per_node=1, recv_slots=2, credit_threshold=1, piggyback=False, send_slots=2
    )
    cluster = Cluster(setup, ledger)
    pool = cluster.node_pools[0]
    if isinstance(pool, np.ndarray):
        pool[1] += 1
    else:
        pool.add(1, 1)
    with pytest.raises(AssertionError, match="slots: 2 free, 1 lent"):
        cluster.check_invariants()
