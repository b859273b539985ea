"""The flow-control modes: one descriptor each, in one table (:data:`MODES`).

Whatever depends on which mode runs reads it from the mode's :class:`FlowMode`: its credit budget and
when it is refused (:meth:`FlowMode.budget`), the counters it keeps in node-shared memory
(:attr:`FlowMode.node_counters`), its strategy in either implementation behind one constructor signature
(:meth:`FlowMode.strategy`, from a :class:`FlowParts`), and the state a rank holds for it
(:meth:`FlowMode.state_bytes`, which :func:`memory_plan` adds up).  ``MailRail``, the in-memory MPI of the
tests, ``mailrail simulate`` and ``mailrail info --plan`` all build from here, and nothing outside this
table branches on a mode's name.

**Adding a mode**: write its strategy (a :class:`~mailrail.flow.base.FlowControl` in a module of its own,
and its case in the compiled ledger ``flow/_ledger.pyx``, tested against it event by event), then one
entry in :data:`MODES`.  The table's tests run every entry through the rail on both transports, the
model and the plan.

No MPI here: node memory reaches a strategy as counters its caller made (an MPI shared window in
``MailRail``, plain memory in tests and in the model), one per name in :attr:`FlowMode.node_counters`.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from typing import Any

from ..config import FLOW_CONTROL_MODES, default
from ..errors import ConfigError
from .adaptive import GRANTED_BYTES, LEASE_BYTES, QUEUE_ENTRY_BYTES, AdaptiveCredits
from .base import FlowControl, Unconstrained
from .node import NodeCredits, SharedCounters
from .rank import RankCredits
from .sizing import CreditBudget, MemoryPlan, lease_budget, split_budget

__all__ = [
    "FULL",
    "MODES",
    "MODE_NAMES",
    "FlowMode",
    "FlowParts",
    "NodeLayout",
    "credit_budget",
    "flow_mode",
    "least_recv_slots",
    "memory_plan",
]

#: A node counter's initial value standing for the budget's credits per pair (node mode's pool starts full).
FULL = -1
#: Bytes of one int64 counter or credit field.
_INT64 = 8


@dataclasses.dataclass(frozen=True)
class NodeLayout:
    """Which node each rank is on, as node-shared strategies read it.

    *map_address*: an int32 rank-to-node map for the compiled ledger, or None with *ranks_per_node* set
    (virtual nodes: consecutive blocks of ranks, no map needed).
    """

    nodes: int
    node_of: Callable[[int], int]
    map_address: int | None = None
    ranks_per_node: int | None = None


@dataclasses.dataclass(frozen=True)
class FlowParts:
    """Everything a strategy is made from: one signature for every mode and both implementations.

    *ranks*: how many destinations its per-rank tables cover; *budget*: the mode's :class:`CreditBudget`
    (None unconstrained); *layout* and *counters*: the node and its shared counters by name, for modes that
    keep any (:attr:`FlowMode.node_counters`; compiled ledgers read their ``address``); *owner*: what keeps
    that memory alive while a compiled ledger points into it.
    """

    ranks: int
    budget: CreditBudget | None = None
    recv_slots: int = 0
    piggyback: bool = True
    max_tag: int = 32767
    layout: NodeLayout | None = None
    counters: Mapping[str, SharedCounters] = dataclasses.field(default_factory=dict)
    owner: object = None

    @property
    def credits(self) -> CreditBudget:
        if self.budget is None:
            raise ValueError("a credit mode's strategy needs its budget")
        return self.budget

    def node(self) -> NodeLayout:
        if self.layout is None:
            raise ValueError("a node-shared strategy needs its node layout")
        return self.layout


def _compiled_ledger(mode: str, parts: FlowParts, **placement: Any) -> FlowControl:
    """The compiled ledger making table entry *mode*'s decisions (``flow._ledger``: one C class for the credit
    modes, of the kind the entry names)."""
    budget = parts.credits
    return compiled_ledger(
        mode, parts.ranks, budget.credits_per_pair, budget.return_threshold, max_tag=parts.max_tag, **placement
    )


def compiled_ledger(
    mode: str, ranks: int, credits_per_pair: int, return_threshold: int, **placement: Any
) -> FlowControl:
    """A compiled :class:`~mailrail.flow._ledger.CreditLedger` of the kind table entry *mode* keeps
    (:class:`~mailrail.errors.ConfigError` for a name the table lacks, ``ValueError`` for a mode without credits);
    *placement* as :class:`~mailrail.flow._ledger.CreditLedger` takes it."""
    kind = flow_mode(mode).ledger_kind
    if kind is None:
        raise ValueError(f"flow-control mode {mode!r} keeps no credits: it has no ledger")
    module = importlib.import_module("mailrail.flow._ledger")
    ledger: FlowControl = module.CreditLedger(
        getattr(module, kind), mode, ranks, credits_per_pair, return_threshold, **placement
    )
    return ledger


def _node_placement(parts: FlowParts, *names: str) -> dict[str, Any]:
    """A node-shared ledger's node map and counter addresses."""
    layout = parts.node()
    placement: dict[str, Any] = {
        "nodes": layout.nodes,
        "ranks_per_node": layout.ranks_per_node or 0,
        "node_map": layout.map_address,
        "owner": parts.owner,
    }
    placement.update((name, parts.counters[name].address) for name in names)
    return placement


