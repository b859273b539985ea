"""Functions a script defines after a barrier, called by ranks that left the barrier first (issue 52).

Each rank calls ``note`` on every rank right after the first barrier, below the line that defines it, then visits
a Map with ``bump``, defined after the second barrier.  A rank still finishing a barrier must not run those calls
before it has returned to the script and defined them.  ``RESULT`` of rank 0: the counts.
"""

import json

import numpy as np
from mpi4py import MPI

from mailrail import MailRail
from mailrail.containers import Map

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
notes: list[int] = []

with MailRail(comm) as rail:
    visited = Map(rail, np.uint64, np.float64)
    visited.insert(np.arange(rank * 100, rank * 100 + 100, dtype=np.uint64), np.zeros(100))
    rail.barrier()

    def note(origin: int) -> None:
        notes.append(origin)

    for dest in range(size):
        rail.call(dest, note, rank)
    rail.barrier()

    def bump(keys: np.ndarray, values: np.ndarray) -> None:
        values += 1

    visited.visit(np.arange(size * 100, dtype=np.uint64), bump)
    rail.barrier()
    bumped = comm.allreduce(float(visited.local()["value"].to_numpy().sum()))
    noted = comm.allreduce(len(notes))

if rank == 0:
    print("RESULT " + json.dumps({"notes": noted, "bumped": bumped}), flush=True)
