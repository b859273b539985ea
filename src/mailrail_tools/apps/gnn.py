"""``mailrail app gnn``: one layer of GNN feature aggregation (the mean of each vertex's neighbours' features).

An R-MAT power-law graph of ``2**--scale`` vertices (the same generator as ``app cc``; undirected, without
self loops or repeated edges), each vertex with ``--features`` float32 features, a fixed function of the
seed and the vertex that any rank can compute.  Vertices are block-partitioned over the ranks, each
with its adjacency list.  A layer computes, for every vertex a rank owns, the mean of its neighbours'
feature vectors: the rank fetches the features of the distinct vertices its edges reach (its *halo*,
as DistDGL does) from their owners, then multiplies by its mean operator (a sparse matrix whose rows
hold ``1 / degree``).  A hub's features are wanted by every rank, and its owner answers them all: the
incast of GNN training.

On MailRail the halo is fetched with :meth:`Array.gather <mailrail.containers.array.Array.gather>`:
requests travel to the owners, whose handlers answer at once.  The peer does it bulk-synchronously, as
a user of mpi4py would: the requests in one ``Alltoallv``, the owners answer, the replies in another.

Run: ``mailrail run -n 4 app gnn --scale 16 --modes none,rank,node,adaptive --baseline alltoallv``.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from mailrail import Rail
from mailrail.config import Config
from mailrail.containers.array import Array
from mailrail.containers.partition import BlockPartitioner, hash_words

from ..alltoallv import alltoallv_exchange as exchange
from ..flags import int_in, missing_module, usage_error
from ..memory import memory_problem
from .frame import add_app_arguments, app_rail_options, run_app
from .graph import add_rmat_arguments, rmat_edges

#: Vertex ids travel as int64 and pairs as one 64-bit key: R-MAT ids are drawn below 2**31.
FEATURES_MAX = 1 << 16
#: Up to this many R-MAT edges, every rank regenerates the whole graph for its check (else its own edges).
WHOLE_GRAPH_CHECK_EDGES = 1 << 21
#: Bytes per edge on the rank that holds it at set-up: both directions, exchanged, keys, CSR, reference.
BYTES_PER_EDGE = 112
#: Replies a datagram holds (fewer for vectors above 16 KiB: a datagram stays at most 1 MiB).
REPLIES_PER_DATAGRAM = 256
#: How many of the highest in-degrees the workload lists.
TOP_VERTICES = 5
LOW32 = np.int64(0xFFFFFFFF)


#: The app's own receive and send pools (each rank), unless chosen.
RAIL_POOLS = {"recv_pool_slots": 64, "send_pool_slots": 32}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_rmat_arguments(parser)
    parser.add_argument(
        "--features",
        type=int_in(1, FEATURES_MAX),
        default=64,
        help=f"float32 features per vertex, 1..{FEATURES_MAX} (default 64)",
    )
    parser.add_argument(
        "--gather-only",
        action="store_true",
        help="time the halo's gather alone, not the mean: Array.gather against its Alltoallv peer",
    )
    add_app_arguments(
        parser,
        {
            "datagram_size": f"8 B and up to {REPLIES_PER_DATAGRAM} replies (at --features), at most 1 MiB of them",
            **RAIL_POOLS,
        },
    )


def reply_size(features: int) -> int:
    """Bytes of one gather reply on the rail: the asker's position (int64) and the feature vector."""
    return 8 + 4 * features


def vertex_features(vertices: np.ndarray, features: int, seed: int) -> np.ndarray:
    """``(n, features)`` float32 in [-1, 1): a hash of (seed, vertex, feature), so any rank computes any
    vertex's vector and the reference needs no communication.  Multiples of 2**-23: exact in float32."""
    first = vertices.astype(np.uint64) * np.uint64(features)
    words = (first[:, None] + np.arange(features, dtype=np.uint64)).astype(np.uint64)
    words ^= hash_words(np.array([[seed]], dtype=np.uint64))[0]
    hashes = hash_words(words.reshape(-1, 1)).reshape(len(vertices), features)
    return ((hashes >> np.uint64(40)).astype(np.float32) * np.float32(2**-23) - np.float32(1)).astype(np.float32)


