"""``mailrail app pagerank``: PageRank over an edge list, on the containers, as YGM's ``alg_pagerank`` computes it.

YGM's example (``examples/container/alg_pagerank.cpp``) reads ``u v`` pairs, makes the graph undirected
(each edge both ways: ``A[u][v] += 1`` and ``A[v][u] += 1``, a vertex's degree the count of its edge ends, so
a self loop counts twice and a repeated edge weighs more), takes the vertices that appear in an edge, starts
every rank at ``1/N`` and iterates ``pr'[v] = (1 - d)/N + d * sum(pr[u] / deg[u] for each edge u-v)`` with
``d = 0.85``.  An undirected graph has no dangling vertex, so the ranks keep summing to 1.  ``--directed``
reads each pair as one arc ``u -> v`` instead; the rank of the vertices without an out-arc (dangling) is then
spread over every vertex, the usual convention (``networkx.pagerank``'s), so the ranks still sum to 1.

On MailRail: every rank reads its share of the edges (:func:`mailrail.io.read_parquet` for Parquet: the
first two columns, or ``--columns``; :func:`mailrail.io.read_lines` for text: ``u v`` lines, ``#``
comments); a ``Set`` of vertex ids names the vertices and their owners; each arc is sent once to the owner of
its source (a Coalescer of ``(source, target)`` records), so an iteration is local arithmetic, one
``Map.reduce(targets, shares, "add")`` (combined on the sender: one record per distinct target and rank),
and the barrier that completes it, into a new ``Map`` per iteration as YGM's ``spmv`` returns one.
``--iterations`` bounds the iterations (YGM's example runs 5); ``--tolerance`` stops earlier once the ranks
move less than it in total (L1).  ``--verify``: rank 0 gathers the edges and computes the same iterations with
a scipy sparse matrix in one process (power iteration), and compares every vertex's rank.

Run: ``mailrail run -n 4 app pagerank --edges graph.parquet --iterations 20 --verify``.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

from ..flags import (
    add_rail_arguments,
    agreed_problem,
    checked_rail_options,
    float_in,
    int_in,
    missing_module,
    one_line_errors,
    usage_error,
)
from ..mpi_facts import mpi_library
from ..output import format_table, write_json
from .graph import EdgeFileError

DAMPING = 0.85
#: Every vertex's rank agrees with the single-process answer within this (relative; absolute below 1e-15).
RELATIVE_TOLERANCE = 1e-9
ARC = np.dtype([("source", np.uint64), ("target", np.uint64)])


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.add_argument("--edges", metavar="PATH", required=True, help="a Parquet file or dataset, or a text edge list")
    parser.add_argument(
        "--format", choices=["auto", "parquet", "text"], default="auto", help="auto: Parquet by the suffix .parquet"
    )
    parser.add_argument("--columns", metavar="U,V", help="Parquet: the two integer columns (default the first two)")
    parser.add_argument("--directed", action="store_true", help="each pair is one arc u -> v (default: undirected)")
    parser.add_argument("--damping", type=float_in(0, 1), default=DAMPING, help="damping factor (default 0.85)")
    parser.add_argument("--iterations", type=int_in(1, 1000), default=20, help="at most this many (default 20)")
    parser.add_argument(
        "--tolerance", type=float_in(0), default=0.0, help="stop once the ranks move less than this, L1 (default 0)"
    )
    parser.add_argument("--top", type=int_in(1, 1 << 20), default=10, help="print the top N vertices (default 10)")
    parser.add_argument("--verify", action="store_true", help="check every rank against scipy in one process")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    add_rail_arguments(parser)


# -- reading the edges ----------------------------------------------------------------------------------------


def is_parquet(path: str, chosen: str) -> bool:
    if chosen != "auto":
        return chosen == "parquet"
    return path.rstrip("/").endswith((".parquet", ".pq"))


def edges_of_lines(lines: Any, path: str) -> np.ndarray:
    """``(m, 2)`` int64 edges of a batch of text lines (``u v``; blank lines and ``#`` comments skipped)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    lines = pc.utf8_trim_whitespace(lines)
    lines = lines.filter(pc.and_(pc.greater(pc.binary_length(lines), 0), pc.invert(pc.starts_with(lines, "#"))))
    fields = pc.ascii_split_whitespace(lines)
    bad = pc.not_equal(pc.list_value_length(fields), 2)
    if pc.any(bad).as_py():
        raise EdgeFileError(f"{path}: expected two vertex ids 'u v', found {lines.filter(bad)[0].as_py()!r}")
    tokens = pc.list_flatten(fields)
    if not pc.all(pc.match_substring_regex(tokens, r"^[0-9]{1,19}$")).as_py():
        line = lines.filter(pc.invert(pc.match_substring_regex(lines, r"^[0-9]{1,19}\s+[0-9]{1,19}$")))[0]
        raise EdgeFileError(f"{path}: vertex ids are non-negative integers of 63 bits, found {line.as_py()!r}")
    return np.asarray(pc.cast(tokens, pa.int64()).to_numpy()).reshape(-1, 2)


def edges_of_table(batch: Any, path: str, columns: list[str] | None) -> np.ndarray:
    """``(m, 2)`` int64 edges of a record batch: its first two columns, or *columns*."""
    import pyarrow as pa

    names = columns or batch.schema.names[:2]
    if len(names) != 2 or any(name not in batch.schema.names for name in names):
        raise EdgeFileError(f"{path}: needs two integer columns, has {batch.schema.names}")
    pair = [batch.column(name) for name in names]
    if not all(pa.types.is_integer(column.type) for column in pair):
        raise EdgeFileError(f"{path}: columns {names} must be integers, are {[str(c.type) for c in pair]}")
    if any(column.null_count for column in pair):
        raise EdgeFileError(f"{path}: columns {names} hold nulls")
    edges = np.stack([np.asarray(column.to_numpy(), dtype=np.int64) for column in pair], axis=1)
    if len(edges) and edges.min() < 0:
        raise EdgeFileError(f"{path}: negative vertex id {int(edges.min())}")
    return edges


def read_edges(rail: Any, args: argparse.Namespace) -> np.ndarray:
    """Collective: this rank's share of the edges (every rank raises the first rank's EdgeFileError)."""
    from mailrail.errors import InputError
    from mailrail.io import read_lines, read_parquet

    columns = args.columns.split(",") if args.columns else None
    pieces = [np.empty((0, 2), np.int64)]
    problem = None
    try:
        if is_parquet(args.edges, args.format):
            for batch in read_parquet(rail, args.edges, columns=columns):
                pieces.append(edges_of_table(batch, args.edges, columns))
        else:
            for lines in read_lines(rail, args.edges):
                pieces.append(edges_of_lines(lines, args.edges))
    except (EdgeFileError, InputError) as error:
        problem = str(error)
    problem = agreed_problem(rail.comm, problem)
    if problem:
        raise EdgeFileError(problem)
    return np.concatenate(pieces)


# -- PageRank on the containers ---------------------------------------------------------------------------------


class PageRank:
    """One rank's vertices (the ids its containers own) and their ranks, and the arcs whose source it owns."""

    def __init__(self, rail: Any, edges: np.ndarray, directed: bool) -> None:
        from mailrail.coalesce import Coalescer
        from mailrail.containers import Set

        self.rail, self.comm = rail, rail.comm
        vertices = Set(rail, np.uint64)
        vertices.insert(edges.reshape(-1).astype(np.uint64))
        vertices.barrier()
        #: This rank's vertices, sorted: the positions of its arrays.
        self.vertices = np.sort(np.asarray(vertices.local().column("key").to_numpy(), dtype=np.uint64))
        self.count = int(self.comm.allreduce(len(self.vertices)))
        arcs = np.empty(len(edges) * (1 if directed else 2), dtype=ARC)
        arcs["source"][: len(edges)], arcs["target"][: len(edges)] = edges[:, 0], edges[:, 1]
        if not directed:
            arcs["source"][len(edges) :], arcs["target"][len(edges) :] = edges[:, 1], edges[:, 0]
        owned: list[np.ndarray] = []
        coalescer = Coalescer(rail, ARC, lambda source, records: owned.append(records.copy()))
        coalescer.send(vertices.owner(arcs["source"]), arcs)
        coalescer.barrier()
        mine = np.concatenate(owned) if owned else np.empty(0, ARC)
        self.sources = np.searchsorted(self.vertices, mine["source"])  # positions of the owned sources
        self.targets = mine["target"]
        self.degree = np.bincount(self.sources, minlength=len(self.vertices)).astype(np.float64)
        self.ranks = np.full(len(self.vertices), 1.0 / self.count)
        self.owner = vertices.owner
        self.iterations = 0

    def step(self, damping: float) -> float:
        """Collective: one iteration; the L1 change of the ranks over every vertex."""
        from mailrail._mpi import MPI
        from mailrail.containers import Map

        dangling = self.comm.allreduce(float(self.ranks[self.degree == 0].sum()), op=MPI.SUM)
        share = np.divide(self.ranks, self.degree, out=np.zeros_like(self.ranks), where=self.degree > 0)
        sums = Map(self.rail, np.uint64, np.float64)  # a new one per iteration, as YGM's spmv returns
        sums.reduce(self.targets, share[self.sources], "add")
        sums.barrier()
        arrived = sums.local()
        keys = np.asarray(arrived.column("key").to_numpy(), dtype=np.uint64)
        incoming = np.zeros(len(self.vertices))
        incoming[np.searchsorted(self.vertices, keys)] = arrived.column("value").to_numpy()
        updated = (1 - damping) / self.count + damping * (incoming + dangling / self.count)
        change = self.comm.allreduce(float(np.abs(updated - self.ranks).sum()), op=MPI.SUM)
        self.ranks = updated
        self.iterations += 1
        return float(change)

    def top(self, k: int) -> list[tuple[int, float]]:
        """Collective: the *k* highest-ranked vertices (ties: the smaller id first), on every rank."""
        order = np.lexsort((self.vertices, -self.ranks))[:k]
        candidates = [
            pair
            for part in self.comm.allgather(list(zip(self.vertices[order].tolist(), self.ranks[order].tolist())))
            for pair in part
        ]
        return sorted(candidates, key=lambda pair: (-pair[1], pair[0]))[:k]


# -- the independent check ----------------------------------------------------------------------------------------


def pagerank_directly(
    edges: np.ndarray, directed: bool, damping: float, iterations: int
) -> tuple[np.ndarray, np.ndarray]:
    """The vertices and their ranks after *iterations*, by power iteration on a scipy sparse matrix, in this
    process: the same definition, computed another way (a column-stochastic matrix, one product per iteration)."""
    from scipy.sparse import csr_matrix

    vertices, index = np.unique(edges.reshape(-1), return_inverse=True)
    index = index.reshape(-1, 2)
    u, v = index[:, 0], index[:, 1]
    if not directed:
        u, v = np.concatenate([u, v]), np.concatenate([v, u])
    n = len(vertices)
    out_degree = np.bincount(u, minlength=n).astype(np.float64)
    matrix = csr_matrix((1.0 / out_degree[u], (v, u)), shape=(n, n))  # duplicates are summed
    ranks = np.full(n, 1.0 / n)
    dangling = out_degree == 0
    for _ in range(iterations):
        ranks = (1 - damping) / n + damping * (matrix @ ranks + ranks[dangling].sum() / n)
    return vertices, ranks


# -- the command --------------------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    if args.verify:
        problem = missing_module("scipy.sparse", "app pagerank --verify", "apps")
        if problem:
            return usage_error("app pagerank", problem)
    if args.columns and len(args.columns.split(",")) != 2:
        return usage_error("app pagerank", f"--columns takes two column names U,V, got {args.columns!r}")
    checked = checked_rail_options("app pagerank", args)
    if checked is None:
        return 2
    options, _ = checked
    from mailrail._mpi import MPI
    from mailrail.rail import MailRail  # MailRail starts MPI: imported when the run begins, not to parse flags

    comm = MPI.COMM_WORLD
    with MailRail(comm, **options) as rail:
        try:
            edges = read_edges(rail, args)
        except EdgeFileError as error:
            return usage_error("app pagerank", str(error), comm)
        comm.Barrier()
        start = time.perf_counter()
        pagerank = PageRank(rail, edges, args.directed)
        changes = []
        for _ in range(args.iterations):
            changes.append(pagerank.step(args.damping))
            if changes[-1] < args.tolerance:
                break
        seconds = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
        top = pagerank.top(args.top)
        total = comm.allreduce(float(pagerank.ranks.sum()), op=MPI.SUM)
        edge_count = comm.allreduce(len(edges))
    verified, largest_error = None, None
    if args.verify:
        all_edges = comm.gather(edges)
        vertices = comm.gather(pagerank.vertices)
        ranks = comm.gather(pagerank.ranks)
        if comm.Get_rank() == 0:
            expected_vertices, expected = pagerank_directly(
                np.concatenate(all_edges), args.directed, args.damping, pagerank.iterations
            )
            got_vertices = np.concatenate(vertices)
            order = np.argsort(got_vertices)
            got = np.concatenate(ranks)[order]
            same_vertices = np.array_equal(got_vertices[order], expected_vertices.astype(np.uint64))
            largest_error = (
                float(np.max(np.abs(got - expected) / np.maximum(expected, 1e-15))) if same_vertices else None
            )
            verified = bool(same_vertices and largest_error is not None and largest_error <= RELATIVE_TOLERANCE)
        verified = comm.bcast(verified)
    if comm.Get_rank() == 0:
        document = {
            "app": "pagerank",
            "ranks": comm.Get_size(),
            "mpi": mpi_library(),
            "edges": edge_count,
            "vertices": pagerank.count,
            "directed": args.directed,
            "damping": args.damping,
            "iterations": pagerank.iterations,
            "changes": changes,
            "rank_sum": total,
            "top": [{"vertex": vertex, "rank": rank} for vertex, rank in top],
            "runtime_s": seconds,
            "verified": verified,
            "largest_relative_error": largest_error,
            "config": dict(options, edges=args.edges, tolerance=args.tolerance, columns=args.columns),
        }
        write_json(args.json, document)
        print(
            f"app pagerank: {document['ranks']} ranks, {pagerank.count:,} vertices, {edge_count:,} edges "
            f"({'directed' if args.directed else 'undirected'}), damping {args.damping}, {pagerank.iterations} "
            f"iterations (last change {changes[-1]:.3g}), ranks summing to {total:.12f}, in {seconds:.3f} s"
        )
        print(format_table(["place", "vertex", "rank"], [(i, v, f"{r:.9f}") for i, (v, r) in enumerate(top, 1)]))
        if verified is not None:
            print(
                f"verified (largest relative error {largest_error:.2e})"
                if verified
                else f"WRONG RESULT (largest relative error {largest_error})"
            )
    return 1 if verified is False else 0
