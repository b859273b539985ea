"""finalize() or barrier() while ranks 1 and 3 never come (they sleep): bounded by MAILRAIL_STALL_TIMEOUT.

Run with plain ``python``: the StallError leaves ``with MailRail(...)`` and aborts the job
(on_error="abort"); the sleepers end with it.  Argument: ``finalize`` or ``barrier``.
"""

import sys
import time

from mpi4py import MPI

from mailrail import MailRail

MISSING = (1, 3)
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
wait = sys.argv[1]
with MailRail(comm) as rail:
    if rank in MISSING:
        time.sleep(300)  # far beyond the test's bound: only the abort ends this rank in time
    elif wait == "barrier":
        rail.barrier()
print(f"UNREACHABLE {rank}", flush=True)
