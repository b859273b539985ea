"""Records and calls left staged at finalize() are reported; Coalescers of several types share a rail.

``RESULT`` of rank 0: the finalize reports and warnings, the records two Coalescers on one rail
delivered, and the error of ranks that opened different channels.
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


# 1. Three records and one call staged (one datagram holds them all), never flushed: finalize warns.
rail = MailRail(comm, datagram_size=128)
coalescer = Coalescer(rail, np.uint64, ignore)
coalescer.send(np.full(3, peer), np.arange(3, dtype=np.uint64))
rail.call(peer, abs, 1)  # a call staged beside them
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

# 3. Two Coalescers of two record types on one rail: each gets its own records, interleaved in datagrams.
numbers: list[int] = []
words: list[bytes] = []
with MailRail(comm, datagram_size=64) as rail:
    first = Coalescer(rail, np.uint64, lambda source, records: numbers.extend(records.tolist()))
    second = Coalescer(rail, "S4", lambda source, records: words.extend(records.tolist()))
    for round in range(7):
        first.send(np.full(round, peer), np.arange(round, dtype=np.uint64))
        second.send(np.full(3, peer), np.array([b"abcd"] * 3, dtype="S4"))
    second.barrier()
    result["numbers"] = sorted(numbers)
    result["words"] = len(words)
    result["final"] = rail.finalize(strict=True)

# 4. Ranks that open different channels (another type on rank 0) are refused on every rank.
with MailRail(comm) as rail:
    try:
        Coalescer(rail, np.uint64 if rank == 0 else "S4", ignore)
        result["disagree"] = ["no error", ""]
    except MailRailError as error:
        result["disagree"] = [type(error).__name__, str(error)]
everyone = comm.gather(result, root=0)
if rank == 0:
    print("RESULT " + json.dumps(everyone), flush=True)
