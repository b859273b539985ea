"""``mailrail bench calls``: active messages with Python objects, ``rail.call`` vs mpi4py's pickled ``isend``.

Ranks pair up (0->1, 2->3, ...); each sender makes ``--calls`` calls of a module-level function with a
small tuple of arguments (an int, a short string, a float) on its partner, then ``rail.barrier()``
completes them.  In the same run, a raw mpi4py loop moves the same tuples the way an mpi4py user
sends Python objects: ``comm.isend(obj)``, one object per message (requests completed in windows of
``RAW_WINDOW``), ``comm.recv()`` on the partner.  Every receiver checks that each call arrived once:
the count and the sum of the numbers.

Asks, the calls that answer: both ranks of a pair ask their partner ``--calls`` times for the cube of a number
and answer its asks, with ``rail.ask`` (every ask outstanding, then ``mailrail.wait``) and with a raw mpi4py
request/reply (``isend`` of the question, ``irecv`` of the answer, ``RAW_WINDOW`` questions in flight, questions
served as they are probed); every answer is checked.  Rates are asks answered per second, both ranks together.
Run with ``mailrail run -n 2 bench calls`` (any even count).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections import deque
from typing import Any

from mailrail import Rail

from ..flags import MPI_INT_MAX, add_rail_arguments, int_in, one_line_errors, rail_options
from ..mpi_facts import mpi_library
from ..output import format_table, write_json
from .pairs import partner, unpaired

#: isend requests completed together in the raw loop.
RAW_WINDOW = 64


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.add_argument(
        "--calls", type=int_in(1, MPI_INT_MAX), default=100_000, help="calls per sender (default 100000)"
    )
    parser.add_argument(
        "--repeats",
        type=int_in(1, 1000),
        default=3,
        help="runs of each measurement, interleaved; the median is reported (default %(default)s)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    add_rail_arguments(parser)


class _Tally:
    """What this rank's calls received: their count and the sum of their numbers."""

    count = 0
    total = 0


def record(number: int, word: str, weight: float) -> None:
    """The called function: counts the call (module level, so it travels by reference)."""
    _Tally.count += 1
    _Tally.total += number


def run(args: argparse.Namespace) -> int:
    options = rail_options(args)
    from mailrail._mpi import MPI
    from mailrail.rail import MailRail  # MailRail starts MPI: imported when the run begins, not to parse flags

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    status = unpaired("bench calls", comm)
    if status is not None:
        return status
    peer, sender = partner(rank)
    n = args.calls
    runs: list[tuple[float, float]] = []
    ask_runs: list[tuple[float, float]] = []
    with MailRail(comm, **options) as rail:
        for _ in range(args.repeats):  # interleaved, so drift of the machine hits both alike
            runs.append((_call_rate(comm, rail, peer, sender, n), _isend_rate(comm, peer, sender, n)))
        datagrams = comm.allreduce(rail.channels.datagrams_sent)
        for _ in range(args.repeats):
            ask_runs.append((_ask_rate(comm, rail, peer, n), _raw_ask_rate(comm, peer, n)))
        stats = rail.stats()
    call_rate, isend_rate = (statistics.median(column) for column in zip(*runs))
    ask_rate, raw_ask_rate = (statistics.median(column) for column in zip(*ask_runs))
    calls_per_datagram = comm.allreduce(n * args.repeats if sender else 0) / max(1, datagrams)
    if rank == 0:
        document: dict[str, Any] = {
            "benchmark": "calls",
            "mpi": mpi_library(),
            "ranks": size,
            "calls": n,
            "repeats": args.repeats,
            "flow_control": stats["flow_control"],
            "implementation": stats["implementation"],
            "call_per_s": call_rate,
            "isend_per_s": isend_rate,
            "ratio": call_rate / isend_rate,
            "calls_per_datagram": calls_per_datagram,
            "runs": [{"call_per_s": a, "isend_per_s": b} for a, b in runs],
            "ask_per_s": ask_rate,
            "raw_ask_per_s": raw_ask_rate,
            "ask_ratio": ask_rate / raw_ask_rate,
            "ask_runs": [{"ask_per_s": a, "raw_ask_per_s": b} for a, b in ask_runs],
            "config": options,
        }
        write_json(args.json, document)
        print(
            format_table(
                ["what", "MailRail k/s", "mpi4py k/s", "ratio"],
                [
                    ("rail.call vs comm.isend", call_rate / 1e3, isend_rate / 1e3, call_rate / isend_rate),
                    ("rail.ask vs isend and irecv", ask_rate / 1e3, raw_ask_rate / 1e3, ask_rate / raw_ask_rate),
                ],
            )
        )
        print(
            f"median of {args.repeats} interleaved runs, {n} calls per sender of record(int, str, float) "
            f"({calls_per_datagram:,.0f} a datagram); comm.isend: one pickled tuple per MPI message, as mpi4py users "
            f"send objects; asks: {n} per rank, both ranks asking and answering, mpi4py with {RAW_WINDOW} in flight"
        )
    return 0


