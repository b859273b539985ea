"""``mailrail replay TRACE_DIR``: replay a recorded trace over MailRail and verify delivery.

Run under mpiexec with one rank per trace file (``mailrail run -n 2 replay DIR``).
Each rank first reads its own file once (validation, and the bytes each
receiver must get), and all ranks agree the trace is sound before any message
flies: a corrupt file stops the whole job cleanly instead of hanging its peers.
Then each rank replays phase by phase: recorded messages, coalesced into
datagrams (:mod:`.packing`), carry deterministic payload bytes; after each
phase ``rail.barrier()`` plays YGM's barrier.  At the end every (sender,
receiver) pair compares bytes, datagrams and a CRC-32 sum, and each barrier is
checked to have delivered its phase: ``verified`` is the conjunction.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mailrail.config import Config, env_name
from mailrail.errors import ConfigError, TraceFormatError
from mailrail.failure import abort_job
from mailrail.trace.directory import TraceDir
from mailrail.trace.events import Event, MessageBlock, PhaseEnd
from mailrail.trace.summary import RankSummary, phase_count, summarize

from ..cluster.job_on_cluster import run_and_report
from ..cluster.options import ClusterChoice, add_cluster_arguments, cluster_spec, without_cluster_flags
from ..cluster.privileges import rerun_without_root
from ..flags import MPI_INT_MAX, add_rail_arguments, float_in, int_in, one_line_errors, rail_options
from ..output import format_table, write_json
from .packing import DatagramPacker
from .spool import Spool

#: The paper replays with 8 KiB datagrams (MailRail's own default is 4 KiB).
DEFAULT_DATAGRAM_SIZE = 8192
#: Delivery problems reported per rank (and in the document); the count is always complete.
MAX_PROBLEMS = 20
#: --timeout: some 116 days, past any job; a longer one is a typo.
TIMEOUT_MAX = 1e7


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    # dest is not "trace": that is the MAILRAIL_TRACE knob, which rail_options() would pick up
    parser.add_argument("trace_dir", metavar="TRACE_DIR", help="directory of trace_<rank>.bin or .txt files (.gz too)")
    parser.add_argument(
        "--datagram-size",
        type=int_in(1, MPI_INT_MAX),
        default=None,
        help=f"bytes per datagram: messages are coalesced/split into these "
        f"(default {DEFAULT_DATAGRAM_SIZE}, or MAILRAIL_DATAGRAM_SIZE if set)",
    )
    parser.add_argument(
        "--pacing",
        action="store_true",
        help="keep the recorded gaps between messages (JSON-lines traces: they have timestamps)",
    )
    parser.add_argument("--json", metavar="PATH", help="write the result document as JSON")
    parser.add_argument(
        "--timeout",
        type=float_in(0.001, TIMEOUT_MAX),
        default=None,
        help="with --cluster: kill every rank after this many seconds (0.001..1e7)",
    )
    add_cluster_arguments(parser)
    add_rail_arguments(parser, skip=("datagram_size",))


class Payload:
    """Deterministic datagram contents: a window into one pseudo-random pattern.

    The window's start depends on (source, destination, sequence), so datagrams differ
    and a misdelivered or corrupted one changes the receiver's CRC sum.
    """

    PERIOD = 1 << 16

    def __init__(self, datagram_size: int) -> None:
        rng = np.random.default_rng(0x6D61696C)
        self._pattern = rng.integers(0, 256, self.PERIOD + datagram_size, dtype=np.uint8)

    def fill(self, buf: np.ndarray, source: int, dest: int, sequence: int, nbytes: int) -> int:
        """Write *nbytes* into *buf*; return their CRC-32."""
        start = (source * 0x9E3779B1 + dest * 0x85EBCA77 + sequence * 0xC2B2AE3D) % self.PERIOD
        view = buf[:nbytes]
        view[:] = self._pattern[start : start + nbytes]
        return zlib.crc32(view)


@dataclass
class PeerTally:
    """Datagrams, bytes and CRC-32 sum per peer rank (Python ints: exact, no overflow)."""

    datagrams: list[int]
    bytes: list[int]
    crc: list[int]

    @classmethod
    def zeros(cls, ranks: int) -> PeerTally:
        return cls([0] * ranks, [0] * ranks, [0] * ranks)

    def add(self, peer: int, nbytes: int, crc: int) -> None:
        self.datagrams[peer] += 1
        self.bytes[peer] += nbytes
        self.crc[peer] += crc


@dataclass
class PhaseResult:
    messages: int = 0
    bytes: int = 0
    datagrams: int = 0
    seconds: float = 0.0


class Replayer:
    """One rank's replay: sends its recorded phases, tallies what it sends and receives."""

    def __init__(self, rail, events: Iterator[Event], phases: int, *, pacing: bool) -> None:
        self.rail = rail
        self.rank = rail.rank
        self._events = events
        self.phases = phases
        self.pacing = pacing
        self.payload = Payload(rail.datagram_size)
        self.packer = DatagramPacker(rail.datagram_size)
        self.sent = PeerTally.zeros(rail.size)
        self.received = PeerTally.zeros(rail.size)
        self.snapshots: list[list[int]] = []  # bytes received per source when each barrier returned
        self.results: list[PhaseResult] = []

    def run(self) -> None:
        for _ in range(self.phases):
            result = PhaseResult()
            start = time.perf_counter()
            self._send_phase(result, start)
            self.rail.barrier(handler=self._count)
            result.seconds = time.perf_counter() - start
            self.snapshots.append(list(self.received.bytes))
            self.results.append(result)
        leftover = sum(len(e) for e in self._events if isinstance(e, MessageBlock))
        if leftover:  # the phase count came from every rank's file: a replay bug if this happens
            raise AssertionError(f"rank {self.rank}: {leftover} messages left after {self.phases} phases")

    def _send_phase(self, result: PhaseResult, start: float) -> None:
        first_stamp = None
        for event in self._events:
            if isinstance(event, PhaseEnd):
                break
            result.messages += len(event)
            result.bytes += int(event.sizes.sum())
            if not self.pacing:
                for dest, nbytes in self.packer.add_block(event.dests, event.sizes):
                    self._send(dest, nbytes, result)
                continue
            for dest, nbytes, stamp in zip(event.dests.tolist(), event.sizes.tolist(), event.timestamps.tolist()):
                first_stamp = stamp if first_stamp is None else first_stamp
                due = start + (stamp - first_stamp) * 1e-6
                if time.perf_counter() < due:
                    # A paced message must not wait behind the gap: send what is packed so far.
                    for datagram in self.packer.flush():
                        self._send(*datagram, result)
                    while time.perf_counter() < due:
                        self._poll()
                for datagram in self.packer.add(dest, nbytes):
                    self._send(*datagram, result)
        for datagram in self.packer.flush():
            self._send(*datagram, result)

    def _send(self, dest: int, nbytes: int, result: PhaseResult) -> None:
        rail = self.rail
        buf = rail.reserve_send_buffer()
        while buf is None:  # backpressure: keep receiving until a send buffer frees up
            self._poll()
            buf = rail.reserve_send_buffer()
        crc = self.payload.fill(buf, self.rank, dest, self.sent.datagrams[dest], nbytes)
        rail.send(dest, buf, nbytes)
        self.sent.add(dest, nbytes, crc)
        result.datagrams += 1
        self._poll()

    def _poll(self) -> None:
        message = self.rail.receive()
        if message is not None:
            self._count(message)
            self.rail.release_receive_buffer(message)

    def _count(self, message) -> None:
        self.received.add(message.source, message.nbytes, zlib.crc32(message.data))


