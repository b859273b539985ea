"""Validation: measured runs the model was not fitted to, each predicted at its own size, beside what it
measured, and the errors per figure, per quantity and per mode (``mailrail simulate validate`` prints and
writes them; the documentation's tables are made from the JSON it wrote, :mod:`.report`)."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from mailrail.flow.modes import MODE_NAMES, flow_mode

from .params import DATA_DIR, ModelParams
from .report import signed_percent

if TYPE_CHECKING:
    from .runs import Case

#: The held-out runs shipped with the package (what ``simulate validate`` predicts by default).
HELD_OUT = os.path.join(DATA_DIR, "runs", "held-out")


def validate(
    cases: list[Case], params: ModelParams, max_messages: int, progress: Callable[[str], None] = lambda line: None
) -> dict[str, Any]:
    """Each case predicted with at most *max_messages* (memory growth scaled back): measured beside modelled,
    and the relative errors of goodput and victim memory; then their spread per figure (the run each case
    came from), per quantity, and per mode."""
    from .calibrate import predict, relative_error

    rows: list[dict[str, Any]] = []
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
        row: dict[str, Any] = {
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
            f"[{index}/{len(cases)}] {case.name}: goodput {signed_percent(goodput_error, 'n/a')}, "
            f"memory {signed_percent(memory_error, 'n/a')}, outcome {'agrees' if row['outcome_agrees'] else 'differs'}"
        )
    errors = [abs(e) for row in rows for e in (row["goodput_error"], row["memory_error"]) if e is not None]
    figures: dict[str, dict[str, Any]] = {}
    for figure in dict.fromkeys(row["figure"] for row in rows):
        mine = [row for row in rows if row["figure"] == figure]
        summary: dict[str, Any] = {}
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
        "goodput": error_spread([row["goodput_error"] for row in rows]),
        "memory": error_spread([row["memory_error"] for row in rows]),
        "unconstrained_memory": error_spread(
            [row["memory_error"] for row in rows if not flow_mode(row["mode"]).has_credits]
        ),
        # each quantity apart, per mode: no figure that mixes one mode's errors with another's
        "by_mode": {mode: errors_by_quantity([row for row in rows if row["mode"] == mode]) for mode in MODE_NAMES},
    }


def errors_by_quantity(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The spread of each quantity's error over *rows* (:func:`error_spread`), apart, and the outcomes agreeing."""
    return {
        "goodput": error_spread([row["goodput_error"] for row in rows]),
        "victim_memory": error_spread([row["memory_error"] for row in rows]),
        "retransmitted_per_packet": error_spread([row["retransmitted_difference"] for row in rows]),
        "outcomes_agree": sum(row["outcome_agrees"] for row in rows),
        "cases": len(rows),
    }


def error_spread(errors: list[float | None]) -> dict[str, float | None]:
    """The median and the largest absolute error, over the *errors* there are (None: a case without one)."""
    values = [abs(e) for e in errors if e is not None]
    return {
        "median_abs_error": statistics.median(values) if values else None,
        "max_abs_error": max(values) if values else None,
        "cases": len(values),
    }
