"""``mailrail bench read``: :func:`mailrail.io.read_lines` on every rank, beside ``wc -l`` and pyarrow in one process.

The files are the user's (``PATHS``) or a corpus the benchmark writes first (``--megabytes`` in ``--files``
files of lines of 0 to ``LONGEST_LINE`` random letters and spaces, in ``--corpus``, or in a temporary directory
removed afterwards).  Three measurements, interleaved trial by trial so the machine's drift hits them alike,
all from the page cache (trial 0 reads everything once and is discarded):

- ``read_lines``: every rank iterates its share of the lines (the plan included), timed from a barrier to
  the last rank's end; the lines counted over all ranks are checked against an independent count (the
  newlines in the files, plus each non-empty file's last line if it has none);
- ``wc -l``: the files read by ``wc -l`` in one process, on rank 0, the other ranks waiting without spinning;
- ``pyarrow``: pyarrow's CSV reader as a line reader (one column, a delimiter no text line holds, no quoting,
  empty lines kept), streaming, on its own threads, in one process on rank 0.  It also ends a line at a lone
  ``\\r``, which ``read_lines`` keeps as text: on files with such lines its count differs, and the table says so.

Memory: before each ``read_lines`` trial every rank resets its peak resident set (``/proc/self/clear_refs``)
and notes what it holds; the peak above that, during the read, is reported per rank beside the documented
bound, ``2 × batch_bytes + READ_LINES_ALLOWANCE`` (docs: "Input and output", memory per rank).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..flags import SEED_MAX, int_in, one_line_errors
from ..memory import peak_rss_bytes, reset_peak_rss
from ..mpi_facts import mpi_library
from ..output import format_table, write_json
from .metrics import current_rss_bytes
from .wordcount import quiet_barrier

#: The longest line of the generated corpus, in bytes (lines are 0 to this long, uniformly).
LONGEST_LINE = 160
#: What ``read_lines`` may hold above ``2 × batch_bytes`` (the documented bound, docs: "Input and output").
READ_LINES_ALLOWANCE = 24 << 20
#: The generated corpus is written this many bytes at a time.
_WRITE_CHUNK = 16 << 20
#: A byte that no line of text holds: the pyarrow peer's column delimiter.
_UNIT_SEPARATOR = "\x1f"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from mailrail.io.ranges import DEFAULT_BATCH_BYTES

    one_line_errors(parser)
    parser.add_argument(
        "paths", nargs="*", metavar="PATHS", help="files, directories or globs to read (default: a generated corpus)"
    )
    parser.add_argument(
        "--megabytes", type=int_in(1, 1 << 20), default=300, help="generated corpus size, MB (default %(default)s)"
    )
    parser.add_argument("--files", type=int_in(1, 10_000), default=2, help="generated corpus files (default 2)")
    parser.add_argument(
        "--corpus", metavar="DIR", help="write the generated corpus here and keep it (default: a temporary directory)"
    )
    parser.add_argument(
        "--batch-bytes",
        type=int_in(1 << 10, 1 << 30),
        default=DEFAULT_BATCH_BYTES,
        help="read_lines' batch_bytes (default: the library's, %(default)s)",
    )
    parser.add_argument(
        "--trials", type=int_in(1, 1000), default=3, help="timed trials after one warm-up (default %(default)s)"
    )
    parser.add_argument("--seed", type=int_in(0, SEED_MAX), default=1)
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")


def write_corpus(directory: Path, megabytes: int, files: int, seed: int) -> list[Path]:
    """*files* files of about ``megabytes / files`` MB together *megabytes* MB (10^6 bytes), of lines of 0 to
    LONGEST_LINE random lower-case letters and spaces, each line ended by a newline; returns their paths."""
    directory.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng([seed, 1 << 21])
    alphabet = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz    ", dtype=np.uint8)
    paths = []
    total = megabytes * 10**6
    for number in range(files):
        path = directory / f"lines-{number:04d}.txt"
        size = total // files + (number < total % files)
        with open(path, "wb") as out:
            left = size
            while left:
                text = alphabet[rng.integers(0, len(alphabet), min(left, _WRITE_CHUNK))]
                # About one newline in LONGEST_LINE / 2 + 1 bytes: lines of 0 to LONGEST_LINE bytes, mean half.
                ends = np.cumsum(rng.integers(1, LONGEST_LINE + 2, len(text) // (LONGEST_LINE // 2) + 2)) - 1
                text[ends[ends < len(text)]] = ord("\n")
                text[-1] = ord("\n")  # every chunk ends its last line: a file ends with a newline
                out.write(text.tobytes())
                left -= len(text)
        paths.append(path)
    return paths


def counted_lines(paths: list[str]) -> int:
    """The lines ``read_lines`` should find, counted another way: the newlines in the files, plus one for each
    non-empty file whose last byte is not a newline."""
    lines = 0
    for path in paths:
        size = os.path.getsize(path)
        if not size:
            continue
        data = np.memmap(path, dtype=np.uint8, mode="r")
        for start in range(0, size, _WRITE_CHUNK):
            lines += int(np.count_nonzero(data[start : start + _WRITE_CHUNK] == ord("\n")))
        lines += int(data[-1] != ord("\n"))
        del data
    return lines


def wc_lines(paths: list[str]) -> int:
    """``wc -l`` over *paths* (newlines, summed)."""
    completed = subprocess.run(["wc", "-l", *paths], capture_output=True, text=True, check=True)
    rows = completed.stdout.strip().splitlines()
    return int(rows[-1].split()[0])


def pyarrow_lines(paths: list[str], batch_bytes: int) -> int:
    """The lines of *paths* read by pyarrow's CSV reader as a line reader, streaming on its own threads."""
    import pyarrow as pa
    import pyarrow.csv as pacsv

    read = pacsv.ReadOptions(column_names=["line"], block_size=batch_bytes)
    parse = pacsv.ParseOptions(
        delimiter=_UNIT_SEPARATOR,
        quote_char=False,
        escape_char=False,
        newlines_in_values=False,
        ignore_empty_lines=False,
    )
    convert = pacsv.ConvertOptions(column_types={"line": pa.string()}, strings_can_be_null=False)
    lines = 0
    for path in paths:
        if not os.path.getsize(path):
            continue  # pyarrow's CSV reader refuses an empty file: it has no lines
        with pacsv.open_csv(path, read_options=read, parse_options=parse, convert_options=convert) as reader:
            for batch in reader:
                lines += batch.num_rows
    return lines


