"""Which ranks share a node, and the node's shared credit pool: the MPI half of :mod:`mailrail.flow.node`.

Virtual nodes (``ranks_per_node=k``) group consecutive ranks in nodes of *k*
so node-based flow control runs for real on one machine; otherwise nodes are
the real shared-memory domains (``COMM_TYPE_SHARED``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import cast

from .._mpi import MPI
from ..errors import ConfigError
from ..segments import record_own_segments

_INT64 = 8


def _freed_map(rank: int) -> int:
    raise RuntimeError("the node's rank-to-node map was freed (finalize())")


def _shared_memory(window: MPI.Win) -> tuple[int, memoryview]:
    """The address of rank 0's memory in the shared *window*, and that memory as bytes."""
    memory, _ = window.Shared_query(0)
    # mpi4py's buffer implements the buffer protocol; its stub does not say so.
    return memory.address, memoryview(memory).cast("B")  # type: ignore[arg-type]


class NodeTopology:
    """The node communicator of this rank, the node count and the rank-to-node map."""

    def __init__(self, comm: MPI.Comm, ranks_per_node: int | None) -> None:
        rank, size = comm.Get_rank(), comm.Get_size()
        self._map: memoryview | None = None
        self._map_window: MPI.Win | None = None
        self._map_bytes = 0
        self.map_address: int | None = None
        self.node_of: Callable[[int], int]
        # The communicator is a MailRail duplicate of an intracommunicator: its splits are intracommunicators.
        if ranks_per_node is not None:
            per_node = ranks_per_node
            self.virtual = True
            self.comm = cast(MPI.Intracomm, comm.Split(rank // per_node, rank))
            self.nodes = -(-size // per_node)
            self.node_of = lambda r: r // per_node
            self.node = rank // per_node
        else:
            self.virtual = False
            self.comm = cast(MPI.Intracomm, comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank))
            # Node index = position of the node's lowest world rank among all leaders.
            leader = self.comm.bcast(rank, root=0)
            leaders = comm.allgather(leader)
            index = {r: i for i, r in enumerate(sorted(set(leaders)))}
            self.nodes = len(index)
            self.node = index[leader]
            # The rank-to-node map is kept once per node, in shared memory: O(ranks) per node,
            # not per rank (the allgathered list above is dropped after start-up).
            local_rank = self.comm.Get_rank()
            window = self._map_window = MPI.Win.Allocate_shared(4 * size if local_rank == 0 else 0, 4, comm=self.comm)
            record_own_segments()
            self.map_address, memory = _shared_memory(window)  # the address for the compiled credit ledger
            node_map = self._map = memory.cast("i")
            self._map_bytes = node_map.nbytes  # still known after free(): stats() after finalize()
            window.Lock_all(MPI.MODE_NOCHECK)  # Sync needs a passive-target epoch
            if local_rank == 0:
                for r, node_leader in enumerate(leaders):
                    node_map[r] = index[node_leader]
            window.Sync()
            self.comm.Barrier()
            window.Sync()
            window.Unlock_all()  # read-only from now on
            self.node_of = node_map.__getitem__
        self.local_rank = self.comm.Get_rank()
        self.local_size = self.comm.Get_size()

    @property
    def shared_map_bytes(self) -> int:
        """Bytes of the node-shared rank-to-node map (zero for virtual nodes: computed)."""
        return self._map_bytes

    def free(self) -> None:
        if self._map_window is not None and self._map is not None:
            self.node_of = _freed_map
            self._map.release()
            self._map_window.Free()
        self.comm.Free()


class SharedWindowCounters:
    """int64 counters in an MPI-3 shared window on the node communicator.

    ``atomics="cpu"`` updates them with lock-free CPU atomics through the tiny
    compiled helper :mod:`mailrail.flow._atomics`; ``"mpi"`` uses MPI
    ``Fetch_and_op`` under a passive-target epoch (portable, no compiler
    needed, slower); ``"auto"`` takes ``cpu`` when the helper was built.
    """

    def __init__(self, node_comm: MPI.Intracomm, length: int, initial: int, atomics: str = "auto") -> None:
        self.length = length
        self.nbytes = length * _INT64
        local_rank = node_comm.Get_rank()
        self.win = MPI.Win.Allocate_shared(self.nbytes if local_rank == 0 else 0, _INT64, comm=node_comm)
        record_own_segments()  # the window's segment (MPICH names its own in /dev/shm): removed with the job
        self.address, memory = _shared_memory(self.win)  # the address of the int64 counters, for CPU atomics
        self._values = memory.cast("q")
        self.atomics = resolve_atomics(atomics)
        self.win.Lock_all(MPI.MODE_NOCHECK)
        if local_rank == 0:
            for i in range(length):
                self._values[i] = initial
        self.win.Sync()
        node_comm.Barrier()
        self.win.Sync()
        # The three operations, bound once per instance (the per-message calls of the Python transport).
        self.try_take: Callable[[int], bool]
        self.add: Callable[[int, int], int]
        self.load: Callable[[int], int]
        self.take_up_to: Callable[[int, int], int]
        if self.atomics == "cpu":
            helper = importlib.import_module("mailrail.flow._atomics")
            address, take, fetch_add, load = self.address, helper.try_take, helper.fetch_add, helper.load
            take_up_to = helper.take_up_to
            self.try_take = lambda i: take(address, i)
            self.add = lambda i, n: fetch_add(address, i, n)
            self.load = lambda i: load(address, i)
            self.take_up_to = lambda i, most: take_up_to(address, i, most)
        else:
            self._origin = memoryview(bytearray(_INT64)).cast("q")
            self._result = memoryview(bytearray(_INT64)).cast("q")
            self.try_take, self.add, self.load = self._mpi_try_take, self._fetch_add, self._mpi_load
            self.take_up_to = self._mpi_take_up_to

    # The MPI RMA path.
    def _fetch_add(self, index: int, amount: int) -> int:
        self._origin[0] = amount
        self.win.Fetch_and_op(self._origin, self._result, 0, index, MPI.SUM)
        self.win.Flush(0)
        value: int = self._result[0]
        return value

    def _mpi_try_take(self, index: int) -> bool:
        if self._fetch_add(index, -1) > 0:
            return True
        self._fetch_add(index, 1)  # overdrawn: give it back (transiently negative, never overrun)
        return False

    def _mpi_take_up_to(self, index: int, most: int) -> int:
        wanted = min(most, self._mpi_load(index))
        if wanted <= 0:
            return 0
        before = self._fetch_add(index, -wanted)
        taken = max(0, min(before, wanted))
        if taken < wanted:  # others took some meanwhile: give back what was not there (never overrun)
            self._fetch_add(index, wanted - taken)
        return taken

    def _mpi_load(self, index: int) -> int:
        return self._fetch_add(index, 0)

    def free(self) -> None:
        self.win.Unlock_all()
        self._values.release()
        self.win.Free()


def resolve_atomics(mode: str) -> str:
    """``auto`` -> ``cpu`` if the compiled helper imports, else ``mpi``."""
    if mode == "mpi":
        return mode
    try:
        importlib.import_module("mailrail.flow._atomics")
    except ImportError:
        if mode == "cpu":
            raise ConfigError(
                "MAILRAIL_ATOMICS=cpu but the compiled helper mailrail.flow._atomics is not "
                "built (no C compiler at install time?): use MAILRAIL_ATOMICS=mpi"
            ) from None
        return "mpi"
    return "cpu"
