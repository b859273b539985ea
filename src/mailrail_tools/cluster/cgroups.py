"""Memory cgroups of a virtual cluster's nodes: one per node, v2 or v1, whichever the machine mounts.

A node's cgroup holds every process started on that node (the ssh stand-in
joins it before entering the node), so it caps the node's memory, counts the
node's out-of-memory kills and peak usage, and lists the processes to end at
teardown.  The group of a cluster is ``mailrail-<id>`` under this process's
own memory cgroup (v1) or under the v2 root.
"""

from __future__ import annotations

import dataclasses
import errno
import os
import signal
import time

from mailrail.errors import ClusterError

CGROUP_ROOT = "/sys/fs/cgroup"


@dataclasses.dataclass(frozen=True)
class Hierarchy:
    """Where memory cgroups live on this machine and which files mean what."""

    version: int  # 1 or 2
    base: str  # the directory new groups are made in

    @property
    def limit_file(self) -> str:
        return "memory.max" if self.version == 2 else "memory.limit_in_bytes"

    def group(self, *names: str) -> str:
        return os.path.join(self.base, *names)


def find_hierarchy(root: str = CGROUP_ROOT, proc_self: str = "/proc/self") -> Hierarchy | None:
    """The memory hierarchy new groups can be made in, or None when there is none."""
    controllers = os.path.join(root, "cgroup.controllers")
    if os.path.exists(controllers):  # pure v2
        with open(controllers) as source:
            if "memory" in source.read().split():
                return Hierarchy(2, root)
        return None
    v1 = os.path.join(root, "memory")
    if not os.path.isdir(v1):
        return None
    own = "/"
    try:
        with open(os.path.join(proc_self, "cgroup")) as source:
            for line in source:
                _, controllers_field, path = line.rstrip("\n").split(":", 2)
                if "memory" in controllers_field.split(","):
                    own = path
    except OSError:
        pass
    base = os.path.join(v1, own.lstrip("/"))
    return Hierarchy(1, base if os.path.isdir(base) else v1)


def create(hierarchy: Hierarchy, path: str, limit: int | None) -> None:
    """Make the group *path* and cap it at *limit* bytes, swap included."""
    try:
        os.mkdir(path)
    except FileExistsError:
        raise ClusterError(
            f"cgroup {path} exists already: a cluster of that name is up (mailrail cluster down removes it)"
        ) from None
    except OSError as error:
        raise ClusterError(
            f"cannot create the memory cgroup {path}: {error.strerror} "
            f"(memory caps need root on a machine with memory cgroups)"
        ) from None
    if limit is not None:
        set_limit(hierarchy, path, limit)


def enable_memory_controller(hierarchy: Hierarchy, path: str) -> None:
    """v2: let the children of *path* have memory limits (v1 needs nothing)."""
    if hierarchy.version == 2:
        _write(os.path.join(path, "cgroup.subtree_control"), "+memory")


def set_limit(hierarchy: Hierarchy, path: str, limit: int | None) -> None:
    """Cap (or, with None, uncap) the group's memory; swap may not stretch the cap."""
    if hierarchy.version == 2:
        _write(os.path.join(path, "memory.max"), "max" if limit is None else str(limit))
        swap = os.path.join(path, "memory.swap.max")
        if os.path.exists(swap):
            _write(swap, "max" if limit is None else "0")
        return
    value = "-1" if limit is None else str(limit)
    memsw = os.path.join(path, "memory.memsw.limit_in_bytes")
    # memsw >= limit always: raise memsw first when growing, the limit first when shrinking.
    if limit is None and os.path.exists(memsw):
        _write(memsw, value)
    _write(os.path.join(path, "memory.limit_in_bytes"), value)
    if limit is not None and os.path.exists(memsw):
        _write(memsw, value)


def limit_bytes(hierarchy: Hierarchy, path: str) -> int | None:
    """The group's memory cap now, or None when it has none."""
    try:
        with open(os.path.join(path, hierarchy.limit_file)) as source:
            value = source.read().strip()
    except OSError:
        return None
    if value == "max" or not value.isdigit() or int(value) >= 2**60:  # v1 writes "no limit" as ~2^63
        return None
    return int(value)


def oom_kills(hierarchy: Hierarchy, path: str) -> int:
    """Processes the kernel killed in the group for lack of memory, since it was made."""
    name = "memory.events" if hierarchy.version == 2 else "memory.oom_control"
    try:
        with open(os.path.join(path, name)) as source:
            for line in source:
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
    except OSError:
        pass
    return 0


def peak_bytes(hierarchy: Hierarchy, path: str) -> int | None:
    """The group's memory high-water mark, where the kernel keeps one."""
    name = "memory.peak" if hierarchy.version == 2 else "memory.max_usage_in_bytes"
    try:
        with open(os.path.join(path, name)) as source:
            return int(source.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def reset_peak(hierarchy: Hierarchy, path: str) -> None:
    """Start a new high-water mark (between the jobs of one cluster)."""
    name = "memory.peak" if hierarchy.version == 2 else "memory.max_usage_in_bytes"
    try:
        _write(os.path.join(path, name), "0")
    except ClusterError:
        pass  # older v2 kernels: the peak covers the cluster's life


def processes(path: str) -> list[int]:
    try:
        with open(os.path.join(path, "cgroup.procs")) as source:
            return [int(line) for line in source if line.strip()]
    except OSError:
        return []


def remove(path: str, timeout: float = 10.0) -> None:
    """End the group's processes (by id) and remove it, children first.  Missing is fine."""
    if not os.path.isdir(path):
        return
    for entry in sorted(os.listdir(path)):
        child = os.path.join(path, entry)
        if os.path.isdir(child):
            remove(child, timeout)
    deadline = time.monotonic() + timeout
    while True:
        for pid in processes(path):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        try:
            os.rmdir(path)
            return
        except FileNotFoundError:
            return
        except OSError as error:
            if error.errno != errno.EBUSY or time.monotonic() > deadline:
                raise ClusterError(f"cannot remove cgroup {path}: {error.strerror}") from None
            time.sleep(0.05)  # killed processes leave the group once the kernel has reaped them


def _write(path: str, value: str) -> None:
    try:
        with open(path, "w") as target:
            target.write(value)
    except OSError as error:
        raise ClusterError(f"cannot write {value!r} to {path}: {error.strerror}") from None
