"""``mailrail simulate``: the model of MailRail jobs at any size (no MPI; the ``simulate`` extra: scipy, for its fit).

* ``simulate adversarial``: project the adversarial incast at the sizes asked for, per mode.
* ``simulate calibrate``: fit the model's parameters to ``compare``/``sweep`` results.
* ``simulate validate``: predict held-out runs and report the errors.
* ``simulate paper``: the MailRail paper's experiments at scale, beside the paper's numbers.
* ``simulate cpu-sample`` and ``cpu-split``: where a run's CPU went (:mod:`.cpu`), what the shared-cores
  parameters stand for, measured.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import statistics
import sys
import textwrap
import time
from collections.abc import Callable
from typing import Any

from mailrail.config import default
from mailrail.flow.modes import MODE_NAMES as MODES
from mailrail.flow.modes import UNCONSTRAINED, flow_mode
from mailrail_tools.figures import missing as figure_missing
from mailrail_tools.figures import pyplot
from mailrail_tools.flags import choice_list, float_in, int_in, int_list_in, missing_module, usage_error
from mailrail_tools.output import format_table, write_json

from .report import by_mode_rows, share_percent, signed_percent

#: The modes with credits, each compared with the unconstrained one.
CREDIT_MODES = tuple(mode for mode in MODES if flow_mode(mode).has_credits)

MIB = 1 << 20
#: Messages one projection point models at most unless told otherwise: about a minute here per million.
DEFAULT_MAX_MESSAGES = 1_000_000
#: What a projection point may take on this 2-core machine: within the 10 minutes asked of each.
DEFAULT_POINT_TIME_LIMIT = 480.0
#: A point's pilot models this fraction of its messages, and the point then takes at most this share of
#: --point-time-limit by the pilot's cost per message (it grows a little with the messages in flight).
PILOT_FRACTION = 20
PILOT_MARGIN = 0.6
#: The held-out runs shipped with the package (validate's default).
HELD_OUT = os.path.join(os.path.dirname(__file__), "data", "runs", "held-out")
#: The sampled compare runs shipped with the package (cpu-split takes them by name).
CPU_RUNS = os.path.join(os.path.dirname(__file__), "data", "cpu")


def _progress(line: str) -> None:
    sys.stderr.write(f"  ... {line}\n")
    sys.stderr.flush()


def _params_argument(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--params",
        default=default,
        help="parameter file, or a shipped set by name: calibrated (this project's virtual cluster) or "
        "omnipath (an Omni-Path-like cluster) (default: %(default)s)",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="change one parameter of the set (repeatable; a JSON value: 2e-6, 2048, null): what an assumed "
        "value would have to be for a result to change",
    )


def _load(args: argparse.Namespace) -> tuple[Any, dict[str, Any], str]:
    """The parameter set *args* name, with its --set changes (ParamsError naming a bad one)."""
    from .params import ParamsError, load_params, params_from_dict, resolve

    path = resolve(args.params)
    params, document = load_params(path)
    if not args.set:
        return params, document, path
    values = params.as_dict()
    for change in args.set:
        name, sep, text = change.partition("=")
        try:
            if not sep:
                raise ValueError
            values[name] = json.loads(text)
        except ValueError:
            raise ParamsError(f"--set {change!r}: NAME=VALUE with a JSON value (2e-6, 2048, null)") from None
    return params_from_dict(values, f"{path} with --set {' '.join(args.set)}"), document, path


# -- simulate adversarial -------------------------------------------------------------------------------


def add_adversarial_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--ranks", type=int_list_in(2, 1 << 20), required=True, help="job sizes, comma-separated")
    parser.add_argument("--ranks-per-node", type=int_in(1, 1 << 20), default=64, help="(default: %(default)s)")
    parser.add_argument("--victims", type=int_in(1, 1 << 20), default=4, help="victim ranks (default: %(default)s)")
    parser.add_argument(
        "--bytes-per-rank",
        type=int_in(1, 1 << 50),
        default=int(12.8 * MIB),
        help="payload bytes each rank sends (default: 12.8 MiB, the paper's Table I); scaled down to "
        "--max-messages when needed, and the output says so",
    )
    parser.add_argument("--modes", type=choice_list(MODES), default=list(MODES), help="(default: every mode)")
    _params_argument(parser, "calibrated")
    parser.add_argument("--json", required=True, metavar="PATH", help="where to write the points")
    parser.add_argument("--png", metavar="PATH", help="a figure of goodput and victim memory per mode")
    _workload_arguments(parser)


def _workload_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--datagram-size", type=int_in(1, 1 << 30), default=default("datagram_size"), help="(default: %(default)s)"
    )
    parser.add_argument(
        "--credits-per-pair",
        type=int_in(1, 1 << 30),
        default=None,
        help="credits per pair (rank: per rank pair; node: per sending node and receiver; adaptive: the "
        "lease); with it, each mode gets the receive slots that back it (default: MailRail's sizing from "
        "--recv-slots)",
    )
    parser.add_argument(
        "--recv-slots",
        type=int_in(1, 1 << 40),
        default=None,
        help=f"receive slots per rank (default: {default('recv_pool_slots')}, or with --credits-per-pair the slots "
        "that back it)",
    )
    parser.add_argument(
        "--send-slots", type=int_in(1, 1 << 30), default=default("send_pool_slots"), help="(default: %(default)s)"
    )
    parser.add_argument(
        "--credit-threshold",
        type=int_in(1, 1 << 30),
        default=default("credit_threshold"),
        help="(default: %(default)s)",
    )
    parser.add_argument("--partners", type=int_in(0, 1 << 20), default=0, help="as bench adversarial's (default: 0)")
    parser.add_argument("--seed", type=int_in(0, 2**32 - 1), default=1, help="(default: %(default)s)")
    parser.add_argument(
        "--link-rate", type=float_in(1.0), default=None, help="bits/s of every link (default: the parameters')"
    )
    parser.add_argument(
        "--max-messages",
        type=int_in(1),
        default=DEFAULT_MAX_MESSAGES,
        help="the most messages one point models (all ranks together); bytes per rank are scaled down to it "
        "(default: %(default)s, about a minute each here)",
    )
    _time_limit_argument(parser)


def _time_limit_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--point-time-limit",
        type=float_in(0.0),
        default=DEFAULT_POINT_TIME_LIMIT,
        help="seconds one point may take here: a pilot run measures its cost per message and bytes per rank "
        "are scaled down further to fit (default: %(default)s; 0: no limit)",
    )


def _slots(args: argparse.Namespace, mode: str, ranks: int) -> int:
    if args.recv_slots is not None:
        return int(args.recv_slots)
    slots = int(default("recv_pool_slots"))
    if args.credits_per_pair is None:
        return slots
    senders = flow_mode(mode).senders(ranks, -(-ranks // args.ranks_per_node))
    return slots if senders is None else args.credits_per_pair * senders  # a credit per pair for every sender


def project(
    args: argparse.Namespace,
    params: Any,
    sizes: list[tuple[int, int]],
    modes: list[str],
    bytes_per_rank: int,
    label: str = "",
) -> list[dict[str, Any]]:
    """One point per (ranks, victims) of *sizes* and mode: the model's trial, scaled to --max-messages; or, with
    ``args.method == "fluid"``, its fluid approximation (:mod:`.fluid`) at the whole bytes."""
    from .fluid import fluid
    from .model import Workload, simulate

    whole = getattr(args, "method", "simulate") == "fluid"
    points = []
    total = len(sizes) * len(modes)
    for index, ((ranks, victims), mode) in enumerate(((s, m) for s in sizes for m in modes), 1):
        messages = max(1, -(-bytes_per_rank // args.datagram_size))
        budget = messages if whole else max(1, args.max_messages // ranks)
        modelled = min(messages, budget)
        workload = Workload(
            ranks=ranks,
            ranks_per_node=min(args.ranks_per_node, ranks),
            victims=victims,
            messages_per_rank=modelled,
            mode=mode,
            datagram_size=args.datagram_size,
            recv_slots=_slots(args, mode, ranks),
            send_slots=args.send_slots,
            credit_threshold=args.credit_threshold,
            credits_per_pair=args.credits_per_pair,
            partners=args.partners,
            seed=args.seed,
            link_Bps=args.link_rate / 8 if args.link_rate else None,
        )
        prefix = f"[{index}/{total}]{label} {ranks} ranks, {victims} victim(s), {mode}"
        started = time.monotonic()
        if args.point_time_limit and modelled >= 2 * PILOT_FRACTION and not whole:
            # A pilot with a twentieth of the messages tells what one costs here in this mode at this size
            # (adaptive credits at 16,384 ranks cost several times what the others do): fit the point in time.
            pilot = dataclasses.replace(workload, messages_per_rank=max(1, modelled // PILOT_FRACTION))
            pilot_started = time.monotonic()
            simulate(pilot, params)
            per_message = (time.monotonic() - pilot_started) / (pilot.messages_per_rank * ranks)
            affordable = int(args.point_time_limit * PILOT_MARGIN / per_message / ranks)
            if affordable < modelled:
                modelled = max(1, affordable)
                workload = dataclasses.replace(workload, messages_per_rank=modelled)
        _progress(
            f"{prefix}: {modelled} messages per rank" + (f" (of {messages}: scaled)" if modelled < messages else "")
        )
        if whole:
            result: Any = fluid(workload, params)
        else:
            result = simulate(workload, params, progress=lambda line, p=prefix: _progress(f"{p}: {line}"))
        wall = time.monotonic() - started
        scale = messages / modelled
        point = {
            "ranks": ranks,
            "mode": mode,
            "runtime_s": result.runtime_s,
            "goodput_bps": result.goodput_bps,
            "victim_peak_bytes": result.victim_peak_bytes,
            "credit_messages": result.credit_messages,
            "wall_s": wall,
            "method": "fluid" if whole else "simulate",
            "status": result.status,
            "nodes": workload.nodes,
            "victims": victims,
            "incast_ratio": (ranks - victims) / victims,
            "recv_slots": workload.recv_slots,
            "bytes_per_rank": modelled * args.datagram_size,
            "bytes_per_rank_asked": bytes_per_rank,
            "scaled": modelled < messages,
            # Linear in the bytes: what the credit modes do once past their start; for none a lower bound,
            # its matching cost growing with its queue.
            "runtime_s_at_bytes_asked": result.runtime_s * scale,
            "credit_messages_at_bytes_asked": int(result.credit_messages * scale),
            # MPI's unexpected queue grows with the bytes; the pools and credit state do not.
            "victim_peak_bytes_at_bytes_asked": int(
                result.victim_peak_bytes + result.victim_unexpected_peak_bytes * (scale - 1)
            ),
            "victim_unexpected_peak_bytes": result.victim_unexpected_peak_bytes,
            "victim_node_peak_bytes": result.victim_node_peak_bytes,
            # its unexpected messages grow with the bytes: past the node's memory, the whole run would have died
            "status_at_bytes_asked": _status_at_bytes_asked(result, params, workload, scale),
            "victim_messages": result.victim_messages,  # modelled messages received per victim: min, median, max
            "messages": result.messages,
            "wire_bytes": result.wire_bytes,
            "events": result.events,
            "detail": result.detail,
            # loss and recovery (parameter sets that bound a receive context): packets lost, sent again, timers
            "dropped_packets": result.dropped_packets,
            "retransmitted_packets": result.retransmitted_packets,
            "retransmitted_fraction": result.retransmitted_packets / max(result.messages, 1),
            "timeouts": result.timeouts,
        }
        points.append(point)
        _progress(
            f"{prefix}: {result.status}, {result.runtime_s:.4g} s simulated, {result.goodput_bps / 1e9:.3g} Gb/s, "
            f"victim {result.victim_peak_bytes / MIB:.1f} MiB, {result.credit_messages} credit messages ({wall:.1f} s)"
        )
    return points


def _status_at_bytes_asked(result: Any, params: Any, workload: Any, scale: float) -> str:
    """A scaled point's outcome at the bytes asked: out of memory if its victim node's unexpected messages,
    grown linearly with the bytes, pass the node's memory."""
    cap = workload.victim_node_memory or params.node_memory_bytes
    baselines = min(workload.ranks_per_node, workload.ranks) * params.rank_baseline_bytes
    if result.status == "ok" and cap and baselines + (result.victim_node_peak_bytes - baselines) * scale > cap:
        return "out_of_memory"
    return str(result.status)


