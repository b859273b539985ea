"""``mailrail bench containers``: a distributed ``CountingSet`` against the Coalescer histogram it replaces.

Each rank draws ``--inserts`` 8-byte keys (not timed): uniform in a table of ``2**log2_table``, and
Zipf-distributed (exponent ``--zipf``, hot keys small) in the same range.  One rail, three timed
measurements interleaved trial by trial so the machine's drift hits them alike:

- ``coalescer histogram``: today's ``bench histogram`` path on the uniform keys: owners by block
  division, a :class:`~mailrail.coalesce.Coalescer` of uint64 keys, owners counting with ``bincount``;
- ``CountingSet uniform``: ``CountingSet.add`` on the same keys (hash owners, duplicates combined on
  the sender, a hash table at the owner);
- ``CountingSet zipf``: ``CountingSet.add`` on the Zipf keys, where combining on the sender pays.

Each measurement is timed until every key is counted: through ``CountingSet.total()`` (a barrier, then
each owner counts what it buffered) and through the histogram's own count and sum.  Every trial is
checked: the global total of counts equals the inserts, and so does the histogram's.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

from ..flags import SEED_MAX, add_rail_arguments, checked_rail_options, int_in, one_line_errors, usage_error
from ..mpi_facts import mpi_library
from ..output import format_table, write_json
from .histogram import CHUNK, RAIL_DEFAULTS, Table, make_keys

#: Zipf exponent of the skewed keys (the issue's: a power law like word and vertex frequencies).
ZIPF_EXPONENT = 1.1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.add_argument("--inserts", type=int_in(1, 1 << 32), default=1 << 21, help="keys per rank (default 2 Mi)")
    parser.add_argument(
        "--log2-table", type=int_in(1, 40), default=20, help="keys drawn below 2**N (default %(default)s)"
    )
    parser.add_argument("--zipf", type=float, default=ZIPF_EXPONENT, help="Zipf exponent > 1 (default %(default)s)")
    parser.add_argument(
        "--trials", type=int_in(1, 1000), default=3, help="timed trials after one warm-up (default %(default)s)"
    )
    parser.add_argument("--seed", type=int_in(0, SEED_MAX), default=1)
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    add_rail_arguments(parser)


def zipf_keys(rng: np.random.Generator, count: int, exponent: float, log2_table: int) -> np.ndarray:
    """Zipf-distributed keys below ``2**log2_table``: key k - 1 drawn with probability ~ k**-exponent."""
    return ((rng.zipf(exponent, count).astype(np.uint64) - np.uint64(1)) % np.uint64(1 << log2_table)).astype(np.uint64)


def run(args: argparse.Namespace) -> int:
    if not args.zipf > 1:
        return usage_error("bench containers", f"--zipf must be above 1, got {args.zipf}")
    checked = checked_rail_options("bench containers", args, RAIL_DEFAULTS)
    if checked is None:
        return 2
    options, config = checked
    from mailrail._mpi import MPI
    from mailrail.coalesce import Coalescer
    from mailrail.containers import CountingSet
    from mailrail.rail import MailRail  # MailRail starts MPI: imported when the run begins, not to parse flags

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    uniform = make_keys(np.random.default_rng([args.seed, rank]), args.inserts, args.log2_table, rmat=False)
    skewed = zipf_keys(np.random.default_rng([args.seed, rank, 1]), args.inserts, args.zipf, args.log2_table)
    global_inserts = args.inserts * size
    table = Table(args.log2_table, size, rank)
    owners = table.owners(uniform)
    runs: dict[str, list[float]] = {"coalescer histogram": [], "CountingSet uniform": [], "CountingSet zipf": []}
    distinct: dict[str, int] = {}
    with MailRail(comm, **options) as rail:
        coalescer = Coalescer(rail, np.uint64, table.add)

        def histogram() -> float:
            table.clear()
            comm.Barrier()
            start = time.perf_counter()
            for offset in range(0, len(uniform), CHUNK):
                coalescer.send(owners[offset : offset + CHUNK], uniform[offset : offset + CHUNK])
            rail.barrier()
            table.settle()
            total = comm.allreduce(int(table.counts.sum()))  # counted, as total() does below
            elapsed = time.perf_counter() - start
            if total != global_inserts:
                raise AssertionError(f"the histogram counted {total} keys, {global_inserts} were inserted")
            return elapsed

        def counting_set(keys: np.ndarray, name: str) -> Callable[[], float]:
            counts = CountingSet(rail, np.uint64)  # one per measurement, cleared per trial as the histogram's table

            def insert() -> float:
                counts.clear()
                comm.Barrier()
                start = time.perf_counter()
                for offset in range(0, len(keys), CHUNK):
                    counts.add(keys[offset : offset + CHUNK])
                total = counts.total()  # collective: the barrier, then every owner counts what it holds
                elapsed = time.perf_counter() - start
                if total != global_inserts:
                    raise AssertionError(f"{name}: total() is {total}, {global_inserts} keys were added")
                distinct[name] = counts.size()
                return elapsed

            return insert

        measurements = {
            "coalescer histogram": histogram,
            "CountingSet uniform": counting_set(uniform, "CountingSet uniform"),
            "CountingSet zipf": counting_set(skewed, "CountingSet zipf"),
        }
        for trial in range(args.trials + 1):  # trial 0 warms up and is discarded
            for name, measure in measurements.items():
                runtime = comm.allreduce(measure(), op=MPI.MAX)
                if trial:
                    runs[name].append(global_inserts / runtime)
        stats = rail.stats()
    if rank == 0:
        medians = {name: statistics.median(rates) for name, rates in runs.items()}
        reference = medians["coalescer histogram"]
        document = {
            "benchmark": "containers",
            "mpi": mpi_library(),
            "ranks": size,
            "inserts_per_rank": args.inserts,
            "log2_table": args.log2_table,
            "zipf_exponent": args.zipf,
            "datagram_size": config.datagram_size,
            "flow_control": stats["flow_control"],
            "implementation": stats["implementation"],
            "trials": args.trials,
            "inserts_per_s": runs,
            "median_inserts_per_s": medians,
            "ratio_to_histogram": {name: rate / reference for name, rate in medians.items()},
            "distinct_keys": distinct,
            "config": dict(options, seed=args.seed),
        }
        write_json(args.json, document)
        print(
            f"containers: {size} ranks, {args.inserts:,} keys per rank below 2^{args.log2_table} "
            f"(zipf exponent {args.zipf}), {config.datagram_size} B datagrams, {stats['flow_control']} flow "
            f"control, median of {args.trials} interleaved trials"
        )
        print(
            format_table(
                ["measurement", "M inserts/s", "vs histogram", "distinct keys"],
                [
                    (name, medians[name] / 1e6, medians[name] / reference, distinct.get(name, float("nan")))
                    for name in runs
                ],
            )
        )
    return 0
