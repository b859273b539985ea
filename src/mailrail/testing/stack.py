"""A rank of MailRail's real stack (flow control, pools, Endpoint, transport) over an :class:`InMemoryMPI`.

:func:`make_rank` builds it as :class:`~mailrail.rail.MailRail` does (the mode's table entry, then
``Implementation.build``), with the same knobs, on either transport: the Python one over the in-memory
MPI's Python face, the compiled one over its C face.  :class:`RankRail` holds what was built and
``finalize()``'s local steps; :func:`finalize_all` runs them on every rank.  :class:`mailrail.testing.World`
with ``implementation=`` runs programs on these ranks; the project's transport tests drive them call by call.
"""

from __future__ import annotations

import dataclasses
import sys
from typing import Any

import numpy as np

from ..config import default
from ..flow import FlowParts, NodeLayout, flow_mode
from ..flow.base import FlowControl
from ..flow.modes import UNCONSTRAINED
from ..flow.node import LocalCounters
from ..flow.sizing import CreditBudget
from ..pool import SlotPool
from ..transport import implementation
from ..transport.base import Tuning
from .mpi import InMemoryMPI, WouldBlock

__all__ = [
    "IMPLEMENTATIONS",
    "DATA",
    "CREDIT",
    "RankRail",
    "job_budget",
    "make_rank",
    "make_ranks",
    "finalize_all",
    "unavailable",
]


#: The implementations a rank can be built in (each with its transport on the in-memory MPI).
IMPLEMENTATIONS = ("python", "compiled")
#: The communicators a rail uses for payloads and credit returns.
DATA, CREDIT = "mailrail-data", "mailrail-credit"
#: Tuning for tests: never yield the core when idle (the fake needs no other process to run).
TEST_TUNING = Tuning(idle_spins=2**31 - 1)


def unavailable(kind: str) -> str | None:
    """None when the *kind* transport can run here, else why not (a test skips, saying so)."""
    try:
        implementation(kind)
    except (RuntimeError, ImportError) as error:
        return f"the {kind} implementation cannot run here: {error}"
    return None


@dataclasses.dataclass
class RankRail:
    """One rank over the in-memory MPI: its transport, its Endpoint, and what MailRail builds around them.

    The tests call the transport's methods, and these for what lives elsewhere (the Endpoint).
    """

    rank: int
    kind: str
    transport: Any
    endpoint: Any
    flow: FlowControl
    send_pool: SlotPool
    recv_pool: SlotPool
    network: InMemoryMPI

    def counters(self) -> dict[str, int]:
        return dict(self.endpoint.counters())

    def pending_sends(self) -> int:
        return int(self.endpoint.pending_sends())

    @property
    def held(self) -> int:
        return int(self.endpoint.held)

    def stop(self) -> dict[str, int]:
        """finalize()'s first step: the application's calls raise from now on.  The report so far: send
        buffers reserved and never sent, messages received and not released, deferred sends dropped."""
        reserved, unreleased = self.counters()["send_buffers_reserved"], self.held
        return {"reserved": reserved, "unreleased": unreleased, "deferred": int(self.endpoint.stop()), "unreceived": 0}

    def settle(self) -> tuple[int, int]:
        """finalize()'s second step, repeated until every rank's sends completed: complete this rank's sends
        and discard what arrives meanwhile.  Returns (sends still in flight, arrivals discarded)."""
        in_flight = int(self.transport.reclaim_sends())
        return in_flight, int(self.transport.discard_arrivals())

    def close(self) -> int:
        """finalize()'s last step, once no message is in the network: discard arrivals, cancel the receives,
        receive the unmatched messages, free the requests.  Returns the messages never received."""
        transport, network = self.transport, self.network
        unreceived = int(transport.discard_arrivals()) + int(transport.cancel_receives())
        unreceived += network.receive_unexpected(self.rank, DATA)
        network.receive_unexpected(self.rank, CREDIT)
        transport.close()
        return unreceived


