"""What every container shares: its rail's channels, its partitioner, collective checks, and lookups.

A container is a set of channels on its rail (:mod:`mailrail.channels`): its asynchronous operations
(``add``, ``insert``, ``reduce``, ``visit`` ...) are records sent to the keys' owners and applied by
the owners' handlers; ``rail.barrier()`` completes all of them, on every container of the rail.  Its
collective operations (``count``, ``get``, ``top``, ``size`` ...) are called by every rank, outside
handlers, and see every asynchronous operation any rank issued before them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..channels import Channel, Channels
from .partition import HashPartitioner

__all__ = ["Container", "Lookup", "as_keys", "ufunc_of", "REDUCTIONS"]

#: The named reductions of ``reduce(..., op)`` and the ufunc each one is.
REDUCTIONS: dict[str, np.ufunc] = {"add": np.add, "min": np.minimum, "max": np.maximum}


def ufunc_of(op: str | np.ufunc, where: str) -> np.ufunc:
    """The binary ufunc *op* names (``"add"``, ``"min"``, ``"max"``, or a numpy ufunc such as ``np.bitwise_or``)."""
    if isinstance(op, np.ufunc):
        if op.nin != 2 or op.nout != 1:
            raise ValueError(f"{where}: op {op.__name__} is not a binary ufunc (it takes {op.nin} inputs)")
        return op
    if isinstance(op, str) and op in REDUCTIONS:
        return REDUCTIONS[op]
    raise ValueError(f"{where}: unknown op {op!r}: use 'add', 'min', 'max' or a binary numpy ufunc")


def as_keys(keys: Any, dtype: np.dtype, where: str) -> np.ndarray:
    """*keys* as a 1-D array of *dtype*: the same dtype, or one numpy converts to it without loss.

    An array of another dtype is converted only when numpy calls it safe (``int32`` keys for an ``int64``
    container), else ``TypeError`` names both dtypes.  A list of Python values is converted when every
    value survives: integers in the dtype's range for an integer container (``[1.5]`` for one is refused,
    not truncated), strings that encode to the width of a bytes container, and so on.
    """
    array = np.asarray(keys)
    if array.dtype != dtype:
        if isinstance(keys, np.ndarray) or array.dtype.kind not in "iub":
            # An array, or a list numpy read as floats, strings or records: only a safe cast.
            safe = np.can_cast(array.dtype, dtype, casting="safe")
            unicode_to_bytes = array.dtype.kind == "U" and dtype.kind == "S" and not isinstance(keys, np.ndarray)
            if not (safe or unicode_to_bytes or array.size == 0):
                raise TypeError(f"{where}: keys of dtype {array.dtype} for a container of dtype {dtype}")
        try:
            converted = np.asarray(array, dtype=dtype)
        except (TypeError, ValueError, OverflowError) as error:
            raise TypeError(f"{where}: keys cannot be converted to {dtype}: {error}") from error
        if array.dtype.kind in "iub" and dtype.kind in "iub" and not np.array_equal(converted, array):
            bad = array[converted != array][0]
            raise TypeError(f"{where}: key {bad} is out of the range of {dtype}")
        if array.dtype.kind == "U" and dtype.kind == "S" and not np.array_equal(converted.astype(array.dtype), array):
            raise TypeError(f"{where}: keys longer than {dtype.itemsize} bytes for a container of dtype {dtype}")
        array = converted
    if array.ndim != 1:
        raise ValueError(f"{where}: keys must be a 1-D array, got shape {array.shape}")
    return np.ascontiguousarray(array)


class Container:
    """The part every container shares (not made directly).

    *rail*: a :class:`~mailrail.rail.MailRail` (or ``mailrail.testing``'s in-memory one).  Construction
    is collective: every rank makes the same containers in the same order.
    """

    #: The container's name in errors (its class name).
    kind = "Container"

    def __init__(self, rail: Any) -> None:
        self.rail = rail
        self.channels: Channels = rail.channels
        self.rank: int = rail.rank
        self.ranks: int = rail.size  # not ``size``: that is the containers' collective ``size()``
        self.partitioner = HashPartitioner(self.ranks)

    def owner(self, keys: Any) -> np.ndarray:
        """The rank that owns each key (``int64``): put your own data beside the container's."""
        return self.partitioner.owner(self._keys(keys, "owner"))

    def _keys(self, keys: Any, operation: str) -> np.ndarray:
        raise NotImplementedError

    def _open(self, dtype: np.dtype | str, handler: Callable[[int, np.ndarray], object], what: str) -> Channel:
        return self.channels.open(dtype, handler, name=f"{self.kind} {what}")

    def _collective(self, operation: str) -> None:
        """Refuse a collective *operation* from inside a handler, then complete all pending asynchronous work."""
        self.channels.check_collective(f"{self.kind}.{operation}()")
        self.rail.barrier()

    def barrier(self) -> None:
        """Collective: every asynchronous operation on the rail's containers, by any rank, is applied."""
        self.channels.check_collective(f"{self.kind}.barrier()")
        self.rail.barrier()


class Lookup:
    """A collective request and reply: each rank asks the owners of its keys; they answer in their handlers.

    *answer* runs on the owner over an array of keys and returns one value of *value_dtype* per key (the
    Map's get, the CountingSet's count ...); or *answer_into* writes them into the replies it is given (the
    Array's gather, whose values are large).  Requests carry the asker's position of
    each key, replies carry it back, so the answers land in the asker's order with no sort.
    """

    def __init__(
        self,
        container: Container,
        key_dtype: np.dtype,
        value_dtype: np.dtype,
        answer: Callable[[np.ndarray], np.ndarray] | None,
        what: str,
        *,
        answer_into: Callable[[np.ndarray, np.ndarray], None] | None = None,
    ) -> None:
        if (answer is None) == (answer_into is None):
            raise TypeError("Lookup: give answer or answer_into, not both or neither")
        self.container = container
        self.value_dtype = np.dtype(value_dtype)
        self.answer = answer
        # Writes the answers straight into the replies' value field: no array of answers to copy again,
        # which for large values (a gather's feature vectors) is a pass over every byte of the replies.
        self.answer_into = answer_into
        self._request_dtype = np.dtype([("position", "<i8"), ("key", key_dtype)])
        self._reply_dtype = np.dtype([("position", "<i8"), ("value", self.value_dtype)])
        self._requests = container._open(self._request_dtype, self._on_request, f"{what} requests")
        self._replies = container._open(self._reply_dtype, self._on_reply, f"{what} replies")
        self._results: np.ndarray | None = None

    def ask(self, keys: np.ndarray, owners: np.ndarray) -> np.ndarray:
        """Collective, after the caller's :meth:`Container._collective`: the owners' answers for *keys*."""
        results = np.zeros(len(keys), dtype=self.value_dtype)
        self._results = results
        requests = np.empty(len(keys), dtype=self._request_dtype)
        requests["position"] = np.arange(len(keys))
        requests["key"] = keys
        try:
            self._requests.send(owners, requests)
            self.container.rail.barrier()  # every request answered, every reply arrived
        finally:
            self._results = None
        return results

    def _on_request(self, source: int, requests: np.ndarray) -> None:
        answer_into = self.answer_into
        if answer_into is not None:  # written where they leave from: the send buffers
            positions, keys = requests["position"], requests["key"]

            def fill(replies: np.ndarray, start: int, stop: int) -> None:
                replies["position"] = positions[start:stop]
                answer_into(keys[start:stop], replies["value"])

            self._replies.fill_to(source, len(requests), fill)
            return
        assert self.answer is not None
        replies = np.empty(len(requests), dtype=self._reply_dtype)
        replies["position"] = requests["position"]
        replies["value"] = self.answer(requests["key"])
        self._replies.send_to(source, replies, copy=False)  # fresh, and not touched again

    def _on_reply(self, source: int, replies: np.ndarray) -> None:
        assert self._results is not None, "a reply arrived outside a lookup"
        self._results[replies["position"]] = replies["value"]
