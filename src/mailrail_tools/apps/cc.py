"""``mailrail app cc``: connected components by asynchronous min-label propagation.

Vertex ``v`` lives on rank ``v mod ranks`` with its adjacency list.  Every
vertex starts labelled with its own id and sends that label to its neighbours'
owners; a rank that receives a smaller label for a vertex lowers it and sends
the new label on, until nothing changes: every vertex then carries the smallest
id of its component.  Labels travel as 8-byte records ``(vertex, label)``
packed into datagrams by a :class:`~mailrail.coalesce.Coalescer`, as in YGM's
connected components; ``barrier()`` detects the end.  The peer does the same
propagation in supersteps of ``Alltoallv``.

Run: ``mailrail run -n 4 app cc --scale 16 --modes none,rank,node --baseline alltoallv``.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from mailrail import Rail

from ..alltoallv import alltoallv_exchange as exchange
from ..flags import missing_module, usage_error
from ..memory import memory_problem
from .frame import add_app_arguments, app_rail_options, run_app
from .graph import EdgeFileError, add_rmat_arguments, read_edges, rmat_edges

LOW32 = np.uint64(0xFFFFFFFF)
#: Every label is checked against scipy up to this many vertices (2**20); beyond, the labels are
#: checked for consistency along every edge.
EXACT_CHECK_VERTICES = 1 << 20
#: Vertex ids travel as 32-bit halves of a record; R-MAT ids are drawn below 2**31.
#: Bytes per edge on the rank that holds it: both directions, the owners' copies, the sorted keys.
BYTES_PER_EDGE = 96
#: Bytes per edge on rank 0 for the exact check: the gathered edges and scipy's sparse matrix.
REFERENCE_BYTES_PER_EDGE = 40
#: 128 KiB datagrams (16,384 labels) and a send pool that holds a rank's bursts, unless chosen.
RAIL_DEFAULTS = {"datagram_size": 1 << 17, "recv_pool_slots": 64, "send_pool_slots": 256}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_rmat_arguments(parser)
    parser.add_argument("--edges", metavar="FILE", help="read an edge list instead: 'u v' lines (.gz too) or .npy")
    add_app_arguments(parser, RAIL_DEFAULTS)


def parse_arguments(argv: list[str]) -> argparse.Namespace:
    """The app's options from *argv* (for programs that import it; see examples/)."""
    parser = argparse.ArgumentParser(prog="mailrail app cc")
    add_arguments(parser)
    return parser.parse_args(argv)


