"""The job runner's bounded run: a job's launcher (``mpiexec``, ``srun``, a virtual cluster's) as a process
whose job, whatever way it ends, leaves no process behind (:func:`run_bounded`).

What starts the ranks and with which environment is :mod:`mailrail_tools.jobs.which_mpi`; which of those a job
runs on is decided once, by :func:`mailrail_tools.jobs.job.run_job`, which every tool starting a job calls.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence

from mailrail.errors import MailRailError
from mailrail.failure import write_all
from mailrail.segments import job_files, record_segments, recorded_segments, remove_segments

from . import control
from .launcher_messages import LauncherMessageFilter


class JobStopped(MailRailError):
    """``run_bounded``'s *watch* gave a reason to end the job, and it was ended.

    *reason* is what *watch* returned, *after_s* the seconds from the job's start to that moment,
    *output* and *stderr* what the job printed (``None`` where not captured).
    """

    def __init__(self, reason: str, after_s: float, output: str | None = None, stderr: str | None = None) -> None:
        super().__init__(f"{reason} after {after_s:.1f} s")
        self.reason, self.after_s, self.output, self.stderr = reason, after_s, output, stderr


#: How the name of a job's directory (its ``TMPDIR``), and so of its directory in ``/dev/shm``, starts.
JOB_DIR_PREFIX = "mailrail-job-"


def run_bounded(
    argv: Sequence[str],
    *,
    timeout: float | None,
    env: Mapping[str, str],
    capture: bool = False,
    capture_stderr: bool = False,
    watch: Callable[[], str | None] | None = None,
    watch_interval: float = 0.1,
    local: bool = False,
    clean_stderr: bool = False,
    launcher_messages: LauncherMessageFilter | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run *argv* as a job; whatever way this returns or raises, no process of the job is left alive.

    *capture* keeps both output streams; *capture_stderr* keeps only standard error and lets
    standard output through (a job's progress shows live, its errors are kept for the report).
    After *timeout* seconds the job is ended and ``subprocess.TimeoutExpired`` raised.  *watch*,
    when given, is called every *watch_interval* seconds while the job runs: once it returns a
    reason, the job is ended and :class:`JobStopped` raised.

    The job is every process below the launcher and every process carrying the job's mark
    (see :mod:`mailrail_tools.jobs.control`: the parent-death signal, the subreaper and the watchdog
    that end it even when this process is SIGKILLed).  Each job gets a fresh ``TMPDIR``, removed
    afterwards: a killed launcher leaves its session directory (``ompi.<pid>``) behind, and a later
    launcher that reuses the pid fails at start-up on it.

    *local*: every rank runs on this machine (``mpiexec`` here, not ``srun`` or a cluster's nodes), so the
    job's MPI can put its shared-memory segments in a directory of the job's own in ``/dev/shm``
    (:func:`~mailrail_tools.jobs.control.shared_memory_dir`), removed with the job: a rank that is killed, or a job
    ended at its time-out, leaves nothing there (Open MPI's segments; MPICH names its own and cannot move
    them).  Backing directories the environment already sets are kept.

    *clean_stderr* (with neither *capture*): the job's standard error is passed on live through a pipe of
    ours without NUL bytes (Open MPI's launcher ends its messages with one: ``grep`` then calls the
    output binary).  With *launcher_messages* too, the MPI's own messages are kept there, not passed on.
    """
    session = tempfile.mkdtemp(prefix=JOB_DIR_PREFIX)
    env = dict(env, TMPDIR=session)
    if local:
        env = _shared_memory_in(control.shared_memory_dir(session), env)
    job_env = control.job_environment(env, session)
    unregister = control.end_job_on_owner_death(session)
    parent = os.getpid()
    launcher: subprocess.Popen[str] | None = None
    relay = _Relay(2, launcher_messages) if clean_stderr and not (capture or capture_stderr) else None
    # (MPICH's Hydra prints its verdict on a killed rank to standard output: kept by a filter of its own)
    out_relay = _Relay(1, launcher_messages.for_another_stream()) if relay and launcher_messages else None
    segments: set[str] = set()  # what the job mapped in /dev/shm or its launcher made in /tmp: removed with it
    seen: set[int] = set()  # every process of the job found alive: those re-parented to us are reaped at the end
    with control.subreaper():

        def processes() -> set[int]:
            # the launcher's tree and every marked process (an orphan re-parented to us carries the
            # mark); not every new child of ours: another thread's job may be starting beside this one
            roots: set[int] = set()
            if launcher is not None and launcher.returncode is None:  # a reaped pid may be reused
                roots.add(launcher.pid)
            found = control.job_processes(session, roots)
            seen.update(found)
            return found

        def observe() -> None:
            # and recorded, in the job's directory and in those of the jobs it runs in (JOB_VARIABLE): the watchdog
            # that ends it once this process is SIGKILLed finds them there, and so does whoever runs those jobs
            found = job_files(processes()) - segments
            if found:
                segments.update(found)
                record_segments(sorted(found), job_env)

        try:
            # A signal is held while Popen() runs: it never leaves a forked child whose pid we do not know.
            with control.deferred_signals():
                launcher = subprocess.Popen(
                    argv,
                    env=job_env,
                    start_new_session=True,
                    text=True,
                    stdout=subprocess.PIPE if capture else (out_relay.writer if out_relay else None),
                    stderr=subprocess.PIPE if capture or capture_stderr else (relay.writer if relay else None),
                    preexec_fn=lambda: control.die_with_parent(parent),
                )
            for started in (relay, out_relay):
                if started is not None:
                    started.start()
            stdout, stderr = _wait(launcher, argv, timeout, watch, watch_interval, processes, observe)
            return subprocess.CompletedProcess(argv, launcher.returncode, stdout, stderr)
        finally:
            with control.deferred_signals():  # a signal now is raised once the job is cleaned up
                # normal exit included: a rank the launcher left behind is still the job's
                running = launcher is not None and launcher.poll() is None
                if running:
                    observe()
                control.end_processes(processes, group=launcher.pid if launcher and running else None)
                control.reap_exited_children(seen | control.recorded_orphans(session))
                if launcher is not None and launcher.returncode is None:
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        launcher.wait(control.GONE_S)
                segments.update(recorded_segments(session))
                shutil.rmtree(session, ignore_errors=True)
                shutil.rmtree(control.shared_memory_dir(session), ignore_errors=True)
                remove_segments(segments)
                relays_until = time.monotonic() + control.GONE_S  # one bound for both, not one each
                for ended in (relay, out_relay):
                    if ended is not None:
                        ended.close(max(0.0, relays_until - time.monotonic()))
                unregister()


