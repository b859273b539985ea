"""A cluster job ended from outside at any moment of its life, on a quiet and on a loaded machine, an owner that
exits without removing its cluster, and a node running out of memory.

Each test starts ``mailrail`` as its own process and checks, by the names of the clusters it made and the
process ids it knows, that nothing is left (the ``leaves_nothing`` fixture, and the ranks' own pids), within a
bound: a time-out is the test failing, not a measurement.  A command interrupted by a signal must have removed
its cluster when it exits (``mailrail run`` waits for that); a SIGKILLed one leaves it to its watchdog.
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

from helpers import (
    OwnClusters,
    alive,
    assert_left_nothing,
    job_environment,
    mailrail,
    program,
    started_at,
    still_present,
)
from mailrail_tools.cluster import ClusterSpec, VirtualCluster, namespaces, state
from mailrail_tools.cluster.spec import PREFIX
from mailrail_tools.jobs import control

pytestmark = [pytest.mark.mpi, pytest.mark.cluster]

#: Seconds from a signal to the end of the command, teardown included (it takes 1-2 s here).
END_BOUND_S = 20.0
#: Seconds from a SIGKILL of the owner to the watchdog having removed everything.
GONE_BOUND_S = 30.0
#: Seconds a command may take to reach a moment of its life (a cluster built, every rank up) on a loaded machine.
MOMENT_BOUND_S = 120.0

#: ``python -m mailrail_tools`` that prints every thread's stack on SIGUSR2: a command still running past its bound
#: is asked where it is before it is killed, so that a rare hang says where it hung.
WITH_STACKS_ON_SIGUSR2 = (
    "import faulthandler, runpy, signal; faulthandler.register(signal.SIGUSR2, all_threads=True); "
    "runpy.run_module('mailrail_tools', run_name='__main__', alter_sys=True)"
)


class Command:
    """``python -m mailrail_tools ARGS`` as its own process, its output read by threads, so that every wait
    below is bounded even when a process the command left behind holds its pipes open; :attr:`own` is what
    its clusters are (those it made: :class:`helpers.OwnClusters` with it as the origin).

    SIGINT starts at its default, or ignored as a background job of a non-interactive shell starts
    (``sh -c 'cmd &'``: issue 25's test ran so, and its SIGINT did nothing)."""

    def __init__(self, args: list[str], *, sigint_ignored: bool = False) -> None:
        disposition = signal.SIG_IGN if sigint_ignored else signal.SIG_DFL
        self.process = subprocess.Popen(
            [sys.executable, "-c", WITH_STACKS_ON_SIGUSR2, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=job_environment(),
            preexec_fn=lambda: signal.signal(signal.SIGINT, disposition),
        )
        self.started = time.monotonic()
        self.own = OwnClusters(origin=self.process.pid)
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

    def close(self) -> None:
        """SIGKILL the command if it still runs (by its pid), and stop watching its clusters."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
            self.own.settled(GONE_BOUND_S)  # the watchdog's removal, so that only the test's failure is reported
        self.own.close()

    def output(self) -> str:
        return "".join(self.stdout)[-2000:] + "\n--- stderr ---\n" + "".join(self.stderr)[-6000:]

    def process_tree(self) -> str:
        """The command and its descendants, a line each: pid, state, what it runs."""
        lines = []
        for pid in sorted({self.process.pid} | control.descendants([self.process.pid])):
            try:
                with open(f"/proc/{pid}/stat") as stat:
                    state = stat.read().rsplit(")", 1)[1].split()[0]
                with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                    argv = cmdline.read().replace(b"\0", b" ").decode(errors="replace")[:160]
            except OSError:
                continue
            lines.append(f"  {pid} {state} {argv}")
        return "\n".join(lines)

    def fail(self, what: str) -> None:
        self.close()
        pytest.fail(f"{what} (exit {self.process.returncode}):\n{self.output()}")

    def wait_for(self, condition, what: str, bound: float = MOMENT_BOUND_S) -> None:
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

    def netns(self) -> list[str]:
        """The network namespaces of this command's clusters."""
        names = {PREFIX + cluster_id for cluster_id in self.own.ids()}
        return [n for n in namespaces.list_netns(PREFIX) if n.rsplit("-", 1)[0] in names]

    def wait_for_moment(self, moment: str, ranks: int) -> list[int]:
        """Wait until the job reaches *moment* (:data:`MOMENTS`); the ranks' pids once they are known."""
        if moment == "start":
            return []
        if moment == "build":
            self.wait_for(lambda: self.netns(), "the first namespace")
            return []
        cluster_id = self.cluster_id()  # printed after the build, right before mpiexec starts
        if moment == "running":
            return self.ready_pids(ranks)
        if moment == "teardown":
            names = f"{PREFIX}{cluster_id}-"
            self.wait_for(lambda: len(namespaces.list_netns(names)) < 3, "the teardown's start")
        return []

    def ended_within(self, bound: float) -> str:
        """Standard error, once the command has ended; the test fails after *bound* seconds."""
        try:
            self.process.wait(timeout=bound)
        except subprocess.TimeoutExpired:
            tree = self.process_tree()
            self.process.send_signal(signal.SIGUSR2)  # its stacks, on its standard error
            time.sleep(1.0)
            self.fail(f"still running {bound:.0f} s after the signal; its processes:\n{tree}")
        for reader in self.readers:
            reader.join(timeout=5)
        return "".join(self.stderr)


@pytest.fixture
def start(leaves_nothing):
    """Starts :class:`Command` s; each is closed (SIGKILLed if it still runs) before the leftover check."""
    commands: list[Command] = []

    def starting(args: list[str], **options) -> Command:
        commands.append(Command(args, **options))
        return commands[-1]

    yield starting
    for command in commands:
        command.close()


def rank_pids(stdout: str) -> list[int]:
    """The pids of ``READY RANK PID HOST`` lines (MPICH may join two ranks' lines into one)."""
    return [int(pid) for pid in re.findall(r"READY \d+ (\d+) ", stdout)]


#: The moments of a cluster job's life a signal is sent at: start (a time after the command started: before its
#: handlers exist, or while it parses its arguments), build (its first namespace exists), start-up (mpiexec is
#: being started), running (every rank up), teardown (its first namespace is gone; the program exits at once).
MOMENTS = ("start", "build", "start-up", "running", "teardown")


def interrupt(start, moment: str, signum: int, *, delay: float = 0.0, sigint_ignored: bool = False) -> Command:
    """``mailrail run -n 4 --cluster 2`` sent *signum* *delay* seconds after *moment*; checks that it ended
    within the bound, said so in one line, and that when it had exited nothing of its cluster was left: its
    namespaces, state directory, cgroups and launcher processes, and the ranks out of the process table."""
    ranks = 4
    job = program("sleeper.py") if moment != "teardown" else ["true"]
    command = start(["run", "-n", str(ranks), "--cluster", "2", "--", *job], sigint_ignored=sigint_ignored)
    pids = command.wait_for_moment(moment, ranks)
    ranks_started = started_at(pids)
    time.sleep(delay)
    landed = command.process.poll() is None
    command.process.send_signal(signum)
    sent = time.monotonic()
    err = command.ended_within(END_BOUND_S)
    at_exit = command.own.leftovers()
    assert time.monotonic() - sent < END_BOUND_S
    returncode = command.process.returncode
    what = f"{signal.Signals(signum).name} {delay:g} s after {moment}"
    assert not at_exit, f"{what}: when the command had exited its cluster had left {at_exit}\n{command.output()}"
    assert still_present(ranks_started) == [], f"{what}: ranks still there when the command had exited"
    if not landed:  # the job had ended by itself
        return command
    if moment == "teardown":  # the job itself succeeded; the signal, held until the teardown is done, may end it,
        # or end the exiting process (mailrail's handlers are gone once its command is done: -signum)
        assert returncode in (0, 128 + signum, -signum) and "Traceback" not in err, (what, command.output())
    elif moment == "start" and (returncode == -signum or err.rstrip().endswith("KeyboardInterrupt")):
        pass  # the signal came before mailrail's handlers were set (Python's own ended it): nothing was built yet
    else:
        assert returncode == 128 + signum, (what, command.output())
        interrupted = f"interrupted by {signal.Signals(signum).name}"
        assert interrupted in err and "Traceback" not in err, (what, command.output())
    return command


SIGNALS = [
    pytest.param(signal.SIGINT, False, id="SIGINT"),
    pytest.param(signal.SIGTERM, False, id="SIGTERM"),
    pytest.param(signal.SIGINT, True, id="SIGINT-inherited-ignored"),
]


@pytest.mark.parametrize("signum, sigint_ignored", SIGNALS)
@pytest.mark.parametrize("moment", MOMENTS[1:])
def test_a_signal_at_any_moment_ends_the_job_and_leaves_nothing(moment, signum, sigint_ignored, start):
    interrupt(start, moment, signum, sigint_ignored=sigint_ignored)


@pytest.fixture
def busy_cores():
    """Two busy processes per core this process may run on, started here and ended here by their pids: the
    machine as loaded as when two other test runs share it."""
    spinners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2 * len(os.sched_getaffinity(0)))
    ]
    try:
        yield len(spinners)
    finally:
        for spinner in spinners:
            spinner.kill()
        for spinner in spinners:
            spinner.wait()