def points_table(points: list[dict[str, Any]]) -> str:
    headers = [
        "ranks",
        "victims",
        "mode",
        "status",
        "runtime s",
        "goodput Gb/s",
        "victim MiB",
        "credit msgs",
        "MiB/rank",
        "wall s",
    ]
    rows = [
        [
            p["ranks"],
            p["victims"],
            p["mode"],
            p["status"],
            f"{p['runtime_s']:.4g}",
            f"{p['goodput_bps'] / 1e9:.3g}",
            f"{p['victim_peak_bytes'] / MIB:.1f}",
            p["credit_messages"],
            f"{p['bytes_per_rank'] / MIB:.3g}" + ("*" if p["scaled"] else ""),
            f"{p['wall_s']:.1f}",
        ]
        for p in points
    ]
    if any(p.get("retransmitted_packets") for p in points):  # a parameter set with loss: what it cost
        headers.insert(-2, "resent")
        for row, p in zip(rows, points, strict=True):
            row.insert(-2, f"{p['retransmitted_fraction']:.1%}")
    return format_table(headers, rows)


def run_adversarial(args: argparse.Namespace) -> int:
    from .params import ParamsError

    if args.victims >= min(args.ranks):
        return usage_error("simulate adversarial", f"--victims {args.victims} needs more ranks than {min(args.ranks)}")
    try:
        params, _, path = _load(args)
    except ParamsError as error:
        return usage_error("simulate adversarial", str(error))
    started = time.monotonic()
    points = project(args, params, [(r, args.victims) for r in args.ranks], args.modes, args.bytes_per_rank)
    document = {
        "benchmark": "simulate-adversarial",
        "params_file": path,
        "params_set": args.set,
        "params": params.as_dict(),
        "workload": {k: v for k, v in vars(args).items() if isinstance(v, (int, float, str, list, type(None)))},
        "points": points,
        "wall_s": time.monotonic() - started,
    }
    write_json(args.json, document)
    print(points_table(points))
    if any(p["scaled"] for p in points):
        print("* scaled down: fewer bytes per rank than asked (--max-messages); runtime_s_at_bytes_asked in the JSON")
    figure = _plot_points(points, args.png, f"model ({os.path.basename(path)})") if args.png else None
    print(f"wrote {args.json}" + (f" and {figure}" if figure else ""))
    return 0


