"""Per-destination FIFO queues of sends waiting for credit.

No MPI here.  A newer message never overtakes an older one to the same
destination, and finding work costs O(destinations that may have credit), not
O(all destinations):

* With *exact* credit events (rank-based flow control) the strategy tells us
  when a destination gains credit (:meth:`mark_ready`); only those are visited.
* With credits that change silently in shared memory (node-based), every
  queued destination may have gained credit, so draining visits a bounded,
  rotating window of the queued destinations.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator


class DeferredSends:
    """Queued ``(slot, nbytes)`` sends keyed by destination rank."""

    def __init__(self, *, poll_window: int | None = None) -> None:
        #: dest -> FIFO of (slot, nbytes); a destination is a key only while it has a queue.
        #: Read it, never write it (membership tests on the hot path).
        self.queues: dict[int, deque[tuple[int, int]]] = {}
        self._ready: dict[int, None] = {}  # insertion-ordered set
        self._rotation: deque[int] = deque()  # polling mode: destinations, emptied ones dropped lazily
        self._in_rotation: set[int] = set()
        self._poll_window = poll_window
        self.total = 0
        self.high_water = 0
        self.deferred_count = 0

    def __len__(self) -> int:
        return self.total

    def has_queue(self, dest: int) -> bool:
        return dest in self.queues

    def queued_for(self, dest: int) -> int:
        queue = self.queues.get(dest)
        return len(queue) if queue else 0

    def push(self, dest: int, slot: int, nbytes: int) -> None:
        queue = self.queues.get(dest)
        if queue is None:
            queue = self.queues[dest] = deque()
            if self._poll_window is not None and dest not in self._in_rotation:
                self._in_rotation.add(dest)
                self._rotation.append(dest)
        queue.append((slot, nbytes))
        self.total += 1
        self.deferred_count += 1
        if self.total > self.high_water:
            self.high_water = self.total

    def mark_ready(self, dest: int) -> None:
        """*dest* gained credit: visit it at the next drain if it has a queue."""
        if dest in self.queues:
            self._ready[dest] = None

    def candidates(self) -> Iterator[int]:
        """Destinations worth one credit check now, each at most once.

        The caller pops from each destination that has credit (:meth:`pop`) and
        calls :meth:`mark_ready` again if it has more credit.
        """
        if self._poll_window is None:
            # Unmarked one at a time as visited: a caller that stops early leaves the rest marked, and a
            # destination marked again during the visit waits for the next drain.
            ready = self._ready
            for dest in list(ready):
                if dest in ready:
                    del ready[dest]
                    yield dest
            return
        rotation, queues = self._rotation, self.queues
        for _ in range(min(self._poll_window, len(rotation))):
            dest = rotation.popleft()
            if dest not in queues:  # emptied since it was queued: drop it now, O(1)
                self._in_rotation.discard(dest)
                continue
            rotation.append(dest)
            yield dest

    def pop(self, dest: int) -> tuple[int, int]:
        queue = self.queues[dest]
        item = queue.popleft()
        self.total -= 1
        if not queue:
            del self.queues[dest]
            self._ready.pop(dest, None)
        return item

    def destinations(self) -> list[int]:
        return list(self.queues)

    def clear(self) -> list[tuple[int, int, int]]:
        """Drop everything; return ``(dest, slot, nbytes)`` of each dropped send."""
        dropped = [(dest, slot, n) for dest, q in self.queues.items() for slot, n in q]
        self.queues.clear()
        self._ready.clear()
        self._rotation.clear()
        self._in_rotation.clear()
        self.total = 0
        return dropped
