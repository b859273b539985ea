"""``mailrail simulate``: the model of MailRail jobs at any size (no MPI; the ``simulate`` extra: scipy, for its fit).

* ``simulate adversarial``: project the adversarial incast at the sizes asked for, per mode.
* ``simulate calibrate``: fit the model's parameters to ``compare``/``sweep`` results.
* ``simulate validate``: predict held-out runs and report the errors.
* ``simulate paper``: the MailRail paper's experiments at scale, beside the paper's numbers.
* ``simulate cpu-sample`` and ``cpu-split``: where a run's CPU went (:mod:`.cpu`), what the shared-cores
  parameters stand for, measured.

Each command parses its arguments, calls the package's modules and prints and writes what they return: the
points come from :mod:`.projection`, the fit from :mod:`.calibrate`, the predictions from :mod:`.validation`,
the comparison with the paper from :mod:`.paper_comparison`.  The MPI experiments that measure parameters,
``simulate measure-matching`` and ``measure-idle``, are their own modules (:mod:`.measure`).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import textwrap
import time
from typing import Any

from mailrail.flow.modes import MODE_NAMES as MODES
from mailrail_tools.figures import missing as figure_missing
from mailrail_tools.figures import pyplot
from mailrail_tools.figures import save as save_figure
from mailrail_tools.flags import choice_list, float_in, int_in, int_list_in, missing_module, usage_error
from mailrail_tools.incast import rail_default
from mailrail_tools.output import format_table, write_json

from .projection import DEFAULT_MAX_MESSAGES, DEFAULT_POINT_TIME_LIMIT, METHODS
from .report import by_mode_rows, share_percent, signed_percent

MIB = 1 << 20
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


def _load_params(args: argparse.Namespace) -> tuple[Any, dict[str, Any], str]:
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
        "--datagram-size", type=int_in(1, 1 << 30), default=rail_default("datagram_size"), help="(default: %(default)s)"
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
        help=f"receive slots per rank (default: {rail_default('recv_pool_slots')}, or with --credits-per-pair the "
        "slots that back it)",
    )
    parser.add_argument(
        "--send-slots", type=int_in(1, 1 << 30), default=rail_default("send_pool_slots"), help="(default: %(default)s)"
    )
    parser.add_argument(
        "--credit-threshold",
        type=int_in(1, 1 << 30),
        default=rail_default("credit_threshold"),
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
    from .projection import project

    if args.victims >= min(args.ranks):
        return usage_error("simulate adversarial", f"--victims {args.victims} needs more ranks than {min(args.ranks)}")
    try:
        params, _, path = _load_params(args)
    except ParamsError as error:
        return usage_error("simulate adversarial", str(error))
    started = time.monotonic()
    points = project(
        params,
        [(ranks, args.victims) for ranks in args.ranks],
        args.modes,
        args.bytes_per_rank,
        ranks_per_node=args.ranks_per_node,
        datagram_size=args.datagram_size,
        credits_per_pair=args.credits_per_pair,
        recv_slots=args.recv_slots,
        send_slots=args.send_slots,
        credit_threshold=args.credit_threshold,
        partners=args.partners,
        seed=args.seed,
        link_rate_bps=args.link_rate,
        max_messages=args.max_messages,
        point_time_limit_s=args.point_time_limit,
        progress=_progress,
    )
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
    return save_figure(figure, path, dpi=110)


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


def run_calibrate(args: argparse.Namespace) -> int:
    problem = missing_module("scipy", "mailrail simulate calibrate", "apps", purpose=" (the fit)")
    if problem:
        return usage_error("simulate calibrate", problem)
    from .calibrate import fit, virtual_cluster
    from .params import ParamsError
    from .runs import read_runs

    try:
        cases = read_runs(args.runs)
    except ParamsError as error:
        return usage_error("simulate calibrate", str(error))
    base = virtual_cluster(args.host_cores)
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
        params, document, path = _load_params(args)
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


def run_validate(args: argparse.Namespace) -> int:
    from .params import ParamsError
    from .runs import read_runs
    from .validation import HELD_OUT, validate

    try:
        params, _, path = _load_params(args)
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
            _as_mbps(row["measured_goodput_bps"]),
            _as_mbps(row["predicted_goodput_bps"] if row["predicted_status"] == "ok" else None),
            _signed_error(row["goodput_error"]),
            _as_mib(row["measured_victim_bytes"]),
            _as_mib(row["predicted_victim_bytes"] if row["predicted_status"] == "ok" else None),
            _signed_error(row["memory_error"]),
            share_percent(row["measured_retransmitted_per_packet"]),
            share_percent(row["predicted_retransmitted_per_packet"]),
        ]
        for row in report["cases"]
    ]
    headers = ["run", "outcome", "Mb/s", "model Mb/s", "error", "victim MiB", "model MiB", "error", "resent", "model"]
    print(format_table(headers, rows))
    headers = ["mode", "goodput |error|", "victim memory |error|", "resent |difference|", "outcome agrees"]
    print(format_table(headers, by_mode_rows(report["by_mode"])))
    median, most = (_signed_error(report[key]).lstrip("+") for key in ("median_abs_error", "max_abs_error"))
    agree = sum(row["outcome_agrees"] for row in report["cases"])
    print(
        f"median |error| {median}, max |error| {most} over goodput and victim memory; "
        f"outcomes agree in {agree}/{len(report['cases'])}; wrote {args.json}"
    )
    return 0


def _signed_error(error: float | None) -> str:
    """A relative error as ``+12%`` (``n/a`` for None)."""
    return signed_percent(error, "n/a")


def _as_mbps(value: float | None) -> str:
    return "-" if value is None else f"{value / 1e6:,.0f}"


def _as_mib(value: float | None) -> str:
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
        choices=METHODS,
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


def _read_paper_runs(paths: list[str]) -> list[dict[str, Any]]:
    """The ``simulate paper`` JSON of each of *paths*, all of one parameter set (ParamsError naming a file that
    is not)."""
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
    return documents


def run_paper(args: argparse.Namespace) -> int:
    from . import paper
    from .paper_comparison import combine_paper, compare_with_paper
    from .params import ParamsError
    from .projection import project

    if args.combine:
        try:
            documents = _read_paper_runs(args.combine)
        except ParamsError as error:
            return usage_error("simulate paper", str(error))
        try:
            document = combine_paper(documents)
        except ValueError as error:  # a point twice
            return usage_error("simulate paper", f"--combine: {error}")
        for experiment in document["experiments"].values():
            print(f"\n{experiment['title']}\n{points_table(experiment['points'])}")
            for line in experiment["paper"]["lines"]:
                print("  " + line)
        _write_paper(document, args)
        return 0
    try:
        params, _, path = _load_params(args)
    except ParamsError as error:
        return usage_error("simulate paper", str(error))
    started = time.monotonic()
    results: dict[str, Any] = {}
    chosen = [e for e in paper.experiments() if e.name in args.experiments]
    for experiment in chosen:
        print(f"\n{experiment.title}", flush=True)
        sizes = [(r, v) for r, v in zip(experiment.ranks, experiment.victims, strict=True) if r in (args.ranks or [r])]
        if not sizes:
            continue
        try:
            points = project(
                params,
                sizes,
                args.modes,
                experiment.bytes_per_rank,
                ranks_per_node=paper.RANKS_PER_NODE,
                datagram_size=paper.DATAGRAM_SIZE,
                credits_per_pair=paper.CREDITS_PER_PAIR,
                credit_threshold=paper.CREDIT_THRESHOLD,
                partners=experiment.partners,
                seed=args.seed,
                max_messages=args.max_messages,
                point_time_limit_s=args.point_time_limit,
                method=args.method,
                label=f" {experiment.name}",
                progress=_progress,
            )
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


def _plot_paper(results: dict[str, Any], path: str) -> str | None:
    if figure_missing():
        print(figure_missing())
        return None
    from . import paper
    from .paper_comparison import finished_at_bytes_asked

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
            mine = [p for p in points if p["mode"] == mode and finished_at_bytes_asked(p)]
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
    return save_figure(figure, path, dpi=90)


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