def _check(comm: Any, sender: bool, n: int, what: str) -> None:
    """Every receiver got each of its partner's *n* calls once (count and sum of the numbers)."""
    count, total = _Tally.count, _Tally.total
    _Tally.count = _Tally.total = 0
    if not sender and (count, total) != (n, n * (n - 1) // 2):
        raise AssertionError(
            f"{what}: received {count} calls summing to {total}, expected {n} summing to {n * (n - 1) // 2}"
        )


def _call_rate(comm: Any, rail: Rail, peer: int, sender: bool, n: int) -> float:
    """Calls per second for one pair, from the first call to the end of the barrier that completes them."""
    from mailrail._mpi import MPI

    comm.Barrier()
    start = time.perf_counter()
    if sender:
        call = rail.call
        for number in range(n):
            call(peer, record, number, "word", 1.5)
    rail.barrier()
    elapsed = time.perf_counter() - start
    _check(comm, sender, n, "rail.call")
    return float(n / comm.allreduce(elapsed, op=MPI.MAX))


def _isend_rate(comm: Any, peer: int, sender: bool, n: int) -> float:
    """The same objects with mpi4py's pickled point-to-point: ``isend`` one tuple per message, ``recv``."""
    from mailrail._mpi import MPI

    raw = comm.Dup()
    raw.Barrier()
    start = time.perf_counter()
    if sender:
        window: list[Any] = []
        for number in range(n):
            window.append(raw.isend((number, "word", 1.5), peer, 0))
            if len(window) == RAW_WINDOW:
                MPI.Request.waitall(window)
                window = []
        MPI.Request.waitall(window)
    else:
        for _ in range(n):
            record(*raw.recv(source=peer, tag=0))
    raw.Barrier()
    elapsed = time.perf_counter() - start
    raw.Free()
    _check(comm, sender, n, "comm.isend")
    return float(n / comm.allreduce(elapsed, op=MPI.MAX))


def cube(number: int) -> int:
    """An ask's function: its answer is checked by the asker."""
    return number**3


def _ask_rate(comm: Any, rail: Rail, peer: int, n: int) -> float:
    """Asks answered per second, both ranks of the pair asking: every ask outstanding, then one wait."""
    import mailrail
    from mailrail._mpi import MPI

    comm.Barrier()
    start = time.perf_counter()
    ask = rail.ask
    answers = mailrail.wait([ask(peer, cube, number) for number in range(n)])
    rail.barrier()
    elapsed = time.perf_counter() - start
    _check_answers(answers, n, "rail.ask")
    return float(2 * n / comm.allreduce(elapsed, op=MPI.MAX))


def _raw_ask_rate(comm: Any, peer: int, n: int) -> float:
    """The same asks with mpi4py's pickled point-to-point: a question ``isend`` and its answer's ``irecv`` per ask,
    :data:`RAW_WINDOW` in flight; questions are probed for and answered between."""
    from mailrail._mpi import MPI

    question, reply = 1, 2
    raw = comm.Dup()
    raw.Barrier()
    start = time.perf_counter()
    asked = served = 0
    answers: list[int] = []
    waiting: deque[Any] = deque()  # answers' receives, oldest first (they match in that order)
    sends: list[Any] = []
    while len(answers) < n or served < n:
        while asked < n and len(waiting) < RAW_WINDOW:
            sends.append(raw.isend(asked, peer, question))
            waiting.append(raw.irecv(source=peer, tag=reply))
            asked += 1
        while served < n and raw.iprobe(source=peer, tag=question):
            sends.append(raw.isend(cube(raw.recv(source=peer, tag=question)), peer, reply))
            served += 1
        while waiting:
            done, value = waiting[0].test()
            if not done:
                break
            waiting.popleft()
            answers.append(value)
        if len(sends) >= 4 * RAW_WINDOW:
            MPI.Request.waitall(sends)
            sends = []
    MPI.Request.waitall(sends)
    raw.Barrier()
    elapsed = time.perf_counter() - start
    raw.Free()
    _check_answers(answers, n, "mpi4py request/reply")
    return float(2 * n / comm.allreduce(elapsed, op=MPI.MAX))


def _check_answers(answers: list[int], n: int, what: str) -> None:
    if answers != [number**3 for number in range(n)]:
        wrong = next((i for i, answer in enumerate(answers) if answer != i**3), len(answers))
        raise AssertionError(f"{what}: {len(answers)} answers, the first wrong or missing at ask {wrong}")
