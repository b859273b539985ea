"""Credit starvation must raise a diagnostic, not hang: rank 0 stops receiving for a while.

Rank 1 sends to rank 0 with 1 credit per pair and MAILRAIL_STALL_TIMEOUT=1; rank 0
sleeps 4 s before receiving.  Rank 1 reports the CreditStallError it got, then both
finish cleanly (nothing lost).
"""

import json
import time

from mpi4py import MPI

from mailrail import CreditStallError, MailRail

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
rail = MailRail(comm, flow_control="rank", credits_per_pair=1, stall_timeout=1.0)
error = None
if rank == 0:
    time.sleep(4)
else:
    for _ in range(3):
        buf = rail.reserve_send_buffer()
        rail.send(0, buf, 16)
    while rail.stats()["deferred_now"]:
        try:
            rail.receive()
        except CreditStallError as stall:  # diagnostic, not fatal: keep going once reported
            error = error or str(stall)
received = rail.barrier(handler=lambda message: None)
errors = comm.gather(error, root=0)
counts = comm.gather(received, root=0)
rail.finalize(strict=True)
if rank == 0:
    print("RESULT " + json.dumps({"error": errors[1], "received_by_0": counts[0]}), flush=True)