class FeatureAggregation:
    """One rank's vertices, their adjacency, their features and the layer's output (see the module doc)."""

    name = "gnn"

    def __init__(self, comm: Any, args: argparse.Namespace) -> None:
        self.comm, self.rank, self.ranks = comm, comm.Get_rank(), comm.Get_size()
        self.scale, self.edge_factor, self.features, self.seed = args.scale, args.edge_factor, args.features, args.seed
        self.vertices = 1 << args.scale
        self.blocks = BlockPartitioner(self.vertices, self.ranks)
        self.start, self.owned = self.blocks.start(self.rank), self.blocks.count(self.rank)
        self.block = vertex_features(np.arange(self.start, self.start + self.owned), self.features, self.seed)
        self._build_adjacency(rmat_edges(args.scale, args.edge_factor, args.seed, self.rank, self.ranks))
        self.aggregated = int(comm.allreduce(len(self.columns)))  # directed edges: both ends of each
        self.gather_only = bool(args.gather_only)
        if self.gather_only:  # the rate of the gather: feature vectors fetched per second, over all ranks
            self.rate = ("vectors_per_s", float(comm.allreduce(len(self.halo))))
            self.expected = vertex_features(self.halo, self.features, self.seed)
            self.output = np.zeros((len(self.halo), self.features), dtype=np.float32)
        else:
            self.rate = ("edges_per_s", float(self.aggregated))
            self.expected = self._reference()
            self.output = np.zeros((self.owned, self.features), dtype=np.float32)
        self._arrays: dict[int, Array] = {}  # one Array per rail (mode), made in its first trial

    # -- set-up (not timed) -------------------------------------------------

    def _build_adjacency(self, edges: np.ndarray) -> None:
        """Both directions of every edge at the owner of its first vertex; the halo and the mean operator."""
        from scipy.sparse import csr_matrix  # type: ignore[import-untyped]

        both = np.concatenate([edges, edges[:, ::-1]])
        both = both[both[:, 0] != both[:, 1]]  # a vertex is not its own neighbour
        received, _ = exchange(self.comm, self.blocks.owner(both[:, 0]), both)
        # Ids are below 2**31: a pair is one int64 key, and sorted keys group by owned vertex.
        keys = np.unique((received[:, 0] << 32) | received[:, 1])
        local = (keys >> 32) - self.start
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(local, minlength=self.owned))])
        #: The distinct vertices this rank's edges reach, ascending (so also grouped by owner).
        self.halo, self.columns = np.unique(keys & LOW32, return_inverse=True)
        self.halo_owners = self.blocks.owner(self.halo)
        self.halo_offsets = self.halo - self.blocks.offsets[self.halo_owners]
        degree = np.diff(self.indptr)
        weights = np.repeat((1 / np.maximum(degree, 1)).astype(np.float32), degree)
        self.mean = csr_matrix((weights, self.columns, self.indptr), shape=(self.owned, len(self.halo)))

    def _reference(self) -> np.ndarray:
        """The mean of each owned vertex's neighbours' features, in float64, from edges this rank lists itself.

        Up to :data:`WHOLE_GRAPH_CHECK_EDGES` the rank regenerates the whole graph from the seed (one
        rank's share at one rank: the same graph), so the set-up's exchange is checked too; beyond, it
        takes the neighbours from its own adjacency.  Sums are ``np.add.reduceat`` over the edges sorted
        by vertex, not the sparse product the layer uses.
        """
        if (self.edge_factor << self.scale) <= WHOLE_GRAPH_CHECK_EDGES:
            edges = rmat_edges(self.scale, self.edge_factor, self.seed, 0, 1)
            both = np.concatenate([edges, edges[:, ::-1]])
            mine = (both[:, 0] >= self.start) & (both[:, 0] < self.start + self.owned) & (both[:, 0] != both[:, 1])
            keys = np.unique((both[mine, 0] << 32) | both[mine, 1])
            rows, neighbours = (keys >> 32) - self.start, keys & LOW32
        else:
            rows = np.repeat(np.arange(self.owned), np.diff(self.indptr))
            neighbours = self.halo[self.columns]
        sums = np.zeros((self.owned, self.features))
        for begin in range(0, len(rows), 1 << 16):  # in pieces: a piece's features stay small
            piece = rows[begin : begin + (1 << 16)]
            starts = np.flatnonzero(np.concatenate([[True], piece[1:] != piece[:-1]]))
            found = vertex_features(neighbours[begin : begin + (1 << 16)], self.features, self.seed)
            sums[piece[starts]] += np.add.reduceat(found.astype(np.float64), starts, axis=0)
        degree = np.bincount(rows, minlength=self.owned)
        return sums / np.maximum(degree, 1)[:, None]

    # -- the layer, shared by both versions -----------------------------------

    def aggregate(self, halo_features: np.ndarray) -> None:
        """The layer's output from the halo's features: one sparse product (each row holds 1 / degree);
        with ``--gather-only``, the halo's features themselves."""
        self.output[:] = halo_features if self.gather_only else self.mean @ halo_features

    # -- MailRail: Array.gather -------------------------------------------------

    def features_on(self, rail: Rail) -> Array:
        """The features as an :class:`~mailrail.containers.array.Array` on *rail*, made (collectively) and filled
        by each rank in its own block in the first trial on it."""
        array = self._arrays.get(id(rail))
        if array is None:
            array = self._arrays[id(rail)] = Array(rail, self.vertices, np.dtype((np.float32, self.features)))
            start, view = array.local_view()
            view[:] = self.block
        return array

    def run_mailrail(self, rail: Rail) -> dict[str, Any]:
        self.output[:] = 0  # a value never gathered must not pass as the last trial's
        array = self.features_on(rail)
        sent_before = rail.stats()["messages_sent"]
        self.aggregate(array.gather(self.halo))
        return self.figures(rail.stats()["messages_sent"] - sent_before)

    # -- the peer: requests and replies in two Alltoallv -------------------------

    def run_alltoallv(self) -> dict[str, Any]:
        self.output[:] = 0
        # The halo is ascending, so grouped by owner: replies come back in rank order, in the halo's order.
        asked, incoming = exchange(self.comm, self.halo_owners, self.halo_offsets)
        replies, _ = exchange(self.comm, np.repeat(np.arange(self.ranks), incoming), self.block[asked])
        self.aggregate(replies)
        return self.figures(2 * (self.ranks - 1))  # two exchanges (counted as app moe counts its own)

    def figures(self, messages: int) -> dict[str, Any]:
        return {
            "rounds": 1,
            "messages": self.comm.allreduce(messages),
            "bytes": (8 + 4 * self.features) * self.comm.allreduce(len(self.halo)),
        }

    # -- checks ----------------------------------------------------------------

    def verify(self) -> bool:
        """Collective: every owned vertex's mean equals the float64 reference (float32: rtol and atol 1e-5);
        with ``--gather-only``, every gathered vector is exactly its vertex's."""
        from mailrail._mpi import MPI

        if self.gather_only:
            close = bool(np.array_equal(self.output, self.expected))
        else:
            close = bool(np.allclose(self.output, self.expected, rtol=1e-5, atol=1e-5))
        return bool(self.comm.allreduce(close, op=MPI.LAND))

    def incast(self) -> dict[str, Any]:
        """Collective: who asks whom for what: requests per owner rank with and without the halo's
        deduplication, and the vertices wanted most."""
        edge_requests = np.bincount(self.halo_owners[self.columns], minlength=self.ranks)
        requests = np.bincount(self.halo_owners, minlength=self.ranks)
        edge_requests, requests = self.comm.allreduce(edge_requests), self.comm.allreduce(requests)
        in_degree = self.comm.allreduce(np.bincount(self.halo[self.columns], minlength=self.vertices))
        top = np.argsort(-in_degree, kind="stable")[:TOP_VERTICES]
        return {
            "requests_per_rank": requests.tolist(),
            "requests_busiest_over_mean": float(requests.max() / max(requests.mean(), 1e-300)),
            "edge_requests_per_rank": edge_requests.tolist(),
            "edge_requests_busiest_over_mean": float(edge_requests.max() / max(edge_requests.mean(), 1e-300)),
            "top_vertices": top.tolist(),
            "top_in_degrees": in_degree[top].tolist(),
            "mean_in_degree": float(in_degree.mean()),
            "busiest_rank": int(np.argmax(requests)),
        }

    def workload(self) -> dict[str, Any]:
        incast = self.incast()
        return {
            "rmat_scale": self.scale,
            "edge_factor": self.edge_factor,
            "features": self.features,
            "seed": self.seed,
            "vertices": self.vertices,
            "aggregated_edges": self.aggregated,
            "timed": "the halo's gather" if self.gather_only else "the gather and the mean",
            "halo_per_rank": self.comm.allgather(len(self.halo)),
            "top_in_degrees": incast["top_in_degrees"],
            "mean_in_degree": round(incast["mean_in_degree"], 2),
            "requests_busiest_over_mean": round(incast["requests_busiest_over_mean"], 3),
            "edge_requests_busiest_over_mean": round(incast["edge_requests_busiest_over_mean"], 3),
            "checked_against": self.checked_against(),
        }

    def checked_against(self) -> str:
        if self.gather_only:
            return "every vertex's features, computed from the seed"
        if (self.edge_factor << self.scale) <= WHOLE_GRAPH_CHECK_EDGES:
            return "the whole graph regenerated by every rank"
        return "each rank's own edges"

    def summary(self) -> dict[str, Any]:
        incast = self.incast()
        return {
            "busiest_rank": incast["busiest_rank"],
            "requests_per_rank": incast["requests_per_rank"],
            "edge_requests_per_rank": incast["edge_requests_per_rank"],
            "top_vertices": incast["top_vertices"],
        }


