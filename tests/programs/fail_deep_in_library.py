"""Ranks 2 and 1 of ``mailrail run -n 3`` fail, each from a user function nested two deep, while rank 0 waits in
the barrier (their abort ends it: a collateral rank).

Argument ``library`` (the default): each fails deep inside a library call: rank 2 gives ``rail.send`` a
destination out of range (``InvalidDestinationError``, raised by the protocol's check), rank 1 gives a ``Map`` keys
of the wrong dtype (``TypeError``, raised by the containers' check).  ``user``: each raises a ``ValueError`` of its
own, in its own code.

Rank 2 fails first and rank 1 second, and both failures are recorded, in every run: rank 1 raises once rank 2's
failure is in ``mailrail run``'s list, and a failing rank's abort waits (bounded) until both are (without that,
the first abort could end rank 1 before it records anything, as it does in a real job).
"""

import os
import sys
import time

import numpy as np
from mpi4py import MPI

from mailrail import MailRail, failure
from mailrail.containers import Map

#: The failing ranks, in the order they fail.
FAILING = (2, 1)
#: Seconds a rank waits at most for the others' records.
BOUND_S = 60.0
MODE = sys.argv[1] if len(sys.argv) > 1 else "library"


def wait_for_records(count: int) -> None:
    deadline = time.monotonic() + BOUND_S
    path = os.environ[failure.FAILURES_VARIABLE]
    while len(failure.read_failures(path)) < count and time.monotonic() < deadline:
        time.sleep(0.01)


end_the_job = failure.end_job


def end_once_every_failure_is_recorded(*args, **kwargs):
    wait_for_records(len(FAILING))
    end_the_job(*args, **kwargs)


failure.end_job = end_once_every_failure_is_recorded


def deliver(rail: MailRail, table: Map) -> None:
    if MODE == "user":
        raise ValueError(f"rank {rail.rank}'s own check failed")
    if rail.rank == 2:
        rail.send(rail.size + rail.rank, rail.reserve_send_buffer(), 8)
    else:
        table.insert(np.array(["not a number"]), np.array([1.0]))


def fan_out(rail: MailRail, table: Map) -> None:
    deliver(rail, table)


with MailRail(MPI.COMM_WORLD) as rail:
    table = Map(rail, np.uint64, np.float64)
    if rail.rank in FAILING:
        wait_for_records(FAILING.index(rail.rank))
        fan_out(rail, table)
    rail.barrier()
