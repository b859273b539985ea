"""Node-based credits are shared: a neighbour that went quiet leaves its credits to the others.

Virtual nodes of 2 ranks (or, with ``--real-nodes``, the real nodes: run it with two ranks on each of
two nodes): {0, 1} is the victim's node, {2, 3} the sending node, with
MAILRAIL_CREDITS_PER_PAIR=C per (sending node, victim).  Rank 2 sends C messages at
once (taking every credit of its node) and then sends nothing more; rank 3 then sends
many.  The victim holds what arrives until no more comes, then releases it all.  Rank 3
can only proceed on credits that rank 2's messages consumed and the victim returned, and
it alone reaches C unreturned messages at the victim: the whole node's pool, which in
rank mode would be split per sender.
"""

import json
import sys
import time

import numpy as np
from mpi4py import MPI

from mailrail import MailRail

comm = MPI.COMM_WORLD
rank = comm.Get_rank()
CREDITS = 8
LATER_MESSAGES = 200
RANKS_PER_NODE = None if "--real-nodes" in sys.argv else 2
rail = MailRail(comm, flow_control="node", ranks_per_node=RANKS_PER_NODE, credits_per_pair=CREDITS, recv_pool_slots=16)
VICTIM = 0

peak_from = np.zeros(comm.Get_size(), dtype=int)
unreleased_from = np.zeros(comm.Get_size(), dtype=int)
held = []


def victim_poll(quiet_seconds: float = 0.02) -> None:
    """Hold arrivals until none came for *quiet_seconds*, then release them all."""
    last = time.monotonic()
    while time.monotonic() - last < quiet_seconds:
        message = rail.receive()
        if message is None:
            continue
        last = time.monotonic()
        held.append(message)
        unreleased_from[message.source] += 1
        peak_from[message.source] = max(peak_from[message.source], unreleased_from[message.source])
    for message in held:
        unreleased_from[message.source] -= 1
        rail.release_receive_buffer(message)
    held.clear()


def send_to_victim(count: int) -> None:
    for _ in range(count):
        buf = rail.reserve_send_buffer()
        while buf is None:
            rail.receive()
            buf = rail.reserve_send_buffer()
        rail.send(VICTIM, buf, 32)


if rank == 2:
    send_to_victim(CREDITS)  # every credit the node has for the victim
comm.Barrier()  # rank 2's messages are on their way: the node pool is empty now
pool_after_rank2 = rail.flow.available(VICTIM)
if rank == 3:
    send_to_victim(LATER_MESSAGES)
if rank == VICTIM:
    for _ in range(40):
        victim_poll()
rail.barrier(handler=lambda m: None)
stats = comm.gather(rail.stats(), root=0)
pools = comm.gather(pool_after_rank2, root=0)
rail.finalize(strict=True)
if rank == 0:
    print(
        "RESULT "
        + json.dumps({"peak_from": peak_from.tolist(), "stats": stats, "pool_after_rank2": pools, "credits": CREDITS}),
        flush=True,
    )
