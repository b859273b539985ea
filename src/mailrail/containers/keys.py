"""Keys and items as the containers take them: the type check, conversion of a batch, and the helpers over keys'
bytes (their canonical form, their byte order; a batch's distinct keys are :mod:`~mailrail.containers.table`'s).

Every container checks its key (or item, or value) type here once, at construction (:func:`fixed_dtype`, or
:class:`Strings` for ``str`` and ``bytes``), and converts each batch it is given (:func:`as_keys`,
:meth:`Strings.convert`).  The hash and the owners are :mod:`~mailrail.containers.partition`'s (fixed-size keys)
and :mod:`~mailrail.containers.varkeys`' (strings).

**Strings.**  A container of ``str`` or ``bytes`` keys (or items, or values) takes them of any length.  A batch is
a pyarrow ``string`` or ``binary`` array (``large_`` variants too; a chunked array is combined), a numpy array of
strings (``U`` for ``str``, ``S`` for ``bytes``: numpy drops their trailing NUL characters; or ``object`` holding
``str`` or ``bytes``), or a list of ``str`` or ``bytes``; ``str`` and ``bytes`` are not mixed (a ``str`` key is its
UTF-8 bytes on the wire and in the tables, and comes back a ``str``).  Null entries are refused.  Results come
back as pyarrow arrays: a ``StringArray`` for ``str``, a ``BinaryArray`` for ``bytes``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..channels import Blobs
from . import varkeys
from .partition import HashPartitioner, has_padding, key_words

__all__ = [
    "Strings",
    "arrow_column",
    "numpy_column",
    "StringTable",
    "UINT_OF_SIZE",
    "is_string_type",
    "as_keys",
    "byte_order",
    "canonical",
    "fixed_dtype",
    "keys_of_words",
    "ranked",
    "string_ranked",
]

#: The unsigned integer type of each size below 8 bytes.
UINT_OF_SIZE: dict[int, type[np.unsignedinteger[Any]]] = {1: np.uint8, 2: np.uint16, 4: np.uint32}


def fixed_dtype(given: npt.DTypeLike, where: str, what: str = "keys") -> np.dtype[Any]:
    """*given* as a numpy dtype of fixed-size data, else ``TypeError`` naming *where* and *what*."""
    dtype = np.dtype(given)
    if dtype.hasobject or dtype.itemsize == 0:
        raise TypeError(f"{where}: {what} must have a fixed-size dtype (numbers, bytes, records); got {dtype}")
    return dtype


def as_keys(keys: Any, dtype: np.dtype[Any], where: str) -> npt.NDArray[Any]:
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


def keys_of_words(words: npt.NDArray[np.uint64], dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """The keys of *dtype* whose canonical words (:func:`~mailrail.containers.partition.key_words`) are *words*."""
    count = words.shape[0]
    itemsize = dtype.itemsize
    uint = UINT_OF_SIZE.get(itemsize)
    if uint is not None and words.shape[1] == 1:  # zero-extended numbers of 1, 2 or 4 bytes
        return words[:, 0].astype(uint).view(dtype)
    raw = np.ascontiguousarray(words).view(np.uint8).reshape(count, 8 * words.shape[1])
    if raw.shape[1] != itemsize:
        raw = np.ascontiguousarray(raw[:, :itemsize])
    return raw.view(dtype).reshape(count)


def canonical(keys: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """*keys* with the padding bytes of a structured dtype zeroed (numpy's copies of such records leave their
    padding undefined); other keys as they are."""
    if not has_padding(keys.dtype):
        return keys
    return keys_of_words(key_words(keys), keys.dtype)


def byte_order(keys: npt.NDArray[Any]) -> npt.NDArray[np.intp]:
    """The stable permutation that sorts 1-D *keys* by their bytes, compared as unsigned bytes from the first
    (``memcmp``; structured padding zeroed): the deterministic order of ties, the same on every rank."""
    count = len(keys)
    if count == 0:
        return np.zeros(0, dtype=np.intp)
    raw = np.ascontiguousarray(key_words(keys)).view(np.uint8).reshape(count, -1)[:, : keys.dtype.itemsize]
    rows = np.ascontiguousarray(raw).view(np.dtype((np.void, keys.dtype.itemsize))).reshape(count)
    return np.argsort(rows, kind="stable")


def ranked(keys: npt.NDArray[Any], counts: npt.NDArray[np.int64]) -> npt.NDArray[np.intp]:
    """The permutation putting *counts* in descending order, ties in ascending order of the keys' bytes."""
    by_bytes = byte_order(keys)
    return by_bytes[np.argsort(-counts[by_bytes], kind="stable")]