def run(args: argparse.Namespace) -> int:
    from mailrail._mpi import MPI  # MPI starts when the run begins, not to parse flags

    comm = MPI.COMM_WORLD
    temporary = None
    paths = args.paths
    if not paths:
        directory = Path(args.corpus) if args.corpus else None
        if directory is None:
            temporary = comm.bcast(tempfile.mkdtemp(prefix="mailrail-bench-read-") if comm.Get_rank() == 0 else None)
            directory = Path(temporary)
        if comm.Get_rank() == 0:
            write_corpus(directory, args.megabytes, args.files, args.seed)
        comm.Barrier()
        paths = [str(directory)]
    try:
        return measure(args, comm, paths)
    finally:
        if temporary is not None and comm.Get_rank() == 0:
            shutil.rmtree(temporary, ignore_errors=True)


def measure(args: argparse.Namespace, comm: Any, paths: list[str]) -> int:
    """The three measurements on the files *paths* names (local files: ``wc`` and the pyarrow peer open them by
    name), the check of every count, and the report on rank 0."""
    from mailrail._mpi import MPI
    from mailrail.io import read_lines
    from mailrail.rail import MailRail

    rank, size = comm.Get_rank(), comm.Get_size()
    runs: dict[str, list[float]] = {"read_lines": [], "wc -l": [], "pyarrow": []}
    counts: dict[str, int] = {}
    memory: list[int] = []
    peak_resets = True
    with MailRail(comm) as rail:
        with read_lines(rail, paths) as planned:  # the plan alone names the files, the same list on every rank
            files = planned.files
        total_bytes = sum(os.path.getsize(path) for path in files) if rank == 0 else 0
        expected = counted_lines(files) if rank == 0 else 0

        def mailrail_read() -> float:
            nonlocal peak_resets
            comm.Barrier()
            peak_resets = reset_peak_rss() and peak_resets
            before = current_rss_bytes()
            start = time.perf_counter()
            lines = 0
            for batch in read_lines(rail, paths, batch_bytes=args.batch_bytes):
                lines += len(batch)
            elapsed = time.perf_counter() - start
            memory.append(peak_rss_bytes() - before)
            counts["read_lines"] = comm.allreduce(lines)
            return elapsed

        def on_rank_0(tool: Callable[[], int], name: str) -> Callable[[], float]:
            def measure_tool() -> float:
                comm.Barrier()
                elapsed = 0.0
                if rank == 0:
                    start = time.perf_counter()
                    counts[name] = tool()
                    elapsed = time.perf_counter() - start
                quiet_barrier(comm)  # the others wait without taking a core from the tool
                return elapsed

            return measure_tool

        measurements = {
            "read_lines": mailrail_read,
            "wc -l": on_rank_0(lambda: wc_lines(files), "wc -l"),
            "pyarrow": on_rank_0(lambda: pyarrow_lines(files, args.batch_bytes), "pyarrow"),
        }
        for trial in range(args.trials + 1):  # trial 0 fills the page cache and is discarded
            for name, measure_one in measurements.items():
                runtime = comm.allreduce(measure_one(), op=MPI.MAX)
                if trial:
                    runs[name].append(runtime)
    growth = comm.gather(max(memory[1:]))
    if rank != 0:
        return 0
    assert growth is not None
    if counts["read_lines"] != expected:
        raise AssertionError(f"read_lines read {counts['read_lines']:,} lines; the files hold {expected:,}")
    report(args, size, files, total_bytes, expected, runs, counts, growth if peak_resets else None)
    return 0


