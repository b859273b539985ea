"""``mailrail compare``: the main job.  The adversarial incast under none, rank and node flow control.

Launches ``bench adversarial`` under mpiexec once per mode with the same
workload and the same memory budget (pools), each run bounded by a time
limit, then prints the modes side by side and writes ``compare.json`` and
``compare.png`` to ``--out``.  A mode that fails or runs past the limit is a
row of the table saying so.  No arguments are needed: the defaults (16 ranks
on 4 virtual nodes, 1 victim, 64 receive slots per rank, so 4 credits per rank
pair and 16 per node pair) finish in about a minute on a 2-core machine.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from ..config import FLOW_CONTROL_MODES as MODES
from ..config import Config
from ..errors import ConfigError
from .common import add_rail_arguments, format_table, rail_options, write_json
from .jobs import DEFAULT_TIME_LIMIT, add_workload_arguments, adversarial_args, run_adversarial, status_text

DEFAULT_RANKS = 16
DEFAULT_NODES = 4
DEFAULT_MESSAGES = 6000
#: The shared memory budget: receive slots per rank (the credit budget of both credit modes).
DEFAULT_RECV_POOL_SLOTS = 64
_MIB = 2 ** 20
#: The table's figures per mode ("-" for a mode that did not finish).
COLUMNS = ("runtime s", "goodput Mb/s", "speedup vs none", "victim RSS MiB", "victim growth MiB", "sender RSS MiB",
           "credit msgs", "deferred peak")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("-n", "--ranks", type=int, default=DEFAULT_RANKS, help="MPI ranks (default: %(default)s)")
    parser.add_argument("--nodes", type=int, default=DEFAULT_NODES,
                        help="virtual nodes the ranks are split into (default: %(default)s; "
                             "--ranks-per-node overrides)")
    parser.add_argument("--victims", type=int, default=1, help="victim ranks (default: %(default)s)")
    add_workload_arguments(parser, messages=DEFAULT_MESSAGES, trials=4, per="mode")
    parser.add_argument("--modes", default=",".join(MODES), help="modes to run, comma-separated (default: %(default)s)")
    parser.add_argument("--time-limit", type=float, default=DEFAULT_TIME_LIMIT,
                        help="seconds each mode may run, start-up included (default: %(default)s)")
    parser.add_argument("--metrics-interval", type=float, default=0.1,
                        help="seconds between metrics samples (default: %(default)s)")
    parser.add_argument("--out", default="mailrail-results",
                        help="directory for compare.json, compare.png and the runs' files (default: %(default)s)")
    add_rail_arguments(parser, skip=("flow_control",))


def workload(args: argparse.Namespace) -> dict[str, Any]:
    """The one workload and memory budget every mode runs with."""
    options = rail_options(args)
    options.setdefault("recv_pool_slots", DEFAULT_RECV_POOL_SLOTS)
    if options.get("ranks_per_node") is None:
        options["ranks_per_node"] = -(-args.ranks // args.nodes)
    config = Config.from_env(**options)  # validates, and fills in what the environment / defaults say
    ranks_per_node = int(options["ranks_per_node"])
    messages = args.messages if args.messages is not None or args.bytes_per_rank is not None else DEFAULT_MESSAGES
    return {
        "ranks": args.ranks,
        "nodes": -(-args.ranks // ranks_per_node),
        "ranks_per_node": ranks_per_node,
        "victims": args.victims,
        "datagram_size": config.datagram_size,
        "messages_per_rank": messages,
        "bytes_per_rank": args.bytes_per_rank,
        "trials": args.trials,
        "seed": args.seed,
        "recv_pool_slots": config.recv_pool_slots,
        "send_pool_slots": config.send_pool_slots,
        "time_limit_s": args.time_limit,
        "metrics_interval_s": args.metrics_interval,
        "rail_options": options,
    }


def benchmark_args(load: dict[str, Any], mode: str, metrics_dir: str) -> list[str]:
    """The ``bench adversarial`` command line of one mode."""
    return adversarial_args(victims=load["victims"], trials=load["trials"], seed=load["seed"],
                            messages=load["messages_per_rank"], bytes_per_rank=load["bytes_per_rank"],
                            knobs=dict(load["rail_options"], flow_control=mode),
                            extra=("--metrics", metrics_dir, "--metrics-interval", str(load["metrics_interval_s"])))


def run(args: argparse.Namespace) -> int:
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in modes if m not in MODES]
    if unknown or not modes:
        print(f"mailrail compare: --modes takes {', '.join(MODES)}; got {args.modes!r}")
        return 2
    if not 1 <= args.victims <= args.ranks or args.ranks < 2 or args.nodes < 1:
        print(f"mailrail compare: need ranks >= 2, nodes >= 1 and 1 <= victims <= ranks "
              f"(got {args.ranks} ranks, {args.nodes} nodes, {args.victims} victims)")
        return 2
    try:
        load = workload(args)
    except ConfigError as error:
        print(f"mailrail compare: {error}")
        return 2
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    print(f"mailrail compare: adversarial incast, {load['ranks']} ranks on {load['nodes']} virtual node(s), "
          f"{load['victims']} victim(s), {_amount_text(load)} per sending rank, {load['trials']} trial(s) per mode; "
          f"memory budget {load['recv_pool_slots']} receive + {load['send_pool_slots']} send slots per rank; "
          f"results in {out}", flush=True)
    results: dict[str, dict[str, Any]] = {}
    metrics_dirs: dict[str, str] = {}
    started = time.monotonic()
    for index, mode in enumerate(modes, 1):
        metrics_dirs[mode] = os.path.join(out, "metrics", mode)
        print(f"\n[{index}/{len(modes)}] flow control {mode} (limit {args.time_limit:g} s)", flush=True)
        result = run_adversarial(load["ranks"], benchmark_args(load, mode, metrics_dirs[mode]),
                                 os.path.join(out, f"adversarial-{mode}.json"),
                                 time_limit=args.time_limit, capture=False)  # the job's progress lines show live
        results[mode] = result
        print(f"[{index}/{len(modes)}] {mode}: {status_text(result)} after {result['wall_s']:.1f} s", flush=True)
    wall = time.monotonic() - started

    rows = table_rows(results)
    document = {"benchmark": "compare", "workload": load, "modes": results, "table": rows, "wall_s": wall}
    write_json(os.path.join(out, "compare.json"), document)
    print()
    print(format_table(list(rows[0]), [list(r.values()) for r in rows]))
    for line in observations(results, load):
        print(line)
    figure = _plot(results, metrics_dirs, load, out)
    print(f"\n{len(modes)} mode(s) in {wall:.0f} s; wrote {os.path.join(out, 'compare.json')}"
          + (f" and {figure}" if figure else ""))
    return 0 if all(r["status"] == "ok" for r in results.values()) else 1


def table_rows(results: dict[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per mode: the side-by-side table (also stored in compare.json)."""
    baseline = results.get("none")
    base_goodput = baseline["summary"]["goodput_bps_mean"] if baseline and baseline["status"] == "ok" else None
    rows = []
    for mode, result in results.items():
        row: dict[str, Any] = {"mode": mode, "status": status_text(result), **dict.fromkeys(COLUMNS, "-")}
        if result["status"] == "ok":
            summary = result["summary"]
            goodput = summary["goodput_bps_mean"]
            row.update({
                "runtime s": summary["runtime_s_mean"],
                "goodput Mb/s": goodput / 1e6,
                "speedup vs none": f"{goodput / base_goodput:.2f}x" if base_goodput else "n/a",
                "victim RSS MiB": summary["peak_victim_rss_bytes"] / _MIB,
                "victim growth MiB": summary["victim_rss_growth_bytes"] / _MIB,
                "sender RSS MiB": summary["peak_sender_rss_bytes"] / _MIB,
                "credit msgs": summary["credit_messages"],
                "deferred peak": summary["deferred_high_water"],
            })
        rows.append(row)
    return rows