def loaded_schedule(count: int) -> list[tuple[str, float, int]]:
    """*count* interrupts (moment, delay after it, signal) spread over the 48 of :data:`LOADED_MOMENTS`, both
    signals, in order."""
    both = (signal.SIGINT, signal.SIGTERM)
    schedule = [(moment, delay, signum) for moment, delay in LOADED_MOMENTS for signum in both]
    if not 1 <= count <= len(schedule):
        raise ValueError(f"MAILRAIL_TEST_LOADED_INTERRUPTS must be 1 to {len(schedule)}, got {count}")
    step = len(schedule) / count
    return [schedule[int(i * step) + (i % 2 if step >= 2 else 0)] for i in range(count)]


#: When the loaded test's signals land: from 0.05 s after the command started to several seconds into the job,
#: during the build, mpiexec's start, the running job and the teardown (24 moments, each with both signals).
LOADED_MOMENTS = [
    *(("start", delay) for delay in (0.05, 0.2, 0.3, 0.5, 0.8, 1.2, 2.0, 3.0, 5.0)),
    *(("build", delay) for delay in (0.0, 0.02, 0.05, 0.1, 0.3)),
    *(("start-up", delay) for delay in (0.0, 0.05, 0.3)),
    *(("running", delay) for delay in (0.0, 1.0, 3.0)),
    *(("teardown", delay) for delay in (0.0, 0.02, 0.1, 0.3)),
]
#: How many of them the suite sends (``MAILRAIL_TEST_LOADED_INTERRUPTS=48`` sends them all).
LOADED_INTERRUPTS = int(os.environ.get("MAILRAIL_TEST_LOADED_INTERRUPTS", "8"))


