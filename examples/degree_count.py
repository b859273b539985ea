"""Degree count of a random power-law graph with a distributed CountingSet, and its five hubs.

Each rank draws its share of the edges (R-MAT, the Graph500 generator's skew: a few hub vertices
touch many edges) and adds both endpoints of every edge to one ``CountingSet``: a vertex's count is
its degree.  No owner arithmetic, no receive loop: the set's owners count, hub keys are combined on
each sender before they leave, and ``top(5)`` answers on every rank.  ``--verify``: rank 0
regenerates every rank's edges and counts them with ``numpy.bincount``.

Run: ``mailrail run -n 4 -- python examples/degree_count.py --scale 16``
"""

import argparse

import numpy as np
from mpi4py import MPI

from mailrail import MailRail
from mailrail.containers import CountingSet

parser = argparse.ArgumentParser()
parser.add_argument("--scale", type=int, default=14, help="2**scale vertices")
parser.add_argument("--edges-per-rank", type=int, default=100_000)
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--verify", action="store_true")
args = parser.parse_args()


def edges_of(rank: int) -> np.ndarray:
    """R-MAT edges of one rank, as a (n, 2) array of vertex ids (a, b, c, d = 0.57, 0.19, 0.19, 0.05)."""
    rng = np.random.default_rng([args.seed, rank])
    edges = np.zeros((args.edges_per_rank, 2), dtype=np.uint64)
    for bit in range(args.scale):
        draw = rng.random(args.edges_per_rank)
        source_bit = draw >= 0.57 + 0.19  # quadrants c and d
        target_bit = ((draw >= 0.57) & (draw < 0.76)) | (draw >= 0.95)  # quadrants b and d
        edges[:, 0] |= source_bit.astype(np.uint64) << np.uint64(bit)
        edges[:, 1] |= target_bit.astype(np.uint64) << np.uint64(bit)
    return edges


with MailRail(MPI.COMM_WORLD) as rail:
    degrees = CountingSet(rail, np.uint64)
    degrees.add(edges_of(rail.rank).ravel())
    hubs, hub_degrees = degrees.top(5)
    vertices = degrees.size()
    if rail.rank == 0:
        print(f"{vertices} vertices with an edge; the hubs (vertex: degree):")
        print(", ".join(f"{v}: {d}" for v, d in zip(hubs.tolist(), hub_degrees.tolist())))
        if args.verify:
            direct = np.bincount(np.concatenate([edges_of(r).ravel() for r in range(rail.size)]).astype(np.intp))
            assert vertices == np.count_nonzero(direct)
            assert hub_degrees.tolist() == sorted(direct.tolist(), reverse=True)[:5]
            assert all(direct[v] == d for v, d in zip(hubs.tolist(), hub_degrees.tolist()))
            print("verified")