def is_string_type(given: object) -> bool:
    """Whether *given* names keys (or values) of any length: ``str`` or ``bytes``."""
    return given is str or given is bytes


def _arrow() -> Any:
    import pyarrow as pa  # imported when strings are first used: numeric containers never load it

    return pa


class Strings:
    """Keys (or items, or values) of one string type, ``str`` or ``bytes``, of any length (see the module)."""

    def __init__(self, kind: type) -> None:
        if not is_string_type(kind):
            raise TypeError(f"string keys are str or bytes, not {kind!r}")
        pa = _arrow()
        self.kind = kind
        #: The pyarrow type results come back as.
        self.arrow_type = pa.string() if kind is str else pa.binary()
        self._accepted = (pa.string(), pa.large_string()) if kind is str else (pa.binary(), pa.large_binary())
        self._other = "bytes" if kind is str else "str"
        self._plain_arrays = (
            (pa.StringArray, pa.LargeStringArray) if kind is str else (pa.BinaryArray, pa.LargeBinaryArray)
        )

    def __repr__(self) -> str:
        return self.kind.__name__

    def convert(self, values: Any, where: str, what: str = "keys") -> Blobs:
        """*values* as packed strings (no copy from a pyarrow array of the right type), else ``TypeError`` naming
        what was given, ``ValueError`` for nulls or an array that is not 1-D."""
        if type(values) in self._plain_arrays:  # the common case, checked first: an Arrow array of the right type
            if values.null_count:
                raise ValueError(f"{where}: {values.null_count} of the {what} are null")
            return Blobs.of(values)
        pa = _arrow()
        array = values
        if isinstance(values, pa.ChunkedArray):
            array = values.combine_chunks()
        if not isinstance(array, pa.Array):
            if isinstance(values, np.ndarray):
                if values.ndim != 1:
                    raise ValueError(f"{where}: {what} must be a 1-D array, got shape {values.shape}")
                if values.dtype.kind not in "USO":
                    raise TypeError(f"{where}: {what} of dtype {values.dtype} for a container of {self.kind.__name__}")
            elif isinstance(values, (str, bytes)):
                raise TypeError(
                    f"{where}: {what} must be a batch (a list or an array), not one {type(values).__name__}"
                )
            try:
                array = (
                    numpy_strings(values)
                    if isinstance(values, np.ndarray) and values.dtype.kind in "SU"
                    else pa.array(values)
                )
            except (pa.ArrowException, TypeError, ValueError) as error:
                raise TypeError(f"{where}: {what} are not all {self.kind.__name__}: {error}") from error
            if array.type == pa.null() and len(array) == array.null_count:
                array = pa.array([None] * len(array), type=self.arrow_type)
            if array.type == pa.binary() and self.kind is bytes and not isinstance(values, np.ndarray):
                if any(isinstance(value, str) for value in values):  # pyarrow reads str and bytes mixed as binary
                    raise TypeError(f"{where}: {what} mix str and bytes: a container of bytes takes bytes only")
        if array.type not in self._accepted:
            raise TypeError(f"{where}: {what} of type {array.type} for a container of {self.kind.__name__}")
        if array.null_count:
            raise ValueError(f"{where}: {array.null_count} of the {what} are null")
        return Blobs.of(array)

    def arrow(self, blobs: Blobs) -> Any:
        """*blobs* as a pyarrow array of this type (``StringArray`` or ``BinaryArray``), over the same memory where
        the offsets are ``int32`` (or a large array's ``int64`` past 2 GiB)."""
        pa = _arrow()
        large = len(blobs.offsets) and int(blobs.offsets[-1]) >= 1 << 31
        kind = (pa.large_string() if self.kind is str else pa.large_binary()) if large else self.arrow_type
        return blobs.arrow(kind)

    @staticmethod
    def longest(blobs: Blobs) -> int:
        """The length of the longest string (0 for none), in one pass over the offsets."""
        return int(varkeys.longest(blobs.offsets)) if blobs.count else 0

    @staticmethod
    def owners(blobs: Blobs, partitioner: HashPartitioner) -> npt.NDArray[np.int64]:
        """The rank owning each string: the high part of its hash times the ranks (see
        :mod:`~mailrail.containers.varkeys`)."""
        return partitioner.owner_of_hashes(varkeys.hash_bytes(blobs.offsets, blobs.data))


