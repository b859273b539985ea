"""send()'s buffer contract, on the transport MAILRAIL_IMPLEMENTATION chooses: each rank sends to the next.

A non-contiguous view is refused naming its strides and changes nothing; a send() that raises
after its buffer was identified as a reserved slot (bad destination, bad size) gives the slot
back; reserved-but-unsent buffers are counted (``send_buffers_reserved``, ``pending_sends()``) and
reported by ``finalize()``; then a normal exchange still delivers exactly once.  Prints
``RESULT <json>`` (rank 0: every rank's findings).
"""

import json

import numpy as np
from mpi4py import MPI

from mailrail import BufferOwnershipError, InvalidDestinationError, MailRail, MessageSizeError

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
slots = 8
rail = MailRail(comm, send_pool_slots=slots, datagram_size=64)
peer = (rank + 1) % size
found: dict[str, object] = {"implementation": rail.stats()["implementation"]}


def refusal(call, expected):
    try:
        call()
    except expected as error:
        return str(error)
    raise AssertionError(f"{call} did not raise {expected.__name__}")


buf = rail.reserve_send_buffer()
buf[:] = np.arange(64, dtype=np.uint8)
found["strided"] = refusal(lambda: rail.send(peer, buf[::2], 4), BufferOwnershipError)
found["reserved_after_strided"] = rail.stats()["send_buffers_reserved"]
found["bad_destination"] = refusal(lambda: rail.send(size + 3, buf, 4), InvalidDestinationError)
found["reserved_after_bad_destination"] = rail.stats()["send_buffers_reserved"]
buf = rail.reserve_send_buffer()
found["bad_size"] = refusal(lambda: rail.send(peer, buf, 65), MessageSizeError)
buf = rail.reserve_send_buffer()
found["bad_size_type"] = refusal(lambda: rail.send(peer, buf, "4"), MessageSizeError)
found["reserved_after_bad_sizes"] = rail.stats()["send_buffers_reserved"]
# Every slot can be reserved again: none leaked.
held = [rail.reserve_send_buffer() for _ in range(slots)]
found["all_slots_reservable"] = all(b is not None for b in held)
found["reserved_all"] = rail.stats()["send_buffers_reserved"]
found["pending_with_all_reserved"] = rail.pending_sends()
# Send them all (a typed contiguous prefix view is accepted), one stays reserved.
for index, b in enumerate(held[:-1]):
    b[:8] = index
    rail.send(peer, b.view(np.uint64)[:1] if index == 0 else b, 8)
found["reserved_after_sends"] = rail.stats()["send_buffers_reserved"]
received = []
while len(received) < slots - 1:
    message = rail.receive()
    if message is not None:
        received.append(int(message.data[0]))
        rail.release_receive_buffer(message)
rail.barrier()
found["received"] = sorted(received)
counters = rail.stats()
found["counters"] = {name: counters[name] for name in ("messages_sent", "messages_received", "messages_released")}
found["finalize"] = rail.finalize()
everyone = comm.gather(found, root=0)
if rank == 0:
    print("RESULT " + json.dumps(everyone), flush=True)
