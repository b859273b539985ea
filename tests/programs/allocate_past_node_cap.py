"""Every rank announces itself and waits forever; rank ``--rank`` (default 1) also starts a child that
allocates memory until the kernel kills it: the rank itself lives on, so only a launcher that watches
the node's out-of-memory events ends the job before its time-out."""

import argparse
import os
import socket
import subprocess
import sys
import time

from mpi4py import MPI

parser = argparse.ArgumentParser()
parser.add_argument("--rank", type=int, default=1)
args = parser.parse_args()
comm = MPI.COMM_WORLD
print(f"READY {comm.Get_rank()} {os.getpid()} {socket.gethostname()}", flush=True)
if comm.Get_rank() == args.rank:
    # b"\1" * n writes every page (a zeroed bytearray might not be backed by memory yet)
    subprocess.Popen([sys.executable, "-c", "chunks = []\nwhile True:\n    chunks.append(b'\\1' * (16 << 20))"])
while True:
    time.sleep(1)
