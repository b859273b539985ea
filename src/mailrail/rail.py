"""The application's object: :class:`MailRail`, over one of two implementations.

MailRail owns what both message paths share: configuration, communicators,
flow control, pools, the sans-I/O :class:`~mailrail.protocol.Endpoint`,
``barrier``, ``stats`` and ``finalize``.  The per-message work goes to one
implementation's transport (:mod:`mailrail.transport`), chosen once at construction: the
compiled one when it is built, else the Python one (``MAILRAIL_IMPLEMENTATION``).
Payloads travel on a duplicate of the user's communicator, credit returns on a
second duplicate that never carries payload, and ``barrier()``'s collectives on
a third.
"""

from __future__ import annotations

import contextlib
import dataclasses
import operator
import os
import pickle
import struct
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ._mpi import MPI
from .channels import Channels, Future
from .collectives import WITH_BLOCK_END, BarrierEntry, Call, CollectiveCalls, Judge, call_site, program_frame
from .config import KNOBS, Config
from .errors import (
    CollectiveMismatchError,
    ConfigError,
    ConfigWarning,
    FinalizedError,
    MailRailError,
    SlowRankWarning,
    StallError,
    report_undelivered,
)
from .failure import abort_job, describe_ranks, exit_code_of
from .flow.base import FlowControl
from .flow.modes import FlowParts, NodeLayout, flow_mode
from .flow.node_memory import NodeTopology, SharedWindowCounters
from .flow.sizing import CreditBudget
from .interfaces import Message
from .quiescence import TerminationDetector
from .transport import choose
from .transport import implementation as implementation_named
from .transport.base import Transport, Tuning

__all__ = ["MailRail", "Message", "AGREED_KNOBS"]

#: The knobs every rank must set alike (checked at construction, with the transport): ranks that
#: disagree on them would break the credit protocol or truncate messages.
AGREED_KNOBS = (
    "flow_control",
    "recv_pool_slots",
    "send_pool_slots",
    "datagram_size",
    "credits_per_pair",
    "credit_threshold",
    "piggyback",
    "ranks_per_node",
)


def tag_upper_bound(comm: MPI.Comm) -> int:
    """The largest tag MailRail may use on *comm*: MPI's ``TAG_UB`` (which caps one credit message)."""
    # TAG_UB is only guaranteed on COMM_WORLD (the standard promises 32767 at least).
    return int(comm.Get_attr(MPI.TAG_UB) or MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) or 32767)