@dataclasses.dataclass(frozen=True)
class FlowMode:
    """One flow-control mode: what the rest of MailRail needs to know of it (see the module doc)."""

    name: str
    #: Whether payloads wait for credits (and credit messages travel on the rail's credit communicator).
    has_credits: bool
    #: Among whom the receive slots are split: "rank" (each sender rank), "node" (each sending node), or None
    #: (not split: unconstrained, or lent on request).
    split_among: str | None
    #: Counters per destination rank the node's ranks share, by name, with their initial values (:data:`FULL`:
    #: the budget's credits per pair).
    node_counters: tuple[tuple[str, int], ...]
    _python: Callable[[FlowParts], FlowControl]
    _compiled: Callable[[FlowParts], FlowControl]
    #: (ranks, nodes) -> (private credit state bytes of one rank, node-shared bytes of one node) at the worst.
    _state_bytes: Callable[[int, int], tuple[int, int]]
    #: The credits of one receiver at rest, checked (see :meth:`check_at_rest`).
    _at_rest: Callable[[FlowControl, int, Mapping[int, FlowControl], CreditBudget | None, int], None]
    #: How reports and figures name the mode, and its colour in figures (matplotlib's).
    label: str
    color: str
    #: The modes reports set this one beside, as the ratio of its figure to theirs (the claims the docs make).
    compared_with: tuple[str, ...] = ()
    #: The compiled ledger's kind that keeps its credits (a constant of ``flow._ledger``; None: no credits).
    ledger_kind: str | None = None

    @property
    def lends_on_request(self) -> bool:
        """Whether receivers lend credits on request (so its reports count requests, revokes and give-backs)."""
        return self.has_credits and self.split_among is None

    @property
    def uses_node_memory(self) -> bool:
        """Whether the node's ranks share counters (so the rail must learn the node layout)."""
        return bool(self.node_counters)

    def budget(
        self,
        *,
        recv_slots: int,
        ranks: int,
        nodes: int,
        credit_threshold: int,
        credits_per_pair: int | None = None,
    ) -> CreditBudget | None:
        """The mode's credits per pair and return threshold for a job (None: no credits);
        :class:`~mailrail.errors.ConfigError` where the mode cannot run with *recv_slots* (its message says why
        and which mode would)."""
        if not self.has_credits:
            return None
        if self.split_among is None:
            return lease_budget(recv_slots, credit_threshold, credits_per_pair)
        return split_budget(
            self.name,
            senders=self.senders(ranks, nodes) or 0,
            unit="sender rank" if self.split_among == "rank" else "sending node",
            recv_slots=recv_slots,
            credit_threshold=credit_threshold,
            credits_per_pair=credits_per_pair,
            # rank mode refused: node mode would run where the slots cover the nodes
            node_mode_fits=self.split_among == "rank" and recv_slots >= nodes,
        )

    def budget_needs_nodes(self) -> bool:
        """Whether :meth:`budget` depends on the number of nodes (the rail counts real nodes with MPI first)."""
        return self.split_among == "node"

    def senders(self, ranks: int, nodes: int) -> int | None:
        """Among how many a receiver's slots are split in a job of *ranks* on *nodes*: its sender ranks or
        sending nodes; None where they are not split (unconstrained, or lent on request)."""
        return {"rank": ranks, "node": nodes}.get(self.split_among or "")

    def least_recv_slots(self, ranks: int, nodes: int) -> int:
        """The fewest receive slots per rank this mode runs with in a job of *ranks* on *nodes*: a credit per
        sender where the slots are split among them, else one (lent in turn, or unconstrained: its messages wait
        in MPI's unexpected queue, unbounded)."""
        return self.senders(ranks, nodes) or 1

    def initial(self, counter: str, budget: CreditBudget | None) -> int:
        """The initial value of node counter *counter* for a job with *budget*."""
        value = dict(self.node_counters)[counter]
        if value == FULL:
            if budget is None:
                raise ValueError(f"{self.name} mode's {counter} starts at the credits per pair: give its budget")
            return budget.credits_per_pair
        return value

    def make_node_counters(
        self, budget: CreditBudget | None, make: Callable[[str, int], SharedCounters]
    ) -> dict[str, SharedCounters]:
        """The node's shared counters, by name: ``make(name, initial)`` makes each (an MPI window, plain memory)."""
        return {name: make(name, self.initial(name, budget)) for name, _ in self.node_counters}

    def strategy(self, implementation: str, parts: FlowParts) -> FlowControl:
        """The strategy of this mode in *implementation* (``"python"``: the reference classes; ``"compiled"``:
        the compiled ledger making the same decisions)."""
        if implementation == "python":
            return self._python(parts)
        if implementation == "compiled":
            return self._compiled(parts)
        raise ValueError(f"no implementation {implementation!r}: python or compiled")

    def check_at_rest(
        self,
        receiver: FlowControl,
        dest: int,
        holders: Mapping[int, FlowControl],
        budget: CreditBudget | None,
        recv_slots: int,
    ) -> None:
        """AssertionError unless every credit of receiver rank *dest* is accounted for once traffic has stopped:
        with its sender (*holders*: a strategy per sender rank, or per node where :attr:`uses_node_memory`, each
        holding that sender's credits) or counted by the receiver's *receiver* strategy (Python reference
        classes; the model and the cluster simulation check their runs with it)."""
        self._at_rest(receiver, dest, holders, budget, recv_slots)

    def state_bytes(self, ranks: int, nodes: int) -> tuple[int, int]:
        """Credit state of one rank (adaptive: its worst case, every node asking at once) and node-shared credit
        state of one node, without the rank-to-node map, in a job of *ranks* on *nodes*."""
        return self._state_bytes(ranks, nodes)


