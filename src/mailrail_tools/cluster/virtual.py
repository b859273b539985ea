"""``VirtualCluster``: nodes as network namespaces on this machine, and MPI jobs across them.

Each node is a network namespace with its own UTS namespace (its own host
name, so MPI sees separate nodes), a memory cgroup, and one veth link to a
bridge in the head namespace.  The head is the cluster's switch and its login
node: ``mpiexec`` runs there and starts the ranks on the nodes through an ssh
stand-in that enters a node's cgroup and namespaces.  Inside a node ranks share
memory; between nodes every byte crosses a link, shaped by ``tc`` when asked.

Use it as a context manager; whatever happens inside (an error, a timeout,
a termination signal), leaving the block removes every namespace, link, cgroup
and process the cluster made; if this process dies without leaving it (SIGKILL),
a watchdog (:func:`mailrail_tools.jobs.control.on_owner_death`) removes the cluster::

    with VirtualCluster(ClusterSpec(nodes=4)) as cluster:
        job = cluster.run(16, [sys.executable, "app.py"], timeout=300)
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from mailrail.errors import ClusterError

from ..jobs import control
from ..jobs.bounded import JobStopped, run_bounded
from ..jobs.job import JobResult
from ..jobs.launcher_messages import LauncherMessageFilter
from ..jobs.which_mpi import find_mpiexec, mpi_environment, srun_argv
from . import cgroups, namespaces, slurm, state
from .node_mpiexec import Launcher, detect
from .spec import (
    BRIDGE,
    NODE_INTERFACE,
    PREFIX,
    ClusterSpec,
    Layout,
    Link,
    Queue,
    agent_script,
    hostfile,
    link_commands,
    new_cluster_id,
    ranks_per_node,
    tc_commands,
)

#: The variable set inside the user namespace that ``mailrail`` re-executes itself in without root.
USERNS_VARIABLE = "MAILRAIL_CLUSTER_USERNS"


@dataclasses.dataclass
class ClusterJob(JobResult):
    """What one mpiexec job on the cluster did: what any job did (:class:`~mailrail_tools.jobs.job.JobResult`) and
    what the cluster saw of it."""

    #: Bytes the nodes put on their links during the job (each byte that crossed the switch, once).
    network_bytes: int
    #: Per node: {"oom_kills": kills during the job, "oom_after_s": seconds from the start to the first
    #: kill seen there (None without one), "peak_bytes": memory high-water mark, "limit_bytes",
    #: "tcp_out_segs", "tcp_retrans_segs": TCP segments it sent and sent again during the job,
    #: "link_drops": packets its link's queues dropped, both ways}.
    nodes: list[dict[str, Any]]

    @property
    def out_of_memory(self) -> bool:
        """A node's memory cap made the kernel kill a process of this job."""
        return any(node["oom_kills"] for node in self.nodes)

    @property
    def out_of_memory_node(self) -> int | None:
        """The node of the job's first OOM kill (None without one)."""
        first = first_out_of_memory(self.nodes)
        return None if first is None else int(first["node"])

    @property
    def out_of_memory_after_s(self) -> float | None:
        """Seconds from the job's start to its first OOM kill (None without one)."""
        first = first_out_of_memory(self.nodes)
        return None if first is None else first["oom_after_s"]

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def first_out_of_memory(nodes: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The entry of :attr:`ClusterJob.nodes` whose OOM kill came first (None when no node had one)."""
    return min((node for node in nodes if node["oom_kills"]), key=lambda node: node["oom_after_s"], default=None)


class VirtualCluster:
    """A virtual cluster of ``spec.nodes`` nodes (see the module's description)."""

    def __init__(self, spec: ClusterSpec, *, name: str | None = None, persistent: bool = False) -> None:
        self.spec = spec
        self.persistent = persistent
        self.layout = Layout(name or new_cluster_id(os.getpid(), secrets.randbits(20)), spec.nodes)
        self.state_dir = state.state_dir(self.layout.name)
        self.agent = os.path.join(self.state_dir, "node-exec")
        self.record: state.OwnerRecord | None = None
        self._hierarchy: cgroups.Hierarchy | None = None
        self._launcher: Launcher | None = None
        #: Cancels the removal the owner-death watchdog would do (a job's cluster, from up() to down()).
        self._unregister_removal: Callable[[], None] | None = None
        #: Cancels the removal at the command's end (from up() to down(); a persistent one's to the end of up()).
        self._forget_at_command_end: Callable[[], None] | None = None

    # -- life cycle ------------------------------------------------------------------
    # Signals: mailrail_tools.cli.main turns SIGINT/SIGTERM/SIGHUP into control.Terminated (one mechanism
    # for every command); here each build command and the whole teardown defer them, so a signal never
    # splits a step in two.  A signal can still land where no block removes the cluster: after up() and
    # before the `with` holds it (in __enter__), or as down() starts, before it defers signals.  So the
    # cluster is also registered with the command's end (control.at_command_end: mailrail removes it
    # before it exits), and the owner-death watchdog removes one whose owner never got there (SIGKILL).

    def __enter__(self) -> VirtualCluster:
        self.up()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.down()

    def up(self) -> None:
        """Build the cluster; if any step fails, remove what was made and raise ClusterError."""
        check_privileges()
        for name in ("ip", "unshare", "nsenter", "umount") + (("tc",) if self.spec.link.shaped else ()):
            namespaces.tool(name)
        if self.spec.scheduler == "slurm":
            slurm.ensure_installed()
        if os.path.exists(self.state_dir) or namespaces.list_netns(self.layout.name + "-"):
            raise ClusterError(
                f"a cluster named {self.layout.cluster_id} exists already "
                f"(mailrail cluster status lists it; mailrail cluster down removes it)"
            )
        self.record = state.OwnerRecord.for_this_process(
            self.layout.cluster_id, "persistent" if self.persistent else "job", self.spec.describe()
        )
        try:
            with control.deferred_signals():
                # first: however this command ends or this process dies from here on, the cluster goes
                self._forget_at_command_end = control.at_command_end(self.down)
                if not self.persistent:
                    self._unregister_removal = control.on_owner_death(removal_command(self.layout.cluster_id))
                state.save(self.state_dir, self.record)  # before anything exists: a killed run stays removable
            self._make_cgroups()
            self._make_head()
            for node in range(self.spec.nodes):
                self._make_node(node)
            self._write_agent()
            if self.spec.scheduler == "slurm":
                node_cpus = self.spec.node_slots or slurm.DEFAULT_NODE_CPUS
                slurm.start(self.layout, self.agent, self.slurm_paths, node_cpus)
        except BaseException:
            self.down()
            raise
        if self.persistent:  # built: from here on it outlives the command
            self._forget_command_end()

    def down(self) -> None:
        """Remove the cluster: end its processes (by id) and wait until they are gone, delete namespaces,
        links, cgroups, state; returns once nothing of it is left, or raises ClusterError saying what is
        left and why.

        Termination signals wait until it is done.  If it fails, the owner-death watchdog tries again
        when this process exits."""
        with control.deferred_signals():
            try:
                remove_cluster(self.layout.cluster_id)
            finally:
                self._forget_command_end()  # (tried once; what is left was said)
            if self._unregister_removal is not None:
                self._unregister_removal()
                self._unregister_removal = None

    def _forget_command_end(self) -> None:
        if self._forget_at_command_end is not None:
            self._forget_at_command_end()
            self._forget_at_command_end = None

    @classmethod
    def attach(cls, name: str) -> VirtualCluster:
        """The running cluster *name* (made by ``mailrail cluster up``), to run jobs on."""
        layout_name = Layout(name, 1).name
        record = state.load(state.state_dir(layout_name))
        if record is None:
            raise ClusterError(
                f"no virtual cluster named {name} is up (mailrail cluster up --name {name} "
                f"makes one; mailrail cluster status lists them)"
            )
        cluster = cls(spec_from_record(record), name=name, persistent=record.kind == "persistent")
        cluster.record = record
        if record.cgroup_group:
            cluster._hierarchy = cgroups.Hierarchy(record.cgroup_version or 1, os.path.dirname(record.cgroup_group))
        return cluster

    # -- building ------------------------------------------------------------------------

    def _make_cgroups(self) -> None:
        hierarchy = cgroups.find_hierarchy() if not os.environ.get(USERNS_VARIABLE) else None
        if hierarchy is None:
            if self.spec.memory_capped:
                raise ClusterError(
                    "--node-memory / --victim-node-memory need memory cgroups, and this machine "
                    "offers none to this process (they need root; a user namespace has none)"
                )
            return
        group = hierarchy.group(self.layout.name)
        self.record.cgroup_version, self.record.cgroup_group = hierarchy.version, group
        state.save(self.state_dir, self.record)
        try:
            cgroups.create(hierarchy, group, None)
        except ClusterError:
            self.record.cgroup_version = self.record.cgroup_group = None
            state.save(self.state_dir, self.record)
            if self.spec.memory_capped:
                raise
            return  # without cgroups: no caps, and processes are found by their namespaces
        cgroups.enable_memory_controller(hierarchy, group)
        self._hierarchy = hierarchy
        cgroups.create(hierarchy, self._cgroup(None), None)
        for node in range(self.spec.nodes):
            cgroups.create(hierarchy, self._cgroup(node), self.spec.memory_limit(node))

    def _make_head(self) -> None:
        head = self.layout.netns(None)
        namespaces.add_netns(head)
        namespaces.add_uts(self._uts(None), self.layout.hostname(None))
        namespaces.run(["ip", "-n", head, "link", "add", BRIDGE, "type", "bridge"], "creating the switch")
        self._quiet_ipv6(head, BRIDGE)
        namespaces.run(
            ["ip", "-n", head, "addr", "add", f"{self.layout.address(None)}/24", "dev", BRIDGE], "addressing the head"
        )
        namespaces.run(["ip", "-n", head, "link", "set", BRIDGE, "up"], "starting the switch")

    def _make_node(self, node: int) -> None:
        layout = self.layout
        netns, head, port = layout.netns(node), layout.netns(None), layout.switch_port(node)
        namespaces.add_netns(netns)
        namespaces.add_uts(self._uts(node), layout.hostname(node))
        namespaces.run(
            ["ip", "-n", netns, "link", "add", NODE_INTERFACE, "type", "veth", "peer", "name", port, "netns", head],
            f"linking node {node} to the switch",
        )
        self._quiet_ipv6(netns, NODE_INTERFACE)
        self._quiet_ipv6(head, port)
        namespaces.run(
            ["ip", "-n", head, "link", "set", port, "master", BRIDGE, "up"], f"plugging node {node} into the switch"
        )
        namespaces.run(
            ["ip", "-n", netns, "addr", "add", f"{layout.address(node)}/24", "dev", NODE_INTERFACE],
            f"addressing node {node}",
        )
        namespaces.run(["ip", "-n", netns, "link", "set", NODE_INTERFACE, "up"], f"starting node {node}'s link")
        # The link's rate, delay and queue, in both directions: the node's uplink and its switch port.
        for where, device in ((netns, NODE_INTERFACE), (head, port)):
            for command in link_commands(device, self.spec.link):
                namespaces.run(["ip", "-n", where, *command[1:]], f"setting node {node}'s link to carry frames")
            for command in tc_commands(device, self.spec.link):
                try:
                    namespaces.run(["tc", "-n", where, *command[1:]], f"shaping node {node}'s link")
                except ClusterError as error:
                    if "netem" in command and "unknown" in str(error).lower():
                        raise ClusterError(
                            "--link-delay needs the kernel's netem queueing discipline (sch_netem), which this "
                            f"kernel does not have ({error}); run without --link-delay"
                        ) from None
                    raise

    @staticmethod
    def _quiet_ipv6(netns: str, device: str) -> None:
        # No IPv6 link-local address, so no neighbour discovery chatter in the link counters.
        namespaces.run(["ip", "-n", netns, "link", "set", device, "addrgenmode", "none"], "configuring a link")

    def _write_agent(self) -> None:
        nodes = [*range(self.spec.nodes), None]
        groups = [[self._cgroup(node)] if self._hierarchy else [] for node in nodes]
        text = agent_script(self.layout, [self._uts(node) for node in nodes], groups, namespaces.tool("nsenter"))
        with open(self.agent, "w") as out:
            out.write(text)
        os.chmod(self.agent, 0o755)

    @property
    def slurm_paths(self) -> slurm.SlurmPaths:
        """Where this cluster's Slurm keeps its configuration, keys, state and logs."""
        return slurm.SlurmPaths.of(self.state_dir)

    def _uts(self, node: int | None) -> str:
        return os.path.join(self.state_dir, ("head" if node is None else f"n{node}") + ".uts")

    def _cgroup(self, node: int | None) -> str:
        return os.path.join(self.record.cgroup_group, "head" if node is None else f"n{node}")

    # -- jobs ------------------------------------------------------------------------------

    @property
    def launcher(self) -> Launcher:
        if self._launcher is None:
            self._launcher = detect(find_mpiexec())
        return self._launcher

    def environment(self, env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The environment of a launch from the head: the MPI's settings for the cluster's links, and on a
        Slurm cluster what its clients need (``SLURM_CONF``) and the ``srun --mpi`` plugin of the MPI
        (``SLURM_MPI_TYPE``, so a plain ``srun`` in ``mailrail cluster exec`` or a batch script works); *env* last."""
        launcher = self.launcher
        extra = dict(launcher.environment(self.agent))
        if self.spec.scheduler == "slurm":
            extra.update(slurm.client_environment(self.slurm_paths), SLURM_MPI_TYPE=launcher.srun_mpi)
        return mpi_environment({**extra, **(env or {})})

    def command(
        self,
        ranks: int,
        program: Sequence[str],
        *,
        nodes: int | None = None,
        env: Mapping[str, str] | None = None,
        launcher: str = "mpiexec",
    ) -> tuple[list[str], dict[str, str]]:
        """The argv (run on the head, through the ssh stand-in) and environment of a job.

        The ranks fill the first *nodes* nodes (default: all, or one per rank when the job
        is smaller than the cluster) in blocks, as :func:`~mailrail_tools.cluster.spec.ranks_per_node` says.
        *launcher* ``mpiexec`` starts them through the ssh stand-in; ``srun`` through the cluster's
        Slurm (``--scheduler slurm``), on the same nodes in the same blocks.
        """
        nodes = min(self.spec.nodes, ranks) if nodes is None else nodes
        if not 1 <= nodes <= self.spec.nodes:
            raise ClusterError(f"a job may use 1..{self.spec.nodes} nodes of this cluster, not {nodes}")
        counts = ranks_per_node(ranks, nodes, self.spec.node_slots)
        if launcher == "srun":
            if self.spec.scheduler != "slurm":
                raise ClusterError(
                    f"--launcher srun needs a cluster running Slurm, and cluster {self.layout.cluster_id} runs "
                    f"none: mailrail cluster up --scheduler slurm"
                )
            # --ntasks-per-node is the first node's count: Slurm's block layout then gives each node what
            # ranks_per_node gives it (5 ranks on 2 nodes: 3 and 2), as the mpiexec hostfile does.
            placement = [
                "--nodelist=" + ",".join(self.layout.hostname(n) for n in range(nodes)),
                f"--nodes={nodes}",
                f"--ntasks-per-node={counts[0]}",
                "--distribution=block",
            ]
            argv = [self.agent, "--exec", "head", *srun_argv(ranks, program, placement=placement)]
            return argv, self.environment(env)
        if launcher != "mpiexec":
            raise ClusterError(f"--launcher must be mpiexec or srun, got {launcher!r}")
        mpiexec = self.launcher
        path = os.path.join(self.state_dir, f"hosts-{mpiexec.flavor}-{'-'.join(map(str, counts))}")
        with open(path, "w") as out:
            out.write(hostfile(self.layout, counts, mpiexec.flavor))
        argv = [
            self.agent,
            "--exec",
            "head",
            *mpiexec.argv(self.agent, path, self.layout.address(None), ranks),
            *program,
        ]
        return argv, self.environment(env)

    def run(
        self,
        ranks: int,
        program: Sequence[str],
        *,
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        capture: bool = False,
        capture_stderr: bool = False,
        nodes: int | None = None,
        launcher: str = "mpiexec",
        launcher_messages: LauncherMessageFilter | None = None,
    ) -> ClusterJob:
        """Run *program* on *ranks* ranks; wait, bounded by *timeout*; say what happened.

        *capture* and *capture_stderr* keep the job's output, as in :func:`mailrail_tools.jobs.bounded.run_bounded`;
        without them the job's output is passed on clean, and *launcher_messages* keeps the MPI's own.
        *launcher* is ``mpiexec`` or, on a Slurm cluster, ``srun`` (see :meth:`command`).

        A job that fails, times out or is interrupted leaves no process behind: what is
        still running in the cluster's namespaces is ended (by process id).

        A node's first out-of-memory kill ends the job at once (its cgroup's counter is read every
        0.1 s while the job runs): the job's ``out_of_memory_node`` and ``out_of_memory_after_s`` say
        where and when; a rank killed for lack of memory would otherwise leave its peers waiting.
        """
        argv, job_env = self.command(ranks, program, nodes=nodes, env=env, launcher=launcher)
        before_bytes, before_kills, before_loss = self.network_bytes(), self.oom_kills(), self.loss_counters()
        self.reset_memory_peaks()
        killed_on: list[int] = []

        def first_oom_kill() -> str | None:
            for node, (now, before) in enumerate(zip(self.oom_kills(), before_kills)):
                if now > before:
                    killed_on.append(node)
                    return f"node {node} ran out of memory"
            return None

        start = time.monotonic()
        timed_out, oom_after = False, None
        try:
            completed = run_bounded(
                argv,
                timeout=timeout,
                env=job_env,
                capture=capture,
                capture_stderr=capture_stderr,
                watch=first_oom_kill if self._hierarchy else None,
                clean_stderr=True,
                launcher_messages=launcher_messages,
            )
        except subprocess.TimeoutExpired as expired:
            timed_out = True
            completed = subprocess.CompletedProcess(argv, -signal.SIGKILL, _text(expired.output), _text(expired.stderr))
        except JobStopped as stopped:
            oom_after = stopped.after_s
            completed = subprocess.CompletedProcess(argv, -signal.SIGKILL, stopped.output, stopped.stderr)
        except BaseException:
            self.end_processes()
            raise
        wall = time.monotonic() - start
        if timed_out or completed.returncode != 0:
            self.end_processes()
        after_kills, after_loss = self.oom_kills(), self.loss_counters()
        peaks, limits = self.memory_peaks(), self.memory_limits()
        per_node = []
        for node in range(self.spec.nodes):
            kills = after_kills[node] - before_kills[node]
            # a kill the job ended by itself before the next reading happened by the job's end
            seen = oom_after if killed_on and node == killed_on[0] else (wall if kills else None)
            per_node.append(
                {
                    "node": node,
                    "oom_kills": kills,
                    "oom_after_s": seen,
                    "peak_bytes": peaks[node],
                    "limit_bytes": limits[node],
                    **{name: after_loss[node][name] - before_loss[node][name] for name in after_loss[node]},
                }
            )
        return ClusterJob(
            argv,
            completed.returncode,
            timed_out,
            wall,
            completed.stdout,
            completed.stderr,
            self.network_bytes() - before_bytes,
            per_node,
        )

    def end_processes(self) -> None:
        """End every job process in the cluster's namespaces and cgroups (all were started through it): all
        but the scheduler's daemons, which the cluster keeps until it is removed."""
        with control.deferred_signals():
            namespaces.end_processes(self._processes)

    def _processes(self) -> set[int]:
        pids = set()
        for netns in self.layout.all_netns():
            pids.update(namespaces.pids_in_netns(netns))
        if self._hierarchy:
            for node in [None, *range(self.spec.nodes)]:
                pids.update(cgroups.processes(self._cgroup(node)))
        pids.discard(os.getpid())
        if self.spec.scheduler == "slurm":
            pids -= set(slurm.daemon_pids(self.slurm_paths).values())
        return pids

    # -- readings ----------------------------------------------------------------------------

    def link_statistics(self) -> list[dict[str, int]]:
        """Each node's uplink counters (its side of the link)."""
        return [namespaces.link_statistics(self.layout.netns(node), NODE_INTERFACE) for node in range(self.spec.nodes)]

    def loss_counters(self) -> list[dict[str, int]]:
        """Per node: TCP segments it sent and sent again, and packets its link's queues dropped (its uplink's
        and its switch port's, towards it)."""
        counters = []
        for node in range(self.spec.nodes):
            netns = self.layout.netns(node)
            tcp = namespaces.tcp_segments(netns)
            drops = namespaces.qdisc_drops(netns, NODE_INTERFACE) + namespaces.qdisc_drops(
                self.layout.netns(None), self.layout.switch_port(node)
            )
            counters.append(
                {"tcp_out_segs": tcp["out_segs"], "tcp_retrans_segs": tcp["retrans_segs"], "link_drops": drops}
            )
        return counters

    def network_bytes(self) -> int:
        """Bytes all nodes have sent over their links (every byte crosses the switch once)."""
        return sum(s["tx_bytes"] for s in self.link_statistics())

    def oom_kills(self) -> list[int]:
        if not self._hierarchy:
            return [0] * self.spec.nodes
        return [cgroups.oom_kills(self._hierarchy, self._cgroup(node)) for node in range(self.spec.nodes)]

    def memory_peaks(self) -> list[int | None]:
        if not self._hierarchy:
            return [None] * self.spec.nodes
        return [cgroups.peak_bytes(self._hierarchy, self._cgroup(node)) for node in range(self.spec.nodes)]

    def memory_limits(self) -> list[int | None]:
        """Each node's memory cap as its cgroup has it now (caps may change between jobs)."""
        if not self._hierarchy:
            return [None] * self.spec.nodes
        return [cgroups.limit_bytes(self._hierarchy, self._cgroup(node)) for node in range(self.spec.nodes)]

    def reset_memory_peaks(self) -> None:
        if self._hierarchy:
            for node in range(self.spec.nodes):
                cgroups.reset_peak(self._hierarchy, self._cgroup(node))

    def set_memory_limits(self, limits: Mapping[int, int | None]) -> None:
        """Change nodes' memory caps between jobs (bytes; None lifts a cap)."""
        if not self._hierarchy:
            raise ClusterError("this cluster has no memory cgroups, so its nodes cannot be capped")
        for node, limit in limits.items():
            cgroups.set_limit(self._hierarchy, self._cgroup(node), limit)

    @contextlib.contextmanager
    def memory_caps(self, limits: Mapping[int, int]) -> Iterator[None]:
        """During one job: cap these nodes (bytes); afterwards they go back to the cluster's own caps."""
        self.set_memory_limits(limits)
        try:
            yield
        finally:
            self.set_memory_limits({node: self.spec.memory_limit(node) for node in limits})

    def describe(self) -> dict[str, Any]:
        """The ``"cluster"`` entry of results: shape, transport, link, memory caps, MPI."""
        return {**self.spec.describe(), "name": self.layout.cluster_id, "mpi": self.launcher.flavor}


def _text(output: str | bytes | None) -> str | None:
    return output.decode(errors="replace") if isinstance(output, bytes) else output


def check_privileges() -> None:
    """Namespaces, links and mounts need root (or CAP_NET_ADMIN and CAP_SYS_ADMIN)."""
    if not namespaces.has_admin_capabilities():
        raise ClusterError(
            "a virtual cluster needs root (or CAP_NET_ADMIN and CAP_SYS_ADMIN); the mailrail command makes one "
            "without root inside a user namespace where the kernel allows that (see mailrail_tools.cluster.privileges)"
        )


def spec_from_record(record: state.OwnerRecord) -> ClusterSpec:
    described = record.spec
    link = described["link"]
    queue = link.get("queue")
    return ClusterSpec(
        nodes=described["nodes"],
        link=Link(link.get("rate_bps"), link.get("delay_s"), Queue(**queue) if queue else None),
        node_memory=described.get("node_memory"),
        victim_node_memory=described.get("victim_node_memory"),
        victim_nodes=tuple(described.get("victim_nodes", ())),
        node_slots=described.get("node_slots"),
        scheduler=described.get("scheduler"),
    )


def removal_command(cluster_id: str) -> list[str]:
    """The command that removes cluster *cluster_id* once its owner is gone (what the watchdog runs)."""
    return [sys.executable, "-m", "mailrail_tools", "cluster", "down", "--name", cluster_id]


def remove_cluster(cluster_id: str) -> None:
    """Remove everything of cluster *cluster_id* that exists, from its record and its names, and return once
    it is all gone: its processes out of the process table (the Slurm daemons and the ranks included), its
    namespaces, cgroups and state directory.

    Raises ClusterError naming what is left and why (each wait is bounded: :data:`~mailrail_tools.jobs.control.GONE_S`
    for the processes to end and be collected, 10 s for each cgroup to empty).  Safe to call on a half-built
    cluster, twice, or on one whose owner was killed.
    """
    name = PREFIX + cluster_id
    directory = state.state_dir(name)
    record = state.load(directory)
    group = record.cgroup_group if record else None

    def processes() -> set[int]:
        pids = set()
        for ns in namespaces.list_netns(name + "-"):  # listed each time: none is missed, however made
            pids.update(namespaces.pids_in_netns(ns))
        if group and os.path.isdir(group):
            for entry in os.listdir(group):
                pids.update(cgroups.processes(os.path.join(group, entry)))
        pids.discard(os.getpid())
        return pids

    problems = []
    left = namespaces.end_processes(processes)
    if left:
        problems.append("processes still there: " + ", ".join(control.why_present(pid) for pid in sorted(left)))
    for ns in namespaces.list_netns(name + "-"):
        try:
            namespaces.delete_netns(ns)
        except ClusterError as error:
            problems.append(str(error))
    if os.path.isdir(directory):
        for entry in os.listdir(directory):
            if entry.endswith(".uts"):
                try:
                    namespaces.remove_uts(os.path.join(directory, entry))
                except ClusterError as error:
                    problems.append(str(error))
    if group:
        try:
            cgroups.remove(group)
        except ClusterError as error:
            problems.append(str(error))
    if problems:
        raise ClusterError(f"cluster {cluster_id} was not removed completely: " + "; ".join(problems))
    state.remove_dir(directory)
    still = namespaces.list_netns(name + "-") + ([directory] if os.path.exists(directory) else [])
    if still:
        raise ClusterError(f"cluster {cluster_id} was not removed completely: {', '.join(still)} still there")
