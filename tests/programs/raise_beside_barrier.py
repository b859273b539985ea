"""Rank 0 raises while every other rank waits in Barrier: the job must end with rank 0's traceback."""

import os
import socket
import sys

from mpi4py import MPI

comm = MPI.COMM_WORLD
print(f"READY {comm.Get_rank()} {os.getpid()} {socket.gethostname()}", flush=True)
comm.Barrier()  # every rank announced itself before the failure
failing_rank = int(sys.argv[1]) if len(sys.argv) > 1 else 0
if comm.Get_rank() == failing_rank:
    raise RuntimeError("injected failure on this rank")
comm.Barrier()
