"""One job on a virtual cluster given as a :class:`~mailrail_tools.cluster.spec.ClusterSpec`, and what it did.

The callers (``mailrail run``, ``mailrail replay``, the benchmark drivers) turn their flags into the
spec (:func:`mailrail_tools.cluster.options.cluster_spec`) and say which ranks are victims; nothing here
knows a command's flags.  The job itself is started by the job runner's one entry point
(:func:`mailrail_tools.jobs.job.run_job`, on :class:`~mailrail_tools.jobs.job.OnCluster`); what is the cluster's
stays here: opening or attaching it, and what its nodes and links saw of the job.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator, Sequence

from mailrail.errors import ClusterError

from ..jobs.job import Job, OnCluster, run_job
from ..jobs.report import FailureReport
from .spec import ClusterSpec
from .virtual import ClusterJob, VirtualCluster

_MIB = 2**20


@contextlib.contextmanager
def open_cluster(spec: ClusterSpec, running: str | None = None) -> Iterator[VirtualCluster]:
    """The cluster a job runs on: a new one of *spec*, removed after the job; or, with *running*, the
    running cluster of that name (``mailrail cluster up``), on whose first ``spec.nodes`` nodes the
    memory caps of *spec* apply during the job and are lifted after (links and slots are its own)."""
    if running is None:
        with VirtualCluster(spec) as cluster:
            yield cluster
        return
    cluster = VirtualCluster.attach(running)
    if spec.nodes > cluster.spec.nodes:
        raise ClusterError(
            f"a job on {spec.nodes} nodes does not fit the running cluster {running} of {cluster.spec.nodes}"
        )
    caps = {node: spec.memory_limit(node) for node in range(spec.nodes)}
    with cluster.memory_caps({node: cap for node, cap in caps.items() if cap is not None}):
        yield cluster


def run_and_report(
    spec: ClusterSpec,
    ranks: int,
    program: Sequence[str],
    *,
    running: str | None = None,
    timeout: float | None = None,
    command: str = "mailrail run",
    launcher: str = "mpiexec",
    verbose: bool = False,
) -> int:
    """Run *program* on *ranks* ranks of the cluster :func:`open_cluster` gives for *spec* and *running*,
    started by *launcher* (``mpiexec``, or ``srun`` on a Slurm cluster), bounded by *timeout* seconds;
    say where and what happened in plain words on standard error (a failure in one line, the MPI's own
    messages in a log unless *verbose*), and return the command's exit status."""
    with FailureReport(ranks, verbose=verbose) as report:
        with open_cluster(spec, running) as cluster:
            print(f"{command}: {ranks} ranks on {describe(cluster)} through {launcher}", file=sys.stderr, flush=True)
            job = run_job(Job(ranks, program, OnCluster(cluster, launcher), timeout=timeout), report=report)
            assert isinstance(job, ClusterJob)  # (what a virtual cluster's run returns)
        for line in outcome(job, timeout):
            print(f"{command}: {line}", file=sys.stderr)
        if job.timed_out or job.out_of_memory_node is not None:  # (said above: what the job printed then, kept)
            report.show_first_traceback()
            kept = report.kept()
            if kept:
                print(f"{command}: kept in a log{kept}", file=sys.stderr)
        else:
            report.say(command, exit_status(job))
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
    if described.get("scheduler"):
        extras.append(f"{described['scheduler'].capitalize()} on the nodes")
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
    crossed = f"{job.network_bytes / 1e6:,.1f} MB crossed the network in {job.wall_s:.1f} s"
    sent = sum(node["tcp_out_segs"] for node in job.nodes)
    again, dropped = sum(node["tcp_retrans_segs"] for node in job.nodes), sum(node["link_drops"] for node in job.nodes)
    if again or dropped:  # a shallow link queue lost packets: what TCP sent again
        crossed += f"; the links dropped {dropped} packets, TCP sent {again} of {sent} segments again"
    lines.append(crossed)
    return lines
