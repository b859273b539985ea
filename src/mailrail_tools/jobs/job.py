"""Starting a job: the one entry point every command that starts an MPI job calls (:func:`run_job`).

A :class:`Job` says how many ranks run which program, where (:data:`Where`: ``mpiexec`` on this machine,
``srun`` in the Slurm allocation this runs in, or a virtual cluster), for how long at most and with what
added to its environment; :func:`run_job` chooses the launcher's command line and environment for that
place, runs the job bounded (:func:`~mailrail_tools.jobs.bounded.run_bounded`: no process of it outlives it) and
returns a :class:`JobResult`.  Callers: ``mailrail run`` (:mod:`mailrail_tools.cli.run`), a job on a virtual
cluster said in plain words (:mod:`mailrail_tools.cluster.job_on_cluster`, used by ``mailrail run --cluster`` and
``mailrail replay --cluster``), ``compare``'s and ``sweep``'s adversarial runs (:mod:`mailrail_tools.bench.jobs`)
and :func:`run_mailrail`.

The virtual cluster lies above the job runner (it runs its jobs through :mod:`.launch`), so a job on one is
handed the cluster itself (:class:`OnCluster`, any :class:`ClusterHost`): this module imports no cluster.
"""

from __future__ import annotations

import dataclasses
import functools
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Protocol

from .bounded import run_bounded
from .which_mpi import LaunchError, mpi_environment, mpiexec_argv, srun_argv, srun_mpi_plugin

if TYPE_CHECKING:
    from .launcher_messages import LauncherMessageFilter
    from .report import FailureReport


@dataclasses.dataclass
class JobResult:
    """What a job did: its launcher's command line and exit status (``-SIGKILL`` when it was ended at its
    time-out, *timed_out*), its wall-clock seconds and its output (None where it was not captured)."""

    argv: list[str]
    returncode: int
    timed_out: bool
    wall_s: float
    stdout: str | None
    stderr: str | None


@dataclasses.dataclass(frozen=True)
class Here:
    """``mpiexec`` of the MPI mpi4py loads, every rank on this machine."""


@dataclasses.dataclass(frozen=True)
class InAllocation:
    """``srun`` inside the Slurm allocation this runs in (an ``sbatch`` script, ``salloc``), with the ``--mpi``
    plugin of this Python's MPI; on its first *nodes* nodes, the ranks in blocks (5 ranks on 2 nodes: 3 and 2),
    or, with *nodes* None, where ``srun`` places them."""

    nodes: int | None = None

    def placement(self, ranks: int) -> list[str]:
        if self.nodes is None:
            return []
        if not 1 <= self.nodes <= ranks:
            raise LaunchError(f"{ranks} rank(s) cannot fill {self.nodes} nodes of the allocation")
        per_node = -(-ranks // self.nodes)
        return [f"--nodes={self.nodes}", f"--ntasks-per-node={per_node}", "--distribution=block"]


class ClusterHost(Protocol):
    """What runs a job on a virtual cluster: :class:`mailrail_tools.cluster.VirtualCluster`, whose
    :meth:`~mailrail_tools.cluster.VirtualCluster.run` returns a :class:`JobResult` with the cluster's own account
    (a :class:`~mailrail_tools.cluster.ClusterJob`: the network's bytes, each node's memory and OOM kills)."""

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
    ) -> JobResult: ...


@dataclasses.dataclass(frozen=True)
class OnCluster:
    """A virtual cluster's nodes (its first *nodes*, default all), the job started by *launcher*: ``mpiexec``,
    or ``srun`` on a cluster running Slurm."""

    cluster: ClusterHost
    launcher: str = "mpiexec"
    nodes: int | None = None


#: Where a job runs.
Where = Here | InAllocation | OnCluster


