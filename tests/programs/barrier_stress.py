"""Thousands of back-to-back barriers with random traffic in between: no hang, no early return.

Each round every rank sends 0-3 messages to random ranks; some arrivals make the
handler send a reply inside the barrier.  Every message carries its round, so a
barrier that returned early shows up as a message of an old round arriving later.
A hang is caught by the test's timeout.  MailRail options come from MAILRAIL_*.
"""

import argparse
import json

import numpy as np
from mpi4py import MPI

from mailrail import MailRail

parser = argparse.ArgumentParser()
parser.add_argument("--rounds", type=int, default=2000)
parser.add_argument("--seed", type=int, default=7)
args = parser.parse_args()

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
rng = np.random.default_rng([args.seed, rank])
rail = MailRail(comm)
current = 0
sent = received = replies = stale = 0


def send(dest: int, round_: int, hop: int) -> None:
    global sent
    buf = rail.reserve_send_buffer()
    while buf is None:
        handle_one()
        buf = rail.reserve_send_buffer()
    buf[:12] = np.array([round_, rank, hop], dtype="<u4").view(np.uint8)
    rail.send(dest, buf, 12)
    sent += 1


def handler(message) -> None:
    global received, replies, stale
    round_, source, hop = (int(v) for v in message.data[:12].view("<u4"))
    assert source == message.source
    if round_ < current:
        stale += 1  # a barrier returned before this message of round `round_` was delivered
    # (round_ > current is fine: a rank that left the barrier first already sends the next round)
    received += 1
    if hop == 0 and (round_ + source + rank) % 5 == 0:
        replies += 1
        send(source, round_, 1)  # sending from inside the barrier's handler


def handle_one() -> None:
    message = rail.receive()
    if message is not None:
        handler(message)
        rail.release_receive_buffer(message)


for current in range(args.rounds):
    for _ in range(int(rng.integers(0, 4))):
        send(int(rng.integers(0, size)), current, 0)
        handle_one()
    rail.barrier(handler=handler)

totals = comm.allreduce(np.array([sent, received, replies, stale]), op=MPI.SUM)
rail.finalize(strict=True)
if rank == 0:
    print(
        "RESULT "
        + json.dumps(
            {
                "sent": int(totals[0]),
                "received": int(totals[1]),
                "replies": int(totals[2]),
                "stale": int(totals[3]),
                "rounds": args.rounds,
            }
        ),
        flush=True,
    )
