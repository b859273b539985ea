"""DisjointSet against a single-process union-find: random unions of items of one dtype, seeded.

Every rank draws the same universe of distinct items and the same list of pairs (some of them ``(x, x)``),
takes its share, and unions it in random batches; some batches travel to another rank first and are unioned
inside a channel's handler (unions are asynchronous, so allowed there; the handler also checks that a
collective is refused there).  The reference is a plain union-find in Python over the whole list, whose roots
are each set's smallest item in the documented order, computed here independently of the library (Python
ints, floats by their IEEE total order, bytes, str, record bytes).  Checked on every rank: ``find`` of every
item of the universe (those no union named are their own roots), ``num_sets``, ``size``, ``local`` and
``roots`` after ``compress``; then a second wave of unions merges sets that were compressed, and everything
is checked again; then ``clear``.  Errors (mismatched lengths, wrong dtype, shape) raise before anything is
sent.

:func:`exercise` runs on any rail (``mailrail.testing``'s in-memory ranks too); ``main`` runs it under
mpiexec and prints ``RESULT {json}`` on rank 0.  MailRail options come from MAILRAIL_*.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from mailrail.containers.disjoint_set import DisjointSet
from mailrail.containers.keys import numpy_column
from mailrail.errors import MailRailError

DTYPES = {
    "int64": np.dtype(np.int64),
    "uint8": np.dtype(np.uint8),
    "int16": np.dtype(np.int16),
    "float64": np.dtype(np.float64),
    "float32": np.dtype(np.float32),
    "bytes12": np.dtype("S12"),
    "bytes3": np.dtype("S3"),
    "unicode3": np.dtype("U3"),
    "record": np.dtype([("tag", np.int8), ("value", np.float64)], align=True),  # 7 padding bytes
}
#: skewed: Pareto-distributed ends, a few big sets and many small ones; uniform: ends drawn evenly.
SHAPES = ("skewed", "uniform")


def draw_universe(dtype: np.dtype, count: int, shared: np.random.Generator) -> np.ndarray:
    """*count* distinct items of *dtype* (padding zeroed), the same on every rank."""
    draws = 4 * count
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        raw = shared.integers(info.min, info.max, draws, dtype=dtype, endpoint=True)
    elif dtype.kind == "f":
        raw = (shared.standard_normal(draws) * 10.0 ** shared.integers(-3, 4, draws)).astype(dtype)
        raw[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan]
    elif dtype.kind == "S":
        raw = shared.integers(0, 256, (draws, dtype.itemsize), dtype=np.uint8)
        raw[: draws // 4, dtype.itemsize // 2 :] = 0  # trailing NULs
        raw = raw.reshape(-1).view(dtype)
    elif dtype.kind == "U":
        points = shared.integers(1, 0x3000, (draws, dtype.itemsize // 4)).astype(np.uint32)
        points[: draws // 4, -1] = 0
        raw = points.reshape(-1).view(dtype)
    else:
        raw = np.zeros(draws, dtype=dtype)
        raw["tag"] = shared.integers(-128, 128, draws)
        raw["value"] = shared.integers(-50, 50, draws) / 4
    rows = np.ascontiguousarray(raw).view(np.dtype((np.void, dtype.itemsize)))
    _, first = np.unique(rows, return_index=True)
    chosen = np.sort(first)[:count]
    return raw[shared.permutation(chosen)]


def order_key(dtype: np.dtype, item: Any) -> Any:
    """The documented order of items, computed independently of the library."""
    if dtype.kind in "iu":
        return int(item)
    if dtype.kind == "f":  # IEEE total order: negatives (sign bit set) reversed below the positives
        bits = int.from_bytes(np.asarray(item, dtype=dtype).tobytes(), "little")
        sign = 1 << (8 * dtype.itemsize - 1)
        return (2 * sign - 1) ^ bits if bits & sign else bits | sign
    if dtype.kind == "U":
        return str(item)
    return np.asarray(item, dtype=dtype).tobytes()  # bytes and records: their bytes, unsigned, from the first


class UnionFind:
    """The reference: a plain union-find over item indices; roots are chosen by order_key afterwards."""

    def __init__(self, universe: np.ndarray) -> None:
        self.universe = universe
        self.keys = [order_key(universe.dtype, item) for item in universe]
        self.parent: dict[int, int] = {}

    def root(self, x: int) -> int:
        self.parent.setdefault(x, x)
        while self.parent[x] != x:
            self.parent[x] = self.parent[self.parent[x]]
            x = self.parent[x]
        return x

    def union(self, pairs: np.ndarray) -> None:
        for x, y in pairs.tolist():
            rx, ry = self.root(x), self.root(y)
            if rx != ry:
                self.parent[rx] = ry

    def roots(self) -> tuple[np.ndarray, int]:
        """The smallest item of each item's set (every item of the universe), and the number of sets."""
        groups: dict[int, list[int]] = {}
        for x in self.parent:
            groups.setdefault(self.root(x), []).append(x)
        smallest = np.arange(len(self.universe))
        for members in groups.values():
            smallest[members] = min(members, key=lambda index: self.keys[index])
        return self.universe[smallest], len(groups)


