"""Coalescer round trip: random record sizes and destinations arrive exactly (as a multiset).

Records are random bytes of one random size (1..100 B) per run; several send()
calls with random destinations, partial flushes between some of them, and a
handler that sometimes forwards a record to another rank (sends nested in the
handler).  Each (sender, receiver) pair compares the sorted records at the end.
Run with tiny pools to force backpressure.  MailRail options come from MAILRAIL_*.
"""

import argparse
import json

import numpy as np
from mpi4py import MPI

from mailrail import MailRail
from mailrail.coalesce import Coalescer

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=3)
parser.add_argument("--batches", type=int, default=6)
args = parser.parse_args()

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
shared = np.random.default_rng(args.seed)
record_size = int(shared.integers(1, 101))
dtype = np.dtype((np.void, record_size))
rng = np.random.default_rng([args.seed, rank])
rail = MailRail(comm)
sent_to: list[list[bytes]] = [[] for _ in range(size)]
received_from: list[list[bytes]] = [[] for _ in range(size)]
forwarded = 0


def handler(source: int, records: np.ndarray) -> None:
    global forwarded
    assert not records.flags.writeable
    for record in records:
        received_from[source].append(bytes(record))
    # Forward records whose first byte is 0 (once: the forwarded copy gets first byte 1).
    raw = records.view(np.uint8).reshape(len(records), record_size)
    hop = raw[raw[:, 0] == 0].copy()
    if len(hop):
        hop[:, 0] = 1
        dests = (np.arange(len(hop)) + rank + 1) % size
        forward = hop.reshape(-1).view(dtype)
        for dest, record in zip(dests, forward):
            sent_to[dest].append(bytes(record))
        forwarded += len(hop)
        coalescer.send(dests, forward)


coalescer = Coalescer(rail, dtype, handler)
for batch in range(args.batches):
    count = int(rng.integers(0, 3000))
    raw = rng.integers(0, 256, (count, record_size), dtype=np.uint8)
    records = raw.reshape(-1).view(dtype)
    dests = rng.integers(0, size, count)
    for dest, record in zip(dests, records):
        sent_to[dest].append(bytes(record))
    coalescer.send(dests, records)
    if batch % 2:
        coalescer.flush()
coalescer.barrier()

expected = comm.alltoall([sorted(rows) for rows in sent_to])
mismatched = [source for source in range(size) if sorted(received_from[source]) != expected[source]]
assert not mismatched, f"rank {rank}: records from {mismatched} differ"
totals = comm.allreduce(
    np.array([coalescer.records_sent, coalescer.records_received, forwarded, rail.stats()["reserve_failures"]]),
    op=MPI.SUM,
)
rail.finalize(strict=True)
if rank == 0:
    print(
        "RESULT "
        + json.dumps(
            {
                "record_size": record_size,
                "sent": int(totals[0]),
                "received": int(totals[1]),
                "forwarded": int(totals[2]),
                "reserve_failures": int(totals[3]),
            }
        ),
        flush=True,
    )
