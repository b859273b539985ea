"""Ranks that announce themselves and then wait forever: the job a timeout or a signal must end.

Each READY line ends with the directory the job's Open MPI keeps its shared-memory segments in (``-`` when
the launch set none) and how many entries it holds, so a test can check that ending the job removed it."""

import os
import socket
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
shm = os.environ.get("OMPI_MCA_btl_sm_backing_directory", "-")
held = len(os.listdir(shm)) if os.path.isdir(shm) else 0
print(f"READY {comm.Get_rank()} {os.getpid()} {socket.gethostname()} SHM {shm} {held}", flush=True)
while True:
    time.sleep(1)
