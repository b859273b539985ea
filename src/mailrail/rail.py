"""The MPI transport: a thin layer that moves bytes for :class:`~mailrail.protocol.Endpoint`.

Payloads travel on a duplicate of the user's communicator with wildcard
receives; credit returns travel as zero-byte messages (count in the tag) on a
second duplicate that never carries payload.  Every per-call loop is bounded:
receives are polled at the head of a ring in posting order (wildcard receives
on one communicator match in that order), sends a few at a time from the
oldest, so a call costs O(1) whatever the number of posted requests.
"""

from __future__ import annotations

import os
import time
import warnings
from collections import deque
from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from . import fastpath
from .config import Config
from .errors import (BufferOwnershipError, ConfigError, FinalizedError, MailRailError, ReleaseError,
                     UndeliveredError, UndeliveredWarning)
from .flow import NodeCredits, RankCredits, Unconstrained, credit_budget
from .flow.base import FlowControl
from .nodes import NodeTopology, SharedWindowCounters, resolve_atomics
from .pool import SlotPool
from .protocol import Endpoint
from .quiescence import TerminationDetector

#: Most in-flight sends reclaimed per progress call, oldest first.
SEND_TEST_WINDOW = 8
#: Progress calls an unfinished oldest send may block reclaiming before it moves to the back
#: (a rendezvous send to a slow receiver must not pin the whole send pool).
SEND_HEAD_PATIENCE = 64
#: In credit modes without deferred sends, credit messages are polled every this many calls:
#: every MPI test drives progress and contends for the shared-memory queues, so test less.
CREDIT_POLL_INTERVAL = 8
#: Posted zero-byte receives for credit messages.
CREDIT_RECEIVES = 8
#: Consecutive empty receive() calls before an idle rank yields the core (or sleeps): soon, so
#: that on an oversubscribed machine the rank that has work runs (credit modes of the incast
#: benchmark, 16 ranks on 2 cores: 1.5x the goodput of 16 spins).
IDLE_SPINS = 4


class PyMessage:
    """An arrived message: ``data`` is a read-only view of ``nbytes`` bytes in the receive pool.

    Valid until :meth:`MailRail.release_receive_buffer`; copy what must outlive it.
    """

    __slots__ = ("source", "nbytes", "data", "_slot", "_owner")

    def __init__(self, source: int, nbytes: int, data: np.ndarray, slot: int, owner: object) -> None:
        self.source = source
        self.nbytes = nbytes
        self.data = data
        self._slot = slot
        self._owner = owner

    def __repr__(self) -> str:
        state = "released" if self._slot < 0 else f"slot {self._slot}"
        return f"Message(source={self.source}, nbytes={self.nbytes}, {state})"


#: One message type for both paths: the compiled one when it is built (same fields, same repr).
Message = fastpath.message_type() or PyMessage


