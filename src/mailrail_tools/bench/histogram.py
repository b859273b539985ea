"""``mailrail bench histogram``: a distributed histogram over MailRail (the paper's second benchmark).

A table of ``2**log2_table`` uint64 counters is block-distributed over the
ranks.  Each rank generates ``--inserts`` keys (uniform, or skewed R-MAT with
``--rmat``; not timed).  One trial: barrier, start the clock, coalesce the
8-byte keys per owner into datagrams, owners increment their bins on receipt,
termination detection, stop the clock.  Every trial is checked: the global sum
of bins equals the global number of inserts, and (tables up to 2**24) the
distributed table equals a direct count of the same keys.  ``--modes`` runs
several flow-control modes on the same keys and reports each one's overhead
against unconstrained; ``--baseline alltoallv`` runs a bulk-synchronous
mpi4py histogram on the same keys as a peer.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from mailrail.config import FLOW_CONTROL_MODES
from mailrail.flow.modes import UNCONSTRAINED

from ..alltoallv import alltoallv_exchange
from ..flags import (
    SEED_MAX,
    add_rail_arguments,
    checked_rail_options,
    choice_list,
    int_in,
    one_line_errors,
    usage_error,
)
from ..memory import memory_problem
from ..output import format_table, write_json

RMAT_PROBABILITIES = (0.57, 0.19, 0.19, 0.05)  # Graph500 a, b, c, d
CHUNK = 8192  # keys partitioned per step: cache-sized, and receives interleave with sends
EXACT_CHECK_MAX_LOG2 = 24
#: Keys are uint64 below 2**log2_table counted as int64; 2**40 counters (8 TiB) is past any machine's memory.
LOG2_TABLE_MAX = 40
#: Bytes of memory per insert on its rank: the key, its owner, and the copy the exact check counts.
BYTES_PER_INSERT = 24


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.add_argument(
        "--log2-table",
        type=int_in(1, LOG2_TABLE_MAX),
        default=20,
        help=f"table of 2**N counters, N in 1..{LOG2_TABLE_MAX} (default %(default)s)",
    )
    parser.add_argument("--inserts", type=int_in(1, 1 << 40), default=1 << 22, help="keys per rank (default 4 Mi)")
    parser.add_argument("--rmat", action="store_true", help="skewed R-MAT keys instead of uniform")
    parser.add_argument(
        "--trials", type=int_in(1, 100_000), default=5, help="timed trials after one warm-up (default 5)"
    )
    parser.add_argument("--seed", type=int_in(0, SEED_MAX), default=1)
    parser.add_argument(
        "--modes",
        type=choice_list(FLOW_CONTROL_MODES),
        default=None,
        help="comma-separated flow-control modes to run on the same keys, e.g. none,rank,node",
    )
    parser.add_argument(
        "--baseline",
        choices=("alltoallv",),
        default=None,
        help="also run a bulk-synchronous mpi4py histogram on the same keys",
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    add_rail_arguments(parser)


def make_keys(rng: np.random.Generator, count: int, log2_table: int, rmat: bool) -> np.ndarray:
    """Uniform keys, or R-MAT keys: each bit is 1 with probability c + d (the source vertex of
    a Graph500 R-MAT edge), so low keys are hot: the skew the paper's R-MAT runs have."""
    if not rmat:
        return rng.integers(0, 1 << log2_table, count, dtype=np.uint64)
    a, b, c, d = RMAT_PROBABILITIES
    keys = np.zeros(count, dtype=np.uint64)
    for bit in range(log2_table):
        keys |= (rng.random(count) < c + d).astype(np.uint64) << np.uint64(bit)
    return keys


