"""stats() read while sends wait for credit, then after they drain; rank 0 reports ``RESULT {...}``.

Rank 0 sends ``--messages`` messages to rank 1 (2 credits per pair) while rank 1 does not
receive: all but two wait for credit.  Every counter means the same on both transports,
so the figures are the same whichever implementation ``MAILRAIL_IMPLEMENTATION`` runs.
"""

import argparse
import json
import zlib

from mpi4py import MPI

from mailrail import MailRail
from mailrail.counters import COUNTERS, RAIL_FACTS

parser = argparse.ArgumentParser()
parser.add_argument("--messages", type=int, default=10)
args = parser.parse_args()
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
rail = MailRail(
    comm,
    flow_control="rank",
    recv_pool_slots=4,
    credit_threshold=1,
    datagram_size=16,
    send_pool_slots=args.messages + 1,
)
result: dict = {"implementation": rail.stats()["implementation"]}
checksum = 0
if rank == 0:
    for seq in range(args.messages):
        buf = rail.reserve_send_buffer()
        buf[:8] = memoryview(seq.to_bytes(8, "little"))
        checksum ^= zlib.crc32(bytes(buf[:8]))
        rail.send(1, buf, 8)
    stats = rail.stats()
    result["while_deferred"] = {
        key: stats[key]
        for key in ("messages_sent", "bytes_sent", "deferred_now", "deferred_sends", "messages_received")
    }
    result["pending_while_deferred"] = rail.pending_sends()
    result["keys"] = sorted(stats)
comm.Barrier()  # rank 1 starts receiving only now


def handle(message) -> None:
    global checksum
    checksum ^= zlib.crc32(bytes(message.data))


rail.barrier(handle)
stats = rail.stats()
after = {
    key: stats[key]
    for key in (
        "messages_sent",
        "messages_received",
        "deferred_now",
        "deferred_sends",
        "credit_messages_sent",
        "credit_messages_received",
    )
}
afters = comm.gather(after)
checksums = comm.gather(checksum)
report = rail.finalize(strict=True)
if rank == 0:
    result.update(
        after=afters,
        checksum_match=checksums[0] == checksums[1],
        finalize=report,
        documented=sorted({*COUNTERS, *RAIL_FACTS} - {"nodes", "atomics"}),
    )
    print("RESULT " + json.dumps(result), flush=True)
