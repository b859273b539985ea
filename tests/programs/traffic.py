"""Exactly-once delivery check, run under mpiexec by the tests.

Every rank sends a random number of messages of random sizes (0..datagram
size) to random destinations (itself included), or to the victims only
(``--pattern incast``), half to the victims and half anywhere (``hotspot``), or
to two fixed partners each, among them the victims (``sparse``: most pairs
never talk).  Payloads are deterministic bytes stamped with
(source, sequence).  Receivers check every payload, reject duplicates, and at
the end every (sender, receiver) pair compares message counts, byte counts and
a CRC sum with what the sender sent.  MailRail options come from MAILRAIL_*
variables.  Rank 0 prints one line ``RESULT <json>``; any failure raises.
"""

import argparse
import json
import socket
import time
import zlib

import numpy as np
from mpi4py import MPI

from mailrail import MailRail


def payload(source: int, seq: int, nbytes: int) -> np.ndarray:
    data = ((np.arange(nbytes, dtype=np.uint32) * 2654435761 + seq * 40503 + source * 977) >> 11).astype(np.uint8)
    header = np.array([source, seq], dtype="<u4").view(np.uint8)
    data[: min(8, nbytes)] = header[: min(8, nbytes)]
    return data


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pattern", choices=("uniform", "incast", "hotspot", "sparse"), default="uniform")
    parser.add_argument("--max-messages", type=int, default=300)
    parser.add_argument("--victims", type=int, default=1)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--hold-seconds",
        type=float,
        default=0.0,
        help="hold received messages until nothing new arrived for this long, "
        "then release them all (fills the credit window)",
    )
    args = parser.parse_args()

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng([args.seed, rank])
    rail = MailRail(comm)
    datagram = rail.datagram_size
    victims = np.random.default_rng(args.seed).choice(size, args.victims, replace=False)
    count = int(rng.integers(args.max_messages // 2, args.max_messages + 1))
    others = [v for v in victims if v != rank]
    if args.pattern == "uniform":
        dests = rng.integers(0, size, count)
    elif args.pattern == "incast":
        dests = rng.choice(others, count) if others else np.empty(0, int)
    elif args.pattern == "hotspot":
        dests = np.where(rng.random(count) < 0.5, rng.choice(others or [rank], count), rng.integers(0, size, count))
    else:  # sparse: two partners, one a victim (or, on a victim, its next rank), one at random
        partners = [others[0] if others else (rank + 1) % size, int(rng.integers(0, size))]
        dests = rng.choice(partners, count)
    sizes = rng.integers(0, datagram + 1, len(dests))
    sizes[: min(3, len(sizes))] = [0, datagram, 1][: min(3, len(sizes))]

    # What each pair should see: messages, bytes, CRC sum.
    sent = np.zeros((size, 3), dtype=np.int64)
    for seq, (dest, nbytes) in enumerate(zip(dests, sizes)):
        sent[dest] += (1, nbytes, zlib.crc32(payload(rank, seq, int(nbytes))))
    expected_messages = int(sum(comm.alltoall(sent[:, 0].tolist())))

    got = np.zeros((size, 3), dtype=np.int64)
    seen: set[tuple[int, int]] = set()
    received = 0

    held = []
    last_arrival = time.monotonic()

    def take() -> bool:
        nonlocal last_arrival
        message = rail.receive()
        if message is None:
            if held and time.monotonic() - last_arrival >= args.hold_seconds:
                for old in held:
                    rail.release_receive_buffer(old)
                held.clear()
            return False
        last_arrival = time.monotonic()
        check(message)
        if args.hold_seconds:
            held.append(message)
        else:
            rail.release_receive_buffer(message)
        return True

    def check(message) -> None:
        nonlocal received
        data = message.data
        assert data.nbytes == message.nbytes and not data.flags.writeable
        if message.nbytes >= 8:
            source, seq = (int(v) for v in data[:8].view("<u4"))
            assert source == message.source, (source, message.source)
            assert (source, seq) not in seen, f"duplicate message {seq} from {source}"
            seen.add((source, seq))
            assert np.array_equal(data, payload(source, seq, message.nbytes)), f"corrupt {seq} from {source}"
        got[message.source] += (1, message.nbytes, zlib.crc32(data))
        received += 1

    for seq, (dest, nbytes) in enumerate(zip(dests, sizes)):
        take()
        buf = rail.reserve_send_buffer()
        while buf is None:
            take()
            buf = rail.reserve_send_buffer()
        buf[:nbytes] = payload(rank, seq, int(nbytes))
        rail.send(int(dest), buf, int(nbytes))
        take()
    if args.hold_seconds:  # hold-and-release until everything expected is here
        while received < expected_messages:
            take()
        for message in held:
            rail.release_receive_buffer(message)
        held.clear()
    rail.barrier(handler=check)  # quiescence: every rank keeps progressing until all is delivered
    assert received == expected_messages, (received, expected_messages)
    assert rail.stats()["deferred_now"] == 0

    # Every (sender, receiver) pair agrees on counts, bytes and checksums.
    sent_to_me = np.array(comm.alltoall([tuple(row) for row in sent.tolist()]), dtype=np.int64)
    mismatches = np.argwhere((sent_to_me != got).any(axis=1)).ravel().tolist()
    assert not mismatches, (
        f"rank {rank}: pairs differ for sources {mismatches}: "
        f"sent {sent_to_me[mismatches].tolist()} got {got[mismatches].tolist()}"
    )
    stats = dict(rail.stats(), host=socket.gethostname())
    report = rail.finalize(strict=True)
    all_stats = comm.gather(stats, root=0)
    if rank == 0:
        print("RESULT " + json.dumps({"stats": all_stats, "victims": victims.tolist(), "finalize": report}), flush=True)


if __name__ == "__main__":
    main()
