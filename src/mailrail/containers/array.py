"""A distributed array of fixed length: contiguous blocks, one per rank, updated and read in batches.

:class:`Array` holds ``length`` elements of one fixed dtype, zero-initialized, in the blocks of a
:class:`~mailrail.containers.partition.BlockPartitioner` (rank ``r`` owns ``offsets[r]:offsets[r + 1]``).
An element may be a subarray, ``np.dtype((np.float32, 64))``: a feature vector per vertex, as in GNN
feature aggregation, and values then travel as ``(n, 64)`` arrays.

**Updates** (:meth:`Array.set`, :meth:`Array.reduce`) are asynchronous: records to the owners, applied by
their handlers, complete at the next ``barrier()``.  Both travel on one channel: a record is the element's
offset in its owner's block, with the operation's code in its top 16 bits, and the value.  A reduce is
combined on the sender first (one record per distinct index and call), so a hub index updated by a
million edges costs its owner one record per sender and batch.

**Reads** (:meth:`Array.gather`) are collective: each rank asks the owners of the distinct indices it
wants (a hub requested by every edge is asked once per rank: the incast shrinks to one request per rank)
and the owners answer from their handlers (:class:`~mailrail.containers.base.Lookup`).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..channels import Rail
from ..collectives import collective
from .base import Container, Lookup, table_of
from .keys import fixed_dtype
from .ops import UFUNCS, code_of, ufunc_of
from .partition import BlockPartitioner

__all__ = ["Array"]

#: An update record's target: the offset in the owner's block in the low bits, the operation in the top 16.
OP_SHIFT = 48
OFFSET_MASK = np.uint64((1 << OP_SHIFT) - 1)
#: The operation code of a set; a reduction's is its code (:data:`~mailrail.containers.ops.UFUNCS`) plus one.
SET = 0


class Array(Container):
    """*length* elements of *dtype*, zero-initialized, in contiguous blocks over the rail's ranks.

    Construction is collective (every rank makes the same containers in the same order).  *dtype*: any
    fixed-size dtype: numbers, fixed-width bytes, structured records, or a subarray such as
    ``np.dtype((np.float32, 64))`` (then values are ``(n, 64)`` float32 arrays).  An element must fit
    in one of the rail's datagrams beside its 8-byte offset (:class:`~mailrail.errors.MessageSizeError`
    otherwise: raise ``MAILRAIL_DATAGRAM_SIZE``).
    """

    kind = "Array"

    @collective
    def __init__(self, rail: Rail, length: int, dtype: Any = np.float64) -> None:
        super().__init__(rail)
        try:
            length = operator.index(length)
        except TypeError:
            raise TypeError(f"Array: length must be an integer, got {length!r}") from None
        if length < 0:
            raise ValueError(f"Array: length must be >= 0, got {length}")
        element = fixed_dtype(dtype, "Array", "elements")
        self.blocks = BlockPartitioner(length, self.ranks)
        self.partitioner = self.blocks  # type: ignore[assignment]  # indices to ranks by block, not by hash
        self._starts = self.blocks.offsets
        self._dtype: np.dtype[Any] = element
        #: A value's scalar dtype and shape: (float32, (64,)) for a subarray of 64 float32.
        self._base, self._shape = element.base, element.shape
        self._start = self.blocks.start(self.rank)
        if self.blocks.count(self.rank) > 1 << OP_SHIFT:
            raise ValueError(f"Array: a block of {self.blocks.count(self.rank)} elements is more than 2**48")
        self._values: np.ndarray = np.zeros(self.blocks.count(self.rank), dtype=element)
        self._record = np.dtype([("target", "<u8"), ("value", element)])
        self._updates = self._channel(self._record, self._on_update, "updates")
        self._lookup = Lookup(self, np.dtype(np.int64), element, None, "gather", answer_into=self._answer_into)

    # -- what it is ------------------------------------------------------------

    @property
    def length(self) -> int:
        """The number of elements, over all ranks."""
        return self.blocks.length

    @property
    def dtype(self) -> np.dtype[Any]:
        """The element dtype (a subarray dtype for vector elements)."""
        return self._dtype

    def __len__(self) -> int:
        return self.blocks.length

    def __repr__(self) -> str:
        return f"<Array of {self.length} x {self._dtype} on rank {self.rank} of {self.ranks}>"

    def owner(self, keys: Any) -> np.ndarray:
        """The rank that owns each index (``int64``); ``IndexError`` for an index outside ``0..length-1``."""
        return self._place(self._indices(keys, "owner"))[0]

    def local(self) -> Any:
        """This rank's block, a ``pyarrow.Table`` of columns ``index`` (``int64``) and ``value`` (fixed-size
        lists for subarray elements), a copy.  Not collective: read it after a ``barrier()`` for a settled
        picture.  YGM's ``for_all`` over the local part."""
        return table_of(
            {"index": np.arange(self._start, self._start + len(self._values)), "value": self._values.copy()}
        )

    def local_view(self) -> tuple[int, np.ndarray]:
        """``(start, view)``: the first index this rank owns and a writable view of its block.

        ``view[i]`` is element ``start + i``: a rank fills its own block in place (no messages).  Not
        collective; updates from other ranks land in it as their records arrive, so read it after a
        ``barrier()`` for a settled picture.
        """
        return self._start, self._values[:]

    # -- asynchronous updates -----------------------------------------------

    def set(self, indices: Any, values: Any) -> None:
        """Asynchronous: ``array[indices[i]] = values[i]`` at the owners.

        *values*: ``(n, *element_shape)`` values of the element dtype (or convertible to it without loss),
        or one element for every index.  When several sets reach one index before a barrier, one of them
        is the last applied: which one is unspecified (no order between ranks, nor between datagrams).
        """
        index = self._indices(indices, "set")
        values = self._values_for(values, len(index), "set")
        for part in self._parts(len(index)):
            self._send_updates(SET, *self._place(index[part]), values[part])

    def reduce(self, indices: Any, values: Any, op: str | np.ufunc = "add") -> None:
        """Asynchronous: ``array[indices[i]] = op(array[indices[i]], values[i])`` at the owners.

        *op*: ``"add"``, ``"min"``, ``"max"`` or a binary numpy ufunc (``np.bitwise_or``, ``np.multiply``
        ...), associative and commutative: repeated indices are combined here with ``op.reduceat``
        before anything is sent, then each owner applies one value per index.  Refused before anything
        is sent: an unknown op (``ValueError``), an op whose result is not of the element dtype, or an
        element dtype it cannot take (``TypeError``: ``np.divide`` on integers, comparisons, any op on
        records).
        """
        ufunc = self._ufunc_for(op)
        code = code_of(ufunc)
        assert code is not None  # _ufunc_for refuses the others
        index = self._indices(indices, "reduce")
        values = self._values_for(values, len(index), "reduce")
        for part in self._parts(len(index)):  # each part combined here, then sent
            self._reduce_part(code, ufunc, index[part], values[part])

    def _reduce_part(self, code: int, ufunc: np.ufunc, index: np.ndarray, values: np.ndarray) -> None:
        if not _strictly_increasing(index):
            order = np.argsort(index, kind="stable")
            index, values = index[order], values[order]
            starts = np.flatnonzero(np.concatenate(([True], index[1:] != index[:-1])))
            if len(starts) < len(index):
                values = ufunc.reduceat(values, starts, axis=0, dtype=self._base)
            index = index[starts]
        self._send_updates(code + 1, *self._place(index), values)

    def _send_updates(self, code: int, owners: np.ndarray, offsets: np.ndarray, values: np.ndarray) -> None:
        records = np.empty(len(offsets), dtype=self._record)
        records["target"] = offsets.astype(np.uint64) | np.uint64(code << OP_SHIFT)
        records["value"] = values
        self._updates.send(owners, records)

    def _on_update(self, source: int, records: np.ndarray) -> None:
        targets = records["target"]
        codes = targets >> np.uint64(OP_SHIFT)
        offsets = (targets & OFFSET_MASK).astype(np.intp)
        values = records["value"]
        if codes[0] == codes[-1] and (codes == codes[0]).all():  # one kind of update: the usual segment
            self._apply(int(codes[0]), offsets, values)
            return
        bounds = [0, *(np.flatnonzero(np.diff(codes)) + 1).tolist(), len(codes)]
        for begin, end in zip(bounds[:-1], bounds[1:]):  # runs in the order they were sent
            self._apply(int(codes[begin]), offsets[begin:end], values[begin:end])

    def _apply(self, code: int, offsets: np.ndarray, values: np.ndarray) -> None:
        stored = self._values
        if code == SET:
            stored[offsets] = values
            return
        ufunc = UFUNCS[code - 1]
        if not _strictly_increasing(offsets):  # one sender's batches, or several in one segment
            order = np.argsort(offsets, kind="stable")
            offsets, values = offsets[order], values[order]
            starts = np.flatnonzero(np.concatenate(([True], offsets[1:] != offsets[:-1])))
            values = ufunc.reduceat(values, starts, axis=0, dtype=self._base)
            offsets = offsets[starts]
        current = stored[offsets]
        stored[offsets] = ufunc(current, values, out=current)

    # -- collective reads ------------------------------------------------------

    @collective
    def gather(self, indices: Any) -> np.ndarray:  # type: ignore[override]  # (YGM's all_gather of indices)
        """Collective: the current value of each index, as ``(n, *element_shape)`` values of the element dtype.
        (An Array's ``gather`` is this lookup, YGM's ``all_gather(indices)``; its whole block structure is
        already known to every rank: ``local()`` tables, gathered as any container's, are rarely needed.)

        Every rank calls it (with its own indices, possibly none), outside handlers; it first completes
        every asynchronous update any rank sent before it.  Each rank asks for each distinct index once:
        repeated indices (a hub vertex's features wanted by every edge) cost one request and one reply.
        """
        index = self._indices(indices, "gather")
        self._collective("gather")
        if _strictly_increasing(index):  # distinct already (a halo from np.unique): asked as it is
            owners = self.blocks.owner(index)
            result: np.ndarray = self._lookup.ask(index - self._starts[owners], owners)
            return result
        distinct, inverse = _distinct(index, self.length)
        owners = self.blocks.owner(distinct)
        found: np.ndarray = self._lookup.ask(distinct - self._starts[owners], owners)
        expanded: np.ndarray = found[inverse]
        return expanded

    def _answer_into(self, offsets: np.ndarray, out: np.ndarray) -> None:
        # mode="clip": no bounds pass (the offsets are this rank's own, from requests it checked), so numpy
        # gathers straight into *out* instead of into a buffer first.
        np.take(self._values, offsets, axis=0, out=out, mode="clip")

    # -- checks ------------------------------------------------------------------

    def _place(self, index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The owners of checked int64 indices (:meth:`_indices`), and their offsets in the owners' blocks."""
        owners = self.blocks.owner(index)
        return owners, index - self._starts[owners]

    def _indices(self, indices: Any, where: str) -> np.ndarray:
        """*indices* as a 1-D int64 array, each in ``0..length-1``; else an error naming *where* (and the
        first index out of range, with the valid range)."""
        array = np.asarray(indices)
        if array.ndim != 1:
            raise ValueError(f"Array.{where}: indices must be a 1-D array, got shape {array.shape}")
        if array.size == 0:
            return np.zeros(0, dtype=np.int64)
        if array.dtype.kind not in "iu":
            raise TypeError(f"Array.{where}: indices must be integers, got dtype {array.dtype}")
        if int(array.min()) < 0 or int(array.max()) >= self.length:  # two passes in the usual case
            first = array[int(np.argmax((array < 0) | (array >= self.length)))]
            valid = f"0..{self.length - 1}" if self.length else "empty (length 0)"
            raise IndexError(f"Array.{where}: index {first} is out of range {valid}")
        return array.astype(np.int64, copy=False)

    def _values_for(self, values: Any, count: int, where: str) -> np.ndarray:
        """*values* as ``(count, *element_shape)`` of the element's base dtype: converted without loss, or
        one element repeated; a precise error otherwise."""
        base, shape = self._base, self._shape
        array = np.asarray(values)
        if array.dtype != base:
            if isinstance(values, np.ndarray) and not np.can_cast(array.dtype, base, casting="safe"):
                raise TypeError(
                    f"Array.{where}: values of dtype {array.dtype} for elements of dtype {self._dtype} "
                    f"(numpy cannot convert them without loss)"
                )
            try:
                array = np.asarray(values, dtype=base)
            except (TypeError, ValueError) as error:
                raise TypeError(f"Array.{where}: values cannot be converted to {base}: {error}") from None
        if array.shape == shape:
            return np.broadcast_to(array, (count, *shape))
        if array.shape != (count, *shape):
            raise ValueError(
                f"Array.{where}: values of shape {array.shape} for {count} indices: expected {(count, *shape)} "
                f"(one element of shape {shape} per index), or one element of shape {shape} for all"
            )
        return array

    def _ufunc_for(self, op: str | np.ufunc) -> np.ufunc:
        ufunc = ufunc_of(op, "Array.reduce")
        if code_of(ufunc) is None:
            raise ValueError(
                f"Array.reduce: op {ufunc.__name__} is not one of numpy's own binary ufuncs: an update names "
                f"its op to the owner by its place among them"
            )
        try:
            result = ufunc.resolve_dtypes((self._base, self._base, None))[2]
        except (TypeError, np.exceptions.DTypePromotionError) as error:
            raise TypeError(
                f"Array.reduce: op {ufunc.__name__} does not apply to {self._base} elements: {error}"
            ) from None
        if result != self._base:  # comparisons give bool, np.divide on integers float64: not an update
            raise TypeError(
                f"Array.reduce: op {ufunc.__name__} on {self._base} elements gives {result}, not {self._base}"
            )
        return ufunc


def _strictly_increasing(index: np.ndarray) -> bool:
    """Whether *index* is sorted without repeats (every index distinct): one O(n) pass."""
    return len(index) < 2 or bool((index[1:] > index[:-1]).all())


def _distinct(index: np.ndarray, length: int) -> tuple[np.ndarray, np.ndarray]:
    """The distinct values of *index* (ascending) and each one's position among them.

    Indices are bounded: when the array is at most 4 times longer than the batch, a bitmap over
    ``0..length-1`` (O(n + length), no sort, at most 20 bytes per index) replaces ``np.unique``'s sort.
    """
    if length <= 4 * len(index):
        seen = np.zeros(length, dtype=bool)
        seen[index] = True
        distinct = np.flatnonzero(seen)
        position = np.zeros(length, dtype=np.int32 if length < 1 << 31 else np.int64)
        position[distinct] = np.arange(len(distinct), dtype=position.dtype)
        return distinct, position[index]
    distinct, inverse = np.unique(index, return_inverse=True)
    return distinct, inverse.reshape(-1)
