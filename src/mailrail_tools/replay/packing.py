"""Packing recorded messages into datagrams, as an aggregating runtime like YGM does.

Consecutive messages to one destination form a byte stream cut into datagrams
of ``datagram_size`` bytes: small messages share a datagram, a message larger
than a datagram is split, and the stream's last partial datagram leaves when
the destination changes or the phase ends.  A run of zero-byte messages still
sends one empty datagram, so a recorded message never vanishes.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


class DatagramPacker:
    """Feed messages in send order; get ``(dest, nbytes)`` datagrams back, in order."""

    def __init__(self, datagram_size: int) -> None:
        if datagram_size < 1:
            raise ValueError(f"datagram_size must be >= 1, got {datagram_size}")
        self.datagram_size = datagram_size
        self._dest = -1  # destination of the open run, -1: none
        self._pending = 0  # bytes of the open run not yet in a datagram
        self._emitted = False  # the open run already produced a datagram

    def add(self, dest: int, nbytes: int) -> Iterator[tuple[int, int]]:
        """Append one message (or a run's total bytes); yields the datagrams it completes."""
        if dest != self._dest:
            yield from self.flush()
            self._dest = dest
        self._pending += nbytes
        size = self.datagram_size
        while self._pending >= size:
            yield dest, size
            self._pending -= size
            self._emitted = True

    def add_block(self, dests: np.ndarray, sizes: np.ndarray) -> Iterator[tuple[int, int]]:
        """Append a block of messages; runs to one destination are summed with numpy first."""
        if not len(dests):
            return
        starts = np.concatenate(([0], np.flatnonzero(np.diff(dests)) + 1))
        totals = np.add.reduceat(sizes, starts)
        for dest, total in zip(dests[starts].tolist(), totals.tolist()):
            yield from self.add(dest, total)

    def flush(self) -> Iterator[tuple[int, int]]:
        """Close the open run: its partial datagram (or an empty one for a run of empty messages)."""
        if self._dest >= 0 and (self._pending or not self._emitted):
            yield self._dest, self._pending
        self._dest, self._pending, self._emitted = -1, 0, False
