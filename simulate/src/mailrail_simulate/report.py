"""The model's evidence as Markdown: the calibration, the validation and the paper's projections, written
from the JSON files the package ships (the documentation's page includes them, rebuilt at every build)."""

from __future__ import annotations

import json
import os
from typing import Any

from mailrail.flow.modes import flow_mode

from .params import CALIBRATED, DATA_DIR, OMNIPATH

VALIDATION = os.path.join(DATA_DIR, "validation.json")
#: The held-out runs with shallow link queues, predicted with the virtual cluster's TCP set (``tcp.json``).
LOSSY_VALIDATION = os.path.join(DATA_DIR, "validation-lossy.json")
TCP = os.path.join(DATA_DIR, "tcp.json")
#: ``mailrail simulate measure-matching`` runs on this machine: what the model's matching and ingest terms rest on.
MATCHING_DIR = os.path.join(DATA_DIR, "matching")
PAPER = os.path.join(DATA_DIR, "paper.json")
MIB = 1 << 20


def _read(path: str) -> dict[str, Any] | None:
    if not os.path.exists(path):
        return None
    with open(path) as source:
        document: dict[str, Any] = json.load(source)
    return document


def _number_text(value: Any) -> str:
    """A parameter's or a runtime's value as a table shows it: 3 significant digits, or an integer with commas."""
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:.3g}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def _in_units(value: float | None, unit: float) -> str:
    """*value* in *unit*s (1e6: Mb/s of bits/s; MIB: MiB of bytes), whole, with commas (``-`` for None)."""
    return "-" if value is None else f"{value / unit:,.0f}"


def _abs_percent(value: float | None) -> str:
    """An absolute relative error as ``12%`` (``-`` for None)."""
    return "-" if value is None else f"{value:.0%}"


def signed_percent(value: float | None, missing: str = "-") -> str:
    """A relative error as ``+12%`` (*missing* for None)."""
    return missing if value is None else f"{value:+.0%}"


def calibration_markdown() -> str:
    calibrated, omnipath = _read(CALIBRATED), _read(OMNIPATH)
    if calibrated is None or omnipath is None:
        return "(no calibration shipped)\n"
    fit = calibrated["fit"]
    lines = [
        f"`{calibrated['source']}`, {calibrated['date']}, on this machine ({calibrated['machine']['cpus']} cores), "
        f"from {len(calibrated['runs'])} recorded runs ({', '.join(f'`{r}`' for r in calibrated['runs'])}; "
        f"{len(fit['cases'])} mode runs), each modelled with {fit['fit_messages']:,} messages while fitting; "
        f"{fit['evaluations']} model runs, {fit['wall_s']:.0f} s. RMS log error of goodput: CPU stage "
        f"{fit['cpu']['rms_log_error']:.3f} (from {fit['cpu']['start_rms_log_error']:.3f} at the start values)"
        + (f", matching stage {fit['matching']['rms_log_error']:.3f}" if "matching" in fit else "")
        + ". `make simulate-runs` records the runs again (as root, about 20 minutes), `make simulate-calibration` "
        "fits and validates. The Omni-Path set inherits every endpoint parameter from this fit and sets the "
        "network from public figures:",
        "",
        "| parameter | calibrated here | Omni-Path-like | source of the Omni-Path value |",
        "|---|---|---|---|",
    ]
    sources = omnipath.get("sources", {})
    own = omnipath["params"]
    for name, value in calibrated["params"].items():
        other = own.get(name, value)
        source = sources.get(name, "inherited: calibrated here")
        lines.append(f"| `{name}` | {_number_text(value)} | {_number_text(other)} | {source} |")
    return "\n".join(lines) + "\n"


