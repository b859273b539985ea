"""``mailrail bench containers``: a distributed ``CountingSet`` against the Coalescer histogram it replaces.

Each rank draws ``--inserts`` 8-byte keys (not timed): uniform in a table of ``2**log2_table``, and
Zipf-distributed (exponent ``--zipf``, hot keys small) in the same range.  One rail, three timed
measurements interleaved trial by trial so the machine's drift hits them alike:

- ``coalescer histogram``: today's ``bench histogram`` path on the uniform keys: owners by block
  division, a :class:`~mailrail.coalesce.Coalescer` of uint64 keys, owners counting with ``bincount``;
- ``CountingSet uniform``: ``CountingSet.add`` on the same keys (hash owners, duplicates combined on
  the sender, a hash table at the owner);
- ``CountingSet zipf``: ``CountingSet.add`` on the Zipf keys, where combining on the sender pays.

With ``--one-batch`` each ``CountingSet`` measurement adds a rank's keys in one call, as a user's program
does; else in adds of ``CHUNK`` keys.  Each measurement is timed until every key is counted: through
``CountingSet.total()`` (a barrier, then each owner counts what it buffered) and through the histogram's own
count and sum.  Every trial is checked: the global total of counts equals the inserts, and so does the
histogram's.

``--keys str`` measures strings instead: a vocabulary of ``--vocabulary`` distinct words of 1 to 40
random letters (the same on every rank), each rank drawing ``--inserts`` of them by a Zipf law (exponent
``--zipf``, the first words the most frequent; about 290,000 distinct words at the defaults), and three
measurements interleaved: ``CountingSet(rail, np.uint64).add`` on each word's number in the vocabulary (8-byte
keys below the vocabulary's size, the same counts), ``CountingSet(rail, np.uint64).add`` on each word's 64-bit
hash (8-byte keys spread over all 64 bits, as a user who hashes words to numbers gets them), and
``CountingSet(rail, str).add`` on the words (pyarrow string arrays of ``CHUNK`` words per add); the ratios of
their rates are what a string costs beside a number.  Each measurement's CPU time is recorded too
(``time.process_time`` on each rank, averaged over the ranks), and the ratio of the CPU times: on a machine other
jobs load, wall-clock rates vary from trial to trial with the time slices a rank gets, the work done much less.

``--keys operations`` runs every container operation in one call against chunked calls (:mod:`.operations`).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from ..flags import SEED_MAX, add_rail_arguments, checked_rail_options, int_in, one_line_errors, usage_error
from ..mpi_facts import mpi_library
from ..output import format_table, rail_conditions, rail_fields, write_json
from .histogram import CHUNK, Table, make_keys
from .operations import run_operations

#: Zipf exponent of the skewed keys (the issue's: a power law like word and vertex frequencies).
ZIPF_EXPONENT = 1.1
#: Distinct words of ``--keys str`` (about 290,000 of them drawn at the defaults, 2 ranks).
VOCABULARY = 600_000
#: The longest word of ``--keys str``.
LONGEST_WORD = 40


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
    parser.add_argument(
        "--keys",
        choices=["uint64", "str", "operations"],
        default="uint64",
        help="uint64: CountingSet against the histogram; str: strings against their numbers; operations: every "
        "container operation in one call against chunked calls (default %(default)s)",
    )
    parser.add_argument(
        "--vocabulary",
        type=int_in(1, 1 << 26),
        default=VOCABULARY,
        help="--keys str: distinct words to draw from (default %(default)s)",
    )
    parser.add_argument(
        "--one-batch",
        action="store_true",
        help="each CountingSet measurement adds a rank's keys in one call, as a user writes it (default: adds of "
        f"{CHUNK:,} keys)",
    )
    parser.add_argument("--seed", type=int_in(0, SEED_MAX), default=1)
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    add_rail_arguments(parser)


def zipf_keys(rng: np.random.Generator, count: int, exponent: float, log2_table: int) -> np.ndarray:
    """Zipf-distributed keys below ``2**log2_table``: key k - 1 drawn with probability ~ k**-exponent."""
    return ((rng.zipf(exponent, count).astype(np.uint64) - np.uint64(1)) % np.uint64(1 << log2_table)).astype(np.uint64)


def truncated_zipf(rng: np.random.Generator, count: int, exponent: float, vocabulary: int) -> np.ndarray:
    """*count* word numbers below *vocabulary*, number k - 1 drawn with probability ~ k**-exponent (draws past the
    vocabulary drawn again: Zipf's law over a vocabulary, no uniform tail folded back into it)."""
    numbers = rng.zipf(exponent, count)
    while True:
        outside = np.flatnonzero(numbers > vocabulary)
        if not len(outside):
            return (numbers - 1).astype(np.uint64)
        numbers[outside] = rng.zipf(exponent, len(outside))


def vocabulary(seed: int, count: int) -> Any:
    """*count* distinct words of 1 to LONGEST_WORD random lower-case letters (a pyarrow string array), the same for
    a seed on every rank: drawn, then repeats dropped and the rest kept in their order."""
    import pyarrow as pa
    import pyarrow.compute as pc

    rng = np.random.default_rng([seed, 1 << 20])
    lengths = rng.integers(1, LONGEST_WORD + 1, int(count * 1.05) + 64)
    letters = rng.integers(ord("a"), ord("z") + 1, int(lengths.sum()), dtype=np.uint8)
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    words = pa.Array.from_buffers(pa.large_string(), len(lengths), [None, pa.py_buffer(offsets), pa.py_buffer(letters)])
    return pc.unique(words).slice(0, count).cast(pa.string())


def run(args: argparse.Namespace) -> int:
    if not args.zipf > 1:
        return usage_error("bench containers", f"--zipf must be above 1, got {args.zipf}")
    checked = checked_rail_options("bench containers", args)
    if checked is None:
        return 2
    options, config = checked
    if args.keys == "str":
        return run_strings(args, options, config)
    if args.keys == "operations":
        return run_operations(args, options, config)
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
    per_add = args.inserts if args.one_batch else CHUNK
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
                for offset in range(0, len(keys), per_add):
                    counts.add(keys[offset : offset + per_add])
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
            "keys_per_add": per_add,
            "log2_table": args.log2_table,
            "zipf_exponent": args.zipf,
            **rail_fields(config, stats, args.trials),
            "inserts_per_s": runs,
            "median_inserts_per_s": medians,
            "ratio_to_histogram": {name: rate / reference for name, rate in medians.items()},
            "distinct_keys": distinct,
            "config": dict(options, seed=args.seed),
        }
        write_json(args.json, document)
        print(
            f"containers: {size} ranks, {args.inserts:,} keys per rank below 2^{args.log2_table} "
            f"(zipf exponent {args.zipf}), CountingSet adds of {per_add:,} keys, "
            f"{rail_conditions(config, stats, args.trials)}"
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


def run_strings(args: argparse.Namespace, options: dict[str, Any], config: Any) -> int:
    """``--keys str``: CountingSet(rail, str) on Zipf words against CountingSet(rail, np.uint64) on their numbers."""
    from mailrail._mpi import MPI
    from mailrail.channels import Blobs
    from mailrail.containers import CountingSet, varkeys
    from mailrail.rail import MailRail

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    words = vocabulary(args.seed, args.vocabulary)
    rng = np.random.default_rng([args.seed, rank, 2])
    numbers = truncated_zipf(rng, args.inserts, args.zipf, len(words))
    drawn = words.take(numbers)  # this rank's words, in the order of their numbers
    chunks = [drawn.slice(offset, CHUNK) for offset in range(0, len(drawn), CHUNK)]
    global_inserts = args.inserts * size
    names = ("CountingSet uint64", "CountingSet hashes", "CountingSet str")
    runs: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}  # CPU seconds per rank, each trial
    distinct: dict[str, int] = {}
    with MailRail(comm, **options) as rail:

        def measure(name: str, counts: Any, batches: list[Any]) -> Callable[[], tuple[float, float]]:
            def insert() -> tuple[float, float]:
                counts.clear()
                comm.Barrier()
                start, start_cpu = time.perf_counter(), time.process_time()
                for batch in batches:
                    counts.add(batch)
                total = counts.total()
                elapsed, used = time.perf_counter() - start, time.process_time() - start_cpu
                if total != global_inserts:
                    raise AssertionError(f"{name}: total() is {total}, {global_inserts} keys were added")
                distinct[name] = counts.size()
                return elapsed, used

            return insert

        number_batches = [numbers[offset : offset + CHUNK] for offset in range(0, len(numbers), CHUNK)]
        packed = Blobs.of(drawn)
        hashes = varkeys.hash_bytes(packed.offsets, packed.data)
        hash_batches = [hashes[offset : offset + CHUNK] for offset in range(0, len(hashes), CHUNK)]
        measurements = {
            names[0]: measure(names[0], CountingSet(rail, np.uint64), number_batches),
            names[1]: measure(names[1], CountingSet(rail, np.uint64), hash_batches),
            names[2]: measure(names[2], CountingSet(rail, str), chunks),
        }
        for trial in range(args.trials + 1):  # trial 0 warms up and is discarded
            for name, insert in measurements.items():
                elapsed, used = insert()
                runtime = comm.allreduce(elapsed, op=MPI.MAX)
                used_per_rank = comm.allreduce(used, op=MPI.SUM) / size
                if trial:
                    runs[name].append(global_inserts / runtime)
                    cpu[name].append(used_per_rank)
        if len(set(distinct.values())) != 1:
            raise AssertionError(f"distinct keys differ: {distinct}")
        stats = rail.stats()
    if rank == 0:
        medians = {name: statistics.median(rates) for name, rates in runs.items()}
        ratio = medians[names[2]] / medians[names[0]]
        cpu_medians = {name: statistics.median(seconds) for name, seconds in cpu.items()}
        lengths = np.diff(np.frombuffer(words.buffers()[1], np.int32)[: len(words) + 1])
        document = {
            "benchmark": "containers",
            "keys": "str",
            "mpi": mpi_library(),
            "ranks": size,
            "inserts_per_rank": args.inserts,
            "vocabulary": len(words),
            "mean_word_bytes": float(lengths.mean()),
            "zipf_exponent": args.zipf,
            **rail_fields(config, stats, args.trials),
            "inserts_per_s": runs,
            "median_inserts_per_s": medians,
            "ratio_str_to_uint64": ratio,
            "ratio_str_to_uint64_hashes": medians[names[2]] / medians[names[1]],
            "cpu_s_per_rank": cpu,
            "median_cpu_s_per_rank": cpu_medians,
            "cpu_ratio_str_to_uint64": cpu_medians[names[0]] / cpu_medians[names[2]],
            "cpu_ratio_str_to_uint64_hashes": cpu_medians[names[1]] / cpu_medians[names[2]],
            "distinct_keys": distinct,
            "config": dict(options, seed=args.seed),
        }
        write_json(args.json, document)
        print(
            f"containers --keys str: {size} ranks, {args.inserts:,} words per rank of {len(words):,} "
            f"(1-{LONGEST_WORD} letters, zipf exponent {args.zipf}), {rail_conditions(config, stats, args.trials)}"
        )
        print(
            format_table(
                [
                    "measurement",
                    "M inserts/s",
                    "vs uint64",
                    "vs hashes",
                    "CPU ms/rank",
                    "vs uint64 (CPU)",
                    "distinct keys",
                ],
                [
                    (
                        name,
                        medians[name] / 1e6,
                        medians[name] / medians[names[0]],
                        medians[name] / medians[names[1]],
                        cpu_medians[name] * 1e3,
                        cpu_medians[names[0]] / cpu_medians[name],
                        distinct[name],
                    )
                    for name in names
                ],
            )
        )
    return 0