def _plot_points(points: list[dict[str, Any]], path: str, title: str) -> str | None:
    if figure_missing():
        print(figure_missing())
        return None
    plt = pyplot()
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for mode in MODES:
        mine = [p for p in points if p["mode"] == mode and p["status"] == "ok"]
        if mine:
            left.plot([p["ranks"] for p in mine], [p["goodput_bps"] / 1e9 for p in mine], "o-", label=mode)
            right.plot([p["ranks"] for p in mine], [p["victim_peak_bytes"] / MIB for p in mine], "o-", label=mode)
    for axis, label in ((left, "goodput (Gb/s)"), (right, "victim memory (MiB)")):
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("ranks")
        axis.set_ylabel(label)
        axis.grid(True, alpha=0.3)
        axis.legend()
    figure.suptitle(title)
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


# -- simulate calibrate ---------------------------------------------------------------------------------


def add_calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--runs", nargs="+", required=True, metavar="DIR", help="compare/sweep results (files or directories)"
    )
    parser.add_argument("--out", required=True, metavar="FILE", help="the parameter file to write")
    parser.add_argument(
        "--host-cores",
        type=int_in(1, 4096),
        default=os.cpu_count() or 1,
        help="cores the runs' ranks shared (default: this machine's, %(default)s)",
    )
    parser.add_argument(
        "--fit-messages",
        type=int_in(100),
        default=8000,
        help="messages each run is modelled with while fitting (default: %(default)s)",
    )
    parser.add_argument("--max-evaluations", type=int_in(1), default=100, help="of the CPU fit (default: %(default)s)")


#: What the virtual cluster is, before fitting: TCP over veth pairs and a bridge at the host's speed.
VIRTUAL_CLUSTER = {
    "link_Bps": 2.5e9,  # veth at the host's speed: faster than 2 cores can fill
    "link_latency_s": 30e-6,  # a TCP round trip over veth and a bridge is about 60 us here
    "switch_queue_bytes": 1000 * 1514,  # the bridge's port: a 1000-packet queue
    "header_bytes": 66 + 32,  # Ethernet, IP and TCP headers, and Open MPI's match header
    "eager_limit_bytes": 65536,  # Open MPI's TCP BTL
    "shm_Bps": 4e9,
    "shm_latency_s": 1e-6,
    "send_cpu_s": 10e-6,
    "recv_cpu_s": 10e-6,
    "credit_cpu_s": 5e-6,
    # each node's ranks are one scheduler group (its prted starts a session; autogroup, on by default, groups
    # a session): the cores go evenly to the nodes, then to their ranks (measured: each of 16 nodes got
    # 0.111-0.124 of the 2 cores whatever its ranks did, docs/simulate.md)
    "cores_by_node": 1,
}


def run_calibrate(args: argparse.Namespace) -> int:
    problem = missing_module("scipy", "mailrail simulate calibrate", "apps", purpose=" (the fit)")
    if problem:
        return usage_error("simulate calibrate", problem)
    from .calibrate import fit
    from .params import ModelParams, ParamsError
    from .runs import read_runs

    try:
        cases = read_runs(args.runs)
    except ParamsError as error:
        return usage_error("simulate calibrate", str(error))
    base = ModelParams(**{**VIRTUAL_CLUSTER, "host_cores": args.host_cores})
    print(f"mailrail simulate calibrate: {len(cases)} runs from {', '.join(args.runs)}", flush=True)
    started = time.monotonic()
    try:
        params, report = fit(
            cases, base, fit_messages=args.fit_messages, max_evaluations=args.max_evaluations, progress=_progress
        )
    except ValueError as error:
        return usage_error("simulate calibrate", str(error))
    document = {
        "source": "mailrail simulate calibrate " + " ".join(f"--runs {r}" for r in args.runs),
        "date": datetime.date.today().isoformat(),
        "runs": sorted({case.name.rpartition(":")[0] for case in cases}),
        "machine": {"cpus": os.cpu_count(), "host_cores": args.host_cores},
        "fit": {**report, "wall_s": time.monotonic() - started},
        "params": params.as_dict(),
    }
    write_json(args.out, document)
    rows = [[name, f"{value:.4g}" if isinstance(value, float) else value] for name, value in params.as_dict().items()]
    print(format_table(["parameter", "value"], rows))
    print(f"wrote {args.out} ({time.monotonic() - started:.0f} s)")
    return 0


