"""How a rank that fails ends its whole job: the traceback once, prefixed by the rank, then ``MPI_Abort``.

An exception that escapes on one rank of an MPI job must not leave the other
ranks waiting in a collective for a peer that never comes: that is a hung job.
``python -m mpi4py`` aborts on an unhandled exception; MailRail does the same in
its rank runner (``mailrail run -- python prog.py``), in every ``mailrail``
command that runs as a rank, and when an exception leaves ``with MailRail(...)``
(``on_error="abort"``, the default).  This module is the one place that does it.
"""

from __future__ import annotations

import os
import socket
import sys
import traceback
from typing import Any, NoReturn


def rank_label(comm: Any | None = None) -> str:
    """``rank R on HOST``: the rank in *comm* (default ``COMM_WORLD``); before MPI is initialized, the
    rank the launcher gave this process (its environment), else only ``HOST``."""
    host = socket.gethostname()
    rank = _world_rank(comm)
    if rank is None:
        rank = _launcher_rank()
    return f"rank {rank} on {host}" if rank is not None else host


#: Where Open MPI, PMIx launchers, MPICH's Hydra and Slurm put a process's rank in COMM_WORLD.
_RANK_VARIABLES = ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID")


def _launcher_rank() -> int | None:
    for name in _RANK_VARIABLES:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return None


def format_failure(error: BaseException, label: str) -> str:
    """*error*'s traceback, every line prefixed ``[LABEL] ``, ending in a newline."""
    lines = "".join(traceback.format_exception(type(error), error, error.__traceback__)).splitlines()
    return "".join(f"[{label}] {line}\n" for line in lines)


def abort_job(error: BaseException, *, comm: Any | None = None, exit_code: int = 1) -> NoReturn:
    """Print *error*'s traceback once, prefixed by the rank, and end the whole job (``MPI_Abort``).

    Without an initialized MPI (or after ``MPI_Finalize``) only this process ends, with *exit_code*.
    """
    sys.stderr.write(format_failure(error, rank_label(comm)))
    sys.stderr.flush()
    sys.stdout.flush()
    mpi = _initialized_mpi()
    if mpi is not None:
        (comm if comm is not None else mpi.COMM_WORLD).Abort(exit_code)
    os._exit(exit_code)


def exit_code_of(error: BaseException) -> int:
    """The status a process that died of *error* exits with: SystemExit's own code, 130 for Ctrl-C,
    128 + signum for an exception carrying the terminating signal's ``signum``, else 1."""
    if isinstance(error, SystemExit):
        code = error.code
        if code is None:
            return 0
        return code if isinstance(code, int) else 1
    if isinstance(error, KeyboardInterrupt):
        return 130
    signum = getattr(error, "signum", None)  # mailrail.jobcontrol.Terminated: 128 + the signal, as a shell says
    if isinstance(signum, int) and not isinstance(signum, bool) and 0 < signum < 128:
        return 128 + signum
    return 1


def _initialized_mpi() -> Any | None:
    """mpi4py's MPI module when this process imported it and MPI is initialized and not finalized."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None:
        return None
    try:
        return mpi if mpi.Is_initialized() and not mpi.Is_finalized() else None
    except Exception:  # an MPI in a broken state: end the process only
        return None


def _world_rank(comm: Any | None) -> int | None:
    mpi = _initialized_mpi()
    if mpi is None:
        return None
    try:
        return int((comm if comm is not None else mpi.COMM_WORLD).Get_rank())
    except Exception:
        return None
