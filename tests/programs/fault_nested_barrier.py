"""barrier() from inside a barrier handler is refused at once (MailRailError); the outer barrier still ends.

Every rank sends one message to every rank; the handler tries a nested barrier and records the
error.  ``RESULT`` of rank 0: each rank's errors and messages handled.
"""

import json

from mpi4py import MPI

from mailrail import MailRail, MailRailError

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
errors: list[str] = []
with MailRail(comm) as rail:

    def handler(message: object) -> None:
        try:
            rail.barrier()
        except MailRailError as error:
            errors.append(str(error))
        try:
            rail.finalize()
        except MailRailError as error:
            errors.append(str(error))

    for dest in range(size):
        rail.send(dest, rail.reserve_send_buffer(), 1)
    handled = rail.barrier(handler=handler)
    again = rail.barrier(handler=handler)  # the flag was reset: a later barrier runs
everyone = comm.gather({"errors": errors, "handled": handled, "again": again}, root=0)
if rank == 0:
    print("RESULT " + json.dumps(everyone), flush=True)
