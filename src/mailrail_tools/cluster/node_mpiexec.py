"""How each MPI's ``mpiexec`` starts ranks on the virtual nodes, and which transport it must use.

(Which MPI runs here, its ``mpiexec`` and the ``srun --mpi`` plugin outside a cluster are the job runner's:
:mod:`mailrail_tools.jobs.which_mpi`.)

Open MPI (PRRTE) and MPICH (Hydra) both start remote ranks through ``ssh``;
both are told to use the cluster's ssh stand-in instead.  Between nodes the
ranks must talk TCP over the cluster's links, inside a node shared memory:

- Open MPI: the ob1 messaging layer with the ``self``, ``sm`` and ``tcp``
  transports, TCP (and PRRTE's own out-of-band channel) restricted to the
  cluster's subnet.  ``sm`` pairs only ranks on one node, as Open MPI sees nodes
  by their daemon.
- MPICH: the OFI netmod with libfabric's ``tcp`` provider.  Its UCX netmod finds
  the other namespaces' ranks on the same machine and moves their messages
  through shared memory (nothing crosses the links), and its UCX TCP transport
  hangs under a plain incast.  Hydra's proxies reach ``mpiexec`` by the head's
  address (``-localhost``): the nodes cannot resolve the head's host name.

Open MPI yields the core when idle on the cluster (``mailrail run`` alone turns
that off, see :mod:`mailrail_tools.jobs.which_mpi`): every node's ranks share the machine's
cores, and ranks spinning in blocking calls (start-up, the barriers between
trials) starve the ranks still starting; yielding shortens the job and leaves
the trials themselves no slower (docs: virtual cluster).
"""

from __future__ import annotations

import dataclasses
import subprocess

from mailrail.errors import ClusterError

from ..jobs.which_mpi import SRUN_MPI_PLUGINS
from .spec import NODE_INTERFACE, SUBNET


@dataclasses.dataclass(frozen=True)
class Launcher:
    flavor: str  # "openmpi" | "mpich"
    mpiexec: str

    def argv(self, agent: str, hostfile: str, head_address: str, ranks: int) -> list[str]:
        """``mpiexec ...`` up to the program: placement from *hostfile*, remote starts through *agent*."""
        if self.flavor == "openmpi":
            return [self.mpiexec, "--hostfile", hostfile, "--map-by", "slot", "--bind-to", "none", "-n", str(ranks)]
        return [
            self.mpiexec,
            "-launcher",
            "ssh",
            "-launcher-exec",
            agent,
            "-localhost",
            head_address,
            "-f",
            hostfile,
            "-n",
            str(ranks),
        ]

    def environment(self, agent: str) -> dict[str, str]:
        if self.flavor == "openmpi":
            return {
                "PRTE_MCA_plm_ssh_agent": agent,
                "OMPI_MCA_mpi_yield_when_idle": "1",
                "OMPI_MCA_pml": "ob1",
                "OMPI_MCA_btl": "self,sm,tcp",
                "OMPI_MCA_btl_tcp_if_include": SUBNET,
                "PRTE_MCA_oob_tcp_if_include": SUBNET,
                "PMIX_MCA_ptl_tcp_if_include": SUBNET,
            }
        return {"MPICH_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": NODE_INTERFACE}

    @property
    def srun_mpi(self) -> str:
        """The ``srun --mpi`` plugin that starts this MPI's ranks: the process-management interface its wheel
        speaks with Slurm 22.05 (tests/tools/cluster/test_slurm.py runs both): Open MPI 5's PMIx client with Slurm's
        PMIx 4 server, MPICH through PMI-2."""
        return SRUN_MPI_PLUGINS[self.flavor]


def detect(mpiexec: str) -> Launcher:
    """Which launcher *mpiexec* is, from its ``--version``; other MPIs are a clear error."""
    try:
        completed = subprocess.run([mpiexec, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ClusterError(f"cannot run `{mpiexec} --version`: {error}") from None
    text = completed.stdout + completed.stderr
    if "Open MPI" in text or "PRRTE" in text or "prterun" in text:
        return Launcher("openmpi", mpiexec)
    if "HYDRA" in text or "MPICH" in text:
        return Launcher("mpich", mpiexec)
    first = text.strip().splitlines()[0] if text.strip() else "(no output)"
    raise ClusterError(f"the virtual cluster knows Open MPI's and MPICH's mpiexec; {mpiexec} says {first!r}")