def _rank_python(parts: FlowParts) -> FlowControl:
    budget = parts.credits
    return RankCredits(
        parts.ranks, budget.credits_per_pair, budget.return_threshold, piggyback=parts.piggyback, max_tag=parts.max_tag
    )


def _node_python(parts: FlowParts) -> FlowControl:
    budget, layout = parts.credits, parts.node()
    return NodeCredits(
        layout.nodes,
        layout.node_of,
        parts.counters["pool"],
        budget.credits_per_pair,
        budget.return_threshold,
        max_tag=parts.max_tag,
    )


def _adaptive_python(parts: FlowParts) -> FlowControl:
    budget, counters = parts.credits, parts.counters
    return AdaptiveCredits(
        parts.node().node_of,
        counters["pool"],
        counters["tokens"],
        counters["demand"],
        parts.recv_slots,
        budget.credits_per_pair,
        budget.return_threshold,
        max_tag=parts.max_tag,
    )


def _unconstrained(parts: FlowParts) -> FlowControl:
    return Unconstrained()


def _nothing_at_rest(
    receiver: FlowControl, dest: int, holders: Mapping[int, FlowControl], budget: CreditBudget | None, slots: int
) -> None:
    """No credits: nothing to account for."""


def _pairs_at_rest(
    receiver: FlowControl, dest: int, holders: Mapping[int, FlowControl], budget: CreditBudget | None, slots: int
) -> None:
    """Rank and node modes: each sender (rank or node) holds, or has in the receiver's hands, its credits per pair."""
    assert budget is not None
    unreturned = receiver.unreturned  # type: ignore[attr-defined]
    for sender, holder in holders.items():
        held = holder.available(dest) + unreturned[sender]
        if held != budget.credits_per_pair:
            raise AssertionError(f"sender {sender} -> {dest}: {held} credits, not {budget.credits_per_pair}")


