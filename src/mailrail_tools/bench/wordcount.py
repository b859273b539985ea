"""``mailrail bench wordcount``: word count on MailRail beside Dask's dataframes and polars, in the same run.

The input is the user's files (``PATHS``) or a corpus the ranks write (not timed): ``--megabytes`` of text in
``--files`` files, lines of ``WORDS_PER_LINE`` words drawn by a Zipf law (exponent 1.1) from a vocabulary of
600,000 words of 1 to 40 random lower-case letters (:func:`~.containers.vocabulary`: about 297,000
distinct words in 300 MB), kept under ``--corpus`` and reused by a later run with the same flags.

- **MailRail** (every rank): :func:`mailrail_tools.words.count_words`: ``read_lines``, Arrow's split, a
  ``CountingSet(rail, str)``, its top 10, distinct and total; timed from a barrier to the answer, the
  slowest rank's time.  Library defaults: no knob is set unless a flag sets it.
- **Dask** (``--peer dask``): ``dask.dataframe`` with Arrow strings on a ``LocalCluster`` of as many worker
  processes as ranks, one thread each, started once in this run (its start is not timed), the count timed
  inside the cluster's client: read, split, ``value_counts``, top 10 (:mod:`.wordcount_peer`).
- **polars** (``--polars``): the same count in one process, its threads on every core.

The peers run in a process of their own started by rank 0, outside MPI; while one runs, the ranks wait
without spinning (a non-blocking barrier polled with sleeps), so the peer has the machine's cores.  The trials
interleave (MailRail, Dask, polars, then again), after one warm-up round that also fills the page cache.
Every trial's answer is compared across the tools: total, distinct and the top 10 counts must agree (the
words too, but for ties at the tenth place); a disagreement exits 1.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..flags import (
    SEED_MAX,
    add_rail_arguments,
    checked_rail_options,
    int_in,
    missing_module,
    one_line_errors,
    usage_error,
)
from ..mpi_facts import mpi_library
from ..output import format_table, write_json
from ..words import TOP, count_words
from .containers import VOCABULARY, ZIPF_EXPONENT, truncated_zipf, vocabulary

#: Words per line of the generated corpus.
WORDS_PER_LINE = 10
#: Words drawn at a time while the corpus is written.
WORDS_PER_CHUNK = 1 << 20
#: Where the generated corpus is kept, unless --corpus says.
CORPUS_HOME = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mailrail" / "wordcount"
#: Seconds a peer may take to start (a Dask cluster of many workers on a busy machine).
PEER_START_TIMEOUT = 300
#: The environment variables of MPI launchers, kept from the peers' processes (they are no part of the job).
MPI_VARIABLE_PREFIXES = ("OMPI_", "PMIX_", "PMI_", "HYDRA_", "MPIR_", "MPICH_", "OPAL_", "PRTE_")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.add_argument("paths", nargs="*", metavar="PATH", help="count these files instead of a generated corpus")
    parser.add_argument(
        "--megabytes", type=int_in(1, 1 << 20), default=300, help="generated corpus: its size in MB (default 300)"
    )
    parser.add_argument("--files", type=int_in(1, 1 << 16), default=2, help="generated corpus: files (default 2)")
    parser.add_argument(
        "--corpus",
        metavar="DIR",
        help=f"where the generated corpus is written and found again (default under {CORPUS_HOME})",
    )
    parser.add_argument("--peer", choices=["dask"], default=None, help="also run Dask's dataframes (extra: peers)")
    parser.add_argument("--polars", action="store_true", help="also run polars, in one process (extra: peers)")
    parser.add_argument(
        "--trials", type=int_in(1, 1000), default=3, help="timed trials after one warm-up (default %(default)s)"
    )
    parser.add_argument("--seed", type=int_in(0, SEED_MAX), default=1, help="generated corpus: its seed (default 1)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    add_rail_arguments(parser)


# -- the corpus -------------------------------------------------------------------------------------------------


def corpus_directory(args: argparse.Namespace) -> Path:
    if args.corpus:
        return Path(args.corpus)
    return CORPUS_HOME / f"{args.megabytes}MB-{args.files}files-seed{args.seed}"


def corpus_files(directory: Path, files: int) -> list[Path]:
    return [directory / f"words-{number:04d}.txt" for number in range(files)]


def write_corpus_file(path: Path, size: int, seed: int, number: int) -> None:
    """About *size* bytes (whole lines, at least one) of Zipf words, ``WORDS_PER_LINE`` to a line, into *path*."""
    import pyarrow as pa
    import pyarrow.compute as pc

    words = vocabulary(seed, VOCABULARY)
    rng = np.random.default_rng([seed, number, 3])
    written = 0
    partial = path.with_name(path.name + ".part")
    with open(partial, "wb") as out:
        while written < size:
            drawn = words.take(truncated_zipf(rng, WORDS_PER_CHUNK, ZIPF_EXPONENT, len(words)))
            lines = pa.ListArray.from_arrays(np.arange(0, len(drawn) + 1, WORDS_PER_LINE, dtype=np.int32), drawn)
            text = pc.binary_join(lines, " ")
            # one string of the lines, each ended by a newline: the lines joined, then one more
            block = pc.binary_join(pa.ListArray.from_arrays(np.array([0, len(text)], np.int32), text), "\n")
            data = block[0].as_buffer().to_pybytes() + b"\n"
            last = written + len(data) >= size
            if written + len(data) > size:  # whole lines only, at least one in the file
                cut = data.rfind(b"\n", 0, size - written) + 1 or (0 if written else data.find(b"\n") + 1)
                data = data[:cut]
            out.write(data)
            written += len(data)
            if last:
                break
    partial.rename(path)


def prepare_corpus(comm: Any, args: argparse.Namespace) -> tuple[list[str], bool]:
    """Collective: the corpus's files, written in parallel (file i by rank i mod ranks) unless already there;
    and whether it was written now."""
    directory = corpus_directory(args)
    manifest = directory / "corpus.json"
    description = {
        "megabytes": args.megabytes,
        "files": args.files,
        "seed": args.seed,
        "words_per_line": WORDS_PER_LINE,
        "vocabulary": VOCABULARY,
        "zipf_exponent": ZIPF_EXPONENT,
    }
    paths = corpus_files(directory, args.files)
    found = False
    if comm.Get_rank() == 0:
        try:
            found = json.loads(manifest.read_text()) == description and all(path.is_file() for path in paths)
        except (OSError, ValueError):
            found = False
        if not found:
            directory.mkdir(parents=True, exist_ok=True)
            manifest.unlink(missing_ok=True)
    found = comm.bcast(found)
    if not found:
        size = args.megabytes * 10**6 // args.files
        for number in range(comm.Get_rank(), args.files, comm.Get_size()):
            write_corpus_file(paths[number], size, args.seed, number)
        comm.Barrier()
        if comm.Get_rank() == 0:
            manifest.write_text(json.dumps(description))
    return [str(path) for path in paths], not found


# -- the peers ----------------------------------------------------------------------------------------------------


class Peer:
    """A peer's process (:mod:`.wordcount_peer`), started by rank 0 outside MPI, answering ``run`` lines."""

    def __init__(self, name: str, workers: int, files: list[str]) -> None:
        self.name = name
        environment = {key: value for key, value in os.environ.items() if not key.startswith(MPI_VARIABLE_PREFIXES)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mailrail_tools.bench.wordcount_peer"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=environment,
        )
        self._send(json.dumps({"peer": name, "workers": workers, "files": files, "top": TOP}))
        self.startup_s = float(self._answer()["startup_s"])

    def _send(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        if not line:
            code = self.process.wait()
            raise RuntimeError(
                f"bench wordcount: the {self.name} peer ended (exit status {code}); see its output above"
            )
        document: dict[str, Any] = json.loads(line)
        return document

    def run(self) -> dict[str, Any]:
        self._send("run")
        return self._answer()

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self._send("quit")
                self.process.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()


def quiet_barrier(comm: Any) -> None:
    """A barrier that sleeps instead of spinning: the ranks that wait leave the cores to a peer's processes."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(0.005)


# -- the answers compared ---------------------------------------------------------------------------------------


def answer_of(result: dict[str, Any]) -> dict[str, Any]:
    return {key: result[key] for key in ("total", "distinct", "top_counts", "top_words")}


def disagreement(reference: dict[str, Any], other: dict[str, Any]) -> str | None:
    """Why *other*'s answer differs from *reference*'s (None: they agree; top words may differ only by ties at
    the last count)."""
    for key in ("total", "distinct", "top_counts"):
        if reference[key] != other[key]:
            return f"{key} {other[key]} against {reference[key]}"
    counts = reference["top_counts"]
    if counts:
        last = counts[-1]
        above = {w for w, c in zip(reference["top_words"], counts) if c > last}
        other_above = {w for w, c in zip(other["top_words"], other["top_counts"]) if c > last}
        if above != other_above:
            return f"top words {other['top_words']} against {reference['top_words']}"
    return None


# -- the run ------------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    if args.peer or args.polars:
        needed = (["dask.dataframe", "distributed"] if args.peer else []) + (["polars"] if args.polars else [])
        for module in needed:
            problem = missing_module(module, "bench wordcount", "peers", purpose=" for its peers")
            if problem:
                return usage_error("bench wordcount", problem)
    checked = checked_rail_options("bench wordcount", args)
    if checked is None:
        return 2
    options, config = checked
    from mailrail._mpi import MPI
    from mailrail.errors import PathNotFoundError
    from mailrail.io import read_lines
    from mailrail.rail import MailRail  # MailRail starts MPI: imported when the run begins, not to parse flags

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    generated = not args.paths
    written = False
    if generated:
        paths, written = prepare_corpus(comm, args)
    else:
        paths = list(args.paths)
    tools = ["mailrail"] + (["dask"] if args.peer else []) + (["polars"] if args.polars else [])
    seconds: dict[str, list[float]] = {tool: [] for tool in tools}
    answers: dict[str, dict[str, Any]] = {}
    disagreements: list[str] = []
    agreed = {tool: True for tool in tools}
    peers: dict[str, Peer] = {}
    with MailRail(comm, **options) as rail:
        try:
            files = read_lines(rail, paths).files  # the plan alone (collective; every rank checks the paths alike)
        except PathNotFoundError as error:
            return usage_error("bench wordcount", str(error), comm)
        input_bytes = sum(os.path.getsize(path) for path in files) if rank == 0 else 0
        try:
            if rank == 0:
                if args.peer:
                    peers["dask"] = Peer("dask", size, files)
                if args.polars:
                    peers["polars"] = Peer("polars", size, files)
            quiet_barrier(comm)
            for trial in range(args.trials + 1):  # trial 0 warms up (and fills the page cache) and is not reported
                comm.Barrier()
                counted = count_words(rail, files)
                elapsed = comm.allreduce(counted.seconds, op=MPI.MAX)
                results = {"mailrail": dict(answer_of(vars(counted)), seconds=elapsed)}
                for name in tools[1:]:
                    quiet_barrier(comm)
                    if rank == 0:
                        results[name] = peers[name].run()
                    quiet_barrier(comm)
                if rank == 0:
                    for name, result in results.items():
                        answers.setdefault(name, answer_of(result))
                        problem = disagreement(results["mailrail"], result)
                        if problem:
                            agreed[name] = False
                            disagreements.append(f"trial {trial}, {name}: {problem}")
                        if trial:
                            seconds[name].append(result["seconds"])
        finally:
            for peer in peers.values():
                peer.close()
        stats = rail.stats()
    if rank == 0:
        medians = {tool: statistics.median(times) for tool, times in seconds.items()}
        document = {
            "benchmark": "wordcount",
            "mpi": mpi_library(),
            "ranks": size,
            "input": {
                "files": len(files),
                "bytes": input_bytes,
                "generated": generated,
                "written_now": written,
                "paths": paths if not generated else [str(corpus_directory(args))],
            },
            "lines": counted.lines,
            "total": counted.total,
            "distinct": counted.distinct,
            "top": [{"word": w, "count": c} for w, c in zip(counted.top_words, counted.top_counts)],
            "tools": tools,
            "dask_workers": size if args.peer else None,
            "peer_startup_s": {name: peer.startup_s for name, peer in peers.items()},
            "trials": args.trials,
            "seconds": seconds,
            "median_seconds": medians,
            "mb_per_s": {tool: input_bytes / 1e6 / median for tool, median in medians.items()},
            "speedup_of_mailrail": {tool: medians[tool] / medians["mailrail"] for tool in tools},
            "answers": answers,
            "agree": not disagreements,
            "agree_by_tool": agreed,
            "disagreements": disagreements,
            "datagram_size": config.datagram_size,
            "flow_control": stats["flow_control"],
            "implementation": stats["implementation"],
            "config": dict(options, seed=args.seed, megabytes=args.megabytes if generated else None),
        }
        write_json(args.json, document)
        print_result(document)
    return 0 if comm.bcast(not disagreements) else 1


def print_result(document: dict[str, Any]) -> None:
    source = document["input"]
    print(
        f"wordcount: {document['ranks']} ranks, {source['files']} files, {source['bytes'] / 1e6:,.1f} MB "
        f"({'generated' if source['generated'] else 'given'}), {document['total']:,} words, "
        f"{document['distinct']:,} distinct; median of {document['trials']} interleaved trials "
        f"(read, split, count, top {TOP})"
    )
    medians = document["median_seconds"]
    print(
        format_table(
            ["tool", "seconds", "MB/s", "MailRail's speed-up", "same answer"],
            [
                (
                    describe(tool, document),
                    medians[tool],
                    document["mb_per_s"][tool],
                    document["speedup_of_mailrail"][tool],
                    "yes" if document["agree_by_tool"][tool] else "NO",
                )
                for tool in document["tools"]
            ],
        )
    )
    for line in document["disagreements"][:5]:
        print(f"  DIFFERENT ANSWER: {line}")


def describe(tool: str, document: dict[str, Any]) -> str:
    if tool == "mailrail":
        return f"MailRail, {document['ranks']} ranks"
    if tool == "dask":
        return f"Dask dataframe, {document['dask_workers']} workers"
    return "polars, one process"
