"""An MPI error mid-run on the compiled transport: a message longer than the receiver's datagram size.

Rank 0 sends rank 1 a raw 4096-byte message on the rail's data communicator (as a rank with a
larger ``datagram_size`` would, bypassing the construction-time agreement check), then one normal
message.  Rank 1's ``receive()`` must raise a MailRailError naming the datagram size (reported in RESULT); then, by
MODE:

- ``recover``: rank 1 catches it, still receives the normal message, both ranks finalize: exit 0.
- ``abandon``: rank 1 catches it; both ranks drop their rails without finalize() and exit:
  MPI_Finalize must not crash (the rails' receives were cancelled, nothing writes into freed pools).
- ``uncaught``: rank 1 lets it propagate (run with ``python -m mpi4py``: the job aborts with the traceback).
"""

import gc
import json
import sys
import time

import numpy as np
from mpi4py import MPI

from mailrail import MailRail

mode = sys.argv[1]
comm = MPI.COMM_WORLD
rank = comm.Get_rank()
rail = MailRail(comm, datagram_size=1024)
result = {}
if rank == 0:
    rail._data.Send(np.zeros(4096, np.uint8), 1, 0)  # what a rank with 4096-byte datagrams sends
    buf = rail.reserve_send_buffer()
    buf[:4] = 7
    rail.send(1, buf, 4)
    while rail.pending_sends():
        rail.receive()
elif rank == 1:
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            rail.receive()
    except Exception as error:  # the test checks its type
        if mode == "uncaught":
            raise
        result["error"] = f"{type(error).__name__}: {error}"
    if mode == "recover":
        while (message := rail.receive()) is None and time.monotonic() < deadline:
            pass
        assert message is not None, "the normal message never came"
        result["after"] = [message.source, message.nbytes, int(message.data[0])]
        rail.release_receive_buffer(message)
comm.Barrier()
if mode == "recover":
    result["finalize"] = rail.finalize()
else:
    del rail
    gc.collect()
results = comm.gather(result, root=0)
if rank == 0:
    print("RESULT " + json.dumps(results[1]), flush=True)