def _leases_at_rest(
    receiver: FlowControl, dest: int, holders: Mapping[int, FlowControl], budget: CreditBudget | None, slots: int
) -> None:
    """Adaptive mode: free and leased slots add up to the receive slots, and each node's pool holds its lease's
    credits not in use."""
    adaptive: AdaptiveCredits = receiver  # type: ignore[assignment]
    leases = adaptive.leases
    if adaptive.free + sum(lease.held for lease in leases.values()) != slots:
        raise AssertionError(f"rank {dest}: free and leased credits do not add up to its {slots} slots")
    for node, holder in holders.items():
        lease = leases.get(node)
        held = lease.held - lease.unreturned if lease else 0
        if holder.available(dest) != held:
            raise AssertionError(f"node {node} -> {dest}: pool {holder.available(dest)}, lease {held}")


#: Every flow-control mode, in the order tables and comparisons show them.
MODES: dict[str, FlowMode] = {
    mode.name: mode
    for mode in (
        FlowMode(
            name="none",
            has_credits=False,
            split_among=None,
            node_counters=(),
            _python=_unconstrained,
            _compiled=_unconstrained,  # nothing to compile: the compiled Endpoint skips credits altogether
            _state_bytes=lambda ranks, nodes: (0, 0),
            _at_rest=_nothing_at_rest,
            label="none (unconstrained)",
            color="tab:red",
        ),
        FlowMode(
            name="rank",
            has_credits=True,
            split_among="rank",
            node_counters=(),
            _python=_rank_python,
            _compiled=lambda parts: _compiled_ledger("rank", parts, piggyback=parts.piggyback),
            # credits, owed and unreturned per rank
            _state_bytes=lambda ranks, nodes: (3 * _INT64 * ranks, 0),
            _at_rest=_pairs_at_rest,
            label="rank credits",
            color="tab:blue",
            compared_with=("none",),
            ledger_kind="RANK_LEDGER",
        ),
        FlowMode(
            name="node",
            has_credits=True,
            split_among="node",
            node_counters=(("pool", FULL),),
            _python=_node_python,
            _compiled=lambda parts: _compiled_ledger("node", parts, **_node_placement(parts, "pool")),
            # owed and unreturned per node; the node's pool per destination rank
            _state_bytes=lambda ranks, nodes: (2 * _INT64 * nodes, _INT64 * ranks),
            _at_rest=_pairs_at_rest,
            label="node credits",
            color="tab:green",
            compared_with=("rank", "none"),
            ledger_kind="NODE_LEDGER",
        ),
        FlowMode(
            name="adaptive",
            has_credits=True,
            split_among=None,
            # the pool starts empty (credits are lent on request), the request token at 1 (the node may ask),
            # and the count of the node's sends waiting at 0
            node_counters=(("pool", 0), ("tokens", 1), ("demand", 0)),
            _python=_adaptive_python,
            _compiled=lambda parts: _compiled_ledger(
                "adaptive",
                parts,
                recv_slots=parts.recv_slots,
                **_node_placement(parts, "pool", "tokens", "demand"),
            ),
            # at worst a lease record and a place in each of its three queues per node, and every rank granted
            # since its node's last revoke; shared: pool, tokens, demand
            _state_bytes=lambda ranks, nodes: (
                (LEASE_BYTES + 3 * QUEUE_ENTRY_BYTES) * nodes + GRANTED_BYTES * ranks,
                3 * _INT64 * ranks,
            ),
            _at_rest=_leases_at_rest,
            label="adaptive credits",
            color="tab:purple",
            compared_with=("node", "rank"),
            ledger_kind="ADAPTIVE_LEDGER",
        ),
    )
}

