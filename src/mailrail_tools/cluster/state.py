"""Owner records: what each virtual cluster is, who owns it, and where its pieces are.

A cluster's record (``/run/mailrail/<name>/owner.json``) is written before the
first namespace is made, so a run killed at any point leaves enough behind for
``mailrail cluster down`` to remove everything.  A job's cluster is stale once
its owner process is gone (a pid reused by another process does not count: the
record keeps the owner's start time too); a cluster made by ``mailrail cluster
up`` lives until ``mailrail cluster down``.  The record also keeps the processes
the owner was started from (a shell, a batch script, a test), so what made a
cluster is known after they have exited.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import time
from typing import Any

from ..jobs.control import ancestry, is_running, process_start_time

STATE_ROOT = "/run/mailrail"
RECORD = "owner.json"


@dataclasses.dataclass
class OwnerRecord:
    cluster_id: str
    kind: str  # "job" (removed with its owner) or "persistent" (cluster up)
    owner_pid: int
    owner_start: int | None
    created: float
    spec: dict[str, Any]  # ClusterSpec.describe()
    cgroup_version: int | None = None
    cgroup_group: str | None = None  # the cluster's cgroup directory, None without cgroups
    #: The processes the owner was started from, nearest first, each [pid, start time] (control.ancestry).
    ancestors: list[list[int | None]] = dataclasses.field(default_factory=list)

    @classmethod
    def for_this_process(cls, cluster_id: str, kind: str, spec: dict[str, Any]) -> OwnerRecord:
        me = os.getpid()
        started_from = [[pid, start] for pid, start in ancestry(me)]
        return cls(cluster_id, kind, me, process_start_time(me), time.time(), spec, ancestors=started_from)

    def made_by(self, pid: int, start: int | None) -> bool:
        """The process *pid* that started at *start* made this cluster: it is the owner, or the owner was
        started from it."""
        return [pid, start] == [self.owner_pid, self.owner_start] or [pid, start] in self.ancestors

    @property
    def stale(self) -> bool:
        """A job cluster whose owner has exited (a persistent one never is): no process of its pid and start time
        runs.  An owner that has exited and is not yet collected by its parent (a zombie) is gone."""
        if self.kind != "job":
            return False
        return not is_running(self.owner_pid, self.owner_start)


def state_dir(name: str) -> str:
    return os.path.join(STATE_ROOT, name)


def save(directory: str, record: OwnerRecord) -> None:
    os.makedirs(directory, exist_ok=True)
    temporary = os.path.join(directory, RECORD + ".tmp")
    with open(temporary, "w") as out:
        json.dump(dataclasses.asdict(record), out, indent=2)
    os.replace(temporary, os.path.join(directory, RECORD))


def load(directory: str) -> OwnerRecord | None:
    try:
        with open(os.path.join(directory, RECORD)) as source:
            return OwnerRecord(**json.load(source))
    except FileNotFoundError:
        return None
    except (ValueError, TypeError):
        return None  # half-written by a killed run: teardown works from the names alone


def known_names(prefix: str) -> list[str]:
    """State directories of clusters (named *prefix*...), recorded or half-made."""
    try:
        return sorted(n for n in os.listdir(STATE_ROOT) if n.startswith(prefix))
    except FileNotFoundError:
        return []


def remove_dir(directory: str) -> None:
    shutil.rmtree(directory, ignore_errors=True)