def check_delivery(
    rank: int, expected: np.ndarray, sent: list[tuple[int, int]], received: PeerTally, snapshots: list[list[int]]
) -> list[str]:
    """What went wrong with the messages to *rank*; empty if every recorded byte arrived intact.

    *expected[s, p]*: bytes the trace says rank *s* sends to *rank* in phase *p*;
    *sent[s]*: (datagrams, CRC-32 sum) rank *s* put on the wire to *rank*;
    *received*: what arrived; *snapshots[p][s]*: bytes from *s* when barrier *p* returned.
    """
    problems = []
    for source, (datagrams, crc) in enumerate(sent):
        want = int(expected[source].sum())
        if received.bytes[source] != want:
            problems.append(
                f"rank {rank} received {received.bytes[source]} bytes from rank {source}; the trace records {want}"
            )
        if received.datagrams[source] != datagrams:
            problems.append(
                f"rank {rank} received {received.datagrams[source]} datagrams from rank {source}, "
                f"which sent {datagrams}"
            )
        if received.crc[source] != crc:
            problems.append(
                f"rank {rank}: CRC-32 sum of the datagrams from rank {source} is "
                f"{received.crc[source]}, the sender's is {crc} (corrupt or misdelivered payload)"
            )
        cumulative = np.cumsum(expected[source])
        for phase, snapshot in enumerate(snapshots):
            if snapshot[source] < cumulative[phase]:
                problems.append(
                    f"rank {rank}: barrier {phase} returned with {snapshot[source]} of the "
                    f"{int(cumulative[phase])} bytes rank {source} sent in phases 0..{phase}"
                )
                break
    return problems


