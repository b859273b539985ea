"""``mailrail run --cluster``: one job on a virtual cluster, and what it did, in plain words."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence

from .options import ClusterChoice, open_cluster, parse_ranks
from .privileges import rerun_without_root
from .virtual import ClusterJob, VirtualCluster

_MIB = 2**20


def run_on_cluster(args: argparse.Namespace, choice: ClusterChoice, program: Sequence[str]) -> int:
    """``mailrail run --cluster``: victims from ``--victim-ranks`` or from ``bench adversarial``'s own flags."""
    status = rerun_without_root(args.mailrail_argv)
    if status is not None:
        return status
    victims = parse_ranks(args.victim_ranks)
    if not victims and args.command[:2] == ["bench", "adversarial"]:
        from ..bench.adversarial import victims_of_command

        victims = victims_of_command(args.command[2:], args.ranks)
    return run_job(args, choice, args.ranks, program, victims)


def run_job(
    args: argparse.Namespace,
    choice: ClusterChoice,
    ranks: int,
    program: Sequence[str],
    victims: Sequence[int] = (),
    command: str = "mailrail run",
) -> int:
    """Run *program* on *ranks* ranks of the cluster *choice* names (bounded by ``args.timeout``), say
    where and what happened in plain words on standard error, and return the command's exit status."""
    with open_cluster(args, choice, ranks, victims) as cluster:
        print(f"{command}: {ranks} ranks on {describe(cluster)}", file=sys.stderr, flush=True)
        job = cluster.run(ranks, program, timeout=args.timeout)
    for line in outcome(job, args.timeout):
        print(f"{command}: {line}", file=sys.stderr)
    return exit_status(job)


def exit_status(job: ClusterJob) -> int:
    """What the command exits with: the job's status, 124 after a timeout, 128+N when killed by signal N
    (137 when a node's out-of-memory kill ended it: the kernel's SIGKILL)."""
    if job.timed_out:
        return 124
    if job.out_of_memory_node is not None:
        return 128 + signal.SIGKILL
    return job.returncode if job.returncode >= 0 else 128 - job.returncode


def describe(cluster: VirtualCluster) -> str:
    return summary(cluster.describe())


def summary(described: dict) -> str:
    """``virtual cluster j1a2b (4 nodes, Open MPI over TCP between nodes, links 1 Gb/s, ...)``, from
    :meth:`VirtualCluster.describe` (what results store as their ``"cluster"``)."""
    extras = []
    link = described["link"]
    if link["rate_bps"]:
        extras.append(f"links {link['rate_bps'] / 1e9:g} Gb/s")
    if link["delay_s"]:
        extras.append(f"delay {link['delay_s'] * 1e6:g} us")
    if link["queue"]:
        queue = link["queue"]
        extras.append(f"queue {queue['limit']} {queue['unit']}")
    if described["node_memory"]:
        extras.append(f"node memory {described['node_memory'] / _MIB:,.0f} MiB")
    if described["victim_node_memory"] and described["victim_nodes"]:
        extras.append(
            f"victim node(s) {described['victim_nodes']} capped at {described['victim_node_memory'] / _MIB:,.0f} MiB"
        )
    flavor = {"openmpi": "Open MPI", "mpich": "MPICH"}[described["mpi"]]
    return (
        f"virtual cluster {described['name']} ({described['nodes']} nodes, {flavor} over TCP between nodes"
        + "".join(", " + e for e in extras)
        + ")"
    )


def outcome(job: ClusterJob, timeout: float | None) -> list[str]:
    lines = []
    for node in job.nodes:
        if node["oom_kills"]:
            cap = f"cap {node['limit_bytes'] / _MIB:,.0f} MiB" if node["limit_bytes"] else "no cap of its own"
            ended = "; the job was ended then" if node["node"] == job.out_of_memory_node else ""
            lines.append(
                f"node {node['node']} ran out of memory after {node['oom_after_s']:.1f} s ({cap}): the "
                f"kernel killed {node['oom_kills']} process(es) there{ended}"
            )
    if job.timed_out:
        lines.append(f"killed after {timeout:g} s")
    lines.append(f"{job.network_bytes / 1e6:,.1f} MB crossed the network in {job.wall_s:.1f} s")
    return lines
