"""Rank-based credits: one credit window per (sender rank, receiver rank) pair."""

from __future__ import annotations

from array import array

from ..errors import ProtocolError
from .base import GRANT, FlowControl, max_credit_count, unknown_kind


class RankCredits(FlowControl):
    """Each rank may have ``credits_per_pair`` unreturned messages at each receiver.

    The receiver counts a credit as consumed when the application releases the
    slot, and returns consumed credits once ``return_threshold`` have gathered
    (a zero-byte credit message), or sooner in the tag of a payload it sends to
    that rank anyway (piggybacking).  State is O(ranks) on both sides.  *max_tag*: the
    largest tag (MPI's ``TAG_UB``), which bounds piggybacked counts and credit messages.
    """

    name = "rank"
    has_credits = True

    def __init__(
        self, ranks: int, credits_per_pair: int, return_threshold: int, *, piggyback: bool = True, max_tag: int = 32767
    ) -> None:
        super().__init__()
        self.credits_per_pair = credits_per_pair
        self.return_threshold = return_threshold
        self.piggyback = piggyback
        self.max_tag = max_tag
        self.max_count = max_credit_count(max_tag)
        self.send_credits = array("q", [credits_per_pair]) * ranks  # sender side
        self.owed = array("q", [0]) * ranks  # receiver side: released, not yet returned
        self.unreturned = array("q", [0]) * ranks  # receiver side: arrived, not yet returned
        self.piggybacked = 0

    def try_acquire(self, dest: int) -> bool:
        credits = self.send_credits
        if credits[dest] > 0:
            credits[dest] -= 1
            return True
        return False

    def available(self, dest: int) -> int:
        return self.send_credits[dest]

    def take_piggyback(self, dest: int) -> int:
        if not self.piggyback:
            return 0
        count = self.owed[dest]
        if count:
            count = min(count, self.max_tag)
            self.owed[dest] -= count
            self.unreturned[dest] -= count
            self.unreturned_total -= count
            self.piggybacked += count
        return count

    def on_arrival(self, source: int, tag: int) -> bool:
        unreturned = self.unreturned
        unreturned[source] += 1
        self.unreturned_total += 1
        if self.unreturned_total > self.unreturned_high_water:
            self.unreturned_high_water = self.unreturned_total
        if unreturned[source] > self.credits_per_pair:
            raise ProtocolError(
                f"rank {source} has {unreturned[source]} unreturned messages here but only "
                f"{self.credits_per_pair} credits per pair: a send without credit"
            )
        if tag:
            self._credits_from(source, tag)  # piggybacked credits obey the same bound
            return True
        return False

    def on_release(self, source: int) -> None:
        owed = self.owed
        owed[source] += 1
        count = owed[source]
        if count >= self.return_threshold:
            owed[source] = 0
            self.unreturned[source] -= count
            self.unreturned_total -= count
            self._send_credits(source, GRANT, count, self.max_count)

    def on_credit_message(self, source: int, kind: int, count: int) -> None:
        if kind != GRANT:
            raise unknown_kind(source, kind, count, self.name)
        self._credits_from(source, count)

    def _credits_from(self, source: int, count: int) -> None:
        self.send_credits[source] += count
        if self.send_credits[source] > self.credits_per_pair:
            raise ProtocolError(
                f"rank {source} returned {count} credits, leaving {self.send_credits[source]} "
                f"> {self.credits_per_pair} credits per pair"
            )

    def credit_state_bytes(self) -> int:
        return sum(a.itemsize * len(a) for a in (self.send_credits, self.owed, self.unreturned))
