"""A discrete-event model of one adversarial-incast trial, driving MailRail's own protocol.

Every rank is a process (a generator, stepped by the model's own event loop) holding a real
:class:`mailrail.protocol.Endpoint` and a real flow-control strategy from :mod:`mailrail.flow` (the
node-shared pools are one :class:`~mailrail.flow.node.LocalCounters` per node, which every rank of the
node updates, as the ranks of a node update shared memory): every reserve, send, deferral, drain, arrival, release and
credit message goes through the library's code, so the model cannot drift from it.  What the model
adds is what the library leaves to MPI and the machine, each an explicit mechanism:

* **CPU per message** at each end (``send_cpu_s``, ``recv_cpu_s``, ``credit_cpu_s``); with
  ``host_cores`` set, the ranks share that many cores (the virtual cluster on a 2-core host): work
  stretches by the ranks that want a core, idle ones counting ``idle_share`` each (they poll and yield);
  with ``cores_by_node``, the cores go evenly to the nodes first (a virtual node's ranks are one scheduler
  group), then to each node's ranks; otherwise each rank has its own core.
* **MPI's unexpected-message queue**: a payload that arrives when every receive slot MailRail posted
  is taken waits in MPI's memory (``unexpected_overhead_bytes`` beyond its payload), and matching a
  message costs ``match_per_entry_s`` per message waiting (list matching, Flajslik et al., ISC 2016):
  a receiver that falls behind slows down the more it falls behind.
* **Eager or rendezvous**: payloads above ``eager_limit_bytes`` send a request; the receiver's match
  sends clear-to-send, then the data moves and the sender's buffer is free.
* **Links and a switch** (:mod:`.network`), and **credit messages** as zero-byte messages on them.
* **Loss and retransmission** (:mod:`.reliability`), when the parameters bound a rank's receive context:
  messages between nodes travel numbered flows with a window; a packet that finds its receiver's context
  full is dropped, and recovered by a NAK (go-back-N) or its sender's timer.  The context is drained only by
  its rank's progress (PSM2's), at ``ingest_cpu_s`` a packet plus its eager data's copy (``copy_Bps``),
  copied again when an unexpected message is matched.  Rendezvous messages go losslessly.

The rank loop is the benchmark's: receive everything that arrived, drain deferred sends, send the
credit messages due, then send one message; a rank with nothing to do waits (it yields its core).

The event loop is SimPy's, without its event objects: events are ordered by (time, priority, the order they
were scheduled in), a process's start before anything else due at the same time, and a time is computed as
SimPy computes it (now plus a delay), so a run is the same, event for event, as it was on SimPy.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib
import itertools
import random
import time
from array import array
from collections import deque
from collections.abc import Callable, Generator
from heapq import heappop, heappush
from typing import Any

import numpy as np

from mailrail.errors import ConfigError
from mailrail.flow.base import ANSWER, KIND_MASK, FlowControl
from mailrail.flow.modes import FlowParts, NodeLayout, flow_mode
from mailrail.flow.node import LocalCounters, SharedCounters
from mailrail.protocol import NO_SLOT, Endpoint
from mailrail_tools.incast import choose_victims, rail_default, spread
from mailrail_tools.incast import destinations as incast_destinations

from .network import Network
from .params import ModelParams, ParamsError
from .reliability import ACCEPT, NO_REPLY, Packet, Reliability, SendFlow

PAYLOAD, RENDEZVOUS_REQUEST, RENDEZVOUS_DATA, CREDIT = range(4)
#: The largest tag the model's MPI carries (Open MPI's TAG_UB).
TAG_UB = (1 << 31) - 1
#: A packet sent more often than this means its flow's recovery livelocked (a bug): the model stops.
MAX_ATTEMPTS = 100_000
#: Event priorities, SimPy's: a process's start comes before the other events due at the same time.
URGENT, NORMAL = 0, 1
#: The compiled Endpoint and credit ledgers (MailRail's compiled transport runs them): the same decisions as the
#: Python specification (tests/library/test_protocol_compiled.py feeds both the same events), faster (docs: "The
#: model at scale").
COMPILED = ("mailrail._protocol", "mailrail.flow._ledger")


def _implementations() -> tuple[str, ...]:
    """The implementations of the Endpoint and strategies the model can run, the one it runs by default first:
    compiled when they were built (a source install without a C compiler has only the Python one)."""
    try:
        for module in COMPILED:
            importlib.import_module(module)
    except ImportError:
        return ("python",)
    return ("compiled", "python")


IMPLEMENTATIONS = _implementations()
IMPLEMENTATION = IMPLEMENTATIONS[0]


@dataclasses.dataclass(frozen=True)
class Workload:
    """One trial of ``bench adversarial``: every rank sends ``messages_per_rank`` datagrams, spread evenly
    over the victims (and ``partners`` ranks of its own) in its own random order."""

    ranks: int
    ranks_per_node: int
    victims: int
    messages_per_rank: int
    mode: str
    datagram_size: int = rail_default("datagram_size")
    recv_slots: int = rail_default("recv_pool_slots")
    send_slots: int = rail_default("send_pool_slots")
    credit_threshold: int = rail_default("credit_threshold")
    credits_per_pair: int | None = rail_default("credits_per_pair")
    piggyback: bool = rail_default("piggyback")
    partners: int = 0
    seed: int = 1
    receive_work_s: float = 0.0
    link_Bps: float | None = None  # the run's link rate, when it set one (else the parameters')
    victim_node_memory: int | None = None  # bytes: a victim's node ends the job past it (else the parameters')
    link_queue_bytes: int | None = None  # the run's link queue, when it set one (else switch_queue_bytes)
    time_limit_s: float | None = None  # simulated seconds the trial may take: past them it is "timeout"

    def __post_init__(self) -> None:
        flow_mode(self.mode)  # ConfigError for a mode not in the table, naming those that are
        if self.time_limit_s is not None and not self.time_limit_s > 0:
            raise ConfigError(f"time_limit_s={self.time_limit_s}: > 0 seconds, or None")
        if self.ranks < 2:
            raise ConfigError(f"ranks={self.ranks}: at least 2")
        if not 1 <= self.ranks_per_node <= self.ranks:
            raise ConfigError(f"ranks_per_node={self.ranks_per_node}: 1..ranks ({self.ranks})")
        if not 1 <= self.victims <= self.ranks:
            raise ConfigError(f"victims={self.victims}: 1..ranks ({self.ranks})")
        if self.messages_per_rank < 0:
            raise ConfigError(f"messages_per_rank={self.messages_per_rank}: >= 0")

    @property
    def nodes(self) -> int:
        return -(-self.ranks // self.ranks_per_node)


@dataclasses.dataclass
class Result:
    status: str  # "ok", "out_of_memory", "timeout" (past the workload's time limit) or "refused"
    runtime_s: float
    goodput_bps: float
    victim_peak_bytes: int  # a victim's receive and send pools, credit state and its peak of unexpected messages
    victim_unexpected_peak_bytes: int  # the peak of MPI's unexpected messages at one victim (its growth)
    victim_node_peak_bytes: int  # the most a victim's node held: its ranks' baselines and unexpected messages
    victim_messages: dict[str, float]  # messages received per victim: min, median, max (support.incast.spread)
    credit_messages: int
    messages: int
    payload_bytes: int
    wire_bytes: int
    port_peak_bytes: int
    events: int
    detail: str = ""
    dropped_packets: int = 0  # packets a full receive context lost (unseen, or their payload)
    retransmitted_packets: int = 0
    timeouts: int = 0  # retransmission timers that expired
    loss_probes: int = 0  # TCP's tail-loss probes sent
    flow_packets: int = 0  # packets that flows put on links between nodes: first sends, resends, ACKs and NAKs


class _Pool:
    """The send pool as the Endpoint sees it: slot numbers stand for the buffers (no memory needed)."""

    def __init__(self, slots: int, slot_size: int) -> None:
        self.slots, self.slot_size = slots, slot_size
        self.views: tuple[()] = ()
        self.slot_by_id: dict[int, int] = {}

    def slot_of(self, buf: object) -> int | None:
        return buf if type(buf) is int and 0 <= buf < self.slots else None


class ModelStall(RuntimeError):
    """The modelled job can make no more progress (a bug of the model or of the flow control it runs)."""


class _Stop(Exception):
    """The trial's end came up in the event queue (raised by its event, caught by the loop)."""


