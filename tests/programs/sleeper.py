"""Ranks that announce themselves and then wait forever: the job a timeout or a signal must end."""

import os
import socket
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
print(f"READY {comm.Get_rank()} {os.getpid()} {socket.gethostname()}", flush=True)
while True:
    time.sleep(1)