# -- simulate fit-window --------------------------------------------------------------------------------


def add_fit_window_arguments(parser: argparse.ArgumentParser) -> None:
    _params_argument(parser, "tcp")
    parser.add_argument(
        "--runs", nargs="+", required=True, metavar="DIR", help="the runs to fit (compare/sweep results, lossy)"
    )
    parser.add_argument(
        "--out",
        required=True,
        metavar="FILE",
        help="the parameter file to write: the set --params names, with the window chosen and how (may be it)",
    )


def run_fit_window(args: argparse.Namespace) -> int:
    from .calibrate import fit_window
    from .params import ParamsError
    from .runs import read_runs

    try:
        params, document, path = _load(args)
        cases = read_runs(args.runs)
    except ParamsError as error:
        return usage_error("simulate fit-window", str(error))
    if not params.flows:
        return usage_error("simulate fit-window", f"{path}: its flow_window_packets is 0 (no flows): nothing to fit")
    print(f"mailrail simulate fit-window: {len(cases)} runs from {', '.join(args.runs)}, parameters {path}", flush=True)
    started = time.monotonic()
    window, report = fit_window(cases, params, progress=_progress)
    written = {key: value for key, value in document.items() if key not in ("fit", "params")}
    if "inherit" in written:  # the set it inherits from, found from where this one is written
        inherited = os.path.join(os.path.dirname(os.path.abspath(path)), written["inherit"])
        written["inherit"] = os.path.relpath(inherited, os.path.dirname(os.path.abspath(args.out)))
    written["fit"] = {
        "command": "mailrail simulate fit-window " + " ".join(f"--runs {run}" for run in args.runs),
        "date": datetime.date.today().isoformat(),
        **report,
        "wall_s": time.monotonic() - started,
    }
    written["params"] = {**document["params"], "flow_window_packets": window}
    write_json(args.out, written)
    rows = [
        [
            s["window"],
            f"{s['outcomes_agree']}/{s['cases']}",
            "-" if s["rms_log_goodput_error"] is None else f"{s['rms_log_goodput_error']:.3f}",
            s["goodput_cases"],
        ]
        for s in report["windows"]
    ]
    print(format_table(["window", "outcomes agree", "rms log goodput error", "over"], rows))
    print(f"chose flow_window_packets={window}; wrote {args.out} ({time.monotonic() - started:.0f} s)")
    return 0


# -- simulate validate ----------------------------------------------------------------------------------


def add_validate_arguments(parser: argparse.ArgumentParser) -> None:
    _params_argument(parser, "calibrated")
    parser.add_argument(
        "--runs",
        nargs="+",
        metavar="DIR",
        default=None,
        help="runs to predict, not used for the fit (default: the held-out runs shipped with MailRail)",
    )
    parser.add_argument("--json", required=True, metavar="PATH")
    parser.add_argument(
        "--max-messages",
        type=int_in(1),
        default=200_000,
        help="the most messages one run is modelled with (memory growth scaled back) (default: %(default)s)",
    )


def validate(cases: list[Any], params: Any, max_messages: int, progress: Callable[[str], None]) -> dict[str, Any]:
    """Each case predicted: measured beside modelled, and the relative errors of goodput and victim memory."""
    from .calibrate import predict, relative_error

    rows = []
    for index, case in enumerate(cases, 1):
        started = time.monotonic()
        prediction = predict(case, params, max_messages=max_messages)
        goodput_error = relative_error(prediction.goodput_bps if prediction.status == "ok" else None, case.goodput_bps)
        memory_error = relative_error(
            prediction.victim_bytes if prediction.status == "ok" else None, case.victim_peak_bytes
        )
        result = prediction.result
        predicted_resent = result.retransmitted_packets / result.flow_packets if result.flow_packets else None
        if predicted_resent is None and case.retransmitted_per_packet is not None and not params.flows:
            predicted_resent = 0.0  # a lossless parameter set predicts no loss
        row = {
            "name": case.name,
            "figure": case.name.rpartition(":")[0],
            "mode": case.workload.mode,
            "ranks": case.workload.ranks,
            "nodes": case.workload.nodes,
            "victims": case.workload.victims,
            "measured_status": case.status,
            "predicted_status": prediction.status,
            "outcome_agrees": case.status == prediction.status,
            # loss: packets sent again per packet on the links between nodes (TCP segments, measured; the
            # model's messages, ACKs and NAKs), and the difference (percentage points, not a ratio)
            "measured_retransmitted_per_packet": case.retransmitted_per_packet,
            "predicted_retransmitted_per_packet": predicted_resent,
            "retransmitted_difference": (
                predicted_resent - case.retransmitted_per_packet
                if predicted_resent is not None and case.retransmitted_per_packet is not None
                else None
            ),
            "measured_goodput_bps": case.goodput_bps,
            "predicted_goodput_bps": prediction.goodput_bps,
            "goodput_error": goodput_error,
            "measured_victim_bytes": case.victim_peak_bytes,
            "predicted_victim_bytes": prediction.victim_bytes,
            "memory_error": memory_error,
            "scale": prediction.scale,
            "wall_s": time.monotonic() - started,
        }
        rows.append(row)
        progress(
            f"[{index}/{len(cases)}] {case.name}: goodput {_signed(goodput_error)}, memory {_signed(memory_error)}, "
            f"outcome {'agrees' if row['outcome_agrees'] else 'differs'}"
        )
    errors = [abs(e) for row in rows for e in (row["goodput_error"], row["memory_error"]) if e is not None]
    figures: dict[str, dict[str, Any]] = {}
    for figure in dict.fromkeys(row["figure"] for row in rows):
        mine = [row for row in rows if row["figure"] == figure]
        summary = {}
        for kind in ("goodput_error", "memory_error"):
            values = [abs(row[kind]) for row in mine if row[kind] is not None]
            summary[f"median_abs_{kind}"] = statistics.median(values) if values else None
        summary["outcomes_agree"] = sum(row["outcome_agrees"] for row in mine)
        summary["cases"] = len(mine)
        figures[figure] = summary
    return {
        "cases": rows,
        "figures": figures,
        "median_abs_error": statistics.median(errors) if errors else None,
        "max_abs_error": max(errors) if errors else None,
        # The same apart: victim memory is mostly the process's own baseline in the credit modes, so the
        # unconstrained runs (where MPI's queue holds the flood) are the test of the memory model.
        "goodput": _spread([row["goodput_error"] for row in rows]),
        "memory": _spread([row["memory_error"] for row in rows]),
        "unconstrained_memory": _spread(
            [row["memory_error"] for row in rows if not flow_mode(row["mode"]).has_credits]
        ),
        # each quantity apart, per mode: no figure that mixes one mode's errors with another's
        "by_mode": {mode: _by_quantity([row for row in rows if row["mode"] == mode]) for mode in MODES},
    }