@dataclasses.dataclass(frozen=True)
class Job:
    """One MPI job: *ranks* ranks of *program* (the command line every rank runs), at *where*, ended after
    *timeout* seconds (None: no bound), its environment this process's with the MPI's launch settings
    (:func:`~mailrail_tools.jobs.which_mpi.mpi_environment`), then *env*, then what *report* needs.

    Output: *capture* keeps both streams, *capture_stderr* standard error only (standard output passes
    live); without either the job's output passes on, standard error through a pipe without NUL bytes when
    *clean_stderr* (a virtual cluster always cleans it).
    """

    ranks: int
    program: Sequence[str]
    where: Where = Here()
    timeout: float | None = None
    env: Mapping[str, str] | None = None
    capture: bool = False
    capture_stderr: bool = False
    clean_stderr: bool = True

    @property
    def launcher(self) -> str:
        """``mpiexec`` or ``srun``: what starts the ranks."""
        if isinstance(self.where, InAllocation):
            return "srun"
        return self.where.launcher if isinstance(self.where, OnCluster) else "mpiexec"

    @functools.cached_property
    def launch_argv(self) -> list[str]:
        """The launcher's command line here or in the allocation (a virtual cluster makes its own), found once:
        a :class:`~mailrail_tools.jobs.which_mpi.LaunchError` (no ``mpiexec``, no ``srun``) is raised here."""
        if isinstance(self.where, InAllocation):
            return srun_argv(
                self.ranks, self.program, mpi_plugin=srun_mpi_plugin(), placement=self.where.placement(self.ranks)
            )
        if isinstance(self.where, OnCluster):
            raise ValueError("a virtual cluster makes its job's command line itself")
        return mpiexec_argv(self.ranks, self.program)


def run_job(job: Job, *, report: FailureReport | None = None) -> JobResult:
    """Run *job* where it says, bounded by its time-out; whatever way this returns or raises, no process of
    the job is left alive.  A job ended at its time-out returns with ``timed_out`` (it raises nothing); a
    job that cannot start (no ``mpiexec``, no ``srun``) raises :class:`~mailrail_tools.jobs.which_mpi.LaunchError`
    before anything runs.

    *report*, when given, gets what the ranks record of their failures (its variable in the job's
    environment, after *job*'s own) and the MPI's own messages (kept out of the output, unless verbose),
    for the one line it says at the end (:meth:`~mailrail_tools.jobs.report.FailureReport.say`).
    """
    extra = {**(job.env or {}), **(report.environment if report is not None else {})}
    messages = report.messages if report is not None else None
    if isinstance(job.where, OnCluster):
        return job.where.cluster.run(
            job.ranks,
            job.program,
            timeout=job.timeout,
            env=extra or None,
            capture=job.capture,
            capture_stderr=job.capture_stderr,
            nodes=job.where.nodes,
            launcher=job.where.launcher,
            launcher_messages=messages,
        )
    argv = job.launch_argv
    start = time.monotonic()
    try:
        completed = run_bounded(
            argv,
            timeout=job.timeout,
            env=mpi_environment(extra),
            capture=job.capture,
            capture_stderr=job.capture_stderr,
            local=isinstance(job.where, Here),
            clean_stderr=job.clean_stderr,
            launcher_messages=messages,
        )
    except subprocess.TimeoutExpired as expired:
        return JobResult(
            argv, -signal.SIGKILL, True, time.monotonic() - start, _text(expired.output), _text(expired.stderr)
        )
    return JobResult(argv, completed.returncode, False, time.monotonic() - start, completed.stdout, completed.stderr)


def run_mailrail(
    ranks: int, args: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None, capture: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m mailrail_tools ARGS`` on *ranks* ranks here, killed after *timeout* seconds
    (``subprocess.TimeoutExpired`` then, with what it printed)."""
    program = [sys.executable, "-m", "mailrail_tools", *args]
    result = run_job(Job(ranks, program, timeout=timeout, env=env, capture=capture, clean_stderr=False))
    if result.timed_out:
        raise subprocess.TimeoutExpired(result.argv, timeout, output=result.stdout, stderr=result.stderr)
    return subprocess.CompletedProcess(result.argv, result.returncode, result.stdout, result.stderr)


def _text(data: str | bytes | None) -> str | None:
    return data.decode(errors="replace") if isinstance(data, bytes) else data