class StringTable:
    """A set of strings with dense indices: :class:`~mailrail.containers.table.KeyTable`'s interface over packed
    strings (:class:`~mailrail.channels.Blobs`), on :class:`~mailrail.containers.varkeys.BytesTable`."""

    def __init__(self, capacity: int = 1024) -> None:
        self._table = varkeys.BytesTable(capacity)

    def insert(self, keys: Blobs) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.bool_]]:
        """Each string's dense index, adding the absent ones in the order of their first occurrence, and whether
        each position added its string."""
        dense, new = self._table.insert(keys.offsets, keys.data)
        return dense, new

    def count(self, keys: Blobs, counts: npt.NDArray[np.int64], weights: npt.NDArray[np.int64] | None = None) -> int:
        """Inserts the strings as :meth:`insert` does and adds each one's weight (1 without *weights*) to
        ``counts[its dense index]``, in one compiled pass; returns how many strings it added.  *counts* must have
        room for ``len(self) + keys.count`` strings."""
        added: int = self._table.count(keys.offsets, keys.data, counts, weights)
        return added

    def lookup(self, keys: Blobs) -> npt.NDArray[np.int64]:
        """Each string's dense index, -1 where absent."""
        found: npt.NDArray[np.int64] = self._table.lookup(keys.offsets, keys.data)
        return found

    def erase(self, keys: Blobs) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """``(removed, moved_from, moved_to)``, as :meth:`~mailrail.containers.table.KeyTable.erase` says."""
        removed, moved_from, moved_to = self._table.erase(keys.offsets, keys.data)
        return removed, moved_from, moved_to

    def keys(self, order: npt.NDArray[np.int64] | None = None) -> Blobs:
        """Every string, in dense order, or the strings at the dense indices *order* in its order, packed afresh
        (``int32`` offsets below 2 GiB)."""
        offsets, data = self._table.keys(large=True, order=order)
        if len(data) < 1 << 31:
            offsets = offsets.astype(np.int32)
        return Blobs(offsets, data)

    def hashes(self) -> npt.NDArray[np.uint64]:
        """Each string's hash, in dense order."""
        hashes: npt.NDArray[np.uint64] = self._table.hashes_of_keys()
        return hashes

    def clear(self, keep: bool = False) -> None:
        """Forget every string; with *keep*, keep the memory for as many again."""
        self._table.clear(keep)

    def __len__(self) -> int:
        return len(self._table)