#: The modes' names, in table order.
MODE_NAMES = tuple(MODES)
#: The mode without credits: every send leaves at once (what the credit modes are compared with).
UNCONSTRAINED = next(name for name, mode in MODES.items() if not mode.has_credits)
#: The pairs of modes reports set side by side, (mode, the mode it is compared with), in table order.
COMPARED_PAIRS = tuple((name, other) for name, mode in MODES.items() for other in mode.compared_with)
if MODE_NAMES != FLOW_CONTROL_MODES:  # the knob's values (config.py, beneath this package) name the table's modes
    raise ImportError(f"the flow_control knob offers {FLOW_CONTROL_MODES}, the table of modes has {MODE_NAMES}")


def flow_mode(name: str) -> FlowMode:
    """The mode called *name*; :class:`~mailrail.errors.ConfigError` naming the valid ones otherwise."""
    mode = MODES.get(name)
    if mode is None:
        raise ConfigError(f"no flow-control mode {name!r}: one of {', '.join(MODE_NAMES)}")
    return mode


def credit_budget(
    mode: str, *, recv_slots: int, ranks: int, nodes: int, credit_threshold: int, credits_per_pair: int | None = None
) -> CreditBudget:
    """The credit budget of credit mode *mode* (see :meth:`FlowMode.budget`); ValueError for a mode without
    credits."""
    budget = flow_mode(mode).budget(
        recv_slots=recv_slots,
        ranks=ranks,
        nodes=nodes,
        credit_threshold=credit_threshold,
        credits_per_pair=credits_per_pair,
    )
    if budget is None:
        raise ValueError(f"flow control {mode!r} has no credits")
    return budget


def least_recv_slots(mode: str, ranks: int, nodes: int) -> int:
    """:meth:`FlowMode.least_recv_slots` of the mode called *mode*."""
    return flow_mode(mode).least_recv_slots(ranks, nodes)


def memory_plan(
    mode: str,
    *,
    ranks: int,
    ranks_per_node: int,
    recv_slots: int,
    send_slots: int,
    datagram_size: int,
    credit_threshold: int = default("credit_threshold"),
    credits_per_pair: int | None = None,
    real_nodes: bool = True,
) -> MemoryPlan:
    """Memory per rank of *mode* for a job of *ranks* in nodes of *ranks_per_node*, from the same state the
    flow controls hold (:meth:`FlowMode.state_bytes`; *real_nodes*: the rank-to-node map lives in node-shared
    memory, 4 bytes per rank, for modes that share node memory)."""
    described = flow_mode(mode)
    nodes = -(-ranks // ranks_per_node)
    pools = {"receive_bytes": recv_slots * datagram_size, "send_bytes": send_slots * datagram_size}
    try:
        budget = described.budget(
            recv_slots=recv_slots,
            ranks=ranks,
            nodes=nodes,
            credit_threshold=credit_threshold,
            credits_per_pair=credits_per_pair,
        )
    except ConfigError as error:
        return MemoryPlan(mode, ranks, nodes, None, str(error), credit_bytes=0, shared_bytes_per_node=0, **pools)
    credit, shared = described.state_bytes(ranks, nodes)
    if described.uses_node_memory and real_nodes:
        shared += 4 * ranks
    return MemoryPlan(
        mode,
        ranks,
        nodes,
        None if budget is None else budget.credits_per_pair,
        None,
        credit_bytes=credit,
        shared_bytes_per_node=shared,
        **pools,
    )
