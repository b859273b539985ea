"""A small MailRail application to record (run with MAILRAIL_TRACE=DIR) and compare with its replay.

Phases of random sends (sizes 0..datagram, destinations including the sender),
one phase sending nothing, and barrier handlers that answer some arrivals, so
the trace also holds sends made inside a barrier.  Rank 0 prints ``RESULT`` with
the byte matrix the application sent (row: sender) and the phases it ran.
"""

import argparse
import json

import numpy as np
from mpi4py import MPI

from mailrail import MailRail


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--phases", type=int, default=3)
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng([args.seed, rank])
    sent = np.zeros(size, np.int64)
    sends = 0

    with MailRail(comm) as rail:

        def send(dest: int, nbytes: int) -> bool:
            nonlocal sends
            buf = rail.reserve_send_buffer()
            if buf is None:
                return False
            buf[:nbytes] = 0x5A
            rail.send(dest, buf, nbytes)
            sent[dest] += nbytes
            sends += 1
            return True

        def receive_one() -> None:
            message = rail.receive()
            if message is not None:
                rail.release_receive_buffer(message)

        def answer(message) -> None:
            if message.nbytes % 5 == 0:  # a send made inside the barrier
                send(message.source, message.nbytes // 2)

        for phase in range(args.phases):
            count = 0 if phase == 1 else args.messages  # phase 1: nothing to send
            for dest, nbytes in zip(
                rng.integers(0, size, count).tolist(), rng.integers(0, rail.datagram_size + 1, count).tolist()
            ):
                while not send(dest, nbytes):
                    receive_one()
                receive_one()
            rail.barrier(handler=answer)

    matrix = comm.gather(sent.tolist(), root=0)
    total_sends = comm.reduce(sends, root=0)
    if rank == 0:
        print("RESULT " + json.dumps({"byte_matrix": matrix, "phases": args.phases, "sends": total_sends}), flush=True)


if __name__ == "__main__":
    main()
