"""Node-based credits: the ranks of a node share one credit pool per destination rank."""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Protocol

from ..errors import ProtocolError
from .base import GRANT, ReturnedCredits, unknown_kind


class SharedCounters(Protocol):
    """Integer counters every rank of a node updates atomically (one per destination rank)."""

    def try_take(self, index: int) -> bool:
        """Decrement counter *index* if it is positive; True if a credit was taken."""

    def add(self, index: int, amount: int) -> int:
        """Atomically add *amount* to counter *index*; return its value before."""

    def load(self, index: int) -> int:
        """The current value of counter *index*."""

    def take_up_to(self, index: int, most: int) -> int:
        """Atomically take min(value, *most*) from counter *index* (never below zero); return what was taken."""

    @property
    def nbytes(self) -> int:
        """Bytes of shared memory the counters occupy (for the whole node)."""

    @property
    def address(self) -> int:
        """The address of the int64 counters (where a compiled ledger reads and updates them)."""


class LocalCounters:
    """:class:`SharedCounters` for a single process (unit tests, the model, the tests' in-memory MPI), in plain
    memory at :attr:`address` (where a compiled ledger reads and updates them)."""

    def __init__(self, length: int, initial: int) -> None:
        self.values = array("q", [initial]) * length  # never resized: its address stays valid

    @property
    def address(self) -> int:
        """The address of the int64 counters."""
        return self.values.buffer_info()[0]

    def try_take(self, index: int) -> bool:
        if self.values[index] > 0:
            self.values[index] -= 1
            return True
        return False

    def add(self, index: int, amount: int) -> int:
        before = self.values[index]
        self.values[index] += amount
        return before

    def load(self, index: int) -> int:
        return self.values[index]

    def take_up_to(self, index: int, most: int) -> int:
        taken = max(0, min(self.values[index], most))
        self.values[index] -= taken
        return taken

    @property
    def nbytes(self) -> int:
        return self.values.itemsize * len(self.values)


class NodeCredits(ReturnedCredits):
    """A node holds ``credits_per_pair`` credits for each receiver rank, shared by its ranks.

    Sender side: a rank takes a credit for *dest* from the node's shared pool
    atomically; credits any neighbour frees are usable at once by every local
    rank, with no message.  Receiver side: consumed credits are counted per
    *sending node* and returned (count in the tag) to the rank whose release
    crossed the threshold, which adds them to its node's pool.  Private state is
    O(nodes) per rank; the shared pool is O(ranks) per node.  *max_tag*: the largest
    tag (MPI's ``TAG_UB``), which bounds the count of one credit message.
    """

    name = "node"
    has_credits = True
    credits_change_silently = True

    def __init__(
        self,
        nodes: int,
        node_of: Callable[[int], int],
        pool: SharedCounters,
        credits_per_pair: int,
        return_threshold: int,
        *,
        max_tag: int = 32767,
    ) -> None:
        super().__init__(nodes, credits_per_pair, return_threshold, max_tag)  # per sending node
        self.nodes = nodes
        self.node_of = node_of
        self.pool = pool

    def try_acquire(self, dest: int) -> bool:
        return self.pool.try_take(dest)

    def available(self, dest: int) -> int:
        return self.pool.load(dest)

    def on_arrival(self, source: int, tag: int) -> bool:
        node = self.node_of(source)
        unreturned = self._count_arrival(node)
        if unreturned > self.credits_per_pair:
            raise ProtocolError(
                f"node {node} (via rank {source}) has {unreturned} unreturned messages here "
                f"but only {self.credits_per_pair} credits per node: a send without credit"
            )
        return False

    def on_release(self, source: int) -> None:
        self._count_release(self.node_of(source), source)

    def on_credit_message(self, source: int, kind: int, count: int) -> None:
        if kind != GRANT:
            raise unknown_kind(source, kind, count, self.name)
        now = self.pool.add(source, count) + count
        if now > self.credits_per_pair:
            raise ProtocolError(
                f"rank {source} returned {count} credits, leaving this node {now} "
                f"> {self.credits_per_pair} credits per node"
            )

    def shared_state_bytes(self) -> int:
        return self.pool.nbytes
