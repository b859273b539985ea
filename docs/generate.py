"""The documentation's generated pages: tables written from the code that defines them.

``conf.py`` calls :func:`write_generated_pages` at every build; the tests call the
same functions, so a knob, a counter or a command cannot be documented differently
from what the code does.
"""

from __future__ import annotations

import os


def knob_table() -> str:
    """Every configuration knob: variable, keyword, default, meaning (from the Config fields' metadata)."""
    from mailrail.config import knobs

    rows = ["| variable | keyword / flag | default | meaning |", "|---|---|---|---|"]
    for knob in knobs():
        flag = f" / `--{knob.name.replace('_', '-')}`" if knob.flag else ""
        rows.append(f"| `{knob.variable}` | `{knob.name}`{flag} | {knob.default_text} | {knob.help} |")
    return "\n".join(rows) + "\n"


def counter_table() -> str:
    """Every ``stats()`` entry, its kind, and what it means (from :mod:`mailrail.counters`)."""
    from mailrail import counters

    rows = ["| name | kind | meaning |", "|---|---|---|"]
    for who, table in (
        ("message", counters.MESSAGE_COUNTERS),
        ("credit", counters.CREDIT_COUNTERS),
        ("rail", counters.RAIL_FACTS),
    ):
        rows += [f"| `{name}` | {who} | {meaning} |" for name, meaning in table.items()]
    return "\n".join(rows) + "\n"


#: The jobs of the memory table: ranks, and ranks per node (64, as on the MailRail paper's cluster).
MEMORY_JOBS = [(16, 16), (64, 64), (256, 64), (1024, 64), (4096, 64), (16384, 64), (16384, 16)]


def memory_table() -> str:
    """Per mode and job size: credits per pair and credit state per rank at the default receive slots, and
    the least receive memory the mode runs with (from :func:`mailrail.flow.memory_plan`)."""
    from mailrail.config import Config
    from mailrail.flow import least_recv_slots, memory_plan

    config = Config()
    slot = config.datagram_size
    rows = [
        f"| ranks (per node) | nodes | mode | credits per pair at R = {config.recv_pool_slots} | credit state per "
        f"rank: private + node's share | least receive memory per rank (slots of {slot // 1024} KiB) |",
        "|---|---|---|---|---|---|",
    ]
    for ranks, per_node in MEMORY_JOBS:
        for mode in ("rank", "node", "adaptive"):
            plan = memory_plan(
                mode,
                ranks=ranks,
                ranks_per_node=per_node,
                recv_slots=config.recv_pool_slots,
                send_slots=config.send_pool_slots,
                datagram_size=slot,
                credit_threshold=config.credit_threshold,
            )
            credits = "**refused**" if plan.refused else str(plan.credits_per_pair)
            state = "-" if plan.refused else f"{plan.credit_bytes:,} B + {plan.shared_bytes_per_rank:,} B"
            least = least_recv_slots(mode, ranks, plan.nodes) * slot
            rows.append(f"| {ranks:,} ({per_node}) | {plan.nodes:,} | {mode} | {credits} | {state} | {_size(least)} |")
    return "\n".join(rows) + "\n"


def _size(nbytes: int) -> str:
    return f"{nbytes / 2**20:,.0f} MiB" if nbytes >= 2**20 else f"{nbytes // 1024} KiB"


def command_reference() -> str:
    """Every ``mailrail`` command with the help its parser prints (from :data:`mailrail_tools.cli.COMMANDS`)."""
    from mailrail_tools.cli import COMMANDS, build_parser

    parts = []
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"  # argparse wraps to the terminal: the same page on any machine
    try:
        for path, (_, summary) in COMMANDS.items():
            help_text = build_parser(list(path)).format_help().rstrip()
            parts.append(f"## `mailrail {' '.join(path)}`\n\n{summary}\n\n```text\n{help_text}\n```\n")
    finally:  # the caller's environment as it was (the tests call this too)
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return "\n".join(parts)


def simulation_report(part: str) -> str:
    """The model's calibration, validation or projections, from the JSON the package ships (mailrail_simulate)."""
    from mailrail_simulate import report

    return {
        "calibration": report.calibration_markdown,
        "validation": report.validation_markdown,
        "lossy-validation": report.lossy_validation_markdown,
        "paper": report.paper_markdown,
        "matching": report.matching_markdown,
    }[part]()


def write_generated_pages(directory: str) -> None:
    os.makedirs(directory, exist_ok=True)
    for name, text in (
        ("knobs.md", knob_table()),
        ("memory.md", memory_table()),
        ("counters.md", counter_table()),
        ("commands.md", command_reference()),
        ("simulate-calibration.md", simulation_report("calibration")),
        ("simulate-validation.md", simulation_report("validation")),
        ("simulate-validation-lossy.md", simulation_report("lossy-validation")),
        ("simulate-paper.md", simulation_report("paper")),
        ("simulate-matching.md", simulation_report("matching")),
    ):
        path = os.path.join(directory, name)
        old = open(path, encoding="utf-8").read() if os.path.exists(path) else None
        if old != text:  # rewrite only what changed, so Sphinx rebuilds only the pages that include it
            with open(path, "w", encoding="utf-8") as out:
                out.write(text)
