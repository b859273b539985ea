"""Ranks in different collectives of one rail, or one rank late to the same one; run with plain ``python``.

Cases (argument 1):

- ``total_finalize``: rank 0 calls ``counts.total()``, the others leave the ``with`` block (``finalize()``);
- ``finalize_total``: the other way round: rank 0 leaves the block, the others call ``counts.total()``;
- ``barrier_size``: rank 0 calls ``rail.barrier()``, the others ``counts.size()``;
- ``size_barrier``: rank 0 calls ``counts.size()``, the others ``rail.barrier()`` (both begin with a barrier);
- ``raise``: ``total_finalize`` with ``on_error="raise"``: every rank raises the judge's verdict, and the
  program goes on (prints ``RESULT``, each rank's error);
- ``slow SECONDS [RANK]``: every rank calls ``counts.total()``, RANK (default the last) SECONDS late; prints
  ``RESULT``.

Nothing but MailRail's judge ends a mismatched job: no stall timeout is needed (the test sets none), and the
ranks wait in their collectives until the abort ends them.  The test finds each call's line by its marker
comment (``# CALL: what``).
"""

import json
import sys
import time

import numpy as np
from mpi4py import MPI

from mailrail import CollectiveMismatchError, MailRail
from mailrail.containers import CountingSet

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
case = sys.argv[1]
result = {}
try:
    with MailRail(comm, on_error="raise" if case == "raise" else None) as rail:  # CALL: with
        counts = CountingSet(rail, np.int64)
        counts.add(np.arange(10 * rank, 10 * rank + 10, dtype=np.int64))
        if case in ("total_finalize", "raise") and rank == 0 or case == "finalize_total" and rank != 0:
            counts.total()  # CALL: total
        elif case == "barrier_size":
            if rank == 0:
                rail.barrier()  # CALL: barrier on rank 0
            else:
                counts.size()  # CALL: size on the others
        elif case == "size_barrier":
            if rank == 0:
                counts.size()  # CALL: size on rank 0
            else:
                rail.barrier()  # CALL: barrier on the others
        elif case == "slow":
            (rail.barrier if rank % 2 else counts.barrier)()  # every spelling of a barrier is one collective
            if rank == (int(sys.argv[3]) if len(sys.argv) > 3 else size - 1):
                time.sleep(float(sys.argv[2]))  # a long computation: waited for, never ended
            result["total"] = counts.total()  # CALL: slow total
            result["size"] = counts.size()
except CollectiveMismatchError as error:
    result["error"] = str(error)
if case in ("slow", "raise"):
    everyone = comm.gather(result, root=0)
    if rank == 0:
        print("RESULT " + json.dumps(everyone), flush=True)
else:
    print(f"UNREACHABLE {rank}", flush=True)
