"""Helpers the tests import (``pythonpath = tests`` in pyproject.toml): programs, the mailrail command, clusters."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from mailrail import segments
from mailrail.config import env_name
from mailrail.flow import AdaptiveCredits
from mailrail_tools.cluster import cgroups, namespaces, state
from mailrail_tools.cluster.spec import PREFIX
from mailrail_tools.jobs import control
from mailrail_tools.jobs.bounded import JOB_DIR_PREFIX, run_bounded
from mailrail_tools.jobs.which_mpi import mpi_environment, mpiexec_argv

PROGRAMS = os.path.join(os.path.dirname(__file__), "programs")
ROOT = Path(__file__).resolve().parent.parent
#: Real traces written by YGM: the project's copy of ../shared/traces (ygm-traces/README.md describes the
#: formats), so the tests never depend on what lies beside the repository.  The library's trace tests
#: and the trace tools' tests both read them.
YGM_TRACES = Path(__file__).resolve().parent / "library" / "trace" / "ygm-traces"
BINARY_TRACE = YGM_TRACES / "ygm-histogram-binary-2ranks"
JSON_TRACE = YGM_TRACES / "ygm-histogram-json-2ranks"
#: Seconds before a hung job is killed (all its ranks) and its test fails with the output.
MPI_TIMEOUT = float(os.environ.get("MAILRAIL_TEST_TIMEOUT", "120"))


def program_path(name: str) -> str:
    """The path of the test program *name* (in tests/programs)."""
    return os.path.join(PROGRAMS, name)


def program(name: str) -> list[str]:
    """A test program as ranks run it (``python -m mpi4py``: an exception on one rank aborts the job)."""
    return [sys.executable, "-m", "mpi4py", program_path(name)]


#: The implementation of jobs whose test does not choose one: unset, MailRail's own choice (compiled
#: when built); ``make test`` runs the smoke set a second time with ``python``.
TEST_IMPLEMENTATION = os.environ.get("MAILRAIL_TEST_IMPLEMENTATION")


def job_environment(**extra: str) -> dict[str, str]:
    """The environment of a test's job: no MAILRAIL_* of the caller's, a stall timeout, the test implementation,
    and the mark of the running test's jobs (:func:`job_records`: its processes record what they make there)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAILRAIL_")}
    env["MAILRAIL_STALL_TIMEOUT"] = "30"  # starvation fails loudly, not as a hang
    if _records is not None:
        env[segments.JOB_VARIABLE] = _records
    if TEST_IMPLEMENTATION and env_name("implementation") not in extra:  # a test that chooses one keeps it
        env["MAILRAIL_IMPLEMENTATION"] = TEST_IMPLEMENTATION
    env.update(extra)
    return env


def _bounded(
    what: str, argv: list[str], env: dict[str, str], timeout: float, local: bool = False
) -> subprocess.CompletedProcess:
    """*argv* in its own process group with its output captured; killed, and the test failed, after *timeout*.
    *local*: an mpiexec job of this machine (its MPI's shared memory in a directory of its own)."""
    try:
        return run_bounded(argv, timeout=timeout, env=env, capture=True, local=local)
    except subprocess.TimeoutExpired as expired:
        pytest.fail(
            f"{what} hung for {timeout:.0f} s and was killed\n--- stdout ---\n{(expired.output or '')[-6000:]}\n"
            f"--- stderr ---\n{(expired.stderr or '')[-6000:]}"
        )


