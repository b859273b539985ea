"""``mailrail app wordcount``: the top words of text files, their distinct and total count, exact.

Every rank reads its share of the lines with :func:`mailrail.io.read_lines` (large files split among the
ranks at byte ranges), splits them into words with Arrow's kernels and adds them to one
``CountingSet(rail, str)``: exact words of any length and any script.  A word is a maximal run of
characters other than ASCII whitespace, case kept (:mod:`mailrail_tools.words`).  ``--verify``: rank 0
gathers every word's count and compares it with a ``collections.Counter`` over the raw bytes of every
file, split by ``bytes.split()`` in one process (no code shared with the count it checks).

Run: ``mailrail run -n 4 app wordcount docs/ --top 20 --verify``.
"""

from __future__ import annotations

import argparse
from typing import Any

from ..flags import add_rail_arguments, checked_rail_options, int_in, one_line_errors, usage_error
from ..mpi_facts import mpi_library
from ..output import format_table, write_json
from ..words import agrees, count_words, counted_directly


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.add_argument("paths", nargs="+", metavar="PATH", help="text files, directories or glob patterns")
    parser.add_argument("--top", type=int_in(1, 1 << 20), default=10, help="the top N words (default 10)")
    parser.add_argument(
        "--verify",
        action="store_true",
        help="check every word's count against a Counter over the raw files in one process",
    )
    parser.add_argument(
        "--batch-bytes", type=int_in(1 << 10, 1 << 30), default=None, help="read_lines' batch size (default its own)"
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    add_rail_arguments(parser)


def run(args: argparse.Namespace) -> int:
    checked = checked_rail_options("app wordcount", args)
    if checked is None:
        return 2
    options, _ = checked
    from mailrail._mpi import MPI
    from mailrail.errors import PathNotFoundError
    from mailrail.rail import MailRail  # MailRail starts MPI: imported when the run begins, not to parse flags

    comm = MPI.COMM_WORLD
    with MailRail(comm, **options) as rail:
        try:
            counted = count_words(rail, args.paths, top=args.top, batch_bytes=args.batch_bytes)
        except PathNotFoundError as error:  # every rank plans alike, so every rank meets it
            return usage_error("app wordcount", str(error), comm)
        seconds = comm.allreduce(counted.seconds, op=MPI.MAX)
        everything = counted.words.gather(0) if args.verify else None  # collective
    verified: bool | None = None
    problems: list[str] = []
    if args.verify and comm.Get_rank() == 0:
        counts = dict(zip(everything.column("key").to_pylist(), everything.column("count").to_pylist()))
        expected = counted_directly(counted.files)
        problems = agrees(counts, expected)
        top_expected = [count for _, count in expected.most_common(args.top)]
        if counted.top_counts != top_expected:
            problems.append(f"top counts {counted.top_counts}, expected {top_expected}")
        verified = not problems
    verified = comm.bcast(verified)
    if comm.Get_rank() == 0:
        document = result_document(counted, seconds, comm.Get_size(), verified, args, options)
        write_json(args.json, document)
        print_result(document, problems)
    return 1 if verified is False else 0


def result_document(
    counted: Any, seconds: float, ranks: int, verified: bool | None, args: argparse.Namespace, options: dict[str, Any]
) -> dict[str, Any]:
    return {
        "app": "wordcount",
        "ranks": ranks,
        "mpi": mpi_library(),
        "files": len(counted.files),
        "lines": counted.lines,
        "total": counted.total,
        "distinct": counted.distinct,
        "top": [{"word": word, "count": count} for word, count in zip(counted.top_words, counted.top_counts)],
        "runtime_s": seconds,
        "verified": verified,
        "word": "a maximal run of characters other than ASCII whitespace, case kept",
        "config": dict(options, paths=args.paths, top=args.top, batch_bytes=args.batch_bytes),
    }


def print_result(document: dict[str, Any], problems: list[str]) -> None:
    print(
        f"app wordcount: {document['ranks']} ranks, {document['files']:,} files, {document['lines']:,} lines: "
        f"{document['total']:,} words, {document['distinct']:,} distinct, in {document['runtime_s']:.3f} s "
        f"(read, split, count, top)"
    )
    print(
        format_table(
            ["rank", "count", "word"],
            [(place, row["count"], row["word"]) for place, row in enumerate(document["top"], 1)],
        )
    )
    for problem in problems:
        print(f"  {problem}")
    if document["verified"] is not None:
        print("verified" if document["verified"] else "WRONG RESULT")
