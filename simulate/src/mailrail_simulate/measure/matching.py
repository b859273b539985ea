"""``mailrail simulate measure-matching``: what a receive costs as MPI's unexpected-message queue grows.

The model of incast (``mailrail simulate``) needs to know whether a receive gets slower when many messages
wait unexpected at the victim, and by how much.  This measures it on the MPI at hand, on the wire at hand
(shared memory on one machine, TCP between the nodes of a virtual cluster).  Rank 0 is the receiver; the
other ranks send it ``K`` messages of ``--bytes`` bytes, 8 by default (message ``i``, ``i`` in ``0..K-1``,
has tag ``i`` and comes from sender ``1 + i % senders``) before it posts any receive for them, so all ``K``
wait in the unexpected queue (above the MPI's eager limit, their rendezvous requests do).  Then, with the
queue still about ``K`` long, it times ``--receives`` receives of each kind, one kind after the other:

- ``head, wildcard``: ``Recv(ANY_SOURCE, ANY_TAG)``, MailRail's own receive: matches the oldest message;
- ``tail, any source``: ``Recv(ANY_SOURCE, tag)`` for the newest message left: a scan of the whole queue,
  if the MPI scans (Open MPI's ob1 keeps a queue per sender and looks in each);
- ``tail, specific``: ``Recv(source, tag)`` for the newest message left: a scan of that sender's queue.

Filling is timed too (the receiver's side: from a barrier until every sender's last message is in), with
the receiver's resident memory and minor page faults per queued message.  Every message is then received
(the rest with the wildcard) and checked by its tag, source and size: each index exactly once.  ``K`` is at
most the MPI's largest tag.

Run it as ``mailrail run -n 2 simulate measure-matching`` (one sender), ``-n 4`` (three senders: any-source
scans several queues), and ``mailrail run -n 2 --cluster 2 simulate measure-matching`` for TCP between two
nodes.
"""

from __future__ import annotations

import argparse
import resource
import statistics
import time
from typing import Any

from mailrail_tools.flags import int_in, int_list_in, one_line_errors, usage_error
from mailrail_tools.memory import memory_problem
from mailrail_tools.mpi_facts import mpi_library
from mailrail_tools.output import format_table, write_json

#: Queue lengths measured by default: 10^3 to 10^6 (add 10000000 for the issue's 10^7, if the receiver has the
#: memory: BYTES_PER_QUEUED_MESSAGE each is checked first).
DEFAULT_QUEUES = [1_000, 10_000, 100_000, 1_000_000]
#: A generous bound of a queued 8-byte message's cost to the receiver (MPI's descriptor and fragment),
#: for the memory check before a run; the run measures the real figure.
BYTES_PER_QUEUED_MESSAGE = 1024
#: The command, as its errors name it.
COMMAND = "simulate measure-matching"
KINDS = ("head, wildcard", "tail, any source", "tail, specific")
SENDER_WINDOW = 1024  # a sender's sends completed together


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.add_argument(
        "--queue",
        type=int_list_in(4, 1 << 30),
        default=DEFAULT_QUEUES,
        metavar="K[,K...]",
        help="unexpected queue lengths to measure (default 1000,10000,100000,1000000)",
    )
    parser.add_argument(
        "--receives",
        type=int_in(1, 1_000_000),
        default=100,
        help="timed receives of each kind per queue length (default %(default)s)",
    )
    parser.add_argument(
        "--bytes",
        type=int_in(8, 1 << 20),
        default=8,
        help="bytes per message, 8..1048576 (default %(default)s)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")


def _resident_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


