"""The peers of ``mailrail bench wordcount``: the same word count in Dask's dataframes or in polars, as a process.

``bench wordcount``'s rank 0 starts this module as a process of its own (``python -m
mailrail_tools.bench.wordcount_peer``, outside MPI: no MPI variable, every core of the machine), writes one
JSON line on its standard input (``{"peer": "dask" | "polars", "workers": N, "files": [...], "top": 10}``),
and reads JSON lines back: ``{"ready": true, "startup_s": ...}`` once the peer is up (Dask: a
``LocalCluster`` of N worker processes of one thread each, and its client), then one result per ``run`` line
it sends (``{"seconds", "top_words", "top_counts", "distinct", "total"}``), until ``quit``.  A result's
seconds are measured in the peer around its computation alone (read, split, count, top), as MailRail's are
timed inside its job; the cluster's start is not in them.

Both count what :mod:`mailrail_tools.words` calls a word as their users would write it: Dask with
``str.split()`` on Arrow strings (``pd.ArrowDtype(pa.string())``: Arrow's ``utf8_split_whitespace``, which
also splits at Unicode whitespace such as a no-break space), empty strings dropped; polars with
``str.split(" ")`` after the other ASCII whitespace is made a space.  The lines are read as CSV of one
column (a separator, ``\\x1f``, and no quoting: text files whose lines never hold that byte).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from typing import Any

#: The column separator the peers read lines with: a byte no line of text is expected to hold.
LINE_SEPARATOR = "\x1f"


def dask_counter(workers: int, files: list[str], top: int) -> tuple[Callable[[], dict[str, Any]], Callable[[], None]]:
    """A Dask LocalCluster of *workers* processes (1 thread each) and its client; the count, and the shutdown."""
    import csv

    import dask
    import dask.dataframe as dd
    import pandas as pd
    import pyarrow as pa
    from distributed import Client, LocalCluster

    dask.config.set({"dataframe.convert-string": True})
    cluster = LocalCluster(
        n_workers=workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        memory_limit=0,
        silence_logs=logging.ERROR,
    )
    client = Client(cluster)

    def count() -> dict[str, Any]:
        lines = dd.read_csv(
            files,
            header=None,
            names=["line"],
            sep=LINE_SEPARATOR,
            quoting=csv.QUOTE_NONE,
            dtype={"line": pd.ArrowDtype(pa.string())},
            na_filter=False,
            blocksize="64MB",
        )
        words = lines["line"].str.split().explode()
        words = words[words.str.len() > 0]
        counts = words.value_counts()
        most, distinct, total = dask.compute(counts.nlargest(top), counts.size, counts.sum())
        return {
            "top_words": [str(word) for word in most.index],
            "top_counts": [int(n) for n in most],
            "distinct": int(distinct),
            "total": int(total),
        }

    def shutdown() -> None:
        client.close()
        cluster.close()

    return count, shutdown


def polars_counter(files: list[str], top: int) -> tuple[Callable[[], dict[str, Any]], Callable[[], None]]:
    """polars in this process (its threads use every core): the count, and nothing to shut down."""
    import polars as pl

    def count() -> dict[str, Any]:
        lines = pl.scan_csv(
            files,
            has_header=False,
            new_columns=["line"],
            separator=LINE_SEPARATOR,
            quote_char=None,
            schema={"line": pl.String},
        )
        words = (
            lines.select(pl.col("line").str.replace_all(r"[\t\n\v\f\r]", " ").str.split(" ").explode().alias("word"))
            .filter(pl.col("word").str.len_bytes() > 0)
            .group_by("word")
            .len()
            .collect()
        )
        most = words.top_k(top, by="len")
        return {
            "top_words": most["word"].to_list(),
            "top_counts": [int(n) for n in most["len"]],
            "distinct": words.height,
            "total": int(words["len"].sum()),
        }

    return count, lambda: None


def serve() -> int:
    """Read the request, start the peer, answer ``run`` lines until ``quit`` (see the module doc)."""
    request = json.loads(sys.stdin.readline())
    os.sched_setaffinity(0, range(os.cpu_count() or 1))  # (in case the launcher bound the rank that started it)
    start = time.perf_counter()
    if request["peer"] == "dask":
        count, shutdown = dask_counter(request["workers"], request["files"], request["top"])
    else:
        count, shutdown = polars_counter(request["files"], request["top"])
    answer({"ready": True, "startup_s": time.perf_counter() - start})
    try:
        for line in sys.stdin:
            if line.strip() != "run":
                break
            begin = time.perf_counter()
            result = count()
            answer(dict(result, seconds=time.perf_counter() - begin))
    finally:
        shutdown()
    return 0


def answer(document: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(document) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":  # (Dask's worker processes import this module again: they must not serve)
    sys.exit(serve())
