"""Coalescer: replies a handler sends while barrier() flushes are delivered before it returns.

Every rank sends one request record to every other rank and leaves it staged
(a partial datagram), and each handler answers a request with one reply
record, also a partial datagram.  Ranks enter barrier() one after another, so
a rank's own flush finds the requests of the ranks before it already waiting:
its handler runs from inside the flush, and the replies it sends then must not
stay staged when the barrier ends.  Each rank checks it got every reply.
"""

import json
import time

import numpy as np
from mpi4py import MPI

from mailrail import MailRail
from mailrail.coalesce import Coalescer

REQUEST, REPLY = 0, 1
DTYPE = np.dtype([("kind", "u1"), ("asker", "<u4"), ("payload", "<u8")])

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
rail = MailRail(comm, datagram_size=16 * DTYPE.itemsize)  # a few records never fill a datagram
replies_from: list[int] = []


def handler(source: int, records: np.ndarray) -> None:
    for record in records:
        if record["kind"] == REQUEST:
            reply = np.zeros(1, DTYPE)
            reply["kind"], reply["asker"], reply["payload"] = REPLY, record["asker"], record["payload"] + 1
            coalescer.send(np.array([source]), reply)
        else:
            assert record["asker"] == rank and record["payload"] == 1000 * source + rank + 1, record
            replies_from.append(source)


coalescer = Coalescer(rail, DTYPE, handler)
others = np.array([peer for peer in range(size) if peer != rank])
requests = np.zeros(len(others), DTYPE)
requests["kind"], requests["asker"], requests["payload"] = REQUEST, rank, 1000 * others + rank
coalescer.send(others, requests)  # staged: less than a datagram per destination
time.sleep(0.2 * rank)  # the ranks before this one have flushed their requests to it by now
coalescer.barrier()
missing = sorted(set(others.tolist()) - set(replies_from))
assert not missing and len(replies_from) == len(others), f"rank {rank}: no reply from {missing}"
answered = comm.allreduce(len(replies_from))
rail.finalize(strict=True)
if rank == 0:
    print("RESULT " + json.dumps({"replies": answered}), flush=True)