def same_bytes(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and a.tobytes() == b.tobytes()


def draw_pairs(shared: np.random.Generator, named: int, count: int, shape: str) -> np.ndarray:
    """*count* pairs of indices below *named*, 8% of them ``(x, x)``."""
    if shape == "skewed":
        ends = np.minimum((shared.pareto(1.2, (count, 2)) * named / 8).astype(np.int64), named - 1)
    else:
        ends = shared.integers(0, named, (count, 2))
    selfish = shared.random(count) < 0.08
    ends[selfish, 1] = ends[selfish, 0]
    return ends


def exercise(rail: Any, dtype_name: str, items: int, pairs: int, batches: int, seed: int, shape: str) -> dict[str, Any]:
    """Every check of the module on this rank; returns what the ranks' results are summed over."""
    rank, size = rail.rank, rail.size
    dtype = DTYPES[dtype_name]
    shared = np.random.default_rng(seed)
    universe = draw_universe(dtype, items, shared)
    count = len(universe)
    named = max(1, int(count * 0.7))  # items beyond this are never named by a union: their own roots
    first_wave = draw_pairs(shared, named, pairs, shape)
    second_wave = shared.integers(0, named, (max(1, pairs // 10), 2))
    reference = UnionFind(universe)
    reference.union(first_wave)
    rng = np.random.default_rng([seed, rank])
    dset = DisjointSet(rail, dtype)
    state = {"handler_unions": 0, "refused": []}

    def relayed(source: int, records: np.ndarray) -> None:
        """Pairs of indices sent by another rank: unioned here, inside the handler."""
        dset.union(universe[records["a"]], universe[records["b"]])
        state["handler_unions"] += len(records)
        try:
            dset.num_sets()
        except MailRailError as error:
            state["refused"].append(str(error))

    relay = rail.channels.open(np.dtype([("a", np.int64), ("b", np.int64)]), relayed, "relayed unions")

    # -- errors: raised on this rank, before anything is sent ------------------------------------------
    errors = {}
    for name, call in {
        "lengths": lambda: dset.union(universe[:3], universe[:2]),
        "dtype": lambda: dset.union(np.zeros(2, dtype=np.complex128), np.zeros(2, dtype=np.complex128)),
        "shape": lambda: dset.union(universe[:4].reshape(2, 2), universe[:4].reshape(2, 2)),
        "find_dtype": lambda: dset.find(np.zeros(2, dtype=np.complex128)),
        "object_dtype": lambda: DisjointSet(rail, object),
    }.items():
        try:
            call()
        except (TypeError, ValueError) as error:
            errors[name] = f"{type(error).__name__}: {error}"
    sent_after_errors = rail.channels.staged() + rail.channels.datagrams_sent + dset.records_sent

    def check(phase: str) -> dict[str, int]:
        """find of the whole universe (shuffled), num_sets, size, local() invariants, compress and roots()."""
        expected, sets = reference.roots()
        order = rng.permutation(count)
        found = dset.find(universe[order])
        assert same_bytes(found, expected[order]), f"rank {rank} {phase}: find differs from the reference"
        counted, items_counted = dset.num_sets(), dset.size()
        assert counted == sets, (rank, phase, "num_sets", counted, sets)
        assert items_counted == len(reference.parent), (rank, phase, "size", items_counted, len(reference.parent))
        table = dset.local()
        mine, parents = (numpy_column(table[name], dset.dtype) for name in ("item", "parent"))
        assert (dset.owner(mine) == rank).all()
        assert same_bytes(dset.find(mine), dset.find(parents)), f"{phase}: a parent outside its item's set"
        keys = [order_key(dtype, item) for item in mine]
        assert all(order_key(dtype, p) <= k for p, k in zip(parents, keys)), f"{phase}: a parent above its child"
        dset.compress()
        table = dset.roots()
        mine, roots = (numpy_column(table[name], dset.dtype) for name in ("item", "root"))
        position = {item.tobytes(): index for index, item in enumerate(universe)}
        expected_roots = expected[[position[item.tobytes()] for item in mine]] if len(mine) else mine
        assert same_bytes(roots, expected_roots), f"rank {rank} {phase}: roots() differ from the reference"
        parents = numpy_column(dset.local()["parent"], dset.dtype)
        assert same_bytes(parents, roots), f"{phase}: after compress a parent is not the root"
        return {"sets": sets, "items": len(reference.parent)}

    # -- first wave: this rank's share of the pairs, in random batches, some relayed to another rank -----
    mine = first_wave[rank::size]
    cuts = np.sort(rng.integers(0, len(mine) + 1, batches - 1))
    for index, batch in enumerate(np.split(mine, cuts)):
        if index % 3 == 1 and size > 1:
            records = np.empty(len(batch), dtype=relay.dtype)
            records["a"], records["b"] = batch[:, 0], batch[:, 1]
            relay.send(np.full(len(batch), (rank + 1 + index) % size), records)
        else:
            dset.union(universe[batch[:, 0]], universe[batch[:, 1]])
        if index % 2:
            relay.flush()
    dset.union(universe[:0], universe[:0])
    first = check("first wave")

    # -- second wave: merges of sets already compressed -------------------------------------------------
    reference.union(second_wave)
    wave = second_wave[rank::size]
    dset.union(universe[wave[:, 0]], universe[wave[:, 1]])
    second = check("second wave")

    unseen = universe[named:]
    assert same_bytes(dset.find(unseen), unseen), "an item no union named is not its own root"
    assert len(dset.find(universe[:0])) == 0
    dset.clear()
    assert dset.size() == 0 and dset.num_sets() == 0
    assert same_bytes(dset.find(universe[:5]), universe[:5])
    assert sent_after_errors == 0, "an invalid call sent something"
    return {
        "items": count,
        "first": first,
        "second": second,
        "handler_unions": state["handler_unions"],
        "refused": state["refused"],
        "records_sent": dset.records_sent,
        "errors": errors,
    }


def main() -> None:
    from mpi4py import MPI

    from mailrail import MailRail

    parser = argparse.ArgumentParser()
    parser.add_argument("--dtype", choices=DTYPES, default="int64")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--items", type=int, default=1500)
    parser.add_argument("--pairs", type=int, default=1200)
    parser.add_argument("--batches", type=int, default=5)
    parser.add_argument("--shape", choices=SHAPES, default="skewed")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rail = MailRail(comm)
    result = exercise(rail, args.dtype, args.items, args.pairs, args.batches, args.seed, args.shape)
    handler_unions = comm.allreduce(result.pop("handler_unions"))
    refused = comm.gather(result.pop("refused"))
    records_sent = comm.allreduce(result.pop("records_sent"))
    reserve_failures = comm.allreduce(rail.stats()["reserve_failures"])
    rail.finalize(strict=True)
    if comm.Get_rank() == 0:
        result.update(
            dtype=args.dtype,
            handler_unions=handler_unions,
            refused=sum(len(messages) for messages in refused),
            refused_messages=sorted({message for messages in refused for message in messages}),
            records_sent=records_sent,
            reserve_failures=reserve_failures,
        )
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
