"""``mailrail bench adversarial``: the adversarial incast benchmark (run under mpiexec).

``--victims V`` ranks, chosen at random from ``--seed``, receive everything:
every rank sends its messages to the victims (never to itself), spread evenly
over them and shuffled into its own random order, with no compute between
sends.  Ranks receive aggressively: before the first send, while waiting for a
send buffer and after every send.  A trial ends exactly: each victim knows
how many messages it must receive, each sender waits until its sends completed
locally, and only that part is timed; then a quiescence barrier (which keeps
every rank progressing: in node mode credit returns may be addressed to any
rank of the sending node) and an MPI barrier separate the trials.

Goodput is the bits received by all victims divided by the trial's runtime
(the slowest rank's).  One MailRail serves every trial, so later trials reuse
warm pools.  Rank 0 prints a summary and, with ``--json``, writes the document
described on the documentation's benchmarks page.

``--interleave MODES`` runs several flow-control modes in one job instead: a
MailRail each, their trials taking turns (the first mode's trial 1, the
second's, ..., then every mode's trial 2).  On an oversubscribed machine the
scheduler's placement of the ranks on cores is drawn per job and moves a
mode's goodput from job to job far more than between the trials of one job
(docs: performance, "Adaptive credits"); modes in one job share that placement,
so their ratio measures the modes.  Memory figures are the job's, shared by its modes.
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from typing import Any

import numpy as np

from mailrail import Rail
from mailrail.config import FLOW_CONTROL_MODES
from mailrail.errors import ConfigError

from ..flags import (
    MPI_INT_MAX,
    SEED_MAX,
    add_rail_arguments,
    checked_rail_options,
    choice_list,
    float_in,
    int_in,
    one_line_errors,
    usage_error,
)
from ..incast import RAIL as INCAST_RAIL
from ..incast import choose_victims, destinations, spread
from ..memory import memory_problem, peak_rss_bytes
from ..mpi_facts import mpi_library
from ..output import format_table, write_json
from .metrics import MetricsRecorder, current_rss_bytes

DEFAULT_MESSAGES = 1000
#: --bytes-per-rank: 1 PiB, far past any run; the message count it makes is checked against memory.
MAX_BYTES_PER_RANK = 1 << 50
#: Memory a planned message takes on its sender: its destination and size, as numpy and Python lists.
BYTES_PER_PLANNED_MESSAGE = 64

#: rail.stats() counters copied into each rank's entry of ``ranks_detail``.
DETAIL_COUNTERS = (
    "messages_sent",
    "bytes_sent",
    "messages_received",
    "bytes_received",
    "credit_messages_sent",
    "credit_messages_received",
    "credits_returned",
    "credits_piggybacked",
    "deferred_sends",
    "deferred_high_water",
    "reserve_failures",
    "credit_window_high_water",
    "credit_requests_sent",
    "credit_requests_received",
    "credits_reclaimed",
    "credit_revokes_sent",
    "credits_given_back",
    "leases_high_water",
    "waiting_high_water",
    "held_high_water",
    "credit_state_bytes",
    "shared_credit_bytes",
    "recv_pool_bytes",
    "send_pool_bytes",
)


def add_workload_arguments(parser: argparse.ArgumentParser, *, messages: int, trials: int, per: str) -> None:
    """The workload a driver passes on to each adversarial run: its amount, trials and seed, in the
    ranges ``bench adversarial`` takes (a bad value is a usage error before any run or cluster)."""
    amount = parser.add_mutually_exclusive_group()
    amount.add_argument(
        "--messages",
        type=int_in(0, MPI_INT_MAX),
        default=None,
        help=f"messages per sending rank (default: {messages})",
    )
    amount.add_argument(
        "--bytes-per-rank",
        type=int_in(0, MAX_BYTES_PER_RANK),
        default=None,
        help="payload bytes per sending rank, in datagram-size messages (instead of --messages)",
    )
    parser.add_argument(
        "--trials", type=int_in(1, 100_000), default=trials, help=f"timed trials per {per} (default: %(default)s)"
    )
    parser.add_argument(
        "--seed", type=int_in(0, SEED_MAX), default=1, help="victims and send orders (default: %(default)s)"
    )
    parser.add_argument(
        "--receive-work-us",
        type=float_in(0.0, 1e6),
        default=0.0,
        help="microseconds (up to a second) a rank computes on each message it receives, as an application "
        "would (default: none: receive as fast as possible)",
    )
    parser.add_argument(
        "--partners",
        type=int_in(0, MPI_INT_MAX),
        default=0,
        help="besides the victims, each rank also sends to this many other ranks of its own, chosen from --seed "
        "(its messages spread evenly over all its destinations): sparse traffic with a hot receiver, where most "
        "pairs never talk (default: 0, incast only)",
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.add_argument(
        "--victims",
        type=int_in(1, MPI_INT_MAX),
        default=1,
        help="ranks that receive all traffic, chosen at random from --seed; 1 up to the ranks (default: %(default)s)",
    )
    add_workload_arguments(parser, messages=DEFAULT_MESSAGES, trials=3, per="run")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON (rank 0)")
    parser.add_argument("--metrics", metavar="DIR", help="write sub-second metrics, one JSON-lines file per rank")
    parser.add_argument(
        "--metrics-interval",
        type=float_in(0.001, 3600.0),
        default=0.1,
        help="seconds between metrics samples, 0.001..3600 (default: %(default)s)",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="rank 0 prints only its progress lines, not the summary table"
    )
    parser.add_argument(
        "--interleave",
        metavar="MODES",
        type=choice_list(FLOW_CONTROL_MODES),
        help="run these flow-control modes (comma-separated) in this one job, a rail each, their trials taking "
        "turns: ratios between them then share the job's placement of ranks on cores (instead of "
        "--flow-control; not with --metrics)",
    )
    add_rail_arguments(parser, defaults=INCAST_RAIL)


@dataclasses.dataclass
class Plan:
    """What one rank sends and receives in every trial (the same in each)."""

    victims: list[int]
    dests: list[int]  # destination of each message, in send order
    sizes: list[int]  # payload bytes of each message
    expected_messages: int  # messages this rank receives (victims only)
    expected_bytes: int


def incast_ratio(ranks: int, victims: int) -> float:
    """Sending ranks per victim: a lone victim has nobody to send to, with two or more everyone sends."""
    senders = ranks - 1 if victims == 1 else ranks
    return senders / victims


def victims_of_command(args: list[str], size: int) -> list[int]:
    """The victims ``bench adversarial ARGS`` picks on *size* ranks (a launcher caps their nodes' memory)."""
    parser = argparse.ArgumentParser(add_help=False)
    add_arguments(parser)
    parsed, _ = parser.parse_known_args(args)
    if not 1 <= parsed.victims <= size:
        return []  # the benchmark itself reports the bad count
    return choose_victims(size, parsed.victims, parsed.seed)


def message_sizes(datagram_size: int, messages: int | None, bytes_per_rank: int | None) -> list[int]:
    """Full datagrams; with *bytes_per_rank*, a last shorter message carries the remainder."""
    if bytes_per_rank is None:
        return [datagram_size] * (DEFAULT_MESSAGES if messages is None else messages)
    full, rest = divmod(bytes_per_rank, datagram_size)
    return [datagram_size] * full + ([rest] if rest else [])


def make_plan(comm, victims: list[int], sizes: list[int], seed: int, partners: int = 0) -> Plan:
    """This rank's send order (its own random permutation) and what it must receive (collective).
    *partners*: other ranks this rank also sends to, its own choice from *seed* (not victims, not itself)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    dests = destinations(rank, size, victims, len(sizes), seed, partners)
    if len(dests) == 0:
        sizes = []
    to_each = np.stack(
        [
            np.bincount(dests, minlength=size),
            np.bincount(dests, weights=np.array(sizes, dtype=np.float64), minlength=size),
        ],
        axis=1,
    ).astype(np.int64)
    from_each = comm.alltoall(to_each.tolist())
    return Plan(
        victims,
        dests.tolist(),
        list(sizes),
        expected_messages=sum(m for m, _ in from_each),
        expected_bytes=sum(b for _, b in from_each),
    )


@dataclasses.dataclass
class TrialResult:
    """One rank's share of one trial."""

    elapsed_s: float
    messages_sent: int
    bytes_sent: int
    messages_received: int
    bytes_received: int
    stragglers: int  # messages that arrived after the rank's timed part (should be none)


def run_trial(
    comm, rail, plan: Plan, recorder: MetricsRecorder | None, trial: int, receive_work_s: float = 0.0
) -> TrialResult:
    """Send the plan, receive what this rank expects, time it; then quiesce (untimed).

    With *receive_work_s* each received message costs that much computing (a busy loop, as
    an application's work on the message would be) before it is released.
    """
    receive, release = rail.receive, rail.release_receive_buffer
    reserve, send = rail.reserve_send_buffer, rail.send
    received = received_bytes = 0
    clock = time.perf_counter

    def drain() -> None:
        """Receive everything that has arrived (one empty receive() at least: it drives progress)."""
        nonlocal received, received_bytes
        while True:
            if recorder is not None:
                recorder.receiving()
            message = receive()
            if message is None:
                return
            received += 1
            received_bytes += message.nbytes
            if recorder is not None:
                recorder.received(message.nbytes)
            if receive_work_s:
                done = clock() + receive_work_s
                while clock() < done:
                    pass
            release(message)

    comm.Barrier()
    start = time.perf_counter()
    if recorder is not None:
        recorder.start_trial(trial, start, len(plan.dests), plan.expected_messages)
    drain()  # before the first send
    for dest, nbytes in zip(plan.dests, plan.sizes):
        buf = reserve()
        while buf is None:  # backpressure: keep receiving until a send buffer frees up
            drain()
            buf = reserve()
        if recorder is not None:
            recorder.sent(nbytes)
        send(dest, buf, nbytes)
        drain()  # after every send
    # Exact termination: victims know their count; senders wait until their sends left.
    while received < plan.expected_messages or rail.pending_sends():
        drain()
    elapsed = time.perf_counter() - start
    if recorder is not None:
        recorder.finish_trial()
    stragglers = 0

    def count_straggler(message) -> None:
        nonlocal stragglers
        stragglers += 1

    # Untimed: every rank keeps progressing until every message of the trial is delivered.
    rail.barrier(handler=count_straggler)
    return TrialResult(elapsed, len(plan.dests), sum(plan.sizes), received, received_bytes, stragglers)


def summarize_trial(results: list[TrialResult], senders: int, victims: list[int]) -> dict[str, Any]:
    """The trial record of the JSON document, from every rank's share (rank 0; *results* by rank)."""
    runtime = max(r.elapsed_s for r in results)
    received = sum(r.bytes_received for r in results)
    return {
        "victim_messages": spread([results[v].messages_received for v in victims]),
        "runtime_s": runtime,
        "goodput_bps": 8 * received / runtime if runtime > 0 else 0.0,
        "bytes_received": received,
        "messages_received": sum(r.messages_received for r in results),
        "bytes_sent": sum(r.bytes_sent for r in results),
        "messages_sent": sum(r.messages_sent for r in results),
        "incast_ratio": senders / len(victims),
        "stragglers": sum(r.stragglers for r in results),
    }


def run(args: argparse.Namespace) -> int:
    from mailrail._mpi import MPI
    from mailrail.flow.node_memory import NodeTopology
    from mailrail.rail import MailRail  # MailRail starts MPI: imported when the run begins, not to parse flags

    checked = checked_rail_options("bench adversarial", args, INCAST_RAIL)
    if checked is None:
        return 2
    options, config = checked
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    problem = _check_arguments(args, size)
    if problem:  # the same on every rank: all return before the rail is built
        return usage_error("bench adversarial", problem, comm)
    datagram_size = config.datagram_size
    if args.bytes_per_rank is not None:
        planned = -(-args.bytes_per_rank // datagram_size)
    else:
        planned = DEFAULT_MESSAGES if args.messages is None else args.messages
    problem = memory_problem(comm, BYTES_PER_PLANNED_MESSAGE * planned, f"{planned:,} messages per rank")
    if problem:
        return usage_error("bench adversarial", problem, comm)
    if args.interleave:
        return _run_interleaved(args, comm, options)
    rail = MailRail(comm, **options)
    config = rail.config
    topology = NodeTopology(comm, config.ranks_per_node)
    nodes = topology.nodes
    victims = choose_victims(size, args.victims, args.seed)
    remote = {r for r in range(size) if topology.node_of(r) != topology.node}
    topology.free()
    sizes = message_sizes(config.datagram_size, args.messages, args.bytes_per_rank)
    plan = make_plan(comm, victims, sizes, args.seed, args.partners)
    # Payload that must leave this rank's node (the rest moves through the node's shared memory).
    internode_bytes = args.trials * sum(n for d, n in zip(plan.dests, plan.sizes) if d in remote)
    senders = comm.allreduce(1 if plan.dests else 0)
    rss_start = current_rss_bytes()  # pools allocated, nothing received yet: growth from here is the traffic's
    recorder = None
    if args.metrics:
        recorder = MetricsRecorder(rank, args.metrics_interval)
        recorder.truncate(args.metrics)
    if rank == 0:
        print(
            f"adversarial incast, flow control {config.flow_control}: {size} ranks on {nodes} node(s), "
            f"{len(victims)} victim(s) {_ranks_text(victims)}, {senders} senders "
            f"(incast {senders / len(victims):g}:1), {len(sizes)} x {config.datagram_size} B "
            f"per sending rank"
            + (f", each also to {args.partners} partner(s) of its own" if args.partners else "")
            + f", {args.trials} trial(s)",
            flush=True,
        )

    trials = []
    for trial in range(args.trials):
        result = run_trial(comm, rail, plan, recorder, trial, args.receive_work_us * 1e-6)
        if recorder is not None:
            recorder.write(args.metrics)  # off the clock
        results = comm.gather(result, root=0)
        if rank == 0:
            record = summarize_trial(results, senders, victims)
            trials.append(record)
            print(
                f"  trial {trial + 1}/{args.trials}: {record['runtime_s']:.3f} s, "
                f"goodput {record['goodput_bps'] / 1e6:,.1f} Mb/s",
                flush=True,
            )

    details = comm.gather(_finish_rail(rail, rank in victims, rss_start, internode_bytes), root=0)
    if rank != 0:
        return 0
    document = {
        "benchmark": "adversarial",
        "flow_control": config.flow_control,
        "ranks": size,
        "nodes": nodes,
        "victims": len(victims),
        "victim_ranks": victims,
        "senders": senders,
        "incast_ratio": senders / len(victims),
        "datagram_size": config.datagram_size,
        "messages_per_rank": len(sizes),
        "bytes_per_rank": sum(sizes),
        "seed": args.seed,
        "receive_work_us": args.receive_work_us,
        "partners": args.partners,
        "trials": trials,
        "ranks_detail": details,
        "summary": summarize_run(trials, details),
        "metrics_dir": args.metrics,
        "metrics_interval_s": args.metrics_interval if args.metrics else None,
        "mpi": mpi_library(),
        "config": config.as_dict(),
    }
    write_json(args.json, document)
    if not args.quiet:
        print(summary_text(document), flush=True)
    return 0 if document["summary"]["accounting_ok"] else 1


def _finish_rail(rail: Rail, victim: bool, rss_start: int, internode_bytes: int) -> dict[str, Any]:
    """Finalize *rail*; this rank's entry of ``ranks_detail`` (its counters, memory and what was undelivered)."""
    stats = rail.stats()
    undelivered = rail.finalize()
    peak_rss = peak_rss_bytes()
    return {
        "rank": rail.rank,
        "victim": victim,
        "peak_rss_bytes": peak_rss,
        "rss_start_bytes": rss_start,
        "rss_growth_bytes": max(0, peak_rss - rss_start),
        "credit_messages": stats["credit_messages_sent"] + stats["credit_messages_received"],
        "internode_bytes_sent": internode_bytes,
        **{k: stats[k] for k in DETAIL_COUNTERS},
        "undelivered": undelivered,
    }


def summarize_run(trials: list[dict], details: list[dict]) -> dict[str, Any]:
    victims = [d for d in details if d["victim"]]
    senders = [d for d in details if not d["victim"]]
    runtimes = [t["runtime_s"] for t in trials]
    goodputs = [t["goodput_bps"] for t in trials]
    return {
        "runtime_s_mean": float(np.mean(runtimes)),
        "runtime_s_min": min(runtimes),
        "goodput_bps_mean": float(np.mean(goodputs)),
        "goodput_bps_max": max(goodputs),
        "peak_victim_rss_bytes": max((d["peak_rss_bytes"] for d in victims), default=0),
        "peak_sender_rss_bytes": max((d["peak_rss_bytes"] for d in senders), default=0),
        # Peak minus the RSS before the first trial: what the traffic itself cost (MPI's buffers included).
        "victim_rss_growth_bytes": max((d["rss_growth_bytes"] for d in victims), default=0),
        "sender_rss_growth_bytes": max((d["rss_growth_bytes"] for d in senders), default=0),
        "credit_messages": sum(d["credit_messages_sent"] for d in details),
        # Adaptive credits (zero in the other modes): requests, revokes, what came back and how.
        "credit_requests": sum(d["credit_requests_sent"] for d in details),
        "credit_revokes": sum(d["credit_revokes_sent"] for d in details),
        "credits_reclaimed": sum(d["credits_reclaimed"] for d in details),
        "credits_given_back": sum(d["credits_given_back"] for d in details),
        "deferred_high_water": max(d["deferred_high_water"] for d in details),
        # Payload that crossed between nodes, all trials: what a network has to carry.
        "internode_payload_bytes": sum(d["internode_bytes_sent"] for d in details),
        # Exactly what was sent to the victims arrived, in every trial, and nothing else.
        "accounting_ok": all(
            t["bytes_received"] == t["bytes_sent"]
            and t["messages_received"] == t["messages_sent"]
            and t["stragglers"] == 0
            for t in trials
        ),
    }


def summary_text(document: dict) -> str:
    summary = document["summary"]
    rows = [
        (i + 1, t["runtime_s"], t["goodput_bps"] / 1e6, t["messages_received"], t["bytes_received"] / 1e6)
        for i, t in enumerate(document["trials"])
    ]
    lines = [
        format_table(["trial", "runtime s", "goodput Mb/s", "messages", "MB received"], rows),
        f"peak RSS: victim {summary['peak_victim_rss_bytes'] / 2**20:.1f} MiB "
        f"(+{summary['victim_rss_growth_bytes'] / 2**20:.1f} during the trials), sender "
        f"{summary['peak_sender_rss_bytes'] / 2**20:.1f} MiB "
        f"(+{summary['sender_rss_growth_bytes'] / 2**20:.1f}); credit messages {summary['credit_messages']:,}; "
        f"deferred high water {summary['deferred_high_water']:,}",
    ]
    if summary.get("credit_requests"):
        lines.append(
            f"adaptive: {summary['credit_requests']:,} requests, {summary['credit_revokes']:,} revokes, "
            f"{summary['credits_reclaimed']:,} credits reclaimed at release, "
            f"{summary['credits_given_back']:,} given back"
        )
    if not summary["accounting_ok"]:
        lines.append("ACCOUNTING MISMATCH: the victims did not receive exactly what was sent to them")
    return "\n".join(lines)


def _check_arguments(args: argparse.Namespace, size: int) -> str | None:
    """What argparse cannot check alone: the flags against the job's rank count (the ranges it checks), and
    against each other."""
    if size < 2:
        return f"needs at least 2 ranks, got {size} (mailrail run -n 2 bench adversarial)"
    if args.victims > size:
        return f"argument --victims: must be an integer in 1..{size} (the ranks), got '{args.victims}'"
    if args.interleave and args.metrics:
        return "--interleave and --metrics: the metrics are one job's, and the modes share it; give one of them"
    return None


def _run_interleaved(args: argparse.Namespace, comm: Any, options: dict[str, Any]) -> int:
    """``--interleave``: the modes' rails in this one job, their trials taking turns (see the module doc)."""
    from mailrail.rail import MailRail

    rank, size = comm.Get_rank(), comm.Get_size()
    modes: list[str] = args.interleave
    rails: dict[str, Any] = {}
    try:
        for mode in modes:  # collective, in the same order everywhere: a refusal raises on every rank alike
            rails[mode] = MailRail(comm, **dict(options, flow_control=mode))
    except ConfigError as error:
        for rail in reversed(rails.values()):
            rail.finalize()
        return usage_error("bench adversarial", f"--interleave {','.join(modes)}: {error}", comm)
    first = rails[modes[0]]
    victims = choose_victims(size, args.victims, args.seed)
    sizes = message_sizes(first.datagram_size, args.messages, args.bytes_per_rank)
    plan = make_plan(comm, victims, sizes, args.seed, args.partners)
    senders = comm.allreduce(1 if plan.dests else 0)
    rss_start = current_rss_bytes()
    if rank == 0:
        print(
            f"adversarial incast, flow control {', '.join(modes)} interleaved: {size} ranks, {len(victims)} "
            f"victim(s) {_ranks_text(victims)}, {senders} senders, {len(sizes)} x {first.datagram_size} B per "
            f"sending rank, {args.trials} trial(s) each",
            flush=True,
        )
    trials: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    for trial in range(args.trials):
        line = []
        for mode in modes:
            result = run_trial(comm, rails[mode], plan, None, trial, args.receive_work_us * 1e-6)
            results = comm.gather(result, root=0)
            if rank == 0:
                record = summarize_trial(results, senders, victims)
                trials[mode].append(record)
                line.append(f"{mode} {record['goodput_bps'] / 1e6:,.1f} Mb/s")
        if rank == 0:
            print(f"  trial {trial + 1}/{args.trials}: " + ", ".join(line), flush=True)
    details: dict[str, list[dict[str, Any]]] = {}
    for mode in reversed(modes):  # made in order, finalized in reverse; internode bytes not counted here
        details[mode] = comm.gather(_finish_rail(rails[mode], rank in victims, rss_start, 0), root=0)
    if rank != 0:
        return 0
    document = interleaved_document(modes, trials, details)
    document.update(
        ranks=size,
        victims=len(victims),
        victim_ranks=victims,
        senders=senders,
        datagram_size=first.datagram_size,
        messages_per_rank=len(sizes),
        seed=args.seed,
        partners=args.partners,
        mpi=mpi_library(),
        config={mode: rail.config.as_dict() for mode, rail in rails.items()},
    )
    write_json(args.json, document)
    if not args.quiet:
        print(interleaved_text(document), flush=True)
    return 0 if all(entry["summary"]["accounting_ok"] for entry in document["modes"].values()) else 1


def interleaved_document(
    modes: list[str], trials: dict[str, list[dict[str, Any]]], details: dict[str, list[dict[str, Any]]]
) -> dict[str, Any]:
    """The ``--interleave`` JSON document: each mode's trials and summary, its median goodput, and each mode's
    goodput over the first mode's, trial by trial (the trials that ran side by side) and as the medians'
    ratio."""
    medians = {mode: float(np.median([t["goodput_bps"] for t in trials[mode]])) for mode in modes}
    reference = modes[0]
    return {
        "benchmark": "adversarial-interleaved",
        "flow_controls": modes,
        "modes": {
            mode: {
                "trials": trials[mode],
                "median_goodput_bps": medians[mode],
                "summary": summarize_run(trials[mode], details[mode]),
            }
            for mode in modes
        },
        "ratios": {
            f"{mode}/{reference}": {
                "medians": medians[mode] / medians[reference] if medians[reference] else None,
                "per_trial": [
                    mine["goodput_bps"] / theirs["goodput_bps"] if theirs["goodput_bps"] else None
                    for mine, theirs in zip(trials[mode], trials[reference])
                ],
            }
            for mode in modes[1:]
        },
    }


def interleaved_text(document: dict[str, Any]) -> str:
    """The ``--interleave`` table: per mode its goodput's median and range, and its ratio to the first mode."""
    modes = document["flow_controls"]
    rows = []
    for mode in modes:
        goodputs = [t["goodput_bps"] / 1e6 for t in document["modes"][mode]["trials"]]
        ratio = document["ratios"].get(f"{mode}/{modes[0]}", {}).get("medians", 1.0)
        rows.append((mode, float(np.median(goodputs)), min(goodputs), max(goodputs), ratio))
    lines = [format_table(["mode", "median Mb/s", "min Mb/s", "max Mb/s", f"/ {modes[0]}"], rows)]
    for mode in modes:
        if not document["modes"][mode]["summary"]["accounting_ok"]:
            lines.append(f"ACCOUNTING MISMATCH ({mode}): the victims did not receive exactly what was sent to them")
    return "\n".join(lines)


def _ranks_text(ranks: list[int]) -> str:
    shown = ", ".join(map(str, ranks[:8]))
    return f"[{shown}{', ...' if len(ranks) > 8 else ''}]"


def main(argv: list[str] | None = None) -> int:
    """``python -m mailrail_tools.bench.adversarial``: what ``compare`` and ``sweep`` launch under mpiexec."""
    parser = argparse.ArgumentParser(
        prog="mailrail bench adversarial", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
