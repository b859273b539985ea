"""Fault injection on local jobs: every fault ends the whole job within a bound, names the rank and the cause,
and leaves no process of the job and no job directory behind.

A time-out is a failure (every wait below is bounded); ``smoke`` cases also run on the MPICH wheel.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time

import pytest

from helpers import SETTLE_S, alive, job_environment, job_files_left, mailrail, program_path
from mailrail import segments
from mailrail.failure import FAILURES_VARIABLE
from mailrail_tools.jobs import control
from mailrail_tools.jobs.bounded import JobStopped, run_bounded
from mailrail_tools.jobs.rank_runner import rank_argv
from mailrail_tools.jobs.which_mpi import mpi_environment, mpiexec_argv

pytestmark = pytest.mark.jobs  # (no rail: make test-python-transport leaves them out)

#: Seconds a fault may take to end its job (the mechanisms take well under one; start-up is included).
END_BOUND = 20.0
#: The MPI the jobs run (the test process's mpi4py, as the launcher's).
MPI_LIBRARY = subprocess.run(
    # (MPI not initialized: a singleton Open MPI 5 leaves a segment in /dev/shm)
    [
        sys.executable,
        "-c",
        "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; print(MPI.Get_library_version())",
    ],
    capture_output=True,
    text=True,
    check=False,
).stdout
#: Seconds a job may take to start (every rank announced) on a loaded 2-core machine.
START_BOUND = 60.0


def ready_pids(output: str) -> list[int]:
    """The pids in the ranks' ``READY RANK PID HOST`` lines (Hydra may run one rank's line into another's)."""
    return [int(pid) for pid in re.findall(r"READY \d+ (\d+) ", output)]


@pytest.fixture(autouse=True)
def private_tmpdir(tmp_path, monkeypatch):
    """Job directories go to a directory of this test's (other jobs on the machine make theirs in /tmp)."""
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def job_dirs() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), "mailrail-job-*")))


def environment_values(pids: list[int], name: str) -> set[str]:
    """The values of the variable *name* in the environments of *pids* (those that are readable)."""
    found = set()
    for pid in pids:
        with contextlib.suppress(OSError), open(f"/proc/{pid}/environ", "rb") as source:
            for entry in source.read().split(b"\0"):
                if entry.startswith(name.encode() + b"="):
                    found.add(entry.split(b"=", 1)[1].decode())
    return found


def gone(pids: list[int], bound: float = END_BOUND) -> list[int]:
    """The *pids* still alive after up to *bound* seconds (a process may take a moment to be reaped)."""
    deadline = time.monotonic() + bound
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [pid for pid in pids if alive(pid)]


