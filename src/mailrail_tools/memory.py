"""Memory readings the tools report and check: a node's need against its memory, a process's peak."""

from __future__ import annotations

from typing import Any

from mailrail.config import physical_memory

from .flags import agreed_problem


def memory_problem(comm: Any, bytes_per_rank: int, what: str) -> str | None:
    """Collective: why *bytes_per_rank* on every rank does not fit in this node's memory, or None.

    The ranks sharing a node add up their needs; every rank of the job then has the same answer
    (:func:`~mailrail_tools.flags.agreed_problem`), so all stop or none does.
    """
    from mailrail._mpi import MPI  # on demand: importing it starts MPI, which a command parsing its flags must not

    node = comm.Split_type(MPI.COMM_TYPE_SHARED)
    try:
        local_ranks, needed = node.Get_size(), node.allreduce(int(bytes_per_rank))
    finally:
        node.Free()
    memory = physical_memory()
    problem = None
    if memory is not None and needed > memory:
        problem = (
            f"{what} need {needed / 2**30:,.1f} GiB on a node ({local_ranks} rank(s) there), "
            f"more than its {memory / 2**30:,.1f} GiB of memory"
        )
    return agreed_problem(comm, problem)


def reset_peak_rss() -> bool:
    """Restart this process's peak resident set (``VmHWM``) from what it holds now (Linux's
    ``/proc/self/clear_refs``); False where the kernel refuses, and the peak then counts from the process's start."""
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
        return True
    except OSError:
        return False


def peak_rss_bytes() -> int:
    """This process's peak resident set size (``VmHWM``), in bytes."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
