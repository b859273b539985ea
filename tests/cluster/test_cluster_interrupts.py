"""A cluster job ended from outside at any moment of its life, and a node running out of memory.

Each test starts ``mailrail`` as its own process and checks, by the namespaces, state directories,
cgroups and process ids it made, that nothing is left (the ``leaves_nothing`` fixture, and the ranks'
own pids), within a bound: a time-out is the test failing, not a measurement.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from helpers import alive, job_environment, leftovers, mailrail, program
from mailrail.cluster import ClusterSpec, VirtualCluster, namespaces, state
from mailrail.cluster.spec import PREFIX

pytestmark = [pytest.mark.mpi, pytest.mark.cluster]

#: Seconds from a signal to the end of the command, teardown included (it takes 1-2 s here).
END_BOUND_S = 20.0
#: Seconds from a SIGKILL of the owner to the watchdog having removed everything.
GONE_BOUND_S = 30.0


class Command:
    """``python -m mailrail ARGS`` as its own process, its output read by threads, so that every wait
    below is bounded even when a process the command left behind holds its pipes open.

    SIGINT starts at its default, or ignored as a background job of a non-interactive shell starts
    (``sh -c 'cmd &'``: issue 25's test ran so, and its SIGINT did nothing)."""

    def __init__(self, args: list[str], *, sigint_ignored: bool = False) -> None:
        disposition = signal.SIG_IGN if sigint_ignored else signal.SIG_DFL
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mailrail", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=job_environment(),
            preexec_fn=lambda: signal.signal(signal.SIGINT, disposition),
        )
        self.before = leftovers()
        self.stdout: list[str] = []
        self.stderr: list[str] = []
        self.readers = [
            threading.Thread(target=self._read, args=(stream, lines), daemon=True)
            for stream, lines in ((self.process.stdout, self.stdout), (self.process.stderr, self.stderr))
        ]
        for reader in self.readers:
            reader.start()

    @staticmethod
    def _read(stream, lines: list[str]) -> None:
        for line in stream:
            lines.append(line)

    def output(self) -> str:
        return "".join(self.stdout)[-2000:] + "\n--- stderr ---\n" + "".join(self.stderr)[-3000:]

    def fail(self, what: str) -> None:
        self.process.kill()
        self.process.wait()
        gone_within_bound(self.before)  # the watchdog's removal, so that only this failure is reported
        pytest.fail(f"{what} (exit {self.process.returncode}):\n{self.output()}")

    def wait_for(self, condition, what: str, bound: float = 120.0) -> None:
        """Poll *condition* every millisecond until it holds; the test fails if the command ends first."""
        deadline = time.monotonic() + bound
        while not condition():
            if self.process.poll() is not None or time.monotonic() > deadline:
                self.fail(f"never saw {what}")
            time.sleep(0.001)

    def line(self, text: str, stream: str = "stdout") -> str:
        lines = getattr(self, stream)
        self.wait_for(lambda: any(text in line for line in lines), f"a line with {text!r} on {stream}")
        return next(line for line in lines if text in line)

    def ready_pids(self, ranks: int) -> list[int]:
        self.wait_for(lambda: len(rank_pids("".join(self.stdout))) >= ranks, f"{ranks} ranks READY")
        return rank_pids("".join(self.stdout))

    def cluster_id(self, stream: str = "stderr") -> str:
        """The cluster's name, from the first line naming it (``virtual cluster NAME``); other lines may
        mention the virtual cluster too (``mailrail run``'s launch-settings line)."""
        naming = re.compile(r"virtual cluster (\w+)")
        lines = getattr(self, stream)
        self.wait_for(lambda: any(naming.search(line) for line in lines), f"a line naming the cluster on {stream}")
        return next(match.group(1) for line in lines if (match := naming.search(line)))

    def ended_within(self, bound: float) -> str:
        """Standard error, once the command has ended; the test fails after *bound* seconds."""
        try:
            self.process.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            self.fail(f"still running {bound:.0f} s after the signal")
        for reader in self.readers:
            reader.join(timeout=5)
        return "".join(self.stderr)


