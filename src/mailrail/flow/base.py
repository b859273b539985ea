"""The flow-control interface, and the unconstrained strategy."""

from __future__ import annotations


class FlowControl:
    """What the endpoint asks a strategy.  The base class is unconstrained mode.

    Sender side: :meth:`try_acquire` before a payload leaves, :meth:`take_piggyback`
    for its tag, :meth:`on_credit_return` when a credit message arrives.
    Receiver side: :meth:`on_arrival` for each payload, :meth:`on_release` when
    the application gives its slot back; a non-None result is a credit return
    ``(target rank, count)`` to send.
    """

    name = "none"
    #: Credits may appear without an event (another rank refilled shared memory),
    #: so queued destinations must be polled rather than woken.
    credits_change_silently = False
    credits_per_pair = 0
    return_threshold = 0
    #: Receiver side: messages arrived whose credits are not yet returned (all senders),
    #: and its peak.  Credits bound it by the receive slots; unconstrained mode does not count.
    unreturned_total = 0
    unreturned_high_water = 0

    def try_acquire(self, dest: int) -> bool:
        return True

    def take_piggyback(self, dest: int) -> int:
        return 0

    def on_arrival(self, source: int, tag: int) -> bool:
        """Account one payload from *source*; True if it brought credits for *source*."""
        return False

    def on_release(self, source: int) -> tuple[int, int] | None:
        return None

    def on_credit_return(self, source: int, count: int) -> None:
        raise AssertionError(f"unconstrained mode got a credit return of {count} from rank {source}")

    def available(self, dest: int) -> int | None:
        """Send credits usable for *dest* now (None: unlimited)."""
        return None

    def credit_state_bytes(self) -> int:
        """Bytes of credit state this rank holds privately."""
        return 0

    def shared_state_bytes(self) -> int:
        """Bytes of credit state in node-shared memory (whole node, counted once per node)."""
        return 0

    def detach(self) -> None:
        """Forget node-shared memory that is about to be freed (finalize); a no-op unless overridden."""


class Unconstrained(FlowControl):
    """``flow_control="none"``: every send leaves at once; no credits, no returns."""