def validation_markdown() -> str:
    validation = _read(VALIDATION)
    if validation is None:
        return "(no validation shipped)\n"
    lines = [
        "Each held-out run (none was used for the fit: other node counts, incast ratios, link rates and memory caps) "
        "predicted at its own size, beside what it measured: mean goodput of its trials, and the victim's peak "
        "resident memory. Relative errors, modelled / measured - 1:",
        "",
        "| run | mode | outcome (model) | Mb/s | model Mb/s | error | victim MiB | model MiB | error |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in validation["cases"]:
        lines.append("| " + " | ".join(_case_cells(row)) + " |")
    lines += ["", "| figure (held-out run) | median abs. goodput error | median abs. memory error | outcomes agree |"]
    lines.append("|---|---|---|---|")
    for figure, summary in validation["figures"].items():
        cells = [
            figure,
            _abs_percent(summary["median_abs_goodput_error"]),
            _abs_percent(summary["median_abs_memory_error"]),
        ]
        lines.append("| " + " | ".join(cells) + f" | {summary['outcomes_agree']}/{summary['cases']} |")
    goodput, flood = validation["goodput"], validation["unconstrained_memory"]
    lines += [
        "",
        f"Over all held-out runs, goodput and victim memory together: median absolute error "
        f"**{validation['median_abs_error']:.0%}**, largest **{validation['max_abs_error']:.0%}**. Apart: goodput "
        f"median **{goodput['median_abs_error']:.0%}**, largest {goodput['max_abs_error']:.0%} "
        f"({goodput['cases']} runs); victim memory median {flood['median_abs_error']:.0%} and largest "
        f"{flood['max_abs_error']:.0%} in the {flood['cases']} unconstrained runs that finished "
        f"(the credit modes' victims stay at their baseline, within {_abs_percent(_credit_memory(validation))}). "
        f"Outcomes (finished or out of memory) agree in {sum(r['outcome_agrees'] for r in validation['cases'])} "
        f"of {len(validation['cases'])}. {validation['wall_s']:.0f} s to predict them all.",
    ]
    if "by_mode" in validation:
        lines += ["", "Each quantity per mode:", "", by_mode_markdown(validation["by_mode"])]
    return "\n".join(lines) + "\n"


def _case_cells(row: dict[str, Any]) -> list[str]:
    """One predicted run's cells: where it came from, its outcome (the model's, if another), goodput and
    victim memory measured, modelled, and the error."""
    outcome = row["measured_status"]
    if row["predicted_status"] != outcome:
        outcome += f" ({row['predicted_status']})"
    modelled = row["predicted_status"] == "ok"
    return [
        row["figure"],
        row["mode"],
        outcome,
        _in_units(row["measured_goodput_bps"], 1e6),
        _in_units(row["predicted_goodput_bps"] if modelled else None, 1e6),
        signed_percent(row["goodput_error"]),
        _in_units(row["measured_victim_bytes"], MIB),
        _in_units(row["predicted_victim_bytes"] if modelled else None, MIB),
        signed_percent(row["memory_error"]),
    ]


def lossy_validation_markdown() -> str:
    """The shallow-queue runs: the TCP set's window chosen on the fit runs, then each held-out run predicted,
    and each quantity's error per mode."""
    validation, tcp = _read(LOSSY_VALIDATION), _read(TCP)
    if validation is None or tcp is None:
        return "(no lossy validation shipped)\n"
    fit = tcp["fit"]
    lines = [
        f"**The window, chosen on the fit runs** (`{fit['command']}`, {fit['wall_s']:.0f} s; "
        f"{len(fit['cases'])} cases): the most outcomes right, then the least root-mean-square log-ratio of "
        "goodput over the cases that finished in both. The held-out runs played no part.",
        "",
        "| flow window (packets) | outcomes agree | rms log goodput error | over cases |",
        "|---|---|---|---|",
    ]
    chosen = tcp["params"]["flow_window_packets"]
    for score in fit["windows"]:
        error = score["rms_log_goodput_error"]
        window = f"**{score['window']}** (chosen)" if score["window"] == chosen else str(score["window"])
        cells = [window, f"{score['outcomes_agree']}/{score['cases']}", "-" if error is None else f"{error:.2f}"]
        lines.append("| " + " | ".join(cells) + f" | {score['goodput_cases']} |")
    lines += [
        "",
        "**The held-out runs, predicted.** Goodput and victim memory as relative errors (modelled / measured - 1); "
        "`resent`: packets sent again per packet on the links between nodes (TCP's `RetransSegs` over `OutSegs`, "
        "summed over the nodes; the model's messages, ACKs and NAKs); a timeout is the mode's 120 s limit "
        "(a trial's share, 60 s, in the model):",
        "",
        "| run | mode | outcome (model) | Mb/s | model Mb/s | error | victim MiB | model MiB | error "
        "| resent | model |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in validation["cases"]:
        cells = _case_cells(row)
        cells += [
            share_percent(row["measured_retransmitted_per_packet"]),
            share_percent(row["predicted_retransmitted_per_packet"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", by_mode_markdown(validation["by_mode"]), f"{validation['wall_s']:.0f} s to predict them all."]
    return "\n".join(lines) + "\n"


def by_mode_markdown(by_mode: dict[str, Any]) -> str:
    """Each quantity's error per mode (:func:`by_mode_rows`) as a Markdown table."""
    lines = [
        "| mode | goodput: median (largest) abs. error | victim memory | packets sent again: abs. difference "
        "| outcomes agree |",
        "|---|---|---|---|---|",
    ]
    lines += ["| " + " | ".join(row) + " |" for row in by_mode_rows(by_mode)]
    return "\n".join(lines) + "\n"


def by_mode_rows(by_mode: dict[str, Any]) -> list[list[str]]:
    """Each quantity's error per mode, never pooled, a row per mode that has cases: median (largest) absolute
    relative error of goodput and victim memory over the cases both finished, of packets sent again the
    absolute difference in percentage points, and outcomes agreeing / cases."""

    def spread(entry: dict[str, Any], scale: float, unit: str) -> str:
        if entry["median_abs_error"] is None:
            return "-"
        median, largest = entry["median_abs_error"] * scale, entry["max_abs_error"] * scale
        if unit == "%":
            return f"{median:.0f}% ({largest:.0f}%), {entry['cases']} case(s)"
        return f"{median:.1f} ({largest:.1f}) {unit}"

    return [
        [
            mode,
            spread(entry["goodput"], 100, "%"),
            spread(entry["victim_memory"], 100, "%"),
            spread(entry["retransmitted_per_packet"], 100, "points"),
            f"{entry['outcomes_agree']}/{entry['cases']}",
        ]
        for mode, entry in by_mode.items()
        if entry["cases"]
    ]


def share_percent(value: float | None) -> str:
    """A share as ``12.3%`` (``-`` for None)."""
    return "-" if value is None else f"{value:.1%}"


def _credit_memory(validation: dict[str, Any]) -> float | None:
    errors = [
        abs(r["memory_error"])
        for r in validation["cases"]
        if flow_mode(r["mode"]).has_credits and r["memory_error"] is not None
    ]
    return max(errors) if errors else None


def matching_markdown() -> str:
    """The recorded ``simulate measure-matching`` runs, one table each (microseconds per receive: medians)."""
    names = sorted(os.listdir(MATCHING_DIR)) if os.path.isdir(MATCHING_DIR) else []
    if not names:
        return "(no matching runs shipped)\n"
    lines: list[str] = []
    for name in names:
        document = _read(os.path.join(MATCHING_DIR, name))
        assert document is not None
        lines += [
            f"**{document['wire']}**, {document['senders']} sender(s), {document['message_bytes']}-byte messages, "
            f"{document['mpi'].split(',')[0]}, {document['date']}: `{document['command']}`",
            "",
            "| queued messages | fill us/message | receiver's memory B/message | page faults/message | "
            "head, wildcard us | tail, any source us | tail, specific us |",
            "|---|---|---|---|---|---|---|",
        ]
        for point in document["points"]:
            times = point["receive_us"]
            cells = [
                f"{point['queue']:,}",
                f"{point['fill_us_per_message']:.3g}",
                f"{point['resident_bytes_per_message']:,.0f}",
                f"{point['minor_faults_per_message']:.2f}",
                *(f"{times[kind]['median']:,.1f}" for kind in ("head, wildcard", "tail, any source", "tail, specific")),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def paper_markdown() -> str:
    document = _read(PAPER)
    if document is None:
        return "(no projection shipped)\n"
    commands = document.get("commands") or ["mailrail simulate paper"]
    lines = [
        ", ".join(f"`{command}`" for command in commands)
        + " with the Omni-Path-like parameters: "
        + (document["note"] + ", " if document.get("note") else "")
        + (
            f"the longest of these runs took {document['wall_s'] / 60:.0f} minutes. "
            if len(commands) > 1
            else f"{document['wall_s'] / 60:.0f} minutes. "
        )
        + "Each point's wall time (its pilot included) is in its table; "
        "`*` marks bytes per rank scaled down (to the message budget, or to fit the point's time limit); a point "
        "without it models every message. A scaled point's runtime, victim memory and credit messages are scaled "
        "back to the bytes asked: linearly, which is what the credit modes do once started, and a lower bound for "
        "none; its victim node's memory too, against the node's (\"out of memory at the bytes asked\"). "
        "`resent`: packets sent again after a loss, per message delivered.",
    ]
    for name, experiment in document["experiments"].items():
        budget = experiment.get("max_messages", document["max_messages"])
        lines += ["", f"**{experiment['title']}** (at most {budget:,} messages a point)", ""]
        if name == "table1":
            lines += _table_one(experiment)
        lines += [
            "| ranks | victims | mode | runtime s | goodput Gb/s | victim MiB | credit messages | resent | "
            "MiB/rank modelled | messages per victim modelled | wall s |",
            "|---|---|---|---|---|---|---|---|---|---|---|",
        ]
        for p in experiment["points"]:
            ok = p["status"] == "ok"
            if ok and p.get("status_at_bytes_asked") == "out_of_memory":  # its victim's node, grown to the bytes
                runtime = "out of memory at the bytes asked"
            else:
                runtime = _number_text(p["runtime_s_at_bytes_asked"]) if ok else p["status"].replace("_", " ")
            resent = p.get("retransmitted_fraction")
            cells = [
                f"{p['ranks']:,}",
                str(p["victims"]),
                p["mode"],
                runtime,
                f"{p['goodput_bps'] / 1e9:.3g}",
                f"{p['victim_peak_bytes_at_bytes_asked'] / MIB:,.1f}",
                f"{p['credit_messages_at_bytes_asked']:,}",
                "-" if resent is None else f"{resent:.1%}",
                f"{p['bytes_per_rank'] / MIB:.3g}" + ("*" if p["scaled"] else ""),
                _victim_messages(p.get("victim_messages")),
                f"{p['wall_s']:.0f}",
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines += [""] + [f"- {line}" for line in experiment["paper"]["lines"]]
    return "\n".join(lines) + "\n"


def _victim_messages(spread: dict[str, float] | None) -> str:
    """``min-max`` of the messages each victim received (``-`` for points recorded before it was kept)."""
    if spread is None:
        return "-"
    low, high = int(spread["min"]), int(spread["max"])
    return f"{low:,}" if low == high else f"{low:,}-{high:,}"


def _table_one(experiment: dict[str, Any]) -> list[str]:
    lines = [
        "| ranks | paper none s | model none s | paper rank s | model rank s | paper node s | model node s | "
        "model adaptive s | speedup rank: paper / model | speedup node: paper / model |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in experiment["paper"]["rows"]:
        runtimes = ("paper_none_s", "model_none_s", "paper_rank_s", "model_rank_s", "paper_node_s", "model_node_s")
        cells = [f"{row['ranks']:,}", *(_number_text(row[key]) for key in (*runtimes, "model_adaptive_s"))]
        cells += [
            f"{_times_text(row[f'paper_{mode}_speedup'])} / {_times_text(row[f'model_{mode}_speedup'])}"
            for mode in ("rank", "node")
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


def _times_text(value: float | None) -> str:
    """A ratio as ``12x`` or ``2.5x`` (``-`` for None)."""
    return "-" if value is None else f"{value:,.0f}x" if value >= 10 else f"{value:.2g}x"
