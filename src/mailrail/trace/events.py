"""What trace readers yield: blocks of application messages, and the barriers between phases.

A rank's trace is a stream of these events in recorded order.  Messages come in
blocks (numpy arrays) so a reader can decode millions of records without a
Python object per message; a :class:`PhaseEnd` closes the phase before it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

import numpy as np


class MessageBlock(NamedTuple):
    """Consecutive application messages of one rank, in send order."""

    dests: np.ndarray  # int64 destination ranks (the writing rank itself included)
    sizes: np.ndarray  # int64 payload bytes
    timestamps: np.ndarray | None  # int64 microseconds since the epoch (JSON lines); None (binary)

    def __len__(self) -> int:
        return len(self.dests)


class PhaseEnd(NamedTuple):
    """A global quiescence barrier: every message before it belongs to the phase it closes."""

    where: str  # "byte offset N" or "line N" of the barrier record, for messages


Event = MessageBlock | PhaseEnd


def iter_messages(events: Iterator[Event]) -> Iterator[tuple[int, int, int | None]]:
    """``(dest, size, timestamp_us or None)`` per message, phases flattened (small traces, tests)."""
    for event in events:
        if isinstance(event, MessageBlock):
            stamps = event.timestamps.tolist() if event.timestamps is not None else [None] * len(event)
            yield from zip(event.dests.tolist(), event.sizes.tolist(), stamps)


def load_phases(events: Iterator[Event]) -> list[list[tuple[int, int]]]:
    """Every phase as a list of ``(dest, size)``: materializes the trace, so for small traces only.

    The segment after the last barrier is a phase only if it holds messages.
    """
    phases: list[list[tuple[int, int]]] = [[]]
    for event in events:
        if isinstance(event, MessageBlock):
            phases[-1].extend(zip(event.dests.tolist(), event.sizes.tolist()))
        else:
            phases.append([])
    if not phases[-1]:
        phases.pop()
    return phases
