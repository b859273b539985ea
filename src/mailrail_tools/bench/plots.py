"""Figures of ``mailrail compare`` and ``mailrail sweep`` (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from mailrail.flow.modes import MODES

from ..figures import pyplot, save
from .metrics import trial_samples

MODE_COLORS = {name: mode.color for name, mode in MODES.items()}
MODE_LABELS = {name: mode.label for name, mode in MODES.items()}
_MIB = 2**20


# -- metrics time series -------------------------------------------------------


def summed_series(samples: Mapping[int, list[dict]], ranks: Sequence[int], field: str, grid: np.ndarray) -> np.ndarray:
    """Sum over *ranks* of a cumulative *field*, linear between a rank's samples (from 0 at t=0)."""
    total = np.zeros_like(grid)
    for rank in ranks:
        rows = samples.get(rank, [])
        if rows:
            times = [0.0] + [r["elapsed_s"] for r in rows]
            values = [0.0] + [float(r[field]) for r in rows]
            total += np.interp(grid, times, values)  # holds the final count after the last sample
    return total


def binned_max(
    samples: Mapping[int, list[dict]], ranks: Sequence[int], field: str, width: float
) -> tuple[np.ndarray, np.ndarray]:
    """Max over *ranks* of a per-interval *field* (a gap), in time bins of *width* seconds."""
    times, values = [], []
    for rank in ranks:
        for row in samples.get(rank, []):
            times.append(row["elapsed_s"])
            values.append(row[field])
    if not times:
        return np.zeros(0), np.zeros(0)
    times = np.array(times)
    bins = np.floor(times / width).astype(int)
    peak = np.zeros(bins.max() + 1)
    np.maximum.at(peak, bins, np.array(values))
    # Each bin is drawn at its end, the last one at the last sample (a short trial ends mid-bin).
    return np.minimum((np.arange(len(peak)) + 1) * width, times.max()), peak


# -- compare ---------------------------------------------------------------------


def plot_compare(
    results: Mapping[str, dict[str, Any]],
    metrics_dirs: Mapping[str, str],
    path: str,
    title: str,
    node_peaks: Mapping[str, int | None] | None = None,
    node_cap: int | None = None,
) -> str:
    """Goodput, memory and credit messages per mode, and the metrics of each mode's last trial.

    On a virtual cluster *node_peaks* (the victim node's memory high-water mark per mode) and
    *node_cap* (its memory cap) add the node's memory to the memory panel, for modes that the
    cap killed too.
    """
    plt = pyplot()
    fig, axes = plt.subplots(2, 3, figsize=(16, 9.5))
    fig.suptitle(title, fontsize=12)
    modes = list(results)
    _summary_bars(axes[0], results, node_peaks, node_cap)
    series_axes = axes[1]
    series_axes[0].set_title("victims: messages received (% of expected)")
    series_axes[1].set_title("senders: messages sent (% of planned)")
    series_axes[2].set_title("longest pause between receive() calls\n(victims, per sample interval)")
    plotted = False
    for mode in modes:
        result = results[mode]
        directory = metrics_dirs.get(mode)
        if result.get("status") != "ok" or not directory or not os.path.isdir(directory):
            continue
        trial = len(result["trials"]) - 1
        samples = trial_samples(directory, trial)
        victims = result["victim_ranks"]
        senders = [d["rank"] for d in result["ranks_detail"] if d["messages_sent"] > 0]
        end = max(r[-1]["elapsed_s"] for r in samples.values())
        grid = np.linspace(0.0, end, 400)
        color, label = MODE_COLORS.get(mode), MODE_LABELS.get(mode, mode)
        expected = result["trials"][trial]["messages_sent"]
        received = summed_series(samples, victims, "messages_received", grid)
        sent = summed_series(samples, senders, "messages_sent", grid)
        series_axes[0].plot(grid, 100 * received / max(expected, 1), color=color, label=label)
        series_axes[1].plot(grid, 100 * sent / max(expected, 1), color=color, label=label)
        interval = result.get("metrics_interval_s") or 0.1
        times, gaps = binned_max(samples, victims, "max_recv_gap_s", interval)
        series_axes[2].plot(times, 1e3 * gaps, color=color, label=label, marker=".", linewidth=1)
        plotted = True
    for axis in series_axes:
        axis.set_xlabel("seconds into the trial (last trial of each mode)")
        axis.grid(alpha=0.3)
        if plotted:
            axis.legend(fontsize=8)
        else:
            axis.text(0.5, 0.5, "no metrics", ha="center", va="center", transform=axis.transAxes)
    series_axes[0].set_ylabel("%")
    series_axes[1].set_ylabel("%")
    series_axes[2].set_ylabel("ms")
    fig.tight_layout()
    return save(fig, path, dpi=100)