class Launched:
    """``mailrail run ARGS`` started in its own session; its READY lines read; everything killed at the end."""

    def __init__(self, *args: str, ranks: int = 2, preexec_fn=None, env: dict[str, str] | None = None) -> None:
        self.before_dirs = job_dirs()
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mailrail_tools", "run", "-n", str(ranks), *args],
            env=job_environment(TMPDIR=tempfile.gettempdir(), **(env or {})),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            preexec_fn=preexec_fn,
        )
        self.pids: list[int] = []
        self.shared_memory: set[tuple[str, int]] = set()
        self.stdout = self.stderr = ""
        self.job: set[int] = set()
        self.mapped: set[str] = set()
        self.launcher_files: set[str] = set()
        self.scratch: set[str] = set()  # mailrail run's own directory for the job (where ranks record failures)

    def wait_ready(self, ranks: int = 2) -> list[int]:
        """The ranks' pids once every rank printed READY (and the job's processes, launcher included)."""
        deadline = time.monotonic() + START_BOUND
        fd = self.process.stdout.fileno()
        while len(ready_pids(self.stdout)) < ranks:
            left = deadline - time.monotonic()
            assert left > 0 and select.select([fd], [], [], left)[0], f"job did not start: {self.stdout!r}"
            chunk = os.read(fd, 65536).decode()
            assert chunk, f"job ended before it started: {self.stdout!r}"
            self.stdout += chunk
        self.pids = ready_pids(self.stdout)
        self.job = control.descendants([self.process.pid]) - {self.process.pid}
        self.launcher_files = segments.held_launcher_files(self.job)  # (MPICH's Hydra: its topology file)
        self.scratch = {os.path.dirname(path) for path in environment_values(self.pids, FAILURES_VARIABLE)}
        self.shared_memory = {(path, int(held)) for path, held in re.findall(r"READY .* SHM (\S+) (\d+)", self.stdout)}
        self.mapped = {p for paths in re.findall(r"READY .* MAPPED (\S+)", self.stdout) for p in paths.split(",")} - {
            "-"
        }
        return self.pids

    def finish(self, bound: float = END_BOUND) -> int:
        """The exit status, within *bound* seconds (else the test fails)."""
        deadline = time.monotonic() + bound
        streams = {self.process.stdout.fileno(): "stdout", self.process.stderr.fileno(): "stderr"}
        while streams:  # raw reads: the text wrappers' buffers were bypassed by wait_ready
            left = deadline - time.monotonic()
            ready = select.select(list(streams), [], [], max(left, 0))[0] if left > 0 else []
            if not ready:
                pytest.fail(f"the job did not end within {bound} s of the fault:\n{self.stdout}\n{self.stderr}")
            for fd in ready:
                chunk = os.read(fd, 65536).decode(errors="replace")
                if chunk:
                    setattr(self, streams[fd], getattr(self, streams[fd]) + chunk)
                else:
                    del streams[fd]
        return self.process.wait(max(deadline - time.monotonic(), 1))

    def assert_nothing_left(self) -> None:
        assert gone(sorted(self.job | set(self.pids))) == [], "processes of the job outlived it"
        assert job_dirs() - self.before_dirs == set(), "a job directory was left behind"
        # the job's shared memory (a directory of its own, as the ranks reported it) went with it
        for path, _ in self.shared_memory:
            assert not os.path.exists(path), f"the job's shared memory {path} was left behind"
        # and so did every segment its ranks mapped (MPICH names its own, in /dev/shm itself)
        assert not [path for path in self.mapped if os.path.exists(path)], "the job's segments were left behind"
        # and the files its launcher made in /tmp (a killed Hydra proxy left its topology file, every time)
        assert not [path for path in self.launcher_files if os.path.exists(path)], self.launcher_files
        # and mailrail run's own directory, even when mailrail run was SIGKILLed (its watchdog removes it)
        deadline = time.monotonic() + SETTLE_S
        while any(os.path.exists(path) for path in self.scratch) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [path for path in self.scratch if os.path.exists(path)], self.scratch

    def cleanup(self) -> None:
        for pid in [self.process.pid, *self.job, *self.pids]:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(10)
        self.process.stdout.close()
        self.process.stderr.close()


@contextlib.contextmanager
def launched(*args: str, **kwargs):
    job = Launched(*args, **kwargs)
    try:
        yield job
    finally:
        job.cleanup()


# --- run_bounded and the watchdog (the contract other modules code against) ----------------------


@pytest.mark.mpi
@pytest.mark.smoke
def test_watch_ends_the_whole_job_and_says_why():
    before = job_dirs()
    polls = []

    def watch():
        polls.append(time.monotonic())
        return "enough" if len(polls) >= 20 else None

    argv = mpiexec_argv(2, [sys.executable, "-m", "mpi4py", program_path("sleeper.py")])
    with pytest.raises(JobStopped) as stopped:
        run_bounded(argv, timeout=START_BOUND, env=mpi_environment(base=job_environment()), capture=True, watch=watch)
    assert stopped.value.reason == "enough" and 0 < stopped.value.after_s < START_BOUND
    assert gone(ready_pids(stopped.value.output or "")) == []
    assert job_dirs() - before == set()


@pytest.mark.mpi
@pytest.mark.smoke
def test_a_timeout_ends_every_rank():
    before = job_dirs()
    argv = mpiexec_argv(2, [sys.executable, "-m", "mpi4py", program_path("sleeper.py")])
    with pytest.raises(subprocess.TimeoutExpired) as expired:
        run_bounded(argv, timeout=8, env=mpi_environment(base=job_environment()), capture=True)
    pids = ready_pids(expired.value.output or "")
    assert len(pids) == 2, expired.value.output
    assert gone(pids, bound=0.5) == []  # gone when run_bounded returns, not some time later
    assert job_dirs() - before == set()