def _by_quantity(rows: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "goodput": _spread([row["goodput_error"] for row in rows]),
        "victim_memory": _spread([row["memory_error"] for row in rows]),
        "retransmitted_per_packet": _spread([row["retransmitted_difference"] for row in rows]),
        "outcomes_agree": sum(row["outcome_agrees"] for row in rows),
        "cases": len(rows),
    }


def _spread(errors: list[float | None]) -> dict[str, float | None]:
    values = [abs(e) for e in errors if e is not None]
    return {
        "median_abs_error": statistics.median(values) if values else None,
        "max_abs_error": max(values) if values else None,
        "cases": len(values),
    }


def _signed(error: float | None) -> str:
    return signed_percent(error, "n/a")


def _fall(fraction: float | None) -> str:
    if fraction is None:
        return "n/a"
    return f"{fraction:.1%}" if fraction >= 0 else f"{fraction:.1%} (it rose {-fraction:.1%})"


def run_validate(args: argparse.Namespace) -> int:
    from .params import ParamsError
    from .runs import read_runs

    try:
        params, _, path = _load(args)
        cases = read_runs(args.runs or [HELD_OUT])
    except ParamsError as error:
        return usage_error("simulate validate", str(error))
    print(f"mailrail simulate validate: {len(cases)} held-out runs, parameters {path}", flush=True)
    started = time.monotonic()
    report = validate(cases, params, args.max_messages, _progress)
    document = {"params_file": path, "runs": args.runs or [HELD_OUT], **report, "wall_s": time.monotonic() - started}
    write_json(args.json, document)
    rows = [
        [
            row["name"],
            row["measured_status"]
            if row["measured_status"] == row["predicted_status"]
            else f"{row['measured_status']} / model {row['predicted_status']}",
            _mbps(row["measured_goodput_bps"]),
            _mbps(row["predicted_goodput_bps"] if row["predicted_status"] == "ok" else None),
            _signed(row["goodput_error"]),
            _mib(row["measured_victim_bytes"]),
            _mib(row["predicted_victim_bytes"] if row["predicted_status"] == "ok" else None),
            _signed(row["memory_error"]),
            share_percent(row["measured_retransmitted_per_packet"]),
            share_percent(row["predicted_retransmitted_per_packet"]),
        ]
        for row in report["cases"]
    ]
    headers = ["run", "outcome", "Mb/s", "model Mb/s", "error", "victim MiB", "model MiB", "error", "resent", "model"]
    print(format_table(headers, rows))
    headers = ["mode", "goodput |error|", "victim memory |error|", "resent |difference|", "outcome agrees"]
    print(format_table(headers, by_mode_rows(report["by_mode"])))
    median, most = (_signed(report[key]).lstrip("+") for key in ("median_abs_error", "max_abs_error"))
    agree = sum(row["outcome_agrees"] for row in report["cases"])
    print(
        f"median |error| {median}, max |error| {most} over goodput and victim memory; "
        f"outcomes agree in {agree}/{len(report['cases'])}; wrote {args.json}"
    )
    return 0


def _mbps(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:,.0f}"


def _mib(value: float | None) -> str:
    return "-" if value is None else f"{value / MIB:,.1f}"


# -- simulate paper -------------------------------------------------------------------------------------


def add_paper_arguments(parser: argparse.ArgumentParser) -> None:
    from . import paper

    names = [e.name for e in paper.experiments()]
    parser.add_argument("--experiments", type=choice_list(names), default=names, help="(default: all: %(default)s)")
    parser.add_argument("--modes", type=choice_list(MODES), default=list(MODES), help="(default: every mode)")
    parser.add_argument(
        "--ranks",
        type=int_list_in(2, 1 << 20),
        default=None,
        help="only the points of these job sizes (default: every point of each experiment)",
    )
    _params_argument(parser, "omnipath")
    parser.add_argument("--json", required=True, metavar="PATH")
    parser.add_argument("--png", metavar="PATH")
    parser.add_argument(
        "--max-messages",
        type=int_in(1),
        default=DEFAULT_MAX_MESSAGES,
        help="the most messages one point models; bytes per rank scaled down to it (default: %(default)s)",
    )
    parser.add_argument("--seed", type=int_in(0, 2**32 - 1), default=1, help="(default: %(default)s)")
    _time_limit_argument(parser)
    parser.add_argument(
        "--method",
        choices=("simulate", "fluid"),
        default="simulate",
        help="simulate: the discrete-event model, scaled to --max-messages; fluid: its fluid approximation at the "
        "whole bytes (seconds a point; goodput experiment's incast, see docs/simulate.md) (default: %(default)s)",
    )
    parser.add_argument(
        "--combine",
        nargs="+",
        metavar="JSON",
        help="run nothing: join the JSON of earlier runs (other experiments or job sizes, run apart or at once) "
        "into one, compared with the paper again",
    )


def _paper_command(args: argparse.Namespace) -> str:
    """The command that runs what *args* ran (recorded in its JSON, so that a figure can be made again)."""
    words = ["mailrail", "simulate", "paper", "--experiments", ",".join(args.experiments)]
    if args.ranks:
        words += ["--ranks", ",".join(map(str, args.ranks))]
    if args.modes != list(MODES):
        words += ["--modes", ",".join(args.modes)]
    words += ["--params", args.params, *(w for change in args.set for w in ("--set", change))]
    if args.method == "fluid":
        words += ["--method", "fluid"]
    else:
        words += ["--max-messages", str(args.max_messages), "--point-time-limit", f"{args.point_time_limit:g}"]
    if args.seed != 1:
        words += ["--seed", str(args.seed)]
    return " ".join(words + ["--json", os.path.basename(args.json)])


