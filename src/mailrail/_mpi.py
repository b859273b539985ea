"""mpi4py's ``MPI``, as every module of the package imports it (importing it initializes MPI).

A process started without a launcher (a *singleton*: ``python prog.py``) is an MPI job of one rank.
Open MPI 5 then leaves the segment of its shared-memory transport in ``/dev/shm`` at exit, finalized
or not (a segment per run, until a reboot).  A singleton has no
peer on its node to share memory with, so while MPI starts in a singleton of ours that transport is
left out (:func:`singleton_variables`, a setting other MPIs ignore); the variable is restored at
once, so nothing the process starts inherits it.  A launcher's ranks, a process whose MPI was
initialized before MailRail was imported, and an ``OMPI_MCA_btl`` of the user's are left alone.

A singleton's MPI also makes its session directory in ``TMPDIR`` (Open MPI 5: an empty
``ompi.<host>.<uid>/jf.0/<job>`` per run, never removed; Open MPI 4: its PMIx segments).  While MPI
starts in a singleton of ours, ``TMPDIR`` is a directory of its own, removed when the process exits.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Mapping

from .config import launcher_rank
from .segments import record_own_segments

_BTL = "OMPI_MCA_btl"


def singleton_variables(environ: Mapping[str, str]) -> dict[str, str]:
    """What MPI starts with when this process is a singleton (no launcher's rank in *environ*): Open MPI's
    transports without shared memory, unless the user chose them."""
    if launcher_rank(environ) is not None or _BTL in environ:
        return {}
    return {_BTL: "^sm"}


@contextlib.contextmanager
def starting_mpi() -> Iterator[None]:
    """Hold :func:`singleton_variables` in this process's environment while MPI starts, then restore it; in a
    singleton, ``TMPDIR`` too (a directory of its own, removed at exit)."""
    added = singleton_variables(os.environ)  # (only variables the environment does not set)
    session = _singleton_session() if launcher_rank(os.environ) is None else None
    tmpdir = os.environ.get("TMPDIR")
    os.environ.update(added)
    if session is not None:
        os.environ["TMPDIR"] = session
    try:
        yield
    finally:
        for name in added:
            os.environ.pop(name, None)
        if session is not None:
            if tmpdir is None:
                os.environ.pop("TMPDIR", None)
            else:
                os.environ["TMPDIR"] = tmpdir
            if tempfile.tempdir == session:  # (read while MPI started: the program's temporary files go where it says)
                tempfile.tempdir = None


def _singleton_session() -> str | None:
    """A directory for a singleton's MPI session, removed at exit (None if none can be made: the MPI's own
    place then).  Python's exit handlers run before mpi4py finalizes MPI (checked with the wheels and both
    site MPIs): finalizing without it went without a word."""
    try:
        session = tempfile.mkdtemp(prefix="mailrail-singleton-")
    except OSError:
        return None
    atexit.register(shutil.rmtree, session, True)
    return session


with starting_mpi():  # (initializes MPI unless mpi4py.MPI was imported before, or mpi4py.rc says not to)
    from mpi4py import MPI as MPI

if MPI.Is_initialized() and not MPI.Is_finalized():  # its segments exist now: whoever ends the job removes them
    record_own_segments()

__all__ = ["MPI", "singleton_variables", "starting_mpi"]