@pytest.mark.mpi
@pytest.mark.smoke
def test_a_failing_watch_still_ends_the_job():
    started = []

    def watch():
        started.append(1)
        if len(started) > 20:
            raise ValueError("the watch itself failed")

    argv = mpiexec_argv(2, [sys.executable, "-m", "mpi4py", program_path("sleeper.py")])
    env = mpi_environment(base=job_environment())
    before = job_dirs()
    ranks_before = control.children_of(os.getpid())
    with pytest.raises(ValueError, match="the watch itself failed"):
        run_bounded(argv, timeout=START_BOUND, env=env, watch=watch, capture=True)
    left = {pid for pid in control.children_of(os.getpid()) - ranks_before if not control.is_watchdog(pid)}
    assert left == set()
    assert job_dirs() - before == set()


def zombie_children() -> set[int]:
    """Our exited children nobody collected."""
    me = str(os.getpid())
    found = set()
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError), open(f"/proc/{entry}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
            if fields[0] == "Z" and fields[1] == me:
                found.add(int(entry))
    return found


@pytest.mark.mpi
@pytest.mark.smoke
def test_a_job_leaves_no_zombie_behind(tmp_path):
    """The rank runner's output forwarders are orphaned at their start and re-parent to the job's runner: each
    job left one zombie per rank in a process that runs many (a pytest session had 233)."""
    before = zombie_children()
    for _ in range(2):
        argv = mpiexec_argv(3, rank_argv(["python", "-c", "print('hello')"]))
        completed = run_bounded(argv, timeout=START_BOUND, env=mpi_environment(base=job_environment()), capture=True)
        assert completed.stdout.count("hello") == 3, completed
    assert zombie_children() - before == set()


DAEMON = """
import os, subprocess, sys
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True)
print(child.pid, flush=True)
os._exit(0)  # the launcher ends; its child, in a session of its own, is orphaned
"""


def test_a_process_the_launcher_orphaned_is_ended_when_it_exits():
    """It holds the job's output pipes: run_bounded used to wait on them until the time-out."""
    completed = run_bounded([sys.executable, "-c", DAEMON], timeout=60, env=job_environment(), capture=True)
    assert completed.returncode == 0
    assert gone([int(completed.stdout)], bound=0.5) == []


OWNER = """
import os, sys, time
from mailrail_tools.jobs.control import on_owner_death
unregister = on_owner_death(["touch", sys.argv[1] + ".ran"])
on_owner_death(["touch", sys.argv[1] + ".unregistered"])()
print("REGISTERED", flush=True)
if sys.argv[2] == "unregister":
    sys.stdin.readline()  # the test has seen the watchdog: it would race an owner that ended at once
    unregister()
    sys.exit(0)
time.sleep(60)
"""


@pytest.mark.parametrize("ending", ["sigkill", "unregister"])
def test_the_watchdog_runs_what_is_registered_when_its_owner_dies(ending, tmp_path):
    marker = str(tmp_path / "cmd")
    owner = subprocess.Popen(
        [sys.executable, "-X", "dev", "-c", OWNER, marker, ending],  # dev mode shows ResourceWarnings
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert owner.stdout.readline().strip() == "REGISTERED"
        watchdogs = control.children_of(owner.pid)
        assert len(watchdogs) == 1
        if ending == "sigkill":
            owner.kill()
        _, stderr = owner.communicate("go\n" if ending == "unregister" else None, timeout=20)
        # an owner that exits normally waits for its watchdog: gone at once, and no warning about it
        assert gone(list(watchdogs), bound=5 if ending == "sigkill" else 0.5) == [], "the watchdog outlived its work"
        assert os.path.exists(marker + ".ran") == (ending == "sigkill")
        assert not os.path.exists(marker + ".unregistered")
        assert "ResourceWarning" not in stderr, stderr
    finally:
        owner.kill()
        owner.wait()


OWNER_LEAVING = """
import os, sys
from mailrail_tools.jobs import control
check = "import sys; from mailrail_tools.jobs import control; open(sys.argv[1], 'w').write(repr(control.is_running("
check += "int(sys.argv[2]), int(sys.argv[3]))))"
me = os.getpid()
control.on_owner_death([sys.executable, "-c", check, sys.argv[1], str(me), str(control.process_start_time(me))])
print("REGISTERED", flush=True)
if sys.argv[2] == "exec":  # the pipe closes at exec; the process, same pid and start time, runs on a second
    os.execv(sys.executable, [sys.executable, "-c", "import time; time.sleep(1)"])
sys.exit(0)  # a normal exit with the command still registered
"""


@pytest.mark.parametrize("leaving", ["exit", "exec"])
def test_the_watchdog_runs_what_is_left_registered_once_its_owner_is_gone(leaving, tmp_path):
    """End-of-file reaches the watchdog while its owner exits (it closes the pipe in its atexit) or once it has
    exec'd another program, before it is gone: a command that asks whether the owner runs (``mailrail cluster
    down`` refuses a running job's cluster) must find it gone, and it did not (issue 48)."""
    marker = tmp_path / "owner-running"
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER_LEAVING, str(marker), leaving],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout.readline().strip() == "REGISTERED"
        _, stderr = owner.communicate(timeout=END_BOUND)  # (its stderr is the watchdog's too: done once it is)
        assert marker.read_text() == "False", stderr
    finally:
        owner.kill()
        owner.wait()


# --- faults of a job under mailrail run -----------------------------------------------------------

#: The MPI's messages (Open MPI's and Hydra's boxes, MPICH's abort line): kept out of a failed job's output.
MPI_MESSAGE_MARKS = ("-" * 74, "=" * 40, "MPI_ABORT was invoked", "application called MPI_Abort", "BAD TERMINATION")


#: ``mailrail run``'s last line: the summary, then what it kept in a log, and where.
KEPT = re.compile(
    r"(.*) \[((?:the (?:\d+ tracebacks|traceback) in full)?(?: and )?(?:the MPI's messages)?): (\S+); -v shows them\]"
)


def summary_and_log(stderr: str) -> tuple[str, str | None]:
    """``mailrail run``'s last line without the name of the log it kept the failing ranks' tracebacks and the MPI's
    messages in, and that log's path (None without one); the MPI's messages must not be in *stderr* itself."""
    last = stderr.strip().splitlines()[-1].strip()
    for mark in MPI_MESSAGE_MARKS:
        assert mark not in stderr, stderr
    found = KEPT.fullmatch(last)
    return (last, None) if found is None else (found.group(1), found.group(3))


def summary_of(stderr: str) -> tuple[str, str]:
    """:func:`summary_and_log`, with the log's text (which the test then removes) instead of its path."""
    last, path = summary_and_log(stderr)
    if path is None:
        return last, ""
    with open(path, encoding="utf-8") as log:
        text = log.read()
    os.unlink(path)
    return last, text


@pytest.mark.mpi
@pytest.mark.smoke
def test_an_exception_on_one_rank_ends_the_job_with_its_traceback_once(tmp_path):
    """Rank 0 raises while rank 1 sits in Barrier (it used to hang forever)."""
    trigger = tmp_path / "raise-now"
    with launched("--", "python", program_path("raise_beside_barrier.py"), env={"TRIGGER_FILE": str(trigger)}) as job:
        job.wait_ready()
        trigger.touch()  # (every READY line read first: an abort drops what a peer's forwarder still holds)
        assert job.finish() != 0
        assert job.stderr.count("] RuntimeError: injected failure on this rank") == 1, job.stderr
        assert "[rank 0 on " in job.stderr
        assert "runpy" not in job.stderr  # the traceback starts at the program, not the runner
        # after all that, mailrail run says it in one line; the traceback in full and the MPI's abort notices
        # (if any: MPICH's abort line is lost now and then, when Hydra ends the job first) are in the log it names
        last, log = summary_of(job.stderr)
        said = "the job failed with exit status 1: rank 0 raised RuntimeError: injected failure on this rank"
        assert last == f"mailrail run: {said}", job.stderr
        assert log.count("Traceback") == 1 and log.count("] RuntimeError: injected failure on this rank") == 1, log
        job.assert_nothing_left()


@pytest.mark.mpi
def test_verbose_shows_the_mpi_s_messages_where_they_came(tmp_path):
    with launched("-v", "--", "python", program_path("sleeper.py")) as job:
        pids = job.wait_ready()
        os.kill(pids[1], signal.SIGKILL)
        assert job.finish() != 0
        # Open MPI's box on standard error, Hydra's on standard output: both passed on, no log kept
        assert "signal 9" in job.stderr + job.stdout, (job.stdout, job.stderr)
        assert job.stderr.strip().splitlines()[-1].endswith("(the MPI's messages above say why)"), job.stderr
        assert not list(tmp_path.glob("mailrail-run-*.log"))


@pytest.mark.mpi
@pytest.mark.smoke
def test_a_configuration_error_is_said_once_for_the_job(tmp_path):
    """Every rank raises the same ConfigError: no traceback per rank, one line from mailrail run."""
    hello = tmp_path / "hello.py"
    hello.write_text("from mpi4py import MPI\nfrom mailrail import MailRail\nMailRail(MPI.COMM_WORLD)\n")
    with launched("python", str(hello), ranks=3, env={"MAILRAIL_RECV_POOL_SLOTS": "abc"}) as job:
        assert job.finish(START_BOUND) == 1
        assert "Traceback" not in job.stderr and "ConfigWarning" not in job.stderr, job.stderr
        error = "ConfigError: MAILRAIL_RECV_POOL_SLOTS must be an integer, got 'abc'"
        assert job.stderr.count(error) == 1, job.stderr
        last, log = summary_of(job.stderr)
        assert last == f"mailrail run: the job failed with exit status 1: every rank (3) raised {error}"
        assert log.count("Traceback (most recent call last)") == 3, log  # (each rank's, in the log)
        job.assert_nothing_left()


# --- one traceback per failure: the first failing rank's, trimmed to the user's frames ---------------------------

#: Ranks 2 and 1 fail, in that order, each from a user function nested two deep (tests/programs).
FAIL_DEEP = program_path("fail_deep_in_library.py")
#: What rank 2 and rank 1 raise inside the library, the exception's last line.
RANK_2_RAISES = "mailrail.errors.InvalidDestinationError: destination 5 is out of range: valid ranks are 0..2"
RANK_2_SAID = RANK_2_RAISES.removeprefix("mailrail.errors.")  # (as the summary says it)
RANK_1_RAISES = "TypeError: Map.insert(): keys of dtype <U12 for a container of dtype uint64"


def lines_of(text: str, rank: int) -> tuple[str, list[str]]:
    """The label ``[rank R on HOST] `` of rank *rank*'s lines in *text*, and those lines without it."""
    lines = re.findall(rf"^(\[rank {rank} on \S+\] )(.*)$", text, re.M)
    assert lines, text
    assert len({label for label, _ in lines}) == 1, lines
    return lines[0][0], [line for _, line in lines]


def frames(lines: list[str]) -> list[str]:
    """Where each frame of a traceback's *lines* is (``FILE:FUNCTION``), and the lines standing for frames left out."""
    found = []
    for line in lines:
        frame = re.fullmatch(r'  File "(.*)", line \d+, in (\S+)', line)
        if frame:
            found.append(f"{os.path.basename(frame.group(1))}:{frame.group(2)}")
        elif line.startswith("  ... "):
            found.append(line)
    return found


@pytest.mark.mpi
@pytest.mark.smoke
def test_one_traceback_the_first_failing_rank_s_trimmed_to_the_user_s_frames():
    """Ranks 2 and 1 raise deep inside library calls (rank 2 first); rank 0, in the barrier, is ended by their abort:
    the terminal shows rank 2's traceback alone, the user's frames, the library's frames left out in one line
    naming the log, the frame that raised, the exception intact; then the summary, naming the same log, which holds
    both tracebacks in full."""
    with launched("--", "python", FAIL_DEEP, ranks=3) as job:
        assert job.finish(START_BOUND) == 1, job.stderr
        assert job.stderr.count("Traceback (most recent call last)") == 1, job.stderr
        assert "[rank 1 on " not in job.stderr and "[rank 0 on " not in job.stderr, job.stderr
        _, shown = lines_of(job.stderr, 2)
        user = [
            "fail_deep_in_library.py:<module>",
            "fail_deep_in_library.py:fan_out",
            "fail_deep_in_library.py:deliver",
        ]
        where = frames(shown)
        assert where[:3] == user and where[4:] == ["protocol.py:checked_rank"], shown
        left_out = re.fullmatch(r"  \.\.\. (\d+) library frames? \(full traceback in (\S+)\)", where[3])
        assert left_out, shown
        assert shown[-1] == RANK_2_RAISES
        last, path = summary_and_log(job.stderr)
        # (a collateral rank may record an MPI error of its own as the job ends: it comes after these two)
        assert last.startswith(
            f"mailrail run: the job failed with exit status 1: rank 2 raised {RANK_2_SAID}; "
            f"rank 1 raised {RANK_1_RAISES}"
        ), job.stderr
        assert path == left_out.group(2) and path.startswith(tempfile.gettempdir() + os.sep)
        with open(path, encoding="utf-8") as kept:
            log = kept.read()
        os.unlink(path)
        # the log: every failing rank's traceback in full, rank 2's first; rank 2's holds the frames left out
        assert log.index("[rank 2 on ") < log.index("[rank 1 on "), log
        _, full_2 = lines_of(log, 2)
        assert len(frames(full_2)) == 3 + int(left_out.group(1)) + 1 and frames(full_2)[:3] == user, log
        assert full_2[-1] == RANK_2_RAISES and "library frames" not in log
        _, full_1 = lines_of(log, 1)
        assert frames(full_1)[:3] == user and frames(full_1)[-1] == "keys.py:as_keys" and full_1[-1] == RANK_1_RAISES
        job.assert_nothing_left()


@pytest.mark.mpi
def test_an_error_raised_in_user_code_shows_no_library_frame():
    with launched("--", "python", FAIL_DEEP, "user", ranks=3) as job:
        assert job.finish(START_BOUND) == 1, job.stderr
        assert job.stderr.count("Traceback (most recent call last)") == 1, job.stderr
        _, shown = lines_of(job.stderr, 2)
        assert frames(shown) == [
            "fail_deep_in_library.py:<module>",
            "fail_deep_in_library.py:fan_out",
            "fail_deep_in_library.py:deliver",
        ]
        assert shown[-1] == "ValueError: rank 2's own check failed"
        last, log = summary_of(job.stderr)
        assert last.startswith(
            "mailrail run: the job failed with exit status 1: rank 2 raised ValueError: rank 2's own check failed; "
            "rank 1 raised ValueError: rank 1's own check failed"
        ), job.stderr
        assert lines_of(log, 2)[1] == shown  # nothing was left out
        assert lines_of(log, 1)[1][-1] == "ValueError: rank 1's own check failed"


@pytest.mark.mpi
def test_verbose_shows_the_tracebacks_in_full_where_they_came(tmp_path):
    """``-v``: the ranks print their own tracebacks, untrimmed, as under a bare mpiexec; no log is kept (the MPI's
    messages are shown where they came too: test_verbose_shows_the_mpi_s_messages_where_they_came)."""
    with launched("-v", "--", "python", FAIL_DEEP, ranks=3) as job:
        assert job.finish(START_BOUND) == 1, job.stderr
        _, shown = lines_of(job.stderr, 2)  # (rank 1's too, unless rank 2's abort ended it first, as it may)
        assert len(frames(shown)) > 4 and frames(shown)[-1] == "protocol.py:checked_rank", shown
        assert shown[-1] == RANK_2_RAISES and "library frames" not in job.stderr
        last = job.stderr.strip().splitlines()[-1]
        assert last.startswith("mailrail run: the job failed with exit status 1: rank 2 raised ") and "[" not in last
        assert not list(tmp_path.glob("mailrail-run-*.log"))


@pytest.mark.mpi
def test_a_rank_s_exit_status_is_said_in_one_line(tmp_path):
    program = tmp_path / "exit3.py"
    program.write_text(
        "import sys\nfrom mpi4py import MPI\nif MPI.COMM_WORLD.rank == 1:\n    sys.exit(3)\nMPI.COMM_WORLD.Barrier()\n"
    )
    with launched("python", str(program)) as job:
        assert job.finish(START_BOUND) == 3, job.stderr
        last, _ = summary_of(job.stderr)
        assert last == "mailrail run: the job failed with exit status 3: rank 1 exited with status 3"
        job.assert_nothing_left()


@pytest.mark.mpi
@pytest.mark.smoke
def test_sigkill_of_one_rank_ends_the_job_and_names_it():
    with launched("--", "python", program_path("sleeper.py")) as job:
        pids = job.wait_ready()
        killed_rank = re.search(rf"READY (\d+) {pids[1]} ", job.stdout).group(1)
        os.kill(pids[1], signal.SIGKILL)  # a killed rank never unlinks its segments: the directory's removal does
        assert job.finish() != 0
        # one line names the rank (MPICH's Hydra names only the host) and the signal; the MPI's box is in the log
        last, log = summary_of(job.stderr)
        assert re.fullmatch(
            rf"mailrail run: the job failed with exit status \d+: (rank {killed_rank}|a rank on \S+) was killed by "
            r"signal 9( \(Killed\))?",
            last,
        ), job.stderr
        assert "signal 9" in log or "EXIT CODE: 9" in log, log
        assert "BAD TERMINATION" not in job.stdout, job.stdout  # (Hydra prints its box on standard output)
        (path,) = {path for path, _ in job.shared_memory}  # one directory for the job, in /dev/shm
        assert path.startswith(control.SHARED_MEMORY_ROOT + "/mailrail-job-"), path
        if "Open MPI" in MPI_LIBRARY:  # its segments were there (MPICH names its own, in /dev/shm)
            assert all(held >= 1 for _, held in job.shared_memory), job.shared_memory
        # (the wheels' MPIs map segment files in /dev/shm; Debian's MPICH over UCX maps none there: nothing to leak)
        job.assert_nothing_left()


@pytest.mark.mpi
@pytest.mark.smoke
def test_a_rank_killed_just_after_mpi_starts_leaves_no_segment(tmp_path):
    """Killed before the output forwarder's first look at its maps: MPICH's mpich_shm_* was left in /dev/shm,
    every time (the rank runner now records the segments as the program's ``from mpi4py import MPI`` returns)."""
    program = tmp_path / "killed_at_start.py"
    program.write_text(
        "import os, signal\nfrom mpi4py import MPI\n"
        "if MPI.COMM_WORLD.rank == 1:\n    os.kill(os.getpid(), signal.SIGKILL)\nMPI.COMM_WORLD.Barrier()\n"
    )
    for _ in range(3):
        with launched("python", str(program), ranks=3) as job:
            assert job.finish(START_BOUND) != 0
            job.assert_nothing_left()
    assert job_files_left() == set()  # nor anything else the three jobs were seen to make


@pytest.mark.mpi
@pytest.mark.smoke
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_to_mailrail_run_ends_every_rank(signum):
    def as_from_a_terminal() -> None:  # the signal's default action, whatever this run inherited (nohup ignores SIGHUP)
        signal.signal(signum, signal.SIG_DFL)

    with launched("--", "python", program_path("sleeper.py"), preexec_fn=as_from_a_terminal) as job:
        job.wait_ready()
        os.kill(job.process.pid, signum)
        assert job.finish() == 128 + signum
        assert job.stderr.strip().splitlines()[-1] == f"mailrail run: interrupted by {signal.Signals(signum).name}"
        job.assert_nothing_left()


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.mpi
@pytest.mark.smoke
def test_sigint_ends_the_job_even_when_inherited_as_ignored():
    """A background job of a non-interactive shell starts with SIGINT ignored (issue 25's hang)."""
    with launched("--", "python", program_path("sleeper.py"), preexec_fn=_ignore_sigint) as job:
        job.wait_ready()
        os.kill(job.process.pid, signal.SIGINT)
        assert job.finish() == 128 + signal.SIGINT
        job.assert_nothing_left()


@pytest.mark.mpi
@pytest.mark.smoke
def test_sigkill_of_mailrail_run_takes_the_launcher_and_ranks_along():
    with launched("--", "python", program_path("sleeper.py")) as job:
        job.wait_ready()
        assert len(job.job) >= 3  # the launcher and two ranks at least
        job.process.kill()
        job.finish()
        job.assert_nothing_left()


@pytest.mark.mpi
@pytest.mark.smoke
def test_the_timeout_of_mailrail_run_ends_every_rank():
    with launched("--timeout", "6", "--", "python", program_path("sleeper.py")) as job:
        job.wait_ready()
        assert job.finish(bound=START_BOUND) == 124
        assert "mailrail run: killed after 6.0 s" in job.stderr
        job.assert_nothing_left()


@pytest.mark.mpi
@pytest.mark.smoke
def test_a_failing_mailrail_command_on_one_rank_ends_the_job():
    """A mailrail command running as a rank (``cli.main``) aborts the job when it raises on one rank."""
    with launched("--", "python", program_path("failing_command.py")) as job:
        assert job.finish(bound=START_BOUND) != 0
        assert job.stderr.count("] RuntimeError: injected failure in a mailrail command") == 1, job.stderr
        assert "[rank 1 on " in job.stderr, job.stderr
        last, _ = summary_of(job.stderr)
        assert last.endswith("rank 1 raised RuntimeError: injected failure in a mailrail command"), job.stderr
        job.assert_nothing_left()


@pytest.mark.mpi
@pytest.mark.smoke
def test_sys_exit_zero_is_a_normal_end_and_python_is_this_interpreter():
    code = "import sys; from mpi4py import MPI; sys.stdout.write(f'EXE {sys.executable}\\n'); sys.exit(0)"
    with launched("--", "python3", "-u", "-c", code) as job:
        assert job.finish(bound=START_BOUND) == 0, job.stderr
        # counted, not compared line by line: Hydra may splice one rank's output into another's
        assert job.stdout.count(f"EXE {sys.executable}") == 2, job.stdout
        # mailrail run adds one line of its own: the MPI variables it set (or none, and why)
        assert [line.startswith("mailrail run: set ") for line in job.stderr.splitlines()] == [True], job.stderr
        job.assert_nothing_left()


# --- signals ---------------------------------------------------------------------------------------


@pytest.fixture
def restored_signal_handlers():
    saved = {signum: signal.getsignal(signum) for signum in control.TERMINATION_SIGNALS}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_a_signal_raises_terminated_once_and_a_second_one_does_not_interrupt_the_cleanup(restored_signal_handlers):
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a background job of a non-interactive shell starts
    control.handle_termination_signals()
    cleaned = False
    with pytest.raises(control.Terminated) as stop:
        try:
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)  # the handler interrupts this
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # during the cleanup: noted, not raised
            cleaned = True
    assert cleaned and stop.value.signum == signal.SIGINT and stop.value.exit_code == 130
    assert str(stop.value) == "interrupted by SIGINT"