def combine_paper(paths: list[str]) -> dict[str, Any]:
    """One document from the ``simulate paper`` JSON of several runs: the same parameters, no point twice; each
    experiment's points in its own order, compared with the paper again."""
    from . import paper
    from .params import ParamsError

    documents = []
    for path in paths:
        try:
            with open(path) as source:
                documents.append(json.load(source))
        except (OSError, ValueError) as error:
            raise ParamsError(f"--combine {path}: {error}") from None
        if documents[-1].get("benchmark") != "simulate-paper":
            raise ParamsError(f"--combine {path}: not the JSON of mailrail simulate paper")
        if documents[-1]["params"] != documents[0]["params"]:
            raise ParamsError(f"--combine {path}: other parameters than {paths[0]}'s; runs of one set only")
    experiments: dict[str, Any] = {}
    for experiment in paper.experiments():
        parts = [d["experiments"][experiment.name] for d in documents if experiment.name in d["experiments"]]
        if not parts:
            continue
        points = [p for part in parts for p in part["points"]]
        keys = [(p["ranks"], p["victims"], p["mode"]) for p in points]
        twice = sorted({key for key in keys if keys.count(key) > 1})
        if twice:
            raise ParamsError(f"--combine: {experiment.name} has these points twice (ranks, victims, mode): {twice}")
        order = list(zip(experiment.ranks, experiment.victims, strict=True))
        points.sort(key=lambda p: (order.index((p["ranks"], p["victims"])), list(MODES).index(p["mode"])))
        experiments[experiment.name] = {
            "title": experiment.title,
            "max_messages": max(part["max_messages"] for part in parts),  # (each point says if it was scaled)
            "points": points,
            "paper": compare_with_paper(experiment.name, points),
        }
    return {
        "benchmark": "simulate-paper",
        "params_file": documents[0]["params_file"],
        "params_set": documents[0].get("params_set", []),
        "params": documents[0]["params"],
        "max_messages": max(d["max_messages"] for d in documents),
        "commands": [c for d in documents for c in d.get("commands", [])],
        "experiments": experiments,
        "points": [p for e in experiments.values() for p in e["points"]],
        "wall_s": max(d["wall_s"] for d in documents),  # the runs' longest: they may run at once
    }


def run_paper(args: argparse.Namespace) -> int:
    from . import paper
    from .params import ParamsError

    if args.combine:
        try:
            document = combine_paper(args.combine)
        except ParamsError as error:
            return usage_error("simulate paper", str(error))
        for experiment in document["experiments"].values():
            print(f"\n{experiment['title']}\n{points_table(experiment['points'])}")
            for line in experiment["paper"]["lines"]:
                print("  " + line)
        _write_paper(document, args)
        return 0
    try:
        params, _, path = _load(args)
    except ParamsError as error:
        return usage_error("simulate paper", str(error))
    settings = argparse.Namespace(
        ranks_per_node=paper.RANKS_PER_NODE,
        datagram_size=paper.DATAGRAM_SIZE,
        credits_per_pair=paper.CREDITS_PER_PAIR,
        recv_slots=None,
        send_slots=default("send_pool_slots"),
        credit_threshold=paper.CREDIT_THRESHOLD,
        seed=args.seed,
        link_rate=None,
        max_messages=args.max_messages,
        point_time_limit=args.point_time_limit,
        partners=0,
        method=args.method,
    )
    started = time.monotonic()
    results: dict[str, Any] = {}
    chosen = [e for e in paper.experiments() if e.name in args.experiments]
    for experiment in chosen:
        print(f"\n{experiment.title}", flush=True)
        settings.partners = experiment.partners
        sizes = [(r, v) for r, v in zip(experiment.ranks, experiment.victims, strict=True) if r in (args.ranks or [r])]
        if not sizes:
            continue
        try:
            points = project(settings, params, sizes, args.modes, experiment.bytes_per_rank, f" {experiment.name}")
        except ParamsError as error:  # what the fluid view does not cover (a shared host, partners)
            return usage_error("simulate paper", f"--method {args.method}, {experiment.name}: {error}")
        comparison = compare_with_paper(experiment.name, points)
        results[experiment.name] = {
            "title": experiment.title,
            "max_messages": args.max_messages,
            "points": points,
            "paper": comparison,
        }
        print(points_table(points))
        for line in comparison["lines"]:
            print("  " + line)
    document = {
        "benchmark": "simulate-paper",
        "params_file": path,
        "params_set": args.set,
        "params": params.as_dict(),
        "max_messages": args.max_messages,
        "method": args.method,
        "commands": [_paper_command(args)],
        "experiments": results,
        "points": [p for r in results.values() for p in r["points"]],
        "wall_s": time.monotonic() - started,
    }
    _write_paper(document, args)
    return 0


def _write_paper(document: dict[str, Any], args: argparse.Namespace) -> None:
    write_json(args.json, document)
    figure = _plot_paper(document["experiments"], args.png) if args.png else None
    print(f"\nwrote {args.json}" + (f" and {figure}" if figure else "") + f" ({document['wall_s']:.0f} s)")


def _finished(point: dict[str, Any]) -> bool:
    """It finished, and would have at the bytes asked (a scaled point's victim node within its memory)."""
    return bool(point.get("status_at_bytes_asked", point["status"]) == "ok")


def _runtime(points: list[dict[str, Any]], ranks: int, mode: str, victims: int | None = None) -> float | None:
    for p in points:
        if p["ranks"] == ranks and p["mode"] == mode and _finished(p) and victims in (None, p["victims"]):
            return float(p["runtime_s_at_bytes_asked"])
    return None


def _goodput(points: list[dict[str, Any]], ranks: int, mode: str) -> float | None:
    """The point's goodput; None if it did not finish, or would not have at the bytes asked."""
    for p in points:
        if p["ranks"] == ranks and p["mode"] == mode and _finished(p):
            return float(p["goodput_bps"])
    return None


