"""``mailrail trace stats TRACE_DIR``: what a trace holds, and a heatmap of who sends whom how much.

One streaming pass per rank file (no MPI): ranks, phases, messages, bytes,
message sizes, and the rank-to-rank byte matrix summarized as imbalance
figures, zero pairs and top receivers; the heatmap is drawn like the paper's
communication-matrix figures (sender rows, receiver columns, log colour scale).
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from mailrail.errors import TraceFormatError
from mailrail.trace.directory import TraceDir
from mailrail.trace.summary import phase_count, summarize

from ..figures import pyplot, save
from ..flags import MPI_INT_MAX, int_in, missing_module, one_line_errors, usage_error
from ..output import format_table, write_json


@dataclass
class TraceStats:
    path: str
    format: str
    ranks: int
    phase_bytes: np.ndarray  # [phase] bytes sent by all ranks
    phase_messages: np.ndarray
    byte_matrix: np.ndarray  # [sender, receiver]
    message_matrix: np.ndarray
    min_size: int
    max_size: int

    @property
    def phases(self) -> int:
        return len(self.phase_bytes)

    @property
    def messages(self) -> int:
        return int(self.message_matrix.sum())

    @property
    def bytes(self) -> int:
        return int(self.byte_matrix.sum())


def compute(trace: TraceDir) -> TraceStats:
    """Read every rank file once; raises :class:`TraceFormatError` on a corrupt or inconsistent trace."""
    ranks = trace.ranks
    byte_matrix = np.zeros((ranks, ranks), np.int64)
    message_matrix = np.zeros((ranks, ranks), np.int64)
    shapes = []
    phase_bytes: np.ndarray | None = None
    phase_messages: np.ndarray | None = None
    sizes = []
    for rank in range(ranks):
        summary = summarize(trace.events(rank), rank, ranks)
        byte_matrix[rank] = summary.bytes.sum(axis=0)
        message_matrix[rank] = summary.messages.sum(axis=0)
        shapes.append((summary.barriers, summary.trailing_messages))
        per_phase_bytes, per_phase_messages = summary.bytes.sum(axis=1), summary.messages.sum(axis=1)
        if phase_bytes is not None and len(per_phase_bytes) != len(phase_bytes):
            phase_count(trace.path, shapes)  # raises: the ranks disagree on the barriers
        phase_bytes = per_phase_bytes if phase_bytes is None else phase_bytes + per_phase_bytes
        phase_messages = per_phase_messages if phase_messages is None else phase_messages + per_phase_messages
        if summary.messages.any():
            sizes.append((summary.min_size, summary.max_size))
    phases = phase_count(trace.path, shapes)
    return TraceStats(
        trace.path,
        trace.format,
        ranks,
        phase_bytes[:phases],
        phase_messages[:phases],
        byte_matrix,
        message_matrix,
        min((s[0] for s in sizes), default=0),
        max((s[1] for s in sizes), default=0),
    )


def matrix_summary(matrix: np.ndarray, top: int = 5) -> dict[str, Any]:
    """Imbalance of a [sender, receiver] byte matrix: max/mean per receiver, sender and pair."""
    received, sent = matrix.sum(axis=0), matrix.sum(axis=1)
    total = int(matrix.sum())

    def imbalance(values: np.ndarray) -> float:
        mean = float(values.mean()) if values.size else 0.0
        return float(values.max()) / mean if mean > 0 else 0.0

    order = np.argsort(-received, kind="stable")[:top]
    return {
        "receive_imbalance": imbalance(received),
        "send_imbalance": imbalance(sent),
        "pair_imbalance": imbalance(matrix),
        "zero_pairs": int((matrix == 0).sum()),
        "pairs": int(matrix.size),
        "self_bytes": int(np.trace(matrix)),
        "top_receivers": [
            {"rank": int(r), "bytes": int(received[r]), "share": float(received[r]) / total if total else 0.0}
            for r in order
        ],
    }


def heatmap(stats: TraceStats, path: str) -> None:
    """PNG of the byte matrix: sender rows, receiver columns, log colour scale, zero pairs blank."""
    from matplotlib.colors import LogNorm, Normalize  # matplotlib: optional, imported only to draw

    plt = pyplot()

    matrix = np.ma.masked_equal(stats.byte_matrix, 0)
    figure, axes = plt.subplots(figsize=(6.4, 5.4), dpi=110)
    cmap = plt.get_cmap("viridis").with_extremes(bad="white")  # zero pairs (masked) stay blank
    if matrix.count():
        low, high = int(matrix.min()), int(matrix.max())
        # A log scale shows skew over decades; on a near-uniform matrix it would magnify noise.
        logarithmic = high > 10 * low
        norm = LogNorm(vmin=low, vmax=high) if logarithmic else Normalize(vmin=0, vmax=high)
        image = axes.imshow(matrix, cmap=cmap, norm=norm, interpolation="nearest", aspect="auto")
        figure.colorbar(image, ax=axes, label="bytes sent" + (" (log scale)" if logarithmic else ""))
        if stats.ranks <= 8:  # small matrices: print the numbers too
            for (sender, receiver), value in np.ndenumerate(stats.byte_matrix):
                axes.text(
                    receiver,
                    sender,
                    f"{value:,}",
                    ha="center",
                    va="center",
                    fontsize=8,
                    color="black" if value and norm(value) > 0.6 else "white" if value else "grey",
                )
    else:
        axes.imshow(np.zeros_like(stats.byte_matrix), cmap="Greys", vmin=0, vmax=1)
    axes.set_xlabel("receiver rank")
    axes.set_ylabel("sender rank")
    if stats.ranks <= 16:
        axes.set_xticks(range(stats.ranks))
        axes.set_yticks(range(stats.ranks))
    name = os.path.basename(os.path.normpath(stats.path))
    axes.set_title(f"{name}: {stats.ranks} ranks, {stats.messages:,} messages, {stats.bytes:,} bytes", fontsize=9)
    figure.tight_layout()
    save(figure, path)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    one_line_errors(parser)
    parser.add_argument("trace", metavar="TRACE_DIR", help="directory of trace_<rank>.bin or .txt files (.gz too)")
    parser.add_argument("--heatmap", metavar="PNG", help="heatmap path (default: ./<trace name>-heatmap.png)")
    parser.add_argument("--no-heatmap", action="store_true", help="skip the heatmap")
    parser.add_argument(
        "--top", type=int_in(0, MPI_INT_MAX), default=5, help="top receivers listed (default: %(default)s)"
    )
    parser.add_argument("--json", metavar="PATH", help="write the statistics (with the matrices) as JSON")


def run(args: argparse.Namespace) -> int:
    if args.heatmap and args.no_heatmap:
        return usage_error("trace stats", "--heatmap and --no-heatmap: choose one")
    # Before the trace is read (it may be large): the heatmap is drawn by default.
    problem = (
        None if args.no_heatmap else missing_module("matplotlib", "trace stats", "plot", purpose=" for the heatmap")
    )
    if problem:
        return usage_error("trace stats", f"{problem} (or --no-heatmap)")
    try:
        stats = compute(TraceDir.open(args.trace))
    except (TraceFormatError, OSError) as error:
        print(f"mailrail trace stats: {error}", file=sys.stderr)
        return 2
    summary = matrix_summary(stats.byte_matrix, args.top)
    heatmap_path = None
    if not args.no_heatmap:
        name = os.path.basename(os.path.normpath(args.trace)) or "trace"
        heatmap_path = args.heatmap or f"{name}-heatmap.png"
        heatmap(stats, heatmap_path)
    busy = int((stats.phase_messages > 0).sum())
    mean_size = stats.bytes / stats.messages if stats.messages else 0.0
    print(f"trace      {stats.path} ({stats.format}, {stats.ranks} ranks)")
    print(f"phases     {stats.phases} ({busy} with messages)")
    print(
        f"messages   {stats.messages:,}  bytes {stats.bytes:,}  message size {stats.min_size}..{stats.max_size} "
        f"(mean {mean_size:,.1f})"
    )
    print(
        f"imbalance  max/mean bytes received per rank {summary['receive_imbalance']:.2f}, sent "
        f"{summary['send_imbalance']:.2f}, per pair {summary['pair_imbalance']:.2f}"
    )
    print(
        f"pairs      {summary['zero_pairs']} of {summary['pairs']} exchange nothing; "
        f"{summary['self_bytes']:,} bytes to self"
    )
    print(
        format_table(
            ["top receiver", "bytes", "share"],
            [(f"rank {t['rank']}", t["bytes"], f"{100 * t['share']:.1f}%") for t in summary["top_receivers"]],
        )
    )
    if heatmap_path:
        print(f"heatmap    {heatmap_path}")
    write_json(
        args.json,
        {
            "trace": os.path.abspath(stats.path),
            "format": stats.format,
            "ranks": stats.ranks,
            "phases": stats.phases,
            "busy_phases": busy,
            "messages": stats.messages,
            "bytes": stats.bytes,
            "min_message_size": stats.min_size,
            "max_message_size": stats.max_size,
            "phase_messages": stats.phase_messages.tolist(),
            "phase_bytes": stats.phase_bytes.tolist(),
            **summary,
            "byte_matrix": stats.byte_matrix.tolist(),
            "message_matrix": stats.message_matrix.tolist(),
            "heatmap": heatmap_path,
        },
    )
    return 0
