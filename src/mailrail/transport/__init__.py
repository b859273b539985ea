"""The transports beneath :class:`~mailrail.rail.MailRail`, and the one place an implementation is chosen.

An :class:`Implementation` is a matched set: an Endpoint (the protocol's state and
rules), its Message, its credit ledgers and the transport that moves its bytes.
The Python one is the specification (:mod:`mailrail.protocol`, :mod:`mailrail.flow`,
:mod:`.python`); the compiled one compiles the same Endpoint and ledgers
(``mailrail._protocol``, ``mailrail.flow._ledger``) under a compiled transport
(:mod:`.compiled`).  :func:`choose` picks one from the configuration, once, as
msgpack picks its C or fallback module; nothing else branches on it.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..errors import ConfigError
from ..flow import AdaptiveCredits, NodeCredits, RankCredits
from ..flow.base import FlowControl
from ..flow.node_memory import resolve_atomics
from ..protocol import Endpoint, Message
from . import compiled
from .base import Transport, Tuning
from .python import PythonTransport

if TYPE_CHECKING:
    from ..config import Config
    from ..flow.node_memory import NodeTopology, SharedWindowCounters

__all__ = ["Implementation", "Message", "PythonTransport", "Transport", "Tuning", "choose", "implementation"]


@dataclasses.dataclass(frozen=True)
class Implementation:
    """One implementation of the protocol and its transport (see the module doc)."""

    name: str  # "python" or "compiled"
    endpoint: Callable[..., Any]  # the Endpoint class: (rank, size, send_pool, flow, *, tag_ub, ...)
    message: type  # the Message class its Endpoint hands out
    transport: Callable[..., Transport]  # (*, comm, credit_comm, send_pool, recv_pool, ...)
    rank_credits: Callable[..., FlowControl]  # (ranks, credits_per_pair, return_threshold, *, piggyback, max_tag)
    node_credits: Callable[..., FlowControl]  # (topology, shared, ranks, credits_per_pair, return_threshold, *, ...)
    # (topology, pool, tokens, demand, ranks, recv_slots, lease, credit_threshold, *, ranks_per_node, max_tag)
    adaptive_credits: Callable[..., FlowControl]


def _python_node_credits(
    topology: NodeTopology,
    shared: SharedWindowCounters,
    ranks: int,
    credits_per_pair: int,
    return_threshold: int,
    *,
    ranks_per_node: int | None,
    max_tag: int,
) -> FlowControl:
    return NodeCredits(topology.nodes, topology.node_of, shared, credits_per_pair, return_threshold, max_tag=max_tag)


def _compiled_node_credits(
    topology: NodeTopology,
    shared: SharedWindowCounters,
    ranks: int,
    credits_per_pair: int,
    return_threshold: int,
    *,
    ranks_per_node: int | None,
    max_tag: int,
) -> FlowControl:
    ledger: FlowControl = compiled.credit_ledger(
        "node",
        ranks,
        credits_per_pair,
        return_threshold,
        max_tag=max_tag,
        nodes=topology.nodes,
        ranks_per_node=ranks_per_node or 0,
        node_map=topology.map_address,
        pool=shared.address,
        owner=(shared, topology),
    )
    return ledger


def _python_adaptive_credits(
    topology: NodeTopology,
    pool: SharedWindowCounters,
    tokens: SharedWindowCounters,
    demand: SharedWindowCounters,
    ranks: int,
    recv_slots: int,
    lease: int,
    credit_threshold: int,
    *,
    ranks_per_node: int | None,
    max_tag: int,
) -> FlowControl:
    return AdaptiveCredits(topology.node_of, pool, tokens, demand, recv_slots, lease, credit_threshold, max_tag=max_tag)


def _compiled_adaptive_credits(
    topology: NodeTopology,
    pool: SharedWindowCounters,
    tokens: SharedWindowCounters,
    demand: SharedWindowCounters,
    ranks: int,
    recv_slots: int,
    lease: int,
    credit_threshold: int,
    *,
    ranks_per_node: int | None,
    max_tag: int,
) -> FlowControl:
    ledger: FlowControl = compiled.credit_ledger(
        "adaptive",
        ranks,
        lease,
        credit_threshold,
        max_tag=max_tag,
        recv_slots=recv_slots,
        nodes=topology.nodes,
        ranks_per_node=ranks_per_node or 0,
        node_map=topology.map_address,
        pool=pool.address,
        tokens=tokens.address,
        demand=demand.address,
        owner=(pool, tokens, demand, topology),
    )
    return ledger


def _compiled_rank_credits(
    ranks: int, credits_per_pair: int, return_threshold: int, *, piggyback: bool, max_tag: int
) -> FlowControl:
    ledger: FlowControl = compiled.credit_ledger(
        "rank", ranks, credits_per_pair, return_threshold, piggyback=piggyback, max_tag=max_tag
    )
    return ledger


PYTHON = Implementation(
    name="python",
    endpoint=Endpoint,
    message=Message,
    transport=PythonTransport,
    rank_credits=RankCredits,
    node_credits=_python_node_credits,
    adaptive_credits=_python_adaptive_credits,
)


def implementation(name: str) -> Implementation:
    """The implementation called *name*; ``"compiled"`` raises RuntimeError where it cannot run."""
    if name == "python":
        return PYTHON
    if name != "compiled":
        raise ValueError(f"no implementation {name!r}: python or compiled")
    reason = compiled.unavailable_reason()
    if reason is not None:
        raise RuntimeError(reason)
    protocol = importlib.import_module("mailrail._protocol")
    return Implementation(
        name="compiled",
        endpoint=protocol.Endpoint,
        message=protocol.Message,
        transport=compiled.make,
        rank_credits=_compiled_rank_credits,
        node_credits=_compiled_node_credits,
        adaptive_credits=_compiled_adaptive_credits,
    )


def choose(config: Config) -> tuple[str, str | None]:
    """``("compiled", None)``, or ``("python", why)``; :class:`ConfigError` if ``transport="compiled"``
    cannot run here."""
    if config.transport == "python":
        return "python", "MAILRAIL_TRANSPORT=python"
    reason = compiled.unavailable_reason()
    if reason is None and config.flow_control in ("node", "adaptive") and resolve_atomics(config.atomics) != "cpu":
        reason = "node credits updated through MPI atomics (MAILRAIL_ATOMICS=mpi) run on the Python transport"
    if reason is not None and config.transport == "compiled":
        raise ConfigError(f"MAILRAIL_TRANSPORT=compiled, but {reason}")
    return ("python", reason) if reason else ("compiled", None)