def job_budget(
    size: int,
    flow_control: str,
    recv_pool_slots: int,
    ranks_per_node: int | None,
    credit_threshold: int,
    credits_per_pair: int | None,
) -> CreditBudget | None:
    """The mode's credit budget for *size* ranks in nodes of *ranks_per_node* consecutive ranks (one node when
    None), as :class:`~mailrail.rail.MailRail` computes it: :class:`~mailrail.errors.ConfigError` where the mode
    cannot run."""
    per_node = ranks_per_node or size
    return flow_mode(flow_control).budget(
        recv_slots=recv_pool_slots,
        ranks=size,
        nodes=-(-size // per_node),
        credit_threshold=credit_threshold,
        credits_per_pair=credits_per_pair,
    )


def make_rank(
    network: InMemoryMPI,
    rank: int,
    kind: str,
    *,
    flow_control: str = UNCONSTRAINED,
    datagram_size: int = 64,
    send_pool_slots: int = 8,
    recv_pool_slots: int = 8,
    max_recvs: int | None = None,
    credits_per_pair: int | None = None,
    credit_threshold: int = default("credit_threshold"),
    piggyback: bool = default("piggyback"),
    ranks_per_node: int | None = None,
    stall_timeout: float = 0.0,
    tuning: Tuning = TEST_TUNING,
) -> RankRail:
    """Rank *rank*'s *kind* (``"python"`` or ``"compiled"``) implementation over *network*, built as ``MailRail``
    builds it (the mode's table entry, then ``Implementation.build``), with the same knobs.  Modes that share
    node memory group ranks into nodes of *ranks_per_node* consecutive ranks, which share counters in plain
    memory (:class:`~mailrail.flow.node.LocalCounters`, one per name the mode's table entry lists).  The
    transport is abandoned when *network* closes, if still open.
    """
    if kind not in IMPLEMENTATIONS:
        raise ValueError(f"kind must be one of {IMPLEMENTATIONS}, not {kind!r}")
    reason = unavailable(kind)
    if reason is not None:
        raise RuntimeError(reason)
    chosen = implementation(kind)
    size = network.size
    # -- flow control, as MailRail._make_flow_control: the mode's table entry builds it --
    mode = flow_mode(flow_control)
    per_node = ranks_per_node or size
    nodes = -(-size // per_node)
    budget = job_budget(size, flow_control, recv_pool_slots, ranks_per_node, credit_threshold, credits_per_pair)
    parts = FlowParts(
        ranks=size, budget=budget, recv_slots=recv_pool_slots, piggyback=piggyback, max_tag=network.tag_ub
    )
    if mode.uses_node_memory:
        node_map = np.arange(size, dtype=np.int32) // per_node

        def node_counters(name: str, initial: int) -> LocalCounters:
            # one per node and name, shared by the node's ranks (they live in one process here)
            made: dict[int, LocalCounters] = network.__dict__.setdefault(f"_node_{name}", {})
            return made.setdefault(rank // per_node, LocalCounters(size, initial))

        counters = mode.make_node_counters(budget, node_counters)
        layout = NodeLayout(nodes, lambda other: other // per_node, int(node_map.ctypes.data))
        parts = dataclasses.replace(parts, layout=layout, counters=counters, owner=(*counters.values(), node_map))
    flow = mode.strategy(kind, parts)
    network.on_close(flow.detach)
    # -- pools, Endpoint and transport, as MailRail builds them: Implementation.build --
    data = network.comm(rank, DATA)
    credit = network.comm(rank, CREDIT) if mode.has_credits else None
    if kind == "compiled":  # the C face: raw handles and the fake's library
        communicators: dict[str, Any] = dict(
            comm=data.handle, credit_comm=None if credit is None else credit.handle, library=network.library()
        )
    else:  # the Python face: the fake's communicators and MPI names
        communicators = dict(comm=data, credit_comm=credit, mpi=network.mpi)
    stack = chosen.build(
        rank,
        size,
        flow,
        datagram_size=datagram_size,
        send_pool_slots=send_pool_slots,
        recv_pool_slots=recv_pool_slots,
        posted_receives=recv_pool_slots if max_recvs is None else max_recvs,
        tag_ub=network.tag_ub,
        tuning=tuning,
        stall_timeout=stall_timeout,
        **communicators,
    )
    transport, endpoint = stack.transport, stack.endpoint
    network.on_close(lambda: _abandon_quietly(transport))
    return RankRail(rank, kind, transport, endpoint, flow, stack.send_pool, stack.recv_pool, network)


def make_ranks(network: InMemoryMPI, kind: str, **knobs: Any) -> list[RankRail]:
    """Every rank of *network* with the same knobs (MailRail's ranks must agree on them)."""
    return [make_rank(network, rank, kind, **knobs) for rank in range(network.size)]


def _abandon_quietly(transport: Any) -> None:
    try:
        transport.abandon()
    except Exception as error:  # the test's own failure, if any, is the one to see
        print(f"abandon() at the in-memory MPI's close raised {type(error).__name__}: {error}", file=sys.stderr)


def finalize_all(ranks: list[RankRail], *, limit: int = 1000) -> list[dict[str, int]]:
    """``MailRail.finalize()``'s local steps on every rank, its collectives replaced by delivering the network.

    Deferred sends are dropped and counted, the application's calls refused, sends completed while
    arrivals are discarded, then receives cancelled, unmatched messages received, requests freed.
    Returns per rank the counts finalize reports (deferred, unreleased, unreceived, reserved).
    """
    network = ranks[0].network
    reports = [rail.stop() for rail in ranks]
    for _ in range(limit):  # finalize's phases 1 and 2: every rank's sends complete
        in_flight = 0
        for rail, report in zip(ranks, reports):
            still, discarded = rail.settle()
            in_flight += still
            report["unreceived"] += discarded
        if not network.in_flight() and not in_flight:
            break
        network.deliver_all()
    else:
        raise WouldBlock(f"finalize: sends still in flight after {limit} rounds")
    for rail, report in zip(ranks, reports):
        report["unreceived"] += rail.close()
    return reports
