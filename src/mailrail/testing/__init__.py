"""Unit tests of MailRail programs without ``mpiexec``: N ranks in one process, in a seeded order.

- :class:`World` (:mod:`.world`) runs ``program(rail, *args)`` on every rank.  By default its rails are an
  in-memory model of the API (no MPI); with ``implementation="python"`` or ``"compiled"`` they are MailRail's real
  stack (flow control in any mode, pools, Endpoint, transport) over the in-memory MPI.
- :class:`InMemoryMPI` (:mod:`.mpi`) is that MPI: point-to-point messages with MPI's matching, on an
  mpi4py-like face and a C face, moved only when the caller says.
- :mod:`.stack` builds one rank's real stack over it, as :class:`~mailrail.rail.MailRail` does.

The model imports no MPI; the rest loads mpi4py (as the transports do) on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .world import Comm, DeadlockError, LivelockError, Message, Rail, TransportRail, World, WorldError

if TYPE_CHECKING:
    from .mpi import InMemoryMPI

__all__ = [
    "World",
    "Rail",
    "TransportRail",
    "Comm",
    "Message",
    "WorldError",
    "DeadlockError",
    "LivelockError",
    "InMemoryMPI",
]


def __getattr__(name: str) -> Any:
    if name == "InMemoryMPI":
        from .mpi import InMemoryMPI

        return InMemoryMPI
    raise AttributeError(f"module 'mailrail.testing' has no attribute {name!r}")
