"""How a rank that fails ends its whole job: the traceback once, prefixed by the rank, then ``MPI_Abort``.

An exception that escapes on one rank of an MPI job must not leave the other
ranks waiting in a collective for a peer that never comes: that is a hung job.
``python -m mpi4py`` aborts on an unhandled exception; MailRail does the same in
its rank runner (``mailrail run -- python prog.py``), in every ``mailrail``
command that runs as a rank, and when an exception leaves ``with MailRail(...)``
(``on_error="abort"``, the default).  This module is the one place that does it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import select
import socket
import stat
import struct
import sys
import termios
import time
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from .config import launcher_rank
from .segments import append_to, record_own_segments
from .tracebacks import brief_traceback

#: Seconds an aborting rank waits at most for its launcher to take what it wrote (see end_job).
OUTPUT_DRAIN_BOUND = 2.0
#: Seconds a rank that raised an error every rank raises alike waits at most for its peers to record theirs
#: before it aborts the job (see abort_job): the abort kills a peer that has not recorded yet.
PEERS_RECORDED_BOUND = 3.0

#: Set when something stands between this process's stdout/stderr and its launcher (the rank runner's
#: line forwarder, :mod:`mailrail_tools.jobs.rank_runner`): called with a bound in seconds, it returns once everything
#: written so far was passed on and taken by the launcher, or the bound ran out.
_output_forwarded: Callable[[float], None] | None = None


def set_output_forwarder(wait_until_forwarded: Callable[[float], None] | None) -> None:
    """Tell :func:`end_job` how to wait for output that a forwarder passes on (None: fds 1 and 2 are the launcher's)."""
    global _output_forwarded
    _output_forwarded = wait_until_forwarded


def rank_label(comm: Any | None = None) -> str:
    """``rank R on HOST``: the rank in *comm* (default ``COMM_WORLD``); before MPI is initialized, the
    rank the launcher gave this process (its environment), else only ``HOST``."""
    host = socket.gethostname()
    rank = _world_rank(comm)
    if rank is None:
        rank = launcher_rank()
    return f"rank {rank} on {host}" if rank is not None else host


def describe_ranks(ranks: list[int]) -> str:
    """``rank 3``, ``ranks 1, 3`` or ``ranks 0-15, 17``."""
    parts: list[str] = []
    start = previous = None
    for rank in [*sorted(ranks), None]:
        if previous is not None and rank == previous + 1:
            previous = rank
            continue
        if start is not None:
            parts.append(str(start) if start == previous else f"{start}-{previous}")
        start = previous = rank
    single = len(ranks) == 1
    return ("rank " if single else "ranks ") + ", ".join(parts)


def format_failure(error: BaseException, label: str) -> str:
    """*error*'s traceback, every line prefixed ``[LABEL] ``, ending in a newline."""
    return labelled(_full_traceback(error), label)


def labelled(text: str, label: str) -> str:
    """Every line of *text* prefixed ``[LABEL] ``, each ending in a newline."""
    return "".join(f"[{label}] {line}\n" for line in text.splitlines())


def _full_traceback(error: BaseException) -> str:
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


#: Environment variable naming the file where ``mailrail run`` collects its ranks' failures (one JSON line
#: each, :func:`record_failure`), to say in one line after the job what failed.
FAILURES_VARIABLE = "MAILRAIL_FAILURES"
#: Exceptions every rank raises alike, from the same configuration (a bad knob): under ``mailrail run``
#: the ranks print no traceback for them, and ``mailrail run`` says the error once for the job.
SAME_ON_EVERY_RANK = ("ConfigError",)
#: Environment variable that ``mailrail run`` (unless ``-v``) sets to :data:`SHOWN_BY_RUNNER`: a failing rank
#: prints no traceback, ``mailrail run`` shows the first failing rank's, trimmed, and keeps all in its log.
TRACEBACKS_VARIABLE = "MAILRAIL_FAILURE_TRACEBACKS"
SHOWN_BY_RUNNER = "runner"


def record_failure(error: BaseException | None, exit_code: int, comm: Any | None = None) -> bool:
    """Add this rank's failure (*error*, with its traceback in full and trimmed, or a bare *exit_code*) to
    ``mailrail run``'s list, in one write (the list's order is the order the ranks failed in); False outside one."""
    path = os.environ.get(FAILURES_VARIABLE)
    if not path:
        return False
    rank = _world_rank(comm)
    record = {
        "rank": rank if rank is not None else launcher_rank(),
        "host": socket.gethostname(),
        "type": type(error).__name__ if error is not None else None,
        "message": str(error) if error is not None else None,
        "exit_code": exit_code,
    }
    if error is not None:  # what the runner shows (the first failing rank's, trimmed) and keeps in its log
        record["traceback"] = _full_traceback(error)
        with contextlib.suppress(Exception):  # (the full one serves if trimming fails: the job must still end)
            record["brief"] = brief_traceback(error)
    return append_to(path, (json.dumps(record) + "\n").encode())


def read_failures(path: str) -> list[dict[str, Any]]:
    """The failures the ranks recorded (:func:`record_failure`), in the order they came."""
    try:
        with open(path, encoding="utf-8") as source:
            lines = source.read().splitlines()
    except OSError:
        return []
    records = []
    for line in lines:
        with contextlib.suppress(ValueError):
            records.append(json.loads(line))
    return records


def _wait_for_peers_recorded(comm: Any | None, bound: float) -> None:
    """Wait (at most *bound* s) until every rank of *comm*'s job has recorded its failure.

    Why: the first rank to call ``MPI_Abort`` kills the others, so for an error they all raise alike
    (a bad knob) the summary would name whichever ranks were fast enough (seen with Debian's MPICH:
    "ranks 0, 2 raised ...").  A rank that raised something else goes on at once.
    """
    path = os.environ.get(FAILURES_VARIABLE)
    mpi = _initialized_mpi()
    if not path or mpi is None:
        return
    size = int((comm if comm is not None else mpi.COMM_WORLD).Get_size())
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if len({record.get("rank") for record in read_failures(path)}) >= size:
            return
        time.sleep(0.01)


def abort_job(error: BaseException, *, comm: Any | None = None, exit_code: int = 1) -> NoReturn:
    """Print *error*'s traceback once, prefixed by the rank, and end the whole job (``MPI_Abort``).

    Under ``mailrail run`` the failure is also recorded, its traceback with it, for its one-line summary;
    the rank then prints nothing (unless ``mailrail run -v``): ``mailrail run`` shows the traceback of the
    first rank that recorded one, trimmed to the user's frames (:mod:`mailrail.tracebacks`), and keeps
    every rank's in full in its log.  An error every rank raises alike (:data:`SAME_ON_EVERY_RANK`) is left
    to that summary: one line for the job, not a traceback per rank.  Without an initialized MPI (or after
    ``MPI_Finalize``) only this process ends, with *exit_code*.
    """
    recorded = record_failure(error, exit_code, comm)
    if recorded and type(error).__name__ in SAME_ON_EVERY_RANK:
        _wait_for_peers_recorded(comm, PEERS_RECORDED_BOUND)
    elif not (recorded and os.environ.get(TRACEBACKS_VARIABLE) == SHOWN_BY_RUNNER):
        sys.stderr.write(format_failure(error, rank_label(comm)))
    end_job(exit_code, comm=comm)


def end_job(exit_code: int, *, comm: Any | None = None) -> NoReturn:
    """End the whole job (``MPI_Abort`` on *comm*, default ``COMM_WORLD``) once this process's output
    has reached its launcher; without an initialized MPI, end only this process."""
    sys.stderr.flush()
    sys.stdout.flush()
    _wait_for_output_taken(OUTPUT_DRAIN_BOUND)
    mpi = _initialized_mpi()
    if mpi is not None:
        record_own_segments()  # an aborted job's MPI unlinks nothing (MPICH's mpich_shm_*): the job's end does
        (comm if comm is not None else mpi.COMM_WORLD).Abort(exit_code)
    os._exit(exit_code)


def _wait_for_output_taken(bound: float) -> None:
    """Wait (at most *bound* s) until the launcher has read what this process wrote to its stdout and
    stderr pipes or sockets.

    Why: on ``MPI_Abort`` a launcher tears the job down at once, and MPICH's Hydra drops what is still
    unread in a rank's pipe, so the traceback that says why the job ended was sometimes lost (docs: the API,
    "Failures").  Terminals and files hold nothing back and are not waited for.  When the rank runner
    forwards this process's output (:func:`set_output_forwarder`), the forwarder is asked first.
    """
    deadline = time.monotonic() + bound
    if _output_forwarded is not None:
        _output_forwarded(bound)
    for fd in (2, 1):
        while _unread_bytes(fd) > 0 and time.monotonic() < deadline:
            time.sleep(0.005)


def _unread_bytes(fd: int) -> int:
    """Bytes written to *fd* that its reader has not taken yet (0 for anything but a pipe or socket)."""
    try:
        mode = os.fstat(fd).st_mode
        if stat.S_ISFIFO(mode):
            request = termios.FIONREAD  # a pipe's either end counts the bytes buffered in it
        elif stat.S_ISSOCK(mode):
            request = termios.TIOCOUTQ  # SIOCOUTQ: bytes not yet acknowledged by the peer
        else:
            return 0
        (count,) = struct.unpack("i", fcntl.ioctl(fd, request, b"\0\0\0\0"))
        return int(count)
    except OSError:
        return 0


def write_all(fd: int, data: bytes) -> bool:
    """Write all of *data* to *fd* (waiting while a non-blocking *fd* is full); False if its reader is gone."""
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            select.select([], [fd], [])
        except OSError:  # EPIPE (SIGPIPE is ignored in Python), EIO of a terminal that hung up
            return False
    return True


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
    signum = getattr(error, "signum", None)  # mailrail_tools.jobs.control.Terminated: 128 + the signal, as a shell says
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
