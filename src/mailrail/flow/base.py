"""The flow-control interface, the credit messages' wire format, and the unconstrained strategy."""

from __future__ import annotations

from array import array
from collections import deque

from ..errors import ProtocolError

# Credit messages: zero-byte messages on the credit communicator, their meaning in the tag,
# ``count << KIND_BITS | kind``.  One format for every credit mode.
GRANT = 0  # to a sender: credits for it (rank mode) or for its node's pool (node, adaptive)
ANSWER = 1  # adaptive, to a sender: a grant answering its node's request (the node may ask again)
REQUEST = 2  # adaptive, to a receiver: the sender's node has sends waiting and no credit; count: how many wait
REVOKE = 3  # adaptive, to a sender: give back the credits your node holds from me and is not using
GIVE_BACK = 4  # adaptive, to a receiver: credits given back after a revoke (count may be 0)
KIND_BITS = 3
KIND_MASK = (1 << KIND_BITS) - 1
KIND_NAMES = ("grant", "answer", "request", "revoke", "give-back")
#: The smallest tag_ub that carries a count of 1 in every kind (MPI guarantees 32767).
MIN_TAG_UB = (1 << KIND_BITS) | KIND_MASK


def credit_tag(kind: int, count: int) -> int:
    """The tag of a credit message of *kind* carrying *count*."""
    return count << KIND_BITS | kind


def max_credit_count(tag_ub: int) -> int:
    """The largest count one credit message carries when tags go up to *tag_ub*."""
    if tag_ub < MIN_TAG_UB:
        raise ValueError(f"tag_ub={tag_ub} is too small for credit messages: at least {MIN_TAG_UB}")
    return (tag_ub - KIND_MASK) >> KIND_BITS


def unknown_kind(source: int, kind: int, count: int, mode: str) -> ProtocolError:
    name = KIND_NAMES[kind] if kind < len(KIND_NAMES) else f"unknown kind {kind}"
    return ProtocolError(f"{mode} flow control got a credit message ({name}, count {count}) from rank {source}")