def report(
    args: argparse.Namespace,
    ranks: int,
    files: list[str],
    total_bytes: int,
    expected: int,
    runs: dict[str, list[float]],
    counts: dict[str, int],
    growth: list[int] | None,
) -> None:
    """The JSON document and the table."""
    bound = 2 * args.batch_bytes + READ_LINES_ALLOWANCE
    medians = {name: statistics.median(times) for name, times in runs.items()}
    document = {
        "benchmark": "read",
        "mpi": mpi_library(),
        "ranks": ranks,
        "files": len(files),
        "bytes": total_bytes,
        "lines": expected,
        "batch_bytes": args.batch_bytes,
        "trials": args.trials,
        "seconds": runs,
        "median_seconds": medians,
        "megabytes_per_s": {name: total_bytes / 1e6 / seconds for name, seconds in medians.items()},
        "lines_counted": counts,
        "peak_growth_bytes_per_rank": growth,
        "memory_bound_bytes": bound,
    }
    write_json(args.json, document)
    print(
        f"read: {len(files)} file(s), {total_bytes / 1e6:,.0f} MB, {expected:,} lines; read_lines on {ranks} ranks "
        f"(batch_bytes {args.batch_bytes:,}), wc -l and pyarrow in one process; median of {args.trials} "
        f"interleaved trials, from the page cache"
    )
    reference = medians["read_lines"]
    rows = []
    for name, seconds in medians.items():
        note = "" if counts[name] == expected else f"counts {counts[name]:,} lines"
        rows.append(
            [name, f"{seconds:.3f}", f"{total_bytes / 1e6 / seconds:,.0f}", f"{reference / seconds:.2f}x", note]
        )
    print(format_table(["tool", "seconds", "MB/s", "speed vs read_lines", "note"], rows))
    if growth is None:
        print("read_lines memory: not measured (this kernel cannot reset a process's peak resident set)")
        return
    within = "within" if max(growth) <= bound else "ABOVE"
    print(
        f"read_lines memory, peak above the start of the read, per rank: "
        f"{', '.join(f'{g / 2**20:,.1f} MiB' for g in growth)}; {within} the bound 2 x batch_bytes + "
        f"{READ_LINES_ALLOWANCE >> 20} MiB = {bound / 2**20:,.0f} MiB"
    )