def compare_with_paper(name: str, points: list[dict[str, Any]]) -> dict[str, Any]:
    """The model's figures beside the paper's, as rows and as sentences (where they disagree, by how much)."""
    from . import paper

    rows: list[dict[str, Any]] = []
    lines: list[str] = []
    if name == "table1":
        for ranks, measured in paper.TABLE_I.items():
            row: dict[str, Any] = {"ranks": ranks}
            for mode in MODES:
                row[f"model_{mode}_s"] = _runtime(points, ranks, mode)
            for mode in paper.MEASURED_MODES:
                row[f"paper_{mode}_s"] = measured[mode]
            for mode in CREDIT_MODES:
                none, mine = row[f"model_{UNCONSTRAINED}_s"], row[f"model_{mode}_s"]
                row[f"model_{mode}_speedup"] = none / mine if none and mine else None
            for mode in paper.MEASURED_CREDIT_MODES:
                row[f"paper_{mode}_speedup"] = measured[UNCONSTRAINED] / measured[mode]
            rows.append(row)
            model = " ".join(f"{mode} {_x(row[f'model_{mode}_speedup'])}" for mode in CREDIT_MODES)
            measured_speedups = " ".join(
                f"{mode} {_x(row[f'paper_{mode}_speedup'])}" for mode in paper.MEASURED_CREDIT_MODES
            )
            lines.append(f"{ranks} ranks: speedup over {UNCONSTRAINED}, model {model}; paper {measured_speedups}")
        first, last = rows[0], rows[-1]
        for mode in paper.MEASURED_MODES:
            model = _ratio(last[f"model_{mode}_s"], first[f"model_{mode}_s"])
            measured = last[f"paper_{mode}_s"] / first[f"paper_{mode}_s"]
            lines.append(
                f"{mode}: runtime grows {_x(model)} from 512 to 4096 ranks in the model, {_x(measured)} in the paper"
                + (f" (model/paper {model / measured:.2g})" if model else "")
            )
    elif name == "goodput":
        low, high = paper.GOODPUT_RANKS[0], paper.GOODPUT_RANKS[-1]
        for mode in MODES:
            a, b = _goodput(points, low, mode), _goodput(points, high, mode)
            fall = 1 - b / a if a and b else None
            row = {"mode": mode, "model_fall": fall, "paper_fall": paper.GOODPUT_FALL.get(mode)}
            rows.append(row)
            unfinished = [
                p["ranks"] for p in points if p["mode"] == mode and _goodput(points, p["ranks"], mode) is None
            ]
            lines.append(
                f"{mode}: goodput fell {_fall(fall)} from 128:1 to 4096:1 in the model"
                + (f", {paper.GOODPUT_FALL[mode]:.1%} in the paper" if mode in paper.GOODPUT_FALL else "")
                + (f" (out of memory or unfinished at {', '.join(map(str, unfinished))} ranks)" if unfinished else "")
            )
    elif name == "victims":
        ratios = paper.SWEEP_RATIOS
        for mode in MODES:
            runtimes = [_runtime(points, paper.SWEEP_RANKS, mode, paper.SWEEP_RANKS // r) for r in ratios]
            growth = [
                _ratio(b, a) ** (1 / math.log2(rb / ra)) if _ratio(b, a) else None
                for (a, ra), (b, rb) in zip(zip(runtimes, ratios), zip(runtimes[1:], ratios[1:]))
            ]
            rows.append(
                {"mode": mode, "ratios": list(ratios), "model_runtime_s": runtimes, "growth_per_doubling": growth}
            )
            lines.append(
                f"{mode}: runtime per doubling of work per victim between "
                + ", ".join(f"{a}:1-{b}:1 {_x(g)}" for a, b, g in zip(ratios, ratios[1:], growth))
                + (
                    f" (paper: about {paper.SWEEP_NONE_GROWTH_PER_DOUBLING:g}x from 8:1 on)"
                    if not flow_mode(mode).has_credits
                    else ""
                )
            )
        rank, node = (_runtime(points, paper.SWEEP_RANKS, m, 1) for m in paper.SWEEP_COMPARED_MODES)
        lines.append(
            f"node over rank at 4096:1: {_x(_ratio(rank, node))} in the model, "
            f"{paper.SWEEP_NODE_OVER_RANK_AT_HIGH_RATIO:g}x in the paper"
        )
    elif name == "stranding":
        ranks = points[0]["ranks"] if points else 0
        rank, none = (_runtime(points, ranks, mode) for mode in paper.STRANDING_COMPARED_MODES)
        credits = {p["mode"]: p["credit_messages_at_bytes_asked"] for p in points if p["status"] == "ok"}
        rows.append({"model_rank_over_none": _ratio(rank, none), "credit_messages": credits})
        lines.append(
            f"rank runtime over none: {_x(_ratio(rank, none))} in the model; the paper's trace replay at 14,336 "
            f"ranks: about {paper.STRANDING_RANK_OVER_NONE_RUNTIME:g}x"
        )
        lines.append(
            "credit messages: "
            + ", ".join(f"{mode} {count:,}" for mode, count in credits.items())
            + "; the paper: rank 17.8-26.4 million, node 117k-435k per trial (another workload and size)"
        )
    return {"rows": rows, "lines": lines}


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3g}x"


def _plot_paper(results: dict[str, Any], path: str) -> str | None:
    if figure_missing():
        print(figure_missing())
        return None
    from . import paper

    plt = pyplot()
    panels = [name for name in ("table1", "goodput", "victims", "stranding") if name in results]
    # two panels a row: at about 900 pixels a page's column shows it at a readable size
    rows = (len(panels) + 1) // 2
    figure, axes = plt.subplots(rows, 2, figsize=(10, 4.2 * rows), squeeze=False)
    for axis in axes.flat[len(panels) :]:
        axis.set_visible(False)
    for axis, name in zip(axes.flat, panels):
        points = results[name]["points"]
        for mode in MODES:
            # a point whose victim node would have run out of memory at the bytes asked has no runtime to show
            mine = [p for p in points if p["mode"] == mode and _finished(p)]
            if not mine:
                continue
            lost = sorted({p["ranks"] for p in points if p["mode"] == mode} - {p["ranks"] for p in mine})
            label = f"model {mode}" + (f" (out of memory at {', '.join(f'{r:,}' for r in lost)})" if lost else "")
            if name == "victims":
                xs = [(p["ranks"] - p["victims"]) / p["victims"] for p in mine]
            else:
                xs = [p["ranks"] for p in mine]
            ys = [p["goodput_bps"] / 1e9 if name == "goodput" else p["runtime_s_at_bytes_asked"] for p in mine]
            axis.plot(xs, ys, "o-", label=label)
        if name == "table1":
            for mode, marker in zip(paper.MEASURED_MODES, "s^v"):
                axis.plot(
                    list(paper.TABLE_I),
                    [v[mode] for v in paper.TABLE_I.values()],
                    marker,
                    ls="--",
                    label=f"paper {mode}",
                )
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("incast ratio" if name == "victims" else "ranks")
        axis.set_ylabel("goodput (Gb/s)" if name == "goodput" else "runtime (s)")
        axis.set_title(textwrap.fill(results[name]["title"], 60), fontsize=9)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8)
    figure.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)
    return path


