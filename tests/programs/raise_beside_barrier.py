"""Rank 0 raises while every other rank waits in Barrier: the job must end with rank 0's traceback.

With ``TRIGGER_FILE`` set, the failing rank raises only once that file exists: a test creates it after it
has read every rank's READY line (a line a rank printed is not yet a line its launcher passed on, and an
abort ends the job whatever its peers' output forwarders still hold)."""

import os
import socket
import sys
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
print(f"READY {comm.Get_rank()} {os.getpid()} {socket.gethostname()}", flush=True)
comm.Barrier()  # every rank announced itself before the failure
failing_rank = int(sys.argv[1]) if len(sys.argv) > 1 else 0
if comm.Get_rank() == failing_rank:
    trigger = os.environ.get("TRIGGER_FILE")
    deadline = time.monotonic() + 60
    while trigger and not os.path.exists(trigger) and time.monotonic() < deadline:
        time.sleep(0.02)
    raise RuntimeError("injected failure on this rank")
comm.Barrier()
