"""Slurm on a virtual cluster (``mailrail cluster up --scheduler slurm``): Debian's daemons on the namespaces.

The head runs ``munged`` and ``slurmctld`` (it is the cluster's login node: ``srun``, ``sbatch`` and
``sinfo`` run there through ``mailrail cluster exec``); every node runs a ``slurmd`` under its own host
name (the node's UTS namespace), reached at the node's address (``NodeAddr``).  Each daemon is started
through the cluster's ssh stand-in, so it sits in its node's namespaces and memory cgroup, and so do the
job steps it forks: the cluster's teardown finds and ends them all by namespace, like any rank.

Everything the daemons read and write lives in the cluster's state directory (``slurm/`` beside the
owner record), nothing in ``/etc`` or ``/var``: the configuration (``SLURM_CONF`` points the clients at
it), a MUNGE key of the cluster's own and its daemon's socket, the controller's state, each node's spool
and temporary directory, the logs.  Two clusters, or a site's own Slurm on the same machine, never meet.

Choices that differ from a stock installation, each for a reason of this machine:

- ``ProctrackType=proctrack/linuxproc``, ``TaskPlugin=task/none``: Slurm's cgroup plugins want a cgroup
  tree of their own per node; the node's processes already sit in the cluster's memory cgroups (which
  cap them and end them), and the parent links are enough to track a step's processes.
- ``SlurmdParameters=config_overrides`` and ``CPUs=`` per node: the nodes share the machine's cores, as
  they share them under ``mpiexec``; each node offers ``--node-slots`` CPUs (default
  :data:`DEFAULT_NODE_CPUS`), and slurmd does not drain a node whose hardware has fewer.
- ``TmpFS`` per node: Slurm's PMIx plugin makes its per-step directory under ``TmpFS``
  (``spmix_appdir_<uid>_<job>.<step>``); with one ``/tmp`` for every node, the second node's step
  failed with ``Cannot create directory "/tmp/spmix_appdir_0_2.0": File exists``.
- ``MinJobAge=4``: ``sbatch --wait`` polls the controller after 2 s, then 4 times longer each time (up to
  32 s) while the wait is below half of ``MinJobAge``; with the default 300 s a short job's wait returned
  long after the job ended (docs: virtual cluster).  At 4 s it polls every 2 s; a finished job leaves
  ``squeue`` 4 s later (no accounting here).
- ``SLURM_MPI_TYPE`` in the clients' environment: the wheel's MPI and its process-management interface
  (:data:`mailrail_tools.cluster.node_mpiexec.Launcher.srun_mpi`), so a plain ``srun python app.py`` works.

Nothing here kills a process by name: the daemons' pids are kept in ``slurm/daemons.json``, and the
cluster's teardown ends every process of its namespaces and cgroups by pid.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence

from mailrail.errors import ClusterError

from ..jobs import control
from .spec import Layout

#: The Debian packages the Slurm cluster runs on, and for each the commands (or file) that show it is there.
PACKAGES = {
    "slurmctld": ("slurmctld",),
    "slurmd": ("slurmd",),
    "slurm-client": ("srun", "sbatch", "sinfo", "scontrol"),
    "munge": ("munged", "munge"),
    # Slurm's PMIx plugin (mpi_pmix.so, in slurm-wlm-basic-plugins) opens the unversioned libpmix.so,
    # which only the -dev package ships: without it `srun --mpi=pmix` fails to load the plugin.
    "libpmix-dev": ("/usr/lib/*-linux-gnu/libpmix.so",),
}
#: CPUs each node offers Slurm unless ``--node-slots`` says (the nodes share the machine's cores).
DEFAULT_NODE_CPUS = 64
#: Seconds the daemons get to start and every node to report ``idle``.
READY_TIMEOUT_S = 60.0
#: Seconds ``apt-get`` gets to update its lists or install the packages.
APT_TIMEOUT_S = 900.0
PARTITION = "nodes"
_SYSTEM_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


# -- installation --------------------------------------------------------------------------------


def missing_packages() -> list[str]:
    """The packages of :data:`PACKAGES` whose commands or files are not on this machine."""
    missing = []
    for package, needs in PACKAGES.items():
        for need in needs:
            found = glob.glob(need) if need.startswith("/") else _which(need)
            if not found:
                missing.append(package)
                break
    return missing


def _which(command: str) -> str | None:
    return shutil.which(command) or shutil.which(command, path=_SYSTEM_PATH)


def cannot_install() -> str | None:
    """None when what is missing can be installed here (root and apt-get) or nothing is; else why not."""
    missing = missing_packages()
    if not missing:
        return None
    packages = " ".join(missing)
    if os.geteuid() != 0:
        return f"Slurm packages missing ({packages}) and installing them needs root (apt-get install {packages})"
    if _which("apt-get") is None:
        return f"Slurm packages missing ({packages}) and there is no apt-get here to install them"
    return None


def ensure_installed() -> None:
    """Install what :func:`missing_packages` lists with ``apt-get`` (root, Debian); ClusterError if it cannot."""
    missing = missing_packages()
    if not missing:
        return
    reason = cannot_install()
    if reason is not None:
        raise ClusterError(f"--scheduler slurm: {reason}")
    print(f"mailrail: installing {' '.join(missing)} with apt-get (Debian's Slurm and MUNGE)", file=sys.stderr)
    install = ["apt-get", "install", "-y", "--no-install-recommends", *missing]
    completed = _apt(install)
    if completed.returncode != 0:  # a fresh machine may have no package lists yet: update them, once
        _apt(["apt-get", "update"])
        completed = _apt(install)
    left = missing_packages()
    if completed.returncode == 0 and not left:
        return
    detail = " ".join((completed.stderr or completed.stdout).strip().splitlines()[-3:])
    raise ClusterError(f"--scheduler slurm: `{' '.join(install)}` left {' '.join(left) or 'nothing'} missing: {detail}")


def _apt(argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=APT_TIMEOUT_S)


# -- files -------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class SlurmPaths:
    """Where a cluster's Slurm keeps its files: all under ``<state dir>/slurm``."""

    root: str

    @classmethod
    def of(cls, state_dir: str) -> SlurmPaths:
        return cls(os.path.join(state_dir, "slurm"))

    @property
    def conf(self) -> str:
        return os.path.join(self.root, "slurm.conf")

    @property
    def munge_dir(self) -> str:
        """The key, seed and log: readable by root only, as munged demands."""
        return os.path.join(self.root, "munge")

    @property
    def munge_key(self) -> str:
        return os.path.join(self.munge_dir, "munge.key")

    @property
    def munge_socket(self) -> str:
        # munged wants its socket's directory searchable by everyone, its key's by no one: two directories.
        return os.path.join(self.root, "run", "munge.socket")

    @property
    def controller_state(self) -> str:
        return os.path.join(self.root, "state")

    @property
    def logs(self) -> str:
        return os.path.join(self.root, "log")

    def node_dir(self, hostname: str) -> str:
        """A node's spool and temporary directories (``%n`` in slurm.conf is this host name)."""
        return os.path.join(self.root, "nodes", hostname)

    @property
    def daemons(self) -> str:
        """``{"munged": pid, "slurmctld": pid, "slurmd <host>": pid, ...}`` of the running daemons."""
        return os.path.join(self.root, "daemons.json")