# -- simulate cpu-sample, cpu-split ---------------------------------------------------------------------


def add_cpu_sample_arguments(parser: argparse.ArgumentParser) -> None:
    from .cpu import DEFAULT_INTERVAL, OUTPUT, SAMPLES

    parser.description = (
        f"{parser.description}. Writes DIR/{SAMPLES} (the host's /proc/stat times and each rank's user and "
        f"system ticks, context switches and scheduler group, every --interval) and DIR/{OUTPUT} (the command's "
        "output, each line timed); the command's output also shows as it comes, and its exit status is this "
        "one's. Ranks are the command's descendants with OMPI_COMM_WORLD_RANK or PMI_RANK in their environment. "
        "Example, as root: mailrail simulate cpu-sample --out DIR -- mailrail compare -n 16 --nodes 4 --out DIR"
    )
    parser.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="where to write the samples (give compare the same --out: cpu-split reads both)",
    )

    parser.add_argument(
        "--interval",
        type=float_in(0.01, 60.0),
        default=DEFAULT_INTERVAL,
        help="seconds between samples (default: %(default)s)",
    )
    parser.add_argument("command", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command to run")


def run_cpu_sample(args: argparse.Namespace) -> int:
    from .cpu import sample

    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        return usage_error("simulate cpu-sample", "no command: mailrail simulate cpu-sample --out DIR -- COMMAND...")
    try:
        return sample(command, args.out, args.interval)
    except OSError as error:  # the command cannot start, or DIR cannot be written
        return usage_error("simulate cpu-sample", str(error))


def add_cpu_split_arguments(parser: argparse.ArgumentParser) -> None:
    parser.description = (
        f"{parser.description}. Per mode and trial: host CPU split, the victim's and the senders' CPU and context "
        "switches per delivered message, the victim's share of the cores and of its node, each node's cores, "
        "and the idle share the model's per-node rule implies: s = ((cores/nodes)/victim cores - 1)/(ranks on "
        "its node - 1)."
    )
    shipped = ", ".join(sorted(os.listdir(CPU_RUNS))) if os.path.isdir(CPU_RUNS) else "none"
    parser.add_argument(
        "directory",
        metavar="DIR",
        help=f"cpu-sample's --out, where compare wrote its --out too; or a shipped run by name: {shipped}",
    )
    parser.add_argument("--json", metavar="PATH", help="write every figure here")


def cpu_split_table(document: dict[str, Any]) -> str:
    """The trials and each mode's mean, one row each."""
    rows = []
    for mode, mean in document["modes"].items():
        trials = [t for t in document["trials"] if t["mode"] == mode]
        labelled = [(str(t["trial"]) if t["run"] is None else f"{t['run']}.{t['trial']}", t) for t in trials]
        for label, row in [*labelled, ("mean", mean)]:
            host = row["host_percent"]
            split = (host["user"] + host["nice"], host["system"], host["softirq"], host["idle"] + host["iowait"])
            victim_cs = row["victim_voluntary_cs_per_message"] + row["victim_nonvoluntary_cs_per_message"]
            senders_cs = row["senders_voluntary_cs_per_message"] + row["senders_nonvoluntary_cs_per_message"]
            rows.append(
                [
                    mode,
                    label,
                    f"{row['goodput_mbps']:.0f}",
                    "/".join(f"{x:.0f}" for x in split),
                    f"{row['victim_user_us_per_message']:.1f}/{row['victim_system_us_per_message']:.1f}",
                    f"{row['senders_us_per_message']:.0f}",
                    f"{victim_cs:.2f}/{senders_cs:.1f}",
                    f"{row['victim_cores']:.3f}",
                    f"{row['node_cores_min']:.2f}-{row['node_cores_max']:.2f}",
                    f"{row['victim_share_of_node']:.2f}",
                    "n/a" if row["implied_idle_share"] is None else f"{row['implied_idle_share']:.2f}",
                ]
            )
    headers = [
        "mode",
        "trial",
        "goodput Mb/s",
        "host % user/sys/ softirq/idle",
        "victim us/msg user/sys",
        "senders us/msg",
        "cs/msg victim/ senders",
        "victim cores",
        "node cores",
        "victim/ node",
        "idle share",
    ]
    return format_table(headers, rows)


def run_cpu_split(args: argparse.Namespace) -> int:
    from .cpu import CpuDataError, split

    directory = args.directory
    if not os.path.isdir(directory) and os.path.isdir(os.path.join(CPU_RUNS, directory)):
        directory = os.path.join(CPU_RUNS, directory)  # a shipped run, by name
    try:
        document = split(directory)
    except CpuDataError as error:
        return usage_error("simulate cpu-split", str(error))
    print(
        f"{document['ranks']} ranks on {document['nodes']} nodes sharing {document['cores']} cores "
        f"({document['cores'] / document['nodes']:.3g} a node if split evenly by node); per delivered message:"
    )
    print(cpu_split_table(document))
    grouped = [mode for mode, mean in document["modes"].items() if mean["one_group_per_node"]]
    if grouped:
        print(f"- each node's ranks were one scheduler group (autogroup), a group a node: {', '.join(grouped)}")
    for trial in document["trials"]:
        if trial["ranks_missing"]:
            print(f"- {trial['mode']} trial {trial['trial']}: no samples of ranks {trial['ranks_missing']}")
    print(
        textwrap.fill(
            "- cs: context switches; victim cores: its user+system CPU over the trial; node cores: each node's "
            "ranks' (min-max); victim/node: its share of its node's; idle share: what the per-node rule implies",
            100,
            subsequent_indent="  ",
        )
    )
    write_json(args.json, document)
    if args.json:
        print(f"wrote {args.json}")
    return 0


VERBS = {
    "adversarial": (add_adversarial_arguments, run_adversarial),
    "calibrate": (add_calibrate_arguments, run_calibrate),
    "fit-window": (add_fit_window_arguments, run_fit_window),
    "validate": (add_validate_arguments, run_validate),
    "paper": (add_paper_arguments, run_paper),
    "cpu-sample": (add_cpu_sample_arguments, run_cpu_sample),
    "cpu-split": (add_cpu_split_arguments, run_cpu_split),
}