def test_a_process_ending_itself_ignores_termination_signals(restored_signal_handlers):
    """A rank aborting its job (its traceback still on its way out) was interrupted by the job's end: its
    Terminated was reported as a second failure of the rank ("rank 1 raised RuntimeError ...; rank 1 raised
    Terminated"), once on MPICH's wheel."""
    control.handle_termination_signals()
    control.ignore_termination_signals()
    slept = False
    try:
        os.kill(os.getpid(), signal.SIGTERM)  # delivered to this thread before kill() returns
        time.sleep(0.2)
        slept = True
    except control.Terminated as raised:
        pytest.fail(f"the signal was raised while the process ends itself: {raised}")
    assert slept and signal.SIGTERM not in signal.sigpending()


def test_signals_in_a_deferred_block_are_raised_at_its_end(restored_signal_handlers):
    control.handle_termination_signals()
    finished = False
    with pytest.raises(control.Terminated) as stop:
        with control.deferred_signals():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(0.1)
            finished = True
    assert finished and stop.value.signum == signal.SIGTERM


def test_sighup_inherited_as_ignored_stays_ignored(restored_signal_handlers):
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # nohup
    control.handle_termination_signals()
    assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) not in (signal.SIG_IGN, signal.SIG_DFL)


@pytest.mark.mpi
def test_bench_faults_measures_each_fault_to_the_end_of_its_job(tmp_path):
    document = tmp_path / "faults.json"
    completed = mailrail(
        "bench", "faults", "--trials", "1", "--faults", "exception,run-sigint", "--json", str(document)
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    faults = json.loads(document.read_text())["faults"]
    assert set(faults) == {"exception", "run-sigint"}
    assert faults["run-sigint"]["returncodes"] == [130] and faults["exception"]["returncodes"] == [1]
    assert all(len(f["seconds"]) == 1 and 0 < f["seconds"][0] < END_BOUND for f in faults.values())


def test_bench_faults_refuses_an_unknown_fault():
    completed = mailrail("bench", "faults", "--faults", "exception,nonesuch")
    assert completed.returncode == 2 and completed.stderr.count("\n") == 1, completed.stderr


def test_terminated_survives_the_copy_simpy_makes_of_a_failed_process_exception():
    """SimPy re-raises a process's exception as type(e)(*e.args): a signal inside ``mailrail simulate``'s
    model must stay a Terminated (it became a ValueError, and the simulation ignored SIGTERM and SIGINT)."""
    simpy = pytest.importorskip("simpy")
    env = simpy.Environment()

    def interrupted():
        yield env.timeout(1)
        raise control.Terminated(signal.SIGTERM)

    env.process(interrupted())
    with pytest.raises(control.Terminated) as stop:
        env.run()
    assert stop.value.signum == signal.SIGTERM and str(stop.value) == "interrupted by SIGTERM"
