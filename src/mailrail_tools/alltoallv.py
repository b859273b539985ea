"""The bulk-synchronous peer of the MailRail applications: one ``Alltoallv`` of records to their ranks.

Imported on demand inside :func:`alltoallv_exchange`: mpi4py (importing it starts MPI) and numpy, so
a command importing this module to parse its flags starts nothing.
"""

from __future__ import annotations

from typing import Any


def alltoallv_exchange(comm: Any, dests: Any, records: Any) -> tuple[Any, Any]:
    """The bulk-synchronous peers' exchange: ``Alltoallv`` of the rows of *records* (any dtype and
    row shape) to ranks *dests*.  Returns the rows this rank received, in rank order, and how many
    came from each rank."""
    import numpy as np

    from mailrail._mpi import MPI
    from mailrail.channels import rank_sort_dtype

    ranks = comm.Get_size()
    order = np.argsort(dests.astype(rank_sort_dtype(ranks)), kind="stable")  # a radix sort
    counts = np.bincount(dests.astype(np.intp), minlength=ranks)
    incoming = np.empty(ranks, dtype=counts.dtype)
    comm.Alltoall(counts, incoming)
    received = np.empty((int(incoming.sum()), *records.shape[1:]), dtype=records.dtype)
    row = MPI.BYTE.Create_contiguous(records.itemsize * int(np.prod(records.shape[1:], dtype=np.int64)))
    row.Commit()  # counts stay in rows, so a large exchange does not overflow a byte count
    try:
        comm.Alltoallv(
            [np.ascontiguousarray(records[order]).view(np.uint8), counts, row], [received.view(np.uint8), incoming, row]
        )
    finally:
        row.Free()
    return received, incoming