class ConnectedComponents:
    """One rank's part of the graph and its labels (see the module doc)."""

    name = "cc"

    def __init__(self, comm: Any, args: argparse.Namespace) -> None:
        from mailrail._mpi import MPI

        self.comm, self.rank, self.ranks = comm, comm.Get_rank(), comm.Get_size()
        if args.edges:
            edges = read_edges_collectively(comm, args.edges)
            self.source = {"edges": args.edges}
            top = comm.allreduce(int(edges.max()) if len(edges) else -1, op=MPI.MAX)
            if top >= 1 << 32:
                raise EdgeFileError(f"{args.edges}: vertex id {top} does not fit in 32 bits")
            self.vertices = top + 1
        else:
            edges = rmat_edges(args.scale, args.edge_factor, args.seed, self.rank, self.ranks)
            self.source = {"rmat_scale": args.scale, "edge_factor": args.edge_factor, "seed": args.seed}
            self.vertices = 1 << args.scale
        self.input_edges = comm.allreduce(len(edges))
        self.rate = ("edges_per_s", float(self.input_edges))
        self._build_adjacency(edges)
        self.expected = self._reference_labels(edges) if self.vertices <= EXACT_CHECK_VERTICES else None
        self.labels = np.zeros(self.owned, dtype=np.uint64)
        self._lowered = np.zeros(self.owned, dtype=bool)  # marked by lower(), cleared by take_lowered()

    # -- set-up (not timed) -------------------------------------------------

    def _build_adjacency(self, edges: np.ndarray) -> None:
        """Both directions of every edge at the owner of its first vertex, as CSR over owned vertices."""
        both = np.concatenate([edges, edges[:, ::-1]]).astype(np.uint64)
        both = both[both[:, 0] != both[:, 1]]  # a self loop never changes a label
        received, _ = exchange(self.comm, both[:, 0] % np.uint64(self.ranks), both)
        # Duplicate edges carry nothing new; ids fit in 32 bits, so a pair is one 64-bit key (sorting
        # keys is much faster than np.unique(axis=0) on rows), and sorted keys group by owned vertex.
        keys = np.unique((received[:, 0] << np.uint64(32)) | received[:, 1])
        self.owned = len(range(self.rank, self.vertices, self.ranks))
        local = ((keys >> np.uint64(32)) // np.uint64(self.ranks)).astype(np.int64)
        self.indptr = np.concatenate([[0], np.cumsum(np.bincount(local, minlength=self.owned))])
        self.neighbours = keys & LOW32

    def _reference_labels(self, edges: np.ndarray) -> np.ndarray | None:
        """Rank 0: the smallest vertex id of every vertex's component, from scipy on a gathered copy."""
        gathered = self.comm.gather(edges)
        if self.rank != 0:
            return None
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        allr = np.concatenate(gathered) if gathered else np.empty((0, 2), np.int64)
        graph = coo_matrix(
            (np.ones(len(allr), np.int8), (allr[:, 0], allr[:, 1])), shape=(self.vertices, self.vertices)
        )
        count, component = connected_components(graph, directed=False)
        smallest = np.full(count, self.vertices, dtype=np.uint64)
        np.minimum.at(smallest, component, np.arange(self.vertices, dtype=np.uint64))
        return smallest[component]

    # -- the propagation, shared by both versions ---------------------------

    def reset(self) -> np.ndarray:
        """Start labels, and the owned vertices whose label must travel.

        A vertex knows its neighbours' ids, which are their first labels, so it
        starts at the smallest of its own and theirs: the first superstep,
        without messages.  Only a vertex that took a neighbour's smaller id has
        news for its neighbours; the others' ids are what those started with.
        """
        own = np.arange(self.rank, self.vertices, self.ranks, dtype=np.uint64)
        self.labels[:] = own
        linked = np.flatnonzero(np.diff(self.indptr))
        if len(linked):
            nearest = np.minimum.reduceat(self.neighbours, self.indptr[linked])
            self.labels[linked] = np.minimum(own[linked], nearest)
        self.rounds = self.messages = self.records = 0
        return np.flatnonzero(self.labels < own)

    def outgoing(self, owned: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Destinations and ``(vertex, label)`` records telling the neighbours of *owned* their labels."""
        starts, ends = self.indptr[owned], self.indptr[owned + 1]
        lengths = ends - starts
        if not lengths.sum():
            return np.empty(0, np.uint64), np.empty(0, np.uint64)
        # Positions of every neighbour of every vertex in *owned*, without a Python loop.
        offsets = np.repeat(starts - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
        targets = self.neighbours[np.arange(lengths.sum()) + offsets]
        labels = np.repeat(self.labels[owned], lengths)
        return targets % np.uint64(self.ranks), targets | (labels << np.uint64(32))

    def lower(self, records: np.ndarray) -> None:
        """Apply received ``(vertex, label)`` records and mark the owned vertices whose label dropped."""
        owned = ((records & LOW32) // np.uint64(self.ranks)).astype(np.intp)
        offered = records >> np.uint64(32)
        before = self.labels[owned]
        np.minimum.at(self.labels, owned, offered)
        self._lowered[owned[self.labels[owned] < before]] = True

    def any_lowered(self) -> bool:
        return bool(self._lowered.any())

    def take_lowered(self) -> np.ndarray:
        """The vertices marked since the last call, each once, in order (marks cost less than np.unique)."""
        lowered = np.flatnonzero(self._lowered)
        self._lowered[lowered] = False
        return lowered

    # -- MailRail: asynchronous ---------------------------------------------

    def run_mailrail(self, rail: Rail) -> dict[str, Any]:
        from mailrail.coalesce import Coalescer  # MailRail starts MPI: imported when the run begins, not to parse flags

        first = self.reset()

        def arrived(source: int, records: np.ndarray) -> None:
            self.lower(records)  # a label drops at once; its news leaves when the rank is quiet

        def forward_until_quiet() -> None:
            # Lowered labels leave whenever nothing more is waiting, not per datagram: a vertex
            # then sends the smallest of all the labels that came meanwhile, once.
            while True:
                while coalescer.poll():
                    pass
                if not self.any_lowered():
                    return
                coalescer.send(*self.outgoing(self.take_lowered()))

        from mailrail._mpi import MPI

        coalescer = Coalescer(rail, np.uint64, arrived)
        sent_before = rail.stats()["messages_sent"]
        coalescer.send(*self.outgoing(first))
        while True:  # what arrives inside a barrier waits to be forwarded and starts the next round
            self.rounds += 1
            forward_until_quiet()
            coalescer.barrier()
            if not self.comm.allreduce(self.any_lowered(), op=MPI.LOR):
                break
        self.messages = rail.stats()["messages_sent"] - sent_before
        self.records = coalescer.records_sent
        return self.figures()

    # -- the peer: bulk-synchronous supersteps ------------------------------

    def run_alltoallv(self) -> dict[str, Any]:
        changed = self.reset()
        while True:
            self.rounds += 1
            dests, records = self.outgoing(changed)
            self.records += len(records)
            self.messages += int(np.count_nonzero(np.bincount(dests.astype(np.intp), minlength=self.ranks)))
            self.lower(exchange(self.comm, dests, records)[0])
            changed = self.take_lowered()
            if not self.comm.allreduce(len(changed)):
                break
        return self.figures()

    def figures(self) -> dict[str, Any]:
        comm = self.comm
        return {
            "rounds": self.rounds,
            "messages": comm.allreduce(self.messages),
            "bytes": 8 * comm.allreduce(self.records),
        }

    # -- checks --------------------------------------------------------------

    def verify(self) -> bool:
        """Collective: labels consistent along every edge, and (up to 2**20 vertices) scipy's labels."""
        dests, records = self.outgoing(np.arange(self.owned))
        neighbour_view, _ = exchange(self.comm, dests, records)
        owned = ((neighbour_view & LOW32) // np.uint64(self.ranks)).astype(np.intp)
        consistent = bool(np.all(self.labels[owned] == neighbour_view >> np.uint64(32)))
        exact = True
        if self.vertices <= EXACT_CHECK_VERTICES:
            gathered = self.comm.gather(self.labels)
        if self.rank == 0 and self.vertices <= EXACT_CHECK_VERTICES:
            full = np.empty(self.vertices, dtype=np.uint64)
            for rank, labels in enumerate(gathered):
                full[rank :: self.ranks] = labels
            exact = bool(np.array_equal(full, self.expected))
        from mailrail._mpi import MPI

        return bool(self.comm.allreduce(consistent and self.comm.bcast(exact), op=MPI.LAND))

    def components(self) -> int:
        own_ids = np.arange(self.rank, self.vertices, self.ranks, dtype=np.uint64)
        return self.comm.allreduce(int(np.count_nonzero(self.labels == own_ids)))

    def workload(self) -> dict[str, Any]:
        return dict(
            self.source,
            vertices=self.vertices,
            edges=self.input_edges,
            labels_checked="every label against scipy"
            if self.vertices <= EXACT_CHECK_VERTICES
            else "consistent along every edge",
        )

    def summary(self) -> dict[str, Any]:
        return {"components": self.components()}


def read_edges_collectively(comm: Any, path: str) -> np.ndarray:
    """Every rank reads its slice; if any rank finds an error, every rank raises the first one."""
    try:
        edges, error = read_edges(path, comm.Get_rank(), comm.Get_size()), None
    except EdgeFileError as failure:
        edges, error = np.empty((0, 2), np.int64), str(failure)
    errors = [text for text in comm.allgather(error) if text]
    if errors:
        raise EdgeFileError(errors[0])
    return edges


def run(args: argparse.Namespace) -> int:
    # Every rank checks what only rank 0 uses (scipy, for the exact check): all stop alike, none waits.
    problem = missing_module("scipy.sparse.csgraph", "app cc", "apps")
    if problem:
        return usage_error("app cc", problem)
    checked = app_rail_options("cc", args, RAIL_DEFAULTS)
    if checked is None:
        return 2
    from mailrail._mpi import MPI

    comm = MPI.COMM_WORLD
    if not args.edges:
        edges = args.edge_factor << args.scale
        rank0_extra = REFERENCE_BYTES_PER_EDGE * edges if comm.Get_rank() == 0 and args.scale <= 20 else 0
        problem = memory_problem(
            comm,
            BYTES_PER_EDGE * -(-edges // comm.Get_size()) + rank0_extra,
            f"--scale {args.scale} and --edge-factor {args.edge_factor} ({edges:,} edges)",
        )
        if problem:
            return usage_error("app cc", problem, comm)
    try:
        app = ConnectedComponents(comm, args)
    except EdgeFileError as error:
        return usage_error("app cc", str(error), comm)
    return run_app(comm, app, args, *checked)
