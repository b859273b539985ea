"""Connected components of a random graph with a distributed DisjointSet.

Each rank draws its share of the edges and unions their endpoints (asynchronously, in one batch);
``num_sets()`` is collective.  ``--verify``: rank 0 regenerates every rank's edges, runs a
single-process union-find, and compares the number of components and each vertex's component.

Run: ``mailrail run -n 4 -- python examples/connected_components.py --vertices 100000``
"""

import argparse

import numpy as np
from mpi4py import MPI

from mailrail import MailRail
from mailrail.containers import DisjointSet

parser = argparse.ArgumentParser()
parser.add_argument("--vertices", type=int, default=20_000)
parser.add_argument("--edges-per-rank", type=int, default=5_000)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--verify", action="store_true")
args = parser.parse_args()


def edges_of(rank: int) -> np.ndarray:
    rng = np.random.default_rng([args.seed, rank])
    return rng.integers(0, args.vertices, size=(args.edges_per_rank, 2), dtype=np.int64)


def components(edges: np.ndarray, vertices: int) -> np.ndarray:
    """Single-process union-find (the check): each vertex's smallest vertex in its component."""
    parent = np.arange(vertices)

    def root(v: int) -> int:
        while parent[v] != v:
            parent[v] = parent[parent[v]]
            v = parent[v]
        return v

    for a, b in edges.tolist():
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    return np.array([root(v) for v in range(vertices)])


with MailRail(MPI.COMM_WORLD) as rail:
    sets = DisjointSet(rail, np.int64)
    everyone = np.arange(args.vertices, dtype=np.int64)
    mine = everyone[rail.rank :: rail.size]
    sets.union(mine, mine)  # every vertex is an item, isolated ones too
    edges = edges_of(rail.rank)
    sets.union(edges[:, 0], edges[:, 1])
    count = sets.num_sets()
    roots = sets.find(everyone) if args.verify else None  # collective: every rank asks
    if rail.rank == 0:
        print(f"{count} connected components among {args.vertices} vertices")
        if args.verify:
            expected = components(np.concatenate([edges_of(r) for r in range(rail.size)]), args.vertices)
            assert count == len(np.unique(expected)), (count, len(np.unique(expected)))
            # Same partition: vertices share a root exactly when they share a component.
            pairs = np.unique(np.stack([roots, expected], axis=1), axis=0)
            assert len(pairs) == count, "the components differ"
            print("verified")