class _Relay:
    """A pipe for one of a job's output streams and a thread passing what arrives on to our *target* fd,
    NUL bytes dropped (and the MPI's own messages kept by *messages*, when given)."""

    def __init__(self, target: int, messages: LauncherMessageFilter | None = None) -> None:
        self.reader, self.writer = os.pipe()
        self._thread: threading.Thread | None = None
        self._target = target
        self._messages = messages

    def start(self) -> None:
        os.close(self.writer)  # the job holds the write end now: end-of-file once every process of it is gone
        self.writer = -1
        self._thread = threading.Thread(target=self._relay, name=f"mailrail-relay-{self._target}", daemon=True)
        self._thread.start()

    def _relay(self) -> None:
        while True:
            try:
                data = os.read(self.reader, 65536)
            except OSError:
                return
            if not data:
                if self._messages is not None:
                    write_all(self._target, self._messages.finish())
                return
            data = data.replace(b"\0", b"")
            write_all(self._target, self._messages.feed(data) if self._messages is not None else data)

    def close(self, bound: float = control.GONE_S) -> None:
        """Wait up to *bound* seconds for what the ended job wrote to be passed on, then close the pipe."""
        if self.writer >= 0:
            os.close(self.writer)
        if self._thread is not None:
            self._thread.join(bound)
        if self._thread is None or not self._thread.is_alive():
            os.close(self.reader)  # (a thread still reading, held by a process outside the job, keeps it)


#: Open MPI's parameters naming where its shared-memory segments go (5's btl, 4's btl, one-sided windows).
SHARED_MEMORY_PARAMETERS = (
    "OMPI_MCA_btl_sm_backing_directory",
    "OMPI_MCA_btl_vader_backing_directory",
    "OMPI_MCA_osc_sm_backing_directory",
)


def _shared_memory_in(directory: str, env: dict[str, str]) -> dict[str, str]:
    """*env* with Open MPI's segments in *directory* (made here), unless it sets where they go itself or there
    is no node-local shared memory to make it in."""
    if any(name in env for name in SHARED_MEMORY_PARAMETERS):
        return env
    try:
        os.mkdir(directory, 0o700)
    except OSError:  # no /dev/shm (not Linux) or not writable: the MPI's default place
        return env
    return {**env, **dict.fromkeys(SHARED_MEMORY_PARAMETERS, directory)}


#: Seconds between checks that the launcher is still running (a process it left behind may hold its output).
_LAUNCHER_POLL_S = 0.2
#: Seconds between looks at the shared-memory segments the job's processes map (a look reads each one's maps).
_SEGMENT_POLL_S = 1.0


def _wait(
    launcher: subprocess.Popen[str],
    argv: Sequence[str],
    timeout: float | None,
    watch: Callable[[], str | None] | None,
    watch_interval: float,
    processes: Callable[[], set[int]],
    observe: Callable[[], None],
) -> tuple[str | None, str | None]:
    """The launcher's output once it exits; the job ended and the reason raised on time-out or *watch*.
    *observe* is called about every :data:`_SEGMENT_POLL_S` seconds while the job runs, and before it is ended."""
    start = time.monotonic()
    observed = start
    deadline = None if timeout is None else start + timeout
    interval = watch_interval if watch is not None else _LAUNCHER_POLL_S
    while True:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        try:
            return launcher.communicate(timeout=interval if left is None else min(interval, left))
        except subprocess.TimeoutExpired:
            pass
        if launcher.poll() is not None:  # the launcher is done; what still holds its output is left over
            return _output_after_ending(launcher, processes)
        now = time.monotonic()
        expired = deadline is not None and now >= deadline
        if expired or now - observed >= _SEGMENT_POLL_S:
            observe()
            observed = now
        if expired:
            stdout, stderr = _output_after_ending(launcher, processes)
            raise subprocess.TimeoutExpired(argv, timeout or 0.0, output=stdout, stderr=stderr) from None
        reason = watch() if watch is not None else None
        if reason:
            observe()
            after = time.monotonic() - start
            stdout, stderr = _output_after_ending(launcher, processes)
            raise JobStopped(reason, after, stdout, stderr)


def _output_after_ending(
    launcher: subprocess.Popen[str], processes: Callable[[], set[int]]
) -> tuple[str | None, str | None]:
    control.end_processes(processes, group=launcher.pid if launcher.poll() is None else None)
    try:
        return launcher.communicate(timeout=control.GONE_S)
    except subprocess.TimeoutExpired as expired:  # something outside the job holds the pipes
        launcher.kill()
        return _text(expired.output), _text(expired.stderr)


def _text(data: str | bytes | None) -> str | None:
    return data.decode(errors="replace") if isinstance(data, bytes) else data