def rank_pids(stdout: str) -> list[int]:
    """The pids of ``READY RANK PID HOST`` lines (MPICH may join two ranks' lines into one)."""
    return [int(pid) for pid in re.findall(r"READY \d+ (\d+) ", stdout)]


def gone_within_bound(before: dict) -> None:
    deadline = time.monotonic() + GONE_BOUND_S
    while leftovers() != before and time.monotonic() < deadline:
        time.sleep(0.1)


def new_cluster_netns(before: set[str]) -> list[str]:
    return [n for n in namespaces.list_netns(PREFIX) if n not in before]


SIGNALS = [
    pytest.param(signal.SIGINT, False, id="SIGINT"),
    pytest.param(signal.SIGTERM, False, id="SIGTERM"),
    pytest.param(signal.SIGINT, True, id="SIGINT-inherited-ignored"),
]


@pytest.mark.parametrize("signum, sigint_ignored", SIGNALS)
@pytest.mark.parametrize("moment", ["build", "start-up", "running", "teardown"])
def test_a_signal_at_any_moment_ends_the_job_and_leaves_nothing(moment, signum, sigint_ignored, leaves_nothing):
    """build: once the first namespace exists; start-up: once mpiexec is being started; running: every
    rank up; teardown: once the first namespace is gone (the program itself exits at once)."""
    before = set(namespaces.list_netns(PREFIX))
    ranks = 4
    job = program("sleeper.py") if moment != "teardown" else ["true"]
    command = Command(["run", "-n", str(ranks), "--cluster", "2", "--", *job], sigint_ignored=sigint_ignored)
    pids: list[int] = []
    if moment == "build":
        command.wait_for(lambda: new_cluster_netns(before), "the first namespace")
    else:
        cluster_id = command.cluster_id()  # printed after the build, right before mpiexec starts
        if moment == "running":
            pids = command.ready_pids(ranks)
        elif moment == "teardown":
            names = f"{PREFIX}{cluster_id}-"
            command.wait_for(lambda: len(namespaces.list_netns(names)) < 3, "the teardown's start")
    landed = command.process.poll() is None
    command.process.send_signal(signum)
    sent = time.monotonic()
    err = command.ended_within(END_BOUND_S)
    assert time.monotonic() - sent < END_BOUND_S
    returncode = command.process.returncode
    if landed and moment != "teardown":
        assert returncode == 128 + signum, command.output()
        assert f"interrupted by {signal.Signals(signum).name}" in err and "Traceback" not in err, command.output()
    elif landed:  # the job itself succeeded; the signal, held until the teardown is done, may end it
        assert returncode in (0, 128 + signum), command.output()
    assert not any(alive(pid) for pid in pids)


def test_sigkill_of_the_owner_removes_its_cluster(leaves_nothing):
    """SIGKILL gives mailrail no chance to clean up: its watchdog removes the cluster and the ranks."""
    command = Command(["run", "-n", "4", "--cluster", "2", "--", *program("sleeper.py")])
    pids = command.ready_pids(4)
    cluster_id = command.cluster_id()
    assert namespaces.list_netns(f"{PREFIX}{cluster_id}-")
    command.process.kill()
    command.process.wait()
    killed = time.monotonic()
    left = gone_within(cluster_id, pids, GONE_BOUND_S)
    assert not left, f"{GONE_BOUND_S:.0f} s after SIGKILL: {left}"
    assert time.monotonic() - killed < GONE_BOUND_S


def gone_within(cluster_id: str, pids: list[int], bound: float) -> dict:
    """What of the cluster (namespaces, state directory, cgroup, ranks) is still there after *bound* s."""
    deadline = time.monotonic() + bound
    while True:
        now = leftovers()
        left = {
            "netns": namespaces.list_netns(f"{PREFIX}{cluster_id}-"),
            "state": [n for n in now["state"] if n == PREFIX + cluster_id],
            "cgroups": [n for n in now["cgroups"] if n == PREFIX + cluster_id],
            "ranks": [pid for pid in pids if alive(pid)],
        }
        if not any(left.values()) or time.monotonic() > deadline:
            return {k: v for k, v in left.items() if v}
        time.sleep(0.1)


