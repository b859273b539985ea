"""``mailrail sweep``: the adversarial benchmark's two studies, on the ranks this machine allows.

(a) weak scaling: the data per sending rank is fixed while the ranks double
from ``--min-ranks`` to ``--max-ranks``, with ``--weak-victims`` victims, so
the incast ratio grows with the job; (b) victim sweep: ``--victim-ranks``
ranks, victims 1, 2, 4, ... up to every rank, so the incast ratio shrinks.
Every point runs each mode as its own mpiexec job bounded by
``--time-limit``; a run that exceeds it (or fails) is kept in the results as
such.  Writes ``sweep.json`` and ``sweep.png`` (runtime and goodput vs incast
ratio, one line per mode) to ``--out``.

With ``--cluster N`` the points run on a virtual cluster of N nodes of
``--node-ranks`` ranks (:mod:`mailrail_tools.cluster`), built once for the sweep:
weak scaling goes over the node counts 1, 2, 4, ... N (each point on the first
nodes), the victim sweep uses all N nodes.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import time
from typing import Any

from ..cluster.job_on_cluster import describe, open_cluster, summary
from ..cluster.options import ClusterChoice, add_cluster_arguments, cluster_spec, memory_option
from ..cluster.privileges import rerun_without_root
from ..cluster.spec import node_of_rank, ranks_per_node
from ..cluster.virtual import VirtualCluster
from ..figures import missing
from ..flags import (
    MPI_INT_MAX,
    add_rail_arguments,
    checked_rail_options,
    choice_list,
    float_in,
    int_in,
    usage_error,
)
from ..incast import choose_victims
from ..output import format_table, write_json
from .adversarial import add_workload_arguments, incast_ratio
from .compare import MODES, RAIL_DEFAULTS, TIME_LIMIT_RANGE, note_out_of_memory, outcome_text, ranks_flag
from .jobs import adversarial_args, all_finished, refusal, run_adversarial
from .plots import plot_sweep

STUDIES = ("weak", "victims")
STUDY_TITLES = {"weak": "weak scaling", "victims": "victim sweep"}
DEFAULT_RANKS_PER_NODE = 4
DEFAULT_MESSAGES = 2000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--studies",
        type=choice_list(STUDIES),
        default=",".join(STUDIES),
        help="weak (weak scaling), victims (victim sweep) or both (default: %(default)s)",
    )
    ranks_flag(parser, 2, "weak scaling: first rank count (default: %(default)s)", "--min-ranks")
    ranks_flag(parser, 16, "weak scaling: ranks double up to this (default: %(default)s)", "--max-ranks")
    parser.add_argument(
        "--weak-victims",
        type=int_in(1, MPI_INT_MAX),
        default=1,
        help="weak scaling: victims at every size (default: %(default)s)",
    )
    ranks_flag(
        parser,
        None,
        "victim sweep: ranks (default: --max-ranks); victims go 1, 2, 4, ... up to all of them",
        "--victim-ranks",
    )
    add_workload_arguments(parser, messages=DEFAULT_MESSAGES, trials=2, per="run")
    parser.add_argument(
        "--modes",
        type=choice_list(MODES),
        default=",".join(MODES),
        help="modes, comma-separated (default: %(default)s)",
    )
    parser.add_argument(
        "--time-limit",
        type=float_in(*TIME_LIMIT_RANGE),
        default=60.0,
        help="seconds each run may take, start-up included (default: %(default)s)",
    )
    parser.add_argument(
        "--out",
        default=os.path.join("mailrail-results", "sweep"),
        help="directory for sweep.json, sweep.png and the runs' files (default: %(default)s)",
    )
    parser.add_argument(
        "--node-ranks",
        type=int_in(1, MPI_INT_MAX),
        default=DEFAULT_RANKS_PER_NODE,
        help="with --cluster: ranks on each node (default: %(default)s)",
    )
    add_cluster_arguments(parser)
    add_rail_arguments(parser, skip=("flow_control",), defaults=RAIL_DEFAULTS)


def study_table(points: list[dict[str, Any]]) -> str:
    """One study's results as the table ``mailrail sweep`` prints (sweep.json keeps every field)."""
    return format_table(
        ["ranks", "nodes", "victims", "incast", "mode", "status", "runtime s", "goodput Mb/s"],
        [
            (
                p["ranks"],
                p["nodes"] or "-",
                p["victims"],
                p["incast_ratio"],
                p["mode"],
                outcome_text(p["result"]),
                p.get("runtime_s", "-"),
                p["goodput_bps"] / 1e6 if p["status"] == "ok" else "-",
            )
            for p in points
        ],
    )


