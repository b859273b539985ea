"""A distributed disjoint set (union-find) of items of one fixed dtype, or of strings of any length: YGM's
``disjoint_set``, in batches.

**Where items live.**  Each item is owned by one rank (:class:`~mailrail.containers.partition.HashPartitioner`,
the same owner as every other container's for the same key), which keeps it in a
:class:`~mailrail.containers.table.KeyTable` beside its *parent*.  Parents form a forest whose trees are the
sets; a tree's root is the set's representative.

**The root is the set's smallest item.**  Every parent is smaller than its child (a root is its own parent),
so the root of a set is its minimum: the result depends only on which unions were made, never on their order,
the number of ranks or the timing, and equals a single-process union-find's partition with the same choice
of representative.  Items are ordered by value for native-byte-order integers, booleans, floats (``-0.0``
before ``0.0``, NaNs at the ends, by their sign bit: the IEEE total order), ``datetime64`` and
``timedelta64``; fixed-width unicode strings by code points; everything else (bytes such as ``S16``,
structured records, complex numbers) by its bytes compared as unsigned bytes from the first.  Internally each
item travels as its *ordinal* (:class:`ItemOrder`): an ``uint64`` for items of up to 8 bytes, else a byte
string, whose plain comparison is that order.

**Strings of any length** (``DisjointSet(rail, str)`` or ``bytes``: :class:`StringDisjointSet`) follow the same
rule in the bytes order: strings compare as unsigned bytes from the first, a string before every longer one it
begins (``memcmp``, then the length); a ``str`` item by its UTF-8 bytes, which is Python's order of ``str`` (code
points), as for the fixed-width ``U`` items.  The owner keeps its items in a
:class:`~mailrail.containers.keys.StringTable` and their parents in a
:class:`~mailrail.containers.varvalues.StringColumn`; a walk carries its two items as the two variable-size parts
of one record, so an item may have at most half of what a record's strings may have together.

**union (asynchronous): a batch becomes a forest, then walks.**  :meth:`DisjointSet.union` first solves its
batch alone (vectorized connected components on the sender: hooking and pointer jumping), so one record per
distinct item leaves, ``(smallest item of its component in the batch, item)``, instead of one per pair: a
skewed batch such as a graph's edges shrinks to its spanning forest.  Each record then walks the owners'
parent pointers in the manner of Rem's algorithm with splicing (YGM's ``async_union`` walks the same way,
linking by rank): a walk ``(x, y)`` at ``x``'s owner, ``p = parent[x]``,

- ``p == y``: the sets are already one: done;
- ``p < y``: continue from ``y``'s side: ``(y, p)`` to ``y``'s owner;
- ``p > y``: ``parent[x] = y`` (``y`` is smaller, so the forest stays ordered); if ``x`` was a root the union
  is done, else ``x``'s old parent continues: ``(p, y)`` to ``p``'s owner (*splicing*: ``x``'s subtree
  moved over on the way, which shortens later walks).

Owners apply a whole datagram of walks at once; walks of one batch that link the same root take the smallest
of their ``y`` and the others continue from it, so nothing is lost.  Every step lowers a parent or the pair,
so walks end; the next ``rail.barrier()`` (or any collective of the container) completes every union.

**The collectives.**  :meth:`~DisjointSet.find` walks each item's parents to its root (a request forwarded
owner to owner, the root's owner replies to the asker); :meth:`~DisjointSet.compress` is YGM's
``all_compress``: pointer jumping in rounds (each item's parent replaced by its grandparent) until every
item's parent is its root; :meth:`~DisjointSet.num_sets` counts the roots.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

from ..channels import Blobs, Rail
from ..collectives import collective
from .base import Container, Lookup, table_of
from .keys import Strings, StringTable, fixed_dtype, is_string_type, numpy_column
from .partition import key_words
from .table import KeyTable
from .varvalues import StringColumn, StringLookup, concat_blobs, equal, extremes, less, unique_strings

__all__ = ["DisjointSet", "ItemOrder", "StringDisjointSet", "batch_components"]

_SIGN = np.uint64(1 << 63)
#: Parent arrays start with room for this many items and double.
_INITIAL_ITEMS = 1024
#: A union batch of integers spanning at most this many times its length is numbered without a sort.
_DENSE_SPAN_FACTOR = 2


class ItemOrder:
    """Items of one *dtype* to *ordinals* and back: a bijection whose plain comparison is the items' order.

    An item of up to 8 bytes becomes an ``uint64``; a longer one a byte string (``S`` of its size), which
    numpy compares as unsigned bytes.  Two items have the same ordinal exactly when they have the same bytes
    (structured padding ignored), as everywhere in the containers.  See the module for the order itself.
    """

    def __init__(self, dtype: npt.DTypeLike) -> None:
        self.dtype: np.dtype[Any] = fixed_dtype(dtype, "ItemOrder", "items")
        size = self.dtype.itemsize
        kind = self.dtype.kind
        plain = self.dtype.names is None and self.dtype.subdtype is None and self.dtype.isnative
        if plain and kind in "bu" and size <= 8:
            self.method = "unsigned"
        elif plain and kind in "imM" and size <= 8:
            self.method = "signed"
        elif plain and kind == "f" and size in (2, 4, 8):
            self.method = "float"
        else:
            self.method = "bytes"
        #: Unicode strings are compared by code points: each 4-byte unit read big-endian.
        self._swap_units = plain and kind == "U"
        self.ordinal_dtype: np.dtype[Any] = np.dtype(np.uint64) if size <= 8 else np.dtype(f"S{size}")
        if self.method == "float":
            self._float_sign = np.uint64(1 << (8 * size - 1))
            self._float_mask = np.uint64((1 << (8 * size)) - 1)

    def ordinals(self, items: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """The ordinal of each item of the 1-D array *items* (of this order's dtype)."""
        size = self.dtype.itemsize
        if self.method == "unsigned":
            return items.astype(np.uint64)
        if self.method == "signed":
            return items.view(f"i{size}").astype(np.int64).view(np.uint64) ^ _SIGN
        if self.method == "float":
            bits = items.view(f"u{size}").astype(np.uint64)
            negative = (bits & self._float_sign) != 0
            return np.where(negative, ~bits & self._float_mask, bits | self._float_sign)
        count = len(items)
        words = np.ascontiguousarray(key_words(items))
        raw = words.view(np.uint8).reshape(count, 8 * words.shape[1])[:, :size]
        if self._swap_units:
            raw = raw.reshape(count, size // 4, 4)[:, :, ::-1].reshape(count, size)
        if size <= 8:
            padded = np.zeros((count, 8), dtype=np.uint8)
            padded[:, :size] = raw
            return padded.view(">u8").reshape(count).astype(np.uint64)
        return np.ascontiguousarray(raw).view(self.ordinal_dtype).reshape(count)

    def items(self, ordinals: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """The items whose ordinals are the 1-D array *ordinals* (the inverse of :meth:`ordinals`)."""
        size = self.dtype.itemsize
        if self.method == "unsigned":
            return ordinals.astype(self.dtype)
        if self.method == "signed":
            return (ordinals ^ _SIGN).view(np.int64).astype(f"i{size}").view(self.dtype)
        if self.method == "float":
            positive = (ordinals & self._float_sign) != 0
            bits = np.where(positive, ordinals ^ self._float_sign, ~ordinals & self._float_mask)
            return bits.astype(f"u{size}").view(self.dtype)
        count = len(ordinals)
        if size <= 8:
            raw = ordinals.astype(">u8").view(np.uint8).reshape(count, 8)[:, :size]
        else:
            raw = np.ascontiguousarray(ordinals).view(np.uint8).reshape(count, size)
        if self._swap_units:
            raw = raw.reshape(count, size // 4, 4)[:, :, ::-1].reshape(count, size)
        return np.ascontiguousarray(raw).view(self.dtype).reshape(count)


def _dense_numbering(
    ordinals: npt.NDArray[Any],
) -> tuple[npt.NDArray[Any], npt.NDArray[np.intp], npt.NDArray[np.bool_] | None]:
    """Numbers ``0..k-1`` for the values of a non-empty 1-D array of ordinals, in their order: ``(values,
    number of each ordinal, which values occur)``, where ``values[number]`` is the ordinal.

    Integers within a span not much wider than the batch (vertex ids, say) are numbered by their offset from
    the smallest, without a sort: then ``values`` holds every integer of the span, and the mask says which
    occur.  Others are sorted, and their distinct values numbered by a binary search (faster than
    ``np.unique``'s inverse, an argsort); the mask is None: they all occur.
    """
    if ordinals.dtype == np.uint64:
        low = ordinals.min()
        span = int(ordinals.max() - low) + 1
        if span <= _DENSE_SPAN_FACTOR * len(ordinals):
            numbers = (ordinals - low).astype(np.intp)
            occur = np.zeros(span, dtype=bool)
            occur[numbers] = True
            return low + np.arange(span, dtype=np.uint64), numbers, occur
    ordered = np.sort(ordinals)
    first = np.empty(len(ordered), dtype=bool)
    first[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=first[1:])
    values = ordered[first]
    return values, np.searchsorted(values, ordinals), None


def batch_components(first: npt.NDArray[np.intp], second: npt.NDArray[np.intp], count: int) -> npt.NDArray[np.intp]:
    """The connected components of the graph on nodes ``0..count-1`` with edges ``(first[i], second[i])``:
    for each node, the smallest node of its component.

    Vectorized hooking and pointer jumping: every round, each edge between two trees hooks the larger root
    under the smaller one (the smallest offer wins), then pointers jump until every node points at its root.
    A tree with an edge to another tree merges in every round, so a component's trees at least halve:
    ``O(log count)`` rounds of ``O(edges + count)`` numpy work.
    """
    label = np.arange(count, dtype=np.intp)
    keep = first != second
    first, second = first[keep], second[keep]
    while len(first):
        low, high = label[first], label[second]
        differ = low != high
        first, second, low, high = first[differ], second[differ], low[differ], high[differ]
        if not len(first):
            break
        low, high = np.minimum(low, high), np.maximum(low, high)
        np.minimum.at(label, high, low)  # roots only: every label is a root after the jumps below
        while True:
            jumped = label[label]
            if np.array_equal(jumped, label):
                break
            label = jumped
    return label


class DisjointSet(Container):
    """A distributed disjoint set of items of one fixed *dtype* (YGM's ``disjoint_set``; see the module).

    Construction is collective (every rank makes the same containers in the same order on the rail).  An item
    joins the container when a union names it; the root of every set is its smallest item.
    """

    kind = "DisjointSet"
    key_noun = "item"

    def __new__(cls, rail: Rail, dtype: Any) -> DisjointSet:
        # DisjointSet(rail, str) and DisjointSet(rail, bytes) are disjoint sets of strings of any length.
        if cls is DisjointSet and is_string_type(dtype):
            return super().__new__(StringDisjointSet)
        return super().__new__(cls)

    @collective
    def __init__(self, rail: Rail, dtype: npt.DTypeLike) -> None:
        super().__init__(rail)
        self.dtype: np.dtype[Any] = fixed_dtype(dtype, "DisjointSet", "items")
        self._key_dtype = self.dtype
        self.order = ItemOrder(self.dtype)
        ordinal = self.order.ordinal_dtype
        self._table = KeyTable(ordinal)
        self._parent: npt.NDArray[Any] = np.zeros(_INITIAL_ITEMS, dtype=ordinal)
        self._changed = False  # a parent was lowered since the last compress (items may point below a root)
        self._pair_dtype = np.dtype([("item", ordinal), ("other", ordinal)])
        self._request_dtype = np.dtype([("position", np.int64), ("origin", np.int64), ("item", ordinal)])
        self._reply_dtype = np.dtype([("position", np.int64), ("root", ordinal)])
        self._starts = self._channel(self._pair_dtype, self._on_start, "union starts")
        self._walks = self._channel(self._pair_dtype, self._on_walk, "union walks")
        self._find_requests = self._channel(self._request_dtype, self._on_find_request, "find requests")
        self._find_replies = self._channel(self._reply_dtype, self._on_find_reply, "find replies")
        self._grandparents = Lookup(
            self,
            ordinal,
            np.dtype([("grandparent", ordinal), ("parent_is_root", np.bool_)]),
            self._grandparents_of,
            "compress",
        )
        self._found: npt.NDArray[Any] | None = None

    def _owner_of(self, ordinals: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """The rank owning each item, given as ordinals (the owner of the item itself, as :meth:`owner`)."""
        return self.partitioner.owner(self.order.items(ordinals))

    @property
    def records_sent(self) -> int:
        """Records this rank's DisjointSet sent (union starts and walks, find and compress requests and replies)."""
        channels = (self._starts, self._walks, self._find_requests, self._find_replies)
        return sum(c.records_sent for c in channels) + self._grandparents.records_sent

    # -- asynchronous --------------------------------------------------------

    def union(self, a: npt.ArrayLike, b: npt.ArrayLike) -> None:
        """Merge the set of ``a[i]`` with the set of ``b[i]`` for every ``i`` (asynchronous; YGM's ``async_union``).

        *a* and *b*: 1-D batches of the container's dtype, of equal length.  ``union(x, x)`` adds ``x`` as a
        set of its own (if it is new).  The batch is solved here first, then one record per distinct item goes
        out (see the module).  The next ``rail.barrier()`` or collective of any container completes it.
        Allowed inside handlers.  Raises before anything is sent: ``TypeError`` for items of a dtype numpy
        does not cast safely to the container's, ``ValueError`` unless both are 1-D and of the same length.
        """
        first = self._keys(a, "union")
        second = self._keys(b, "union")
        if len(first) != len(second):
            raise ValueError(
                f"{self.kind}.union(): {len(first)} items in a and {len(second)} in b: "
                f"union(a, b) pairs a[i] with b[i], so both must be as long"
            )
        if not len(first):
            return
        count = len(first)
        ends = np.concatenate([self.order.ordinals(first), self.order.ordinals(second)])
        distinct, index, occur = _dense_numbering(ends)
        # Numbers follow the items' order, so the smallest number of a component is its smallest item.
        smallest = batch_components(index[:count], index[count:], len(distinct))
        numbers = np.arange(len(distinct))
        sizes = np.bincount(smallest, minlength=len(distinct))  # per root: its component's size
        # Non-roots are linked to their component's smallest item; a root alone is a set of its own.  A root
        # with members needs no record: the walks of its members visit it.
        send = (smallest != numbers) | (sizes == 1)
        if occur is not None:
            send &= occur  # numbers no item of the batch has are alone too: they stay out
        starts = np.empty(int(np.count_nonzero(send)), dtype=self._pair_dtype)
        starts["item"] = distinct[smallest[send]]
        starts["other"] = distinct[send]
        self._starts.send(self._owner_of(starts["item"]), starts)

    def _insert(self, ordinals: npt.NDArray[Any]) -> npt.NDArray[np.int64]:
        """Each item's dense index, adding the new ones as roots (their own parents)."""
        dense, new = self._table.insert(ordinals)
        if new.any():
            size = len(self._table)
            if size > len(self._parent):
                grown = np.zeros(max(size, 2 * len(self._parent)), dtype=self._parent.dtype)
                grown[: len(self._parent)] = self._parent
                self._parent = grown
            self._parent[dense[new]] = ordinals[new]
        return dense

    def _send_walks(self, items: npt.NDArray[Any], others: npt.NDArray[Any]) -> None:
        if len(items):
            walks = np.empty(len(items), dtype=self._pair_dtype)
            walks["item"] = items
            walks["other"] = others
            self._walks.send(self._owner_of(walks["item"]), walks)

    def _on_start(self, source: int, records: npt.NDArray[Any]) -> None:
        # (m, x): m is the smallest item of x's component in the sender's batch.  Add m here, then walk on from
        # x's side with m's parent: x's owner adds x, and a new x is linked under it at once.
        items, others = np.array(records["item"]), np.array(records["other"])
        dense = self._insert(items)  # first: it may grow the parent array
        parents = self._parent[dense]
        going = items != others  # (x, x): x alone, added: done
        self._send_walks(others[going], parents[going])

    def _on_walk(self, source: int, records: npt.NDArray[Any]) -> None:
        items, others = np.array(records["item"]), np.array(records["other"])
        dense = self._insert(items)
        parents = self._parent[dense]
        up = parents < others  # the other side is higher: continue from it
        down = np.flatnonzero(parents > others)
        next_items = [others[up]]
        next_others = [parents[up]]
        if len(down):
            at, lower, old = dense[down], others[down], parents[down]
            self._lower_parents(at, lower)
            self._changed = True
            was_root = old == items[down]
            # Splicing: the old parent's set still has to join the other one.
            next_items.append(old[~was_root])
            next_others.append(lower[~was_root])
            # A root linked by several walks of this batch took the smallest other; the rest join that one.
            linked = self._parent[at]
            lost = was_root & (lower != linked)
            next_items.append(lower[lost])
            next_others.append(linked[lost])
        self._send_walks(np.concatenate(next_items), np.concatenate(next_others))

    def _lower_parents(self, at: npt.NDArray[np.int64], lower: npt.NDArray[Any]) -> None:
        """``parent[at[i]] = lower[i]``, the smallest of them where an index repeats (each is below the parent)."""
        if self._parent.dtype == np.uint64:
            np.minimum.at(self._parent, at, lower)
            return
        order = np.lexsort((lower, at))
        at_sorted = at[order]
        first = np.ones(len(order), dtype=bool)
        first[1:] = at_sorted[1:] != at_sorted[:-1]
        self._parent[at_sorted[first]] = lower[order[first]]

    # -- collective ----------------------------------------------------------

    @collective
    def find(self, items: npt.ArrayLike) -> npt.NDArray[Any]:
        """Collective: the root (the smallest item of its set) of each item of the 1-D batch *items*, in the
        caller's order, as an array of the container's dtype (YGM's ``all_find``).

        Sees every union issued before it by any rank.  An item no union named is a set of its own: its own
        root (it is not added).  Each request walks the parents from the item's owner to its root, whose owner
        replies.  Raises ``TypeError``/``ValueError`` as :meth:`union` does, before anything is sent.
        """
        keys = self._keys(items, "find")
        self._collective("find")
        ordinals = self.order.ordinals(keys)
        roots = np.zeros(len(keys), dtype=self.order.ordinal_dtype)
        requests = np.empty(len(keys), dtype=self._request_dtype)
        requests["position"] = np.arange(len(keys))
        requests["origin"] = self.rank
        requests["item"] = ordinals
        self._found = roots
        try:
            self._find_requests.send(self._owner_of(ordinals), requests)
            self.rail.barrier()  # every request walked to its root, every reply arrived
        finally:
            self._found = None
        return self.order.items(roots)

    def _on_find_request(self, source: int, requests: npt.NDArray[Any]) -> None:
        items = np.array(requests["item"])
        dense = self._table.lookup(items)
        known = dense >= 0
        parents = items.copy()
        parents[known] = self._parent[dense[known]]
        at_root = parents == items
        if at_root.any():
            replies = np.empty(int(np.count_nonzero(at_root)), dtype=self._reply_dtype)
            replies["position"] = requests["position"][at_root]
            replies["root"] = items[at_root]
            self._find_replies.send(requests["origin"][at_root], replies)
        if not at_root.all():
            onward = np.array(requests[~at_root])
            onward["item"] = parents[~at_root]
            self._find_requests.send(self._owner_of(onward["item"]), onward)

    def _on_find_reply(self, source: int, replies: npt.NDArray[Any]) -> None:
        assert self._found is not None, "a find reply arrived outside find()"
        self._found[replies["position"]] = replies["root"]

    @collective
    def compress(self) -> None:
        """Collective: afterwards every item's parent is its root (YGM's ``all_compress``).

        Rounds of pointer jumping: each rank asks the owners of its items' parents for their parents (each
        distinct parent once per round) and takes them, until every parent asked about is a root; the rounds
        are logarithmic in the trees' depth.  Nothing to do, and one allreduce, when no parent changed since
        the last compress.
        """
        self._collective("compress")
        if not self.channels.allreduce_sum(int(self._changed)):
            return
        size = len(self._table)
        active = np.flatnonzero(self._parent[:size] != self._table.keys)
        while self.channels.allreduce_sum(len(active)):
            asked, inverse = np.unique(self._parent[active], return_inverse=True)
            answers = self._grandparents.ask(asked, self._owner_of(asked))
            inverse = inverse.reshape(-1)
            self._parent[active] = answers["grandparent"][inverse]
            active = active[~answers["parent_is_root"][inverse]]
        self._changed = False

    def _grandparents_of(self, parents: npt.NDArray[Any]) -> npt.NDArray[Any]:
        """For the compress lookup: each parent's own parent, and whether the parent is a root."""
        dense = self._table.lookup(parents)
        answers = np.empty(len(parents), dtype=self._grandparents.value_dtype)
        grandparents = np.array(parents)
        known = dense >= 0  # always, as parents are items: unknown ones would be roots of their own
        grandparents[known] = self._parent[dense[known]]
        answers["grandparent"] = grandparents
        answers["parent_is_root"] = grandparents == parents
        return answers

    @collective
    def num_sets(self) -> int:
        """Collective: how many sets the items named by unions form (YGM's ``num_sets``)."""
        self._collective("num_sets")
        size = len(self._table)
        return self.channels.allreduce_sum(int(np.count_nonzero(self._parent[:size] == self._table.keys)))

    @collective
    def size(self) -> int:
        """Collective: how many distinct items unions named, on all ranks (YGM's ``size``)."""
        self._collective("size")
        return self.channels.allreduce_sum(len(self._table))

    @collective
    def local(self) -> Any:
        """Collective: this rank's items and their parents as they are, a ``pyarrow.Table`` of columns ``item``
        and ``parent`` (no YGM peer).

        A parent is an item of the same set, smaller than its child; a root is its own parent.  After
        :meth:`compress` every parent is the root: :meth:`roots` is that.
        """
        self._collective("local")
        items, parents = self._local()
        return table_of({"item": items, "parent": parents})

    def _local(self) -> tuple[npt.NDArray[Any], npt.NDArray[Any]]:
        # After the barrier, wait for every rank to have left it too: a rank that left early could otherwise
        # send new unions that this one would apply, still inside the barrier, before reading its state.
        self.channels.allreduce_sum(0)
        size = len(self._table)
        return self.order.items(np.array(self._table.keys)), self.order.items(self._parent[:size].copy())

    @collective
    def roots(self) -> Any:
        """Collective: :meth:`compress`, then this rank's items and the root of each, a ``pyarrow.Table`` of
        columns ``item`` and ``root`` (what YGM's ``for_all`` visits)."""
        self.channels.check_collective(f"{self.kind}.roots()")
        self.compress()
        items, roots = self._local()
        return table_of({"item": items, "root": roots})

    @collective
    def gather(self, rank: int = 0) -> Any:
        """Collective: every item and its root (:meth:`roots`), on rank *rank*: one ``pyarrow.Table`` in rank
        order; None on the other ranks."""
        import pyarrow as pa

        tables = self.channels.gather(self.roots(), rank)
        return None if tables is None else pa.concat_tables(tables)

    def _absorb(self, table: Any, where: str) -> None:
        items = numpy_column(table.column(0), self.dtype)
        self.union(items, items)

    @collective
    def clear(self) -> None:
        """Collective: forget every item (YGM's ``clear``); pending unions are applied first, then dropped."""
        self._collective("clear")
        self._table.clear()
        self._parent = np.zeros(_INITIAL_ITEMS, dtype=self._parent.dtype)
        self._changed = False
        # A rank that left the barrier first may union again, and a slower rank still in it would apply those
        # unions before clearing: no rank unions again before every rank has cleared.
        self.channels.allreduce_sum(0)

    def __repr__(self) -> str:
        return f"<DisjointSet of {self.dtype}, {len(self._table)} items on rank {self.rank}>"


_NOTHING = np.dtype([])


class StringDisjointSet(DisjointSet):
    """``DisjointSet(rail, str)`` or ``DisjointSet(rail, bytes)``: a disjoint set of strings of any length, with
    :class:`DisjointSet`'s operations and answers (see :mod:`mailrail.containers.keys` for what a batch may be).

    The root of a set is its smallest string by bytes (see the module: for ``str``, Python's order), as for fixed
    items.  Items are given as batches of strings; :meth:`find` returns a pyarrow array (``StringArray`` for
    ``str``, ``BinaryArray`` for ``bytes``), and :meth:`local`, :meth:`roots` and :meth:`gather` tables of such
    columns.  A walk of a union carries two items in one record, so an item longer than half of what a record's
    strings may have together (:attr:`longest_item`) raises :class:`~mailrail.errors.MessageSizeError` naming both
    sizes, before anything is sent.
    """

    @collective
    def __init__(self, rail: Rail, kind: type) -> None:  # (DisjointSet.__init__'s setup is for fixed-size items)
        Container.__init__(self, rail)
        self._strings = Strings(kind)
        #: ``str`` or ``bytes``.
        self.dtype = kind  # type: ignore[assignment]
        self._items = StringTable()
        self._parents = StringColumn()
        self._changed = False
        position = ("position", np.int64)
        self._starts = self._channel(_NOTHING, self._on_string_start, "union starts", blobs=2)
        self._walks = self._channel(_NOTHING, self._on_string_walk, "union walks", blobs=2)
        self._find_requests = self._channel(
            np.dtype([position, ("origin", np.int64)]), self._on_string_find_request, "find requests", blobs=True
        )
        self._find_replies = self._channel(np.dtype([position]), self._on_string_find_reply, "find replies", blobs=True)
        self._string_grandparents = StringLookup(
            self, self._strings, np.dtype(np.bool_), self._string_grandparents_of, "compress"
        )
        self._roots_found: list[tuple[npt.NDArray[np.int64], Blobs]] | None = None
        #: The longest item, in bytes: half of what a record of a walk's two items may have.
        self.longest_item = min(self._longest_string, min(self._starts.largest_blob, self._walks.largest_blob) // 2)
        self._longest_string = self.longest_item

    @property
    def records_sent(self) -> int:
        """Records this rank's DisjointSet sent (union starts and walks, find and compress requests and replies)."""
        channels = (self._starts, self._walks, self._find_requests, self._find_replies)
        return sum(c.records_sent for c in channels) + self._string_grandparents.records_sent

    def _send_string_walks(self, items: Blobs, others: Blobs) -> None:
        if items.count:
            self._walks.send(Strings.owners(items, self.partitioner), None, (items, others))

    # -- asynchronous --------------------------------------------------------

    def union(self, a: Any, b: Any) -> None:
        """Merge the set of ``a[i]`` with the set of ``b[i]`` for every ``i`` (asynchronous; see
        :meth:`DisjointSet.union`): *a* and *b* are batches of strings of equal length."""
        first = self._string_keys(a, "union")
        second = self._string_keys(b, "union")
        if first.count != second.count:
            raise ValueError(
                f"{self.kind}.union(): {first.count} items in a and {second.count} in b: "
                f"union(a, b) pairs a[i] with b[i], so both must be as long"
            )
        count = first.count
        if not count:
            return
        import pyarrow as pa
        import pyarrow.compute as pc

        # The batch's distinct items numbered in their order (one sort by bytes), as DisjointSet.union does.
        ends = pa.concat_arrays([first.arrow(pa.large_binary()), second.arrow(pa.large_binary())])
        order = np.asarray(pc.sort_indices(ends), dtype=np.intp)
        ordered = ends.take(order)
        starts_run = np.ones(len(order), dtype=np.bool_)
        starts_run[1:] = np.asarray(pc.not_equal(ordered[1:], ordered[:-1]).to_numpy(zero_copy_only=False))
        index = np.empty(len(order), dtype=np.intp)
        index[order] = np.cumsum(starts_run) - 1
        distinct = Blobs.of(ordered.filter(pa.array(starts_run)))
        smallest = batch_components(index[:count], index[count:], distinct.count)
        numbers = np.arange(distinct.count)
        sizes = np.bincount(smallest, minlength=distinct.count)
        send = np.flatnonzero((smallest != numbers) | (sizes == 1))  # (see DisjointSet.union)
        items = distinct.take(smallest[send])
        self._starts.send(Strings.owners(items, self.partitioner), None, (items, distinct.take(send)))

    def _insert_strings(self, items: Blobs) -> npt.NDArray[np.int64]:
        """Each item's dense index, adding the new ones as roots (their own parents)."""
        dense, new = self._items.insert(items)
        self._parents.fit(len(self._items))
        if new.any():
            self._parents.set(dense[new], items.take(np.flatnonzero(new)))
        return dense

    def _on_string_start(self, source: int, records: npt.NDArray[Any], items: Blobs, others: Blobs) -> None:
        # (m, x): as DisjointSet._on_start.
        dense = self._insert_strings(items)
        going = np.flatnonzero(~equal(items, others))
        self._send_string_walks(others.take(going), self._parents.get(dense[going]))

    def _on_string_walk(self, source: int, records: npt.NDArray[Any], items: Blobs, others: Blobs) -> None:
        # As DisjointSet._on_walk, in the bytes order of strings.
        dense = self._insert_strings(items)
        parents = self._parents.get(dense)
        up = np.flatnonzero(less(parents, others))
        down = np.flatnonzero(less(others, parents))
        next_items, next_others = [others.take(up)], [parents.take(up)]
        if len(down):
            at, lower, old = dense[down], others.take(down), parents.take(down)
            targets, pick = extremes(at, lower, largest=False)  # a root linked twice takes the smallest other
            self._parents.set(targets, lower.take(pick))
            self._changed = True
            was_root = equal(old, items.take(down))
            moved = np.flatnonzero(~was_root)
            next_items.append(old.take(moved))
            next_others.append(lower.take(moved))
            linked = self._parents.get(at)
            lost = np.flatnonzero(was_root & ~equal(lower, linked))
            next_items.append(lower.take(lost))
            next_others.append(linked.take(lost))
        self._send_string_walks(concat_blobs(next_items), concat_blobs(next_others))

    # -- collective ----------------------------------------------------------

    @collective
    def find(self, items: Any) -> Any:
        """Collective: the root of each item of the batch *items*, in the caller's order, a pyarrow array (see
        :meth:`DisjointSet.find`)."""
        keys = self._string_keys(items, "find")
        self._collective("find")
        requests = np.empty(keys.count, dtype=self._find_requests.dtype)
        requests["position"] = np.arange(keys.count)
        requests["origin"] = self.rank
        found: list[tuple[npt.NDArray[np.int64], Blobs]] = []
        self._roots_found = found
        try:
            self._find_requests.send(Strings.owners(keys, self.partitioner), requests, keys)
            self.rail.barrier()  # every request walked to its root, every reply arrived
        finally:
            self._roots_found = None
        positions = np.concatenate([piece[0] for piece in found]) if found else np.zeros(0, dtype=np.int64)
        where = np.empty(keys.count, dtype=np.intp)
        where[positions] = np.arange(keys.count)
        roots = concat_blobs([piece[1] for piece in found]).take(where)
        return self._strings.arrow(roots)  # type: ignore[union-attr]

    def _on_string_find_request(self, source: int, requests: npt.NDArray[Any], items: Blobs) -> None:
        dense = self._items.lookup(items)
        parents = self._parents.get(dense)  # (an item no union named: the empty string, and a root)
        at_root = (dense < 0) | equal(parents, items)
        if at_root.any():
            here = np.flatnonzero(at_root)
            replies = np.empty(len(here), dtype=self._find_replies.dtype)
            replies["position"] = requests["position"][here]
            self._find_replies.send(requests["origin"][here], replies, items.take(here))
        if not at_root.all():
            onward = np.flatnonzero(~at_root)
            forwarded = parents.take(onward)
            self._find_requests.send(Strings.owners(forwarded, self.partitioner), requests[onward], forwarded)

    def _on_string_find_reply(self, source: int, replies: npt.NDArray[Any], roots: Blobs) -> None:
        assert self._roots_found is not None, "a find reply arrived outside find()"
        self._roots_found.append((replies["position"].copy(), roots.copy()))

    @collective
    def compress(self) -> None:
        """Collective: afterwards every item's parent is its root (see :meth:`DisjointSet.compress`)."""
        self._collective("compress")
        if not self.channels.allreduce_sum(int(self._changed)):
            return
        size = len(self._items)
        active = np.flatnonzero(~equal(self._parents.get(np.arange(size)), self._items.keys()))
        while self.channels.allreduce_sum(len(active)):
            asked, inverse = unique_strings(self._parents.get(active))
            parent_is_root, grandparents = self._string_grandparents.ask(asked, Strings.owners(asked, self.partitioner))
            self._parents.set(active, grandparents.take(inverse))
            active = active[~parent_is_root[inverse]]
        self._changed = False

    def _string_grandparents_of(self, parents: Blobs) -> tuple[npt.NDArray[np.bool_], Blobs]:
        """For the compress lookup: whether each parent is a root, and its own parent."""
        dense = self._items.lookup(parents)
        grandparents = self._parents.get(dense)
        if (dense < 0).any():  # never (parents are items); one that were not would be a root of its own
            count = parents.count
            either = np.where(dense < 0, count + np.arange(count), np.arange(count))
            grandparents = concat_blobs([grandparents, parents]).take(either)
        return equal(grandparents, parents), grandparents

    @collective
    def num_sets(self) -> int:
        """Collective: how many sets the items named by unions form."""
        self._collective("num_sets")
        size = len(self._items)
        roots = equal(self._parents.get(np.arange(size)), self._items.keys())
        return self.channels.allreduce_sum(int(np.count_nonzero(roots)))

    @collective
    def size(self) -> int:
        """Collective: how many distinct items unions named, on all ranks."""
        self._collective("size")
        return self.channels.allreduce_sum(len(self._items))

    def _local(self) -> tuple[Any, Any]:
        self.channels.allreduce_sum(0)  # (see DisjointSet._local)
        strings: Strings = self._strings  # type: ignore[assignment]
        items, parents = self._items.keys(), self._parents.get(np.arange(len(self._items)))
        return strings.arrow(items), strings.arrow(parents)

    def _absorb(self, table: Any, where: str) -> None:
        items = table.column(0)
        self.union(items, items)

    @collective
    def clear(self) -> None:
        """Collective: forget every item; pending unions are applied first, then dropped."""
        self._collective("clear")
        self._items.clear()
        self._parents.clear()
        self._changed = False
        self.channels.allreduce_sum(0)  # (see DisjointSet.clear)

    def __repr__(self) -> str:
        return f"<DisjointSet of {self._strings}, {len(self._items)} items on rank {self.rank}>"
