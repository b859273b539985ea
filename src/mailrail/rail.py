"""The application's object: :class:`MailRail`, over one of two transports.

MailRail owns what both message paths share: configuration, communicators,
flow control, pools, the sans-I/O :class:`~mailrail.protocol.Endpoint`,
``barrier``, ``stats`` and ``finalize``.  The per-message work goes to one
transport (:mod:`mailrail.transport`), chosen once at construction: the
compiled one when it is built, else the Python one (``MAILRAIL_ENGINE``).
Payloads travel on a duplicate of the user's communicator, credit returns on a
second duplicate that never carries payload, and ``barrier()``'s collectives on
a third.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
from mpi4py import MPI

from .config import KNOBS, Config
from .errors import ConfigError, FinalizedError, MailRailError, UndeliveredError, UndeliveredWarning
from .flow import NodeCredits, RankCredits, Unconstrained, credit_budget
from .flow.base import FlowControl
from .flow.sizing import CreditBudget
from .nodes import NodeTopology, SharedWindowCounters, resolve_atomics
from .pool import SlotPool
from .protocol import Endpoint
from .quiescence import TerminationDetector
from .transport import compiled
from .transport.base import Message, Transport, Tuning
from .transport.python import PythonTransport

__all__ = ["MailRail", "Message", "choose_transport"]


def choose_transport(config: Config) -> tuple[str, str | None]:
    """``("compiled", None)``, or ``("python", why)``; :class:`ConfigError` if ``engine="compiled"`` cannot run."""
    if config.engine == "python":
        return "python", "MAILRAIL_ENGINE=python"
    if config.trace:
        reason: str | None = "MAILRAIL_TRACE records every send on the Python transport"
    else:
        reason = compiled.unavailable_reason()
        if reason is None and config.flow_control == "node" and resolve_atomics(config.atomics) != "cpu":
            reason = "node credits updated through MPI atomics (MAILRAIL_ATOMICS=mpi) run on the Python transport"
    if reason is not None and config.engine == "compiled":
        raise ConfigError(f"MAILRAIL_ENGINE=compiled, but {reason}")
    return ("python", reason) if reason else ("compiled", None)


class MailRail:
    """Asynchronous, out-of-order, fire-and-forget messaging with credit-based flow control.

    Collective over *comm* (default ``COMM_WORLD``) at construction and at
    :meth:`finalize`.  Each keyword is a knob of :class:`~mailrail.config.Config`
    and overrides its ``MAILRAIL_*`` environment variable; left at None, the
    variable, and then the default, decide (the configuration page lists them).
    A bad value raises :class:`~mailrail.errors.ConfigError` before any MPI
    object exists.  Also a context manager: leaving the block calls
    :meth:`finalize`.
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
        idle_sleep_us: float | None = None,
        atomics: str | None = None,
        engine: str | None = None,
        trace: str | None = None,
    ) -> None:
        # The keywords are Config's fields (a test checks they stay so): None leaves a knob to its
        # MAILRAIL_* variable, then to its default.
        options = {name: value for name, value in locals().items() if name in KNOBS}
        # Everything that can be checked without MPI objects is checked first: a bad option
        # leaves nothing behind.
        self.config = config = Config.from_env(**options)
        comm = MPI.COMM_WORLD if comm is None else comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.datagram_size = config.datagram_size
        # TAG_UB is only guaranteed on COMM_WORLD (the standard promises 32767 at least).
        self.tag_ub = int(comm.Get_attr(MPI.TAG_UB) or MPI.COMM_WORLD.Get_attr(MPI.TAG_UB) or 32767)
        self.engine, self.engine_reason = choose_transport(config)
        budget = self._credit_budget(nodes=self._known_node_count())
        self._topology: NodeTopology | None = None
        self._shared: SharedWindowCounters | None = None
        self._trace = None
        # From here on MPI objects exist: each registers its release, undone in reverse if a later
        # step fails (and at finalize()).
        with contextlib.ExitStack() as resources:
            self._data = self._duplicate(comm, "mailrail-data", resources)
            self._credit = self._duplicate(comm, "mailrail-credit", resources)
            self._control = self._duplicate(comm, "mailrail-control", resources)  # barrier(): never mixed with traffic
            self.flow = self._make_flow_control(comm, budget, resources)
            self._send_pool = SlotPool(config.send_pool_slots, config.datagram_size)
            self._recv_pool = SlotPool(config.recv_pool_slots, config.datagram_size)
            self._endpoint = Endpoint(
                self.rank, self.size, self._send_pool, self.flow, stall_timeout=config.stall_timeout
            )
            if config.trace:
                from .tracing import TraceWriter

                self._trace = TraceWriter.for_rank(config.trace, self.rank)
                resources.callback(self._trace.close)
            self._transport: Transport = self._make_transport()
            self._resources = resources.pop_all()
        # The four per-message calls go straight to the transport: no extra frame per message (the
        # methods below document them and serve a rail whose instance attributes are gone).
        transport = self._transport
        self.reserve_send_buffer = transport.reserve_send_buffer  # type: ignore[method-assign]
        self.send = transport.send  # type: ignore[method-assign]
        self.receive = transport.receive  # type: ignore[method-assign]
        self.release_receive_buffer = transport.release_receive_buffer  # type: ignore[method-assign]
        self.pending_sends = transport.pending_sends  # type: ignore[method-assign]
        self._finalized = False

    # -- construction steps ---------------------------------------------------

    def _known_node_count(self) -> int | None:
        """Nodes, when known without MPI objects: virtual nodes are consecutive rank blocks."""
        per_node = self.config.ranks_per_node
        return None if per_node is None else -(-self.size // per_node)

    def _credit_budget(self, nodes: int | None) -> CreditBudget | None:
        """The credits per pair and return threshold (None: unconstrained, or real nodes not yet counted)."""
        config = self.config
        if config.flow_control == "none" or (config.flow_control == "node" and nodes is None):
            return None
        return self._credits_for(nodes or 0)

    def _credits_for(self, nodes: int) -> CreditBudget:
        config = self.config
        return credit_budget(
            config.flow_control,
            recv_slots=config.recv_pool_slots,
            ranks=self.size,
            nodes=nodes,
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
        """The flow-control strategy: the reference classes on the Python transport, the compiled
        ledger (the same decisions in C) on the compiled one."""
        config, compiled_path = self.config, self.engine == "compiled"
        if config.flow_control == "none":
            return Unconstrained()
        flow: FlowControl
        if config.flow_control == "rank":
            assert budget is not None  # rank mode's budget is computed at construction, before any MPI object
            if compiled_path:
                flow = compiled.credit_ledger(
                    "rank",
                    self.size,
                    budget.credits_per_pair,
                    budget.return_threshold,
                    piggyback=config.piggyback,
                    max_tag=self.tag_ub,
                )
            else:
                flow = RankCredits(
                    self.size,
                    budget.credits_per_pair,
                    budget.return_threshold,
                    piggyback=config.piggyback,
                    max_tag=self.tag_ub,
                )
            return flow
        self._topology = topology = NodeTopology(comm, config.ranks_per_node)
        resources.callback(topology.free)
        budget = budget or self._credits_for(topology.nodes)  # real nodes: counted just now
        self._shared = shared = SharedWindowCounters(topology.comm, self.size, budget.credits_per_pair, config.atomics)
        resources.callback(shared.free)
        if compiled_path:
            flow = compiled.credit_ledger(
                "node",
                self.size,
                budget.credits_per_pair,
                budget.return_threshold,
                nodes=topology.nodes,
                ranks_per_node=config.ranks_per_node or 0,
                node_map=topology.map_address,
                pool=shared.address,
                owner=(shared, topology),
            )
        else:
            flow = NodeCredits(
                topology.nodes, topology.node_of, shared, budget.credits_per_pair, budget.return_threshold
            )
        resources.callback(flow.detach)  # before the node memory it points into is freed
        return flow

    def _make_transport(self) -> Transport:
        config = self.config
        recv_views = [view[:] for view in self._recv_pool.views]
        for view in recv_views:
            view.flags.writeable = False
        common: dict[str, Any] = dict(
            send_pool=self._send_pool,
            recv_pool=self._recv_pool,
            recv_views=recv_views,
            posted_receives=config.posted_receives,
            endpoint=self._endpoint,
            tuning=Tuning.for_idle_sleep(config.idle_sleep_us),
        )
        credit_comm = self._credit if config.flow_control != "none" else None
        if self.engine == "compiled":
            engine: Transport = compiled.make(
                self._data,
                credit_comm,
                size=self.size,
                tag_ub=self.tag_ub,
                ledger=self.flow if credit_comm is not None else None,
                **common,
            )
            return engine
        return PythonTransport(
            comm=self._data, credit_comm=credit_comm, tag_ub=self.tag_ub, trace=self._trace, **common
        )

    # -- application API (per instance, these are the transport's own methods) --

    def reserve_send_buffer(self) -> np.ndarray | None:
        """A writable ``datagram_size``-byte view from the send pool, or None (backpressure).

        On None, keep calling :meth:`receive` (it frees completed sends) and retry.
        """
        return self._transport.reserve_send_buffer()

    def send(self, dest: int, buf: np.ndarray, nbytes: int) -> None:
        """Send the first *nbytes* of *buf* (from :meth:`reserve_send_buffer`) to rank *dest*.

        Fire-and-forget: *buf* belongs to MailRail from now on.  Without credit
        for *dest* the message waits in a per-destination FIFO and leaves later.
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
        """Messages sent by the application that have not completed locally (deferred or in flight)."""
        return self._transport.pending_sends()

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
        receive, release = self.receive, self.release_receive_buffer
        while True:
            local[0], local[1] = self._sent_and_released()
            request = self._control.Iallreduce(local, total, MPI.SUM)
            while not request.Test():
                message = receive()
                if message is not None:
                    if handler is None:
                        release(message)
                        raise MailRailError(
                            f"barrier() without a handler received a message from rank {message.source} "
                            f"({message.nbytes} bytes): pass handler= to process messages that arrive"
                        )
                    handler(message)
                    if message._slot >= 0:  # type: ignore[attr-defined]  # not released by the handler
                        release(message)
                    handled += 1
            if detector.round_finished(int(total[0]), int(total[1])):
                break
        if self._trace is not None:
            self._trace.barrier_end(*self._sent_and_released())
        return handled

    def _sent_and_released(self) -> tuple[int, int]:
        """Messages this rank handed to send() (deferred ones included), and messages it released."""
        counters = self._transport.counters()
        return counters["messages_sent"], counters["messages_released"]

    # -- introspection -----------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Counters of this rank (each defined in :mod:`mailrail.counters`)."""
        stats: dict[str, Any] = self._transport.counters()
        stats.update(self._endpoint.protocol_counters())
        stats["engine"] = self._transport.name
        stats["flow_control"] = self.flow.name
        stats["credits_per_pair"] = self.flow.credits_per_pair
        stats["recv_pool_bytes"] = self._recv_pool.nbytes
        stats["send_pool_bytes"] = self._send_pool.nbytes
        if self._topology is not None and self._shared is not None:  # node mode
            stats["shared_credit_bytes"] += self._topology.shared_map_bytes
            stats["nodes"] = self._topology.nodes
            stats["atomics"] = self._shared.atomics
        return stats

    def __repr__(self) -> str:
        state = " finalized" if getattr(self, "_finalized", False) else ""
        return (
            f"<MailRail rank {self.rank} of {self.size}, flow_control={self.config.flow_control!r}, "
            f"engine={self.engine!r}{state}>"
        )

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
        transport = self._transport
        dropped_deferred = len(self._endpoint.deferred.clear())
        unreleased = transport.held
        transport.stop()  # the application's calls raise from now on
        unreceived = 0
        # 1: everyone stops sending; 2: every rank's sends completed.  Meanwhile keep
        # receives moving so rendezvous sends complete, and count what arrives.
        for phase in (1, 2):
            if phase == 2:
                while transport.reclaim_sends():
                    unreceived += transport.discard_arrivals()
            barrier = self._data.Ibarrier()
            while not barrier.Test():
                transport.reclaim_sends()
                unreceived += transport.discard_arrivals()
                time.sleep(1e-4)
        unreceived += transport.discard_arrivals()
        unreceived += transport.cancel_receives()
        unreceived += _receive_unmatched(self._data, self.datagram_size)
        _receive_unmatched(self._credit, 0)
        transport.close()
        self._resources.close()  # flow detached, node memory, communicators, trace: in reverse order
        report = {"deferred": dropped_deferred, "unreleased": unreleased, "unreceived": unreceived}
        if any(report.values()):
            text = (
                f"MailRail.finalize() on rank {self.rank}: {dropped_deferred} deferred message(s) never "
                f"sent, {unreleased} received message(s) never released, {unreceived} arrived message(s) "
                f"never returned by receive(); call barrier() (quiescence) before finalize()"
            )
            if strict:
                raise UndeliveredError(text)
            warnings.warn(text, UndeliveredWarning, stacklevel=2)
        return report

    def __enter__(self) -> MailRail:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if not self._finalized:
            self.finalize()

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


def _receive_unmatched(comm: MPI.Comm, capacity: int) -> int:
    """Receive and count messages that arrived after the posted receives were cancelled."""
    status = MPI.Status()
    scratch = bytearray(max(capacity, 1))
    count = 0
    while comm.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, status):
        comm.Recv([scratch, status.Get_count(MPI.BYTE), MPI.BYTE], status.Get_source(), status.Get_tag())
        count += 1
    return count
