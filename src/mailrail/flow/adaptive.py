"""Adaptive credits: a receiver lends its receive slots to the sending nodes that ask, for any job size.

A receiver's ``R`` receive slots are its only receive memory, however many ranks
and nodes the job has.  Credits are *leased* to sending nodes, not owned by pairs:

* **Sender side** (node-shared, as in node mode): per destination rank, the
  node's credit pool, one *request token* and the count of its ranks' sends waiting
  (*demand*).  A rank takes credits from the pool atomically.  A rank whose sends
  wait for a destination with an empty pool takes the token (atomically, so a node
  asks once) and sends a ``REQUEST`` carrying how many sends wait.  The ``ANSWER``
  to it adds credits to the pool and puts the token back; a ``GRANT`` only adds
  credits.  On a ``REVOKE`` a rank takes what the pool holds beyond the waiting
  sends and sends it back (``GIVE_BACK``, possibly 0): credits just granted to
  sends that wait are used, not bounced back and forth.
* **Receiver side**: slots not leased are *free*.  Per node holding credits or
  asking for them, a lease record: credits held (``held``), those in use (arrived,
  not yet returned: ``unreturned``), released ones not yet sent back (``owed``),
  what it asked for (``demand``), and the ranks it granted credits to since its
  last revoke.  A grant goes to the node's rank whose message (or request) came
  last: a rank that is running, so the credits reach the node's pool soon.  A
  revoke goes to every rank granted since the last one: on one communicator, one
  pair of ranks, a rank gets its grants before its revoke, so the last give-back
  of a revoke finds every credit granted before it in the pool.
  - A request joins a FIFO of waiting nodes.  Free slots go, in line order, to the
    waiting nodes below their fair share ``R // (nodes holding or asking)``, each at
    most ``lease`` credits, its demand and up to its share (a node holding nothing:
    one at least); a node at or above its share keeps its place, its request
    standing, until it is below its share.
  - A released credit goes back to its node (``GRANT`` once ``held //
    credit_threshold`` gathered, or at once as the ``ANSWER`` if that node waits
    alone below its share): a busy node keeps a standing window.  While *another*
    node waits, a node keeps at most its fair share: released credits above it are
    reclaimed into the free slots, for the nodes in line below theirs.
  - When nodes wait and no slot is free, released credits kept back below the
    threshold are reclaimed down to the shares, and every node granted credits since
    it was last revoked gets one ``REVOKE``; what comes back is served in order.  A
    node that kept some (for its waiting sends) is looked at again after its next
    arrival.

Invariants (checked as they are used; ``tests/library/flow/test_flow_adaptive.py`` and the
cluster simulation check them after every event):

* ``free + sum(held) == R`` at the receiver, and ``unreturned <= held`` per node,
  checked on every arrival: never more messages arrive than there are slots.
* A node has at most one request outstanding per receiver (its token), and every
  request is answered exactly once.
* A waiting node below its share is answered after at most the nodes below theirs
  queued ahead of it were served (FIFO among them, each node once in the queue; a
  node at its share is not starved: its window comes back), provided the application releases
  what it receives and every rank keeps calling ``receive()``: while a node that
  holds less than its share waits, some node holds more (the shares sum to at most
  ``R``), and its credits above the share come back to the free slots, from
  released messages at once and from idle pools within one revoke round trip.

State per rank: one record per node holding credits (at most ``R``, each holds one)
or waiting, the queue, and the ranks granted since their node's last revoke:
``O(R + active senders)``, not a table over ranks or nodes.
The node-shared pool, tokens and waiting-send counts are 24 bytes per destination rank per
node, as node mode's pool is 8.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from ..errors import ProtocolError
from .base import ANSWER, GIVE_BACK, GRANT, REQUEST, REVOKE, FlowControl, max_credit_count, unknown_kind
from .node import SharedCounters

#: What credit_state_bytes() counts: 8 bytes per field of a lease record, and per queued node; a rank granted
#: credits since its node's last revoke, 16 (the compiled ledger's entry and its share of a hash table).
LEASE_BYTES = 8 * 7
QUEUE_ENTRY_BYTES = 8
GRANTED_BYTES = 16


class Lease:
    """What a receiver knows of one sending node (see the module doc)."""

    __slots__ = ("node", "target", "granted", "held", "unreturned", "owed", "demand", "revoking", "recheck")

    def __init__(self, node: int, target: int) -> None:
        self.node = node
        self.target = target  # the rank the next grant goes to: the last one whose message or request came here
        self.granted: dict[int, None] = {}  # the ranks granted credits since the last revoke: it goes to each
        self.held = 0  # credits leased to the node and not come back
        self.unreturned = 0  # of those: payloads arrived, credit not yet sent back or reclaimed
        self.owed = 0  # of those: released, to be sent back (or reclaimed)
        self.demand = 0  # > 0: the node asked and waits (how many sends wait)
        self.revoking = 0  # REVOKEs sent whose GIVE_BACKs have not arrived
        self.recheck = False  # it kept credits at the last revoke (for sends waiting or on their way)


class AdaptiveCredits(FlowControl):
    """``flow_control="adaptive"``: credits leased to sending nodes on request (see the module doc).

    *node_of*: rank -> node; *pool*, *tokens* and *demand*: the node's shared counters, one per
    destination rank (pool starts at 0, tokens at 1, demand at 0); *recv_slots*: ``R``; *lease*: the
    most credits one grant carries; *credit_threshold*: a node holding ``h`` credits gets
    released ones back once ``h // credit_threshold`` gathered; *max_tag*: MPI's ``TAG_UB``.
    """

    name = "adaptive"
    has_credits = True
    credits_change_silently = True
    asks_for_credit = True

    def __init__(
        self,
        node_of: Callable[[int], int],
        pool: SharedCounters,
        tokens: SharedCounters,
        demand: SharedCounters,
        recv_slots: int,
        lease: int,
        credit_threshold: int,
        *,
        max_tag: int = 32767,
    ) -> None:
        super().__init__()
        if recv_slots < 1 or lease < 1 or credit_threshold < 1:
            raise ValueError(
                f"recv_slots={recv_slots}, lease={lease} and credit_threshold={credit_threshold} must be >= 1"
            )
        self.node_of = node_of
        self.pool = pool
        self.tokens = tokens
        self.demand = demand
        self.recv_slots = recv_slots
        self.credits_per_pair = lease  # what stats() reports as the credit unit
        self.lease = lease
        self.return_threshold = credit_threshold
        self.max_count = max_credit_count(max_tag)
        self.free = recv_slots
        self.leases: dict[int, Lease] = {}
        self.waiting: deque[int] = deque()  # nodes that asked, in order; each at most once
        # Ordered sets (dicts of None): nodes granted credits since their last revoke (revocable; those a revoke
        # round found within their fair share wait in parked until shares shrink), and nodes with released
        # credits kept back (owed, below the threshold): what must come back when nodes wait and no slot is free.
        self.revocable: dict[int, None] = {}
        self.parked: dict[int, None] = {}
        self.owing: dict[int, None] = {}

    # -- sender side -----------------------------------------------------------------

    def try_acquire(self, dest: int) -> bool:
        return self.pool.try_take(dest)

    def available(self, dest: int) -> int:
        return self.pool.load(dest)

    def ask(self, dest: int, queued: int) -> None:
        if self.tokens.try_take(dest):  # the node's one request to dest: whoever takes the token sends it
            self.requests_sent += 1
            self.outbox.append((dest, REQUEST, min(queued, self.max_count)))

    def on_deferred(self, dest: int, queued: int) -> None:
        self.demand.add(dest, 1)
        if not self.pool.load(dest):
            self.ask(dest, queued)

    def on_undeferred(self, dest: int, count: int) -> None:
        self.demand.add(dest, -count)

    def on_credit_message(self, source: int, kind: int, count: int) -> None:
        if kind == GRANT or kind == ANSWER:
            now = self.pool.add(source, count) + count
            if kind == ANSWER and self.tokens.add(source, 1) >= 1:
                raise ProtocolError(f"rank {source} answered a request this node did not make")
            if now > self.recv_slots:
                raise ProtocolError(
                    f"rank {source} granted {count} credits, leaving this node {now} > its "
                    f"{self.recv_slots} receive slots"
                )
        elif kind == REVOKE:  # give back what the node's waiting sends will not use
            spare = min(self.pool.load(source) - self.demand.load(source), self.max_count)
            self.outbox.append((source, GIVE_BACK, self.pool.take_up_to(source, spare) if spare > 0 else 0))
        elif kind == REQUEST:
            self._requested(source, count)
        elif kind == GIVE_BACK:
            self._given_back(source, count)
        else:
            raise unknown_kind(source, kind, count, self.name)

    # -- receiver side ---------------------------------------------------------------

    def on_arrival(self, source: int, tag: int) -> bool:
        node = self.node_of(source)
        lease = self.leases.get(node)
        if lease is None or lease.unreturned >= lease.held:
            held, in_use = (0, 0) if lease is None else (lease.held, lease.unreturned)
            raise ProtocolError(
                f"node {node} (via rank {source}) sent a message here without credit: it holds {held} "
                f"credit(s) of this rank and {in_use} are in use"
            )
        lease.unreturned += 1
        self.unreturned_total += 1
        if self.unreturned_total > self.unreturned_high_water:
            self.unreturned_high_water = self.unreturned_total
        if lease.recheck:  # it used what it kept: what is left may be idle now
            lease.recheck = False
            self._mark_revocable(lease)
        return False

    def on_release(self, source: int) -> None:
        node = self.node_of(source)
        lease = self.leases.get(node)
        if lease is None or lease.owed >= lease.unreturned:  # an Endpoint releases only what arrived
            raise ProtocolError(f"node {node} (via rank {source}) has no message here to release")
        lease.owed += 1
        lease.target = source
        free = self.free
        self._settle(lease)
        # Without a slot freed now or a node to look at, _serve() would change nothing (per message, it would
        # walk the line): free slots left over were offered to the line when they came, the other owed credits
        # were settled as they came, and what decides either again (the line, the holdings, the shares) calls
        # _serve() itself.
        if self.waiting and (self.free > free or self.revocable):
            self._serve()

    @property
    def _share(self) -> int:
        """Every node's fair share now: ``R // (nodes holding or asking)`` (the compiled ledger keeps it)."""
        return self.recv_slots // len(self.leases)

    def _settle(self, lease: Lease) -> None:
        """What becomes of *lease*'s released credits: while another node waits, those above the node's fair
        share (``R // nodes holding or asking``) are reclaimed for the queue; the rest go back to the node at
        once if it waits alone below its share (the answer), or once ``held // credit_threshold`` gathered (its standing
        window: every credit it holds comes back to it this way, since the threshold is at most what it
        holds), else they are kept owed.  A node that asks while holding its share gets no answer from its
        own credits: it would ask again as soon as its pool ran dry, a request and an answer every few
        messages, where node mode's senders just wait for the window."""
        owed = lease.owed
        if not owed:
            return
        waiting = self.waiting
        others = len(waiting) > (1 if lease.demand else 0)
        if others:
            take = min(owed, lease.held - self._share)
            if take > 0:  # above its share: those slots go to the queue
                lease.owed = owed = owed - take
                lease.held -= take
                lease.unreturned -= take
                self.unreturned_total -= take
                self.free += take
                self.reclaimed += take
                if not owed:
                    self.owing.pop(lease.node, None)
                    self._forget_if_idle(lease)
                    return
        if lease.demand and not others and lease.held < self._share:
            # It waits alone below its share: these answer it, at once.  At its share it would ask again as soon
            # as its pool ran dry, for nothing, so it keeps its standing window instead and stays in line (its
            # request stands, the token stays out: its ranks ask no more) until it is below its share.
            self._give_back_owed(lease)
            waiting.clear()
            self._grant(lease, ANSWER, owed)
        elif owed >= max(1, lease.held // self.return_threshold):
            self._give_back_owed(lease)
            self._grant(lease, GRANT, owed)
        else:
            self.owing[lease.node] = None

    def _give_back_owed(self, lease: Lease) -> None:
        """*lease*'s owed credits go back to its node: no longer in use here."""
        lease.unreturned -= lease.owed
        self.unreturned_total -= lease.owed
        lease.owed = 0
        self.owing.pop(lease.node, None)

    def _requested(self, source: int, demand: int) -> None:
        node = self.node_of(source)
        lease = self.leases.get(node)
        if lease is None:
            lease = self.leases[node] = Lease(node, source)
            if len(self.leases) > self.leases_high_water:
                self.leases_high_water = len(self.leases)
            for parked in self.parked:  # one more node: every share shrinks, a parked node may be above its
                self.revocable[parked] = None
            self.parked.clear()
        elif lease.demand:
            raise ProtocolError(f"node {node} (via rank {source}) asked for credits again before its answer")
        else:
            lease.target = source
        self.requests_received += 1
        lease.demand = max(1, demand)
        self.waiting.append(node)
        if len(self.waiting) > self.waiting_high_water:
            self.waiting_high_water = len(self.waiting)
        self._serve()

    def _given_back(self, source: int, count: int) -> None:
        node = self.node_of(source)
        lease = self.leases.get(node)
        if lease is None or not lease.revoking:
            raise ProtocolError(f"node {node} (via rank {source}) gave back {count} credit(s) that were not revoked")
        if count > lease.held - lease.unreturned:
            raise ProtocolError(
                f"node {node} (via rank {source}) gave back {count} credit(s) but held only "
                f"{lease.held - lease.unreturned} unused"
            )
        lease.revoking -= 1
        if count == self.max_count:  # a full message: its pool may hold more
            self._mark_revocable(lease)
        elif not lease.revoking and count < lease.held - lease.unreturned:
            lease.recheck = True  # it kept some: look again once it used them (an arrival)
        lease.held -= count
        self.free += count
        self.given_back += count
        self._forget_if_idle(lease)
        self._serve()

    def _serve(self) -> None:
        """Serve waiting nodes in order from the free slots.  While some wait and none is free, every credit
        must come back: the owed ones now, the idle ones in nodes' pools by a revoke."""
        waiting, leases = self.waiting, self.leases
        while True:
            if waiting and self.free:
                self._hand_out()
            if not waiting or not self.owing:
                break
            free = self.free
            for node in list(self.owing):  # others wait: shares above fair are reclaimed (or answer a lone waiter)
                self._settle(leases[node])
            if self.free == free:  # nothing above a fair share was owed: the rest is in use or in pools
                break
        if waiting:
            self._revoke_idle()

    def _hand_out(self) -> None:
        """Free slots to the nodes in line below their fair share, in line order, each up to its share (a node
        holding nothing: one at least, so that slots fewer than nodes go round).  A node at or above its
        share keeps its place in line, its request standing: a slot it took would be above its share, taken
        back at its next release for the next node, and so on round the line."""
        waiting, leases, share = self.waiting, self.leases, self._share
        kept: list[int] = []
        for node in list(waiting):
            lease = leases[node]
            room = share - lease.held if lease.held else max(share, 1)
            if not self.free or room <= 0:
                kept.append(node)
                continue
            count = min(self.free, lease.demand, self.lease, room)
            self.free -= count
            lease.held += count
            self._grant(lease, ANSWER, count)
        waiting.clear()
        waiting.extend(kept)

    def _grant(self, lease: Lease, kind: int, count: int) -> None:
        if kind == ANSWER:
            lease.demand = 0
        self._send_credits(lease.target, kind, count, self.max_count)
        lease.granted[lease.target] = None
        self._mark_revocable(lease)

    def _mark_revocable(self, lease: Lease) -> None:
        self.parked.pop(lease.node, None)
        self.revocable[lease.node] = None

    def _revoke_idle(self) -> None:
        """Every node granted credits since its last revoke that holds more than its fair share gets a REVOKE,
        unless all its credits are here (in messages: released, they come back) or a revoke is already on its
        way (it is looked at again later); those within their share are parked until the shares shrink."""
        leases, revocable = self.leases, self.revocable
        share = self._share
        for node in list(revocable):
            lease = leases[node]
            if lease.revoking:
                continue
            del revocable[node]
            if lease.held <= share:
                self.parked[node] = None
            elif lease.held > lease.unreturned:
                # To every rank granted credits since the last revoke: each gives back after the grants sent to
                # it (one pair of ranks, one communicator: in order), so the last give-back finds them all.
                for rank in lease.granted or (lease.target,):
                    lease.revoking += 1
                    self.revokes_sent += 1
                    self.outbox.append((rank, REVOKE, 0))
                lease.granted.clear()

    def _forget_if_idle(self, lease: Lease) -> None:
        if not lease.held and not lease.demand and not lease.revoking:  # (held 0: nothing owed)
            del self.leases[lease.node]
            self.revocable.pop(lease.node, None)
            self.parked.pop(lease.node, None)
            self.owing.pop(lease.node, None)

    # -- reports ---------------------------------------------------------------------

    def lease_count(self) -> int:
        return sum(1 for lease in self.leases.values() if lease.held)

    def credit_state_bytes(self) -> int:
        queued = len(self.waiting) + len(self.revocable) + len(self.parked) + len(self.owing)
        granted = sum(len(lease.granted) for lease in self.leases.values())
        return LEASE_BYTES * len(self.leases) + QUEUE_ENTRY_BYTES * queued + GRANTED_BYTES * granted

    def shared_state_bytes(self) -> int:
        return self.pool.nbytes + self.tokens.nbytes + self.demand.nbytes

    def stall_lines(self, destinations: list[int]) -> list[str]:
        asked = [d for d in destinations if self.tokens.load(d) == 0]
        lines = [
            f"  this node asked {len(asked)} of them for credit and awaits the answer"
            + (f" ({', '.join(map(str, asked[:16]))})" if asked else "")
        ]
        held = self.recv_slots - self.free
        lines.append(
            f"  as a receiver: {held} of {self.recv_slots} slots lent to {self.lease_count()} node(s), "
            f"{len(self.waiting)} node(s) waiting, {sum(lease.revoking for lease in self.leases.values())} revoke(s) "
            f"unanswered"
        )
        return lines
