"""``mailrail compare``: the main job.  The adversarial incast under each flow-control mode.

Launches ``bench adversarial`` under mpiexec once per mode with the same
workload and the same memory budget (pools), each run bounded by a time
limit, then prints the modes side by side and writes ``compare.json`` and
``compare.png`` to ``--out``.  A mode that fails, runs past the limit or is
killed by its node's memory cap is a row of the table saying so.

Where the machine allows it (root, or unprivileged user namespaces) the modes
run on a virtual cluster of ``--nodes`` nodes (network namespaces joined by TCP
links, :mod:`mailrail_tools.cluster`), built for the comparison and removed after it,
with the victim's node capped at ``--victim-node-memory``: the setting flow
control is for.  Otherwise, or with ``--cluster off``, they run on this host's
shared memory in virtual nodes, and one line says why.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import math
import os
import shutil
import statistics
import time
from collections import Counter
from typing import Any

from mailrail.config import FLOW_CONTROL_MODES as MODES
from mailrail.config import Config
from mailrail.errors import ClusterError, ConfigError
from mailrail.flow.modes import COMPARED_PAIRS, UNCONSTRAINED, flow_mode

from ..cluster.job_on_cluster import open_cluster
from ..cluster.job_on_cluster import summary as cluster_summary
from ..cluster.options import ClusterChoice, add_cluster_arguments, cluster_spec
from ..cluster.privileges import cluster_privileges, rerun_in_user_namespace
from ..cluster.spec import MAX_NODES, ClusterSpec, node_of_rank, ranks_per_node
from ..cluster.virtual import USERNS_VARIABLE, first_out_of_memory
from ..figures import missing
from ..flags import MPI_INT_MAX, add_rail_arguments, choice_list, float_in, int_in, rail_options, usage_error
from ..incast import RAIL as INCAST_RAIL
from ..incast import choose_victims
from ..output import format_table, write_json
from .adversarial import add_workload_arguments
from .jobs import (
    DEFAULT_TIME_LIMIT,
    adversarial_args,
    all_finished,
    refusal,
    run_adversarial,
    status_text,
)
from .plots import plot_compare, plot_compare_summary

DEFAULT_RANKS = 16
#: Beside compare.png: its top row alone, readable where a page shows it in a column.
SUMMARY_FIGURE = "compare-summary.png"
DEFAULT_NODES = 4
DEFAULT_MESSAGES = 6000
#: The shared memory budget: receive slots per rank (the credit budget of every credit mode).
DEFAULT_RECV_POOL_SLOTS = 64
#: The incast's datagrams and send pool (the paper's), in this shared budget of receive slots.
RAIL_DEFAULTS = {**INCAST_RAIL, "recv_pool_slots": DEFAULT_RECV_POOL_SLOTS}
#: On a virtual cluster, the victim's node gets this much memory: room to spare for a node of four
#: credit-mode ranks, and less than what MPI buffers at an unconstrained victim of the default
#: workload (docs: performance, "The main job on the virtual cluster").
DEFAULT_VICTIM_NODE_MEMORY = "384M"
_MIB = 2**20
#: The table's figures per mode ("-" for a mode that did not finish); runtime and goodput are the median of
#: the trials, as in the figure and the summary.  SPEEDUP is left out when unconstrained mode did not finish
#: (it has nothing to compare with).
SPEEDUP = "speedup vs none"
COLUMNS = (
    "runtime s",
    "goodput Mb/s",
    SPEEDUP,
    "victim RSS MiB",
    "victim growth MiB",
    "sender RSS MiB",
    "credit msgs",
    "deferred peak",
)
#: Added on a virtual cluster: what crossed the links and the victim node's memory high-water mark.
CLUSTER_COLUMNS = ("network MB", "net B / payload B", "victim node peak MiB")
#: The columns the printed table leaves out first when it does not fit a terminal (compare.json keeps them):
#: the sender's memory, the deferred peak and the totals explain a result, the other columns are the result.
TABLE_DROPS_FIRST = ("sender RSS MiB", "deferred peak", "network MB", "victim growth MiB")
#: Bounds of --time-limit (seconds): above zero (a limit shorter than start-up is a legal way to see
#: timeouts reported); the top fits every timer.
TIME_LIMIT_RANGE = (0.1, 1e6)


def ranks_flag(parser: argparse.ArgumentParser, default: int, help_text: str, *names: str) -> None:
    parser.add_argument(*names, type=int_in(2, MPI_INT_MAX), default=default, help=help_text)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    ranks_flag(parser, DEFAULT_RANKS, "MPI ranks (default: %(default)s)", "-n", "--ranks")
    parser.add_argument(
        "--nodes",
        type=int_in(1, MAX_NODES),
        default=DEFAULT_NODES,
        help="nodes the ranks are split into: virtual cluster nodes, or virtual nodes on shared "
        "memory (default: %(default)s; --ranks-per-node overrides on shared memory)",
    )
    parser.add_argument("--victims", type=int_in(1, MPI_INT_MAX), default=1, help="victim ranks (default: %(default)s)")
    add_workload_arguments(parser, messages=DEFAULT_MESSAGES, trials=4, per="mode")
    parser.add_argument(
        "--modes",
        type=choice_list(MODES),
        default=",".join(MODES),
        help="modes to run, comma-separated (default: %(default)s)",
    )
    parser.add_argument(
        "--time-limit",
        type=float_in(*TIME_LIMIT_RANGE),
        default=DEFAULT_TIME_LIMIT,
        help="seconds each mode may run, start-up included (default: %(default)s)",
    )
    parser.add_argument(
        "--runs",
        type=int_in(1, 100),
        default=1,
        help="run the whole comparison this many times on the same nodes and report each mode's spread over "
        "the runs (runs.json); compare.json and compare.png are then the run closest to the medians "
        "(default: %(default)s)",
    )
    parser.add_argument(
        "--metrics-interval",
        type=float_in(0.01, 3600.0),
        default=0.1,
        help="seconds between metrics samples (default: %(default)s)",
    )
    parser.add_argument(
        "--out",
        default="mailrail-results",
        help="directory for compare.json, compare.png and the runs' files (default: %(default)s)",
    )
    add_cluster_arguments(parser, default="auto", victim_memory=DEFAULT_VICTIM_NODE_MEMORY)
    parser.add_argument(
        "--launcher",
        choices=("mpiexec", "srun"),
        default=None,
        help="what starts each mode's ranks: mpiexec; or srun, on a running cluster made with "
        "`mailrail cluster up --scheduler slurm` (--cluster up[:NAME]) or, with --cluster auto, on --nodes "
        "nodes of the Slurm allocation this runs in (an sbatch script; default there, else mpiexec)",
    )
    add_rail_arguments(parser, skip=("flow_control",), defaults=RAIL_DEFAULTS)


def workload(
    args: argparse.Namespace, cluster_nodes: int | None = None, allocation: str | None = None
) -> dict[str, Any]:
    """The one workload and memory budget every mode runs with (on *cluster_nodes* real nodes, if given: a
    virtual cluster's, or those of the Slurm allocation *allocation*, a job id)."""
    options = rail_options(args, RAIL_DEFAULTS)
    if cluster_nodes is not None:
        if options.get("ranks_per_node") is not None:
            raise ConfigError(
                "--ranks-per-node groups ranks into virtual nodes on one host; on a virtual cluster "
                "the nodes are real (use --cluster off for virtual nodes)"
            )
        nodes = cluster_nodes
        rank_nodes = node_of_rank(ranks_per_node(args.ranks, nodes))
    else:
        if options.get("ranks_per_node") is None:
            options["ranks_per_node"] = -(-args.ranks // args.nodes)
        rank_nodes = [rank // int(options["ranks_per_node"]) for rank in range(args.ranks)]
        nodes = rank_nodes[-1] + 1
    config = Config.from_env(**options)  # validates, and fills in what the environment / defaults say
    messages = args.messages if args.messages is not None or args.bytes_per_rank is not None else DEFAULT_MESSAGES
    return {
        "ranks": args.ranks,
        "nodes": nodes,
        "ranks_per_node": rank_nodes.count(0),
        "slurm_allocation": allocation,
        "rank_nodes": rank_nodes,
        "victims": args.victims,
        "victim_ranks": choose_victims(args.ranks, args.victims, args.seed),
        "datagram_size": config.datagram_size,
        "messages_per_rank": messages,
        "bytes_per_rank": args.bytes_per_rank,
        "trials": args.trials,
        "seed": args.seed,
        "receive_work_us": args.receive_work_us,
        "partners": args.partners,
        "recv_pool_slots": config.recv_pool_slots,
        "send_pool_slots": config.send_pool_slots,
        "time_limit_s": args.time_limit,
        "metrics_interval_s": args.metrics_interval,
        "rail_options": options,
    }


def benchmark_args(load: dict[str, Any], mode: str, metrics_dir: str) -> list[str]:
    """The ``bench adversarial`` command line of one mode."""
    return adversarial_args(
        victims=load["victims"],
        trials=load["trials"],
        seed=load["seed"],
        messages=load["messages_per_rank"],
        bytes_per_rank=load["bytes_per_rank"],
        knobs=dict(load["rail_options"], flow_control=mode),
        receive_work_us=load["receive_work_us"],
        partners=load["partners"],
        extra=("--metrics", metrics_dir, "--metrics-interval", str(load["metrics_interval_s"])),
    )


def run(args: argparse.Namespace) -> int:
    """The comparison.  Every flag is checked before a cluster is built or a file is written; an
    interrupted comparison removes its cluster and leaves the last complete compare.json/.png as they were."""
    modes = args.modes
    if args.victims > args.ranks or args.nodes > args.ranks:
        return usage_error(
            "compare", f"--victims and --nodes may not exceed --ranks {args.ranks} (got {args.victims}, {args.nodes})"
        )
    choice = ClusterChoice.parse(args.cluster, allow_auto=True)
    allocation = os.environ.get("SLURM_JOB_ID") or None
    if args.launcher is None:  # inside an allocation its nodes are the cluster, started by srun
        args.launcher = "srun" if allocation and choice.kind == "auto" else "mpiexec"
    if args.launcher == "srun" and choice.kind not in ("up", "auto"):
        return usage_error(
            "compare",
            f"--launcher srun runs the modes on a running Slurm cluster (--cluster up[:NAME]) or on the Slurm "
            f"allocation this runs in (--cluster auto), not --cluster {args.cluster}",
        )
    if args.launcher == "srun" and choice.kind == "auto":
        if not allocation:
            return usage_error(
                "compare",
                "--launcher srun with --cluster auto runs the modes inside a Slurm allocation (sbatch, salloc), "
                "and SLURM_JOB_ID is not set here; or give --cluster up[:NAME] (mailrail cluster up --scheduler slurm)",
            )
        allocated = int(os.environ.get("SLURM_JOB_NUM_NODES") or 1)
        if args.nodes > allocated:
            return usage_error(
                "compare", f"--nodes {args.nodes}: Slurm allocation {allocation} has {allocated} node(s)"
            )
        placement, reason = "allocation", None
    else:
        allocation = None
        placement, reason = choose_placement(choice)
    try:  # the workload and its MailRail options, on the nodes the modes will run on
        workload(args, (choice.nodes or args.nodes) if placement != "shared" else None, allocation)
    except ConfigError as error:
        return usage_error("compare", str(error))
    if placement == "userns":
        return rerun_in_user_namespace(args.mailrail_argv)
    out = os.path.abspath(args.out)
    with contextlib.ExitStack() as stack:
        cluster = None
        if placement == "cluster":
            try:
                cluster = stack.enter_context(open_cluster(*cluster_request(args, choice)))
            except ClusterError as error:
                if choice.kind != "auto":
                    raise
                reason = f"a virtual cluster could not be built here: {error}"
        load = workload(  # checked above
            args, cluster.spec.nodes if cluster else (args.nodes if allocation else None), allocation
        )
        os.makedirs(out, exist_ok=True)
        described = cluster.describe() if cluster else None
        print(
            f"mailrail compare: adversarial incast, {load['ranks']} ranks on {_where_text(load, described)} "
            f"through {args.launcher if cluster or allocation else 'mpiexec'}, "
            f"{load['victims']} victim(s), {_amount_text(load)} per sending rank, {load['trials']} trial(s) per "
            f"mode; memory budget {load['recv_pool_slots']} receive + {load['send_pool_slots']} send slots per rank; "
            f"results in {out}",
            flush=True,
        )
        if reason:
            print(f"mailrail compare: on shared memory: {reason}", flush=True)
        elif cluster and not cluster.spec.memory_capped and args.victim_node_memory is None:
            print(
                "mailrail compare: the victim's node has no memory cap: a user namespace has no memory cgroups "
                "(as root the cap is --victim-node-memory, default " + DEFAULT_VICTIM_NODE_MEMORY + ")",
                flush=True,
            )
        runs = []
        for number in range(1, args.runs + 1):
            if args.runs > 1:
                print(f"\n=== run {number}/{args.runs} ===", flush=True)
            run_out = out if args.runs == 1 else os.path.join(out, f"run-{number}")
            runs.append(_run_modes(args, modes, load, cluster, allocation, run_out))

    capped = bool(described and described["victim_node_memory"])
    documents = []
    for run_out, results, _, wall in runs:
        document = {
            "benchmark": "compare",
            "workload": load,
            "cluster": described,
            "launcher": args.launcher if cluster or allocation else "mpiexec",
            "shared_memory_reason": reason,
            "modes": results,
            "table": table_rows(results, load),
            "wall_s": wall,
        }
        write_json(os.path.join(run_out, "compare.json"), document)
        documents.append(document)
    chosen = median_run(documents) if len(runs) > 1 else 0
    results = runs[chosen][1]
    print()
    print(results_table(documents[chosen]["table"]))
    for line in observations(results, load, described, reason):
        print(line)
    figures = [_plot(r, dirs, load, described, directory) for directory, r, dirs, _ in runs]
    figure = figures[chosen]
    if len(runs) > 1:
        spread = runs_summary(documents, chosen)
        write_json(os.path.join(out, "runs.json"), spread)
        write_json(os.path.join(out, "compare.json"), {**documents[chosen], "runs": spread})
        if figure:
            figure = shutil.copyfile(figure, os.path.join(out, "compare.png"))
            shutil.copyfile(os.path.join(runs[chosen][0], SUMMARY_FIGURE), os.path.join(out, SUMMARY_FIGURE))
        for line in spread_lines(spread):
            print(line)
    print(
        f"\n{len(modes)} mode(s) x {len(runs)} run(s) in {sum(r[3] for r in runs):.0f} s; wrote "
        f"{os.path.join(out, 'compare.json')}"
        + (f" and {figure}" if figure else "")
        + (f" (run {chosen + 1}, the closest to the medians; runs.json has every run)" if len(runs) > 1 else "")
    )
    return 0 if all(all_finished((r["status"] for r in results.values()), capped) for _, results, _, _ in runs) else 1


def _run_modes(
    args: argparse.Namespace,
    modes: list[str],
    load: dict[str, Any],
    cluster: Any,
    allocation: str | None,
    out: str,
) -> tuple[str, dict[str, dict[str, Any]], dict[str, str], float]:
    """One run of the comparison: every mode once, its files in *out*; (out, results, metrics dirs, seconds)."""
    os.makedirs(out, exist_ok=True)
    results: dict[str, dict[str, Any]] = {}
    metrics_dirs: dict[str, str] = {}
    started = time.monotonic()
    for index, mode in enumerate(modes, 1):
        metrics_dirs[mode] = os.path.join(out, "metrics", mode)
        print(f"\n[{index}/{len(modes)}] flow control {mode} (limit {args.time_limit:g} s)", flush=True)
        result = refusal(mode, load["ranks"], load["nodes"], load["rail_options"]) or run_adversarial(
            load["ranks"],
            benchmark_args(load, mode, metrics_dirs[mode]),
            os.path.join(out, f"adversarial-{mode}.json"),
            time_limit=args.time_limit,
            capture=False,
            cluster=cluster,
            nodes=load["nodes"] if allocation else None,
            launcher=args.launcher,
        )  # the job's progress lines show live
        results[mode] = note_out_of_memory(result)
        print(
            f"[{index}/{len(modes)}] {mode}: {outcome_text(result)}, ended after {result['wall_s']:.1f} s",
            flush=True,
        )
        if result["status"] in ("failed", "timeout"):
            print(result["output_tail"][-1500:], flush=True)  # the job's own error messages
        elif result["status"] == "refused":
            print(f"[{index}/{len(modes)}] {mode}: {result['reason']}", flush=True)
    return out, results, metrics_dirs, time.monotonic() - started


def _run_goodputs(document: dict[str, Any]) -> dict[str, float | None]:
    """Each mode's median goodput over the trials of one run (None: it did not finish)."""
    return {m: median_goodput(r) if r["status"] == "ok" else None for m, r in document["modes"].items()}


def median_run(documents: list[dict[str, Any]]) -> int:
    """The index of the run to show: every mode ended as it did in most runs (finished, or out of memory...),
    and among those runs the one closest to every mode's median goodput (the sum of the distances, in log
    scale, over the modes that finished).  Ties: the earliest."""
    goodputs = [_run_goodputs(d) for d in documents]
    statuses = [{m: r["status"] for m, r in d["modes"].items()} for d in documents]
    usual = {m: Counter(run[m] for run in statuses).most_common(1)[0][0] for m in statuses[0]}
    medians = {m: statistics.median(v) for m in goodputs[0] if (v := [g[m] for g in goodputs if g[m] is not None])}

    def distance(i: int) -> tuple[int, float]:
        unusual = sum(statuses[i][m] != usual[m] for m in usual)
        spread = sum(abs(math.log(g / medians[m])) for m, g in goodputs[i].items() if g is not None)
        return unusual, spread

    return min(range(len(documents)), key=distance)


#: The mode pairs whose goodput ratio runs.json and the summary give per run (the claims the docs make): the
#: table's pairs of credit modes.
SPREAD_RATIOS = tuple((a, b) for a, b in COMPARED_PAIRS if flow_mode(a).has_credits and flow_mode(b).has_credits)


def runs_summary(documents: list[dict[str, Any]], chosen: int) -> dict[str, Any]:
    """runs.json: per mode, the median goodput (Mb/s) of every run and their min, median and max; the
    ratios of :data:`SPREAD_RATIOS` per run; which run compare.json and compare.png show."""
    goodputs = [_run_goodputs(d) for d in documents]
    modes: dict[str, Any] = {}
    for mode in goodputs[0]:
        values = [g[mode] / 1e6 if g[mode] is not None else None for g in goodputs]
        done = [v for v in values if v is not None]
        modes[mode] = {
            "goodput_mbps": values,
            "statuses": [d["modes"][mode]["status"] for d in documents],
            "finished": len(done),
            **({"min": min(done), "median": statistics.median(done), "max": max(done)} if done else {}),
        }
    ratios = {}
    for a, b in SPREAD_RATIOS:
        per_run = [g[a] / g[b] if g.get(a) and g.get(b) else None for g in goodputs]
        done = [r for r in per_run if r is not None]
        if done:
            ratios[f"{a}/{b}"] = {
                "per_run": per_run,
                "min": min(done),
                "median": statistics.median(done),
                "max": max(done),
            }
    return {"runs": len(documents), "shown_run": chosen + 1, "modes": modes, "goodput_ratios": ratios}


def spread_lines(spread: dict[str, Any]) -> list[str]:
    """The spread over the runs, in words: what a single run's ranking cannot say."""
    n = spread["runs"]
    lines = [
        f"- over {n} runs, goodput median (min-max): "
        + ", ".join(_mode_spread(m, v, n) for m, v in spread["modes"].items())
    ]
    for pair, r in spread["goodput_ratios"].items():
        a, b = pair.split("/")
        lines.append(f"- {a} vs {b} over {n} runs: {r['median']:.2f}x median, {r['min']:.2f}x-{r['max']:.2f}x")
    return lines


def _mode_spread(mode: str, values: dict[str, Any], runs: int) -> str:
    """``node 1,354 (1,062-1,445) Mb/s``; for a mode that did not always finish, how it ended otherwise."""
    others = Counter(status for status in values["statuses"] if status != "ok")
    ended = ", ".join(f"{status.replace('_', ' ')} in {count}" for status, count in others.items())
    if "median" not in values:
        return f"{mode} never finished ({ended})"
    text = f"{mode} {values['median']:,.0f} ({values['min']:,.0f}-{values['max']:,.0f}) Mb/s"
    return text if not others else f"{text} in the {values['finished']} of {runs} runs it finished ({ended})"


def choose_placement(choice: ClusterChoice) -> tuple[str, str | None]:
    """``("cluster" | "userns" | "shared", reason for shared memory)``.

    An explicit ``--cluster`` that cannot be built is an error."""
    if choice.kind == "off":
        return "shared", None
    try:
        privileges = cluster_privileges()
    except ClusterError as error:
        if choice.kind == "auto":
            return "shared", str(error)
        raise
    return ("userns" if privileges == "userns" else "cluster"), None


def cluster_request(args: argparse.Namespace, choice: ClusterChoice) -> tuple[ClusterSpec, str | None]:
    """What :func:`open_cluster` needs: the spec of the cluster (compare's victims, and its default cap
    on their nodes where memory cgroups exist), and the running cluster's name or None."""
    request = copy.copy(args)
    if request.victim_node_memory is None and not os.environ.get(USERNS_VARIABLE):
        request.victim_node_memory = DEFAULT_VICTIM_NODE_MEMORY  # (a user namespace has no memory cgroups)
    if choice.kind == "auto":
        choice = ClusterChoice("nodes", nodes=args.nodes)
    victims = choose_victims(args.ranks, args.victims, args.seed)
    return cluster_spec(request, choice, args.ranks, victims), choice.name


def table_rows(results: dict[str, dict[str, Any]], load: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per mode: the side-by-side table (also stored in compare.json)."""
    baseline = results.get(UNCONSTRAINED)
    base_goodput = median_goodput(baseline) if baseline and baseline["status"] == "ok" else None
    on_cluster = any("network_bytes" in r for r in results.values())
    columns = [column for column in COLUMNS if base_goodput or column != SPEEDUP]
    rows = []
    for mode, result in results.items():
        row: dict[str, Any] = {"mode": mode, "status": outcome_text(result), **dict.fromkeys(columns, "-")}
        if on_cluster:
            row.update(dict.fromkeys(CLUSTER_COLUMNS, "-"))
            peak = victim_node_peak(result, load)
            if peak is not None:
                row["victim node peak MiB"] = peak / _MIB
            if "network_bytes" in result:
                row["network MB"] = result["network_bytes"] / 1e6
        if result["status"] == "ok":
            summary = result["summary"]
            goodput = median_goodput(result)
            if base_goodput:
                row[SPEEDUP] = f"{goodput / base_goodput:.2f}x"
            row.update(
                {
                    "runtime s": statistics.median(t["runtime_s"] for t in result["trials"]),
                    "goodput Mb/s": goodput / 1e6,
                    "victim RSS MiB": summary["peak_victim_rss_bytes"] / _MIB,
                    "victim growth MiB": summary["victim_rss_growth_bytes"] / _MIB,
                    "sender RSS MiB": summary["peak_sender_rss_bytes"] / _MIB,
                    "credit msgs": summary["credit_messages"],
                    "deferred peak": summary["deferred_high_water"],
                }
            )
            ratio = network_per_payload_byte(result)
            if on_cluster and ratio is not None:
                row["net B / payload B"] = ratio
        rows.append(row)
    return rows


def results_table(rows: list[dict[str, Any]]) -> str:
    """The side-by-side table as printed: fits a terminal (compare.json keeps every column)."""
    return format_table(list(rows[0]), [list(row.values()) for row in rows], drop_first=TABLE_DROPS_FIRST)


def note_out_of_memory(result: dict[str, Any]) -> dict[str, Any]:
    """*result* with ``out_of_memory_after_s`` and ``out_of_memory_node`` (the first kill, from its nodes'
    cgroups) when a node's memory cap ended the run; returned for chaining."""
    first = first_out_of_memory(result.get("cluster_nodes") or [])
    if result["status"] == "out_of_memory" and first is not None:
        result.update(out_of_memory_after_s=first["oom_after_s"], out_of_memory_node=first["node"])
    return result


def outcome_text(result: dict[str, Any]) -> str:
    """:func:`~mailrail_tools.bench.jobs.status_text`, and for a run a memory cap ended, when that happened."""
    text = status_text(result)
    if result.get("out_of_memory_after_s") is not None:
        text += f" at {result['out_of_memory_after_s']:.1f} s"
    return text


def victim_node_peak(result: dict[str, Any], load: dict[str, Any]) -> int | None:
    """The memory high-water mark of the (first) victim's node during the mode's job, from its cgroup."""
    nodes = result.get("cluster_nodes")
    if not nodes:
        return None
    node = load["rank_nodes"][load["victim_ranks"][0]]
    return nodes[node]["peak_bytes"]


def network_per_payload_byte(result: dict[str, Any]) -> float | None:
    """Bytes on the links per payload byte that had to cross between nodes (headers, credits, MPI's own)."""
    payload = result.get("summary", {}).get("internode_payload_bytes")
    if not payload or "network_bytes" not in result:
        return None
    return result["network_bytes"] / payload


def median_goodput(result: dict[str, Any]) -> float:
    return statistics.median(t["goodput_bps"] for t in result["trials"])


def observations(
    results: dict[str, dict[str, Any]], load: dict[str, Any], cluster: dict[str, Any] | None, reason: str | None
) -> list[str]:
    """What the numbers say, in plain words, computed from them (nothing here is a canned claim)."""
    ok = {m: r for m, r in results.items() if r["status"] == "ok"}
    killed = {m: r for m, r in results.items() if r["status"] == "out_of_memory"}
    lines = [f"- where: {_where_text(load, cluster)}" + (f" ({reason})" if reason else "")]
    if ok:
        lines.append(f"- finished, every message delivered exactly once: {', '.join(ok)}")
    for mode, result in killed.items():
        lines.append(
            f"- {mode}: {outcome_text(result)}: the kernel killed a rank on the victim's node when what MPI "
            f"buffered for the incast outgrew it; the job was ended then"
        )
    for mode, result in results.items():
        if result["status"] == "refused":
            lines.append(f"- {mode}: refused before it started: {result['reason']}")
        elif result["status"] not in ("ok", "out_of_memory"):
            lines.append(f"- {mode}: {status_text(result)}; see {mode}'s output above")
    for mode, result in ok.items():
        if not flow_mode(mode).has_credits:
            continue  # nothing to bound: unconstrained mode does not count
        window = max(d["credit_window_high_water"] for d in result["ranks_detail"] if d["victim"])
        lines.append(
            f"- {mode}: at most {window} messages arrived at a victim before their credits went back "
            f"(bound: its {load['recv_pool_slots']} receive slots); a sender held up to "
            f"{result['summary']['deferred_high_water']} messages back, waiting for credit"
        )
    if len(ok) > 1:
        goodputs = {m: median_goodput(r) for m, r in ok.items()}
        pairs = [(a, b) for a, b in COMPARED_PAIRS if a in ok and b in ok]
        lines.append(
            "- goodput (median of trials): "
            + ", ".join(f"{m} {g / 1e6:,.0f} Mb/s" for m, g in goodputs.items())
            + "; "
            + ", ".join(f"{a} {goodputs[a] / goodputs[b]:.2f}x {b}" for a, b in pairs)
        )
    credits = {m: r["summary"]["credit_messages"] for m, r in ok.items() if flow_mode(m).has_credits}
    fewer = [(a, b) for a, b in SPREAD_RATIOS if credits.get(a) and b in credits and credits[b] > credits[a]]
    for a, b in fewer:
        lines.append(
            f"- {a} credits needed {credits[b] / credits[a]:.1f}x fewer credit messages than {b} "
            f"credits ({credits[a]:,} vs {credits[b]:,}) for the same traffic"
        )
    per_megabyte = {
        m: r["summary"]["credit_messages"] / (sum(t["bytes_received"] for t in r["trials"]) / 1e6)
        for m, r in ok.items()
        if flow_mode(m).has_credits and any(t["bytes_received"] for t in r["trials"])
    }
    if per_megabyte:
        lines.append(
            "- credit messages per MB of payload delivered: "
            + ", ".join(f"{m} {v:,.1f}" for m, v in per_megabyte.items())
        )
    for mode in (m for m in ok if flow_mode(m).lends_on_request):
        summary = ok[mode]["summary"]
        lines.append(
            f"- {mode}: {summary['credit_messages']:,} credit messages ({summary['credit_requests']:,} requests, "
            f"{summary['credit_revokes']:,} revokes; {summary['credits_reclaimed']:,} released credits went to "
            f"nodes that waited, {summary['credits_given_back']:,} idle ones came back), within the same "
            f"{load['recv_pool_slots']} receive slots whatever the job size"
        )
    if ok:
        growth = {m: r["summary"]["victim_rss_growth_bytes"] for m, r in ok.items()}
        text = ", ".join(f"{m} +{g / _MIB:.1f} MiB" for m, g in growth.items())
        beside = [a for a, b in COMPARED_PAIRS if b == UNCONSTRAINED and growth.get(a) and b in growth]
        if beside:
            text += ": unconstrained grew " + ", ".join(
                f"{growth[UNCONSTRAINED] / growth[a]:,.0f}x as much as {a}" for a in beside
            )
        lines.append(
            "- victim memory growth during the trials (peak RSS minus RSS before the first trial; what MPI "
            "buffered for it shows here): " + text
        )
    ratios = {m: network_per_payload_byte(r) for m, r in ok.items()}
    if any(v is not None for v in ratios.values()):
        lines.append(
            "- network bytes per payload byte crossing between nodes (TCP/IP headers, credit returns, MPI's "
            "own traffic): " + ", ".join(f"{m} {v:.3f}" for m, v in ratios.items() if v is not None)
        )
    return lines


def _where_text(load: dict[str, Any], cluster: dict[str, Any] | None) -> str:
    if load.get("slurm_allocation"):
        return f"{load['nodes']} node(s) of Slurm allocation {load['slurm_allocation']}"
    if cluster is None:
        return f"{load['nodes']} virtual node(s) of {load['ranks_per_node']} ranks on this host's shared memory"
    return cluster_summary(cluster)


def _plot(
    results: dict[str, dict[str, Any]],
    metrics_dirs: dict[str, str],
    load: dict[str, Any],
    cluster: dict[str, Any] | None,
    out: str,
) -> str | None:
    reason = missing()
    if reason:
        print(reason)
        return None
    title = (
        f"adversarial incast: {load['ranks']} ranks on {_where_text(load, cluster)}\n{load['victims']} "
        f"victim(s), {_amount_text(load)} per sender, {load['recv_pool_slots']} receive slots per rank"
    )
    peaks = {mode: victim_node_peak(result, load) for mode, result in results.items()} if cluster else None
    cap = cluster["victim_node_memory"] if cluster else None
    plot_compare_summary(results, os.path.join(out, SUMMARY_FIGURE), title, node_peaks=peaks, node_cap=cap)
    return plot_compare(results, metrics_dirs, os.path.join(out, "compare.png"), title, node_peaks=peaks, node_cap=cap)


def _amount_text(load: dict[str, Any]) -> str:
    amount = (
        f"{load['bytes_per_rank']:,} B"
        if load["bytes_per_rank"] is not None
        else f"{load['messages_per_rank']:,} x {load['datagram_size']} B"
    )
    if load.get("partners"):
        amount += f" (spread over the victims and {load['partners']} partner(s) of each rank)"
    return amount
