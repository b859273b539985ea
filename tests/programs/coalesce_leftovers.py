"""Records left staged in a Coalescer at finalize() are reported, and one Coalescer at a time per rail.

``RESULT`` of rank 0: the finalize reports and warnings, the errors of the refused and the
replaced Coalescer, and the records the surviving one delivered.
"""

import json
import warnings

import numpy as np
from mpi4py import MPI

from mailrail import MailRail, MailRailError, UndeliveredError, UndeliveredWarning
from mailrail.coalesce import Coalescer

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
peer = (rank + 1) % size
result: dict = {}


def ignore(source: int, records: np.ndarray) -> None:
    pass


# 1. Three records staged (a datagram holds 8), never flushed: finalize warns.
rail = MailRail(comm, datagram_size=64)
coalescer = Coalescer(rail, np.uint64, ignore)
coalescer.send(np.full(3, peer), np.arange(3, dtype=np.uint64))
try:
    Coalescer(rail, np.uint64, ignore)
    result["second_while_staged"] = ["no error", ""]
except MailRailError as error:
    result["second_while_staged"] = [type(error).__name__, str(error)]
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    result["report"] = rail.finalize()
result["warnings"] = [str(w.message) for w in caught if w.category is UndeliveredWarning]

# 2. The same with strict=True: an error.
rail = MailRail(comm, datagram_size=64)
coalescer = Coalescer(rail, np.uint64, ignore)
coalescer.send(np.full(2, peer), np.arange(2, dtype=np.uint64))
try:
    rail.finalize(strict=True)
    result["strict"] = ["no error", ""]
except UndeliveredError as error:
    result["strict"] = [type(error).__name__, str(error)]

# 3. A second Coalescer (another record type) replaces an empty first one, which then refuses to work.
received: list[bytes] = []
with MailRail(comm, datagram_size=64) as rail:
    first = Coalescer(rail, np.uint64, ignore)
    second = Coalescer(rail, "S4", lambda source, records: received.extend(records.tolist()))
    try:
        first.send(np.full(1, peer), np.arange(1, dtype=np.uint64))
        result["replaced"] = ["no error", ""]
    except MailRailError as error:
        result["replaced"] = [type(error).__name__, str(error)]
    second.send(np.full(5, peer), np.array([b"abcd"] * 5, dtype="S4"))
    second.barrier()
    result["second_received"] = len(received)
    result["final"] = rail.finalize(strict=True)
everyone = comm.gather(result, root=0)
if rank == 0:
    print("RESULT " + json.dumps(everyone), flush=True)
