"""Ranks that build two rails with a misspelled MAILRAIL_* variable and a keyword that overrides a set one
(the test sets the environment): the job's warnings, as its standard error shows them."""

from mpi4py import MPI

from mailrail import MailRail

comm = MPI.COMM_WORLD
for _ in range(2):  # a second rail says nothing new
    with MailRail(comm, recv_pool_slots=32) as rail:
        rail.barrier()
print(f"DONE {comm.Get_rank()}", flush=True)
