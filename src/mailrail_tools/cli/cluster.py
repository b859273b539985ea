"""``mailrail cluster up | status | down``: a virtual cluster that outlives one job, and cleaning up."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from mailrail.errors import ClusterError

from ..cluster import cgroups, namespaces, state
from ..cluster.options import DEFAULT_NAME, add_node_arguments, memory_option
from ..cluster.slurm import PARTITION
from ..cluster.spec import PREFIX, SCHEDULERS, ClusterSpec, Layout, Link, parse_node_count
from ..cluster.virtual import VirtualCluster, remove_cluster
from ..output import format_table

_MIB = 2**20


# -- up ------------------------------------------------------------------------------


def add_up_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", default="4", help="virtual nodes (default: %(default)s)")
    parser.add_argument(
        "--name",
        default=DEFAULT_NAME,
        help="the cluster's name; jobs use it with --cluster up:NAME (default: %(default)s, which --cluster up means)",
    )
    parser.add_argument(
        "--scheduler",
        choices=[s for s in SCHEDULERS if s],
        default=None,
        help="run a batch scheduler on the cluster: slurm (slurmctld and munged on the head, a slurmd per node; "
        "jobs through `mailrail cluster exec -- srun ...` or `mailrail run --launcher srun`; "
        "installs Debian's packages when missing)",
    )
    add_node_arguments(parser)


def up(args: argparse.Namespace) -> int:
    if not namespaces.has_admin_capabilities():
        raise ClusterError(
            "a cluster that outlives the command needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN); "
            "without root, `mailrail run --cluster N` builds one per job in a user namespace"
        )
    if args.victim_node_memory is not None:
        raise ClusterError(
            "--victim-node-memory caps the nodes of one job's victims: give it to the job "
            "(mailrail run --cluster up --victim-node-memory 1G bench adversarial ...)"
        )
    spec = ClusterSpec(
        nodes=parse_node_count(args.nodes, "--nodes"),
        link=Link.parse(args.link_rate, args.link_delay, args.link_queue),
        node_memory=memory_option(args.node_memory, "--node-memory"),
        node_slots=args.node_slots,
        scheduler=args.scheduler,
    )
    cluster = VirtualCluster(spec, name=args.name, persistent=True)
    cluster.up()
    print(
        f"virtual cluster {args.name} is up: {spec.nodes} nodes "
        + ", ".join(f"{cluster.layout.hostname(n)} ({cluster.layout.address(n)})" for n in range(spec.nodes))
    )
    use = "--cluster up" if args.name == DEFAULT_NAME else f"--cluster up:{args.name}"
    down = "" if args.name == DEFAULT_NAME else f" --name {args.name}"
    print(
        f"run jobs on it with `mailrail run -n N {use} ...` or `mailrail compare {use}`; "
        f"`mailrail cluster down{down}` removes it"
    )
    if spec.scheduler == "slurm":
        name = "" if args.name == DEFAULT_NAME else f" --name {args.name}"
        print(
            f"Slurm runs on it (controller {cluster.layout.hostname(None)}, partition {PARTITION}): "
            f"`mailrail cluster exec{name} -- sinfo`, `... -- srun -N 2 hostname`, `... -- sbatch --wait JOB`, "
            f"`mailrail run -n N {use} --launcher srun -- python app.py`"
        )
    return 0


# -- exec ------------------------------------------------------------------------------


def add_exec_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--name", default=DEFAULT_NAME, help="the cluster to run on (default: %(default)s, made by cluster up)"
    )
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="-- and the command to run on the cluster's head, its login node (-- sinfo; -- sbatch --wait job.sh)",
    )


def exec_on_head(args: argparse.Namespace) -> int:
    """Run a command on the head, as ``ssh`` to a cluster's login node would: in the head's namespaces, with
    the cluster's MPI settings and, on a Slurm cluster, its client settings (``SLURM_CONF``,
    ``SLURM_MPI_TYPE``).  This process becomes the command (exec): its signals and exit status are the
    command's own, as with ssh."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        print("mailrail cluster exec: name a command after -- (mailrail cluster exec -- sinfo)", file=sys.stderr)
        return 2
    cluster = VirtualCluster.attach(args.name)
    env = cluster.environment()
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(cluster.agent, [cluster.agent, "--exec", "head", *command], env)
    return 127  # not reached: execve returns only by raising


# -- status ----------------------------------------------------------------------------


def add_status_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the status as JSON")