def slurm_conf(layout: Layout, paths: SlurmPaths, node_cpus: int) -> str:
    """The cluster's ``slurm.conf``: the head as controller, every node with its address and *node_cpus* CPUs."""
    nodes = "\n".join(
        f"NodeName={layout.hostname(n)} NodeAddr={layout.address(n)} CPUs={node_cpus} State=UNKNOWN"
        for n in range(layout.nodes)
    )
    per_node = os.path.join(paths.root, "nodes", "%n")
    return f"""# Slurm of MailRail virtual cluster {layout.cluster_id} (written by mailrail_tools.cluster.slurm).
ClusterName={layout.name}
SlurmctldHost={layout.hostname(None)}({layout.address(None)})
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={paths.munge_socket}
StateSaveLocation={paths.controller_state}
SlurmctldPidFile={paths.root}/slurmctld.pid
SlurmctldLogFile={paths.logs}/slurmctld.log
SlurmdSpoolDir={per_node}/spool
SlurmdPidFile={per_node}/slurmd.pid
SlurmdLogFile={paths.logs}/slurmd-%n.log
TmpFS={per_node}/tmp
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
KillWait=5
MinJobAge=4
MailProg=/bin/true
{nodes}
PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def client_environment(paths: SlurmPaths) -> dict[str, str]:
    """What ``srun``, ``sbatch`` and ``sinfo`` need to find this cluster's controller."""
    return {"SLURM_CONF": paths.conf}


