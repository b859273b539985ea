"""A mailrail command that raises on rank 1 while rank 0 waits in Barrier, run through ``mailrail_tools.cli.main``."""

import sys

from mpi4py import MPI

from mailrail_tools import cli


def add_arguments(parser):
    pass


def run(args):
    comm = MPI.COMM_WORLD
    comm.Barrier()
    if comm.Get_rank() == 1:
        raise RuntimeError("injected failure in a mailrail command")
    comm.Barrier()
    return 0


sys.modules["failing_command"] = sys.modules[__name__]
cli.COMMANDS[("fail",)] = ("failing_command", "raises on rank 1")
sys.exit(cli.main(["fail"]))