@pytest.mark.slow
def test_interrupts_on_a_loaded_machine_leave_nothing(busy_cores, start):
    """SIGINT and SIGTERM at moments from the start to the teardown while every core is busy twice over: each
    command, when it has exited, has left nothing of its cluster (issue 48: under load a signal landed where
    no block removed the cluster, and the watchdog then refused to, its owner still exiting)."""
    for moment, delay, signum in loaded_schedule(LOADED_INTERRUPTS):
        interrupt(start, moment, signum, delay=delay).close()


def test_the_loaded_schedule_covers_every_moment_and_both_signals():
    schedule = loaded_schedule(8)
    assert {moment for moment, _, _ in schedule} == set(MOMENTS)
    assert {signum for _, _, signum in schedule} == {signal.SIGINT, signal.SIGTERM}
    assert len(set(loaded_schedule(48))) == 48
    with pytest.raises(ValueError, match="MAILRAIL_TEST_LOADED_INTERRUPTS must be 1 to 48, got 49"):
        loaded_schedule(49)


def test_a_signal_at_any_step_between_the_build_and_the_removal_leaves_nothing(admin, leaves_nothing):
    """In this process, SIGINT raised at each bytecode of MailRail's own code from the end of the build's last step
    to the start of the removal (every step, a superset of where Python runs a signal handler).  At 18 of those
    steps it used to escape both the build's cleanup and the ``with`` block's: the end of up() outside its
    ``try``, __enter__ after up() returned, and __exit__ and down() before they held the signals; the cluster
    stayed.  mailrail removes what was left so at the command's end (control.run_pending_cleanups, which this
    test calls as mailrail_tools.cli does)."""
    source = os.path.dirname(os.path.dirname(control.__file__))
    steps: int | None = None  # counted from the end of the build's last step (its own length varies)
    removal_starts: list[int | None] = []
    raise_at = None
    raised_in: set[str] = set()

    def local(frame, event, arg):
        nonlocal steps
        if event == "opcode" and steps is not None:
            steps += 1
            if steps == raise_at:
                raised_in.add(frame.f_code.co_name)
                signal.raise_signal(signal.SIGINT)  # the handler runs here, at this step of this frame
        elif event == "return" and frame.f_code.co_name == "_write_agent":
            steps = 0
        return local

    def tracer(frame, event, arg):
        if not frame.f_code.co_filename.startswith(source):
            return None
        if frame.f_code.co_name == "remove_cluster":
            removal_starts.append(steps)
        frame.f_trace_opcodes = True
        return local

    def lifecycle() -> VirtualCluster:
        nonlocal steps
        steps = None
        control.handle_termination_signals()
        cluster = VirtualCluster(ClusterSpec(nodes=1))
        sys.settrace(tracer)
        try:
            try:
                with cluster:
                    pass
            finally:
                sys.settrace(None)
                control.run_pending_cleanups()
        except control.Terminated:
            pass
        return cluster

    previous = {signum: signal.getsignal(signum) for signum in control.TERMINATION_SIGNALS}
    try:
        lifecycle()
        removal = removal_starts[0]
        for raise_at in range(1, removal + 6):
            cluster = lifecycle()
            left = namespaces.list_netns(cluster.layout.name + "-") + [
                path for path in (cluster.state_dir,) if os.path.exists(path)
            ]
            assert not left, f"SIGINT at step {raise_at} after the build (the removal at {removal}): {left} left"
    finally:
        sys.settrace(None)
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    assert {"up", "__enter__", "__exit__", "down", "remove_cluster"} <= raised_in  # the steps it was about


