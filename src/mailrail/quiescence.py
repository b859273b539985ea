"""Termination detection: when has every message sent by anyone been received and released?

No MPI here.  :class:`TerminationDetector` judges successive global sums of
(messages submitted, messages released), which the transport obtains with
non-blocking all-reductions while it keeps delivering messages.  Counters only
grow, so two consecutive rounds with the same sums and sent == released mean
no message was in flight or unreleased between them (Mattern's
four-counter method, as YGM uses it).
"""

from __future__ import annotations


class TerminationDetector:
    """Feed it the global ``(sent, released)`` sums of each reduction round."""

    def __init__(self) -> None:
        self._previous: tuple[int, int] | None = None
        self.rounds = 0
        #: Whether the last round's sums differed from the round before (a stall timer's "progress").
        self.progressed = False

    def round_finished(self, sent: int, released: int) -> bool:
        """True when this round proves global quiescence."""
        self.rounds += 1
        # Ranks read their counters at different moments, so a round may count a message's release
        # and not its send (sent after its sender read, released before its receiver did): more
        # released than sent is such a round, never the end.
        current = (sent, released)
        done = sent == released and current == self._previous
        self.progressed = current != self._previous
        self._previous = current
        return done

    @property
    def last_counts(self) -> tuple[int, int]:
        """The ``(sent, released)`` sums of the last round, ``(0, 0)`` before the first."""
        return self._previous or (0, 0)