def plot_compare_summary(
    results: Mapping[str, dict[str, Any]],
    path: str,
    title: str,
    node_peaks: Mapping[str, int | None] | None = None,
    node_cap: int | None = None,
) -> str:
    """The top row of :func:`plot_compare` alone (goodput, memory, credit messages), sized to be read where a
    page shows it in a column (the README, the documentation's front page) at about 800 pixels."""
    plt = pyplot()
    fig, axes = plt.subplots(1, 3, figsize=(12, 4.9))
    fig.suptitle(title, fontsize=12)
    _summary_bars(axes, results, node_peaks, node_cap)
    fig.tight_layout(w_pad=2.5)
    return save(fig, path, dpi=68)


def _summary_bars(
    axes: Sequence[Any],
    results: Mapping[str, dict[str, Any]],
    node_peaks: Mapping[str, int | None] | None,
    node_cap: int | None,
) -> None:
    _bars_goodput(axes[0], results)
    if node_peaks is None:
        _bars_memory(axes[1], results)
    else:
        _bars_node_memory(axes[1], results, node_peaks, node_cap)
    _bars_credit_messages(axes[2], results)


def failure_text(result: dict) -> str:
    """What a run that did not finish shows in a figure: timed out, failed, or out of memory (and when)."""
    text = {"timeout": "timed out", "out_of_memory": "out of memory"}.get(result.get("status"), "failed")
    if result.get("out_of_memory_after_s") is not None:
        text += f" at {result['out_of_memory_after_s']:.1f} s"
    return text


def _failed_label(axis, x: float, result: dict) -> None:
    text = failure_text(result)
    axis.text(x, 0.02, text, ha="center", va="bottom", rotation=90, color="black", transform=axis.get_xaxis_transform())


def _bars_goodput(axis, results: Mapping[str, dict]) -> None:
    axis.set_title("goodput (bars: median, dots: trials)")
    for x, (mode, result) in enumerate(results.items()):
        color = MODE_COLORS.get(mode)
        if result.get("status") != "ok":
            _failed_label(axis, x, result)
            continue
        goodputs = [t["goodput_bps"] / 1e6 for t in result["trials"]]
        axis.bar(x, np.median(goodputs), color=color, alpha=0.7)
        axis.plot([x] * len(goodputs), goodputs, "o", color="black", markersize=4)
    _mode_axis(axis, results)
    axis.set_ylabel("Mb/s")


def _bars_memory(axis, results: Mapping[str, dict]) -> None:
    axis.set_title("memory growth during the trials")
    width = 0.38
    labeled = False
    for x, (mode, result) in enumerate(results.items()):
        if result.get("status") != "ok":
            _failed_label(axis, x, result)
            continue
        summary = result["summary"]
        color = MODE_COLORS.get(mode)
        victim = summary["victim_rss_growth_bytes"] / _MIB
        axis.bar(x - width / 2, victim, width, color=color, alpha=0.9, label=None if labeled else "victim")
        axis.bar(
            x + width / 2,
            summary["sender_rss_growth_bytes"] / _MIB,
            width,
            color=color,
            alpha=0.4,
            hatch="//",
            label=None if labeled else "sender (max)",
        )
        axis.annotate(
            f"peak {summary['peak_victim_rss_bytes'] / _MIB:.0f} MiB",
            (x - width / 2, victim),
            xytext=(0, 2),
            textcoords="offset points",
            ha="center",
            va="bottom",
            fontsize=8,
        )
        labeled = True
    _mode_axis(axis, results)
    axis.set_ylabel("MiB (peak RSS minus RSS before the trials)")
    if labeled:
        axis.set_ylim(0, axis.get_ylim()[1] * 1.3)  # headroom for the labels and the legend
        axis.legend(fontsize=8, loc="upper right")


