"""A distributed map from keys to values: YGM's ``map``, in batches.

Each key is owned by one rank (:class:`~mailrail.containers.partition.HashPartitioner`), which keeps it in a
:class:`~mailrail.containers.table.KeyTable` beside its value, in a numpy array of the value dtype indexed by
the key's dense index.  Values are any fixed dtype: numbers, fixed-width bytes, structured records, subarrays
such as ``np.dtype((np.float32, 4))``; or strings of any length, ``str`` or ``bytes`` (:class:`StringValueMap`):
then the owner keeps them in a :class:`~mailrail.containers.varvalues.StringColumn` indexed the same way.  Keys
of ``str`` or ``bytes`` are strings of any length too (:class:`StringKeyMap`, and :class:`StringMap` for strings to
strings).  ``Map(rail, key_dtype, value_dtype)`` makes the class that fits.

**Asynchronous operations** (:meth:`Map.insert`, :meth:`Map.assign`, :meth:`Map.reduce`, :meth:`Map.erase`,
:meth:`Map.visit`, :meth:`Map.visit_if_contains`) go to the keys' owners and are applied there, in handlers;
the next ``rail.barrier()`` or collective operation completes them, and whatever they sent in turn.  They may
be called from inside handlers and visits.  Operations in flight are not ordered with respect to each other.

**Collective operations** (:meth:`Map.get`, :meth:`Map.size`) are called by every rank outside handlers and
see every asynchronous operation issued before them, by any rank.

**Transport.**  Inserts, assignments, reductions and erasures are records on four channels of the rail (small
batches of many callers share datagrams): fixed-size records, or records with their string key, their string
value or both beside them (segments of kind 2, :mod:`mailrail.channels`); the owner buffers their arrivals and
applies them to its table in batches of up to :attr:`Map.pending_limit` records, or as soon as something reads or
visits the map (a datagram's few hundred records per table operation would cost more in numpy calls than in
work).

Visits carry a function and pickled arguments, so they travel as calls (:meth:`Channels.call
<mailrail.channels.Channels.call>`): one call per owner and datagram-sized chunk of keys, so a batch costs one
Python call per chunk at the owner, not one per key.  A call finds the receiving rank's part of the map through
a token every rank of the map agreed on at construction; the same token makes a ``Map`` a *handle* when pickled
(a visit's arguments may name maps, which arrive as the receiving rank's part of them).
"""

from __future__ import annotations

import pickle
import reprlib
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from ..channels import (
    HEADER_SIZE,
    MAX_CHANNELS,
    Blobs,
    Channels,
    Rail,
    check_by_reference,
    group_by_rank,
    name_of,
    spans_in_turn,
)
from ..collectives import collective
from ..errors import MailRailError, MessageSizeError
from .arrivals import Arrivals, Run
from .base import Container, Lookup, table_of
from .keys import Strings, StringTable, canonical, fixed_dtype, is_string_type, numpy_column
from .ops import UFUNCS, code_of, ufunc_of
from .partition import key_words
from .table import KeyTable
from .varvalues import StringColumn, StringLookup, extremes, less, repeated

__all__ = ["Map", "StringKeyMap", "StringMap", "StringValueMap"]

#: The kinds of arrivals an owner applies, in order (see Map._on_insert).
_INSERT, _ASSIGN, _REDUCE, _REDUCE_BY_REFERENCE, _ERASE = range(5)

#: Bytes a call of a visit chunk may need beyond its pickled arguments: the call's header and buffer count,
#: and the pickle's growth when the key bytes and rank numbers it measured empty get longer.
_CALL_SLACK = HEADER_SIZE + 4 + 48

#: Every live Map of this process by ``(token, rank)``: how a call arriving on a rank finds its part of a map.
_MAPS: weakref.WeakValueDictionary[tuple[int, int], Map] = weakref.WeakValueDictionary()
#: Each rail's token, agreed by its ranks when its first Map is made: the largest of their proposals, so rail
#: tokens never repeat in a process.  A map's token is its rail's and its first channel's number.
_RAIL_TOKENS: weakref.WeakKeyDictionary[Channels, int] = weakref.WeakKeyDictionary()
_next_rail_token = 0
#: The ranks whose visit arguments are being unpickled (innermost last): a Map handle resolves to its part there.
_receiving: list[int] = []


def _map_handle(token: int) -> Map:
    """The receiving rank's part of the map with *token* (how a pickled :class:`Map` arrives)."""
    if _receiving:
        found = _MAPS.get((token, _receiving[-1]))
    else:  # a handle outside a visit (a rail.call): the one part of this map in this process
        parts = [part for (theirs, _), part in list(_MAPS.items()) if theirs == token]
        found = parts[0] if len(parts) == 1 else None
    if found is None:
        raise MailRailError(
            f"a Map handle (token {token}) arrived where that map does not exist (any more): a map's handle "
            f"is valid on the ranks of its rail while the map lives"
        )
    return found


def _arguments_at(rank: int, arguments: bytes) -> Any:
    """A visit's pickled extra arguments, unpickled as rank *rank* (handles in them resolve to its parts)."""
    _receiving.append(rank)
    try:
        return pickle.loads(arguments)
    finally:
        _receiving.pop()


def _visits_arrived(
    token: int, rank: int, if_contains: bool, fn: Callable[..., object], keys: bytes, arguments: bytes
) -> None:
    """A chunk of visits arrived at its owner *rank* (a call): apply them."""
    target = _part(token, rank)
    args = _arguments_at(rank, arguments)
    target._apply_visits(np.frombuffer(keys, dtype=target.key_dtype), fn, args, if_contains)


def _string_visits_arrived(
    token: int, rank: int, if_contains: bool, fn: Callable[..., object], offsets: bytes, data: bytes, arguments: bytes
) -> None:
    """A chunk of visits of string keys arrived at its owner *rank* (a call): apply them."""
    target = _part(token, rank)
    args = _arguments_at(rank, arguments)
    keys = Blobs(np.frombuffer(offsets, dtype=np.int64), np.frombuffer(data, dtype=np.uint8))
    target._apply_visits(keys, fn, args, if_contains)  # type: ignore[arg-type]  # (a StringKeyMap)


def _reduce_arrived(token: int, rank: int, op: np.ufunc, records: bytes) -> None:
    """A chunk of reductions by a ufunc outside numpy's namespace arrived at its owner *rank* (a call)."""
    target = _part(token, rank)
    target._arrivals.add(_REDUCE_BY_REFERENCE, np.frombuffer(records, dtype=target._pair_dtype), tag=op)


def _rail_token(channels: Channels) -> int:
    """Collective the first time on a rail: its token, the same on every rank, unique in this process."""
    global _next_rail_token
    token = _RAIL_TOKENS.get(channels)
    if token is None:
        token = _RAIL_TOKENS[channels] = max(channels.allgather(_next_rail_token))
        _next_rail_token = token + 1
    return token