def _write_files(layout: Layout, paths: SlurmPaths, node_cpus: int) -> None:
    for directory in (paths.root, paths.controller_state, paths.logs, os.path.dirname(paths.munge_socket)):
        os.makedirs(directory, mode=0o755, exist_ok=True)
    os.makedirs(paths.munge_dir, mode=0o700, exist_ok=True)
    for node in range(layout.nodes):
        for sub in ("spool", "tmp"):
            os.makedirs(os.path.join(paths.node_dir(layout.hostname(node)), sub), mode=0o755, exist_ok=True)
    key = os.open(paths.munge_key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    with os.fdopen(key, "wb") as out:
        out.write(os.urandom(1024))  # the cluster's own key: credentials of another MUNGE never decode here
    with open(paths.conf, "w") as out:
        out.write(slurm_conf(layout, paths, node_cpus))


# -- daemons -----------------------------------------------------------------------------------------


def start(layout: Layout, agent: str, paths: SlurmPaths, node_cpus: int, timeout: float = READY_TIMEOUT_S) -> None:
    """Write the files, start munged, slurmctld and a slurmd per node, and wait until every node is idle.

    A daemon that exits, or nodes not idle after *timeout* seconds, is a ClusterError with the end of
    the daemons' logs; what was started is left to the cluster's teardown (it ends it by namespace)."""
    _write_files(layout, paths, node_cpus)
    daemons: dict[str, subprocess.Popen[bytes]] = {}
    deadline = time.monotonic() + timeout

    def launch(name: str, host: str, argv: Sequence[str]) -> None:
        log = open(os.path.join(paths.logs, name.replace(" ", "-") + ".out"), "wb")
        with log, control.deferred_signals():
            # A clean environment: no job mark of a caller (its end would end the daemons), no MPI settings;
            # the system PATH, where Debian puts the daemons (nsenter finds them there).
            daemons[name] = subprocess.Popen(
                [agent, "--exec", host, *argv],
                env={"PATH": _SYSTEM_PATH, **client_environment(paths)},
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # outlives `mailrail cluster up`, and a terminal's Ctrl-C
            )
        with open(paths.daemons, "w") as out:
            json.dump({n: p.pid for n, p in daemons.items()}, out, indent=2)

    launch(
        "munged",
        "head",
        [
            "munged",
            "--foreground",
            f"--socket={paths.munge_socket}",
            f"--key-file={paths.munge_key}",
            f"--pid-file={paths.munge_dir}/munged.pid",
            f"--log-file={paths.munge_dir}/munged.log",
            f"--seed-file={paths.munge_dir}/munged.seed",
        ],
    )
    _wait_for(lambda: os.path.exists(paths.munge_socket), deadline, daemons, paths, "munged's socket")
    launch("slurmctld", "head", ["slurmctld", "-D", "-f", paths.conf])
    for node in range(layout.nodes):
        host = layout.hostname(node)
        launch(f"slurmd {host}", host, ["slurmd", "-D", "-f", paths.conf])
    _wait_for(lambda: _all_idle(layout, agent, paths), deadline, daemons, paths, "every node idle in sinfo")


def daemon_pids(paths: SlurmPaths) -> dict[str, int]:
    """``{"munged": pid, "slurmctld": pid, "slurmd <host>": pid, ...}`` as :func:`start` recorded them
    (empty before it did)."""
    try:
        with open(paths.daemons) as source:
            return {name: int(pid) for name, pid in json.load(source).items()}
    except FileNotFoundError:
        return {}


def node_states(layout: Layout, agent: str, paths: SlurmPaths) -> dict[str, str]:
    """``{host: state}`` as ``sinfo`` on the head reports the nodes (empty while the controller is not up)."""
    completed = subprocess.run(
        [agent, "--exec", "head", "sinfo", "--noheader", "--Node", "--format=%N %T"],
        env={"PATH": _SYSTEM_PATH, **client_environment(paths)},
        capture_output=True,
        text=True,
        timeout=30,
    )
    if completed.returncode != 0:
        return {}
    return dict(line.split(None, 1) for line in completed.stdout.splitlines() if line.strip())


def _all_idle(layout: Layout, agent: str, paths: SlurmPaths) -> bool:
    states = node_states(layout, agent, paths)
    return all(states.get(layout.hostname(n)) == "idle" for n in range(layout.nodes))


def _wait_for(
    ready: Callable[[], bool],
    deadline: float,
    daemons: Mapping[str, subprocess.Popen[bytes]],
    paths: SlurmPaths,
    what: str,
) -> None:
    while True:
        exited = {name: p.returncode for name, p in daemons.items() if p.poll() is not None}
        if exited:
            raise ClusterError(
                "Slurm on the virtual cluster did not start: "
                + ", ".join(f"{name} exited with status {code}" for name, code in exited.items())
                + log_tails(paths)
            )
        if ready():
            return
        if time.monotonic() >= deadline:
            raise ClusterError(f"Slurm on the virtual cluster did not start: no {what} in time" + log_tails(paths))
        time.sleep(0.2)


def log_tails(paths: SlurmPaths, lines: int = 5) -> str:
    """The last *lines* lines of each daemon log, to put in an error."""
    parts = []
    if os.path.isdir(paths.logs):
        for name in sorted(os.listdir(paths.logs)):
            with open(os.path.join(paths.logs, name), errors="replace") as source:
                tail = source.read().strip().splitlines()[-lines:]
            if tail:
                parts.append(f"\n--- {name} ---\n" + "\n".join(tail))
    return "".join(parts)