@dataclass
class Plan:
    """Everything a rank learns before replaying: the trace, its own file's summary, the options."""

    trace: TraceDir
    summary: RankSummary
    options: dict[str, Any] = field(default_factory=dict)
    spool: Spool | None = None  # JSON traces: the decoded events, replayed without parsing again

    def events(self, rank: int) -> Iterator[Event]:
        return self.spool.events() if self.spool else self.trace.events(rank)


def _plan(args: argparse.Namespace, rank: int, size: int) -> Plan:
    trace = TraceDir.open(args.trace_dir)
    trace.require_ranks(size)
    if args.pacing and trace.format != "json":
        raise TraceFormatError(
            f"{args.trace_dir}: --pacing needs recorded timestamps, which only JSON-lines "
            f"traces (trace_<rank>.txt) have; this trace is {trace.format}"
        )
    options = rail_options(args)
    if args.datagram_size is None and not os.environ.get(env_name("datagram_size"), "").strip():
        options["datagram_size"] = DEFAULT_DATAGRAM_SIZE
    config = Config.from_env(warn=False, **options)  # a bad knob fails here, on every rank alike
    if config.trace and os.path.realpath(config.trace) == os.path.realpath(args.trace_dir):
        raise ConfigError(f"MAILRAIL_TRACE={config.trace} would record this replay over the trace it reads")
    spool = Spool() if trace.format == "json" else None
    events = trace.events(rank)
    summary = summarize(spool.record(events) if spool else events, rank, trace.ranks)
    return Plan(trace, summary, options, spool)


def run(args: argparse.Namespace) -> int:
    if args.cluster is not None:
        return run_on_cluster(args)
    from mailrail._mpi import MPI  # on demand: importing it starts MPI, which parsing and --cluster must not

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    plan, problem = None, None
    try:
        plan = _plan(args, rank, size)
    except (TraceFormatError, ConfigError, OSError) as error:
        problem = str(error)
    problems = comm.allgather(problem)
    if any(problems):
        if rank == 0:
            for text in dict.fromkeys(p for p in problems if p):
                print(f"mailrail replay: {text}", file=sys.stderr)
        return 2
    try:
        phases = phase_count(args.trace_dir, comm.allgather((plan.summary.barriers, plan.summary.trailing_messages)))
    except TraceFormatError as error:
        if rank == 0:
            print(f"mailrail replay: {error}", file=sys.stderr)
        return 2
    try:
        document = _replay(comm, args, plan, phases)
    except Exception as error:  # one failing rank would leave the others in a barrier forever
        abort_job(error, comm=comm)
    finally:
        if plan.spool:
            plan.spool.close()
    if rank == 0:
        write_json(args.json, document)
        _print_summary(document)
    verified = comm.bcast(document["verified"] if rank == 0 else None, root=0)
    return 0 if verified else 1


