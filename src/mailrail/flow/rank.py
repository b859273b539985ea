"""Rank-based credits: one credit window per (sender rank, receiver rank) pair."""

from __future__ import annotations

from array import array

from ..errors import ProtocolError
from .base import GRANT, ReturnedCredits, unknown_kind


class RankCredits(ReturnedCredits):
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
        super().__init__(ranks, credits_per_pair, return_threshold, max_tag)  # receiver side, per sending rank
        self.piggyback = piggyback
        self.max_tag = max_tag
        self.send_credits = array("q", [credits_per_pair]) * ranks  # sender side
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
        unreturned = self._count_arrival(source)
        if unreturned > self.credits_per_pair:
            raise ProtocolError(
                f"rank {source} has {unreturned} unreturned messages here but only "
                f"{self.credits_per_pair} credits per pair: a send without credit"
            )
        if tag:
            self._credits_from(source, tag)  # piggybacked credits obey the same bound
            return True
        return False

    def on_release(self, source: int) -> None:
        self._count_release(source, source)

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
        return super().credit_state_bytes() + self.send_credits.itemsize * len(self.send_credits)
