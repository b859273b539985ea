"""A credit stall's report gives this rank's true counters, on either transport.

Rank 0 first sends 3 messages to rank 1, which receives and releases them; then rank 1 sends
to rank 0 with 1 credit per pair while rank 0 sleeps: rank 1's CreditStallError must say it
received 3 and released 3.  ``RESULT``: rank 1's report.
"""

import json
import time

from mpi4py import MPI

from mailrail import CreditStallError, MailRail

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
report = None
with MailRail(comm, flow_control="rank", credits_per_pair=1, stall_timeout=1.0) as rail:
    if rank == 0:
        for _ in range(3):
            rail.send(1, rail.reserve_send_buffer(), 8)
        while rail.pending_sends():
            rail.receive()
    else:
        released = 0
        while released < 3:
            message = rail.receive()
            if message is not None:
                rail.release_receive_buffer(message)
                released += 1
    comm.Barrier()
    if rank == 0:
        time.sleep(4)
    else:
        for _ in range(3):
            rail.send(0, rail.reserve_send_buffer(), 16)
        while rail.stats()["deferred_now"]:
            try:
                rail.receive()
            except CreditStallError as stall:
                report = report or str(stall)
    rail.barrier(handler=lambda message: None)
reports = comm.gather(report, root=0)
if rank == 0:
    print("RESULT " + json.dumps({"report": reports[1]}), flush=True)
