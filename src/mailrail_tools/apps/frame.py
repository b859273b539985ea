"""What both applications share: their flags, trials interleaved across modes, verification, JSON.

An application provides an :class:`App`: how to run one trial on a MailRail and
one with ``Alltoallv``, and how to check a result.  :func:`run_app` keeps one
rail per mode alive, interleaves the trials across modes (the machine's drift
then hits every mode alike), verifies every trial, prints a table, writes
``--json`` and returns 1 if any result was wrong.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from typing import Any, Protocol

from mailrail import Rail
from mailrail.config import FLOW_CONTROL_MODES

from ..flags import SEED_MAX, add_rail_arguments, checked_rail_options, choice_list, int_in, one_line_errors
from ..memory import peak_rss_bytes, reset_peak_rss
from ..output import format_table, write_json

#: The bulk-synchronous peers an application may run beside MailRail.
BASELINES = ("alltoallv",)


def add_app_arguments(parser: argparse.ArgumentParser, rail_defaults: dict[str, Any]) -> None:
    """The flags every app takes; *rail_defaults*: the app's own MailRail defaults, as its help states them."""
    one_line_errors(parser)
    parser.add_argument(
        "--modes",
        type=choice_list(FLOW_CONTROL_MODES),
        default=None,
        help="flow-control modes to run, comma-separated: none,rank,node (default: the configured one)",
    )
    parser.add_argument(
        "--baseline", choices=BASELINES, default=None, help="also run the bulk-synchronous peer in the same run"
    )
    parser.add_argument(
        "--trials", type=int_in(1, 100_000), default=3, help="timed trials per mode, after one warm-up (default 3)"
    )
    parser.add_argument("--seed", type=int_in(0, SEED_MAX), default=1, help="seed of every random choice (default 1)")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    add_rail_arguments(parser, defaults=rail_defaults)


class App(Protocol):
    """One application: its name, workload, and how to run and check a trial."""

    name: str
    #: The throughput figure of a trial: ``(key, work units per trial)``, e.g. ("edges_per_s", edges).
    rate: tuple[str, float]

    def workload(self) -> dict[str, Any]:
        """Collective: what was computed on what, the JSON document's ``workload``."""

    def run_mailrail(self, rail: Rail) -> dict[str, Any]:
        """One trial on *rail*; returns its figures (besides the runtime) and leaves the result to check."""

    def run_alltoallv(self) -> dict[str, Any]:
        """One trial of the bulk-synchronous peer."""

    def verify(self) -> bool:
        """Collective: the last trial's result is exactly right on every rank."""

    def summary(self) -> dict[str, Any]:
        """Collective: figures of the whole run for the JSON document's top level (e.g. ``components``)."""


def chosen_modes(args: argparse.Namespace, configured: str) -> list[str]:
    """``--modes`` (checked by argparse), or the *configured* mode."""
    return list(args.modes) if args.modes else [configured]


def app_rail_options(
    name: str, args: argparse.Namespace, rail_defaults: dict[str, Any] | None = None
) -> tuple[list[str], dict[str, Any]] | None:
    """The modes and rail options of ``app NAME``, checked before any MPI work (every rank alike):
    None after a one-line usage error."""
    checked = checked_rail_options(f"app {name}", args, rail_defaults)
    if checked is None:
        return None
    options, config = checked
    options.pop("flow_control", None)
    return chosen_modes(args, config.flow_control), options


def run_app(comm: Any, app: App, args: argparse.Namespace, modes: list[str], options: dict[str, Any]) -> int:
    """Trials of *app* in each of *modes* (and its peer) on rails of *options* (:func:`app_rail_options`),
    verified; table, JSON; exit status 1 on a wrong result."""
    from mailrail._mpi import MPI
    from mailrail.rail import MailRail  # MailRail starts MPI: imported when the run begins, not to parse flags

    rails = {mode: MailRail(comm, **dict(options, flow_control=mode)) for mode in modes}
    runners = {mode: (lambda rail=rail: app.run_mailrail(rail)) for mode, rail in rails.items()}
    if args.baseline:
        runners[args.baseline] = app.run_alltoallv
    trials: dict[str, list[dict]] = {mode: [] for mode in runners}
    verified = True
    rate_key, units = app.rate
    for trial in range(args.trials + 1):  # trial 0 warms up, is verified, and is not reported
        for mode, runner in runners.items():
            peak_reset = reset_peak_rss()
            comm.Barrier()
            start = time.perf_counter()
            figures = runner()
            runtime = comm.allreduce(time.perf_counter() - start, op=MPI.MAX)
            correct = app.verify()
            verified = verified and correct
            peaks = comm.gather(peak_rss_bytes())
            if trial:
                trials[mode].append(
                    dict(
                        figures,
                        runtime_s=runtime,
                        **{rate_key: units / runtime},
                        correct=correct,
                        peak_rss_bytes=max(peaks) if peaks else None,
                        peak_rss_since="trial" if peak_reset else "process start",
                        peak_rss_bytes_per_rank=peaks,
                    )
                )
    stats = {mode: comm.gather(rail.stats()) for mode, rail in rails.items()}
    for rail in rails.values():
        rail.finalize()
    summary, workload = app.summary(), app.workload()  # collective
    if comm.Get_rank() == 0:
        runs = []
        for mode, mode_trials in trials.items():
            run = {
                "mode": mode,
                "trials": mode_trials,
                "runtime_s_median": statistics.median(t["runtime_s"] for t in mode_trials),
                rate_key + "_median": statistics.median(t[rate_key] for t in mode_trials),
            }
            if mode in stats:
                run["credit_messages"] = sum(s["credit_messages_sent"] for s in stats[mode])
                run["deferred_sends"] = sum(s["deferred_sends"] for s in stats[mode])
            runs.append(run)
        document = {
            "app": app.name,
            "ranks": comm.Get_size(),
            "verified": verified,
            **summary,
            "workload": workload,
            "runs": runs,
            "config": dict(
                options,
                modes=modes,
                baseline=args.baseline,
                seed=args.seed,
                trials=args.trials,
                trace=os.environ.get("MAILRAIL_TRACE"),
            ),
        }
        write_json(args.json, document)
        print_summary(document, rate_key)
    return 0 if verified else 1


def print_summary(document: dict, rate_key: str) -> None:
    rows = []
    for run in document["runs"]:
        first = run["trials"][0]
        rows.append(
            (
                run["mode"],
                run["runtime_s_median"],
                run[rate_key + "_median"] / 1e6,
                first.get("rounds", ""),
                first.get("messages", ""),
                first.get("bytes", 0) / 1e6,
                max(t["peak_rss_bytes"] for t in run["trials"]) / 2**20,
                all(t["correct"] for t in run["trials"]),
            )
        )
    print(f"app {document['app']}: {document['ranks']} ranks, {document['workload']}")
    print(
        format_table(
            [
                "mode",
                "runtime s",
                f"M {rate_key.replace('_per_s', '')}/s",
                "rounds",
                "messages",
                "MB moved",
                "peak MiB (max rank)",
                "correct",
            ],
            rows,
        )
    )
    peer = next((run for run in document["runs"] if run["mode"] in BASELINES), None)
    if peer:
        for run in document["runs"]:
            if run is not peer:
                print(f"{run['mode']} / {peer['mode']}: {peer['runtime_s_median'] / run['runtime_s_median']:.2f}x")
    print("verified" if document["verified"] else "WRONG RESULT")