def _replay(comm, args: argparse.Namespace, plan: Plan, phases: int) -> dict[str, Any] | None:
    from mailrail.rail import MailRail  # on demand, as mpi4py in run(): importing it starts MPI, which --help must not

    rank, size = comm.Get_rank(), comm.Get_size()
    with MailRail(comm, **plan.options) as rail:
        replayer = Replayer(rail, plan.events(rank), phases, pacing=args.pacing)
        comm.Barrier()
        start = time.perf_counter()
        replayer.run()
        elapsed = time.perf_counter() - start
        stats = rail.stats()
        datagram_size, mode = rail.datagram_size, rail.flow.name
        finalize = rail.finalize()

    # Bytes the trace says each source sends me, per phase (the final empty segment dropped),
    # and what each source put on the wire to me.
    expected = np.array(comm.alltoall(list(plan.summary.bytes[:phases].T)), dtype=np.int64).reshape(size, phases)
    sent = comm.alltoall(list(zip(replayer.sent.datagrams, replayer.sent.crc)))
    problems = check_delivery(rank, expected, sent, replayer.received, replayer.snapshots)
    problems += [
        f"rank {rank}: finalize() found {count} {kind} message(s)" for kind, count in finalize.items() if count
    ]

    counts = np.array([[r.messages, r.bytes, r.datagrams] for r in replayer.results], np.int64).reshape(phases, 3)
    seconds = np.array([r.seconds for r in replayer.results], np.float64)
    # A few problems per rank are enough to diagnose; the count says how many there were.
    gathered = comm.gather(
        (problems[:MAX_PROBLEMS], len(problems), stats, replayer.received.bytes, counts, seconds, elapsed), root=0
    )
    if rank != 0:
        return None
    all_problems = [p for g in gathered for p in g[0]]
    problem_count = sum(g[1] for g in gathered)
    gathered = [g[2:] for g in gathered]  # (stats, received bytes, counts, seconds, elapsed) per rank
    matrix = np.array([g[1] for g in gathered], dtype=np.int64).T  # [source, dest]: columns are receivers
    totals = sum(g[2] for g in gathered)
    phase_seconds = np.max([g[3] for g in gathered], axis=0) if phases else []
    runtime = max(g[4] for g in gathered)
    replayed_bytes = int(totals[:, 1].sum())
    return {
        "benchmark": "replay",
        "trace": os.path.abspath(args.trace_dir),
        "format": plan.trace.format,
        "ranks": size,
        "flow_control": mode,
        "datagram_size": datagram_size,
        "pacing": bool(args.pacing),
        "runtime_s": runtime,
        "goodput_bps": replayed_bytes / runtime if runtime > 0 else 0.0,
        "messages_replayed": int(totals[:, 0].sum()),
        "bytes_replayed": replayed_bytes,
        "datagrams": int(totals[:, 2].sum()),
        "credit_messages": sum(g[0]["credit_messages_sent"] for g in gathered),
        "deferred_sends": sum(g[0]["deferred_sends"] for g in gathered),
        "phases": [
            {
                "phase": p,
                "messages": int(totals[p, 0]),
                "bytes": int(totals[p, 1]),
                "datagrams": int(totals[p, 2]),
                "runtime_s": float(phase_seconds[p]),
            }
            for p in range(phases)
        ],
        "byte_matrix": matrix.tolist(),
        "verified": problem_count == 0,
        "problem_count": problem_count,
        "problems": all_problems[:MAX_PROBLEMS],
        "config": dict(plan.options),
    }


def _print_summary(document: dict[str, Any]) -> None:
    busy = [p for p in document["phases"] if p["messages"]]
    print(
        f"replay {document['trace']} ({document['format']}, {document['ranks']} ranks, "
        f"{len(document['phases'])} phases, {len(busy)} with messages)"
    )
    print(
        format_table(
            ["flow control", "runtime s", "goodput MB/s", "messages", "bytes", "datagrams", "credit msgs", "verified"],
            [
                (
                    document["flow_control"],
                    document["runtime_s"],
                    document["goodput_bps"] / 1e6,
                    document["messages_replayed"],
                    document["bytes_replayed"],
                    document["datagrams"],
                    document["credit_messages"],
                    "yes" if document["verified"] else "NO",
                )
            ],
        )
    )
    if 1 < len(busy) <= 20:
        print(
            format_table(
                ["phase", "messages", "bytes", "datagrams", "runtime s"],
                [(p["phase"], p["messages"], p["bytes"], p["datagrams"], p["runtime_s"]) for p in busy],
            )
        )
    for problem in document["problems"]:
        print(f"  {problem}", file=sys.stderr)


def run_on_cluster(args: argparse.Namespace) -> int:
    """``mailrail replay TRACE_DIR --cluster N``: one rank per trace file, on a virtual cluster."""
    choice = ClusterChoice.parse(args.cluster)
    status = rerun_without_root(args.mailrail_argv)
    if status is not None:
        return status
    try:
        ranks = TraceDir.open(args.trace_dir).ranks
    except TraceFormatError as error:
        print(f"mailrail replay: {error}", file=sys.stderr)
        return 2
    program = [sys.executable, "-m", "mpi4py", "-m", "mailrail_tools", *without_cluster_flags(args.mailrail_argv)]
    spec = cluster_spec(args, choice, ranks)
    return run_and_report(spec, ranks, program, running=choice.name, timeout=args.timeout, command="mailrail replay")
