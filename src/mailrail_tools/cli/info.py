"""``mailrail info``: what MailRail would run on here; ``mailrail info --plan``: what a job size would get.

Every answer comes from the code that decides it when a rail starts: the MPI and its origin from
:func:`mailrail_tools.jobs.which_mpi.mpi_origin`, the launcher from
:func:`~mailrail_tools.jobs.which_mpi.find_mpiexec` and
:func:`~mailrail_tools.jobs.which_mpi.launch_settings`, the implementation from :func:`mailrail.transport.choose`, the
atomics from :func:`~mailrail.flow.node_memory.resolve_atomics`, the nodes from
:class:`~mailrail.flow.node_memory.NodeTopology`, ``TAG_UB`` from :func:`mailrail.rail.tag_upper_bound`,
and the plan from :func:`mailrail.flow.modes.memory_plan` over the knobs :class:`~mailrail.config.Config`
validated.  ``--plan`` starts no MPI; plain ``info`` starts it only to count nodes and read ``TAG_UB``.
"""

from __future__ import annotations

import argparse
import os
import sys
import textwrap
from typing import Any

from mailrail import __version__
from mailrail.config import FLOW_CONTROL_MODES, Config
from mailrail.flow.modes import least_recv_slots, memory_plan
from mailrail.flow.sizing import MemoryPlan

from ..flags import add_rail_arguments, checked_rail_options, int_in, usage_error
from ..jobs.which_mpi import LaunchError, find_mpiexec, launch_settings, mpi_origin
from ..output import format_table, write_json

#: What the command prints fits a terminal this wide.
COLUMNS = 100


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", metavar="PATH", help="write the report as JSON")
    parser.add_argument(
        "--plan",
        action="store_true",
        help="per flow-control mode, for --ranks and --ranks-per-node: credits per pair, memory per rank, "
        "refusals and what to change (starts no MPI)",
    )
    parser.add_argument("--ranks", type=int_in(1), help="--plan: the job's ranks")
    # --ranks-per-node is the knob's own flag (below): virtual nodes in a job, the node size in a plan.
    add_rail_arguments(parser, skip=("flow_control", "max_recvs", "piggyback", "stall_timeout", "idle_sleep_us"))


def run(args: argparse.Namespace) -> int:
    checked = checked_rail_options("info", args)
    if checked is None:
        return 2
    _, config = checked
    if args.plan:
        return _run_plan(args, config)
    if args.ranks is not None:
        return usage_error("info", f"--ranks {args.ranks} is for --plan (a job's size): add --plan")
    report = describe_here(config)
    if report is None:  # a rank other than 0 of a job: rank 0 reports
        return 0
    print(_report_table(report))
    write_json(args.json, report)
    return 0


# -- the plan ------------------------------------------------------------------------------------


def _run_plan(args: argparse.Namespace, config: Config) -> int:
    if args.ranks is None:
        return usage_error("info", "--plan needs --ranks N (the job's ranks)")
    per_node = config.ranks_per_node
    if per_node is None:
        return usage_error("info", "--plan needs --ranks-per-node K (ranks on each node)")
    if per_node > args.ranks:
        return usage_error("info", f"--ranks-per-node {per_node} exceeds --ranks {args.ranks}")
    document = plan_document(config, args.ranks)
    print(_plan_table(document))
    write_json(args.json, document)
    return 0