def _bars_node_memory(axis, results: Mapping[str, dict], peaks: Mapping[str, int | None], cap: int | None) -> None:
    """The victim node's memory peak (its cgroup) per mode against the cap (left axis), and the victim rank's
    RSS growth on an axis of its own (right): a few MiB beside a node's hundreds would not show."""
    axis.set_title("victim's node: peak, victim's growth")
    growth_axis = axis.twinx()
    width = 0.38
    handles = []
    for x, (mode, result) in enumerate(results.items()):
        color = MODE_COLORS.get(mode)
        peak = peaks.get(mode)
        if peak is not None:
            bars = axis.bar(x - width / 2, peak / _MIB, width, color=color, alpha=0.9, label="node peak (left)")
            handles[:1] = handles[:1] or [bars]
            if result.get("status") == "out_of_memory":  # inside the bar: above it would run into the cap's tick
                axis.text(
                    x - width / 2, peak / _MIB / 2, f"killed: {failure_text(result)}", rotation=90,
                    ha="center", va="center", fontsize=8, color="white",
                )  # fmt: skip
            else:
                axis.annotate(
                    f"{peak / _MIB:.0f}", (x - width / 2, peak / _MIB), xytext=(0, 2), textcoords="offset points",
                    ha="center", va="bottom", fontsize=8,
                )  # fmt: skip
        if result.get("status") == "ok":
            growth = result["summary"]["victim_rss_growth_bytes"] / _MIB
            bars = growth_axis.bar(
                x + width / 2, growth, width, color=color, alpha=0.4, hatch="//", label="victim RSS growth (right)"
            )
            handles[1:] = handles[1:] or [bars]
            growth_axis.annotate(
                f"{growth:.1f}", (x + width / 2, growth), xytext=(0, 2), textcoords="offset points",
                ha="center", va="bottom", fontsize=8,
            )  # fmt: skip
        elif peak is None:
            _failed_label(axis, x, result)
    if cap:
        handles.append(
            axis.axhline(cap / _MIB, color="black", linestyle="--", linewidth=1, label=f"node cap {cap / _MIB:.0f} MiB")
        )
    _mode_axis(axis, results)
    axis.set_ylabel("node peak, MiB")
    axis.set_ylim(0, axis.get_ylim()[1] * 1.25)  # room for the legend above the cap
    growth_axis.set_ylabel("victim RSS growth, MiB")
    growth_axis.set_ylim(0, max(growth_axis.get_ylim()[1], 1.0) * 1.6)
    axis.legend(handles=handles, fontsize=8, loc="upper right")


def _bars_credit_messages(axis, results: Mapping[str, dict]) -> None:
    axis.set_title("credit messages (all trials)")
    for x, (mode, result) in enumerate(results.items()):
        if result.get("status") != "ok":
            _failed_label(axis, x, result)
            continue
        count = result["summary"]["credit_messages"]
        axis.bar(x, count, color=MODE_COLORS.get(mode), alpha=0.7)
        axis.text(x, count, f"{count:,}", ha="center", va="bottom", fontsize=9)
    _mode_axis(axis, results)
    axis.set_ylabel("messages")


def _mode_axis(axis, results: Mapping[str, dict]) -> None:
    axis.set_xticks(range(len(results)))
    # short, on two lines ("rank" over "credits"): four labels side by side ran into each other on one
    axis.set_xticklabels([MODE_LABELS.get(m, m).split(" (")[0].replace(" ", "\n", 1) for m in results], fontsize=9)
    axis.set_xlim(-0.6, len(results) - 0.4)
    axis.grid(axis="y", alpha=0.3)


