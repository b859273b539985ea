"""``on_error="raise"``: an exception leaves ``with MailRail(...)`` without any collective call.

Rank 1 raises first, catches its exception outside the block and only then tells rank 0 (a
plain mpi4py message), which raises in turn: had rank 1's ``__exit__`` entered a collective, it
would wait for rank 0, which waits for rank 1's message: a hang.  Then a new rail must deliver
exactly once (MPI is unharmed).  ``RESULT`` of rank 0: what each rank saw.
"""

import json
import sys

from mpi4py import MPI

from mailrail import MailRail

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
mode = sys.argv[1] if len(sys.argv) > 1 else "none"
seen: dict = {}
try:
    with MailRail(comm, on_error="raise", flow_control=mode, datagram_size=64, recv_pool_slots=8) as rail:
        # Traffic in flight and posted receives matched: abandon() must cope with both.
        for dest in range(size):
            rail.send(dest, rail.reserve_send_buffer(), 8)
        if rank != 1:
            comm.recv(source=1, tag=77)  # rank 1 left its block: it did not wait for us
        raise ValueError(f"injected failure on rank {rank}")
except ValueError as error:
    seen["error"] = str(error)
    seen["finalized"] = repr(rail).endswith("finalized>")
if rank == 1:
    for peer in range(size):
        if peer != 1:
            comm.send("left", dest=peer, tag=77)
comm.Barrier()
with MailRail(comm, flow_control=mode, datagram_size=64, recv_pool_slots=8) as after:
    for dest in range(size):
        buf = after.reserve_send_buffer()
        buf[:4] = memoryview(rank.to_bytes(4, "little"))
        after.send(dest, buf, 4)
    sources: list[int] = []
    after.barrier(handler=lambda message: sources.append(int.from_bytes(bytes(message.data), "little")))
    seen["after_sources"] = sorted(sources)
    seen["after_report"] = after.finalize(strict=True)
everyone = comm.gather(seen, root=0)
if rank == 0:
    print("RESULT " + json.dumps(everyone), flush=True)
