"""Ranks that disagree on the configuration are refused at construction, every rank with the same message.

Argument: which knob rank 1 sets differently.  Each rank counts the communicators the refused
construction made (none may be left), then a rail built alike on every rank delivers.
``RESULT`` of rank 0: each rank's error type and message, and its communicators made/freed.
"""

import json
import sys

from mpi4py import MPI

from mailrail import MailRail

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
case = sys.argv[1]
ODD = {
    "datagram_size": ({"datagram_size": 4096}, {"datagram_size": 1024}),
    "flow_control": ({"flow_control": "none"}, {"flow_control": "rank"}),
    "recv_pool_slots": (
        {"flow_control": "rank", "recv_pool_slots": 512},
        {"flow_control": "rank", "recv_pool_slots": 4},
    ),
    "implementation": ({"implementation": "compiled"}, {"implementation": "python"}),
    "invalid": ({}, {"datagram_size": 0}),
}


class CountingComm(MPI.Intracomm):
    made = 0
    freed = 0

    def Dup(self, *args, **kwargs):
        CountingComm.made += 1
        return super().Dup(*args, **kwargs)

    def Free(self):
        CountingComm.freed += 1
        super().Free()


usual, odd = ODD[case]
outcome: dict = {}
try:
    MailRail(CountingComm(comm), **(odd if rank == 1 else usual)).finalize()
    outcome["error"] = ["no error", ""]
except Exception as error:
    outcome["error"] = [type(error).__name__, str(error)]
outcome["communicators"] = [CountingComm.made, CountingComm.freed]
with MailRail(comm) as rail:
    rail.send((rank + 1) % comm.Get_size(), rail.reserve_send_buffer(), 1)
    outcome["after"] = rail.barrier(handler=lambda message: None)
everyone = comm.gather(outcome, root=0)
if rank == 0:
    print("RESULT " + json.dumps(everyone), flush=True)