class _Rank:
    __slots__ = (
        "index",
        "node",
        "endpoint",
        "plan",
        "sent",
        "expected",
        "received",
        "inbox",
        "waiting_payloads",
        "unexpected_peak",
        "process",
        "asleep",
        "done_slots",
        "finished",
        "context",
        "context_bytes",
    )

    def __init__(self, index: int, node: int, endpoint: Endpoint, plan: list[int], expected: int) -> None:
        self.index, self.node, self.endpoint, self.plan = index, node, endpoint, plan
        self.sent = 0
        self.expected = expected
        self.received = 0
        self.inbox: deque[tuple[int, int, int, int, int]] = deque()  # (kind, source, tag, nbytes, sender's slot)
        self.waiting_payloads = 0  # payloads and rendezvous requests in the inbox: MPI has yet to match them
        self.unexpected_peak = 0
        self.process: Generator[float | None, None, None] | None = None  # yields its CPU time, or None to wait
        self.asleep = False  # waiting, and no wake scheduled yet
        self.done_slots: set[int] = set()  # sends completed, not yet taken off the Endpoint's ring
        self.finished = False
        self.context: deque[tuple[Packet, bool]] = deque()  # arrived, not yet taken by progress (payload kept?)
        self.context_bytes = 0


class Simulation:
    """One trial of *workload* under *params* (see the module doc); :meth:`run` returns its :class:`Result`."""

    def __init__(
        self,
        workload: Workload,
        params: ModelParams,
        *,
        progress: Callable[[str], None] | None = None,
        check_invariants: bool = False,
        drop: Callable[[int, int, int, int], bool] | None = None,
        implementation: str | None = None,
    ) -> None:
        self.workload, self.params = workload, params
        # the invariant checks read the Python strategies' state (every credit accounted for): they run on those
        self.implementation = implementation or ("python" if check_invariants else IMPLEMENTATION)
        if self.implementation not in IMPLEMENTATIONS:
            raise ValueError(f"implementation={self.implementation!r}: one of {', '.join(IMPLEMENTATIONS)}")
        if check_invariants and self.implementation != "python":
            raise ValueError("check_invariants reads the Python strategies' state: implementation='python'")
        endpoint_type = Endpoint if self.implementation == "python" else importlib.import_module(COMPILED[0]).Endpoint
        self.drop = drop  # a fixed drop pattern (tests): drop(source, dest, seq, attempt) loses that packet unseen
        if not params.flows and drop is not None:
            raise ParamsError("a drop pattern needs flows to recover its packets: flow_window_packets > 0")
        eager = min(workload.datagram_size, params.eager_limit_bytes)  # the largest payload sent eagerly
        if params.recv_context_bytes and params.recv_context_bytes < eager:
            raise ParamsError(
                f"recv_context_bytes={params.recv_context_bytes}: less than one eager datagram "
                f"({eager} bytes), so none could ever be received"
            )
        queue = workload.link_queue_bytes or params.switch_queue_bytes
        if params.drop_tail and queue < eager + params.header_bytes:
            raise ParamsError(
                f"a link queue of {queue} bytes with drop_tail=1: less than one eager datagram on the wire "
                f"({eager + params.header_bytes} bytes), so every one would be dropped"
            )
        self.progress = progress
        self.check_invariants = check_invariants
        self.cores = params.host_cores
        load = workload
        self.now = 0.0
        self.queue: list[tuple[float, int, int, Callable[..., None], tuple[Any, ...]]] = []
        self.next_id = itertools.count().__next__  # ties in time and priority go in the order scheduled
        self.waiting = 0  # ranks with nothing to do (they poll and yield: idle_share of a busy rank's CPU each)
        self.network = Network(params, load.nodes, load.link_Bps, load.link_queue_bytes)
        self.reliability = (
            Reliability(
                params.flow_window_packets,
                params.ack_interval_packets,
                params.retransmit_timeout_min_s,
                params.retransmit_timeout_max_s,
                params.retransmit_backoff,
                congestion_control=bool(params.congestion_control),
                selective=bool(params.selective_recovery),
                reno=bool(params.reno_window),
                # Linux counts its initial window in segments of bytes; the model's packets are whole messages
                initial_window=params.initial_window_bytes / (eager + params.header_bytes),
                loss_probe=params.loss_probe_s,
                rng=random.Random(workload.seed),
            )
            if params.flows
            else None
        )
        self.dropped = 0
        self.replies = 0  # ACKs and NAKs sent
        # The benchmark's victims and plans (support.incast), renumbered so that the victims are 0..V-1: senders'
        # credit tables need only cover the ranks they send to (O(victims) per sender, not O(ranks)).
        victims = choose_victims(load.ranks, load.victims, load.seed)
        chosen = set(victims)
        order = victims + [r for r in range(load.ranks) if r not in chosen]
        index_of = np.empty(load.ranks, dtype=np.int64)
        index_of[order] = np.arange(load.ranks)
        self.node_of = [r // load.ranks_per_node for r in order]
        self.node_map = array("i", self.node_of)
        self.victim_nodes = {self.node_of[i] for i in range(load.victims)}
        destinations = load.victims if load.partners == 0 else load.ranks
        plans = [
            index_of[incast_destinations(rank, load.ranks, victims, load.messages_per_rank, load.seed, load.partners)]
            for rank in order
        ]
        expected = np.bincount(np.concatenate(plans), minlength=load.ranks).tolist()
        plans_as_lists = [plan.tolist() for plan in plans]
        self.mode = flow_mode(load.mode)
        self.budget = self.mode.budget(
            recv_slots=load.recv_slots,
            ranks=load.ranks,
            nodes=load.nodes,
            credit_threshold=load.credit_threshold,
            credits_per_pair=load.credits_per_pair,
        )
        shared: dict[int, dict[str, SharedCounters]] = {}
        self.ranks: list[_Rank] = []
        for index in range(load.ranks):
            node = self.node_of[index]
            receives = expected[index] > 0
            flow = self._flow(node, destinations, load.ranks if receives else destinations, shared)
            endpoint = endpoint_type(
                index,
                load.ranks,
                _Pool(load.send_slots, load.datagram_size),  # type: ignore[arg-type]  # (slots, slot_size, slot_of)
                flow,
                tag_ub=TAG_UB,
                head_patience=1 << 30,
                credit_poll_interval=1,
                idle_spins=1,
                recv_slots=1,  # the model's receive slots are its own (matching costs); one ring slot, reused
            )
            endpoint.post_parked()
            self.ranks.append(_Rank(index, node, endpoint, plans_as_lists[index], expected[index]))
        self.node_ranks: dict[int, list[_Rank]] = {}
        for rank in self.ranks:
            self.node_ranks.setdefault(rank.node, []).append(rank)
        self.node_unexpected = [0] * load.nodes  # bytes of unexpected messages per node
        self.by_node = bool(params.cores_by_node)
        self.node_count = load.nodes  # (a property of the workload's: computed once, not on each step)
        self.node_size = [len(self.node_ranks.get(node, ())) for node in range(self.node_count)]
        self.node_waiting = [0] * load.nodes  # each node's waiting ranks (cores_by_node)
        self.unfinished = load.ranks
        self.ending = False  # the trial's end is scheduled (every rank finished, out of memory, or time is up)
        self.delivered = 0
        self.total_messages = sum(expected)
        self.events = 0
        self.oom: tuple[float, str] | None = None
        self.node_peak = 0  # the most memory a victim's node held: its ranks' baselines and unexpected messages
        self._last_report = time.monotonic()

    def _flow(
        self, node: int, destinations: int, table: int, shared: dict[int, dict[str, SharedCounters]]
    ) -> FlowControl:
        """A rank's strategy on *node*, its tables over *table* ranks, its node's counters over *destinations*
        (shared by the node's modelled ranks: one process)."""
        load, mode = self.workload, self.mode
        parts = FlowParts(
            ranks=table, budget=self.budget, recv_slots=load.recv_slots, piggyback=load.piggyback, max_tag=TAG_UB
        )
        if mode.uses_node_memory:
            if node not in shared:
                shared[node] = mode.make_node_counters(
                    self.budget, lambda name, initial: LocalCounters(destinations, initial)
                )
            # a compiled ledger reads the node of a rank from this map, and the counters at their address
            layout = NodeLayout(load.nodes, self.node_of.__getitem__, map_address=self.node_map.buffer_info()[0])
            parts = dataclasses.replace(
                parts, layout=layout, counters=shared[node], owner=(shared[node], self.node_map)
            )
        return mode.strategy(self.implementation, parts)

    # -- running -------------------------------------------------------------------------------------

    def run(self) -> Result:
        load = self.workload
        for rank in self.ranks:
            rank.process = self._rank_loop(rank)
            heappush(self.queue, (0.0, URGENT, self.next_id(), self._step, (rank,)))
        if load.time_limit_s is not None:
            self._at(load.time_limit_s, self._end)
        try:
            self._run_events()
        except _Stop:
            pass
        else:
            stuck = [rank.index for rank in self.ranks if not rank.finished][:8]
            raise ModelStall(f"the modelled job stalled at {self.now:.6f} s: ranks {stuck} never finished")
        runtime = self.now
        victims = self.ranks[: load.victims]
        payload = sum(rank.received for rank in self.ranks) * load.datagram_size
        unexpected_peak = max(rank.unexpected_peak for rank in victims)
        flow_bytes = max(rank.endpoint.flow.credit_state_bytes() for rank in victims)
        pools = (load.recv_slots + load.send_slots) * load.datagram_size
        status, detail = "ok", ""
        if self.oom is not None:
            status, detail = "out_of_memory", self.oom[1]
        elif self.unfinished:
            status = "timeout"
            detail = f"{self.unfinished} rank(s) unfinished after the time limit, {load.time_limit_s} s simulated"
        elif self.check_invariants:
            self._check_end()
        return Result(
            status=status,
            runtime_s=runtime,
            goodput_bps=payload * 8 / runtime if runtime > 0 and status == "ok" else 0.0,
            victim_peak_bytes=pools + flow_bytes + unexpected_peak,
            victim_unexpected_peak_bytes=unexpected_peak,
            victim_node_peak_bytes=self.node_peak,
            victim_messages=spread([rank.received for rank in self.ranks[: load.victims]]),
            credit_messages=sum(rank.endpoint.credit_messages_sent for rank in self.ranks),
            messages=self.delivered,
            payload_bytes=payload,
            wire_bytes=self.network.wire_bytes,
            port_peak_bytes=int(self.network.port_peak_bytes),
            events=self.events,
            detail=detail,
            dropped_packets=self.dropped,
            retransmitted_packets=self.reliability.retransmitted if self.reliability else 0,
            timeouts=self.reliability.timeouts if self.reliability else 0,
            loss_probes=self.reliability.loss_probes if self.reliability else 0,
            flow_packets=(
                self.reliability.numbered + self.reliability.retransmitted + self.replies if self.reliability else 0
            ),
        )

    def _run_events(self) -> None:
        """Every event in order until the queue is empty, or the trial's end raises :class:`_Stop`."""
        queue = self.queue
        while queue:
            self.now, _, _, action, args = heappop(queue)
            action(*args)

    def _end(self) -> None:
        """The trial ends once the events already due now have run (SimPy's ``run(until=event)``)."""
        if not self.ending:
            self.ending = True
            heappush(self.queue, (self.now, NORMAL, self.next_id(), self._stop, ()))

    @staticmethod
    def _stop() -> None:
        raise _Stop

    def _step(self, rank: _Rank) -> None:
        """*rank*'s process runs until it asks for CPU time (scheduled as its next step) or waits (asleep)."""
        assert rank.process is not None
        seconds = next(rank.process)
        if seconds is None:
            rank.asleep = True
        else:
            heappush(self.queue, (self.now + seconds, NORMAL, self.next_id(), self._step, (rank,)))

    def _work(self, seconds: float, node: int) -> float:
        """*seconds* of CPU of a rank on *node*, as its process yields them.  On a host of ``host_cores`` cores,
        processor sharing: it takes longer by the ranks that want a core now (the busy ones, and ``idle_share``
        of each idle one, which polls and yields) over the cores, counted as it starts.  With
        ``cores_by_node``, the cores are first split evenly among the nodes (each node's ranks are one
        scheduler group, every node's always runnable: its idle ranks poll), then among the node's ranks."""
        self.events += 1
        cores = self.cores
        if cores is not None:
            if self.by_node:
                waiting = self.node_waiting[node]
                load = (self.node_size[node] - waiting + self.params.idle_share * waiting) * self.node_count
            else:
                waiting = self.waiting
                load = len(self.ranks) - waiting + self.params.idle_share * waiting
            if load > cores:
                seconds *= load / cores
        return seconds

    def _rank_loop(self, rank: _Rank) -> Generator[float | None, None, None]:
        send_cpu_s, credit_cpu_s = self.params.send_cpu_s, self.params.credit_cpu_s
        datagram_size = self.workload.datagram_size
        work, node = self._work, rank.node
        endpoint, plan = rank.endpoint, rank.plan
        planned = len(plan)
        silent = endpoint.flow.credits_change_silently  # a credit wakes only the ranks it could serve
        while True:
            busy = False
            if rank.context:
                yield work(self._ingest(rank), node)
            while rank.inbox:
                busy = True
                item = rank.inbox.popleft()
                yield work(self._matched(rank, item), node)
                self._received(rank, item)
                if rank.context:  # each receive is a progress call: it takes what arrived meanwhile
                    yield work(self._ingest(rank), node)
            if endpoint.deferred.total:
                for dest, nbytes, slot, tag, _ in list(endpoint.drain_ready()):
                    busy = True
                    self._transmit(rank, dest, nbytes, slot, tag)
                    yield work(send_cpu_s, node)
            while endpoint.credit_messages_due():
                busy = True
                target, tag = endpoint.next_credit_message()
                yield work(credit_cpu_s, node)
                self._send_credit(rank, target, tag)
            if rank.sent < planned:
                slot = endpoint.reserve()
                if slot != NO_SLOT:
                    dest = plan[rank.sent]
                    rank.sent += 1
                    dest, nbytes, slot, tag, _ = endpoint.submit(dest, slot, datagram_size)
                    if slot != NO_SLOT:
                        self._transmit(rank, dest, nbytes, slot, tag)
                    yield work(send_cpu_s, node)
                    continue
            if not rank.finished and self._finished(rank):
                rank.finished = True
                self.unfinished -= 1
                if self.unfinished == 0:
                    self._end()
            if not busy and not rank.inbox and not endpoint.credit_messages_due() and not rank.context:
                if silent and endpoint.deferred.total and self._could_drain(endpoint):
                    continue  # its drain's window (NODE_DRAIN_WINDOW) had not reached the destination with credit
                self.waiting += 1
                self.node_waiting[node] += 1
                yield None  # asleep until a wake
                self.waiting -= 1
                self.node_waiting[node] -= 1

    def _finished(self, rank: _Rank) -> bool:
        return rank.sent == len(rank.plan) and rank.endpoint.pending_sends() == 0 and rank.received == rank.expected

    def _offer_credits(self, node: int, dest: int) -> None:
        """*node*'s pool of credits for *dest* grew (node-shared credits change silently): its waiting ranks with
        sends queued for *dest* look again, in rank order, one for each credit (each takes one a pass, as many
        ranks polling the pool at once would) and one more, which finds the pool empty (adaptive credits: it asks
        for more).  The others would find nothing: they sleep on (waking every waiting rank of the node made many
        steps a message at thousands of ranks, most of them finding nothing)."""
        mates = self.node_ranks[node]
        available = mates[0].endpoint.flow.available(dest) or 0  # (a node-shared pool is never unlimited)
        woken = 0
        for mate in mates:
            if mate.asleep and mate.endpoint.deferred.has_queue(dest):
                self._wake(mate)
                woken += 1
                if woken > available:
                    return

    @staticmethod
    def _could_drain(endpoint: Endpoint) -> bool:
        """Whether a destination *endpoint* has sends queued for has credits in its node's pool now (read only)."""
        available = endpoint.flow.available
        return any(available(dest) for dest in endpoint.deferred.queues)

    def _wake(self, rank: _Rank) -> None:
        if rank.asleep:
            rank.asleep = False
            heappush(self.queue, (self.now, NORMAL, self.next_id(), self._step, (rank,)))

    # -- the sender side -----------------------------------------------------------------------------

    def _transmit(self, rank: _Rank, dest: int, nbytes: int, slot: int, tag: int) -> None:
        params = self.params
        source_node, dest_node = rank.node, self.node_of[dest]
        if nbytes > params.eager_limit_bytes:  # rendezvous: only the request goes now
            _, arrival = self.network.transfer(self.now, source_node, dest_node, 0)
            self._at(arrival, self._arrive, self.ranks[dest], (RENDEZVOUS_REQUEST, rank.index, tag, nbytes, slot))
            return
        self._send_eager(rank, self.ranks[dest], (PAYLOAD, rank.index, tag, nbytes, slot))

    def _send_eager(self, rank: _Rank, dest: _Rank, item: tuple[int, int, int, int, int]) -> None:
        """A payload or credit message of ``item[3]`` bytes, whole: over a flow between nodes when the parameters
        have flows, else straight to *dest*; a payload's send completes when it has left."""
        if self.reliability is not None and rank.node != dest.node:
            flow = self.reliability.send_flow(rank.index, dest.index)
            self._put_on_wire(rank, dest, flow, self.reliability.submit(flow, Packet(item, item[3]), self.now))
            return
        left, arrival = self.network.transfer(self.now, rank.node, dest.node, item[3])
        if item[0] == PAYLOAD:
            self._at(left, self._send_completed, rank, item[4])
        self._at(arrival, self._arrive, dest, item)

    def _send_completed(self, rank: _Rank, slot: int) -> None:
        """A send's buffer is free: the Endpoint takes completed sends off its ring oldest first, as the
        transport tests the oldest."""
        done = rank.done_slots
        done.add(slot)
        endpoint = rank.endpoint
        oldest = endpoint.oldest_in_flight()
        while oldest in done:  # (NO_SLOT, with nothing in flight, never is)
            done.discard(oldest)
            endpoint.oldest_completed()
            oldest = endpoint.oldest_in_flight()
        # A waiting rank that still has sends to make waits for a slot; one that has not, for its last completion.
        if rank.sent < len(rank.plan) or endpoint.pending_sends() == 0:
            self._wake(rank)

    def _send_credit(self, rank: _Rank, target: int, tag: int) -> None:
        self._send_eager(rank, self.ranks[target], (CREDIT, rank.index, tag, 0, NO_SLOT))

    # -- flows between nodes: loss and its recovery (only with params.flows) ---------------------------

    def _put_on_wire(self, rank: _Rank, dest: _Rank, flow: SendFlow, packets: list[Packet]) -> None:
        now, network = self.now, self.network
        for index, packet in enumerate(packets):
            # A full uplink queue (drop-tail only): this packet and those behind it wait.
            if network.drop_tail and not network.uplink_has_room(now, rank.node, packet.nbytes):
                assert self.reliability is not None
                self.reliability.held_back(flow, packets[index:])
                if not flow.unacked:  # no ACK will come to let them out: the probe timer will (at the RTO)
                    self._at(now + flow.timeout, self._resume, rank, dest, flow)
                break
            left, arrival = network.send(now, rank.node, dest.node, packet.nbytes, droppable=True)
            if packet.attempts > MAX_ATTEMPTS:
                raise ModelStall(
                    f"a packet from rank {rank.index} to rank {dest.index} (sequence {packet.seq}) was sent "
                    f"{MAX_ATTEMPTS} times at {now:.3f} s: its flow recovers nothing"
                )
            if packet.attempts == 1 and packet.item[0] == PAYLOAD:  # its first departure completes the send
                self._at(left, self._send_completed, rank, packet.item[4])
            if arrival is None:  # a drop-tail queue lost it
                self.dropped += 1
            else:
                self._at(arrival, self._land, dest, packet)
        self._arm(rank, dest, flow)

    def _arm(self, rank: _Rank, dest: _Rank, flow: SendFlow) -> None:
        """A timer event at the flow's next deadline, unless one is due before it (a later one is then stale)."""
        assert self.reliability is not None
        due = self.reliability.next_timer(flow)
        if flow.unacked and (flow.timer_at is None or due < flow.timer_at):
            flow.timer_at = due
            self._at(due, self._timer, rank, dest, flow, due)

    def _timer(self, rank: _Rank, dest: _Rank, flow: SendFlow, at: float) -> None:
        """The flow's timers: a tail-loss probe sends again what the receiver has not taken (TCP); an expired
        retransmission timer sends an ERR_CHK asking the receiver what it has (PSM2), or the sender sends again
        what the receiver does not hold (TCP's RTO, selective recovery)."""
        reliability = self.reliability
        assert reliability is not None
        if flow.timer_at != at:
            return
        flow.timer_at = None
        if reliability.probe_due(flow, self.now):
            self._put_on_wire(
                rank, dest, flow, reliability.probe(flow, reliability.receive_flow(rank.index, dest.index), self.now)
            )
            return
        if reliability.expired(flow, self.now):
            if reliability.selective:
                again = reliability.timed_out(flow, reliability.receive_flow(rank.index, dest.index), self.now)
                self._put_on_wire(rank, dest, flow, again)
            else:
                _, arrival = self.network.transfer(self.now, rank.node, dest.node, 0)
                self._at(arrival, self._error_check, rank, dest, flow.unacked[-1].seq)
        self._arm(rank, dest, flow)

    def _error_check(self, rank: _Rank, dest: _Rank, newest: int) -> None:
        assert self.reliability is not None
        reply, seq = self.reliability.error_check(self.reliability.receive_flow(rank.index, dest.index), newest)
        self._reply(dest, rank, reply, seq)

    def _reply(self, rank: _Rank, sender: _Rank, reply: int, seq: int) -> None:
        """*rank* sends *sender* an ACK or NAK of *seq*."""
        self.replies += 1
        _, arrival = self.network.transfer(self.now, rank.node, sender.node, 0)
        self._at(arrival, self._flow_answer, sender, rank, reply, seq)

    def _land(self, rank: _Rank, packet: Packet) -> None:
        """*packet* reaches *rank*'s receive context: kept, kept without its payload, or dropped unseen."""
        params = self.params
        full = params.recv_context_entries and len(rank.context) >= params.recv_context_entries
        if full or (self.drop is not None and self.drop(packet.item[1], rank.index, packet.seq, packet.attempts)):
            self.dropped += 1
            return
        kept = not params.recv_context_bytes or rank.context_bytes + packet.nbytes <= params.recv_context_bytes
        if kept:
            rank.context_bytes += packet.nbytes
        else:
            self.dropped += 1
        rank.context.append((packet, kept))
        self._wake(rank)

    def _ingest(self, rank: _Rank) -> float:
        """*rank*'s progress takes every packet out of its receive context: accepted ones go to MPI's queue
        (copied; unexpected ones into MPI's own buffers), the rest are discarded; ACKs and NAKs go back.  The CPU
        time it took."""
        reliability, params = self.reliability, self.params
        assert reliability is not None
        cost = 0.0
        replies: dict[int, tuple[int, int]] = {}  # one per flow a pass, the last decided
        while rank.context:
            packet, kept = rank.context.popleft()
            if kept:
                rank.context_bytes -= packet.nbytes
            cost += params.ingest_cpu_s
            source = packet.item[1]
            flow = reliability.receive_flow(source, rank.index)
            verdict, reply, seq = reliability.receive(flow, packet, kept)
            if verdict == ACCEPT:
                for accepted in [packet, *reliability.take_ready(flow)]:  # with what it put in order
                    if params.copy_Bps:
                        cost += accepted.nbytes / params.copy_Bps
                    self._arrive(rank, accepted.item)
            if reply != NO_REPLY:
                replies[source] = (reply, seq)
        for source, (reply, seq) in replies.items():
            self._reply(rank, self.ranks[source], reply, seq)
        return cost

    def _flow_answer(self, rank: _Rank, dest: _Rank, reply: int, seq: int) -> None:
        assert self.reliability is not None
        flow = self.reliability.send_flow(rank.index, dest.index)
        receiver = self.reliability.receive_flow(rank.index, dest.index)
        delay, again = self.reliability.answered(flow, reply, seq, self.now, receiver)
        self._put_on_wire(rank, dest, flow, again)
        if delay:
            self._at(self.now + delay, self._resume, rank, dest, flow)

    def _resume(self, rank: _Rank, dest: _Rank, flow: SendFlow) -> None:
        assert self.reliability is not None
        self._put_on_wire(rank, dest, flow, self.reliability.resume(flow, self.now))

    def _at(self, when: float, action: Callable[..., None], *args: Any) -> None:
        """*action* at *when* (at once if past), as SimPy's timeout of the delay till then: now plus that delay."""
        self.events += 1
        delay = when - self.now
        heappush(self.queue, (self.now + (delay if delay > 0.0 else 0.0), NORMAL, self.next_id(), action, args))

    # -- the receiver side ---------------------------------------------------------------------------

    def _arrive(self, rank: _Rank, item: tuple[int, int, int, int, int]) -> None:
        rank.inbox.append(item)
        if item[0] == PAYLOAD or item[0] == RENDEZVOUS_REQUEST:
            rank.waiting_payloads += 1
            unexpected = self._unexpected(rank)
            if unexpected > 0:
                size = (item[3] if item[0] == PAYLOAD else 0) + self.params.unexpected_overhead_bytes
                nbytes = unexpected * size
                if nbytes > rank.unexpected_peak:
                    rank.unexpected_peak = nbytes
                self.node_unexpected[rank.node] += size
                self._check_memory(rank)
        self._wake(rank)

    def _unexpected(self, rank: _Rank) -> int:
        """Payloads waiting in MPI beyond the receive slots MailRail keeps posted (its free ones)."""
        posted = self.workload.recv_slots - rank.endpoint.held
        return rank.waiting_payloads - posted

    def _check_memory(self, rank: _Rank) -> None:
        if rank.node not in self.victim_nodes:
            return
        used = len(self.node_ranks[rank.node]) * self.params.rank_baseline_bytes + self.node_unexpected[rank.node]
        if used > self.node_peak:
            self.node_peak = used
        cap = self.workload.victim_node_memory or self.params.node_memory_bytes
        if cap and used > cap and self.oom is None:
            self.oom = (self.now, f"node {rank.node} passed its {cap} bytes at {self.now:.3f} s")
            self._end()

    def _matched(self, rank: _Rank, item: tuple[int, int, int, int, int]) -> float:
        """The CPU time *rank* takes to receive *item* (then :meth:`_received`): a payload leaves MPI's queue
        as it is matched."""
        params = self.params
        kind, _, _, nbytes, _ = item
        if kind == CREDIT:
            return params.credit_cpu_s
        matching = 0.0
        if kind != RENDEZVOUS_DATA:  # the data of a rendezvous has its receive matched already
            unexpected = self._unexpected(rank)
            rank.waiting_payloads -= 1
            if unexpected > 0:
                self.node_unexpected[rank.node] -= (nbytes if kind == PAYLOAD else 0) + params.unexpected_overhead_bytes
                matching = params.match_per_entry_s * unexpected
                if params.copy_Bps and kind == PAYLOAD:  # out of MPI's buffer into the receive slot: a second copy
                    matching += nbytes / params.copy_Bps
        if kind == RENDEZVOUS_REQUEST:
            return matching + params.credit_cpu_s
        return params.recv_cpu_s + matching + self.workload.receive_work_s

    def _received(self, rank: _Rank, item: tuple[int, int, int, int, int]) -> None:
        """*rank* has received *item*: its Endpoint takes it."""
        kind, source, tag, nbytes, slot = item
        endpoint = rank.endpoint
        if kind == CREDIT:
            endpoint.credits_arrived(source, tag)
            if endpoint.flow.credits_change_silently and tag & KIND_MASK <= ANSWER:  # the node's pool for *source* grew
                self._offer_credits(rank.node, source)
            return
        if kind == RENDEZVOUS_REQUEST:  # matched: clear-to-send goes back, the data follows
            sender = self.ranks[source]
            _, cts = self.network.transfer(self.now, rank.node, sender.node, 0)
            left, arrival = self.network.transfer(cts, sender.node, rank.node, nbytes)
            self._at(left, self._send_completed, sender, slot)
            self._at(arrival, self._arrive, rank, (RENDEZVOUS_DATA, source, tag, nbytes, slot))
            return
        endpoint.head_arrived()
        message = endpoint.arrived(source, tag, nbytes, 0, None)
        rank.received += 1
        self.delivered += 1
        endpoint.release(message)
        if self.check_invariants:
            flow = endpoint.flow
            if self.mode.has_credits and flow.unreturned_total > self.workload.recv_slots:
                raise AssertionError(f"rank {rank.index}: {flow.unreturned_total} unreturned > receive slots")
        if self.progress is not None and self.delivered % 20000 == 0:
            now = time.monotonic()
            if now - self._last_report > 5:
                self._last_report = now
                self.progress(f"{self.delivered}/{self.total_messages} messages, {self.now:.3f} s simulated")

    def _check_end(self) -> None:
        """Conservation, once the last credit messages have landed: everything sent arrived exactly once,
        and every credit is back with its sender or accounted for at its receiver."""
        self._run_events()  # what is still in the air lands; idle ranks wait on wakes that never come
        sent = sum(rank.endpoint.messages_sent for rank in self.ranks)
        received = sum(rank.endpoint.messages_received for rank in self.ranks)
        planned = sum(len(rank.plan) for rank in self.ranks)
        if not sent == received == planned:
            raise AssertionError(f"planned {planned}, sent {sent}, received {received}")
        for rank in self.ranks:
            if rank.inbox or rank.context or rank.endpoint.deferred.total or rank.endpoint.in_flight:
                raise AssertionError(f"rank {rank.index} ended with messages left: {list(rank.inbox)[:4]}")
        if self.reliability is not None:
            self.reliability.check_at_rest()
        mode = self.mode
        for receiver in (rank for rank in self.ranks if rank.expected):
            # who holds credits for the receiver: each node's pool (one rank's view of it), or each other rank
            holders = (
                {node: mates[0].endpoint.flow for node, mates in self.node_ranks.items()}
                if mode.uses_node_memory
                else {sender.index: sender.endpoint.flow for sender in self.ranks if sender is not receiver}
            )
            mode.check_at_rest(receiver.endpoint.flow, receiver.index, holders, self.budget, self.workload.recv_slots)


def simulate(
    workload: Workload,
    params: ModelParams,
    *,
    progress: Callable[[str], None] | None = None,
    check_invariants: bool = False,
    drop: Callable[[int, int, int, int], bool] | None = None,
    implementation: str | None = None,
) -> Result:
    """One trial of *workload* under *params*; a mode MailRail would refuse for it is reported "refused".
    *implementation*: the Endpoint's and strategies' (:data:`IMPLEMENTATIONS`; default the compiled one where
    built, the Python one with *check_invariants*): each gives the same result."""
    # A run holds millions of live objects (ranks, events): the cyclic collector would walk them over and
    # over, a large part of a run's time.  What a run leaves is collected once it ends.
    collecting = gc.isenabled()
    gc.disable()
    try:
        try:
            simulation = Simulation(
                workload,
                params,
                progress=progress,
                check_invariants=check_invariants,
                drop=drop,
                implementation=implementation,
            )
        except ConfigError as error:
            return Result("refused", 0.0, 0.0, 0, 0, 0, spread([]), 0, 0, 0, 0, 0, 0, detail=str(error))
        return simulation.run()
    finally:
        if collecting:
            gc.enable()