def run(args: argparse.Namespace) -> int:
    # Every rank checks for scipy (the mean operator is a sparse matrix): all stop alike, none waits.
    problem = missing_module("scipy.sparse", "app gnn", "apps")
    if problem:
        return usage_error("app gnn", problem)
    record = reply_size(args.features)
    rail_defaults = {
        "datagram_size": 8 + record * max(1, min(REPLIES_PER_DATAGRAM, (1 << 20) // record)),
        **RAIL_POOLS,
    }
    checked = app_rail_options("gnn", args, rail_defaults)
    if checked is None:
        return 2
    modes, options = checked
    datagram_size = Config.from_env(
        warn=False, **options
    ).datagram_size  # a flag, MAILRAIL_DATAGRAM_SIZE or the default
    if datagram_size < 8 + record:
        return usage_error(
            "app gnn",
            f"a {datagram_size}-byte datagram cannot carry one reply of {args.features} features "
            f"({8 + record} bytes with its segment header): raise --datagram-size",
        )
    from mailrail._mpi import MPI

    comm = MPI.COMM_WORLD
    edges = args.edge_factor << args.scale
    vertices_per_rank = -(-(1 << args.scale) // comm.Get_size())
    problem = memory_problem(
        comm,
        BYTES_PER_EDGE * -(-edges // comm.Get_size())
        # features: the block (twice: the Array's per mode), the halo's, the output and its reference
        + 4 * args.features * (vertices_per_rank * (2 + len(modes) + 2) + min(1 << args.scale, 2 * edges)),
        f"--scale {args.scale}, --edge-factor {args.edge_factor} and --features {args.features}",
    )
    if problem:
        return usage_error("app gnn", problem, comm)
    return run_app(comm, FeatureAggregation(comm, args), args, modes, options)