class FlowControl:
    """What the endpoint asks a strategy.  The base class is unconstrained mode.

    Sender side: :meth:`try_acquire` before a payload leaves, :meth:`take_piggyback`
    for its tag; where :attr:`asks_for_credit`, :meth:`on_deferred` / :meth:`on_undeferred`
    as sends join and leave the deferred queues and :meth:`ask` when a drain finds no credit.
    Receiver side: :meth:`on_arrival` for each payload, :meth:`on_release` when
    the application gives its slot back.  Both: :meth:`on_credit_message` for each
    credit message that arrives.  The credit messages a strategy decides to send go
    to :attr:`outbox` as ``(target rank, kind, count)``, each count within
    :func:`max_credit_count`; the endpoint hands them to the transport.
    """

    name = "none"
    #: Payloads wait for credits, and credit messages travel (every mode but unconstrained).
    has_credits = False
    #: Credits may appear without an event (another rank refilled shared memory),
    #: so queued destinations must be polled rather than woken.
    credits_change_silently = False
    #: A sender whose sends wait without credit asks the receiver (:meth:`ask`): adaptive mode.
    asks_for_credit = False
    credits_per_pair = 0
    return_threshold = 0
    #: Receiver side: messages arrived whose credits are not yet returned (all senders),
    #: and its peak.  Credits bound it by the receive slots; unconstrained mode does not count.
    unreturned_total = 0
    unreturned_high_water = 0
    # Counters of the modes that have them (mailrail.counters); zero elsewhere.
    piggybacked = 0
    requests_sent = 0
    requests_received = 0
    reclaimed = 0
    revokes_sent = 0
    given_back = 0
    leases_high_water = 0
    waiting_high_water = 0

    def __init__(self) -> None:
        self.outbox: deque[tuple[int, int, int]] = deque()

    def try_acquire(self, dest: int) -> bool:
        return True

    def take_piggyback(self, dest: int) -> int:
        return 0

    def ask(self, dest: int, queued: int) -> None:
        """*queued* sends wait for *dest* and this rank found no credit for it (adaptive mode asks)."""

    def on_deferred(self, dest: int, queued: int) -> None:
        """A send to *dest* was deferred (*queued* wait now); called when :attr:`asks_for_credit`."""

    def on_undeferred(self, dest: int, count: int) -> None:
        """*count* deferred sends to *dest* left or were dropped; called when :attr:`asks_for_credit`."""

    def on_arrival(self, source: int, tag: int) -> bool:
        """Account one payload from *source*; True if it brought credits for *source*."""
        return False

    def on_release(self, source: int) -> None:
        """The application released a payload from *source* (credit messages it causes go to the outbox)."""

    def on_credit_message(self, source: int, kind: int, count: int) -> None:
        raise AssertionError(f"unconstrained mode got a credit message (kind {kind}, count {count}) from rank {source}")

    def available(self, dest: int) -> int | None:
        """Send credits usable for *dest* now (None: unlimited)."""
        return None

    def lease_count(self) -> int:
        """Nodes that hold credits of this rank now (adaptive mode)."""
        return 0

    def credit_state_bytes(self) -> int:
        """Bytes of credit state this rank holds privately."""
        return 0

    def shared_state_bytes(self) -> int:
        """Bytes of credit state in node-shared memory (whole node, counted once per node)."""
        return 0

    def stall_lines(self, destinations: list[int]) -> list[str]:
        """What a stall report says of this strategy's state beyond credits per destination."""
        return []

    def detach(self) -> None:
        """Forget node-shared memory that is about to be freed (finalize); a no-op unless overridden."""

    def _send_credits(self, target: int, kind: int, count: int, max_count: int) -> None:
        """Credits to *target* in pieces of at most *max_count*; only the first piece of an ANSWER answers."""
        while count > max_count:
            self.outbox.append((target, kind, max_count))
            count -= max_count
            kind = GRANT
        self.outbox.append((target, kind, count))


class ReturnedCredits(FlowControl):
    """The receiver side rank and node credits share: payloads arrived and released are counted per *sender*
    (a sending rank in rank mode, a sending node in node mode, ``senders`` of them), and a sender's released
    ones go back in one grant once ``return_threshold`` have gathered.  *max_tag*: the largest tag (MPI's
    ``TAG_UB``), which bounds the count of one credit message."""

    def __init__(self, senders: int, credits_per_pair: int, return_threshold: int, max_tag: int) -> None:
        super().__init__()
        self.credits_per_pair = credits_per_pair
        self.return_threshold = return_threshold
        self.max_count = max_credit_count(max_tag)
        self.owed = array("q", [0]) * senders  # released, not yet returned, per sender
        self.unreturned = array("q", [0]) * senders  # arrived, not yet returned, per sender

    def _count_arrival(self, sender: int) -> int:
        """A payload of *sender* arrived: how many of its payloads are unreturned now."""
        unreturned = self.unreturned
        unreturned[sender] += 1
        self.unreturned_total += 1
        if self.unreturned_total > self.unreturned_high_water:
            self.unreturned_high_water = self.unreturned_total
        return unreturned[sender]

    def _count_release(self, sender: int, source: int) -> None:
        """A payload of *sender* released; rank *source* sent it, and gets the grant if this one completes it."""
        owed = self.owed
        owed[sender] += 1
        count = owed[sender]
        if count >= self.return_threshold:
            owed[sender] = 0
            self.unreturned[sender] -= count
            self.unreturned_total -= count
            self._send_credits(source, GRANT, count, self.max_count)

    def credit_state_bytes(self) -> int:
        return sum(a.itemsize * len(a) for a in (self.owed, self.unreturned))


class Unconstrained(FlowControl):
    """``flow_control="none"``: every send leaves at once; no credits, no returns."""
