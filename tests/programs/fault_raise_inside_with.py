"""Rank 1 raises inside ``with MailRail(...)`` while the others wait in barrier(); run with plain ``python``.

Only MailRail's ``__exit__`` (on_error="abort") can end this job: the other ranks wait in a
collective for rank 1.  ``exit0``: every rank leaves the block by ``sys.exit(0)``, a normal exit.
"""

import sys

from mpi4py import MPI

from mailrail import MailRail

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
case = sys.argv[1] if len(sys.argv) > 1 else "raise"
try:
    with MailRail(comm) as rail:
        if case == "exit0":
            sys.exit(0)
        if rank == 1:
            raise RuntimeError("injected failure on rank 1")
        rail.barrier()  # the others wait here for rank 1, which never comes
except SystemExit:
    print(f"FINALIZED {rank} {rail!r}", flush=True)
    raise
print(f"UNREACHABLE {rank}", flush=True)