def test_sigkill_of_the_owner_removes_its_cluster(start):
    """SIGKILL gives mailrail no chance to clean up: its watchdog removes the cluster and the ranks."""
    command = start(["run", "-n", "4", "--cluster", "2", "--", *program("sleeper.py")])
    pids = command.ready_pids(4)
    cluster_id = command.cluster_id()
    assert namespaces.list_netns(f"{PREFIX}{cluster_id}-")
    command.process.kill()
    command.process.wait()
    killed = time.monotonic()
    left = gone_within(command.own, pids, GONE_BOUND_S)
    assert not left, f"{GONE_BOUND_S:.0f} s after SIGKILL: {left}"
    assert time.monotonic() - killed < GONE_BOUND_S


def gone_within(own: OwnClusters, pids: list[int], bound: float) -> dict:
    """What of *own*'s clusters (namespaces, state directory, cgroup, ...) and the ranks *pids* is still there
    after *bound* s."""
    deadline = time.monotonic() + bound
    while True:
        left = {**own.leftovers(), "ranks": [pid for pid in pids if alive(pid)]}
        if not any(left.values()) or time.monotonic() > deadline:
            return {k: v for k, v in left.items() if v}
        time.sleep(0.1)


OWNER_WITHOUT_REMOVAL = """
import os, sys
from mailrail_tools.cluster import ClusterSpec, VirtualCluster
cluster = VirtualCluster(ClusterSpec(nodes=1))
cluster.up()
print(cluster.layout.cluster_id, flush=True)
if sys.argv[1] == "os._exit":
    os._exit(0)  # as a crash: no atexit, only the watchdog is left to remove it
sys.exit(0)  # a normal exit with the cluster up: atexit removes it (run_pending_cleanups)
"""