def observations(results: dict[str, dict[str, Any]], load: dict[str, Any]) -> list[str]:
    """What the numbers say, computed from them (nothing here is a canned claim)."""
    ok = {m: r for m, r in results.items() if r["status"] == "ok"}
    lines = []
    for mode, result in ok.items():
        if mode == "none":
            continue  # nothing to bound: unconstrained mode does not count
        window = max(d["credit_window_high_water"] for d in result["ranks_detail"] if d["victim"])
        lines.append(f"- {mode}: at most {window} messages arrived at a victim before their credits went back "
                     f"(bound: its {load['recv_pool_slots']} receive slots); a sender held up to "
                     f"{result['summary']['deferred_high_water']} messages back, waiting for credit")
    if "rank" in ok and "node" in ok:
        rank_credits = ok["rank"]["summary"]["credit_messages"]
        node_credits = ok["node"]["summary"]["credit_messages"]
        if node_credits:
            lines.append(f"- node credits needed {rank_credits / node_credits:.1f}x fewer credit messages than rank "
                         f"credits ({node_credits:,} vs {rank_credits:,}) for the same traffic")
    if ok:
        lines.append("- victim memory growth during the trials (peak RSS minus RSS before the first trial; "
                     "what MPI buffered for it shows here): "
                     + ", ".join(f"{m} +{r['summary']['victim_rss_growth_bytes'] / _MIB:.1f} MiB"
                                 for m, r in ok.items()))
    for mode, result in results.items():
        if result["status"] != "ok":
            lines.append(f"- {mode}: {status_text(result)}; see {mode}'s output above")
    return lines


def _plot(results: dict[str, dict[str, Any]], metrics_dirs: dict[str, str], load: dict[str, Any],
          out: str) -> str | None:
    from .plots import missing, plot_compare
    reason = missing()
    if reason:
        print(reason)
        return None
    title = (f"adversarial incast: {load['ranks']} ranks on {load['nodes']} nodes, {load['victims']} victim(s), "
             f"{_amount_text(load)} per sender, {load['recv_pool_slots']} receive slots per rank")
    return plot_compare(results, metrics_dirs, os.path.join(out, "compare.png"), title)


def _amount_text(load: dict[str, Any]) -> str:
    if load["bytes_per_rank"] is not None:
        return f"{load['bytes_per_rank']:,} B"
    return f"{load['messages_per_rank']:,} x {load['datagram_size']} B"