def mailrail(
    *args: str, timeout: float = 240, prefix: list[str] | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """``python -m mailrail_tools ARGS`` (*env*: variables added to the job environment), bounded by *timeout*."""
    argv = [*(prefix or []), sys.executable, "-m", "mailrail_tools", *args]
    return _bounded(f"mailrail {' '.join(args)}", argv, job_environment(**(env or {})), timeout)


def mailrail_job(
    ranks: int, *args: object, env: dict[str, str] | None = None, timeout: float = MPI_TIMEOUT
) -> subprocess.CompletedProcess:
    """``mpiexec -n RANKS python -m mailrail_tools ARGS`` in the test's job environment, bounded by *timeout*."""
    argv = [str(arg) for arg in args]
    launch = mpiexec_argv(ranks, [sys.executable, "-m", "mailrail_tools", *argv])
    return _bounded(f"mailrail {' '.join(argv)} on {ranks} ranks", launch, _mpi_job_environment(env), timeout, True)


def replay(ranks: int, trace: object, json_path: Path, *flags: str, env: dict[str, str] | None = None) -> dict:
    """``mailrail replay TRACE --json JSON_PATH FLAGS``; fails the test unless it exits 0; the JSON document."""
    assert_succeeded(mailrail_job(ranks, "replay", trace, "--json", json_path, *flags, env=env))
    return json.loads(json_path.read_text())


def run_program(
    ranks: int, name: str, *args: str, env: dict[str, str] | None = None, timeout: float = MPI_TIMEOUT
) -> subprocess.CompletedProcess:
    """Test program *name* (tests/programs) on *ranks* ranks under mpiexec, bounded by *timeout*."""
    argv = mpiexec_argv(ranks, [*program(name), *args])
    return _bounded(f"{name} on {ranks} ranks", argv, _mpi_job_environment(env), timeout, True)


def mpirun(ranks: int, name: str, *args: str, env: dict[str, str] | None = None, timeout: float = MPI_TIMEOUT) -> dict:
    """Run test program *name*; fails the test unless it exits 0; the ``RESULT`` line of rank 0."""
    return result_of(run_program(ranks, name, *args, env=env, timeout=timeout))


def _mpi_job_environment(env: dict[str, str] | None) -> dict[str, str]:
    return mpi_environment(base=job_environment(**(env or {})))


def assert_exactly_once(result: dict, implementation: str = TEST_IMPLEMENTATION or "compiled") -> None:
    """A traffic.py run delivered every message once, in the *implementation*, with nothing left over."""
    assert not any(result["finalize"].values()), result["finalize"]
    stats = result["stats"]
    assert {s["implementation"] for s in stats} == {implementation}
    assert sum(s["messages_sent"] for s in stats) == sum(s["messages_received"] for s in stats)
    assert sum(s["bytes_sent"] for s in stats) == sum(s["bytes_received"] for s in stats)
    assert all(s["deferred_now"] == 0 for s in stats)


def assert_credit_requests_accounted(stats: list[dict], nodes: int) -> None:
    """Adaptive credit requests were asked and served: every request received was sent, and the only ones not
    received are the last a node sent each destination.  A barrier proves payloads delivered, not credit
    messages: a node may ask, then send its waiting messages on credits granted meanwhile, so its request
    can still be on its way at the end (a node holds at most one request per destination)."""
    sent = sum(s["credit_requests_sent"] for s in stats)
    received = sum(s["credit_requests_received"] for s in stats)
    assert 0 < received <= sent <= received + nodes * len(stats), (sent, received)


#: Seconds between two looks at the owner records while an :class:`OwnClusters` is open (a cluster's record
#: lives far longer: its build alone runs several commands).
RECORD_POLL_S = 0.05
#: Seconds what a job leaves may take to go once its processes are gone (a SIGKILLed command's watchdog, a
#: job beside this one between its end and its cleanup).
SETTLE_S = 5.0


class OwnClusters:
    """The virtual clusters one test makes, and what of them is left: leftover checks look at these only.

    A cluster is the test's when its owner is *origin* (this process unless given: a process the test started)
    or was started from it: the owner record keeps the owner's ancestors, pid and start time (a reused pid is
    not the same process).  So a cluster another process makes meanwhile (an unrelated job, another test run)
    is never counted, whatever it leaves.  Clusters of the origin's that were there when this object was made
    are not the test's either (an earlier test's, or a fixture's that outlives the test).  The records are read
    every :data:`RECORD_POLL_S` while it is open: a record lives from before the cluster's first namespace to the
    end of its removal, so the test's clusters are all known, also the ones whose record has gone and that left
    something named after them (a launcher's process, an MPI's segment named after a node)."""

    def __init__(self, origin: int | None = None) -> None:
        pid = os.getpid() if origin is None else origin
        self.origin = (pid, control.process_start_time(pid))
        self._seen: set[str] = set()
        self._lock = threading.Lock()
        self.before = self._records()
        self._stop = threading.Event()
        self._poller = threading.Thread(target=self._poll, name="own-clusters", daemon=True)
        self._poller.start()

    def _records(self) -> set[str]:
        """The ids of the clusters whose record says the origin made them (those there now)."""
        made = set()
        for name in state.known_names(PREFIX):
            record = state.load(state.state_dir(name))
            if record is not None and record.made_by(*self.origin):
                made.add(name[len(PREFIX) :])
        return made

    def _poll(self) -> None:
        while not self._stop.wait(RECORD_POLL_S):
            self.ids()

    def ids(self) -> set[str]:
        """The ids of this test's clusters (made since this object was, whether still there or not)."""
        found = self._records() - self.before
        with self._lock:
            self._seen |= found
            return set(self._seen)

    def close(self) -> None:
        self._stop.set()
        self._poller.join()

    def __enter__(self) -> OwnClusters:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def leftovers(self) -> dict[str, list[str]]:
        """What the test's clusters left on the machine, by kind; only kinds with something in them."""
        names = {PREFIX + cluster_id for cluster_id in self.ids()}
        if not names:
            return {}
        hierarchy = cgroups.find_hierarchy()
        groups = os.listdir(hierarchy.base) if hierarchy and os.path.isdir(hierarchy.base) else []
        left = {
            "netns": [n for n in namespaces.list_netns(PREFIX) if n.rsplit("-", 1)[0] in names],
            "state": [n for n in state.known_names(PREFIX) if n in names],
            "cgroups": sorted(n for n in groups if n in names),
            "processes": processes_mentioning(*(os.path.join(state.STATE_ROOT, n) + "/" for n in sorted(names))),
            "job files": sorted(named_job_files({n[len(PREFIX) :] for n in names})),
        }
        return {kind: found for kind, found in left.items() if found}

    def settled(self, bound: float = SETTLE_S) -> dict[str, list[str]]:
        """:meth:`leftovers` once there are none, or as they are after *bound* seconds."""
        deadline = time.monotonic() + bound
        while (left := self.leftovers()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return left


def assert_left_nothing(own: OwnClusters, bound: float = SETTLE_S) -> None:
    """The test's clusters left nothing (after up to *bound* seconds for a watchdog's removal to finish)."""
    left = own.settled(bound)
    assert not left, f"the test's clusters {sorted(own.ids())} left behind: {left}"


def named_job_files(cluster_ids: set[str]) -> set[str]:
    """The :func:`unclaimed_job_files` named after one of *cluster_ids* (Open MPI names its segments after the
    node, whose host name is ``<id>-n<k>``)."""
    named = naming(present_job_files(), cluster_ids)
    return named & unclaimed_job_files() if named else set()


def naming(paths: set[str], words: set[str]) -> set[str]:
    """Those of *paths* whose file name contains one of *words*."""
    return {path for path in paths if any(word in os.path.basename(path) for word in words)}


def new_job_files(before: set[str], bound: float = SETTLE_S, *, named: set[str]) -> set[str]:
    """What :func:`unclaimed_job_files` holds beyond *before* and is named after one of *named* (a cluster's job's,
    not another job's on the machine), once that is nothing or after *bound* s."""
    deadline = time.monotonic() + bound
    while True:
        new = naming(unclaimed_job_files() - before, named)
        if not new or time.monotonic() >= deadline:
            return new
        time.sleep(0.1)


# --- what the test's own jobs made: their records ---------------------------------------------------

#: The directory the running test's jobs are marked with (:func:`job_environment` puts it in their
#: ``MAILRAIL_JOB_DIRS``, as a job run inside a job carries both): every process of theirs records there the
#: segments it maps in /dev/shm and its launcher's files in /tmp, and their job runners what they saw them hold
#: (:mod:`mailrail.segments`).  tests/conftest.py gives each test a directory of its own, and each test process one
#: for the jobs started outside a test (a fixture's of a wider scope); None outside a test session.
_records: str | None = None


def use_job_records(directory: str | None) -> str | None:
    """Mark the jobs started from now on with *directory* (None: no mark); returns the one used until now."""
    global _records
    previous, _records = _records, directory
    return previous


def job_records() -> str:
    """The running test's records directory (see :data:`_records`)."""
    assert _records is not None, "no records directory: tests/conftest.py makes one for each test"
    return _records


def recorded_job_files(records: str) -> set[str]:
    """What the jobs marked with *records* were seen to make outside their job directories, to be removed with them:
    the segments their processes mapped in /dev/shm, their launchers' files in /tmp, and each job's own directory in
    /dev/shm that held some of them (Open MPI's segments in a local job).  Their names are the jobs' own (random
    per job): no file of another job's is among them, whatever it leaves."""
    recorded = segments.recorded_segments(records)
    root = segments.SHARED_MEMORY_ROOT + os.sep
    directories = set()
    for path in recorded:
        top, *below = path[len(root) :].split(os.sep) if path.startswith(root) else ("",)
        if below and top.startswith(JOB_DIR_PREFIX):
            directories.add(root + top)
    return recorded | directories


def files_left(paths: Iterable[str], bound: float = SETTLE_S) -> set[str]:
    """Those of *paths* still there, once none is or after *bound* seconds."""
    paths = set(paths)
    deadline = time.monotonic() + bound
    while True:
        left = {path for path in paths if os.path.lexists(path)}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.1)


def job_files_left(records: str | None = None, bound: float = SETTLE_S) -> set[str]:
    """Those of :func:`recorded_job_files` (by default the running test's jobs') still there, once none is or after
    *bound* seconds (the watchdog of a SIGKILLed job runner removes them a moment later).  The test's own only: a
    file another process on the machine makes or leaves meanwhile is never among them."""
    return files_left(recorded_job_files(job_records() if records is None else records), bound)


def job_processes_left(records: str | None = None) -> list[str]:
    """The processes of the running test's jobs (by default) still alive, as ``PID: command line``: those marked
    with its records directory and those they started (:func:`mailrail_tools.jobs.control.job_processes`), never
    another job's on the machine."""
    pids = control.job_processes(job_records() if records is None else records)
    return [f"{pid}: {_command_line(pid)}" for pid in sorted(pids) if control.is_alive(pid)]


def _command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as source:
            return source.read().replace(b"\0", b" ").decode(errors="replace")[:200]
    except OSError:
        return "(gone)"


# --- the machine's view: only through the names of the test's own objects ----------------------------


def present_job_files() -> set[str]:
    """Every entry of /dev/shm and every file MPI launchers make in /tmp
    (:data:`mailrail.segments.LAUNCHER_FILE_PREFIXES`), whoever's they are: a leftover check takes only those named
    after its own objects (:func:`named_job_files`), or what its own jobs recorded (:func:`job_files_left`)."""
    root = segments.SHARED_MEMORY_ROOT
    try:
        entries = {os.path.join(root, name) for name in os.listdir(root)}
    except OSError:  # no /dev/shm here
        entries = set()
    return entries | {path for prefix in segments.LAUNCHER_FILE_PREFIXES for path in glob.glob(prefix + "*")}


def unclaimed_job_files() -> set[str]:
    """What ended jobs left until a reboot: the :func:`present_job_files` that no live process maps or holds
    and that are no running job's directory (an MPI's segments, a job's directory, a launcher's file)."""
    pids = [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    running = {os.path.basename(job_dir) for job_dir in control.running_job_dirs()}
    claimed = segments.mapped_segments(pids) | segments.held_launcher_files(pids)
    return {path for path in present_job_files() - claimed if os.path.basename(path) not in running}


def processes_mentioning(*texts: str) -> list[str]:
    """Processes (not this one) whose command line names one of *texts*, whoever's: for names only the test's own
    objects carry (a cluster's state directory: its Slurm daemons start with an environment of their own, without
    the job's mark).  A test's jobs' processes are :func:`job_processes_left`."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as source:
                    cmdline = source.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if any(text in cmdline for text in texts):
                found.append(f"{entry}: {cmdline[:200]}")
    return found


def alive(pid: int) -> bool:
    """*pid* exists and is not a zombie."""
    return control.is_alive(pid)


def started_at(pids: Iterable[int]) -> dict[int, int | None]:
    """Each of *pids* with its start time: what :func:`still_present` tells from a later process of the same pid."""
    return {pid: control.process_start_time(pid) for pid in pids}


def still_present(started: dict[int, int | None]) -> list[int]:
    """Those of *started* (pid: start time) still in the process table: running, or exited and not yet collected
    by their parent (``pgrep`` and ``ps`` list them then)."""
    return sorted(pid for pid, start in started.items() if control.is_present(pid, start))


def ready_pids(stdout: str) -> list[int]:
    """The pids in ``READY RANK PID HOST`` lines (anywhere in a line: MPICH's Hydra may splice ranks' output)."""
    return [int(pid) for pid in re.findall(r"READY \d+ (\d+) ", stdout)]


def assert_succeeded(completed: subprocess.CompletedProcess) -> None:
    """The job exited 0; else the test fails with its output."""
    assert completed.returncode == 0, (
        f"exit {completed.returncode}\n{completed.stdout[-4000:]}\n{completed.stderr[-4000:]}"
    )


def result_of(completed: subprocess.CompletedProcess) -> dict:
    """The ``RESULT <json>`` line of a job that must have exited 0."""
    assert_succeeded(completed)
    for line in completed.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    pytest.fail(f"no RESULT line:\n{completed.stdout[-4000:]}\n{completed.stderr[-4000:]}")


def released(flow: object, source: int) -> list[tuple[int, int, int]]:
    """Release one payload from *source* on a flow-control strategy: the credit messages it caused,
    ``(target, kind, count)``, taken from its outbox."""
    flow.on_release(source)  # type: ignore[attr-defined]
    outbox = flow.outbox  # type: ignore[attr-defined]
    return [outbox.popleft() for _ in range(len(outbox))]


def adaptive_state(flow: Any) -> dict[str, Any] | None:
    """Adaptive mode's receiver state, to compare the ledger with the reference (None in the other modes): the
    compiled ledger reports it, the reference's :class:`~mailrail.flow.adaptive.AdaptiveCredits` is read."""
    if flow.name != "adaptive":
        return None
    if not isinstance(flow, AdaptiveCredits):
        return dict(flow.adaptive_state())
    return {
        "free": flow.free,
        "leases": {
            node: (
                lease.target,
                lease.held,
                lease.unreturned,
                lease.owed,
                lease.demand,
                lease.revoking,
                lease.recheck,
                list(lease.granted),
            )
            for node, lease in flow.leases.items()
        },
        "waiting": list(flow.waiting),
        "revocable": list(flow.revocable),
        "parked": list(flow.parked),
        "owing": list(flow.owing),
    }


def payload(source: int, dest: int, number: int, nbytes: int) -> bytes:
    """Deterministic bytes of message *number* from *source* to *dest*: its identity in its first 8 bytes
    (when it has room), then a pattern, so that a checksum tells any two messages apart."""
    head = np.array([source, dest, number & 0xFFFF, number >> 16], dtype="<u2").tobytes()
    body = bytes((source * 31 + dest * 17 + number * 7 + i) & 0xFF for i in range(max(0, nbytes - len(head))))
    return (head + body)[:nbytes]


class FakeClock:
    """An Endpoint's time source (its ``clock``): seconds that pass only when a test says so."""

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now
