"""``mailrail bench stream``: message rate between rank pairs, MailRail vs a raw mpi4py loop.

Ranks pair up (0->1, 2->3, ...); each sender streams ``--messages`` messages of
each size to its partner.  In the same run, a raw mpi4py loop with persistent
requests (``Startall``/``Waitall`` over a window) moves the same messages:
the ceiling MailRail is measured against (and a batched ``Startall`` loop, MPI's own
loop in C, for reference).  Run with ``mpiexec -n 2`` (or any
even count).
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

import numpy as np

from mailrail.config import Config
from mailrail.errors import ConfigError

from ..flags import (
    MPI_INT_MAX,
    add_rail_arguments,
    int_in,
    int_list_in,
    one_line_errors,
    rail_options,
    usage_error,
)
from ..mpi_facts import mpi_library
from ..output import format_table, write_json
from .pairs import partner, unpaired

DEFAULT_SIZES = (8, 64, 4096, 65536)
RAW_WINDOW = 64


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.add_argument(
        "--sizes",
        type=int_list_in(1, MPI_INT_MAX),
        default=list(DEFAULT_SIZES),
        help=f"payload sizes in bytes, comma-separated (default: {','.join(map(str, DEFAULT_SIZES))})",
    )
    parser.add_argument(
        "--messages", type=int_in(1, MPI_INT_MAX), default=20000, help="messages per size and sender (default 20000)"
    )
    parser.add_argument(
        "--max-recvs-compare",
        type=int_list_in(1, MPI_INT_MAX, allow_empty=True),
        default=[64, 4096],
        help="MAILRAIL_MAX_RECVS values compared at 4096 B, comma-separated ('' to skip; default 64,4096)",
    )
    parser.add_argument(
        "--repeats",
        type=int_in(1, 1000),
        default=3,
        help="runs of each measurement, interleaved; the median is reported (default %(default)s)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    add_rail_arguments(parser, skip=("datagram_size", "max_recvs"))


def run(args: argparse.Namespace) -> int:
    options = rail_options(args)
    problem = _config_problem(options, args.sizes, args.max_recvs_compare)
    if problem:  # every rank alike, before MPI: no rail of a later size fails mid-run
        return usage_error("bench stream", problem)
    from mailrail._mpi import MPI
    from mailrail.rail import MailRail  # MailRail starts MPI: imported when the run begins, not to parse flags

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    status = unpaired("bench stream", comm)
    if status is not None:
        return status
    peer, sender = partner(rank)
    sizes = args.sizes
    n = args.messages
    results = []
    repeats = range(args.repeats)
    for nbytes in sizes:
        with MailRail(comm, datagram_size=nbytes, **options) as rail:
            runs = [
                (
                    _mailrail_rate(comm, rail, peer, sender, nbytes, n),
                    _raw_rate(comm, peer, sender, nbytes, n, batched=False),
                    _raw_rate(comm, peer, sender, nbytes, n, batched=True),
                )
                for _ in repeats
            ]
        mailrail_rate, raw_rate, batched_rate = (statistics.median(column) for column in zip(*runs))
        results.append(
            {
                "size": nbytes,
                "mailrail_msgs_per_s": mailrail_rate,
                "raw_msgs_per_s": raw_rate,
                "ratio": mailrail_rate / raw_rate,
                "raw_batched_msgs_per_s": batched_rate,
                "ratio_batched": mailrail_rate / batched_rate,
                "mailrail_bytes_per_s": mailrail_rate * nbytes,
            }
        )
    max_recvs = []
    if args.max_recvs_compare:
        posted_counts = list(dict.fromkeys(args.max_recvs_compare))
        rates: dict[int, list[float]] = {posted: [] for posted in posted_counts}
        for _ in repeats:  # interleaved, so drift of the machine hits both alike
            for posted in posted_counts:
                slot_options = dict(options, recv_pool_slots=max(posted, int(options.get("recv_pool_slots", 0))))
                with MailRail(comm, datagram_size=4096, max_recvs=posted, **slot_options) as rail:
                    rates[posted].append(_mailrail_rate(comm, rail, peer, sender, 4096, n))
        max_recvs = [
            {
                "max_recvs": posted,
                "size": 4096,
                "mailrail_msgs_per_s": statistics.median(rates[posted]),
                "runs": rates[posted],
            }
            for posted in posted_counts
        ]
    if rank == 0:
        document = {
            "benchmark": "stream",
            "mpi": mpi_library(),
            "ranks": size,
            "messages": n,
            "repeats": args.repeats,
            "flow_control": _mode(options),
            "results": results,
            "max_recvs": max_recvs,
            "config": options,
        }
        write_json(args.json, document)
        print(
            format_table(
                ["size B", "MailRail msg/s", "raw msg/s", "ratio", "raw batched msg/s", "ratio", "MailRail MB/s"],
                [
                    (
                        r["size"],
                        r["mailrail_msgs_per_s"],
                        r["raw_msgs_per_s"],
                        r["ratio"],
                        r["raw_batched_msgs_per_s"],
                        r["ratio_batched"],
                        r["mailrail_bytes_per_s"] / 1e6,
                    )
                    for r in results
                ],
            )
        )
        print(
            "raw: plain mpi4py, one persistent request restarted per message; raw batched: "
            f"Startall/Waitall over {RAW_WINDOW} requests"
        )
        if len(max_recvs) == 2:
            a, b = max_recvs
            print(
                f"MAX_RECVS={b['max_recvs']} vs {a['max_recvs']} at 4096 B: "
                f"{b['mailrail_msgs_per_s'] / a['mailrail_msgs_per_s']:.2f}x the message rate"
            )
    return 0


def _mode(options: dict) -> str:
    return Config.from_env(warn=False, **options).flow_control


def _config_problem(options: dict[str, Any], sizes: list[int], posted_counts: list[int]) -> str | None:
    """Why one of the rails the run builds (a datagram size each, a --max-recvs-compare value each) is
    refused by :class:`~mailrail.config.Config`, or None."""
    try:
        for nbytes in sizes:
            Config.from_env(warn=False, **dict(options, datagram_size=nbytes))
        for posted in posted_counts:
            slots = max(posted, int(options.get("recv_pool_slots") or 0))
            Config.from_env(warn=False, **dict(options, datagram_size=4096, max_recvs=posted, recv_pool_slots=slots))
    except ConfigError as error:
        return str(error)
    return None


def _mailrail_rate(comm, rail, peer: int, sender: bool, nbytes: int, n: int) -> float:
    """Messages per second for one pair, from the first send to the last receive."""
    comm.Barrier()
    start = time.perf_counter()
    if sender:
        sent = 0
        while sent < n:
            buf = rail.reserve_send_buffer()
            if buf is None:
                message = rail.receive()
                if message is not None:
                    rail.release_receive_buffer(message)
                continue
            rail.send(peer, buf, nbytes)  # payload bytes left as they are: the raw loop writes none either
            sent += 1
        while rail.pending_sends():
            message = rail.receive()
            if message is not None:
                rail.release_receive_buffer(message)
        elapsed = 0.0
    else:
        received = 0
        while received < n:
            message = rail.receive()
            if message is not None:
                received += 1
                rail.release_receive_buffer(message)
        elapsed = time.perf_counter() - start
    return n / comm.allreduce(elapsed, op=_max())


def _raw_rate(comm, peer: int, sender: bool, nbytes: int, n: int, *, batched: bool) -> float:
    """The same stream in plain mpi4py over a ring of RAW_WINDOW persistent requests.

    Per message (``batched=False``): wait for the oldest request of the ring, restart it
    (the least Python a message can cost).  Batched: ``Startall``/``Waitall`` the whole
    ring at once (MPI's loop in C: the ceiling).
    """
    from mailrail._mpi import MPI

    raw = comm.Dup()
    window = min(RAW_WINDOW, n)
    buffers = np.zeros((window, max(nbytes, 1)), dtype=np.uint8)
    if sender:
        requests = [raw.Send_init([buffers[i], nbytes, MPI.BYTE], peer, 0) for i in range(window)]
    else:
        requests = [raw.Recv_init([buffers[i], nbytes, MPI.BYTE], peer, 0) for i in range(window)]
    raw.Barrier()
    start = time.perf_counter()
    if batched:
        done = 0
        while done < n:
            batch = requests[: min(window, n - done)]
            MPI.Prequest.Startall(batch)
            MPI.Request.Waitall(batch)
            done += len(batch)
    else:
        MPI.Prequest.Startall(requests)
        for i in range(window, n):
            request = requests[i % window]
            while not request.Test():
                pass
            request.Start()
        MPI.Request.Waitall(requests)
    elapsed = time.perf_counter() - start if not sender else 0.0
    for request in requests:
        request.Free()
    raw.Free()
    return n / comm.allreduce(elapsed, op=_max())


def _max():
    from mailrail._mpi import MPI

    return MPI.MAX
