"""What every rail offers a program, as types: :class:`DatagramRail` and its :class:`Message` (no MPI here).

Two kinds of rail implement it: :class:`~mailrail.rail.MailRail` over MPI, and the rails of
:mod:`mailrail.testing` (a program's ranks in one process).  Code that takes "a rail" (the channels, the
containers, the applications) is typed with these protocols rather than with either class, so it runs on
both; ``tests/library/test_interfaces.py`` fails when a rail's public API drifts from them.
:class:`mailrail.channels.Rail` adds what a rail with channels offers (``channels``, ``call``): the type the
containers take.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol, runtime_checkable

import numpy as np

__all__ = ["DatagramRail", "Message"]


@runtime_checkable
class Message(Protocol):
    """An arrived message: ``data`` is a read-only view of ``nbytes`` bytes from rank ``source``.

    ``data`` lies in the receive pool and is valid until
    :meth:`~mailrail.rail.MailRail.release_receive_buffer`; copy what must outlive it.  Each
    implementation's Endpoint makes its own (:class:`mailrail.protocol.Message`, or the compiled
    ``mailrail._protocol.Message``); both have these three attributes.
    """

    @property
    def source(self) -> int:
        """The rank that sent it (in :attr:`MailRail.comm <mailrail.rail.MailRail.comm>`)."""
        ...

    @property
    def nbytes(self) -> int:
        """Its length in bytes: the *nbytes* the sender passed to :meth:`~mailrail.rail.MailRail.send`."""
        ...

    @property
    def data(self) -> np.ndarray:
        """The *nbytes* bytes, a read-only ``uint8`` array viewing the receive pool (no copy); view it as
        another dtype with ``message.data.view(dtype)``."""
        ...


@runtime_checkable
class DatagramRail(Protocol):
    """A rail's datagrams: reserve a send buffer, send it, receive, release, barrier, finalize."""

    #: This rank: the ``dest`` other ranks send to it with.
    rank: int
    #: The ranks: valid destinations are ``0 .. size - 1``.
    size: int
    #: The largest message, in bytes (a send buffer's length).
    datagram_size: int
    #: Send buffers in the pool.
    send_pool_slots: int

    @property
    def comm(self) -> Any:
        """The communicator the rail was made on, for the application's own collectives."""
        ...

    def reserve_send_buffer(self) -> np.ndarray | None:
        """A free send buffer, or None when the pool is full (backpressure: call :meth:`receive`)."""
        ...

    def send(self, dest: int, buf: np.ndarray, nbytes: int) -> None:
        """Send the first *nbytes* of a reserved buffer to rank *dest* (fire-and-forget)."""
        ...

    def receive(self) -> Message | None:
        """Make progress; an arrived message, or None."""
        ...

    def release_receive_buffer(self, message: Message) -> None:
        """Give a received message's buffer back."""
        ...

    def pending_sends(self) -> int:
        """Send buffers reserved and not yet sent, plus sends not completed locally."""
        ...

    def barrier(self, handler: Callable[[Message], object] | None = None) -> int:
        """Collective: return once every message sent before it is received and released."""
        ...

    def finalize(self, strict: bool = False) -> dict[str, int]:
        """Collective: free everything; report what was not delivered."""
        ...

    def stats(self) -> dict[str, Any]:
        """This rank's counters."""
        ...

    def __enter__(self) -> Any: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None: ...
