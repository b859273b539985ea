"""An ask whose answering rank dies (issue 52): rank 1 is killed (SIGKILL) inside the function rank 0 asked it to run,
while rank 0 waits in ``Future.result()``.  The job must end, naming rank 1, and no rank may wait forever.

Each rank prints ``READY RANK PID`` once its rail is up, so the test can check that none is left."""

import os
import signal

from mpi4py import MPI

from mailrail import MailRail


def square(number: int) -> int:
    return number * number


def die(number: int) -> int:
    os.kill(os.getpid(), signal.SIGKILL)
    return number


with MailRail(MPI.COMM_WORLD) as rail:
    print(f"READY {rail.rank} {os.getpid()}", flush=True)
    rail.barrier()
    if rail.rank == 0:
        assert rail.ask(1, square, 3).result() == 9  # answered: rank 1 is serving asks
        rail.ask(1, die, 4).result()  # rank 1 dies running it: this wait must not last
    rail.barrier()  # rank 1 serves the asks here
    print(f"rank {rail.rank} got past the ask of a dead rank", flush=True)