def cluster_ids() -> list[str]:
    """Every cluster with something left on this machine: a record, a state directory or a namespace."""
    ids = {name[len(PREFIX) :] for name in state.known_names(PREFIX)}
    ids.update(name[len(PREFIX) :].rsplit("-", 1)[0] for name in namespaces.list_netns(PREFIX))
    return sorted(ids)


def describe(cluster_id: str) -> dict[str, Any]:
    layout_name = PREFIX + cluster_id
    record = state.load(state.state_dir(layout_name))
    netns = namespaces.list_netns(layout_name + "-")
    entry: dict[str, Any] = {"name": cluster_id, "namespaces": len(netns)}
    if record is None:
        entry.update(kind="unknown", state="left over (no owner record)", nodes=max(0, len(netns) - 1))
        return entry
    entry.update(
        kind=record.kind,
        nodes=record.spec["nodes"],
        link=record.spec["link"],
        node_memory=record.spec.get("node_memory"),
        scheduler=record.spec.get("scheduler"),
        owner_pid=record.owner_pid,
        state="stale (owner gone)" if record.stale else ("up" if record.kind == "persistent" else "job running"),
    )
    processes, nodes = 0, []
    layout = Layout(cluster_id, record.spec["nodes"])
    hierarchy = (
        cgroups.Hierarchy(record.cgroup_version, record.cgroup_group.rsplit("/", 1)[0]) if record.cgroup_group else None
    )
    for node in range(layout.nodes):
        count = len(namespaces.pids_in_netns(layout.netns(node)))
        processes += count
        row: dict[str, Any] = {
            "node": node,
            "host": layout.hostname(node),
            "address": layout.address(node),
            "processes": count,
        }
        if hierarchy:
            group = f"{record.cgroup_group}/n{node}"
            row.update(peak_bytes=cgroups.peak_bytes(hierarchy, group), oom_kills=cgroups.oom_kills(hierarchy, group))
        nodes.append(row)
    entry.update(processes=processes, node_detail=nodes)
    return entry


def status(args: argparse.Namespace) -> int:
    entries = [describe(cluster_id) for cluster_id in cluster_ids()]
    if args.json:
        print(json.dumps(entries, indent=2))
        return 0
    if not entries:
        print("no virtual cluster on this machine")
        return 0
    rows = []
    for e in entries:
        link = e.get("link") or {}
        rows.append(
            (
                e["name"],
                e["kind"] + (f", {e['scheduler']}" if e.get("scheduler") else ""),
                e["state"],
                e.get("nodes", "-"),
                e.get("processes", "-"),
                f"{link['rate_bps'] / 1e9:g} Gb/s" if link.get("rate_bps") else "host speed",
                f"{e['node_memory'] / _MIB:,.0f} MiB" if e.get("node_memory") else "-",
            )
        )
    print(format_table(["name", "kind", "state", "nodes", "processes", "links", "node memory"], rows))
    return 0


# -- down ------------------------------------------------------------------------------


def add_down_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--name",
        default=None,
        help=f"remove this cluster only (default: the running cluster {DEFAULT_NAME!r} and "
        f"whatever killed runs left behind)",
    )


def down(args: argparse.Namespace) -> int:
    if args.name is not None:
        Layout(args.name, 1)  # a precise error for a malformed name
        targets = [args.name] if args.name in cluster_ids() else []
        if not targets:
            print(f"no virtual cluster named {args.name}")
            return 1
        entry = describe(args.name)
        if entry["kind"] == "job" and entry["state"] == "job running":
            raise ClusterError(
                f"cluster {args.name} belongs to the running job of process {entry['owner_pid']}: "
                f"end that job and it removes its cluster"
            )
    else:
        targets = [cid for cid in cluster_ids() if cid == DEFAULT_NAME or describe(cid)["state"] != "job running"]
    if not targets:
        print("nothing to remove")
        return 0
    failed = 0
    for cluster_id in targets:
        kind = describe(cluster_id)["state"]
        try:
            remove_cluster(cluster_id)
            print(f"removed virtual cluster {cluster_id} ({kind})")
        except ClusterError as error:
            print(f"mailrail cluster down: {error}", file=sys.stderr)
            failed += 1
    return 1 if failed else 0


VERBS = {
    "up": (add_up_arguments, up),
    "exec": (add_exec_arguments, exec_on_head),
    "status": (add_status_arguments, status),
    "down": (add_down_arguments, down),
}