def numpy_strings(values: npt.NDArray[Any]) -> Any:
    """A numpy array of ``S`` (or ``U``) strings as a pyarrow binary (or string) array, each value as numpy reads
    it: its bytes but the trailing NULs, inner NULs kept (``pa.array`` would cut each at its first NUL)."""
    pa = _arrow()
    kind = values.dtype.kind
    if kind == "U":  # to UTF-8 (numpy drops trailing NULs, keeps inner ones)
        values = np.char.encode(values, "utf-8") if values.size else values.astype("S1")
    values = np.ascontiguousarray(values).reshape(-1)
    width = values.dtype.itemsize
    raw = values.view(np.uint8).reshape(len(values), width)
    lengths = (
        np.where(raw != 0, np.arange(1, width + 1), 0).max(axis=1)
        if width and len(values)
        else np.zeros(len(values), dtype=np.int64)
    )
    offsets = np.zeros(len(values) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    data = raw[np.arange(width)[None, :] < lengths[:, None]] if width else np.zeros(0, np.uint8)
    large = int(offsets[-1]) >= 1 << 31
    arrow_type = (
        (pa.large_string() if large else pa.string()) if kind == "U" else (pa.large_binary() if large else pa.binary())
    )
    offsets = offsets if large else offsets.astype(np.int32)
    return pa.Array.from_buffers(
        arrow_type, len(values), [None, pa.py_buffer(offsets), pa.py_buffer(np.ascontiguousarray(data))]
    )


def arrow_column(values: npt.NDArray[Any]) -> Any:
    """A numpy array as a pyarrow array, for a column of a container's table: numbers, booleans and times
    without a copy where pyarrow can; ``S`` as binary and ``U`` as strings (numpy's values: trailing NULs
    dropped); structured records as a struct array of their fields; a subarray dtype (``(float32, 4)``) as
    fixed-size lists; other bytes (``V``) as fixed-size binary."""
    pa = _arrow()
    dtype = values.dtype
    if dtype.names is not None:
        fields = [arrow_column(np.ascontiguousarray(values[name])) for name in dtype.names]
        return pa.StructArray.from_arrays(fields, names=list(dtype.names))
    if values.ndim > 1:  # a subarray dtype's values: (n, *shape)
        width = int(np.prod(values.shape[1:]))
        flat = arrow_column(np.ascontiguousarray(values).reshape(-1))
        return pa.FixedSizeListArray.from_arrays(flat, width)
    if dtype.kind in "SU":
        return numpy_strings(values)
    if dtype.kind == "V":
        raw = np.ascontiguousarray(values)
        return pa.Array.from_buffers(pa.binary(dtype.itemsize), len(raw), [None, pa.py_buffer(raw)])
    if not dtype.isnative:
        values = values.astype(dtype.newbyteorder("="))
    try:
        return pa.array(values)
    except (pa.ArrowNotImplementedError, pa.ArrowInvalid, TypeError):  # complex, long double...: their bytes
        raw = np.ascontiguousarray(values)
        return pa.Array.from_buffers(pa.binary(dtype.itemsize), len(raw), [None, pa.py_buffer(raw)])


def string_ranked(keys: Any, counts: npt.NDArray[np.int64]) -> npt.NDArray[np.intp]:
    """:func:`ranked` for strings (a pyarrow array): counts descending, ties by the strings' bytes ascending."""
    pa = _arrow()
    import pyarrow.compute as pc

    binary = keys.cast(pa.large_binary() if keys.type in (pa.large_string(), pa.large_binary()) else pa.binary())
    table = pa.table({"count": counts, "key": binary})
    order = pc.sort_indices(table, sort_keys=[("count", "descending"), ("key", "ascending")])
    return np.asarray(order, dtype=np.intp)


def numpy_column(column: Any, dtype: np.dtype[Any]) -> npt.NDArray[Any]:
    """A pyarrow column (an array or a chunked one) back as a numpy array of *dtype*: :func:`arrow_column`'s
    inverse (struct arrays to records, fixed-size lists to subarrays, binary to ``S``, strings to ``U``)."""
    pa = _arrow()
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if dtype.names is not None:
        out = np.zeros(len(column), dtype=dtype)
        fields = dtype.fields
        assert fields is not None
        for name in dtype.names:
            out[name] = numpy_column(column.field(name), fields[name][0])
        return out
    if dtype.subdtype is not None:
        base, shape = dtype.subdtype
        flat = numpy_column(column.flatten(), base)
        return flat.reshape((len(column), *shape))
    if pa.types.is_fixed_size_binary(column.type) and dtype.kind not in "SU":  # the bytes of the values
        raw = b"".join(column.to_pylist())
        return np.frombuffer(raw, dtype=dtype.newbyteorder("=") if dtype.kind != "V" else dtype).astype(dtype)
    if dtype.kind in "SUV":
        values = column.to_pylist()
        if dtype.kind == "V":
            return np.frombuffer(b"".join(values), dtype=dtype).copy()
        return np.array(values, dtype=dtype)
    return np.asarray(column.to_numpy(zero_copy_only=False)).astype(dtype, copy=False)
