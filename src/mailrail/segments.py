"""A job's shared-memory segments: which files in node-local memory its processes map, recorded where whoever
ends the job finds them, and removed with it (no MPI here: the ranks, the launcher and the watchdog use it).

A rank killed before its MPI unlinks its segments leaves them in ``/dev/shm`` until a reboot, and a dead
process's maps can no longer be read.  So they are read while the job lives: by each rank itself once MPI
has started (:mod:`mailrail._mpi`) and before it aborts (:mod:`mailrail.failure`), by the rank runner's
output forwarder (:mod:`mailrail_tools.jobs.rank_runner`), and by the job runner
(:func:`mailrail_tools.jobs.bounded.run_bounded`).
Each is recorded in the directory of every job the process belongs to (:data:`JOB_VARIABLE`): a job that runs jobs
(the test suite's tests do) knows what each of them made, and no other job's files.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Mapping

#: Environment variable listing the directories of the jobs a process belongs to (``:``-separated).
JOB_VARIABLE = "MAILRAIL_JOB_DIRS"
#: Where a job's shared-memory segments go: node-local memory.
SHARED_MEMORY_ROOT = "/dev/shm"


def mapped_segments(pids: Iterable[int]) -> set[str]:
    """The files in node-local shared memory that *pids* have mapped and not unlinked: their MPI's segments
    where it cannot be told to put them elsewhere (MPICH's ``mpich_shm_*``, one-sided windows)."""
    prefix = SHARED_MEMORY_ROOT + os.sep
    found: set[str] = set()
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as maps:
                for line in maps:
                    fields = line.split(maxsplit=5)
                    if len(fields) == 6 and fields[5].startswith(prefix) and not fields[5].endswith(" (deleted)\n"):
                        found.add(fields[5].rstrip("\n"))
        except OSError:  # gone, or not ours to read
            continue
    return found


#: Files an MPI's launcher makes outside the job's ``TMPDIR`` and removes only when it ends normally: MPICH's
#: Hydra proxy writes the node's topology for its ranks to ``/tmp/hydra_hwloc_xmlfile_XXXXXX`` (the directory
#: is compiled in) and holds it open while they run.  A killed proxy left one per job.
LAUNCHER_FILE_PREFIXES = ("/tmp/hydra_hwloc_xmlfile_",)


def held_launcher_files(pids: Iterable[int]) -> set[str]:
    """The :data:`LAUNCHER_FILE_PREFIXES` files that *pids* hold open."""
    found: set[str] = set()
    for pid in pids:
        try:
            descriptors = os.listdir(f"/proc/{pid}/fd")
        except OSError:  # gone, or not ours to read
            continue
        for descriptor in descriptors:
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{descriptor}")
                if target.startswith(LAUNCHER_FILE_PREFIXES):
                    found.add(target)
    return found


def job_files(pids: Iterable[int]) -> set[str]:
    """What the job's processes *pids* hold that outlives them when they are killed: the shared-memory segments
    they map and their launcher's files (removed with the job, :func:`remove_segments`)."""
    pids = list(pids)
    return mapped_segments(pids) | held_launcher_files(pids)


#: The file in a job's directory listing the segments its processes were seen to map.
SEGMENTS_FILE = "segments"


def record_segments(paths: Iterable[str], environ: Mapping[str, str] | None = None) -> None:
    """Add *paths* to the segment list of every job this process belongs to (one line each, appended: the
    ranks of a job write the same file)."""
    lines = "".join(f"{path}\n" for path in paths).encode()
    for job_dir in (os.environ if environ is None else environ).get(JOB_VARIABLE, "").split(":"):
        if lines and job_dir:
            append_to(os.path.join(job_dir, SEGMENTS_FILE), lines)


def append_to(path: str, data: bytes) -> bool:
    """Append *data* to the file *path* (made if missing) in one write, so that what several processes
    append at once does not mix; False if it could not be written."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)
    except OSError:
        return False
    return True


def recorded_segments(job_dir: str) -> set[str]:
    """The segments recorded for the job *job_dir* (:func:`record_segments`): by its ranks, by its runner, and by
    the jobs run inside it (a job's processes record in the directories of every job they belong to)."""
    try:
        with open(os.path.join(job_dir, SEGMENTS_FILE), encoding="utf-8", errors="replace") as source:
            paths = {line.rstrip("\n") for line in source}
    except OSError:
        return set()
    # (a path that climbs out of its directory, ``/dev/shm/../x``, names another file: never removed)
    return {path for path in paths if path.startswith(_RECORDED_PREFIXES) and path == os.path.normpath(path)}


def remove_segments(paths: Iterable[str]) -> None:
    """Unlink the segments *paths* a job mapped (and its launcher's files, :func:`job_files`), once it ended (a
    rank killed before its MPI unlinked them leaves them until a reboot).  Their names are the job's own
    (random per job), so no other job's go."""
    for path in paths:
        with contextlib.suppress(OSError):
            os.unlink(path)


#: What a job's record may name (anything else in it is not removed).
_RECORDED_PREFIXES = (SHARED_MEMORY_ROOT + os.sep, *LAUNCHER_FILE_PREFIXES)


def record_own_segments() -> None:
    """Record what this process maps now, and the launcher's files its parent (the MPI's process launcher on
    this node) holds, if it belongs to a job (a few small /proc reads).  A job can end within a second of MPI's
    start (an abort): whoever ends it may never have seen them."""
    if os.environ.get(JOB_VARIABLE):
        record_segments(sorted(mapped_segments([os.getpid()]) | held_launcher_files([os.getppid()])))