def _part(token: int, rank: int) -> Map:
    found = _MAPS.get((token, rank))
    if found is None:
        raise MailRailError(
            f"a visit or reduction arrived on rank {rank} for a Map (token {token}) that no longer exists"
        )
    return found


class Map(Container):
    """A distributed map from keys of *key_dtype* to values of *value_dtype* (YGM's ``map``).

    Construction is collective (every rank makes the same containers in the same order on the rail) and, like
    every collective, completes the rail's pending asynchronous work first.  Keys are equal exactly when their
    bytes are (see :mod:`mailrail.containers.partition`); values are any fixed dtype, structured and subarray
    dtypes included (values of ``np.dtype((np.float32, 4))`` are passed as arrays of shape ``(n, 4)``).  A key
    absent from the map has no value; :meth:`get` reports it as not found with a zero value.

    Where an operation takes *values*, they are an array of shape ``(len(keys),) + value shape`` of the value
    dtype, or of a dtype numpy casts to it safely (``int32`` values into an ``int64`` map), or one value, which
    every key gets.
    """

    kind = "Map"
    #: Arrived records buffered before the table applies them in one batch (a read or a visit applies them at once).
    pending_limit = 1 << 16

    def __new__(cls, rail: Rail, key_dtype: Any, value_dtype: Any) -> Map:
        # Keys or values of str or bytes are strings of any length: each combination is a class of its own.
        if cls is Map:
            chosen = _MAP_CLASSES[is_string_type(key_dtype), is_string_type(value_dtype)]
            return super().__new__(chosen)
        return super().__new__(cls)

    @collective
    def __init__(self, rail: Rail, key_dtype: npt.DTypeLike, value_dtype: npt.DTypeLike) -> None:
        super().__init__(rail)
        self.key_dtype: np.dtype[Any] = fixed_dtype(key_dtype, "Map")
        self.value_dtype: np.dtype[Any] = fixed_dtype(value_dtype, "Map", "values")
        self._key_dtype = self.key_dtype
        # Pending work first: a rank waiting in the allgathers below grants no credit, so a peer still sending
        # its earlier operations under backpressure would wait for it forever.
        self.channels.check_collective("Map()")
        rail.barrier()
        self._value_base: np.dtype[Any] = self.value_dtype.base
        self._value_shape: tuple[int, ...] = self.value_dtype.shape
        self._table = KeyTable(self.key_dtype)
        self._values: npt.NDArray[Any] = np.zeros(self._table.capacity, dtype=self.value_dtype)
        self._pair_dtype = np.dtype([("key", self.key_dtype), ("value", self.value_dtype)])
        self._reduce_dtype = np.dtype([("key", self.key_dtype), ("value", self.value_dtype), ("op", np.uint16)])
        self._inserts = self._channel(self._pair_dtype, self._on_insert, "inserts")
        self._assigns = self._channel(self._pair_dtype, self._on_assign, "assignments")
        self._reduces = self._channel(self._reduce_dtype, self._on_reduce, "reductions")
        self._erases = self._channel(self.key_dtype, self._on_erase, "erasures")
        found_dtype = np.dtype([("value", self.value_dtype), ("found", np.bool_)])
        self._getter = Lookup(self, self.key_dtype, found_dtype, self._found, "get")
        self._checked_ops: set[np.ufunc] = set()
        # Arrivals not yet applied, in arrival order (a reduction by reference tagged with its ufunc).
        self._arrivals = Arrivals(
            [self._pair_dtype, self._pair_dtype, self._reduce_dtype, self._pair_dtype, self.key_dtype],
            self.pending_limit,
            self._apply_run,
            ordered=True,
        )
        self._token = _rail_token(self.channels) * MAX_CHANNELS + self._inserts.number
        _MAPS[(self._token, self.rank)] = self

    def __reduce__(self) -> tuple[Callable[[int], Map], tuple[int]]:
        # A handle: in a visit's arguments it arrives as the receiving rank's part of this map.
        return _map_handle, (self._token,)

    # -- checking input --------------------------------------------------------

    def _values_for(self, values: Any, count: int, operation: str) -> npt.NDArray[Any]:
        """*values* as an array of shape ``(count,) + value shape`` of the value dtype, else a precise error."""
        where = f"{self.kind}.{operation}()"
        base, shape = self._value_base, self._value_shape
        if isinstance(values, np.ndarray | np.generic):  # numpy values: converted only when numpy calls it safe
            array = np.asarray(values)
            if array.dtype != base and not np.can_cast(array.dtype, base, casting="safe"):
                raise TypeError(f"{where}: values of dtype {array.dtype} for a Map of value dtype {self.value_dtype}")
        else:  # Python values (lists, numbers, tuples for records): numpy's conversion, but no float to integer
            try:
                array = np.asarray(values, dtype=base)
                truncated = base.kind in "biu" and np.asarray(values).dtype.kind in "fc"
            except (TypeError, ValueError, OverflowError) as error:
                raise TypeError(f"{where}: values cannot be converted to {self.value_dtype}: {error}") from error
            if truncated:
                raise TypeError(f"{where}: float values for a Map of value dtype {self.value_dtype}")
        if array.shape == shape:  # one value for every key
            return np.broadcast_to(array, (count, *shape))
        if array.shape != (count, *shape):
            raise ValueError(
                f"{where}: {count} keys but values of shape {array.shape}: expected shape {(count, *shape)} "
                f"(one value of dtype {self.value_dtype} per key) or {shape} (one value for all)"
            )
        return array

    def _pairs(self, keys: Any, values: Any, operation: str) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        keys = self._keys(keys, operation)
        return keys, self._values_for(values, len(keys), operation)

    def _check_op(self, op: np.ufunc, operation: str) -> None:
        """*op* must combine two values of the value dtype into one it can store (checked once per ufunc)."""
        if op in self._checked_ops:
            return
        if self.value_dtype.names is not None or self._value_base.names is not None:
            raise TypeError(
                f"{self.kind}.{operation}(): op {op.__name__} does not apply to structured values of dtype "
                f"{self.value_dtype}: update records in place with visit()"
            )
        try:
            sample = np.zeros((2, *self._value_shape), dtype=self._value_base)
            with np.errstate(all="ignore"):  # 0 / 0 and the like: only the dtypes matter here
                combined = op.reduceat(sample, [0], axis=0, dtype=self._value_base)
                result = op(sample, sample)
        except (TypeError, ValueError) as error:
            raise TypeError(
                f"{self.kind}.{operation}(): op {op.__name__} does not apply to values of dtype {self.value_dtype}: "
                f"{error}"
            ) from error
        for got in (combined.dtype, result.dtype):
            if not np.can_cast(got, self._value_base, casting="same_kind"):
                raise TypeError(
                    f"{self.kind}.{operation}(): op {op.__name__} makes {got} of values of dtype "
                    f"{self.value_dtype}, which the map cannot store"
                )
        self._checked_ops.add(op)

    # -- asynchronous ----------------------------------------------------------

    def insert(self, keys: npt.ArrayLike, values: Any) -> None:
        """Give each key its value if the key is absent; a present key keeps its value (asynchronous).

        Among several inserts of one absent key in flight (from any ranks, or repeated in one batch), exactly
        one value is stored; which one is unspecified (in one batch, its first occurrence's).  YGM's
        ``async_insert`` (which inserts only if missing, like ``std::unordered_map::insert``; older YGM called
        it ``async_insert_if_missing``).  Raises before anything is sent: ``TypeError`` for keys or values of a
        dtype numpy does not cast safely, ``ValueError`` for mismatched lengths or shapes.
        """
        keys, values = self._pairs(keys, values, "insert")
        self._send_pairs(self._inserts, keys, values)

    def assign(self, keys: npt.ArrayLike, values: Any) -> None:
        """Set each key's value, inserting absent keys and overwriting present ones (asynchronous).

        Concurrent assignments of one key: the last applied wins, and their order is unspecified (within one
        batch, the last occurrence wins).  YGM's ``async_insert_or_assign``.  Errors as :meth:`insert`.
        """
        keys, values = self._pairs(keys, values, "assign")
        self._send_pairs(self._assigns, keys, values)

    def _send_pairs(self, channel: Any, keys: npt.NDArray[Any], values: npt.NDArray[Any]) -> None:
        for part in self._parts(len(keys)):
            records = np.empty(len(keys[part]), dtype=self._pair_dtype)
            records["key"] = keys[part]
            records["value"] = values[part]
            channel.send(self.partitioner.owner(keys[part]), records)

    def reduce(self, keys: npt.ArrayLike, values: Any, op: str | np.ufunc) -> None:
        """Combine each value into its key's value with *op*; an absent key takes the value as given
        (asynchronous; YGM's ``async_reduce``).

        *op*: ``"add"``, ``"min"``, ``"max"`` or a binary numpy ufunc (``np.bitwise_or``, ``np.multiply``...),
        assumed associative and commutative: the batch's values of one key are combined here first (one record
        per distinct key), then at the owner, in an unspecified order (float sums may differ in their last
        bits from run to run).  Raises before anything is sent: ``ValueError`` for an unknown op, ``TypeError``
        for an op that does not apply to the value dtype (structured values have none), and as :meth:`insert`.
        """
        ufunc = ufunc_of(op, f"{self.kind}.reduce()")
        keys, values = self._pairs(keys, values, "reduce")
        self._check_op(ufunc, "reduce")
        for part in self._parts(len(keys)):  # each part combined here, then sent
            self._reduce_part(keys[part], values[part], ufunc)

    def _reduce_part(self, keys: npt.NDArray[Any], values: npt.NDArray[Any], ufunc: np.ufunc) -> None:
        words = key_words(keys)
        order, starts = _group(words)
        firsts = order[starts]
        combined = ufunc.reduceat(values[order], starts, axis=0, dtype=self._value_base)
        owners = self.partitioner.owner_of_words(words[firsts])
        code = code_of(ufunc)
        if code is None:  # not in numpy's namespace: by reference, in calls
            pairs = np.empty(len(firsts), dtype=self._pair_dtype)
            pairs["key"] = keys[firsts]
            pairs["value"] = combined
            self._call_owners(_reduce_arrived, owners, pairs, (ufunc,), ())
            return
        records = np.empty(len(firsts), dtype=self._reduce_dtype)
        records["key"] = keys[firsts]
        records["value"] = combined
        records["op"] = code
        self._reduces.send(owners, records)

    def erase(self, keys: npt.ArrayLike) -> None:
        """Remove each key and its value; absent keys are ignored (asynchronous; YGM's ``async_erase``).
        Raises before anything is sent: ``TypeError`` for keys of another dtype, ``ValueError`` unless 1-D."""
        keys = self._keys(keys, "erase")
        if len(keys):
            self._erases.send(self.partitioner.owner(keys), keys)

    def visit(self, keys: npt.ArrayLike, fn: Callable[..., object], *args: Any) -> None:
        """Run ``fn(keys, values, *args)`` at the owners of *keys*, over arrays (asynchronous; YGM's
        ``async_visit``).

        A key absent at its owner is inserted first with a zero value (YGM default-constructs it).  At the
        owner, *fn* gets a batch of the visited keys (read-only) and their values (a writable array of the
        value dtype, aligned with the keys): update ``values`` in place (``values += 1``, ``values["hits"] |= 4``)
        and the map stores the changes when *fn* returns.  A batch holds each key once: a key visited *k*
        times in one arrival is visited in *k* successive calls of *fn*, each seeing the previous one's
        changes.  *fn* may send more visits, inserts and calls (to this map or others); the barrier that
        completes this visit completes them too.  It may not call collectives (``MailRailError``).

        *fn* is sent by reference, like ``rail.call``'s: a function defined at the top level of a module every
        rank imports; *args* are pickled once per call of ``visit`` (any picklable Python objects; a ``Map``
        among them arrives as the receiving rank's part of that map).  Raises here, before anything is sent:
        ``TypeError`` for a lambda, nested function or bound method, or arguments that cannot be pickled;
        :class:`~mailrail.errors.MessageSizeError` for arguments too large to travel with keys in a datagram;
        ``TypeError``/``ValueError`` for bad keys.
        """
        self._visit(keys, fn, args, False, "visit")

    def visit_if_contains(self, keys: npt.ArrayLike, fn: Callable[..., object], *args: Any) -> None:
        """As :meth:`visit`, but keys absent at their owner are skipped (not inserted; *fn* never sees them).
        YGM's ``async_visit_if_contains``."""
        self._visit(keys, fn, args, True, "visit_if_contains")

    def _visit(
        self, keys: npt.ArrayLike, fn: Callable[..., object], args: tuple[Any, ...], if_contains: bool, what: str
    ) -> None:
        where = f"{self.kind}.{what}()"
        keys = self._keys(keys, what)
        try:
            check_by_reference(fn)
        except TypeError as error:
            raise TypeError(f"{where}: {str(error).removeprefix('rail.call: ')}") from None
        arguments = _pickled(args, where)
        for part in self._parts(len(keys)):
            owners = self.partitioner.owner(keys[part])
            self._call_owners(_visits_arrived, owners, keys[part], (if_contains, fn), (arguments,))

    def _call_owners(
        self,
        arrived: Callable[..., None],
        owners: npt.NDArray[np.int64],
        items: npt.NDArray[Any],
        head: tuple[Any, ...],
        tail: tuple[Any, ...],
    ) -> None:
        """``arrived(token, owner, *head, chunk_bytes, *tail)`` on each owner, for its items in datagram-sized
        chunks (each call one datagram: no pieces to join)."""
        room = self.channels.datagram_size - _CALL_SLACK
        room -= len(pickle.dumps((arrived, (self._token, self.ranks, *head, b"", *tail)), protocol=5))
        per_call = room // items.dtype.itemsize
        if per_call < 1:
            raise MessageSizeError(
                f"{self.kind}: a call of {name_of(arrived)} with its arguments leaves no room for one "
                f"{items.dtype.itemsize}-byte item in a {self.channels.datagram_size}-byte datagram "
                f"(MAILRAIL_DATAGRAM_SIZE): pass smaller arguments, or raise the datagram size"
            )
        ordered, counts = group_by_rank(owners, items, self.ranks)
        for dest, first, end in spans_in_turn(counts, self.rank):
            for start in range(first, end, per_call):
                chunk = ordered[start : min(start + per_call, end)]
                self.rail.call(dest, arrived, self._token, dest, *head, chunk.tobytes(), *tail)

    # -- at the owner ------------------------------------------------------------

    def _fit(self) -> None:
        """Grow the value storage (geometrically) to hold every key of the table."""
        if len(self._table) > len(self._values):
            grown = np.zeros(max(2 * len(self._values), len(self._table)), dtype=self.value_dtype)
            grown[: len(self._values)] = self._values
            self._values = grown

    def _insert_keys(self, keys: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """Add the absent *keys* with zero values; each key's dense index."""
        dense, is_new = self._table.insert(keys)
        self._fit()
        new = dense[is_new]
        if len(new):
            self._values[new] = np.zeros(len(new), dtype=self.value_dtype)  # storage past an erase is stale
        return dense

    def _on_insert(self, source: int, records: npt.NDArray[Any]) -> None:
        # A datagram holds a few hundred records: one table operation per datagram would cost more in numpy
        # calls than in work, so arrivals wait, in arrival order, until enough are there, or until something
        # reads the map or visits it.  Operations in flight are unordered, so applying them later is the same.
        self._arrivals.add(_INSERT, records)

    def _on_assign(self, source: int, records: npt.NDArray[Any]) -> None:
        self._arrivals.add(_ASSIGN, records)

    def _on_reduce(self, source: int, records: npt.NDArray[Any]) -> None:
        self._arrivals.add(_REDUCE, records)

    def _on_erase(self, source: int, keys: npt.NDArray[Any]) -> None:
        self._arrivals.add(_ERASE, keys)

    def _apply_arrivals(self) -> None:
        """Apply the arrivals waiting in arrival order, each run of one kind as one batch: a run of inserts
        keeps each key's first value, a run of assignments its last, as one arrival would."""
        self._arrivals.apply_all()

    def _apply_run(self, run: Run) -> None:
        if run.kind == _ERASE:
            self._apply_erase(run.records if run.blobs is None else run.blobs)
            return
        keys = run.records["key"] if run.blobs is None else run.blobs  # (string keys travel beside the records)
        values = run.records["value"]
        if run.kind == _INSERT:
            self._apply_insert(keys, values)
        elif run.kind == _ASSIGN:
            self._apply_assign(keys, values)
        elif run.kind == _REDUCE:
            codes = run.records["op"]
            if (codes == codes[0]).all():
                self._apply_reduce(keys, values, UFUNCS[int(codes[0])])
                return
            for code in np.unique(codes).tolist():  # reduce() calls of several ops: in flight, so in any order
                chosen = np.flatnonzero(codes == code)
                self._apply_reduce(_take(keys, chosen), values[chosen], UFUNCS[code])
        else:
            assert isinstance(run.tag, np.ufunc)
            self._apply_reduce(keys, values, run.tag)

    def _apply_insert(self, keys: Any, values: npt.NDArray[Any]) -> None:
        dense, new = self._table.insert(keys)
        self._fit()
        self._values[dense[new]] = values[new]

    def _apply_assign(self, keys: Any, values: npt.NDArray[Any]) -> None:
        dense, _ = self._table.insert(keys)
        self._fit()
        _, from_end = np.unique(dense[::-1], return_index=True)
        last = len(dense) - 1 - from_end  # each key's last occurrence: the last assignment wins
        self._values[dense[last]] = values[last]

    def _apply_reduce(self, keys: Any, values: npt.NDArray[Any], op: np.ufunc) -> None:
        held = len(self._table)
        dense, _ = self._table.insert(keys)
        self._fit()
        order = np.argsort(dense, kind="stable")
        ordered = dense[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        targets = ordered[starts]
        if len(starts) == len(dense):
            combined = values[order]
        else:  # several reduce() calls of one sender in this arrival
            combined = op.reduceat(values[order], starts, axis=0, dtype=self._value_base)
        new = targets >= held  # keys new to the table took the next dense indices
        self._values[targets[new]] = combined[new]
        old = targets[~new]
        self._values[old] = op(self._values[old], combined[~new])

    def _apply_erase(self, keys: Any) -> None:
        _, moved_from, moved_to = self._table.erase(keys)
        self._values[moved_to] = self._values[moved_from]

    def _apply_visits(
        self, keys: npt.NDArray[Any], fn: Callable[..., object], args: tuple[Any, ...], if_contains: bool
    ) -> None:
        self._apply_arrivals()
        if if_contains:
            dense = self._table.lookup(keys)
            present = np.flatnonzero(dense >= 0)
            keys, dense = keys[present], dense[present]
        else:
            dense = self._insert_keys(keys)
        if len(keys) == 0:
            return
        rounds = _rounds(dense)
        for positions in rounds:
            at, round_keys = (dense, keys) if len(rounds) == 1 else (dense[positions], keys[positions])
            round_keys.flags.writeable = False
            self._visit_round(at, round_keys, fn, args)

    def _visit_round(
        self, at: npt.NDArray[np.int64], keys: Any, fn: Callable[..., object], args: tuple[Any, ...]
    ) -> None:
        """One call of a visit's *fn* over *keys*, whose dense indices *at* are distinct."""
        values = self._values[at]  # a copy: fn updates it, the map stores it back
        fn(keys, values, *args)
        self._values[at] = values

    def _found(self, keys: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """This rank's answer to a get: each key's value and whether it is here."""
        self._apply_arrivals()
        index = self._table.lookup(keys)
        found = index >= 0
        answers = np.zeros(len(keys), dtype=self._getter.value_dtype)
        answers["found"] = found
        answers["value"][found] = self._values[index[found]]
        return answers

    # -- collective ----------------------------------------------------------------

    @collective
    def get(self, keys: npt.ArrayLike) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        """Collective: ``(values, found)`` for the 1-D batch *keys*, in the caller's order: each key's value
        (zero where not found) and whether the map holds it.  Each rank asks about its own batch (empty if it
        has none); every asynchronous operation issued before, by any rank, is applied first.  YGM's
        ``gather_keys`` (``all_gather`` in older YGM)."""
        keys = self._keys(keys, "get")
        self._collective("get")
        answers = self._getter.ask(keys, self.partitioner.owner(keys))
        return answers["value"].copy(), answers["found"].copy()

    @collective
    def size(self) -> int:
        """Collective: how many keys the map holds, on all ranks (YGM's ``size``)."""
        self._collective("size")
        self._apply_arrivals()
        return self.channels.allreduce_sum(len(self._table))

    # -- local ---------------------------------------------------------------------

    def local(self) -> Any:
        """This rank's keys and their values, a ``pyarrow.Table`` of columns ``key`` and ``value`` (struct columns
        for records, fixed-size lists for subarray values), in no particular order (not collective: pending
        operations are not completed; call ``rail.barrier()`` first to see them).  YGM's ``for_all`` over the
        local part (``local_for_all``)."""
        self._apply_arrivals()
        held = len(self._table)
        return table_of({"key": canonical(self._table.keys.copy()), "value": self._values[:held].copy()})

    def _absorb(self, table: Any, where: str) -> None:
        keys = numpy_column(table.column(0), self.key_dtype)
        if "value" in table.column_names:
            self.assign(keys, numpy_column(table.column("value"), self.value_dtype))
        elif "count" in table.column_names:
            self.reduce(keys, table.column("count").to_numpy(), "add")
        else:
            raise TypeError(f"{where}: a Map takes keys with values (a 'value' or 'count' column)")

    def __repr__(self) -> str:
        return f"<Map of {self.key_dtype} -> {self.value_dtype} on rank {self.rank}: {len(self._table)} local keys>"


def _take(keys: Any, positions: npt.NDArray[np.intp]) -> Any:
    """The keys at *positions*: of an array, or of packed strings."""
    return keys.take(positions) if isinstance(keys, Blobs) else keys[positions]


def _group(words: npt.NDArray[np.uint64]) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Groups equal keys (by their canonical words): the stable permutation putting equal keys together, and
    where each group starts in it."""
    rows: npt.NDArray[Any]
    if words.shape[1] == 1:
        rows = words[:, 0]
    else:  # one comparable item per key: its words as raw bytes
        rows = np.ascontiguousarray(words).view(np.dtype((np.void, 8 * words.shape[1]))).reshape(-1)
    order = np.argsort(rows, kind="stable")
    ordered = rows[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    return order, starts


def _rounds(dense: npt.NDArray[np.int64]) -> list[npt.NDArray[np.intp]]:
    """The positions of *dense* split into rounds in which each index occurs once: round ``r`` holds each
    index's ``r``-th occurrence, in batch order.  One round unless the batch repeats a key."""
    order = np.argsort(dense, kind="stable")
    ordered = dense[order]
    starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
    if len(starts) == len(dense):
        return [np.arange(len(dense))]
    occurrence = np.empty(len(dense), dtype=np.intp)
    occurrence[order] = np.arange(len(dense)) - np.repeat(starts, np.diff(np.r_[starts, len(dense)]))
    by_round = np.argsort(occurrence, kind="stable")
    bounds = np.searchsorted(occurrence[by_round], np.arange(int(occurrence.max()) + 2))
    return [by_round[bounds[r] : bounds[r + 1]] for r in range(len(bounds) - 1)]


def _pickled(args: tuple[Any, ...], where: str) -> bytes:
    """A visit's arguments, pickled once for all its calls; an argument that cannot be is named."""
    try:
        return pickle.dumps(args, protocol=5)
    except Exception:
        for index, arg in enumerate(args):
            try:
                pickle.dumps(arg, protocol=5)
            except Exception as why:
                raise TypeError(
                    f"{where}: argument {index} ({type(arg).__name__} {reprlib.repr(arg)}) cannot be pickled: {why}"
                ) from why
        raise


_NOTHING = np.dtype([])


class StringKeyMap(Map):
    """``Map(rail, str, value_dtype)`` or ``Map(rail, bytes, value_dtype)``: a map from strings of any length to
    values of a fixed dtype, with :class:`Map`'s operations (see :mod:`mailrail.containers.keys` for
    what a batch of keys may be).  Owners keep the keys in a :class:`~mailrail.containers.keys.StringTable` beside
    the values' array; each record carries its value (and a reduction's op) with its key beside it.  A visit's
    function gets the keys as a pyarrow array."""

    @collective
    def __init__(self, rail: Rail, kind: type, value_dtype: npt.DTypeLike) -> None:  # (Map.__init__: fixed keys)
        Container.__init__(self, rail)
        self._strings = Strings(kind)
        #: ``str`` or ``bytes``.
        self.key_dtype = kind  # type: ignore[assignment]
        self.value_dtype = fixed_dtype(value_dtype, "Map", "values")
        self.channels.check_collective("Map()")
        rail.barrier()
        self._value_base = self.value_dtype.base
        self._value_shape = self.value_dtype.shape
        self._table = StringTable()  # type: ignore[assignment]
        self._values = np.zeros(1024, dtype=self.value_dtype)
        self._pair_dtype = np.dtype([("value", self.value_dtype)])
        self._reduce_dtype = np.dtype([("value", self.value_dtype), ("op", np.uint16)])
        self._inserts = self._channel(self._pair_dtype, self._on_string_record(_INSERT), "inserts", blobs=True)
        self._assigns = self._channel(self._pair_dtype, self._on_string_record(_ASSIGN), "assignments", blobs=True)
        self._reduces = self._channel(self._reduce_dtype, self._on_string_record(_REDUCE), "reductions", blobs=True)
        self._erases = self._channel(_NOTHING, self._on_string_record(_ERASE), "erasures", blobs=True)
        found_dtype = np.dtype([("value", self.value_dtype), ("found", np.bool_)])
        self._getter = Lookup(self, self._strings, found_dtype, self._found, "get")
        self._checked_ops = set()
        self._arrivals = Arrivals(
            [self._pair_dtype, self._pair_dtype, self._reduce_dtype, self._pair_dtype, _NOTHING],
            self.pending_limit,
            self._apply_run,
            ordered=True,
            blobs=frozenset(range(5)),
        )
        self._token = _rail_token(self.channels) * MAX_CHANNELS + self._inserts.number
        _MAPS[(self._token, self.rank)] = self

    def _on_string_record(self, kind: int) -> Callable[[int, npt.NDArray[Any], Blobs], None]:
        def arrived(source: int, records: npt.NDArray[Any], blobs: Blobs) -> None:
            self._arrivals.add(kind, records, blobs)

        return arrived

    def _pairs(self, keys: Any, values: Any, operation: str) -> tuple[Any, npt.NDArray[Any]]:
        blobs = self._string_keys(keys, operation)
        return blobs, self._values_for(values, blobs.count, operation)

    def _send_pairs(self, channel: Any, keys: Any, values: npt.NDArray[Any]) -> None:
        if keys.count == 0:
            return
        records = np.empty(keys.count, dtype=self._pair_dtype)
        records["value"] = values
        channel.send(Strings.owners(keys, self.partitioner), records, keys)

    def reduce(self, keys: Any, values: Any, op: str | np.ufunc) -> None:
        """Combine each value into its key's value with *op* (asynchronous; see :meth:`Map.reduce`): a batch's
        values of one string are combined here first, one record per distinct string."""
        ufunc = ufunc_of(op, f"{self.kind}.reduce()")
        blobs, values = self._pairs(keys, values, "reduce")
        self._check_op(ufunc, "reduce")
        code = code_of(ufunc)
        if code is None:
            raise ValueError(f"{self.kind}.reduce(): op {ufunc.__name__} is not one of numpy's own binary ufuncs")
        if blobs.count == 0:
            return
        distinct = StringTable(blobs.count)
        dense, _ = distinct.insert(blobs)
        order = np.argsort(dense, kind="stable")
        ordered = dense[order]
        starts = np.flatnonzero(np.r_[True, ordered[1:] != ordered[:-1]])
        records = np.empty(len(starts), dtype=self._reduce_dtype)
        records["value"] = ufunc.reduceat(np.asarray(values)[order], starts, axis=0, dtype=self._value_base)
        records["op"] = code
        self._reduces.send(self.partitioner.owner_of_hashes(distinct.hashes()), records, distinct.keys())

    def erase(self, keys: Any) -> None:
        """Remove each string and its value; absent ones are ignored (asynchronous; see :meth:`Map.erase`)."""
        blobs = self._string_keys(keys, "erase")
        if blobs.count:
            self._erases.send(Strings.owners(blobs, self.partitioner), None, blobs)

    def _visit(self, keys: Any, fn: Callable[..., object], args: tuple[Any, ...], if_contains: bool, what: str) -> None:
        """Visits travel as calls, as for fixed-size keys: one call per owner and datagram-sized chunk of strings
        (their offsets and bytes); *fn* gets the keys as a pyarrow array."""
        where = f"{self.kind}.{what}()"
        blobs = self._string_keys(keys, what)
        try:
            check_by_reference(fn)
        except TypeError as error:
            raise TypeError(f"{where}: {str(error).removeprefix('rail.call: ')}") from None
        arguments = _pickled(args, where)
        if not blobs.count:
            return
        head = (_string_visits_arrived, (self._token, self.ranks, if_contains, fn, b"", b"", arguments))
        room = self.channels.datagram_size - _CALL_SLACK - len(pickle.dumps(head, protocol=5))
        owners = Strings.owners(blobs, self.partitioner)
        order = np.argsort(owners, kind="stable")
        ordered = blobs.take(order)
        offsets = ordered.offsets.astype(np.int64)
        sizes = offsets - offsets[0] + 8 * np.arange(len(offsets))  # a chunk's bytes and its offsets
        if int((np.diff(sizes)).max()) + 8 > room:
            raise MessageSizeError(
                f"{where}: a call of a visit with its arguments leaves no room for the longest key in a "
                f"{self.channels.datagram_size}-byte datagram (MAILRAIL_DATAGRAM_SIZE): pass smaller arguments, "
                f"or raise the datagram size"
            )
        counts = np.bincount(owners, minlength=self.ranks)
        for dest, start, end in spans_in_turn(counts, self.rank):
            while start < end:
                stop = min(end, int(np.searchsorted(sizes, sizes[start] + room - 8, side="right")) - 1)
                stop = max(stop, start + 1)
                chunk = offsets[start : stop + 1]
                data = ordered.data[int(chunk[0]) : int(chunk[-1])].tobytes()
                self.rail.call(
                    dest,
                    _string_visits_arrived,
                    self._token,
                    dest,
                    if_contains,
                    fn,
                    (chunk - chunk[0]).tobytes(),
                    data,
                    arguments,
                )
                start = stop

    def _apply_visits(self, keys: Any, fn: Callable[..., object], args: tuple[Any, ...], if_contains: bool) -> None:
        self._apply_arrivals()
        table: StringTable = self._table  # type: ignore[assignment]
        if if_contains:
            dense = table.lookup(keys)
            present = np.flatnonzero(dense >= 0)
            keys, dense = keys.take(present), dense[present]
        else:
            dense = self._insert_keys(keys)
        if keys.count == 0:
            return
        visited = self._strings.arrow(keys)  # type: ignore[union-attr]
        rounds = _rounds(dense)
        for positions in rounds:
            at, round_keys = (dense, visited) if len(rounds) == 1 else (dense[positions], visited.take(positions))
            self._visit_round(at, round_keys, fn, args)

    @collective
    def get(self, keys: Any) -> tuple[npt.NDArray[Any], npt.NDArray[np.bool_]]:
        """Collective: ``(values, found)`` for the batch of strings *keys*, in the caller's order (see
        :meth:`Map.get`)."""
        blobs = self._string_keys(keys, "get")
        self._collective("get")
        answers = self._getter.ask(blobs, Strings.owners(blobs, self.partitioner))
        return answers["value"].copy(), answers["found"].copy()

    def local(self) -> Any:
        """This rank's strings and their values, a ``pyarrow.Table`` of columns ``key`` and ``value`` (see
        :meth:`Map.local`)."""
        self._apply_arrivals()
        table: StringTable = self._table  # type: ignore[assignment]
        return table_of(
            {"key": self._strings.arrow(table.keys()), "value": self._values[: len(table)].copy()}  # type: ignore[union-attr]
        )

    def _absorb(self, table: Any, where: str) -> None:
        if "value" in table.column_names:
            self.assign(table.column(0), numpy_column(table.column("value"), self.value_dtype))
        elif "count" in table.column_names:
            self.reduce(table.column(0), table.column("count").to_numpy(), "add")
        else:
            raise TypeError(f"{where}: a Map takes keys with values (a 'value' or 'count' column)")

    def __repr__(self) -> str:
        return f"<Map of {self._strings} -> {self.value_dtype} on rank {self.rank}: {len(self._table)} local keys>"


#: The ops strings reduce by, and whether each keeps the larger string.
_STRING_OPS: dict[np.ufunc, bool] = {np.minimum: False, np.maximum: True}


class StringValueMap(Map):
    """``Map(rail, key_dtype, str)`` or ``Map(rail, key_dtype, bytes)``: a map to strings of any length, with
    :class:`Map`'s operations; and the values' half of :class:`StringMap` (``Map(rail, str, str)``).

    *Values* are a batch of strings, as keys of strings are (see :mod:`mailrail.containers.keys`: a pyarrow array,
    a numpy array of strings, a list), or one ``str`` (``bytes``) that every key gets.  Each owner keeps them in a
    :class:`~mailrail.containers.varvalues.StringColumn` beside its table, indexed by the keys' dense indices.
    Results are pyarrow arrays (``StringArray`` for ``str``, ``BinaryArray`` for ``bytes``): :meth:`get` returns the
    values as one, with the empty string (the zero value of strings) where a key is absent; :meth:`local` is a table
    of ``key`` and ``value`` columns.  What differs from fixed-size values:

    - **reduce** takes ``"min"`` and ``"max"`` (``np.minimum``, ``np.maximum``): the smallest or largest string by
      its bytes (for ``str``, Python's order of ``str``), a result no order of arrival changes, as YGM's
      ``async_reduce`` with a commutative reducer.  Every other op raises ``TypeError`` naming it: concatenation
      (``"add"``) would depend on the order reductions arrive in, which nothing fixes.  The first value of a key
      is :meth:`insert`'s, the last :meth:`assign`'s; anything else is a visit's.
    - **visit**: ``fn(keys, values, *args)`` gets the values as a pyarrow array (immutable: there is nothing to
      update in place) and *returns* the new values, any batch of strings as long as *keys*, or None to leave them
      as they are.  An absent key is inserted with the empty string first (YGM default-constructs it);
      :meth:`visit_if_contains` skips it.
    - **Size.**  A value longer than a datagram takes beside its record and its headers (with string keys: a key
      and its value together) raises :class:`~mailrail.errors.MessageSizeError` naming both sizes, before anything
      is sent; so does a visit's new value, on the owner (a value must fit in a reply).
    """

    @collective
    def __init__(self, rail: Rail, key_dtype: Any, value_dtype: Any) -> None:  # (Map.__init__: fixed values)
        Container.__init__(self, rail)
        string_keys = is_string_type(key_dtype)
        self._value_strings = Strings(value_dtype)
        #: ``str`` or ``bytes``.
        self.value_dtype = value_dtype
        if string_keys:
            self._strings = Strings(key_dtype)
            self.key_dtype = key_dtype
        else:
            self.key_dtype = fixed_dtype(key_dtype, "Map")
            self._key_dtype = self.key_dtype
        self.channels.check_collective("Map()")
        rail.barrier()
        self._table = StringTable() if string_keys else KeyTable(self.key_dtype)  # type: ignore[assignment]
        self._column = StringColumn()
        # A string key is the record's first variable-size part, its value the second; a fixed-size key is the
        # record's fixed part, beside its value.
        key_part = [] if string_keys else [("key", self.key_dtype)]
        parts = 2 if string_keys else 1
        self._pair_dtype = np.dtype(key_part)
        self._reduce_dtype = np.dtype([*key_part, ("op", np.uint16)])
        self._inserts = self._channel(self._pair_dtype, self._on_strings(_INSERT), "inserts", blobs=parts)
        self._assigns = self._channel(self._pair_dtype, self._on_strings(_ASSIGN), "assignments", blobs=parts)
        self._reduces = self._channel(self._reduce_dtype, self._on_strings(_REDUCE), "reductions", blobs=parts)
        if string_keys:
            self._erases = self._channel(_NOTHING, self._on_strings(_ERASE), "erasures", blobs=True)
        else:
            self._erases = self._channel(self.key_dtype, self._on_erase, "erasures")
        self._string_getter = StringLookup(
            self, self._strings or self.key_dtype, np.dtype(np.bool_), self._found_strings, "get"
        )
        #: The most bytes a key and its value have together (string keys), or a value (fixed-size keys).
        self._longest_pair = min(channel.largest_blob for channel in (self._inserts, self._assigns, self._reduces))
        self._checked_ops = set()
        self._arrivals = Arrivals(
            [self._pair_dtype, self._pair_dtype, self._reduce_dtype, self._pair_dtype, self._erases.dtype],
            self.pending_limit,
            self._apply_run,
            ordered=True,
            blobs={_INSERT: parts, _ASSIGN: parts, _REDUCE: parts} | ({_ERASE: 1} if string_keys else {}),
        )
        self._token = _rail_token(self.channels) * MAX_CHANNELS + self._inserts.number
        _MAPS[(self._token, self.rank)] = self

    def _on_strings(self, kind: int) -> Callable[..., None]:
        def arrived(source: int, records: npt.NDArray[Any], *parts: Blobs) -> None:
            self._arrivals.add(kind, records, parts)

        return arrived

    # -- checking input --------------------------------------------------------

    def _string_values(self, values: Any, count: int, where: str) -> Blobs:
        """*values* for *count* keys as packed strings (one ``str`` or ``bytes``: every key's), each short enough
        for a datagram; else an error, before anything is sent."""
        kind = self._value_strings.kind
        if isinstance(values, (str, bytes)):
            if not isinstance(values, kind):
                raise TypeError(f"{where}: a {type(values).__name__} value for a Map of {kind.__name__} values")
            blobs = repeated(values.encode() if isinstance(values, str) else values, count)
        else:
            blobs = self._value_strings.convert(values, where, "values")
            if blobs.count != count:
                raise ValueError(
                    f"{where}: {count} keys but {blobs.count} values: one value per key, or one value for all"
                )
        self._check_lengths(blobs, where, "value")
        return blobs

    def _pairs(self, keys: Any, values: Any, operation: str) -> tuple[Any, Any]:
        where = f"{self.kind}.{operation}()"
        batch = self._string_keys(keys, operation) if self._strings is not None else self._keys(keys, operation)
        strings = self._string_values(values, len(batch), where)
        if isinstance(batch, Blobs) and len(batch):
            together = batch.lengths() + strings.lengths()
            longest = int(np.argmax(together))
            if int(together[longest]) > self._longest_pair:
                key, value = int(batch.lengths()[longest]), int(strings.lengths()[longest])
                raise MessageSizeError(
                    f"{where}: a {key}-byte key with its {value}-byte value ({key + value} bytes) does not fit in a "
                    f"{self.channels.datagram_size}-byte datagram, which takes a key and its value of up to "
                    f"{self._longest_pair} bytes together here, beside the record and its headers (raise "
                    f"MAILRAIL_DATAGRAM_SIZE)"
                )
        return batch, strings

    def _string_op(self, op: str | np.ufunc, where: str) -> bool:
        """Whether *op* keeps the larger string (``"max"``) or the smaller (``"min"``); any other op is refused."""
        ufunc = ufunc_of(op, where)
        largest = _STRING_OPS.get(ufunc)
        if largest is None:
            raise TypeError(
                f"{where}: op {ufunc.__name__} does not apply to values of {self._value_strings} (strings of any "
                f"length): they reduce by 'min' or 'max' (by their bytes; for str, Python's order), whose result "
                f"no order of arrival changes. For a key's first value use insert(), for its last assign(), for "
                f"anything else a visit"
            )
        return largest

    # -- asynchronous ----------------------------------------------------------

    def _send_pairs(self, channel: Any, keys: Any, values: Any) -> None:
        if not values.count:
            return
        records = np.empty(values.count, dtype=channel.dtype)
        if isinstance(keys, Blobs):
            channel.send(Strings.owners(keys, self.partitioner), records, (keys, values))
        else:
            records["key"] = keys
            channel.send(self.partitioner.owner(keys), records, values)

    def reduce(self, keys: Any, values: Any, op: str | np.ufunc) -> None:
        """Keep the smaller (``"min"``) or larger (``"max"``) string of each key's value and the ones given, by their
        bytes; an absent key takes the value as given (asynchronous; see the class for why only these two).  A
        batch's values of one key are combined here first: one record per distinct key."""
        where = f"{self.kind}.reduce()"
        largest = self._string_op(op, where)
        code = code_of(np.maximum if largest else np.minimum)
        batch, strings = self._pairs(keys, values, "reduce")
        count = strings.count
        if not count:
            return
        if isinstance(batch, Blobs):
            distinct = StringTable(count)
            groups, _ = distinct.insert(batch)
            _, pick = extremes(groups, strings, largest)  # groups 0..k-1: the distinct keys' dense order
            records = np.empty(len(pick), dtype=self._reduce_dtype)
            records["op"] = code
            owners = self.partitioner.owner_of_hashes(distinct.hashes())
            self._reduces.send(owners, records, (distinct.keys(), strings.take(pick)))
            return
        words = key_words(batch)
        order, starts = _group(words)
        groups = np.empty(count, dtype=np.intp)
        groups[order] = np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, count]))
        _, pick = extremes(groups, strings, largest)
        firsts = order[starts]
        records = np.empty(len(firsts), dtype=self._reduce_dtype)
        records["key"] = batch[firsts]
        records["op"] = code
        self._reduces.send(self.partitioner.owner_of_words(words[firsts]), records, strings.take(pick))

    # -- at the owner ------------------------------------------------------------

    def _fit(self) -> None:
        self._column.fit(len(self._table))

    def _insert_keys(self, keys: Any) -> npt.NDArray[np.int64]:
        """Add the absent *keys* with the empty string; each key's dense index."""
        dense, _ = self._table.insert(keys)
        self._column.fit(len(self._table))
        return dense

    def _apply_run(self, run: Run) -> None:
        if self._strings is not None:  # the key is the first variable-size part, the value the second
            keys: Any = run.blobs
            values = run.more[0] if run.more else None
        else:
            keys, values = (run.records if run.kind == _ERASE else run.records["key"]), run.blobs
        if run.kind == _ERASE:
            held = len(self._table)
            _, moved_from, moved_to = self._table.erase(keys)
            self._column.erase(held, len(self._table), moved_from, moved_to)
            return
        assert values is not None
        if run.kind == _REDUCE:
            codes = run.records["op"]
            if (codes == codes[0]).all():
                self._apply_string_reduce(keys, values, _STRING_OPS[UFUNCS[int(codes[0])]])
                return
            for code in np.unique(codes).tolist():  # reduce() calls of both ops: in flight, so in any order
                chosen = np.flatnonzero(codes == code)
                self._apply_string_reduce(_take(keys, chosen), values.take(chosen), _STRING_OPS[UFUNCS[code]])
            return
        dense, new = self._table.insert(keys)
        self._column.fit(len(self._table))
        if run.kind == _INSERT:  # each absent key's first value
            self._column.set(dense[new], values.take(np.flatnonzero(new)))
        else:  # each key's last value
            _, from_end = np.unique(dense[::-1], return_index=True)
            last = len(dense) - 1 - from_end
            self._column.set(dense[last], values.take(last))

    def _apply_string_reduce(self, keys: Any, values: Blobs, largest: bool) -> None:
        """Reduce *values* into their *keys*' values (an absent key takes its value as given)."""
        held = len(self._table)
        dense, _ = self._table.insert(keys)
        self._column.fit(len(self._table))
        targets, pick = extremes(dense, values, largest)
        combined = values.take(pick)
        chosen = targets >= held
        old = np.flatnonzero(~chosen)
        current, offered = self._column.get(targets[old]), combined.take(old)
        chosen[old] = less(current, offered) if largest else less(offered, current)
        self._column.set(targets[chosen], combined.take(np.flatnonzero(chosen)))

    def _visit_round(
        self, at: npt.NDArray[np.int64], keys: Any, fn: Callable[..., object], args: tuple[Any, ...]
    ) -> None:
        """*fn* gets the values as a pyarrow array and returns the new ones, or None (see the class)."""
        returned = fn(keys, self._value_strings.arrow(self._column.get(at)), *args)
        if returned is None:
            return
        where = f"{self.kind}.visit(): {name_of(fn)}"
        strings = self._value_strings.convert(returned, where, "returned values")
        if strings.count != len(at):
            raise ValueError(f"{where} returned {strings.count} values for {len(at)} keys: one per key, or None")
        self._check_lengths(strings, where, "value")
        self._column.set(at, strings)

    def _found_strings(self, keys: Any) -> tuple[npt.NDArray[np.bool_], Blobs]:
        """This rank's answer to a get: whether each key is here, and its value (the empty string if not)."""
        self._apply_arrivals()
        index = self._table.lookup(keys)
        return index >= 0, self._column.get(index)

    # -- collective ----------------------------------------------------------------

    @collective
    def get(self, keys: Any) -> tuple[Any, npt.NDArray[np.bool_]]:
        """Collective: ``(values, found)`` for the batch *keys*, in the caller's order: each key's value, a pyarrow
        array (the empty string where not found), and whether the map holds it (see :meth:`Map.get`)."""
        batch: Any
        if self._strings is not None:
            batch = self._string_keys(keys, "get")
            owners = Strings.owners(batch, self.partitioner)
        else:
            batch = self._keys(keys, "get")
            owners = self.partitioner.owner(batch)
        self._collective("get")
        found, values = self._string_getter.ask(batch, owners)
        return self._value_strings.arrow(values), found

    # -- local ---------------------------------------------------------------------

    def local(self) -> Any:
        """This rank's keys and their values, a ``pyarrow.Table`` of columns ``key`` and ``value`` (see
        :meth:`Map.local`)."""
        self._apply_arrivals()
        table: Any = self._table
        held = len(table)
        keys = self._strings.arrow(table.keys()) if self._strings is not None else canonical(table.keys.copy())
        return table_of({"key": keys, "value": self._value_strings.arrow(self._column.get(np.arange(held)))})

    def _absorb(self, table: Any, where: str) -> None:
        if "value" not in table.column_names:
            counts = "; counts do not reduce into strings" if "count" in table.column_names else ""
            raise TypeError(
                f"{where}: a Map of {self._value_strings} values takes keys with their strings (a 'value' "
                f"column){counts}"
            )
        keys = table.column(0) if self._strings is not None else numpy_column(table.column(0), self.key_dtype)
        self.assign(keys, table.column("value"))

    def __repr__(self) -> str:
        keys = self._strings if self._strings is not None else self.key_dtype
        return f"<Map of {keys} -> {self._value_strings} on rank {self.rank}: {len(self._table)} local keys>"


class StringMap(StringValueMap, StringKeyMap):
    """``Map(rail, str, str)`` (or with ``bytes`` on either side): strings of any length to strings of any length.
    The keys' half (visits as calls of packed strings, erasures) is :class:`StringKeyMap`'s, the values' half
    :class:`StringValueMap`'s; a key and its value travel together, as the two variable-size parts of one record
    (segments of kind 2)."""


#: The class ``Map(rail, key_dtype, value_dtype)`` makes, by whether its keys and its values are strings.
_MAP_CLASSES: dict[tuple[bool, bool], type[Map]] = {
    (False, False): Map,
    (True, False): StringKeyMap,
    (False, True): StringValueMap,
    (True, True): StringMap,
}
