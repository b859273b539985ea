"""The model's projections of the paper's experiments (:mod:`.paper`) beside the paper's numbers.

:func:`compare_with_paper` puts one experiment's points (:func:`.projection.project`) beside what the paper
measured, as rows and as sentences; :func:`combine_paper` joins the JSON of ``mailrail simulate paper`` runs
made apart (other experiments, other job sizes) into one document, compared again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from mailrail.flow.modes import MODE_NAMES, UNCONSTRAINED, flow_mode

from . import paper

#: The modes with credits, each compared with the unconstrained one.
CREDIT_MODES = tuple(mode for mode in MODE_NAMES if flow_mode(mode).has_credits)


def finished_at_bytes_asked(point: dict[str, Any]) -> bool:
    """It finished, and would have at the bytes asked (a scaled point's victim node within its memory)."""
    return bool(point.get("status_at_bytes_asked", point["status"]) == "ok")


def _runtime_at_bytes_asked(
    points: list[dict[str, Any]], ranks: int, mode: str, victims: int | None = None
) -> float | None:
    """The runtime of the point of *ranks* (and *victims*, if given) in *mode*, scaled back to the bytes asked;
    None if there is none, or it did not finish (:func:`finished_at_bytes_asked`)."""
    for p in points:
        if p["ranks"] == ranks and p["mode"] == mode and finished_at_bytes_asked(p) and victims in (None, p["victims"]):
            return float(p["runtime_s_at_bytes_asked"])
    return None


def _goodput_if_finished(points: list[dict[str, Any]], ranks: int, mode: str) -> float | None:
    """The point's goodput; None if it did not finish, or would not have at the bytes asked."""
    for p in points:
        if p["ranks"] == ranks and p["mode"] == mode and finished_at_bytes_asked(p):
            return float(p["goodput_bps"])
    return None


def compare_with_paper(name: str, points: list[dict[str, Any]]) -> dict[str, Any]:
    """The model's figures of experiment *name* (:func:`.paper.experiments`) beside the paper's, as rows and
    as sentences (where they disagree, by how much)."""
    rows: list[dict[str, Any]] = []
    lines: list[str] = []
    if name == "table1":
        for ranks, measured in paper.TABLE_I.items():
            row: dict[str, Any] = {"ranks": ranks}
            for mode in MODE_NAMES:
                row[f"model_{mode}_s"] = _runtime_at_bytes_asked(points, ranks, mode)
            for mode in paper.MEASURED_MODES:
                row[f"paper_{mode}_s"] = measured[mode]
            for mode in CREDIT_MODES:
                none, mine = row[f"model_{UNCONSTRAINED}_s"], row[f"model_{mode}_s"]
                row[f"model_{mode}_speedup"] = none / mine if none and mine else None
            for mode in paper.MEASURED_CREDIT_MODES:
                row[f"paper_{mode}_speedup"] = measured[UNCONSTRAINED] / measured[mode]
            rows.append(row)
            model = " ".join(f"{mode} {_times_text(row[f'model_{mode}_speedup'])}" for mode in CREDIT_MODES)
            measured_speedups = " ".join(
                f"{mode} {_times_text(row[f'paper_{mode}_speedup'])}" for mode in paper.MEASURED_CREDIT_MODES
            )
            lines.append(f"{ranks} ranks: speedup over {UNCONSTRAINED}, model {model}; paper {measured_speedups}")
        first, last = rows[0], rows[-1]
        for mode in paper.MEASURED_MODES:
            model_growth = _ratio_or_none(last[f"model_{mode}_s"], first[f"model_{mode}_s"])
            measured_growth = last[f"paper_{mode}_s"] / first[f"paper_{mode}_s"]
            lines.append(
                f"{mode}: runtime grows {_times_text(model_growth)} from 512 to 4096 ranks in the model, "
                f"{_times_text(measured_growth)} in the paper"
                + (f" (model/paper {model_growth / measured_growth:.2g})" if model_growth else "")
            )
    elif name == "goodput":
        low, high = paper.GOODPUT_RANKS[0], paper.GOODPUT_RANKS[-1]
        for mode in MODE_NAMES:
            at_low, at_high = _goodput_if_finished(points, low, mode), _goodput_if_finished(points, high, mode)
            fall = 1 - at_high / at_low if at_low and at_high else None
            rows.append({"mode": mode, "model_fall": fall, "paper_fall": paper.GOODPUT_FALL.get(mode)})
            unfinished = [
                p["ranks"]
                for p in points
                if p["mode"] == mode and _goodput_if_finished(points, p["ranks"], mode) is None
            ]
            lines.append(
                f"{mode}: goodput fell {_fall_text(fall)} from 128:1 to 4096:1 in the model"
                + (f", {paper.GOODPUT_FALL[mode]:.1%} in the paper" if mode in paper.GOODPUT_FALL else "")
                + (f" (out of memory or unfinished at {', '.join(map(str, unfinished))} ranks)" if unfinished else "")
            )
    elif name == "victims":
        ratios = paper.SWEEP_RATIOS
        for mode in MODE_NAMES:
            runtimes = [
                _runtime_at_bytes_asked(points, paper.SWEEP_RANKS, mode, paper.SWEEP_RANKS // r) for r in ratios
            ]
            growth = [
                _per_doubling(_ratio_or_none(b, a), math.log2(rb / ra))
                for (a, ra), (b, rb) in zip(zip(runtimes, ratios), zip(runtimes[1:], ratios[1:]))
            ]
            rows.append(
                {"mode": mode, "ratios": list(ratios), "model_runtime_s": runtimes, "growth_per_doubling": growth}
            )
            lines.append(
                f"{mode}: runtime per doubling of work per victim between "
                + ", ".join(f"{a}:1-{b}:1 {_times_text(g)}" for a, b, g in zip(ratios, ratios[1:], growth))
                + (
                    f" (paper: about {paper.SWEEP_NONE_GROWTH_PER_DOUBLING:g}x from 8:1 on)"
                    if not flow_mode(mode).has_credits
                    else ""
                )
            )
        rank, node = (_runtime_at_bytes_asked(points, paper.SWEEP_RANKS, m, 1) for m in paper.SWEEP_COMPARED_MODES)
        lines.append(
            f"node over rank at 4096:1: {_times_text(_ratio_or_none(rank, node))} in the model, "
            f"{paper.SWEEP_NODE_OVER_RANK_AT_HIGH_RATIO:g}x in the paper"
        )
    elif name == "stranding":
        ranks = points[0]["ranks"] if points else 0
        rank, none = (_runtime_at_bytes_asked(points, ranks, mode) for mode in paper.STRANDING_COMPARED_MODES)
        credits = {p["mode"]: p["credit_messages_at_bytes_asked"] for p in points if p["status"] == "ok"}
        rows.append({"model_rank_over_none": _ratio_or_none(rank, none), "credit_messages": credits})
        lines.append(
            f"rank runtime over none: {_times_text(_ratio_or_none(rank, none))} in the model; the paper's trace "
            f"replay at 14,336 ranks: about {paper.STRANDING_RANK_OVER_NONE_RUNTIME:g}x"
        )
        lines.append(
            "credit messages: "
            + ", ".join(f"{mode} {count:,}" for mode, count in credits.items())
            + "; the paper: rank 17.8-26.4 million, node 117k-435k per trial (another workload and size)"
        )
    return {"rows": rows, "lines": lines}


def _ratio_or_none(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def _per_doubling(growth: float | None, doublings: float) -> float | None:
    """What a *growth* over *doublings* doublings is per doubling (None for None)."""
    return None if growth is None else growth ** (1 / doublings)


def _times_text(value: float | None) -> str:
    """A ratio as ``2.5x`` (``n/a`` for None)."""
    return "n/a" if value is None else f"{value:.3g}x"


def _fall_text(fraction: float | None) -> str:
    """How much goodput fell, as a percentage; a negative fall says it rose."""
    if fraction is None:
        return "n/a"
    return f"{fraction:.1%}" if fraction >= 0 else f"{fraction:.1%} (it rose {-fraction:.1%})"


def combine_paper(documents: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """One document from the ``simulate paper`` JSON of several runs of one parameter set: each experiment's
    points in its own order, compared with the paper again.  ValueError if a point comes twice."""
    experiments: dict[str, Any] = {}
    for experiment in paper.experiments():
        parts = [d["experiments"][experiment.name] for d in documents if experiment.name in d["experiments"]]
        if not parts:
            continue
        points = [p for part in parts for p in part["points"]]
        keys = [(p["ranks"], p["victims"], p["mode"]) for p in points]
        twice = sorted({key for key in keys if keys.count(key) > 1})
        if twice:
            raise ValueError(f"{experiment.name} has these points twice (ranks, victims, mode): {twice}")
        order = list(zip(experiment.ranks, experiment.victims, strict=True))
        points.sort(key=lambda p: (order.index((p["ranks"], p["victims"])), list(MODE_NAMES).index(p["mode"])))
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