class MailRail:
    """Asynchronous, out-of-order, fire-and-forget messaging with credit-based flow control.

    Collective over *comm* (default ``COMM_WORLD``) at construction and at
    :meth:`finalize`.  Keyword arguments override ``MAILRAIL_*`` environment
    variables (see :class:`~mailrail.config.Config`).
    """

    def __init__(self, comm: MPI.Comm | None = None, **options: Any) -> None:
        self.config = config = Config.from_env(**options)
        compiled = self._compiled_path_unavailable() is None
        comm = MPI.COMM_WORLD if comm is None else comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.datagram_size = config.datagram_size
        self._finalized = False
        self._data = comm.Dup()
        self._credit = comm.Dup()
        self._control = comm.Dup()  # collectives of barrier(): never mixed with traffic
        self._data.Set_name("mailrail-data")
        self._credit.Set_name("mailrail-credit")
        self._control.Set_name("mailrail-control")
        self._submitted = 0  # messages the application handed to send(), deferred ones included
        # TAG_UB is only guaranteed on COMM_WORLD (the standard promises 32767 at least).
        self.tag_ub = int(comm.Get_attr(MPI.TAG_UB) or MPI.COMM_WORLD.Get_attr(MPI.TAG_UB))
        self._topology: NodeTopology | None = None
        self._shared: SharedWindowCounters | None = None
        self.flow = self._make_flow_control(comm, compiled)

        self._send_pool = SlotPool(config.send_pool_slots, config.datagram_size)
        self._endpoint = Endpoint(self.rank, self.size, self._send_pool, self.flow,
                                  stall_timeout=config.stall_timeout)
        self._send_views = self._send_pool.views
        self._inflight: deque[tuple[MPI.Request, int]] = deque()
        self._last_send: list[tuple[int, int, MPI.Prequest | None]] = [(-1, -1, None)] * config.send_pool_slots
        self._head_waits = 0
        self._credit_polls = 0
        self._uses_credits = config.flow_control != "none"
        self._credit_inflight: deque[MPI.Request] = deque()

        self._recv_pool = SlotPool(config.recv_pool_slots, config.datagram_size)
        self._recv_views = [v[:] for v in self._recv_pool.views]
        for view in self._recv_views:
            view.flags.writeable = False
        self._posted_receives = config.posted_receives
        # The Python path's receive ring (the compiled path keeps its own).
        self._recv_requests: list[MPI.Prequest] = []
        self._posted: deque[int] = deque()
        self._unposted: list[int] = []
        self._engine = self._make_engine() if compiled else None
        if self._engine is not None:
            # The four per-message calls go straight to compiled code: no interpreter frame per message.
            engine = self._engine
            self.reserve_send_buffer = engine.reserve_send_buffer
            self.send = engine.send
            self.receive = engine.receive
            self.release_receive_buffer = engine.release_receive_buffer
            self.pending_sends = engine.pending_sends
        else:
            # Receive pool: one persistent wildcard receive per slot, posted in ring order.
            self._recv_requests = [self._data.Recv_init(view, MPI.ANY_SOURCE, MPI.ANY_TAG)
                                   for view in self._recv_pool.views]
            for slot in range(self._posted_receives):
                self._post(slot)
            # Slots beyond MAILRAIL_MAX_RECVS wait here, unposted, until a posted one is taken.
            self._unposted = list(range(config.recv_pool_slots - 1, self._posted_receives - 1, -1))
        self._held = 0  # messages handed to the application, not yet released
        self.held_high_water = 0
        self._status = MPI.Status()

        # Credit messages: zero-byte wildcard receives in ring order (the engine keeps its own).
        self._empty = np.empty(0, np.uint8)
        self._credit_requests: deque[MPI.Prequest] = deque()
        if self._engine is None and self._uses_credits:
            self._credit_requests.extend(self._credit.Recv_init(self._empty, MPI.ANY_SOURCE, MPI.ANY_TAG)
                                         for _ in range(CREDIT_RECEIVES))
            for request in self._credit_requests:
                request.Start()
        self._idle_calls = 0
        self._idle_sleep = config.idle_sleep_us * 1e-6
        self._trace = None
        if config.trace:
            from .tracing import TraceWriter
            self._trace = TraceWriter.for_rank(config.trace, self.rank)

    def _compiled_path_unavailable(self) -> str | None:
        """None when the compiled message path runs; else why this rail takes the Python path."""
        config = self.config
        if config.engine == "python":
            return "MAILRAIL_ENGINE=python"
        if config.trace:
            return "MAILRAIL_TRACE records every send on the Python path"
        reason = fastpath.unavailable_reason()
        if reason is None and config.flow_control == "node" and resolve_atomics(config.atomics) != "cpu":
            reason = "node credits updated through MPI atomics (MAILRAIL_ATOMICS=mpi) run on the Python path"
        if reason is not None and config.engine == "compiled":
            raise ConfigError(f"MAILRAIL_ENGINE=compiled, but {reason}")
        return reason

    def _make_engine(self):
        """The compiled message path: the four per-message calls, and in credit modes the ledger's accounting."""
        config = self.config
        endpoint, send_pool, recv_pool = self._endpoint, self._send_pool, self._recv_pool
        return fastpath.make_engine(
            self._data, slot_size=config.datagram_size, size=self.size,
            send_views=list(send_pool.views), send_base=send_pool.slab.ctypes.data,
            slot_by_id=send_pool.slot_by_id, slot_of=send_pool.slot_of,
            recv_views=list(self._recv_views), recv_base=recv_pool.slab.ctypes.data,
            posted_receives=config.posted_receives,
            check_rank=endpoint.checked_rank, check_size=endpoint.checked_size,
            errors=(FinalizedError, BufferOwnershipError, ReleaseError, MPI.Exception),
            tuning={"send_test_window": SEND_TEST_WINDOW, "head_patience": SEND_HEAD_PATIENCE,
                    "idle_spins": IDLE_SPINS, "idle_sleep_ns": int(config.idle_sleep_us * 1000),
                    "progress_interval": CREDIT_POLL_INTERVAL, "credit_receives": CREDIT_RECEIVES},
            credits={"ledger": self.flow, "comm": fastpath.handle(self._credit), "tag_ub": self.tag_ub,
                     "admit": self._engine_admit, "mark_ready": endpoint.deferred.mark_ready,
                     "drain": self._engine_drain} if self._uses_credits else None)

    # The compiled path's calls into the Endpoint (credit modes), only for sends that wait for credit.

    def _engine_admit(self, dest: int, slot: int, nbytes: int) -> int:
        """The tag to send with now, or -1: deferred until credit arrives."""
        endpoint = self._endpoint
        return endpoint.transmitting(dest, nbytes) if endpoint.admit(dest, slot, nbytes) else -1

    def _engine_drain(self) -> list[tuple[int, int, int, int]]:
        """The deferred sends that may leave now, with their tags."""
        endpoint = self._endpoint
        ready = [(dest, slot, nbytes, endpoint.transmitting(dest, nbytes)) for dest, slot, nbytes in endpoint.drain()]
        if endpoint.stall_timeout:
            endpoint.check_stall(time.monotonic())
        return ready

    def _make_flow_control(self, comm: MPI.Comm, compiled: bool) -> FlowControl:
        """The flow-control strategy; on the compiled path the ledger that makes the same decisions in C."""
        config = self.config
        if config.flow_control == "none":
            return Unconstrained()
        if config.flow_control == "rank":
            budget = credit_budget("rank", recv_slots=config.recv_pool_slots, ranks=self.size, nodes=0,
                                   credit_threshold=config.credit_threshold,
                                   credits_per_pair=config.credits_per_pair)
            if compiled:
                return fastpath.credit_ledger("rank", self.size, budget.credits_per_pair, budget.return_threshold,
                                              piggyback=config.piggyback, max_tag=self.tag_ub)
            return RankCredits(self.size, budget.credits_per_pair, budget.return_threshold,
                               piggyback=config.piggyback, max_tag=self.tag_ub)
        self._topology = topology = NodeTopology(comm, config.ranks_per_node)
        budget = credit_budget("node", recv_slots=config.recv_pool_slots, ranks=self.size,
                               nodes=topology.nodes, credit_threshold=config.credit_threshold,
                               credits_per_pair=config.credits_per_pair)
        self._shared = SharedWindowCounters(topology.comm, self.size, budget.credits_per_pair, config.atomics)
        if compiled:
            return fastpath.credit_ledger(
                "node", self.size, budget.credits_per_pair, budget.return_threshold, nodes=topology.nodes,
                ranks_per_node=config.ranks_per_node or 0, node_map=topology.map_address,
                pool=self._shared.address, owner=(self._shared, topology))
        return NodeCredits(topology.nodes, topology.node_of, self._shared,
                           budget.credits_per_pair, budget.return_threshold)

    # -- application API ---------------------------------------------------

    def reserve_send_buffer(self) -> np.ndarray | None:
        """A writable ``datagram_size``-byte view from the send pool, or None (backpressure).

        On None, keep calling :meth:`receive` (it frees completed sends) and retry.
        """
        if self._finalized:
            raise FinalizedError("reserve_send_buffer() called after finalize()")
        if self._inflight and not self._send_pool.free_count:
            self._reclaim_sends()
        slot = self._endpoint.reserve()
        return None if slot is None else self._send_views[slot]

    def send(self, dest: int, buf: np.ndarray, nbytes: int) -> None:
        """Send the first *nbytes* of *buf* (from :meth:`reserve_send_buffer`) to rank *dest*.

        Fire-and-forget: *buf* belongs to MailRail from now on.  Without credit
        for *dest* the message waits in a per-destination FIFO and leaves later.
        """
        if self._finalized:
            raise FinalizedError(f"send(dest={dest!r}) called after finalize()")
        endpoint = self._endpoint
        dest, nbytes, slot = endpoint.submit(dest, buf, nbytes)
        self._submitted += 1
        self._idle_calls = 0  # a rank that sends is busy, not idle
        if self._trace is not None:
            self._trace.message(dest, nbytes)
        if endpoint.deferred.total:
            self._drain_deferred()
        if slot is not None:
            self._transmit(dest, slot, nbytes)

    def receive(self) -> Message | None:
        """Make progress, then return one arrived message (arrival order, any source) or None.

        Never blocks.  Reclaims completed sends, applies credit returns, sends
        deferred messages that have credit.
        """
        if self._finalized:
            raise FinalizedError("receive() called after finalize()")
        if self._inflight:
            self._reclaim_sends()
        endpoint = self._endpoint
        if self._uses_credits:
            self._credit_polls += 1
            if endpoint.deferred.total or self._credit_polls >= CREDIT_POLL_INTERVAL:
                self._credit_polls = 0
                self._poll_credits()
        if endpoint.deferred.total:
            self._drain_deferred()
            if endpoint.stall_timeout:
                endpoint.check_stall(time.monotonic())
        posted = self._posted
        if posted:
            slot = posted[0]
            status = self._status
            if self._recv_requests[slot].Test(status):
                posted.popleft()
                source = status.Get_source()
                nbytes = status.Get_count(MPI.BYTE)
                endpoint.arrived(source, status.Get_tag(), nbytes)
                self._held = held = self._held + 1
                if held > self.held_high_water:
                    self.held_high_water = held
                if self._unposted:  # MAX_RECVS < receive slots: post a parked slot
                    self._post(self._unposted.pop())
                self._idle_calls = 0
                return Message(source, nbytes, self._recv_views[slot][:nbytes], slot, self)
        self._idle()
        return None

    def release_receive_buffer(self, message: Message) -> None:
        """Give *message*'s slot back to the receive pool (re-posts a receive; may return credits)."""
        if self._finalized:
            raise FinalizedError("release_receive_buffer() called after finalize()")
        if not isinstance(message, Message) or message._owner is not self:
            raise ReleaseError(f"{message!r} is not a message received from this MailRail")
        slot = message._slot
        if slot < 0:
            raise ReleaseError(f"{message!r} was already released")
        message._slot = -1
        self._held -= 1
        if len(self._posted) < self._posted_receives:
            self._post(slot)
        else:
            self._unposted.append(slot)
        credit_return = self._endpoint.released(message.source)
        if credit_return is not None:
            self._return_credits(*credit_return)

    def barrier(self, handler: Callable[[Message], object] | None = None) -> int:
        """Collective: return once every message sent by anyone before the call is received and released.

        Keeps receiving meanwhile: each message goes to *handler* (which may send
        more messages) and is released when the handler returns; without a
        handler, arrivals raise :class:`~mailrail.errors.MailRailError` because
        they would be lost.  Messages the application still holds must be
        released for the barrier to finish.  Returns the messages handled.
        """
        if self._finalized:
            raise FinalizedError("barrier() called after finalize()")
        if self._trace is not None:
            self._trace.barrier_begin(*self._sent_and_released())
        detector = TerminationDetector()
        handled = 0
        local = np.zeros(2, dtype=np.int64)
        total = np.zeros(2, dtype=np.int64)
        while True:
            local[0], local[1] = self._sent_and_released()
            request = self._control.Iallreduce(local, total, MPI.SUM)
            while not request.Test():
                message = self.receive()
                if message is not None:
                    if handler is None:
                        self.release_receive_buffer(message)
                        raise MailRailError(
                            f"barrier() without a handler received a message from rank {message.source} "
                            f"({message.nbytes} bytes): pass handler= to process messages that arrive")
                    handler(message)
                    if message._slot >= 0:
                        self.release_receive_buffer(message)
                    handled += 1
            if detector.round_finished(int(total[0]), int(total[1])):
                break
        if self._trace is not None:
            self._trace.barrier_end(*self._sent_and_released())
        return handled

    def _sent_and_released(self) -> tuple[int, int]:
        """Messages this rank handed to send() (deferred ones included), and messages it released."""
        if self._engine is not None:
            counters = self._engine.counters()
            return counters["messages_sent"], counters["messages_released"]
        return self._submitted, self._endpoint.messages_released

    # -- progress internals ------------------------------------------------

    def _post(self, slot: int) -> None:
        self._recv_requests[slot].Start()
        self._posted.append(slot)

    def _transmit(self, dest: int, slot: int, nbytes: int) -> None:
        tag = self._endpoint.transmitting(dest, nbytes)
        # Streams repeat (destination, size) per slot: the second time, make the send a
        # persistent request and restart it from then on (Start costs ~0.6 us less than Isend).
        last = self._last_send[slot]
        if tag == 0 and last[0] == dest and last[1] == nbytes:
            request = last[2]
            if request is None:
                request = self._data.Send_init([self._send_views[slot], nbytes, MPI.BYTE], dest, 0)
                self._last_send[slot] = (dest, nbytes, request)
            request.Start()
        else:
            if tag == 0:  # a new stream for this slot; a piggybacking send leaves the cache alone
                if last[2] is not None:
                    last[2].Free()
                self._last_send[slot] = (dest, nbytes, None)
            request = self._data.Isend([self._send_views[slot], nbytes, MPI.BYTE], dest, tag)
        self._inflight.append((request, slot))

    def _drain_deferred(self) -> None:
        for dest, slot, nbytes in self._endpoint.drain():
            self._transmit(dest, slot, nbytes)

    def _reclaim_sends(self) -> int:
        """Reclaim completed sends, a few from the oldest; return how many are still in flight."""
        if self._engine is not None:
            return self._engine.reclaim_sends()
        inflight = self._inflight
        budget = SEND_TEST_WINDOW
        while inflight and budget:
            request, slot = inflight[0]
            if not request.Test():
                self._head_waits += 1
                if self._head_waits >= SEND_HEAD_PATIENCE:
                    self._head_waits = 0
                    inflight.rotate(-1)
                break
            inflight.popleft()
            self._head_waits = 0
            self._endpoint.send_completed(slot)
            budget -= 1
        return len(inflight)

    def _return_credits(self, target: int, count: int) -> None:
        tag_ub = self.tag_ub
        while count > 0:  # a return larger than the tag space leaves in pieces
            part = min(count, tag_ub)
            self._credit_inflight.append(self._credit.Isend(self._empty, target, part))
            count -= part
        credit_inflight = self._credit_inflight
        while credit_inflight and credit_inflight[0].Test():
            credit_inflight.popleft()

    def _poll_credits(self) -> None:
        requests = self._credit_requests
        status = self._status
        while requests[0].Test(status):
            self._endpoint.credits_arrived(status.Get_source(), status.Get_tag())
            requests[0].Start()
            requests.rotate(-1)

    def _idle(self) -> None:
        self._idle_calls += 1
        if self._idle_calls >= IDLE_SPINS:
            self._idle_calls = 0
            if self._idle_sleep:
                time.sleep(self._idle_sleep)
            else:
                os.sched_yield()

    # -- introspection -----------------------------------------------------

    def pending_sends(self) -> int:
        """Messages sent by the application that have not completed locally (deferred or in flight)."""
        return self._endpoint.deferred.total + len(self._inflight)

    def stats(self) -> dict[str, Any]:
        """Counters of this rank (see README, "Counters")."""
        stats = self._endpoint.counters()
        stats["held_high_water"] = self.held_high_water
        stats["engine"] = "python"
        if self._engine is not None:  # the compiled path counts messages and pool use itself
            counters = self._engine.counters()
            stats.update((key, counters[key]) for key in (
                "messages_sent", "bytes_sent", "messages_received", "bytes_received", "messages_released",
                "reserve_failures", "held_high_water", "credit_messages_sent", "credit_messages_received",
                "credits_returned"))
            stats["engine"] = "compiled"
        stats["flow_control"] = self.flow.name
        stats["credits_per_pair"] = self.flow.credits_per_pair
        stats["recv_pool_bytes"] = self._recv_pool.nbytes
        stats["send_pool_bytes"] = self._send_pool.nbytes
        if self._topology is not None:
            stats["shared_credit_bytes"] += self._topology.shared_map_bytes
            stats["nodes"] = self._topology.nodes
            stats["atomics"] = self._shared.atomics
        return stats

    # -- shutdown ----------------------------------------------------------

    def finalize(self, strict: bool = False) -> dict[str, int]:
        """Collective: wait for every rank, cancel pending receives, free everything.

        Never drops data silently: messages still deferred, received but not
        released, or arrived but never returned by :meth:`receive` are counted
        and reported with an :class:`~mailrail.errors.UndeliveredWarning`
        (:class:`~mailrail.errors.UndeliveredError` if *strict*).  Returns the counts.
        """
        if self._finalized:
            raise FinalizedError("finalize() called twice")
        self._finalized = True
        endpoint, engine = self._endpoint, self._engine
        dropped_deferred = len(endpoint.deferred.clear())
        unreleased = self._held if engine is None else engine.held
        if engine is not None:
            engine.finalized = True  # the application's calls raise from now on
        unreceived = 0
        # 1: everyone stops sending; 2: every rank's sends completed.  Meanwhile keep
        # receives moving so rendezvous sends complete, and count what arrives.
        for phase in (1, 2):
            if phase == 2:
                while self._reclaim_sends():
                    unreceived += self._discard_arrivals()
            barrier = self._data.Ibarrier()
            while not barrier.Test():
                self._reclaim_sends()
                unreceived += self._discard_arrivals()
                time.sleep(1e-4)
        unreceived += self._discard_arrivals()
        if engine is not None:
            unreceived += engine.cancel_receives()
        unreceived += self._cancel_and_count(self._data, [self._recv_requests[s] for s in self._posted])
        self._cancel_and_count(self._credit, list(self._credit_requests))
        while self._credit_inflight:
            self._credit_inflight.popleft().Wait()
        if engine is not None:
            engine.free()
            if self._shared is not None:
                self.flow.detach()  # the ledger points into the node memory freed below
        for request in self._recv_requests:
            request.Free()
        for _, _, request in self._last_send:
            if request is not None:
                request.Free()
        for request in self._credit_requests:
            request.Free()
        if self._shared is not None:
            self._shared.free()
        if self._topology is not None:
            self._topology.free()
        if self._trace is not None:
            self._trace.close()
        self._data.Free()
        self._credit.Free()
        self._control.Free()
        report = {"deferred": dropped_deferred, "unreleased": unreleased, "unreceived": unreceived}
        if any(report.values()):
            text = (f"MailRail.finalize() on rank {self.rank}: {dropped_deferred} deferred message(s) never "
                    f"sent, {unreleased} received message(s) never released, {unreceived} arrived message(s) "
                    f"never returned by receive(); call barrier() (quiescence) before finalize()")
            if strict:
                raise UndeliveredError(text)
            warnings.warn(text, UndeliveredWarning, stacklevel=2)
        return report

    def _discard_arrivals(self) -> int:
        count = 0 if self._engine is None else self._engine.discard_arrivals()
        posted, status = self._posted, self._status
        while posted and self._recv_requests[posted[0]].Test(status):
            slot = posted.popleft()
            self._post(slot)
            count += 1
        requests = self._credit_requests
        while requests and requests[0].Test():
            requests[0].Start()
            requests.rotate(-1)
        return count

    def _cancel_and_count(self, comm: MPI.Comm, requests: list[MPI.Request]) -> int:
        """Cancel posted receives; count those that had matched a message, then drain unmatched ones."""
        matched = 0
        status = MPI.Status()
        for request in requests:
            request.Cancel()
            request.Wait(status)
            if not status.Is_cancelled() and status.Get_source() != MPI.ANY_SOURCE:
                matched += 1
        scratch = bytearray(self.datagram_size)
        while comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, status):
            comm.Recv([scratch, status.Get_count(MPI.BYTE), MPI.BYTE], status.Get_source(), status.Get_tag())
            matched += 1
        return matched

    def __enter__(self) -> "MailRail":
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self._finalized:
            self.finalize()
