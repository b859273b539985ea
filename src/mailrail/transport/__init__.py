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
from ..flow.base import FlowControl
from ..flow.modes import flow_mode
from ..flow.node_memory import resolve_atomics
from ..pool import SlotPool
from ..protocol import Endpoint, Message
from . import compiled
from .base import Transport, Tuning
from .python import PythonTransport

if TYPE_CHECKING:
    from ..config import Config

__all__ = [
    "Implementation",
    "Message",
    "RankStack",
    "PythonTransport",
    "Transport",
    "Tuning",
    "choose",
    "implementation",
]


@dataclasses.dataclass(frozen=True)
class Implementation:
    """One implementation of the protocol and its transport (see the module doc); a mode's strategy in it comes
    from the mode's table entry (:meth:`mailrail.flow.modes.FlowMode.strategy` with this :attr:`name`)."""

    name: str  # "python" or "compiled"
    endpoint: Callable[..., Any]  # the Endpoint class: (rank, size, send_pool, flow, *, tag_ub, ...)
    message: type  # the Message class its Endpoint hands out
    transport: Callable[..., Transport]  # (*, comm, credit_comm, send_pool, recv_pool, ...)

    def build(
        self,
        rank: int,
        size: int,
        flow: FlowControl,
        *,
        datagram_size: int,
        send_pool_slots: int,
        recv_pool_slots: int,
        posted_receives: int,
        tag_ub: int,
        tuning: Tuning,
        stall_timeout: float,
        **communicators: Any,
    ) -> RankStack:
        """A rank's stack over *flow* (from its mode's table entry): the pools, the Endpoint, and the transport on
        *communicators* (``comm`` and ``credit_comm``, and the MPI this implementation calls: mpi4py's by default;
        the tests' in-memory MPI passes its own).  ``MailRail`` and the tests' in-memory MPI both build here."""
        send_pool = SlotPool(send_pool_slots, datagram_size)
        recv_pool = SlotPool(recv_pool_slots, datagram_size)
        endpoint = self.endpoint(
            rank,
            size,
            send_pool,
            flow,
            tag_ub=tag_ub,
            head_patience=tuning.head_patience,
            credit_poll_interval=tuning.credit_poll_interval,
            idle_spins=tuning.idle_spins,
            stall_timeout=stall_timeout,
            recv_slots=recv_pool_slots,
            posted_receives=posted_receives,
        )
        recv_views = [view[:] for view in recv_pool.views]
        for view in recv_views:  # what receive() hands out: the application reads, never writes, a receive slot
            view.flags.writeable = False
        transport = self.transport(
            send_pool=send_pool,
            recv_pool=recv_pool,
            recv_views=recv_views,
            posted_receives=posted_receives,
            endpoint=endpoint,
            tuning=tuning,
            **communicators,
        )
        return RankStack(flow, send_pool, recv_pool, endpoint, transport)


@dataclasses.dataclass(frozen=True)
class RankStack:
    """What :meth:`Implementation.build` makes for one rank."""

    flow: FlowControl
    send_pool: SlotPool
    recv_pool: SlotPool
    endpoint: Endpoint  # the implementation's (the compiled one has the same interface)
    transport: Transport


PYTHON = Implementation(name="python", endpoint=Endpoint, message=Message, transport=PythonTransport)


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
        name="compiled", endpoint=protocol.Endpoint, message=protocol.Message, transport=compiled.make
    )


def choose(config: Config) -> tuple[str, str | None]:
    """``("compiled", None)``, or ``("python", why)``; :class:`ConfigError` if ``implementation="compiled"``
    cannot run here."""
    if config.implementation == "python":
        return "python", "MAILRAIL_IMPLEMENTATION=python"
    reason = compiled.unavailable_reason()
    if reason is None and flow_mode(config.flow_control).uses_node_memory and resolve_atomics(config.atomics) != "cpu":
        reason = "node credits updated through MPI atomics (MAILRAIL_ATOMICS=mpi) run on the Python transport"
    if reason is not None and config.implementation == "compiled":
        raise ConfigError(f"MAILRAIL_IMPLEMENTATION=compiled, but {reason}")
    return ("python", reason) if reason else ("compiled", None)