def plan_document(config: Config, ranks: int) -> dict[str, Any]:
    """``{"job": ..., "modes": {mode: ...}}`` for a job of *ranks* in nodes of ``config.ranks_per_node``."""
    assert config.ranks_per_node is not None
    modes = {}
    for mode in FLOW_CONTROL_MODES:
        plan = memory_plan(
            mode,
            ranks=ranks,
            ranks_per_node=config.ranks_per_node,
            recv_slots=config.recv_pool_slots,
            send_slots=config.send_pool_slots,
            datagram_size=config.datagram_size,
            credit_threshold=config.credit_threshold,
            credits_per_pair=config.credits_per_pair,
        )
        modes[mode] = _mode_entry(plan)
    nodes = -(-ranks // config.ranks_per_node)
    job = {
        "ranks": ranks,
        "ranks_per_node": config.ranks_per_node,
        "nodes": nodes,
        "recv_pool_slots": config.recv_pool_slots,
        "send_pool_slots": config.send_pool_slots,
        "datagram_size": config.datagram_size,
        "credit_threshold": config.credit_threshold,
        "credits_per_pair": config.credits_per_pair,
    }
    return {"job": job, "modes": modes}


def _mode_entry(plan: MemoryPlan) -> dict[str, Any]:
    refused = plan.refused is not None
    return {
        "refused": refused,
        "reason": plan.refused,
        # unconstrained (none) and refused modes hand out no credits
        "credits_per_pair": plan.credits_per_pair or 0,
        "least_recv_pool_slots": least_recv_slots(plan.mode, plan.ranks, plan.nodes),
        "recv_bytes_per_rank": plan.receive_bytes,
        "send_bytes_per_rank": plan.send_bytes,
        # the rank's own credit state plus its share of its node's shared credit state
        "credit_state_bytes_per_rank": plan.credit_bytes + plan.shared_bytes_per_rank,
        "private_credit_bytes_per_rank": plan.credit_bytes,
        "shared_credit_bytes_per_node": plan.shared_bytes_per_node,
        "total_bytes_per_rank": plan.total_bytes_per_rank,
    }


def _plan_table(document: dict[str, Any]) -> str:
    job = document["job"]
    head = (
        f"{job['ranks']:,} ranks on {job['nodes']:,} nodes of {job['ranks_per_node']:,}; per rank "
        f"{job['recv_pool_slots']:,} receive and {job['send_pool_slots']:,} send slots of {job['datagram_size']:,} B"
    )
    rows = []
    refusals = []
    for mode, entry in document["modes"].items():
        rows.append(
            [
                mode,
                "refused" if entry["refused"] else "ok",
                entry["credits_per_pair"] or "-",  # none for unconstrained and refused modes
                _size(entry["recv_bytes_per_rank"]),
                _size(entry["send_bytes_per_rank"]),
                _size(entry["credit_state_bytes_per_rank"]),
                _size(entry["total_bytes_per_rank"]),
                entry["least_recv_pool_slots"],
            ]
        )
        if entry["refused"]:
            refusals.append(f"{mode}: {entry['reason']}")
    headers = ["mode", "status", "credits/pair", "receive", "send", "credit", "total", "least slots"]
    notes = [
        "credits/pair: per (sender rank, receiver) in rank mode, per (sending node, receiver) in node mode,",
        "the most one grant carries in adaptive mode; none: unbounded (MPI's unexpected queue)",
        "memory per rank; credit: its own credit state and its share of its node's; least slots: the",
        "fewest --recv-pool-slots the mode runs with for this job",
    ]
    lines = [head, "", format_table(headers, rows), "", *notes]
    for refusal in refusals:
        lines += ["", *_wrap(refusal)]
    return "\n".join(lines)


def _size(count: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def _wrap(text: str, width: int = COLUMNS) -> list[str]:
    """*text* in lines of at most *width* columns, continuation lines indented."""
    return textwrap.wrap(text, width=width, subsequent_indent="  ", break_on_hyphens=False)


# -- what runs here ------------------------------------------------------------------------------


def describe_here(config: Config) -> dict[str, Any] | None:
    """The report of this process (rank 0 of a job, or a lone process); None on the other ranks.

    MPI is started for the node count and ``TAG_UB`` only, after the library's facts were read.
    """
    import mpi4py

    if "mpi4py.MPI" not in sys.modules:
        mpi4py.rc.initialize = False  # started below, when needed, and finalized here
        mpi4py.rc.finalize = False
    origin = mpi_origin()  # reads the library in this process: mpi4py.MPI is imported from here on
    assert origin is not None
    from mpi4py import MPI

    from mailrail._mpi import starting_mpi
    from mailrail.flow.node_memory import NodeTopology, resolve_atomics
    from mailrail.rail import tag_upper_bound
    from mailrail.transport import choose

    settings = launch_settings(os.environ, origin)
    started_here = not MPI.Is_initialized()
    if started_here:
        # MPI started here runs as a job here would (the wheels' settings; none for a site MPI)
        os.environ.update(settings.values)
        with starting_mpi():  # a lone process: no shared-memory segment left in /dev/shm (mailrail._mpi)
            MPI.Init()
    try:
        world = MPI.COMM_WORLD
        topology = NodeTopology(world, config.ranks_per_node)
        nodes, virtual = topology.nodes, topology.virtual
        topology.free()
        tag_ub = tag_upper_bound(world)
        rank, size = world.Get_rank(), world.Get_size()
        chosen, why = choose(config)  # probes the library's MPI_Status with MPI calls: before MPI_Finalize
    finally:
        if started_here:
            MPI.Finalize()
    if rank != 0:
        return None
    try:
        mpiexec: str | None = find_mpiexec()
        mpiexec_problem = None
    except LaunchError as error:
        mpiexec, mpiexec_problem = None, str(error)
    if origin.wheel:
        source = f"PyPI wheel of {origin.wheel} (mpi4py {origin.mpi4py_version})"
    else:
        compiler = origin.build_config.get("mpicc")
        built = f" with {compiler}" if compiler else ""  # mpi4py 4 keeps no record of its compiler
        source = f"built from source against a site MPI{built} (mpi4py {origin.mpi4py_version})"
    nodes_how = (
        f"virtual: MAILRAIL_RANKS_PER_NODE={config.ranks_per_node} groups consecutive ranks"
        if virtual
        else "real: ranks sharing memory (MPI_COMM_TYPE_SHARED)"
    )
    return {
        "mailrail_version": __version__,
        "mpi": {
            "library": origin.library,
            "library_version": origin.library_version,
            "library_path": origin.library_path,
            "flavor": origin.flavor,
        },
        "mpi4py": {
            "version": origin.mpi4py_version,
            "source": "wheel" if origin.wheel else "site",
            "wheel": origin.wheel,
            "build_config": origin.build_config,
            "description": source,
        },
        "implementation": {"name": chosen, "reason": why or "the compiled one is built and runs on this MPI"},
        "nodes": {"count": nodes, "ranks": size, "virtual": virtual, "detection": nodes_how},
        "atomics": {"configured": config.atomics, "used": resolve_atomics(config.atomics)},
        "tag_ub": tag_ub,
        "launcher": {
            "mpiexec": mpiexec,
            "problem": mpiexec_problem,
            "variables": settings.values,
            "reason": settings.reason,
            "settings": settings.describe(),
        },
    }


def _report_table(report: dict[str, Any]) -> str:
    atomics = report["atomics"]
    nodes = report["nodes"]
    launcher = report["launcher"]
    rows = [
        ("MailRail", report["mailrail_version"]),
        ("MPI library", report["mpi"]["library"]),
        ("MPI library file", report["mpi"]["library_path"] or "unknown"),
        ("mpi4py", report["mpi4py"]["description"]),
        ("implementation", f"{report['implementation']['name']}: {report['implementation']['reason']}"),
        ("nodes", f"{nodes['count']} for {nodes['ranks']} rank(s), {nodes['detection']}"),
        ("atomics", f"{atomics['used']} (MAILRAIL_ATOMICS={atomics['configured']}; node and adaptive modes)"),
        ("TAG_UB", f"{report['tag_ub']:,}"),
        ("launcher", launcher["mpiexec"] or launcher["problem"]),
        ("launch settings", launcher["settings"]),
    ]
    width = max(len(name) for name, _ in rows)
    lines = []
    for name, value in rows:
        wrapped = _wrap(str(value), COLUMNS - width - 2) or [""]
        lines.append(f"{name:<{width}}  {wrapped[0]}")
        lines += [f"{'':<{width}}  {more}" for more in wrapped[1:]]
    return "\n".join(lines)
