"""What every container shares: its rail's channels, its partitioner, collective checks, and lookups.

A container is a set of channels on its rail (:mod:`mailrail.channels`): its asynchronous operations
(``add``, ``insert``, ``reduce``, ``visit`` ...) are records sent to the keys' owners and applied by
the owners' handlers; ``rail.barrier()`` completes all of them, on every container of the rail.  Its
collective operations (``count``, ``get``, ``top``, ``size`` ...) are called by every rank, outside
handlers, and see every asynchronous operation any rank issued before them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..channels import Blobs, Channel, Channels, Rail
from ..collectives import collective
from ..errors import MessageSizeError
from .keys import Strings, arrow_column, as_keys
from .partition import HashPartitioner


def _packed(blobs: Blobs) -> tuple[np.ndarray, np.ndarray]:
    return blobs.offsets, blobs.data


__all__ = ["Container", "Lookup", "table_of"]


def send_requests(requests: Channel, keys: np.ndarray | Blobs, owners: np.ndarray) -> None:
    """Sends each key its owner (*owners*) a request on the channel *requests*: the key's position in *keys*,
    and the key (a field ``key`` of the record, or its variable-size part for strings)."""
    count = keys.count if isinstance(keys, Blobs) else len(keys)
    records = np.empty(count, dtype=requests.dtype)
    records["position"] = np.arange(count)
    if isinstance(keys, Blobs):
        requests.send(owners, records, keys)
    else:
        records["key"] = keys
        requests.send(owners, records)


def table_of(columns: dict[str, Any]) -> Any:
    """A ``pyarrow.Table`` of named columns: numpy arrays (:func:`~mailrail.containers.keys.arrow_column`: numbers
    without a copy where pyarrow can) or pyarrow arrays as they are."""
    import pyarrow as pa

    return pa.table({name: arrow_column(c) if isinstance(c, np.ndarray) else c for name, c in columns.items()})


class Container:
    """The part every container shares (not made directly).

    *rail*: a :class:`~mailrail.rail.MailRail` (or ``mailrail.testing``'s in-memory one).  Construction
    is collective: every rank makes the same containers in the same order.
    """

    #: The container's name in errors (its class name).
    kind = "Container"
    #: What the container calls one of its keys in errors (a disjoint set has items).
    key_noun = "key"
    #: Keys an operation sends at a time: a larger batch goes in parts of this many, one after another, each
    #: hashed, grouped by owner and sent as a batch of its own.  A part's work stays within the caches, and arrivals
    #: are applied between parts; each owner still receives the batch's records in the batch's order.
    batch_keys = 1 << 16

    def __init__(self, rail: Rail) -> None:
        self.rail = rail
        self.channels: Channels = rail.channels
        self.rank: int = rail.rank
        self.ranks: int = rail.size  # not ``size``: that is the containers' collective ``size()``
        self.partitioner = HashPartitioner(self.ranks)
        #: The dtype :meth:`_keys` converts batches to (set by each container), or its strings (str or bytes).
        self._key_dtype: np.dtype = np.dtype(np.uint64)
        self._strings: Strings | None = None
        #: The longest string a record of this container's channels can carry (see :meth:`_channel`).
        self._longest_string = 1 << 62

    def _parts(self, count: int) -> Iterator[slice]:
        """The parts of a batch of *count* keys (see :attr:`batch_keys`), in order."""
        for start in range(0, count, self.batch_keys):
            yield slice(start, start + self.batch_keys)

    def owner(self, keys: Any) -> np.ndarray:
        """The rank that owns each key (``int64``): put your own data beside the container's."""
        if self._strings is not None:
            return Strings.owners(self._string_keys(keys, "owner"), self.partitioner)
        return self.partitioner.owner(self._keys(keys, "owner"))

    def _keys(self, keys: Any, operation: str) -> np.ndarray:
        """*keys*, a batch given to *operation*, as a 1-D array of the container's key dtype, else an error."""
        return as_keys(keys, self._key_dtype, f"{self.kind}.{operation}()")

    def _string_keys(self, keys: Any, operation: str) -> Blobs:
        """*keys*, a batch of strings given to *operation* (of a container of strings), packed, each short enough
        for a datagram; else an error, before anything is sent."""
        where = f"{self.kind}.{operation}()"
        assert self._strings is not None
        blobs = self._strings.convert(keys, where, f"{self.key_noun}s")
        self._check_lengths(blobs, where, self.key_noun)
        return blobs

    def _check_lengths(self, blobs: Blobs, where: str, what: str = "key") -> None:
        """Refuse strings longer than a record of this container carries (MessageSizeError naming both sizes)."""
        if blobs.count and blobs.nbytes > self._longest_string:  # else no string can be too long
            longest = Strings.longest(blobs)
            if longest > self._longest_string:
                raise MessageSizeError(
                    f"{where}: a {longest}-byte {what} does not fit in a {self.channels.datagram_size}-byte datagram, "
                    f"which takes strings of up to {self._longest_string} bytes here, beside the record and its "
                    f"headers (raise MAILRAIL_DATAGRAM_SIZE)"
                )

    def _channel(
        self, dtype: np.dtype | str, handler: Callable[..., object], what: str, *, blobs: bool | int = False
    ) -> Channel:
        """A channel of this container's (collective: :meth:`~mailrail.channels.Channels.open`), named after it;
        with *blobs*, of records with a string beside their fixed-size part (handler: ``(source, records, blobs)``),
        or with ``blobs=2`` two strings (``(source, records, first, second)``)."""
        channel = self.channels.open(dtype, handler, name=f"{self.kind} {what}", blobs=blobs)
        if blobs:
            self._longest_string = min(self._longest_string, channel.largest_blob)
        return channel

    def _collective(self, operation: str) -> None:
        """Refuse a collective *operation* from inside a handler, then complete all pending asynchronous work."""
        self.channels.check_collective(f"{self.kind}.{operation}()")
        self.rail.barrier()

    def local(self) -> Any:
        """This rank's part, a ``pyarrow.Table`` (see each container); YGM's ``for_all`` over the local part."""
        raise NotImplementedError

    @collective
    def gather(self, rank: int = 0) -> Any:
        """Collective: the container's contents on rank *rank*, one ``pyarrow.Table`` of every rank's
        :meth:`local` table in rank order (no other order: sort it if you need one); None on the other ranks.
        Every asynchronous operation issued before it, by any rank, is applied first."""
        self._collective("gather")
        import pyarrow as pa

        tables = self.channels.gather(self.local(), rank)
        return None if tables is None else pa.concat_tables(tables)

    def collect(self, other: Container) -> None:
        """Put this rank's contents into the container *other*, asynchronously (YGM's ``collect``): its keys or
        items into a Set (``insert``), a Bag (``insert``) or a CountingSet (``add``, each as many times as its
        ``count`` column says, if it has one); its keys and values into a Map (``assign``; a CountingSet's counts
        are added, ``reduce(keys, counts, "add")``).  Not collective: call it on every rank to move it all; the
        next barrier completes it.  Call ``rail.barrier()`` first to see this container's pending work."""
        other._absorb(self.local(), f"{self.kind}.collect()")

    def _absorb(self, table: Any, where: str) -> None:
        raise TypeError(f"{where}: a {self.kind} takes no collected contents")

    @collective
    def barrier(self) -> None:
        """Collective: every asynchronous operation on the rail's containers, by any rank, is applied."""
        self.channels.check_collective(f"{self.kind}.barrier()")
        self.rail.barrier()


class Lookup:
    """A collective request and reply: each rank asks the owners of its keys; they answer in their handlers.

    *answer* runs on the owner over an array of keys and returns one value of *value_dtype* per key (the
    Map's get, the CountingSet's count ...); or *answer_into* writes them into the array it is given (the
    Array's gather, whose values are large).  Requests carry the asker's position of each key; replies
    carry the positions back in a segment of their own before the values
    (:meth:`~mailrail.channels.Channels.fill_pair_to`), so the values stay one contiguous array, written
    by the owner where they leave from and copied by the asker into place, by slice when the keys come
    grouped by owner (a gather of ascending indices), with no sort.  A rank answers its own requests
    straight into its results.
    """

    def __init__(
        self,
        container: Container,
        key_dtype: np.dtype | Strings,
        value_dtype: np.dtype,
        answer: Callable[[Any], np.ndarray] | None,
        what: str,
        *,
        answer_into: Callable[[np.ndarray, np.ndarray], None] | None = None,
    ) -> None:
        if (answer is None) == (answer_into is None):
            raise TypeError("Lookup: give answer or answer_into, not both or neither")
        self.container = container
        self.value_dtype = np.dtype(value_dtype)
        self.answer = answer
        # Writes the answers straight into the replies' values: no array of answers to copy again, which
        # for large values (a gather's feature vectors) is a pass over every byte of the replies.
        self.answer_into = answer_into
        self._strings = key_dtype if isinstance(key_dtype, Strings) else None
        if self._strings is None:
            self._requests = container._channel(
                np.dtype([("position", "<i8"), ("key", key_dtype)]), self._on_request, f"{what} requests"
            )
        else:  # the keys beside the positions, as strings
            self._requests = container._channel(
                np.dtype([("position", "<i8")]), self._on_string_request, f"{what} requests", blobs=True
            )
        self._reply_positions = container._channel(np.dtype("<i8"), self._on_positions, f"{what} reply positions")
        # One field, no padding: the values a contiguous array (a subarray dtype cannot view bytes itself).
        self._replies = container._channel(np.dtype([("value", self.value_dtype)]), self._on_reply, f"{what} replies")
        self._results: np.ndarray | None = None
        self._positions: np.ndarray | None = None  # of the reply segment whose values come next
        self._runs = False  # the running ask's positions come in consecutive runs (see ask)

    @property
    def records_sent(self) -> int:
        """Requests and replies this rank sent (a reply counted once: its position and value travel together)."""
        return self._requests.records_sent + self._replies.records_sent

    def ask(self, keys: np.ndarray | Blobs, owners: np.ndarray) -> np.ndarray:
        """Collective, after the caller's :meth:`Container._collective`: the owners' answers for *keys*."""
        count = keys.count if isinstance(keys, Blobs) else len(keys)
        results = np.empty(count, dtype=self.value_dtype)  # every position is answered once: no zeroing pass
        self._results = results
        # Keys grouped by owner (a sorted halo, keys of one owner): each owner is asked for one run of
        # consecutive positions, in order, so every segment of requests or replies is such a run too (channels
        # keep a destination's records in order and cut them into consecutive pieces): placed by slice.
        self._runs = len(owners) < 2 or bool((owners[1:] >= owners[:-1]).all())
        try:
            send_requests(self._requests, keys, owners)
            self.container.rail.barrier()  # every request answered, every reply arrived
        finally:
            self._results = None
        return results

    def _on_request(self, source: int, requests: np.ndarray) -> None:
        positions, keys = requests["position"], requests["key"]
        if source == self.container.rank:  # this rank's own requests, inside its ask: no replies
            self._answer_here(positions, keys)
            return
        # Answered once this handler returns, from copies of the requests (their receive buffer is released
        # then; they are small beside the replies): its replies may then wait for send buffers, and each is
        # written once, in the buffer it leaves from.
        positions, keys = positions.copy(), keys.copy()
        self.container.channels.after_handler(lambda: self._answer(source, positions, keys), 2 * len(keys))

    def _on_string_request(self, source: int, requests: np.ndarray, keys: Blobs) -> None:
        positions = requests["position"]
        if source == self.container.rank:
            self._answer_here(positions, keys)
            return
        positions, keys = positions.copy(), keys.copy()  # (see _on_request)
        self.container.channels.after_handler(lambda: self._answer(source, positions, keys), 2 * keys.count)

    def _answer(self, source: int, positions: np.ndarray, keys: Any) -> None:
        answer_into = self.answer_into
        if answer_into is None:
            assert self.answer is not None
            answers = self.answer(keys)

            def fill(heads: np.ndarray, replies: np.ndarray, start: int, stop: int) -> None:
                heads[:] = positions[start:stop]
                replies["value"] = answers[start:stop]

        else:  # written where they leave from: the send buffers

            def fill(heads: np.ndarray, replies: np.ndarray, start: int, stop: int) -> None:
                heads[:] = positions[start:stop]
                answer_into(keys[start:stop], replies["value"])

        self.container.channels.fill_pair_to(source, len(positions), self._reply_positions, self._replies, fill)

    def _answer_here(self, positions: np.ndarray, keys: Any) -> None:
        results = self._results
        assert results is not None, "a request from this rank arrived outside its lookup"
        span = self._span(positions)
        if self.answer_into is None:
            assert self.answer is not None
            results[positions if span is None else span] = self.answer(keys)
        elif span is not None:
            self.answer_into(keys, results[span])  # a view: answered in place
        else:
            answers = np.empty(len(positions), dtype=self.value_dtype)
            self.answer_into(keys, answers)
            results[positions] = answers

    def _on_positions(self, source: int, positions: np.ndarray) -> None:
        self._positions = positions

    def _on_reply(self, source: int, replies: np.ndarray) -> None:
        values = replies["value"]
        positions, results = self._positions, self._results
        assert results is not None, "a reply arrived outside a lookup"
        assert positions is not None and len(positions) == len(values), "reply values without their positions"
        self._positions = None
        span = self._span(positions)
        results[positions if span is None else span] = values

    def _span(self, positions: np.ndarray) -> slice | None:
        """A segment's *positions* as a slice, when the running ask's positions come in runs (see :meth:`ask`)."""
        count = len(positions)
        if not self._runs or not count:
            return None
        first = int(positions[0])
        if int(positions[-1]) != first + count - 1:  # a run is whole: first and last tell (see ask)
            raise AssertionError(f"a segment of {count} positions from {first} to {int(positions[-1])} is not a run")
        return slice(first, first + count)