class Table:
    """This rank's block of the distributed table.

    Arriving keys are appended to a buffer and counted in bulk (one ``bincount``
    per ``PENDING_KEYS``): a copy per datagram is cheaper than ``np.add.at``.
    """

    PENDING_KEYS = 1 << 20

    def __init__(self, log2_table: int, ranks: int, rank: int) -> None:
        self.size = 1 << log2_table
        self.block = -(-self.size // ranks)
        self.base = rank * self.block
        self.counts = np.zeros(max(0, min(self.block, self.size - self.base)), dtype=np.int64)
        self._pending = np.empty(self.PENDING_KEYS, dtype=np.int64)
        self._filled = 0

    def owners(self, keys: np.ndarray) -> np.ndarray:
        return keys // np.uint64(self.block)

    def add(self, source: int, keys: np.ndarray) -> None:
        """Count *keys* (each must belong to this block)."""
        keys = keys.view(np.int64)  # keys < 2**63: the same bits
        if self._filled + len(keys) > len(self._pending):
            self.settle()
            if len(keys) > len(self._pending):
                self._count(keys)
                return
        self._pending[self._filled : self._filled + len(keys)] = keys
        self._filled += len(keys)

    def settle(self) -> None:
        """Count every buffered key into ``counts``."""
        self._count(self._pending[: self._filled])
        self._filled = 0

    def _count(self, keys: np.ndarray) -> None:
        if len(keys):
            self.counts += np.bincount(keys - self.base, minlength=len(self.counts))

    def clear(self) -> None:
        self.counts[:] = 0
        self._filled = 0


def run(args: argparse.Namespace) -> int:
    checked = checked_rail_options("bench histogram", args)
    if checked is None:
        return 2
    options, config = checked
    from mailrail._mpi import MPI
    from mailrail.coalesce import Coalescer
    from mailrail.rail import MailRail  # MailRail starts MPI: imported when the run begins, not to parse flags

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    # Before any key is drawn: a table or key set that cannot fit is a usage error on every rank alike.
    table_bytes = 8 * -(-(1 << args.log2_table) // size)
    if args.log2_table <= EXACT_CHECK_MAX_LOG2:
        table_bytes += 8 * (1 << args.log2_table)  # the exact check counts the whole table on every rank
    problem = memory_problem(
        comm,
        table_bytes + BYTES_PER_INSERT * args.inserts,
        f"--log2-table {args.log2_table} and --inserts {args.inserts}",
    )
    if problem:
        return usage_error("bench histogram", problem, comm)
    modes = args.modes or [config.flow_control]
    keys = make_keys(np.random.default_rng([args.seed, rank]), args.inserts, args.log2_table, args.rmat)
    table = Table(args.log2_table, size, rank)
    owners = table.owners(keys)
    expected = _direct_count(comm, keys, table) if args.log2_table <= EXACT_CHECK_MAX_LOG2 else None
    global_inserts = args.inserts * size

    # One rail per mode, all alive at once, and trials interleaved across modes: the
    # machine's drift then hits every mode alike, so the overheads compare like with like.
    rails = {mode: MailRail(comm, **dict(options, flow_control=mode)) for mode in modes}
    coalescers = {mode: Coalescer(rail, np.uint64, table.add) for mode, rail in rails.items()}
    trials: dict[str, list] = {mode: [] for mode in modes}
    for trial in range(args.trials + 1):  # trial 0 warms up and is discarded
        for mode, coalescer in coalescers.items():

            def insert(coalescer=coalescer) -> None:
                for offset in range(0, len(keys), CHUNK):
                    coalescer.send(owners[offset : offset + CHUNK], keys[offset : offset + CHUNK])
                coalescer.barrier()

            result = _timed_trial(comm, table, expected, global_inserts, insert)
            if trial:
                trials[mode].append(result)
    results: dict[str, dict] = {}
    for mode, rail in rails.items():
        stats = comm.gather(rail.stats(), root=0)
        rail.finalize()
        results[mode] = {
            "flow_control": mode,
            "trials": trials[mode],
            "median_inserts_per_s": statistics.median(t["inserts_per_s"] for t in trials[mode]),
            "credit_messages": sum(s["credit_messages_sent"] for s in stats) if rank == 0 else None,
        }
    baseline = (
        _alltoallv_baseline(comm, keys, owners, table, expected, global_inserts, args.trials) if args.baseline else None
    )

    if rank == 0:
        reference = results.get(UNCONSTRAINED, results[modes[0]])["median_inserts_per_s"]
        for result in results.values():
            result["overhead_pct"] = (reference / result["median_inserts_per_s"] - 1) * 100
        first = results[modes[0]]
        document = {
            "benchmark": "histogram",
            "flow_control": modes[0],
            "ranks": size,
            "log2_table": args.log2_table,
            "inserts_per_rank": args.inserts,
            "distribution": "rmat" if args.rmat else "uniform",
            "datagram_size": config.datagram_size,
            "trials": first["trials"],
            "modes": results,
            "baseline": baseline,
            "config": dict(options, modes=modes, seed=args.seed),
        }
        write_json(args.json, document)
        _print_summary(document)
    all_correct = all(t["correct"] for r in results.values() for t in r["trials"])
    if baseline:
        all_correct = all_correct and all(t["correct"] for t in baseline["trials"])
    return 0 if all_correct else 1


def _direct_count(comm, keys: np.ndarray, table: Table) -> np.ndarray:
    """This rank's block of a direct count of every rank's keys (reduce-scatter of full counts)."""
    from mailrail._mpi import MPI

    padded = table.block * comm.Get_size()
    full = np.bincount(keys.astype(np.intp), minlength=padded).astype(np.int64)
    mine = np.empty(table.block, dtype=np.int64)
    comm.Reduce_scatter_block(full, mine, op=MPI.SUM)
    return mine[: len(table.counts)]


def _timed_trial(comm, table: Table, expected: np.ndarray | None, global_inserts: int, insert) -> dict:
    """One trial: clear the table, barrier, time *insert* (every key counted once settled), check it."""
    from mailrail._mpi import MPI

    table.clear()
    comm.Barrier()
    start = time.perf_counter()
    insert()
    table.settle()
    runtime = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
    return {
        "runtime_s": runtime,
        "inserts_per_s": global_inserts / runtime,
        "correct": _check(comm, table, expected, global_inserts),
    }


def _check(comm, table: Table, expected: np.ndarray | None, global_inserts: int) -> bool:
    from mailrail._mpi import MPI

    total = comm.allreduce(int(table.counts.sum()), op=MPI.SUM)
    exact = expected is None or bool(np.array_equal(table.counts, expected))
    return total == global_inserts and comm.allreduce(exact, op=MPI.LAND)


def _alltoallv_baseline(comm, keys, owners, table: Table, expected, global_inserts: int, trials: int) -> dict:
    """Bulk-synchronous peer: partition by owner, Alltoallv the keys, bincount locally."""

    def exchange() -> None:
        table.add(-1, alltoallv_exchange(comm, owners, keys)[0])

    results = []
    for trial in range(trials + 1):
        result = _timed_trial(comm, table, expected, global_inserts, exchange)
        if trial:
            results.append(result)
    return {
        "method": "alltoallv",
        "trials": results,
        "median_inserts_per_s": statistics.median(t["inserts_per_s"] for t in results),
    }


def _print_summary(document: dict) -> None:
    rows = []
    for mode, result in document["modes"].items():
        rows.append(
            (
                mode,
                result["median_inserts_per_s"] / 1e6,
                result["overhead_pct"],
                all(t["correct"] for t in result["trials"]),
                result["credit_messages"],
            )
        )
    baseline = document["baseline"]
    if baseline:
        rows.append(
            (
                "alltoallv",
                baseline["median_inserts_per_s"] / 1e6,
                float("nan"),
                all(t["correct"] for t in baseline["trials"]),
                0,
            )
        )
    print(
        f"histogram: {document['ranks']} ranks, table 2^{document['log2_table']}, "
        f"{document['inserts_per_rank']:,} {document['distribution']} inserts per rank, "
        f"{document['datagram_size']} B datagrams, median of {len(document['trials'])} trials"
    )
    print(format_table(["mode", "M inserts/s", "overhead % vs none", "correct", "credit msgs"], rows))
    if baseline:
        best = max(r["median_inserts_per_s"] for r in document["modes"].values())
        print(f"MailRail / alltoallv: {best / baseline['median_inserts_per_s']:.2f}x")