class MailRail(BarrierEntry):
    """Asynchronous, out-of-order, fire-and-forget messaging with credit-based flow control.

    Collective over *comm* (default ``COMM_WORLD``) at construction and at
    :meth:`finalize`.  Each keyword is a knob of :class:`~mailrail.config.Config`
    and overrides its ``MAILRAIL_*`` environment variable; left at None, the
    variable, and then the default, decide (the configuration page lists them).
    A bad value, or ranks that disagree on :data:`AGREED_KNOBS` or the
    transport (one allgather checks), raise :class:`~mailrail.errors.ConfigError`
    on every rank before any MPI object exists.  Also a context manager: leaving
    the block normally (or by ``sys.exit(0)``) calls :meth:`finalize`; leaving it
    by an exception never enters a collective: ``on_error="abort"`` (default)
    prints the traceback once, rank-prefixed, and calls ``MPI_Abort``;
    ``on_error="raise"`` cleans up locally and re-raises.
    """

    def __init__(
        self,
        comm: MPI.Comm | None = None,
        *,
        datagram_size: int | None = None,
        send_pool_slots: int | None = None,
        recv_pool_slots: int | None = None,
        max_recvs: int | None = None,
        flow_control: str | None = None,
        credit_threshold: int | None = None,
        piggyback: bool | None = None,
        ranks_per_node: int | None = None,
        credits_per_pair: int | None = None,
        stall_timeout: float | None = None,
        slow_rank_warning: float | None = None,
        idle_sleep_us: float | None = None,
        atomics: str | None = None,
        implementation: str | None = None,
        trace: str | None = None,
        on_error: str | None = None,
    ) -> None:
        # The keywords are Config's fields (a test checks they stay so): None leaves a knob to its MAILRAIL_*
        # variable, then to its default.
        options = {name: value for name, value in locals().items() if name in KNOBS and value is not None}
        comm = MPI.COMM_WORLD if comm is None else comm
        self._comm = comm  # the user's: MPI_Abort goes to it (on_error="abort")
        #: This process's rank in :attr:`comm`: the ``dest`` other ranks send to it with.
        self.rank: int = comm.Get_rank()
        #: The ranks of :attr:`comm`: valid destinations are ``0 .. size - 1``.
        self.size: int = comm.Get_size()
        # Everything that can be checked without MPI objects is checked first, and agreed by every
        # rank in one exchange: a bad option or a disagreement leaves nothing behind, on every rank.
        # The implementation running ("compiled" or "python"), and why not the compiled one (or None).
        self.config, self.implementation, self.implementation_reason = _agreed_configuration(comm, options)
        config = self.config
        self._implementation = implementation_named(self.implementation)
        self._mode = flow_mode(config.flow_control)
        self._tuning = Tuning.for_idle_sleep(config.idle_sleep_us)
        self.datagram_size = config.datagram_size
        self.send_pool_slots = config.send_pool_slots
        self.tag_ub = tag_upper_bound(comm)
        budget = self._credit_budget(nodes=self._known_node_count())
        self._topology: NodeTopology | None = None
        self._shared: SharedWindowCounters | None = None
        self._trace = None
        self._channels: Channels | None = None  # its channels and containers, made on first use
        self._in_barrier = False
        self._barriers = 0
        # The program's collective calls on this rail (see mailrail.collectives): each is numbered and told to
        # rank 0, which judges whether the ranks are in the same one.
        self._calls = CollectiveCalls()
        self._call_started = 0.0  # when the running call started (time.monotonic())
        self._settled = 0  # rank 0: the last call whose every rank's note came (the others: the last call entered)
        self._warned = 0  # the last call this rank said (or chose not to say) it waits in too long
        self._exiting = False  # finalize() called by leaving `with MailRail(...)`: its site says so
        # From here on MPI objects exist: each registers its release, undone in reverse if a later
        # step fails (and at finalize()).
        with contextlib.ExitStack() as resources:
            self._data = self._duplicate(comm, "mailrail-data", resources)
            self._credit = self._duplicate(comm, "mailrail-credit", resources)
            self._control = self._duplicate(comm, "mailrail-control", resources)  # barrier(): never mixed with traffic
            self.flow = self._make_flow_control(comm, budget, resources)
            if config.trace:
                from .trace.recorder import TraceWriter

                self._trace = TraceWriter.for_rank(config.trace, self.rank)
                resources.callback(self._trace.close)
            stack = self._implementation.build(
                self.rank,
                self.size,
                self.flow,
                datagram_size=config.datagram_size,
                send_pool_slots=config.send_pool_slots,
                recv_pool_slots=config.recv_pool_slots,
                posted_receives=config.posted_receives,
                tag_ub=self.tag_ub,
                tuning=self._tuning,
                stall_timeout=config.stall_timeout,
                comm=self._data,
                credit_comm=self._credit if self._mode.has_credits else None,
            )
            self._send_pool, self._recv_pool, self._endpoint = stack.send_pool, stack.recv_pool, stack.endpoint
            self._transport: Transport = stack.transport
            self._arrivals = ArrivalNotes(self._control, self.rank, self.size)
            self._resources = resources.pop_all()
        # The four per-message calls go straight to the transport: no extra frame per message (the
        # methods below document them and serve a rail whose instance attributes are gone).  A traced
        # rail records each send that the transport accepted.
        moves = self._transport
        self.reserve_send_buffer = moves.reserve_send_buffer  # type: ignore[method-assign]
        self.send = moves.send if self._trace is None else self._traced_send  # type: ignore[method-assign]
        self.receive = moves.receive  # type: ignore[method-assign]
        self.release_receive_buffer = moves.release_receive_buffer  # type: ignore[method-assign]
        self.pending_sends = self._endpoint.pending_sends  # type: ignore[method-assign]
        self._finalized = False

    # -- construction steps ---------------------------------------------------

    def _known_node_count(self) -> int | None:
        """Nodes, when known without MPI objects: virtual nodes are consecutive rank blocks."""
        per_node = self.config.ranks_per_node
        return None if per_node is None else -(-self.size // per_node)

    def _credit_budget(self, nodes: int | None) -> CreditBudget | None:
        """The credits per pair and return threshold (None: no credits, or real nodes not yet counted)."""
        if self._mode.budget_needs_nodes() and nodes is None:
            return None
        config = self.config
        return self._mode.budget(
            recv_slots=config.recv_pool_slots,
            ranks=self.size,
            nodes=nodes or 0,
            credit_threshold=config.credit_threshold,
            credits_per_pair=config.credits_per_pair,
        )

    @staticmethod
    def _duplicate(comm: MPI.Comm, name: str, resources: contextlib.ExitStack) -> MPI.Comm:
        duplicate = comm.Dup()
        resources.callback(duplicate.Free)
        duplicate.Set_name(name)
        return duplicate

    def _make_flow_control(
        self, comm: MPI.Comm, budget: CreditBudget | None, resources: contextlib.ExitStack
    ) -> FlowControl:
        """The mode's strategy in the chosen implementation (the reference classes, or the compiled ledger making
        the same decisions); modes that share node memory get the node's layout and counters in MPI windows."""
        config, mode = self.config, self._mode
        parts = FlowParts(
            ranks=self.size, recv_slots=config.recv_pool_slots, piggyback=config.piggyback, max_tag=self.tag_ub
        )
        if mode.uses_node_memory:
            self._topology = topology = NodeTopology(comm, config.ranks_per_node)
            resources.callback(topology.free)
            budget = budget or self._credit_budget(topology.nodes)  # real nodes: counted just now

            def shared_counters(name: str, initial: int) -> SharedWindowCounters:
                counters = SharedWindowCounters(topology.comm, self.size, initial, config.atomics)
                resources.callback(counters.free)
                return counters

            counters = mode.make_node_counters(budget, shared_counters)
            self._shared = counters["pool"]  # type: ignore[assignment]  # (SharedWindowCounters: what stats() reads)
            layout = NodeLayout(topology.nodes, topology.node_of, topology.map_address, config.ranks_per_node)
            parts = dataclasses.replace(parts, layout=layout, counters=counters, owner=(*counters.values(), topology))
        flow = mode.strategy(self._implementation.name, dataclasses.replace(parts, budget=budget))
        resources.callback(flow.detach)  # before the node memory it points into is freed
        return flow

    @property
    def channels(self) -> Channels:
        """The rail's multiplexer (:class:`~mailrail.channels.Channels`): many record streams, containers and
        calls share the rail's datagrams, pools and credits.  Made on first use (not collective)."""
        if self._channels is None:
            if self._finalized:
                raise FinalizedError("channels used after finalize()")
            self._channels = Channels(self, ControlCollectives(self))
            # (a call or an ask is per message: no frame of ours)
            self.call = self._channels.call  # type: ignore[method-assign]
            self.ask = self._channels.ask  # type: ignore[method-assign]
        return self._channels

    def call(self, dest: int, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(*args)`` on rank *dest*, asynchronously: an active message (see
        :meth:`Channels.call <mailrail.channels.Channels.call>`).  The next :meth:`barrier` completes it,
        and whatever it calls in turn."""
        self.channels.call(dest, fn, *args)

    def ask(self, dest: int, fn: Callable[..., object], *args: Any) -> Future:
        """Run ``fn(*args)`` on rank *dest* and return a :class:`~mailrail.channels.Future` of its answer (see
        :meth:`Channels.ask <mailrail.channels.Channels.ask>`): ``future.result()`` waits for it, ``rail.barrier()``
        completes every ask."""
        return self.channels.ask(dest, fn, *args)

    @property
    def comm(self) -> MPI.Comm:
        """The communicator the rail was made on (``COMM_WORLD`` by default), for the application's own
        MPI calls: MailRail's traffic travels on duplicates of it, so no message of the rail's ever
        meets one of the application's."""
        return self._comm

    # -- application API (per instance, these are the transport's own methods) --

    def reserve_send_buffer(self) -> np.ndarray | None:
        """A writable ``datagram_size``-byte view from the send pool, or None (backpressure).

        On None, keep calling :meth:`receive` (it frees completed sends) and retry; if
        ``stats()["send_buffers_reserved"]`` is ``send_pool_slots``, the application itself holds every
        buffer and retrying cannot help.
        """
        return self._transport.reserve_send_buffer()

    def send(self, dest: int, buf: np.ndarray, nbytes: int) -> None:
        """Send the first *nbytes* of *buf* (from :meth:`reserve_send_buffer`) to rank *dest*.

        Fire-and-forget: *buf* belongs to MailRail from now on.  Without credit
        for *dest* the message waits in a per-destination FIFO and leaves later.
        *buf* is the reserved view or a C-contiguous view starting at its first byte;
        a non-contiguous one raises :class:`~mailrail.errors.BufferOwnershipError`
        (it stays reserved).  Any other error gives the reserved buffer back to the pool.
        """
        self._transport.send(dest, buf, nbytes)

    def receive(self) -> Message | None:
        """Make progress, then return one arrived message (arrival order, any source) or None.

        Never blocks.  Reclaims completed sends, applies credit returns, sends
        deferred messages that have credit.
        """
        return self._transport.receive()

    def release_receive_buffer(self, message: Message) -> None:
        """Give *message*'s slot back to the receive pool (re-posts a receive; may return credits)."""
        self._transport.release_receive_buffer(message)

    def pending_sends(self) -> int:
        """Send buffers reserved and not yet sent, plus sent messages not completed locally (deferred or in flight)."""
        return self._endpoint.pending_sends()

    def _traced_send(self, dest: int, buf: np.ndarray, nbytes: int) -> None:
        """:meth:`send`, then the trace record of what it accepted (a refused send is not recorded)."""
        self._transport.send(dest, buf, nbytes)
        assert self._trace is not None
        self._trace.message(operator.index(dest), operator.index(nbytes))

    def _channels_barrier(self) -> int:
        return self.channels.barrier()

    def _barrier(self, handler: Callable[[Message], object]) -> int:
        if self._trace is not None:
            self._trace.barrier_begin(*self._sent_and_released())
        self._barriers += 1
        stall_timeout = self._wait_timeout()
        last_progress = time.monotonic()
        detector = TerminationDetector()
        handled = 0
        idle = 0
        local = np.zeros(2, dtype=np.int64)
        total = np.zeros(2, dtype=np.int64)
        receive, release = self.receive, self.release_receive_buffer
        while True:
            local[0], local[1] = self._sent_and_released()
            request = self._control.Iallreduce(local, total, MPI.SUM)
            # Receive before each test: a round that completes at once (one rank) still receives.
            while True:
                message = receive()
                if message is not None:
                    handler(message)
                    if self._endpoint.holds(message):  # not released by the handler
                        release(message)
                    handled += 1
                    if stall_timeout:
                        last_progress = time.monotonic()
                else:
                    idle += 1
                    if not idle % JUDGE_EVERY:
                        self._while_waiting()
                    elif self._settled < self._calls.number:  # rank 0: the notes judged while idle, not after
                        self._judge_early()
                    if stall_timeout and time.monotonic() - last_progress > stall_timeout:
                        raise StallError(self._barrier_stall_report(time.monotonic() - last_progress, detector))
                if request.Test():
                    break
            if self._settled < self._calls.number:  # rank 0, after the call's first round: every rank's note
                self._settle()
            if detector.round_finished(int(total[0]), int(total[1])):
                break
            if stall_timeout and detector.progressed:
                last_progress = time.monotonic()
        if self._trace is not None:
            self._trace.barrier_end(*self._sent_and_released())
        return handled

    def _barrier_stall_report(self, waited: float, detector: TerminationDetector) -> str:
        call = self._calls.current
        assert call is not None
        head = (
            f"rank {self.rank}: {call.described} (this rail's collective #{call.number}, its barrier "
            f"#{self._barriers}) made no progress for {waited:.1f} s"
        )
        sent, released = detector.last_counts
        return (
            f"{head} (MAILRAIL_STALL_TIMEOUT={self.config.stall_timeout:g}): {self._who_is_missing(call)}; the last "
            f"completed round counted {sent} message(s) sent and {released} released; this rank holds "
            f"{self._endpoint.held} received message(s) not released and {self.pending_sends()} send(s) pending"
        )

    def _who_is_missing(self, call: Call) -> str:
        """For a stall report: the ranks that have not entered *call* (rank 0 knows; the others say so)."""
        judge = self._arrivals.judge
        if judge is None:
            return f"rank 0's report names the ranks that have not called {call.name}"
        self._arrivals.collect()
        missing = judge.missing(call.number)
        if not missing:
            return f"every rank has called {call.name}"
        verb = "has" if len(missing) == 1 else "have"
        return f"{describe_ranks(missing)} {verb} not called {call.name} ({judge.whereabouts(missing)})"

    # -- collective calls: their notes, the judge, the warning ------------------------------------

    def _enter_collective(self, name: str, key: str | None = None, site: str | None = None) -> None:
        """A collective call starts (*name* as the program wrote it; see :class:`~mailrail.collectives.Call`): told
        to rank 0, which judges the calls while it waits in the call's first step, and after it.  Inside another
        call: nothing."""
        call = self._calls.enter(name, key, site)
        if call is None:
            return
        self._call_started = time.monotonic()
        try:
            self._arrivals.announce(call)
        except BaseException:
            self._calls.leave()
            raise

    def _leave_collective(self) -> None:
        self._calls.leave()

    def _judge(self) -> None:
        """Rank 0: take the notes that came, and raise :class:`CollectiveMismatchError` when two ranks' calls of one
        number differ.  The others: raise the judge's verdict when it sent one (its ``on_error`` is ``raise``)."""
        verdict = self._arrivals.verdict()
        if verdict is None:
            return
        if self.rank == 0 and self.config.on_error == "raise":  # no abort ends the others: tell them
            self._arrivals.tell_verdict(verdict)
        if self._finalized:  # in finalize(): as its StallError, the local clean-up first
            self._release_locally()
        raise CollectiveMismatchError(verdict)

    def _while_waiting(self) -> None:
        """What a rank does every :data:`JUDGE_EVERY` idle polls of a collective's wait: judge, and say once when the
        wait is long (:meth:`_slow_rank_text`)."""
        self._judge()
        delay = self.config.slow_rank_warning
        call = self._calls.current
        if not delay or self.rank > 1 or call is None or self._warned == call.number:
            return
        waited = time.monotonic() - self._call_started
        if waited < (delay if self.rank == 0 else 2 * delay):
            return
        self._warned = call.number
        text = self._slow_rank_text(call, waited)
        if text is not None:
            filename, line = program_frame()
            warnings.warn_explicit(text, SlowRankWarning, filename, line)

    def _slow_rank_text(self, call: Call, waited: float) -> str | None:
        """The warning of a long wait in *call*, or None when there is nothing to say.

        One for the job: rank 0, after ``slow_rank_warning`` seconds, names the ranks it waits for and where they
        were last (nothing when every rank is there: the collective is working, not waiting) and tells rank 1 it
        looked.  Rank 1, after twice that, speaks for it when rank 0 did not: rank 0 is late itself.  The other
        ranks only wait (a thousand ranks, one line)."""
        delay = self.config.slow_rank_warning
        knob = f"MAILRAIL_SLOW_RANK_WARNING={delay:g}"
        head = f"rank {self.rank}: waited {waited:.0f} s in {call.described} (collective #{call.number} of this rail)"
        judge = self._arrivals.judge
        if judge is None:
            if self._arrivals.judged(call.number):
                return None
            return (
                f"{head}, and rank 0, which names the ranks awaited, has not come: it is late itself; waiting on "
                f"({knob}: rank 0 warns after that long, rank 1 after twice that when rank 0 has not)"
            )
        missing = judge.missing(call.number)
        if 1 not in missing:
            self._arrivals.tell_judged(call.number)
        if not missing:
            return None
        there = [rank for rank in range(1, self.size) if rank not in missing]
        too = f"; {describe_ranks(there)} {'is' if len(there) == 1 else 'are'} there too" if there else ""
        return f"{head} for {describe_ranks(missing)}{too} ({judge.whereabouts(missing)}); waiting on ({knob})"

    def _judge_early(self) -> None:
        """Rank 0, idle in the first step of a call: judge the notes as they come, so that :meth:`_settle` after the
        step usually finds them all (the others: nothing)."""
        judge = self._arrivals.judge
        if judge is None:
            self._settled = self._calls.number  # (nothing to judge here)
        elif not judge.complete(self._calls.number):
            self._judge()

    def _settle(self) -> None:
        """Rank 0, once a wait of the running call completed (every rank has sent its note of the call by then):
        wait for the notes still on their way and judge them, so that no second step of a call runs on ranks
        whose calls differ."""
        call = self._calls.current
        judge = self._arrivals.judge
        if judge is None or call is None:  # (the other ranks: nothing to judge)
            self._settled = self._calls.number
            return
        if self._settled >= call.number:
            return
        idle = 0
        deadline = None
        while True:
            self._judge()
            if judge.complete(call.number):
                break
            idle += 1
            if not idle % JUDGE_EVERY:
                self._while_waiting()
                deadline = deadline or _Deadline(self._wait_timeout())
                waited = deadline.expired()
                if waited is not None:  # (a rank that abandoned an earlier collective, its StallError caught)
                    missing = describe_ranks(judge.missing(call.number))
                    raise StallError(
                        f"rank 0: {call.described} (this rail's collective #{call.number}) completed, and the note "
                        f"of it from {missing} has not come in {waited:.1f} s (MAILRAIL_STALL_TIMEOUT="
                        f"{self.config.stall_timeout:g})"
                    )
            self._idle(idle)
        judge.settle(call.number)
        self._settled = call.number

    def _wait(self, request: MPI.Request) -> None:
        """Complete *request*, a collective's, polling: rank 0 judges meanwhile, and a long wait is said once."""
        idle = 0
        while not request.Test():
            idle += 1
            if not idle % JUDGE_EVERY:
                self._while_waiting()
            elif self._settled < self._calls.number:
                self._judge_early()
            self._idle(idle)
        if self._settled < self._calls.number:
            self._settle()

    def _idle(self, polls: int) -> None:
        """After *polls* empty polls of a wait: as the transport's receive, yield the core (or sleep
        ``idle_sleep_us``) once a few found nothing."""
        tuning = self._tuning
        if polls < tuning.idle_spins:
            return
        if tuning.idle_sleep_ns:
            time.sleep(tuning.idle_sleep_ns * 1e-9)
        else:
            os.sched_yield()

    def _sent_and_released(self) -> tuple[int, int]:
        """Messages this rank handed to send() (deferred ones included), and messages it released."""
        endpoint = self._endpoint
        return endpoint.messages_sent, endpoint.messages_released

    # -- introspection -----------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters of this rank (each defined in :mod:`mailrail.counters`)."""
        stats: dict[str, Any] = dict(self._endpoint.counters())
        stats["implementation"] = self._transport.name
        stats["flow_control"] = self.flow.name
        stats["credits_per_pair"] = self.flow.credits_per_pair
        stats["recv_pool_bytes"] = self._recv_pool.nbytes
        stats["send_pool_bytes"] = self._send_pool.nbytes
        if self._topology is not None and self._shared is not None:  # node and adaptive modes
            stats["shared_credit_bytes"] += self._topology.shared_map_bytes
            stats["nodes"] = self._topology.nodes
            stats["atomics"] = self._shared.atomics
        return stats

    def __repr__(self) -> str:
        state = " finalized" if getattr(self, "_finalized", False) else ""
        return (
            f"<MailRail rank {self.rank} of {self.size}, flow_control={self.config.flow_control!r}, "
            f"implementation={self.implementation!r}{state}>"
        )

    # -- shutdown ----------------------------------------------------------

    def finalize(self, strict: bool = False) -> dict[str, int]:
        """Collective: wait for every rank, cancel pending receives, free everything.

        Never drops data silently: messages still deferred (``"deferred"``), received
        but not released (``"unreleased"``), arrived but never returned by
        :meth:`receive` (``"unreceived"``), send buffers reserved and never sent
        (``"reserved"``), records and calls left staged in the rail's channels (``"staged"``) and asks never
        answered (``"unanswered"``) are counted and reported with an :class:`~mailrail.errors.UndeliveredWarning`
        (:class:`~mailrail.errors.UndeliveredError` if *strict*).  Returns the counts.

        With ``stall_timeout`` set, waiting that long for the other ranks raises
        :class:`~mailrail.errors.StallError` (rank 0 names the ranks that have not
        called finalize()), after a local clean-up.  Ranks in another collective meanwhile (a
        container's collective, a barrier) make rank 0 raise :class:`~mailrail.errors.CollectiveMismatchError`.
        """
        if self._finalized:
            raise FinalizedError("finalize() called twice")
        if self._in_barrier:
            raise MailRailError("finalize() called from inside a barrier() handler: it is collective")
        site = WITH_BLOCK_END.format(call_site()) if self._exiting else None
        self._enter_collective("finalize()", site=site)
        try:
            return self._finalize(strict)
        finally:
            self._leave_collective()

    def _finalize(self, strict: bool) -> dict[str, int]:
        self._finalized = True
        transport, endpoint = self._transport, self._endpoint
        reserved = endpoint.reserved
        unanswered = self._channels.unanswered() if self._channels is not None else 0
        staged = self._channels.close() if self._channels is not None else 0
        unreleased = endpoint.held
        dropped_deferred = endpoint.stop()  # the application's calls raise from now on
        deadline = _Deadline(self._wait_timeout())
        unreceived = 0
        # 1: everyone stops sending; 2: every rank's sends completed.  Meanwhile keep
        # receives moving so rendezvous sends complete, and count what arrives.
        for phase in (1, 2):
            if phase == 2:
                while transport.reclaim_sends():
                    unreceived += transport.discard_arrivals()
                    self._check_finalize(deadline, phase)
            barrier = self._data.Ibarrier()
            while not barrier.Test():
                transport.reclaim_sends()
                unreceived += transport.discard_arrivals()
                time.sleep(1e-4)
                self._while_waiting()
                self._check_finalize(deadline, phase)
            self._settle()
        unreceived += transport.discard_arrivals()
        unreceived += transport.cancel_receives()
        unreceived += _receive_unmatched(self._data, self.datagram_size)
        _receive_unmatched(self._credit, 0)
        self._arrivals.close()
        transport.close()
        self._resources.close()  # flow detached, node memory, communicators, trace: in reverse order
        report = {
            "deferred": dropped_deferred,
            "unreleased": unreleased,
            "unreceived": unreceived,
            "reserved": reserved,
            "staged": staged,
            "unanswered": unanswered,
        }
        report_undelivered(f"MailRail.finalize() on rank {self.rank}", report, strict)
        return report

    def _wait_timeout(self) -> float:
        """The stall timeout of a collective wait on this rank: rank 0 reports first (it alone can name the
        missing ranks); the others give it :data:`REPORT_GRACE_S` more, so its report is not cut short by
        theirs aborting the job."""
        timeout = self.config.stall_timeout
        return timeout + REPORT_GRACE_S if timeout and self.rank != 0 else timeout

    def _check_finalize(self, deadline: _Deadline, phase: int) -> None:
        """Raise :class:`StallError` (after local clean-up) once finalize() waited out the stall timeout."""
        waited = deadline.expired()
        if waited is None:
            return
        call = self._calls.current
        assert call is not None
        missing = self._arrivals.missing(call.number)
        if missing is None or missing:
            who = self._who_is_missing(call)
        elif phase == 1:
            who = "every rank has called finalize(), the ranks' exit barrier did not complete"
        else:
            who = (
                f"every rank has called finalize(); {self._transport.reclaim_sends()} send(s) of this rank "
                "have not completed (their receiver does not receive)"
            )
        self._release_locally()  # the job ends the usual way (abort on the exception)
        raise StallError(
            f"rank {self.rank}: finalize() waited {waited:.1f} s (MAILRAIL_STALL_TIMEOUT="
            f"{self.config.stall_timeout:g}): {who}"
        )

    def _abandon(self) -> None:
        """Local clean-up, no collective call: requests cancelled and freed; communicators and node memory
        (whose release is collective) are left to ``MPI_Finalize``."""
        if self._finalized:
            return
        self._finalized = True
        self._release_locally()

    def _release_locally(self) -> None:
        self._endpoint.stop()
        self._transport.abandon()
        if self._trace is not None:  # close() is idempotent
            self._trace.close()

    def __enter__(self) -> MailRail:
        return self

    def __exit__(self, exc_type: object, error: BaseException | None, traceback: object) -> None:
        # Leaving by an exception must not enter finalize() (collective): the other ranks may never
        # come, and the traceback would never be printed.  SystemExit(0) is a normal exit.
        if error is None or (isinstance(error, SystemExit) and exit_code_of(error) == 0):
            if not self._finalized:
                self._exiting = True  # its call's site: the end of the block
                try:
                    self.finalize()
                except BaseException as failure:  # e.g. a StallError: finalize timed out
                    self._fail(failure)
                    raise
            return
        self._fail(error)

    def _fail(self, error: BaseException) -> None:
        """``on_error``: end the job (traceback once, rank-prefixed, ``MPI_Abort``), or clean up locally."""
        if self.config.on_error == "abort":
            abort_job(error, comm=self._comm, exit_code=exit_code_of(error) or 1)
        self._abandon()

    def __del__(self) -> None:
        # A rail collected without finalize(): say so, and make sure MPI no longer writes into
        # its pools (finalize() is collective, so it cannot run here).
        if getattr(self, "_finalized", True):  # finalized, or construction failed
            return
        warnings.warn(
            f"{self!r} was collected without finalize(): call finalize() (collective) or use "
            f"`with MailRail(...) as rail:`",
            ResourceWarning,
            stacklevel=2,
            source=self,
        )
        self._finalized = True
        self._transport.abandon()


def _agreed_configuration(comm: MPI.Comm, options: dict[str, Any]) -> tuple[Config, str, str | None]:
    """This rank's validated configuration and transport, once every rank of *comm* has checked its own.

    One allgather: a rank whose options are invalid, or ranks that disagree on :data:`AGREED_KNOBS` or
    the transport, make every rank raise :class:`ConfigError` with the same message, before any MPI
    object exists.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConfigWarning)  # recorded here, said once for the job below
        try:
            config = Config.from_env(**options)
            chosen, reason = choose(config)
        except ConfigError as error:
            facts: tuple[Any, ...] | str = str(error)
        else:
            facts = (*(getattr(config, knob) for knob in AGREED_KNOBS), chosen)
    said = [(w.category.__name__, str(w.message)) for w in caught if issubclass(w.category, ConfigWarning)]
    for other in caught:  # anything else as it was
        if not issubclass(other.category, ConfigWarning):
            warnings.warn_explicit(other.message, other.category, other.filename, other.lineno)
    everyone, warned = zip(*comm.allgather((facts, said)))
    _warn_once_for_the_job(comm.Get_rank(), len(everyone), warned)
    failures: dict[str, list[int]] = {}
    for rank, theirs in enumerate(everyone):
        if isinstance(theirs, str):
            failures.setdefault(theirs, []).append(rank)
    if failures:
        if len(failures) == 1 and len(next(iter(failures.values()))) == len(everyone):
            raise ConfigError(next(iter(failures)))  # every rank alike: the message as it is
        raise ConfigError("; ".join(f"{describe_ranks(ranks)}: {text}" for text, ranks in failures.items()))
    differences = []
    for index, name in enumerate((*AGREED_KNOBS, "implementation")):
        values: dict[Any, list[int]] = {}
        for rank, theirs in enumerate(everyone):
            values.setdefault(theirs[index], []).append(rank)
        if len(values) > 1:
            variable = f"MAILRAIL_{name.upper()}"
            spread = " and ".join(f"{value!r} on {describe_ranks(ranks)}" for value, ranks in values.items())
            differences.append(f"{name} ({variable}) is {spread}")
    if differences:
        raise ConfigError(
            "the ranks' MailRail configurations differ (every rank must set these alike): " + "; ".join(differences)
        )
    assert not isinstance(facts, str)
    return config, chosen, reason


#: The configuration warnings this process has said (or, on ranks other than 0, kept quiet).
_SAID: set[str] = set()
#: The configuration warnings a rank may raise, by name (they travel between ranks as text).
_CONFIG_WARNINGS = {category.__name__: category for category in (ConfigWarning,)}


def _warn_once_for_the_job(rank: int, size: int, warned: Sequence[list[tuple[str, str]]]) -> None:
    """Each distinct configuration warning of the job once, from rank 0, naming the ranks when not all had it
    (every rank reads the same environment, so 16 ranks used to print 16 copies).  The other ranks still
    raise one that the warning filters make an error (``-W error::mailrail.ConfigWarning``), as rank 0 does."""
    ranks_of: dict[tuple[str, str], list[int]] = {}
    for who, theirs in enumerate(warned):
        for said in dict.fromkeys(theirs):
            ranks_of.setdefault(said, []).append(who)
    for (name, message), ranks in ranks_of.items():
        text = message if len(ranks) == size else f"{message} (on {describe_ranks(ranks)})"
        if text in _SAID:  # a program that builds many rails hears it once
            continue
        _SAID.add(text)
        if rank == 0:
            warnings.warn(text, _CONFIG_WARNINGS[name], stacklevel=4)  # the application's MailRail(...)
        else:
            with warnings.catch_warnings(
                record=True
            ):  # the filters still apply: "error" raises, the rest is kept quiet
                warnings.warn(text, _CONFIG_WARNINGS[name], stacklevel=4)


#: Seconds ranks other than 0 wait beyond the stall timeout in barrier() and finalize() (see _wait_timeout).
REPORT_GRACE_S = 2.0

#: Most seconds finalize() spends receiving (rank 0) or completing (the others) the arrival notes.
NOTES_CLOSE_S = 5.0

#: Tags on the control communicator: a rank's note of a collective call it entered, to rank 0; rank 0's word to rank 1
#: that it looked at a long wait (the number of the call), and its verdict on ranks in different collectives, to all.
NOTE_TAG, JUDGED_TAG, VERDICT_TAG = 1, 2, 3
#: Most seconds rank 0 waits for the notes still on their way before it says ranks are in different collectives.
VERDICT_WAIT_S = 1.0
#: Idle polls of a collective's wait between two looks at the notes (and at the slow-rank warning's clock).
JUDGE_EVERY = 32
_NUMBER = struct.Struct("<Q")


class ArrivalNotes:
    """Notes to rank 0 on the control communicator: each collective call a rank enters (its
    :class:`~mailrail.collectives.Call`: number, name as the program wrote it, site).

    Rank 0, the judge, notes its own calls and receives the others' into its :attr:`judge`, which finds ranks in
    different collectives and the ranks a wait awaits; O(ranks) notes per collective, all to rank 0.  A collective
    alone cannot say who is missing, nor which call each rank made.  Rank 0 answers only rank 1 on a long wait
    (:meth:`tell_judged`) and, when its ``on_error`` is ``raise``, everyone with its verdict (:meth:`tell_verdict`).
    """

    def __init__(self, comm: MPI.Comm, rank: int, size: int) -> None:
        self._comm, self._rank, self._size = comm, rank, size
        #: Rank 0's judge of the ranks' calls (None on the other ranks).
        self.judge = Judge(size) if rank == 0 else None
        self._sends: deque[tuple[MPI.Request, bytes]] = deque()  # with their bytes, alive until sent
        self._status = MPI.Status()
        self._expected = 0  # notes rank 0 is owed
        self._received = 0

    def announce(self, call: Call) -> None:
        """This rank entered *call*: rank 0 notes it, the others send it to rank 0."""
        if self.judge is not None:
            self.judge.note(0, call)
            self._expected += self._size - 1
        elif self._size > 1:
            self._send(call.encode(), 0, NOTE_TAG)

    def _send(self, data: bytes, dest: int, tag: int) -> None:
        sends = self._sends
        while sends and sends[0][0].Test():  # oldest first: they complete in about that order
            sends.popleft()
        sends.append((self._comm.Isend(data, dest, tag), data))

    def _receive(self, source: int, tag: int) -> tuple[int, bytearray] | None:
        """A message of *tag* from *source* (or any) that came, with its source; None when none did."""
        status = self._status
        if not self._comm.Iprobe(source, tag, status):
            return None
        data = bytearray(status.Get_count(MPI.BYTE))
        source = status.Get_source()
        self._comm.Recv([data, MPI.BYTE], source, tag)
        return source, data

    def collect(self) -> None:
        """Rank 0: take the notes that came into the judge."""
        if self.judge is None:
            return
        while (note := self._receive(MPI.ANY_SOURCE, NOTE_TAG)) is not None:
            self._received += 1
            self.judge.note(note[0], Call.decode(note[1]))

    def verdict(self) -> str | None:
        """Rank 0: the judge's verdict on the notes so far; the other ranks: the verdict rank 0 sent, or None.

        Rank 0 words a mismatch once every rank's call of its number came, or after :data:`VERDICT_WAIT_S`: the
        ranks in a collective have sent theirs, so it names all of them, not only the first two."""
        judge = self.judge
        if judge is not None:
            self.collect()
            if judge.mismatch is not None:
                give_up = time.monotonic() + VERDICT_WAIT_S
                while not judge.complete(judge.mismatch) and time.monotonic() < give_up:
                    time.sleep(1e-3)
                    self.collect()
            return judge.verdict
        if self._size == 1:
            return None
        sent = self._receive(0, VERDICT_TAG)
        return None if sent is None else sent[1].decode(errors="replace")

    def missing(self, number: int) -> list[int] | None:
        """Rank 0: the ranks whose note of call *number* has not come; None on other ranks (they cannot know)."""
        if self.judge is None:
            return None
        self.collect()
        return [rank for rank in self.judge.missing(number) if rank != 0]

    def tell_judged(self, number: int) -> None:
        """Rank 0 has looked at its long wait in call *number*: rank 1, in it too, need not warn of it."""
        self._send(_NUMBER.pack(number), 1, JUDGED_TAG)

    def judged(self, number: int) -> bool:
        """Whether rank 0 said it has looked at this rank's long wait in call *number* (earlier words are dropped)."""
        said = False
        while (word := self._receive(0, JUDGED_TAG)) is not None:
            said = said or _NUMBER.unpack(word[1])[0] == number
        return said

    def tell_verdict(self, verdict: str) -> None:
        """Rank 0: send *verdict* to every other rank, and wait (bounded) until it left."""
        data = verdict.encode()
        for rank in range(1, self._size):
            self._send(data, rank, VERDICT_TAG)
        self._complete_sends()

    def _complete_sends(self) -> None:
        give_up = time.monotonic() + NOTES_CLOSE_S
        requests = [request for request, _ in self._sends]
        while not MPI.Request.Testall(requests) and time.monotonic() < give_up:
            time.sleep(1e-4)

    def close(self) -> None:
        """After finalize()'s exit barrier (every rank sent all its notes): receive or complete them all.

        Bounded: notes of a call that some rank abandoned (a caught StallError) never come, and a note left
        unreceived is harmless once the communicator is freed."""
        give_up = time.monotonic() + NOTES_CLOSE_S
        if self.judge is not None:
            while self._received < self._expected and time.monotonic() < give_up:
                self.collect()
        else:
            while self._receive(0, JUDGED_TAG) is not None:  # words of long waits this rank did not ask for
                pass
        self._complete_sends()
        for request, _ in self._sends:
            if request != MPI.REQUEST_NULL:
                request.Free()  # completes in the background, as MPI allows for a send
        self._sends.clear()


class ControlCollectives:
    """The channels' collectives (``allgather``, ``gather``, ``allreduce``: a sum) on the rail's control communicator.

    Nonblocking, waited for by polling (:meth:`MailRail._wait`): rank 0 keeps judging the ranks' calls
    meanwhile, so a rank waiting here for ranks in another collective hears of it, and a long wait is said.
    """

    def __init__(self, rail: MailRail) -> None:
        self._rail = rail
        self._comm: MPI.Comm = rail._control

    def allreduce(self, value: int) -> int:
        """The sum of the ranks' integers (each fits 64 bits)."""
        # Two numbers, as a barrier's rounds: one rank here and another in a barrier complete a round alike, and
        # rank 0 judges their calls after it, instead of MPI seeing reductions of different sizes.
        local = np.array([value, 0], dtype=np.int64)
        total = np.zeros(2, dtype=np.int64)
        self._rail._wait(self._comm.Iallreduce(local, total, MPI.SUM))
        return int(total[0])

    def allgather(self, value: Any) -> list[Any]:
        """Every rank's *value* (pickled), in rank order."""
        data = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        lengths = np.zeros(self._rail.size, dtype=np.int64)
        self._rail._wait(self._comm.Iallgather(np.array([len(data)], dtype=np.int64), lengths))
        offsets = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=offsets[1:])
        gathered = bytearray(int(lengths.sum()))
        self._rail._wait(self._comm.Iallgatherv(data, [gathered, lengths, offsets, MPI.BYTE]))
        view = memoryview(gathered)
        spans = zip(offsets.tolist(), lengths.tolist(), strict=True)
        return [pickle.loads(view[start : start + length]) for start, length in spans]

    def gather(self, value: Any, root: int = 0) -> list[Any] | None:
        """Every rank's *value* (pickled), in rank order, on rank *root*; None on the others."""
        data = pickle.dumps(value, pickle.HIGHEST_PROTOCOL)
        here = self._rail.rank == root
        lengths = np.zeros(self._rail.size, dtype=np.int64)
        self._rail._wait(
            self._comm.Igather(np.array([len(data)], dtype=np.int64), lengths if here else None, root=root)
        )
        if not here:
            self._rail._wait(self._comm.Igatherv(data, None, root=root))
            return None
        offsets = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=offsets[1:])
        gathered = bytearray(int(lengths.sum()))
        self._rail._wait(self._comm.Igatherv(data, [gathered, lengths, offsets, MPI.BYTE], root=root))
        view = memoryview(gathered)
        spans = zip(offsets.tolist(), lengths.tolist(), strict=True)
        return [pickle.loads(view[start : start + length]) for start, length in spans]


class _Deadline:
    """The stall timeout of one wait: :meth:`expired` gives the seconds waited once it passed (0: never)."""

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        self._start = time.monotonic()

    def expired(self) -> float | None:
        if not self._timeout:
            return None
        waited = time.monotonic() - self._start
        return waited if waited > self._timeout else None


def _receive_unmatched(comm: MPI.Comm, capacity: int) -> int:
    """Receive and count messages that arrived after the posted receives were cancelled."""
    status = MPI.Status()
    scratch = bytearray(max(capacity, 1))
    count = 0
    while comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, status):
        comm.Recv([scratch, status.Get_count(MPI.BYTE), MPI.BYTE], status.Get_source(), status.Get_tag())
        count += 1
    return count