# -- sweep -----------------------------------------------------------------------


def plot_sweep(studies: Mapping[str, list[dict[str, Any]]], path: str, title: str) -> str:
    """Runtime and goodput vs incast ratio, one line per mode and one row per study.

    Runs that did not finish are results too, drawn as labelled crosses: at the bottom of
    the goodput plot, and in the runtime plot at their time limit (timed out) or above the
    slowest finished run (failed, out of memory: their runtime is unknown).
    """
    plt = pyplot()
    fig, axes = plt.subplots(len(studies), 2, figsize=(13, 4.5 * len(studies)), squeeze=False)
    fig.suptitle(title, fontsize=12)
    for row, (study, points) in enumerate(studies.items()):
        runtime_axis, goodput_axis = axes[row]
        modes = list(dict.fromkeys(p["mode"] for p in points))
        finished = [p["runtime_s"] for p in points if p["status"] == "ok"]
        above = 1.15 * max(finished) if finished else 1.0
        for mode in modes:
            color, label = MODE_COLORS.get(mode), MODE_LABELS.get(mode, mode)
            ok = sorted(
                (p for p in points if p["mode"] == mode and p["status"] == "ok"), key=lambda p: p["incast_ratio"]
            )
            bad = [p for p in points if p["mode"] == mode and p["status"] != "ok"]
            runtime_axis.plot(
                [p["incast_ratio"] for p in ok], [p["runtime_s"] for p in ok], "o-", color=color, label=label
            )
            goodput_axis.plot(
                [p["incast_ratio"] for p in ok], [p["goodput_bps"] / 1e6 for p in ok], "o-", color=color, label=label
            )
            for p in bad:
                text = failure_text(p)
                y = p["time_limit_s"] if p["status"] == "timeout" else above
                runtime_axis.plot([p["incast_ratio"]], [y], "x", color=color, markersize=12, mew=2)
                runtime_axis.annotate(
                    f"{mode}: {text}",
                    (p["incast_ratio"], y),
                    xytext=(-6, 6),
                    textcoords="offset points",
                    ha="right",
                    fontsize=8,
                    color=color,
                )
                goodput_axis.plot([p["incast_ratio"]], [0], "x", color=color, markersize=12, mew=2, clip_on=False)
        if any(p["status"] not in ("ok", "timeout") for p in points):
            runtime_axis.set_ylim(top=max(runtime_axis.get_ylim()[1], above * 1.12))  # room for the labels
        ratios = sorted({p["incast_ratio"] for p in points})
        for axis, ylabel in ((runtime_axis, "runtime per trial (s)"), (goodput_axis, "goodput (Mb/s)")):
            axis.set_xscale("log", base=2)
            axis.set_xticks(ratios, [f"{r:g}:1" for r in ratios])
            axis.minorticks_off()
            axis.set_xlabel("incast ratio (sending ranks per victim)")
            axis.set_ylabel(ylabel)
            axis.grid(alpha=0.3, which="both")
            axis.legend(fontsize=8)
        runtime_axis.set_title(f"{study}: runtime")
        goodput_axis.set_title(f"{study}: goodput")
        goodput_axis.set_ylim(bottom=0)
        _label_points(runtime_axis, points)
    fig.tight_layout()
    return save(fig, path, dpi=100)


def _label_points(axis, points: list[dict]) -> None:
    """Annotate each x position with its ranks/victims once (what the incast ratio stands for)."""
    seen = {}
    for p in points:
        seen.setdefault(p["incast_ratio"], f"{p['ranks']}r/{p['victims']}v")
    for ratio, text in seen.items():
        axis.annotate(
            text,
            (ratio, 0),
            xycoords=("data", "axes fraction"),
            xytext=(0, 3),
            textcoords="offset points",
            ha="center",
            fontsize=7,
            color="gray",
        )
