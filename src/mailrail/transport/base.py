"""The transport seam: what MailRail asks of the code that moves bytes.

:class:`~mailrail.rail.MailRail` owns what both message paths share
(configuration, communicators, pools, ``barrier``, ``stats``, ``finalize``); the
sans-I/O :class:`~mailrail.protocol.Endpoint` owns every protocol rule and all
protocol state; a :class:`Transport` owns only MPI handles, request rings and the
loop that asks the Endpoint what to do and tells it what MPI did.  Which
Endpoint and which Transport (Python, or both compiled) is chosen once, in
:mod:`mailrail.transport`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

import numpy as np

from ..interfaces import Message

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
#: that on an oversubscribed machine the rank that has work runs (the incast benchmark's credit modes
#: run faster than with a longer spin: docs, performance, "Smaller measurements").
IDLE_SPINS = 4


@dataclasses.dataclass(frozen=True)
class Tuning:
    """The progress engine's constants, the same for both transports."""

    send_test_window: int = SEND_TEST_WINDOW
    head_patience: int = SEND_HEAD_PATIENCE
    credit_poll_interval: int = CREDIT_POLL_INTERVAL
    credit_receives: int = CREDIT_RECEIVES
    idle_spins: int = IDLE_SPINS
    idle_sleep_ns: int = 0  # after idle_spins empty receive() calls: 0 yields the core, > 0 sleeps

    @classmethod
    def for_idle_sleep(cls, idle_sleep_us: float) -> Tuning:
        return cls(idle_sleep_ns=int(idle_sleep_us * 1000))


class Transport(Protocol):
    """Moves one rank's messages over MPI for its Endpoint.  MailRail calls it; the application calls its
    first four.  Both implementations take the same keyword arguments: ``comm``, ``credit_comm``
    (None without credits), ``send_pool``, ``recv_pool``, ``recv_views``, ``posted_receives``, ``endpoint``
    and ``tuning``.
    """

    #: ``"python"`` or ``"compiled"``.
    name: str

    def reserve_send_buffer(self) -> np.ndarray | None:
        """A writable slot of the send pool, or None (backpressure)."""

    def send(self, dest: Any, buf: Any, nbytes: Any) -> None:
        """Hand *buf* to the Endpoint, and start its send if it leaves now."""

    def receive(self) -> Message | None:
        """Progress (reclaim sends, credits, deferred sends), then one arrived message or None."""

    def release_receive_buffer(self, message: Any) -> None:
        """Give the message's slot back to the Endpoint, re-post it, and send credits when due."""

    def reclaim_sends(self) -> int:
        """Reclaim completed sends (a few, oldest first); return how many are still in flight."""

    def discard_arrivals(self) -> int:
        """Re-post arrived payloads without handing them out (and drop credit messages); return how many."""

    def cancel_receives(self) -> int:
        """Cancel every posted receive; return how many payload receives had matched a message."""

    def close(self) -> None:
        """Free every MPI request: receives cancelled and sends completed first."""

    def abandon(self) -> None:
        """Local clean-up without any collective call: the rail collected without finalize(), an exception
        leaving ``with MailRail(...)`` under ``on_error="raise"``, or a finalize() that timed out.  Cancels
        and frees every posted receive; sends still in flight keep their pool alive (MPI may read it)."""