@pytest.mark.parametrize("ending", ["exit", "os._exit"])
def test_an_owner_that_exits_without_removing_its_cluster_leaves_nothing(ending, admin, leaves_nothing):
    """A normal exit removes the cluster before the process is gone; an exit that skips Python's (os._exit) leaves
    it to the watchdog, which must remove it while the owner is a zombie its parent (this test) has not
    collected: an exited owner is gone, whether or not collected (the watchdog used to run ``cluster down``
    while its owner was still exiting, or not yet collected, and that refused: "belongs to the running job")."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER_WITHOUT_REMOVAL, ending], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        cluster_id = owner.stdout.readline().strip()
        assert cluster_id, owner.stderr.read()
        names = f"{PREFIX}{cluster_id}"
        if ending == "exit":
            owner.wait(timeout=END_BOUND_S)
            assert not namespaces.list_netns(names + "-") and names not in state.known_names(PREFIX)
        else:
            deadline = time.monotonic() + GONE_BOUND_S
            while namespaces.list_netns(names + "-") or names in state.known_names(PREFIX):
                assert time.monotonic() < deadline, f"{GONE_BOUND_S:.0f} s after its owner ended: {names} still there"
                time.sleep(0.05)
            assert not control.is_running(owner.pid, None) and control.is_present(owner.pid, None)  # a zombie
        assert "belongs to the running job" not in owner.stderr.read()
    finally:
        owner.kill()
        owner.wait()


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


def test_sigkill_of_compare_removes_its_cluster(tmp_path, start):
    command = start(compare_args(tmp_path / "cmp"))
    command.cluster_id("stdout")
    command.line("[1/1] flow control none")
    time.sleep(1.0)  # the mode's ranks are starting or running
    command.process.kill()
    command.process.wait()
    left = gone_within(command.own, [], GONE_BOUND_S)
    assert not left, f"{GONE_BOUND_S:.0f} s after SIGKILL: {left}"
    assert not (tmp_path / "cmp" / "compare.json").exists()


def test_sigint_to_compare_is_one_line_and_keeps_the_last_results(tmp_path, start):
    out = tmp_path / "cmp"
    out.mkdir()
    (out / "compare.json").write_text('{"earlier": true}')
    (out / "compare.png").write_bytes(b"earlier")
    command = start(compare_args(out), sigint_ignored=True)
    command.line("[1/1] flow control none")
    time.sleep(1.0)
    command.process.send_signal(signal.SIGINT)
    err = command.ended_within(END_BOUND_S)
    assert command.own.leftovers() == {}  # removed before it exited
    assert command.process.returncode == 130, command.output()
    assert "mailrail compare: interrupted by SIGINT" in err and "Traceback" not in err, command.output()
    assert json.loads((out / "compare.json").read_text()) == {"earlier": True}
    assert (out / "compare.png").read_bytes() == b"earlier"


@pytest.mark.parametrize("owner", ["exited", "not collected", "pid reused"])
def test_cluster_down_removes_a_cluster_whose_owner_is_gone(owner, admin, leaves_nothing):
    """A cluster whose recorded owner is gone is stale, and ``cluster down`` removes it: an owner that exited and
    was collected, one that exited and that its parent has not collected yet (a zombie: what a watchdog's
    ``cluster down`` met right after the owner ended), and a live process that has the owner's pid but
    started at another time."""
    cluster = VirtualCluster(ClusterSpec(nodes=1))
    cluster.up()
    ended = subprocess.Popen(["true"])
    ended_start = control.process_start_time(ended.pid)  # (read before it is collected: a zombie keeps it)
    try:
        record = state.load(cluster.state_dir)
        if owner == "pid reused":  # a running process of the owner's pid, another start time
            record.owner_pid, record.owner_start = os.getpid(), control.process_start_time(os.getpid()) + 1
        else:
            while control.is_running(ended.pid, None):
                time.sleep(0.01)
            if owner == "exited":
                ended.wait()
            record.owner_pid, record.owner_start = ended.pid, ended_start
        state.save(cluster.state_dir, record)
        status = json.loads(mailrail("cluster", "status", "--json").stdout)
        entry = next(e for e in status if e["name"] == cluster.layout.cluster_id)
        assert entry["state"] == "stale (owner gone)"
        down = mailrail("cluster", "down", "--name", cluster.layout.cluster_id)
        assert down.returncode == 0, down.stderr
        assert f"removed virtual cluster {cluster.layout.cluster_id} (stale (owner gone))" in down.stdout
        assert not namespaces.list_netns(f"{cluster.layout.name}-") and not os.path.exists(cluster.state_dir)
    finally:
        ended.wait()
        cluster.down()  # nothing left to remove; cancels this process's watchdog removal


def test_cluster_down_refuses_a_running_jobs_cluster(admin, leaves_nothing):
    with VirtualCluster(ClusterSpec(nodes=1)) as cluster:
        down = mailrail("cluster", "down", "--name", cluster.layout.cluster_id)
        assert down.returncode == 2
        assert f"belongs to the running job of process {os.getpid()}" in down.stderr
        assert namespaces.list_netns(f"{cluster.layout.name}-")


# --- leftover checks count the test's own clusters only -------------------------------------------------------

DETACHED = """
import subprocess, sys
print(subprocess.Popen(sys.argv[1:], start_new_session=True, stdin=subprocess.DEVNULL,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).pid, flush=True)
"""


@pytest.fixture
def unrelated_cluster(cluster_support):
    """A cluster job no test made: ``mailrail run`` started through a process that exits at once, so that it is
    not this process's descendant (an unrelated job of the machine); its cluster's id once it is up.  Ended
    afterwards by its pid (SIGTERM: it removes its cluster), after the test's leftover check."""
    argv = [sys.executable, "-m", "mailrail_tools", "run", "-n", "1", "--cluster", "1", "--", *program("sleeper.py")]
    launched = subprocess.run(
        [sys.executable, "-c", DETACHED, *argv], capture_output=True, text=True, env=job_environment(), check=True
    )
    pid = int(launched.stdout)
    job = started_at([pid])
    deadline = time.monotonic() + MOMENT_BOUND_S
    cluster_id = None
    while cluster_id is None or len(namespaces.list_netns(f"{PREFIX}{cluster_id}-")) < 2:
        assert control.is_running(pid, job[pid]) and time.monotonic() < deadline, "the unrelated job never built"
        records = [state.load(state.state_dir(name)) for name in state.known_names(PREFIX)]
        cluster_id = next((r.cluster_id for r in records if r is not None and r.owner_pid == pid), None)
        time.sleep(0.05)
    record = state.load(state.state_dir(PREFIX + cluster_id))
    assert not record.made_by(os.getpid(), control.process_start_time(os.getpid())), "not detached from this test"
    try:
        yield cluster_id
    finally:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + END_BOUND_S
        while still_present(job) or namespaces.list_netns(f"{PREFIX}{cluster_id}-"):
            assert time.monotonic() < deadline, f"the unrelated job {pid} did not remove its cluster {cluster_id}"
            time.sleep(0.05)


def test_a_leftover_check_counts_the_tests_own_clusters_only(unrelated_cluster, admin, leaves_nothing):
    """Another job's cluster stands on the machine during the whole test and its leftover checks (the fixture's
    too: it is checked before the unrelated job ends): they pass.  The test's own cluster left behind fails
    the same check, naming it."""
    assert unrelated_cluster not in leaves_nothing.ids()
    assert_left_nothing(leaves_nothing, bound=0)
    cluster = VirtualCluster(ClusterSpec(nodes=1))
    cluster.up()
    try:
        with pytest.raises(AssertionError, match=f"{PREFIX}{cluster.layout.cluster_id}-head"):
            assert_left_nothing(leaves_nothing, bound=0)
    finally:
        cluster.down()
    assert leaves_nothing.ids() == {cluster.layout.cluster_id}
    assert_left_nothing(leaves_nothing, bound=0)
    assert namespaces.list_netns(f"{PREFIX}{unrelated_cluster}-")  # (still there: the checks did look past it)


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