def compare_args(out) -> list[str]:
    # enough messages that the mode still runs when the test signals it
    return [
        "compare",
        "--cluster",
        "2",
        "-n",
        "4",
        "--nodes",
        "2",
        "--messages",
        "200000",
        "--trials",
        "1",
        "--modes",
        "none",
        "--victim-node-memory",
        "off",
        "--out",
        str(out),
    ]


def test_sigkill_of_compare_removes_its_cluster(tmp_path, leaves_nothing):
    command = Command(compare_args(tmp_path / "cmp"))
    cluster_id = command.cluster_id("stdout")
    command.line("[1/1] flow control none")
    time.sleep(1.0)  # the mode's ranks are starting or running
    command.process.kill()
    command.process.wait()
    left = gone_within(cluster_id, [], GONE_BOUND_S)
    assert not left, f"{GONE_BOUND_S:.0f} s after SIGKILL: {left}"
    assert not (tmp_path / "cmp" / "compare.json").exists()


def test_sigint_to_compare_is_one_line_and_keeps_the_last_results(tmp_path, leaves_nothing):
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "compare.json").write_text('{"earlier": true}')
    (out / "compare.png").write_bytes(b"earlier")
    command = Command(compare_args(out), sigint_ignored=True)
    command.line("[1/1] flow control none")
    time.sleep(1.0)
    command.process.send_signal(signal.SIGINT)
    err = command.ended_within(END_BOUND_S)
    assert command.process.returncode == 130, command.output()
    assert "mailrail compare: interrupted by SIGINT" in err and "Traceback" not in err, command.output()
    assert json.loads((out / "compare.json").read_text()) == {"earlier": True}
    assert (out / "compare.png").read_bytes() == b"earlier"


def test_cluster_down_removes_a_stale_cluster(leaves_nothing):
    """A cluster whose recorded owner is gone (what a killed run without a watchdog would leave) is stale."""
    cluster = VirtualCluster(ClusterSpec(nodes=1))
    cluster.up()
    try:
        finished = subprocess.Popen(["true"])
        finished.wait()
        record = state.load(cluster.state_dir)
        record.owner_pid, record.owner_start = finished.pid, None  # an owner that has exited
        state.save(cluster.state_dir, record)
        status = json.loads(mailrail("cluster", "status", "--json").stdout)
        entry = next(e for e in status if e["name"] == cluster.layout.cluster_id)
        assert entry["state"] == "stale (owner gone)"
        down = mailrail("cluster", "down", "--name", cluster.layout.cluster_id)
        assert down.returncode == 0
        assert f"removed virtual cluster {cluster.layout.cluster_id} (stale (owner gone))" in down.stdout
        assert not namespaces.list_netns(f"{cluster.layout.name}-") and not os.path.exists(cluster.state_dir)
    finally:
        cluster.down()  # nothing left to remove; cancels this process's watchdog removal


def test_a_job_that_runs_out_of_memory_ends_at_once_and_names_the_node(as_root, leaves_nothing):
    """Node 1's cap kills a memory hog that rank 1 started; the ranks themselves live on, so without
    the cgroup watch the job would run to its 120 s time-out."""
    started = time.monotonic()
    completed = mailrail(
        "run",
        "-n",
        "2",
        "--cluster",
        "2",
        "--victim-ranks",
        "1",
        "--victim-node-memory",
        "160M",
        "--timeout",
        "120",
        "--",
        *program("allocate_past_node_cap.py"),
        timeout=150,
    )
    took = time.monotonic() - started
    assert completed.returncode == 137, completed.stderr[-2000:]
    assert re.search(r"node 1 ran out of memory after [0-9.]+ s \(cap 160 MiB\)", completed.stderr), completed.stderr
    assert "the job was ended then" in completed.stderr
    assert took < 60, f"{took:.1f} s: the job waited on after the kill"
    assert not any(alive(pid) for pid in rank_pids(completed.stdout))
