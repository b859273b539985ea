"""``mailrail sweep``: the adversarial benchmark's two studies, on the ranks this machine allows.

(a) weak scaling: the data per sending rank is fixed while the ranks double
from ``--min-ranks`` to ``--max-ranks``, with ``--weak-victims`` victims, so
the incast ratio grows with the job; (b) victim sweep: ``--victim-ranks``
ranks, victims 1, 2, 4, ... up to every rank, so the incast ratio shrinks.
Every point runs each mode as its own mpiexec job bounded by
``--time-limit``; a run that exceeds it (or fails) is kept in the results as
such.  Writes ``sweep.json`` and ``sweep.png`` (runtime and goodput vs incast
ratio, one line per mode) to ``--out``.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from .adversarial import incast_ratio
from .common import add_rail_arguments, format_table, rail_options, write_json
from .compare import DEFAULT_RECV_POOL_SLOTS, MODES
from .jobs import add_workload_arguments, adversarial_args, run_adversarial, status_text

STUDIES = ("weak", "victims")
STUDY_TITLES = {"weak": "weak scaling", "victims": "victim sweep"}
DEFAULT_RANKS_PER_NODE = 4
DEFAULT_MESSAGES = 2000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--studies", default=",".join(STUDIES),
                        help="weak (weak scaling), victims (victim sweep) or both (default: %(default)s)")
    parser.add_argument("--min-ranks", type=int, default=2,
                        help="weak scaling: first rank count (default: %(default)s)")
    parser.add_argument("--max-ranks", type=int, default=16,
                        help="weak scaling: ranks double up to this (default: %(default)s)")
    parser.add_argument("--weak-victims", type=int, default=1,
                        help="weak scaling: victims at every size (default: %(default)s)")
    parser.add_argument("--victim-ranks", type=int, default=None,
                        help="victim sweep: ranks (default: --max-ranks); victims go 1, 2, 4, ... up to all of them")
    add_workload_arguments(parser, messages=DEFAULT_MESSAGES, trials=2, per="run")
    parser.add_argument("--modes", default=",".join(MODES), help="modes, comma-separated (default: %(default)s)")
    parser.add_argument("--time-limit", type=float, default=60.0,
                        help="seconds each run may take, start-up included (default: %(default)s)")
    parser.add_argument("--out", default=os.path.join("mailrail-results", "sweep"),
                        help="directory for sweep.json, sweep.png and the runs' files (default: %(default)s)")
    add_rail_arguments(parser, skip=("flow_control",))


def study_points(study: str, args: argparse.Namespace) -> list[tuple[int, int]]:
    """The (ranks, victims) of one study, in run order."""
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
    studies = [s.strip() for s in args.studies.split(",") if s.strip()]
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not studies or any(s not in STUDIES for s in studies) or not modes or any(m not in MODES for m in modes):
        print(f"mailrail sweep: --studies takes {', '.join(STUDIES)}, --modes {', '.join(MODES)}")
        return 2
    if args.min_ranks < 2 or args.max_ranks < args.min_ranks:
        print(f"mailrail sweep: need 2 <= --min-ranks <= --max-ranks (got {args.min_ranks}, {args.max_ranks})")
        return 2
    options = rail_options(args)
    options.setdefault("recv_pool_slots", DEFAULT_RECV_POOL_SLOTS)
    out = os.path.abspath(args.out)
    os.makedirs(out, exist_ok=True)
    plan = [(study, ranks, victims, mode) for study in studies for ranks, victims in study_points(study, args)
            for mode in modes]
    print(f"mailrail sweep: {len(plan)} runs ({', '.join(STUDY_TITLES[s] for s in studies)}; modes "
          f"{', '.join(modes)}), each limited to {args.time_limit:g} s; results in {out}", flush=True)
    results: dict[str, list[dict[str, Any]]] = {study: [] for study in studies}
    started = time.monotonic()
    for index, (study, ranks, victims, mode) in enumerate(plan, 1):
        name = f"{study}-r{ranks}-v{victims}-{mode}"
        result = run_adversarial(ranks, benchmark_args(args, options, ranks, victims, mode),
                                 os.path.join(out, "runs", name + ".json"), time_limit=args.time_limit)
        point = sweep_point(study, ranks, victims, mode, result, args.time_limit)
        results[study].append(point)
        measured = (f"{point['runtime_s']:.3f} s/trial, {point['goodput_bps'] / 1e6:,.0f} Mb/s"
                    if point["status"] == "ok" else status_text(result))
        print(f"[{index}/{len(plan)}] {STUDY_TITLES[study]}: {ranks} ranks, {victims} victim(s), {mode}: "
              f"{measured} ({result['wall_s']:.1f} s)", flush=True)
        if point["status"] == "failed":
            print(result.get("output_tail", "")[-800:], flush=True)
    wall = time.monotonic() - started

    document = {"benchmark": "sweep", "workload": {
        "messages_per_rank": _messages(args) if args.bytes_per_rank is None else None,
        "bytes_per_rank": args.bytes_per_rank, "trials": args.trials, "seed": args.seed, "modes": modes,
        "time_limit_s": args.time_limit, "rail_options": options}, "studies": results, "wall_s": wall}
    write_json(os.path.join(out, "sweep.json"), document)
    for study, points in results.items():
        print(f"\n{STUDY_TITLES[study]}")
        print(format_table(["ranks", "victims", "incast", "mode", "status", "runtime s", "goodput Mb/s"],
                           [(p["ranks"], p["victims"], p["incast_ratio"], p["mode"], status_text(p["result"]),
                             p.get("runtime_s", "-"), p["goodput_bps"] / 1e6 if p["status"] == "ok" else "-")
                            for p in points]))
    figure = _plot(results, os.path.join(out, "sweep.png"))
    print(f"\n{len(plan)} runs in {wall:.0f} s; wrote {os.path.join(out, 'sweep.json')}"
          + (f" and {figure}" if figure else ""))
    return 0 if all(p["status"] == "ok" for points in results.values() for p in points) else 1


def benchmark_args(args: argparse.Namespace, options: dict[str, Any], ranks: int, victims: int,
                   mode: str) -> list[str]:
    knobs = dict(options, flow_control=mode)
    # Virtual nodes of 4 ranks by default; a job smaller than that is one node.
    knobs["ranks_per_node"] = min(int(options.get("ranks_per_node") or DEFAULT_RANKS_PER_NODE), ranks)
    return adversarial_args(victims=victims, trials=args.trials, seed=args.seed, messages=_messages(args),
                            bytes_per_rank=args.bytes_per_rank, knobs=knobs)


def _messages(args: argparse.Namespace) -> int:
    return DEFAULT_MESSAGES if args.messages is None else args.messages


def sweep_point(study: str, ranks: int, victims: int, mode: str, result: dict[str, Any],
                time_limit: float) -> dict[str, Any]:
    """One point of a study: its coordinates, outcome and (when it ran) mean runtime and goodput."""
    point: dict[str, Any] = {"study": study, "ranks": ranks, "victims": victims, "mode": mode,
                             "incast_ratio": incast_ratio(ranks, victims), "status": result["status"],
                             "time_limit_s": time_limit, "wall_s": result["wall_s"]}
    if result["status"] == "ok":
        point["runtime_s"] = result["summary"]["runtime_s_mean"]
        point["goodput_bps"] = result["summary"]["goodput_bps_mean"]
    point["result"] = result
    return point


def _plot(results: dict[str, list[dict[str, Any]]], path: str) -> str | None:
    from .plots import missing, plot_sweep
    reason = missing()
    if reason:
        print(reason)
        return None
    studies = {f"{STUDY_TITLES[s]}": points for s, points in results.items() if points}
    return plot_sweep(studies, path, "adversarial incast sweeps (runs past the time limit: crosses)")
