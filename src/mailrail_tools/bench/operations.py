"""``mailrail bench containers --keys operations``: every container operation in one call against chunked calls.

A user's program calls an operation once with all its keys; a tuned one calls it in chunks.  For each operation,
each rank draws ``--inserts`` keys (not timed) and the operation runs, on a fresh container each time, in one call
and in calls of 65,536 and of 8,192 keys, trial by trial interleaved, each way first in its turn; each is timed until
the ``rail.barrier()`` that completes it and checked against what it must leave (a total, a size, a sum).  The figure
is one call's median rate over the best chunking's.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..mpi_facts import mpi_library
from ..output import format_table, rail_conditions, rail_fields, write_json

#: The chunkings one call is compared with: keys per call.
CHUNKINGS = (1 << 16, 1 << 13)


def touch(keys: np.ndarray, values: np.ndarray) -> None:
    """``Map.visit``'s function: count the visit."""
    values += 1


class Operation:
    """One container operation: *make* a fresh container, *call* the operation on a slice of the keys, *check* what
    the container holds after the barrier (a text naming what is wrong, or None)."""

    def __init__(
        self,
        make: Callable[[Any], Any],
        call: Callable[[Any, slice], None],
        check: Callable[[Any], str | None],
    ) -> None:
        self.make, self.call, self.check = make, call, check


def operations(comm: Any, inserts: int, seed: int) -> dict[str, Operation]:
    """Each operation on this rank's keys, with the checks that need every rank's keys computed here, not timed.
    *comm*: an mpi4py communicator, or a ``mailrail.testing`` rail's ``comm``."""
    from mailrail.containers import Array, Bag, CountingSet, DisjointSet, Map, Set

    rank, ranks = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng([seed, rank, 3])
    small = rng.integers(0, 1 << 20, inserts, dtype=np.uint64)  # repeated keys: combining pays
    wide = rng.integers(0, 1 << 40, inserts, dtype=np.uint64)  # nearly all distinct: every key new to its owner
    other = rng.integers(0, 1 << 20, inserts, dtype=np.uint64)
    length = max(ranks, 2 * inserts)
    index = rng.integers(0, length, inserts, dtype=np.int64)
    ones = np.ones(inserts)
    everyone = inserts * ranks

    def distinct(keys: np.ndarray) -> int:
        return len(np.unique(np.concatenate(comm.allgather(keys))))

    small_distinct, wide_distinct, index_distinct = distinct(small), distinct(wide), distinct(index)

    def expect(what: str, got: int, want: int) -> str | None:
        return None if got == want else f"{what} is {got}, expected {want}"

    def array_sum(array: Any) -> float:
        return comm.allreduce(float(array.local_view()[1].sum()))  # a sum, mpi4py's default

    return {
        "CountingSet.add": Operation(
            lambda rail: CountingSet(rail, np.uint64),
            lambda c, part: c.add(small[part]),
            lambda c: expect("total()", c.total(), everyone),
        ),
        "Set.insert": Operation(
            lambda rail: Set(rail, np.uint64),
            lambda c, part: c.insert(wide[part]),
            lambda c: expect("size()", c.size(), wide_distinct),
        ),
        "Map.insert": Operation(
            lambda rail: Map(rail, np.uint64, np.float64),
            lambda c, part: c.insert(wide[part], ones[part]),
            lambda c: expect("size()", c.size(), wide_distinct),
        ),
        "Map.assign": Operation(
            lambda rail: Map(rail, np.uint64, np.float64),
            lambda c, part: c.assign(wide[part], ones[part]),
            lambda c: expect("size()", c.size(), wide_distinct),
        ),
        "Map.reduce": Operation(
            lambda rail: Map(rail, np.uint64, np.float64),
            lambda c, part: c.reduce(small[part], ones[part], "add"),
            lambda c: expect("size()", c.size(), small_distinct),
        ),
        "Map.visit": Operation(
            lambda rail: Map(rail, np.uint64, np.float64),
            lambda c, part: c.visit(small[part], touch),
            lambda c: expect("size()", c.size(), small_distinct),
        ),
        "Array.set": Operation(
            lambda rail: Array(rail, length),
            lambda c, part: c.set(index[part], ones[part]),
            lambda c: expect("the sum", int(array_sum(c)), index_distinct),
        ),
        "Array.reduce": Operation(
            lambda rail: Array(rail, length),
            lambda c, part: c.reduce(index[part], ones[part]),
            lambda c: expect("the sum", int(array_sum(c)), everyone),
        ),
        "Bag.insert": Operation(
            lambda rail: Bag(rail, np.uint64),
            lambda c, part: c.insert(wide[part]),
            lambda c: expect("size()", c.size(), everyone),
        ),
        "DisjointSet.union": Operation(
            lambda rail: DisjointSet(rail, np.uint64),
            lambda c, part: c.union(small[part], other[part]),
            lambda c: expect("size()", c.size(), distinct(np.concatenate([small, other]))),
        ),
    }


def run_operations(args: argparse.Namespace, options: dict[str, Any], config: Any) -> int:
    from mailrail._mpi import MPI
    from mailrail.rail import MailRail

    comm = MPI.COMM_WORLD
    rank, ranks = comm.Get_rank(), comm.Get_size()
    chosen = operations(comm, args.inserts, args.seed)
    calls = [args.inserts, *CHUNKINGS]
    rates: dict[str, dict[int, list[float]]] = {name: {per: [] for per in calls} for name in chosen}
    with MailRail(comm, **options) as rail:
        for trial in range(args.trials + 1):  # trial 0 warms up and is discarded
            for name, operation in chosen.items():
                # each way first in turn: the first after another operation meets its memory (fresh pages)
                for per in calls[trial % len(calls) :] + calls[: trial % len(calls)]:
                    container = operation.make(rail)
                    rail.barrier()
                    start = time.perf_counter()
                    for offset in range(0, args.inserts, per):
                        operation.call(container, slice(offset, offset + per))
                    rail.barrier()
                    runtime = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
                    problem = operation.check(container)
                    if problem:
                        raise AssertionError(f"{name} in calls of {per:,} keys: {problem}")
                    if trial:
                        rates[name][per].append(args.inserts * ranks / runtime)
        stats = rail.stats()
    if rank == 0:
        medians = {name: {per: statistics.median(r) for per, r in by.items()} for name, by in rates.items()}
        ratios = {name: by[args.inserts] / max(by[per] for per in CHUNKINGS) for name, by in medians.items()}
        document = {
            "benchmark": "containers",
            "keys": "operations",
            "mpi": mpi_library(),
            "ranks": ranks,
            "inserts_per_rank": args.inserts,
            "keys_per_call": calls,
            **rail_fields(config, stats, args.trials),
            "inserts_per_s": {name: {str(per): r for per, r in by.items()} for name, by in rates.items()},
            "median_inserts_per_s": {name: {str(per): r for per, r in by.items()} for name, by in medians.items()},
            "one_call_to_best_chunking": ratios,
            "config": dict(options, seed=args.seed),
        }
        write_json(args.json, document)
        print(
            f"containers --keys operations: {ranks} ranks, {args.inserts:,} keys per rank in one call or in calls of "
            f"{' or '.join(f'{per:,}' for per in CHUNKINGS)}, {rail_conditions(config, stats, args.trials)}"
        )
        print(
            format_table(
                ["operation", "one call M/s", *(f"calls of {per:,} M/s" for per in CHUNKINGS), "one / best chunked"],
                [
                    (name, by[args.inserts] / 1e6, *(by[per] / 1e6 for per in CHUNKINGS), ratios[name])
                    for name, by in medians.items()
                ],
            )
        )
    return 0
