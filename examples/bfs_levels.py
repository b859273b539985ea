"""Breadth-first search levels on a random graph, with MailRail: the program of the tutorial.

Run: ``mailrail run -n 4 -- python examples/bfs_levels.py --vertices 100000 --degree 8``

Vertex ``v`` lives on rank ``v % ranks``.  The ranks first send every edge to
the owners of its two endpoints, then search level by level: the owners of the
frontier tell their neighbours' owners "you are at level L + 1", and a
``barrier()`` ends each level.  Rank 0 checks every level against scipy.
"""

from __future__ import annotations

import argparse

import numpy as np
from mpi4py import MPI

from mailrail import MailRail
from mailrail.coalesce import Coalescer

#: One record type for both phases: an edge (u, v), or a visit (vertex, level).
PAIR = np.dtype([("a", "<u4"), ("b", "<u4")])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vertices", type=int, default=100_000)
    parser.add_argument("--degree", type=int, default=8, help="edges per vertex, on average")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rank, ranks = comm.Get_rank(), comm.Get_size()

    # The same random graph on any number of ranks: each rank keeps every ranks-th edge.
    drawn = np.random.default_rng(args.seed).integers(0, args.vertices, (args.vertices * args.degree, 2))
    edges = np.empty(len(drawn[rank::ranks]), PAIR)
    edges["a"], edges["b"] = drawn[rank::ranks, 0], drawn[rank::ranks, 1]

    owned = np.arange(rank, args.vertices, ranks)  # the vertices this rank owns, in order
    level = np.full(len(owned), -1)  # -1: not reached yet
    with MailRail(comm, datagram_size=1 << 16) as rail:
        # 1. Adjacency: each edge goes to the owners of both its ends (both directions).
        arrived: list[np.ndarray] = []
        coalescer = Coalescer(rail, PAIR, lambda source, records: arrived.append(records.copy()))
        reverse = np.empty_like(edges)
        reverse["a"], reverse["b"] = edges["b"], edges["a"]
        both = np.concatenate([edges, reverse])
        coalescer.send(both["a"] % ranks, both)
        coalescer.barrier()  # every edge has reached its owner
        comm.Barrier()  # and no rank sends visits before every rank has left that barrier
        mine = np.concatenate(arrived) if arrived else np.empty(0, PAIR)
        mine = mine[np.argsort(mine["a"], kind="stable")]  # grouped by owned vertex: a CSR
        starts = np.searchsorted(mine["a"], owned)
        lengths = np.searchsorted(mine["a"], owned, side="right") - starts

        def neighbours_of(vertices: np.ndarray) -> np.ndarray:
            """Every neighbour of the owned *vertices* (local indices), without a Python loop."""
            counts = lengths[vertices]
            first = starts[vertices] - (np.cumsum(counts) - counts)
            return mine["b"][np.repeat(first, counts) + np.arange(counts.sum())]

        # 2. The search: the frontier's neighbours hear their level; a barrier ends each level.
        def visit(source: int, records: np.ndarray) -> None:
            local = records["a"] // ranks
            new = level[local] == -1
            # Each record carries its level: a rank still in a level's barrier may already get
            # visits of the next level from a rank that left it.
            level[local[new]] = records["b"][new]

        coalescer = Coalescer(rail, PAIR, visit)
        level[owned == 0] = 0  # vertex 0, on rank 0, is the root
        depth = 0
        while comm.allreduce(np.count_nonzero(level == depth)):
            neighbours = neighbours_of(np.flatnonzero(level == depth))
            visits = np.empty(len(neighbours), PAIR)
            visits["a"], visits["b"] = neighbours, depth + 1
            coalescer.send(neighbours % ranks, visits)
            coalescer.barrier()  # this level's visits are all in
            depth += 1

    # 3. Check: rank 0 runs scipy's breadth-first search on a gathered copy.
    levels = comm.gather(level)
    graph_edges = comm.gather(edges)
    if rank == 0:
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import shortest_path

        all_edges = np.concatenate(graph_edges)
        graph = coo_matrix(
            (np.ones(len(all_edges)), (all_edges["a"], all_edges["b"])), shape=(args.vertices, args.vertices)
        )
        distance = shortest_path(graph, directed=False, unweighted=True, indices=0)
        expected = np.where(np.isinf(distance), -1, distance).astype(int)
        found = np.empty(args.vertices, dtype=int)
        for owner, part in enumerate(levels):
            found[owner::ranks] = part
        correct = np.array_equal(found, expected)
        print(
            f"{np.count_nonzero(found >= 0)} of {args.vertices} vertices reached, {depth} levels; "
            + ("verified" if correct else "WRONG"),
            flush=True,
        )
        return 0 if correct else 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