def study_points(study: str, args: argparse.Namespace, nodes: int | None = None) -> list[tuple[int, int]]:
    """The (ranks, victims) of one study, in run order (on a cluster of *nodes* nodes: node counts double)."""
    if nodes is not None:
        counts, count = [], 1
        while count < nodes:
            counts.append(count)
            count *= 2
        counts.append(nodes)
        if study == "weak":
            return [
                (k * args.node_ranks, args.weak_victims) for k in counts if args.weak_victims <= k * args.node_ranks
            ]
        ranks, victims, points = nodes * args.node_ranks, 1, []
        while victims < ranks:
            points.append((ranks, victims))
            victims *= 2
        return points + [(ranks, ranks)]
    if study == "weak":
        ranks, points = args.min_ranks, []
        while ranks <= args.max_ranks:
            if args.weak_victims <= ranks:
                points.append((ranks, args.weak_victims))
            ranks *= 2
        return points
    ranks = args.victim_ranks or args.max_ranks
    victims, points = 1, []
    while victims < ranks:
        points.append((ranks, victims))
        victims *= 2
    return points + [(ranks, ranks)]


def run(args: argparse.Namespace) -> int:
    """The sweeps.  Every flag is checked before a cluster is built or a file is written; an interrupted
    sweep removes its cluster and leaves the last complete sweep.json/.png as they were."""
    studies, modes = args.studies, args.modes
    if args.max_ranks < args.min_ranks:
        return usage_error("sweep", f"--min-ranks {args.min_ranks} exceeds --max-ranks {args.max_ranks}")
    if "weak" in studies and args.weak_victims > args.max_ranks:
        return usage_error("sweep", f"--weak-victims {args.weak_victims} exceeds --max-ranks {args.max_ranks}")
    checked = checked_rail_options("sweep", args, RAIL_DEFAULTS)
    if checked is None:
        return 2
    options = checked[0]  # the budget compare uses, unless MAILRAIL_RECV_POOL_SLOTS or a flag says otherwise
    choice = ClusterChoice.parse(args.cluster)
    if choice.kind != "off" and options.get("ranks_per_node") is not None:
        return usage_error("sweep", "--ranks-per-node makes virtual nodes on one host; on --cluster the nodes are real")
    if choice.kind != "off":
        status = rerun_without_root(args.mailrail_argv)
        if status is not None:
            return status
    out = os.path.abspath(args.out)
    with contextlib.ExitStack() as stack:
        cluster = None
        if choice.kind != "off":
            nodes = choice.nodes if choice.kind == "nodes" else VirtualCluster.attach(choice.name).spec.nodes
            request = copy.copy(args)
            request.victim_node_memory = None  # each run caps the nodes of its own victims (victim_node_caps)
            spec = cluster_spec(request, choice, nodes * args.node_ranks)
            cluster = stack.enter_context(open_cluster(spec, running=choice.name))
        nodes = cluster.spec.nodes if cluster else None
        plan = [
            (study, ranks, victims, mode)
            for study in studies
            for ranks, victims in study_points(study, args, nodes)
            for mode in modes
        ]
        where = f"on {describe(cluster)}, {args.node_ranks} ranks a node" if cluster else "on this host's shared memory"
        print(
            f"mailrail sweep: {len(plan)} runs ({', '.join(STUDY_TITLES[s] for s in studies)}; modes "
            f"{', '.join(modes)}) {where}, each limited to {args.time_limit:g} s; results in {out}",
            flush=True,
        )
        os.makedirs(out, exist_ok=True)
        results: dict[str, list[dict[str, Any]]] = {study: [] for study in studies}
        started = time.monotonic()
        for index, (study, ranks, victims, mode) in enumerate(plan, 1):
            name = f"{study}-r{ranks}-v{victims}-{mode}"
            used = min(-(-ranks // args.node_ranks), ranks) if cluster else None
            nodes = used or -(-ranks // virtual_node_ranks(options, ranks))
            with victim_node_caps(cluster, args, ranks, used, victims):
                result = refusal(mode, ranks, nodes, options) or run_adversarial(
                    ranks,
                    benchmark_args(args, options, ranks, victims, mode, cluster is not None),
                    os.path.join(out, "runs", name + ".json"),
                    time_limit=args.time_limit,
                    cluster=cluster,
                    nodes=used,
                )
            point = sweep_point(study, ranks, victims, mode, note_out_of_memory(result), args.time_limit)
            point["nodes"] = used
            results[study].append(point)
            measured = (
                f"{point['runtime_s']:.3f} s/trial, {point['goodput_bps'] / 1e6:,.0f} Mb/s"
                if point["status"] == "ok"
                else outcome_text(result)
            )
            print(
                f"[{index}/{len(plan)}] {STUDY_TITLES[study]}: {ranks} ranks"
                + (f" on {used} node(s)" if cluster else "")
                + f", {victims} victim(s), {mode}: "
                f"{measured} ({result['wall_s']:.1f} s)",
                flush=True,
            )
            if point["status"] == "failed":
                print(result.get("output_tail", "")[-800:], flush=True)
        described = cluster.describe() if cluster else None
        wall = time.monotonic() - started

    document = {
        "benchmark": "sweep",
        "cluster": described,
        "workload": {
            "messages_per_rank": _messages(args) if args.bytes_per_rank is None else None,
            "bytes_per_rank": args.bytes_per_rank,
            "trials": args.trials,
            "seed": args.seed,
            "modes": modes,
            "receive_work_us": args.receive_work_us,
            "partners": args.partners,
            "time_limit_s": args.time_limit,
            "rail_options": options,
        },
        "studies": results,
        "wall_s": wall,
    }
    write_json(os.path.join(out, "sweep.json"), document)
    for study, points in results.items():
        print(f"\n{STUDY_TITLES[study]}")
        print(study_table(points))
    where = f"{summary(described)}, {args.node_ranks} ranks a node" if described else "one host, shared memory"
    figure = _plot(results, os.path.join(out, "sweep.png"), where)
    print(
        f"\n{len(plan)} runs in {wall:.0f} s; wrote {os.path.join(out, 'sweep.json')}"
        + (f" and {figure}" if figure else "")
    )
    capped = memory_option(args.victim_node_memory, "--victim-node-memory") is not None
    return 0 if all_finished((p["status"] for points in results.values() for p in points), capped) else 1


def benchmark_args(
    args: argparse.Namespace, options: dict[str, Any], ranks: int, victims: int, mode: str, on_cluster: bool = False
) -> list[str]:
    knobs = dict(options, flow_control=mode)
    if not on_cluster:  # the cluster's nodes are real; here virtual nodes
        knobs["ranks_per_node"] = virtual_node_ranks(options, ranks)
    return adversarial_args(
        victims=victims,
        trials=args.trials,
        seed=args.seed,
        messages=_messages(args),
        bytes_per_rank=args.bytes_per_rank,
        knobs=knobs,
        receive_work_us=args.receive_work_us,
        partners=args.partners,
    )


def virtual_node_ranks(options: dict[str, Any], ranks: int) -> int:
    """Ranks per virtual node of a run on shared memory: ``--ranks-per-node`` (default 4), a smaller job one node."""
    return min(int(options.get("ranks_per_node") or DEFAULT_RANKS_PER_NODE), ranks)


def _messages(args: argparse.Namespace) -> int:
    return DEFAULT_MESSAGES if args.messages is None else args.messages


@contextlib.contextmanager
def victim_node_caps(cluster, args: argparse.Namespace, ranks: int, nodes: int | None, victims: int):
    """During one run: cap the memory of the nodes that hold its victims (--victim-node-memory)."""
    cap = memory_option(args.victim_node_memory, "--victim-node-memory") if cluster else None
    if cap is None:
        yield
        return
    placement = node_of_rank(ranks_per_node(ranks, nodes))
    with cluster.memory_caps({placement[r]: cap for r in choose_victims(ranks, victims, args.seed)}):
        yield


def sweep_point(
    study: str, ranks: int, victims: int, mode: str, result: dict[str, Any], time_limit: float
) -> dict[str, Any]:
    """One point of a study: its coordinates, outcome and (when it ran) mean runtime and goodput."""
    point: dict[str, Any] = {
        "study": study,
        "ranks": ranks,
        "victims": victims,
        "mode": mode,
        "incast_ratio": incast_ratio(ranks, victims),
        "status": result["status"],
        "time_limit_s": time_limit,
        "wall_s": result["wall_s"],
    }
    if result.get("out_of_memory_after_s") is not None:
        point["out_of_memory_after_s"] = result["out_of_memory_after_s"]
    if result["status"] == "ok":
        point["runtime_s"] = result["summary"]["runtime_s_mean"]
        point["goodput_bps"] = result["summary"]["goodput_bps_mean"]
    point["result"] = result
    return point


def _plot(results: dict[str, list[dict[str, Any]]], path: str, where: str) -> str | None:
    reason = missing()
    if reason:
        print(reason)
        return None
    studies = {f"{STUDY_TITLES[s]}": points for s, points in results.items() if points}
    return plot_sweep(
        studies, path, f"adversarial incast sweeps on {where} (runs past the time limit or failed: crosses)"
    )
