"""Ranks that announce themselves and then wait forever: the job a timeout or a signal must end.

Each READY line ends with the directory the job's Open MPI keeps its shared-memory segments in (``-`` when
the launch set none), how many entries it holds, and the files in /dev/shm this rank has mapped (its MPI's
segments wherever they are, MPICH's included; ``-`` for none), so a test can check that ending the job
removed them all."""

import os
import socket
import time

from mpi4py import MPI

comm = MPI.COMM_WORLD
comm.Barrier()  # every rank's MPI has set up its shared memory
shm = os.environ.get("OMPI_MCA_btl_sm_backing_directory", "-")
held = len(os.listdir(shm)) if os.path.isdir(shm) else 0
with open("/proc/self/maps") as maps:
    fields = (line.split(maxsplit=5) for line in maps)
    mapped = sorted({f[5].strip() for f in fields if len(f) == 6 and f[5].startswith("/dev/shm/")} - {""})
mapped = [path for path in mapped if not path.endswith("(deleted)")]
print(
    f"READY {comm.Get_rank()} {os.getpid()} {socket.gethostname()} SHM {shm} {held} MAPPED {','.join(mapped) or '-'}",
    flush=True,
)
while True:
    time.sleep(1)
