"""``mailrail bench atomics``: the node credit pool's atomics under contention.

Every rank of the node hammers the same shared counters with take/return
pairs, once with CPU atomics (the compiled helper) and once with MPI
``Fetch_and_op`` on the shared window.  Reports microseconds per operation and
checks exactness: after equal takes and returns every counter must hold its
initial value again (a lost update shows as a difference).
"""

from __future__ import annotations

import argparse
import time

from ..flags import int_in, one_line_errors
from ..output import format_table, write_json

#: Shared counters: int64s in one MPI shared window (a million is 8 MiB, far more than contention needs).
COUNTERS_MAX = 1 << 20


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.add_argument(
        "--ops", type=int_in(1, 1 << 40), default=20000, help="take+return pairs per rank and mode (default 20000)"
    )
    parser.add_argument(
        "--counters",
        type=int_in(1, COUNTERS_MAX),
        default=4,
        help=f"shared counters the ranks contend on, 1..{COUNTERS_MAX} (default 4)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")


def run(args: argparse.Namespace) -> int:
    from mailrail._mpi import MPI
    from mailrail.flow.node_memory import (  # MPI windows: imported to run, not to parse
        SharedWindowCounters,
        resolve_atomics,
    )

    comm = MPI.COMM_WORLD
    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    modes = ["mpi"] + (["cpu"] if resolve_atomics("auto") == "cpu" else [])
    initial = 1 << 20
    results = []
    for mode in modes:
        pool = SharedWindowCounters(node, args.counters, initial, mode)
        node.Barrier()
        start = time.perf_counter()
        for i in range(args.ops):
            index = i % args.counters
            if pool.try_take(index):
                pool.add(index, 1)
        elapsed = time.perf_counter() - start
        node.Barrier()
        exact = all(pool.load(i) == initial for i in range(args.counters))
        slowest = node.allreduce(elapsed, op=MPI.MAX)
        exact = node.allreduce(exact, op=MPI.LAND)
        results.append(
            {"atomics": mode, "us_per_op": slowest / (2 * args.ops) * 1e6, "exact": exact, "ranks": node.Get_size()}
        )
        pool.free()
    if comm.Get_rank() == 0:
        print(
            format_table(
                ["atomics", "ranks", "us/op", "exact"],
                [(r["atomics"], r["ranks"], r["us_per_op"], r["exact"]) for r in results],
            )
        )
        if len(results) == 2:
            print(f"CPU atomics are {results[0]['us_per_op'] / results[1]['us_per_op']:.1f}x faster than MPI atomics")
        write_json(args.json, {"benchmark": "atomics", "results": results, "ops_per_rank": args.ops})
    node.Free()
    return 0 if all(r["exact"] for r in results) else 1