def run(args: argparse.Namespace) -> int:
    from mailrail._mpi import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if size < 2:
        return usage_error(
            COMMAND,
            f"needs 2 or more ranks (one receiver), got {size}: mailrail run -n 2 {COMMAND}",
            comm,
        )
    tag_ub = int(comm.Get_attr(MPI.TAG_UB))
    largest = max(args.queue)
    if largest >= tag_ub:
        return usage_error(
            COMMAND,
            f"--queue {largest}: this MPI's tags stop at {tag_ub} (a message's tag is its index)",
            comm,
        )
    need = (BYTES_PER_QUEUED_MESSAGE + args.bytes) * largest if rank == 0 else 8 * largest
    problem = memory_problem(comm, need, f"a queue of {largest:,} messages")
    if problem:
        return usage_error(COMMAND, problem, comm)
    wire = comm.Dup()  # the measured traffic alone on its communicator
    rows: list[dict[str, Any]] = []
    try:
        for queue in args.queue:
            rows.append(_measure(wire, queue, min(args.receives, queue // 4), args.bytes, tag_ub))  # >= K/4 left
    finally:
        wire.Free()
    if rank == 0:
        document = {
            "benchmark": "matching",
            "mpi": mpi_library(),
            "ranks": size,
            "senders": size - 1,
            "message_bytes": args.bytes,
            "points": rows,
        }
        write_json(args.json, document)
        print(
            format_table(
                [
                    "queue",
                    "fill us/msg",
                    "RSS B/msg",
                    "faults/msg",
                    "head wildcard us",
                    "tail anysrc us",
                    "tail exact us",
                ],
                [
                    (
                        row["queue"],
                        row["fill_us_per_message"],
                        row["resident_bytes_per_message"],
                        row["minor_faults_per_message"],
                        *(row["receive_us"][kind]["median"] for kind in KINDS),
                    )
                    for row in rows
                ],
            )
        )
        print(
            f"{size - 1} sender(s) to rank 0, {args.bytes}-byte messages; receive times are medians of "
            f"{rows[0]['receives'] if rows else 0}+ receives with the queue about K long; every message checked once"
        )
    return 0


def _measure(wire: Any, queue: int, receives: int, nbytes: int, tag_ub: int) -> dict[str, Any]:
    """One queue length: fill, time each kind of receive, drain and check (collective)."""
    import numpy as np

    from mailrail._mpi import MPI

    rank, size = wire.Get_rank(), wire.Get_size()
    senders = size - 1
    marker = tag_ub  # after a sender's last message: its arrival means the sender's messages are all in
    wire.Barrier()
    if rank != 0:
        # One read-only payload for every send (the tag says which message it is).  Messages above the MPI's
        # eager limit go by rendezvous: their sends complete only once received, so none is waited for
        # before the marker (that would deadlock); eager ones complete at once and are dropped a window at a time.
        payload = np.zeros(nbytes, dtype=np.uint8)
        pending: list[Any] = []
        for index in range(rank - 1, queue, senders):
            pending.append(wire.Isend([payload, MPI.BYTE], 0, index))
            if len(pending) % SENDER_WINDOW == 0 and MPI.Request.Testall(pending):
                pending.clear()
        wire.Send([payload[:8], MPI.BYTE], 0, marker)  # 8 bytes: eager, whatever the messages' size
        MPI.Request.Waitall(pending)
        wire.Barrier()
        return {}
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    resident = _resident_bytes()
    start = time.perf_counter()
    scratch = np.zeros(nbytes, np.uint8)
    status = MPI.Status()
    for sender in range(1, size):
        wire.Recv([scratch, MPI.BYTE], sender, marker)  # in order from each sender: its messages are queued
    fill_s = time.perf_counter() - start
    resident = _resident_bytes() - resident
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    seen = np.zeros(queue, dtype=bool)
    newest = queue - 1  # the newest message not yet received

    def take(source: int, tag: int) -> float:
        began = time.perf_counter()
        wire.Recv([scratch, MPI.BYTE], source, tag, status)
        took = time.perf_counter() - began
        index = status.Get_tag()
        if not 0 <= index < queue or seen[index] or status.Get_source() != 1 + index % senders:
            raise AssertionError(
                f"{COMMAND}: message {index} from rank {status.Get_source()} received twice, out of range "
                f"0..{queue - 1} or from the wrong sender"
            )
        if status.Get_count(MPI.BYTE) != nbytes:
            raise AssertionError(f"{COMMAND}: message {index} has {status.Get_count(MPI.BYTE)} bytes, not {nbytes}")
        seen[index] = True
        return took

    def newest_left() -> int:
        nonlocal newest
        while seen[newest]:
            newest -= 1
        return newest

    times: dict[str, list[float]] = {kind: [] for kind in KINDS}
    for _ in range(receives):
        times["head, wildcard"].append(take(MPI.ANY_SOURCE, MPI.ANY_TAG))
    for _ in range(receives):
        times["tail, any source"].append(take(MPI.ANY_SOURCE, newest_left()))
    for _ in range(receives):
        index = newest_left()
        times["tail, specific"].append(take(1 + index % senders, index))
    for _ in range(queue - 3 * receives):
        take(MPI.ANY_SOURCE, MPI.ANY_TAG)
    if not seen.all():
        raise AssertionError(f"{COMMAND}: {int((~seen).sum())} of {queue} messages never arrived")
    wire.Barrier()
    return {
        "queue": queue,
        "receives": receives,
        "fill_s": fill_s,
        "fill_us_per_message": 1e6 * fill_s / queue,
        "resident_bytes_per_message": resident / queue,
        "minor_faults_per_message": faults / queue,
        "receive_us": {
            kind: {
                "median": 1e6 * statistics.median(values),
                "min": 1e6 * min(values),
                "max": 1e6 * max(values),
            }
            for kind, values in times.items()
        },
    }
