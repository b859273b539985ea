"""Job control: a job ends as a whole, on any signal, on a time-out, and when its launcher is SIGKILLed.

What each mechanism is for, and the facts it rests on (checked on this machine with the
Open MPI wheel, ``.venv``, and the MPICH wheel, ``.venv-mpich``):

* **Finding a job's processes.** Open MPI's ``mpiexec`` execs ``prterun``, which keeps the session
  it was started in but puts every rank in a process group of its own, so ``killpg`` of the
  launcher's group leaves the ranks running.  MPICH's ``hydra_pmi_proxy`` and its ranks each call
  ``setsid``: neither the process group nor the session id finds them.  What every process of a job
  does keep is its environment: :func:`mailrail_tools.jobs.bounded.run_bounded` adds the job's directory to
  :data:`JOB_VARIABLE` (a ``:``-separated list, so a job started inside a job carries both), and
  :func:`job_processes` reads it back from ``/proc/PID/environ``, together with the ``/proc`` parent
  links below the launcher (a process that changed its environment is still found by its parent).
* **Orphans.** The process running the job is a child subreaper (``PR_SET_CHILD_SUBREAPER``)
  while the job runs, so ranks orphaned by a dying ``mpiexec`` re-parent to it, not to init, and
  stay in reach of the sweep; so does a child forked by ``subprocess.Popen`` when a signal arrived
  before ``Popen()`` returned its pid (Popen does not kill it): the sweep also takes every new direct
  child of this process.
* **Ending them.** SIGTERM to the launcher's process group and to every process of the job, a
  grace of :data:`GRACE_S` seconds for launchers to stop their ranks, SIGKILL of whatever remains,
  then a wait until they are gone (reaping the ones that are our children).
* **A SIGKILLed owner.** The launcher child gets ``PR_SET_PDEATHSIG=SIGKILL`` (the kernel kills it
  when the thread that forked it exits; ``run_bounded`` waits for it in that thread), and so does
  every rank that ``mailrail run`` starts (``python -m mailrail_tools.jobs.rank_runner``): ``prterun`` and Hydra's
  proxy keep the thread that forks ranks for their whole life (a job under both wheels runs to the
  end with the signal set, and after a SIGKILL of ``mailrail run`` its ranks are gone promptly:
  ``mailrail bench faults``; docs: troubleshooting).  For anything else
  (a program run by ``mpiexec`` directly, a virtual cluster) :func:`on_owner_death` keeps a watchdog:
  a small process in its own session (a terminal's Ctrl-C to the foreground group does not reach
  it) that holds a pipe from its owner; at end-of-file, i.e. when the owner exits for any reason,
  SIGKILL included, it waits until the owner is gone (not only exiting, or a zombie) and runs the
  commands still registered, each bounded, and exits.  A job registers ``python -m mailrail_tools.jobs.control
  end-job DIR``, which ends the processes marked with the job's directory and removes it.
* **At the command's end.** A signal can be raised between any two steps of Python, also between making
  a thing and entering the block that removes it: :func:`at_command_end` registers what must be removed
  however the command ends, and ``mailrail`` calls :func:`run_pending_cleanups` before it exits.
* **Signals.** :func:`handle_termination_signals` turns SIGINT, SIGTERM and SIGHUP into
  :class:`Terminated`.  A background job of a non-interactive shell starts with SIGINT ignored
  (``sh -c 'python3 -c "import signal; print(signal.getsignal(signal.SIGINT))" & wait'`` prints 1);
  ``mailrail`` used to keep that, so SIGINT did nothing (issue 25).  A caught signal is reset to the
  default in an exec'd child, so launchers and ranks no longer inherit the ignore either.
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import FrameType

from mailrail.segments import (
    JOB_VARIABLE,
    SHARED_MEMORY_ROOT,
    append_to,
    job_files,
    recorded_segments,
    remove_segments,
)

#: Seconds between SIGTERM and SIGKILL when a job is ended.
GRACE_S = 2.0
#: Seconds to wait for SIGKILLed processes to be gone (a process in uninterruptible sleep may take long).
GONE_S = 10.0
#: Seconds each command a watchdog runs may take.
WATCHDOG_COMMAND_S = 60.0
#: Seconds an exiting owner waits for its watchdog to finish (it has nothing to run after a clean exit).
WATCHDOG_EXIT_WAIT_S = 2.0
#: Seconds a watchdog waits, after its owner closed the pipe, for the owner to be gone before it runs what is
#: registered (an owner that exec'd another program closes the pipe and lives on).
WATCHDOG_OWNER_GONE_S = 30.0

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_PR_GET_CHILD_SUBREAPER = 37
_WATCHDOG_ARG = "watchdog"


# --- prctl --------------------------------------------------------------------------------------


def _prctl(option: int, value: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(option, value, 0, 0, 0) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"prctl({option}, {value}): {os.strerror(errno)}")


def die_with_parent(expected_parent: int | None = None) -> None:
    """SIGKILL this process when its parent (thread) exits; if the parent is already gone, exit now.

    Safe in ``preexec_fn`` (no allocation beyond ctypes' call) and before ``exec``: the setting
    survives exec of a non-setuid program.
    """
    parent = os.getppid() if expected_parent is None else expected_parent
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the call: nobody would signal us
        os._exit(1)


def is_subreaper() -> bool:
    value = ctypes.c_int(0)
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_GET_CHILD_SUBREAPER, ctypes.byref(value), 0, 0, 0)
    return bool(value.value)


def set_subreaper(on: bool) -> None:
    _prctl(_PR_SET_CHILD_SUBREAPER, int(on))


@contextlib.contextmanager
def subreaper() -> Iterator[None]:
    """Orphaned descendants re-parent to this process while the block runs (then the previous setting)."""
    was = is_subreaper()
    if not was:
        set_subreaper(True)
    try:
        yield
    finally:
        if not was:
            set_subreaper(False)


# --- finding and ending a job's processes --------------------------------------------------------


def _stat_fields(pid: int | str) -> list[str] | None:
    """The fields of ``/proc/PID/stat`` after the command name (state first, then the parent), or None."""
    try:
        with open(f"/proc/{pid}/stat") as source:
            return source.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def is_alive(pid: int) -> bool:
    """*pid* exists and is not a zombie."""
    fields = _stat_fields(pid)
    return fields is not None and fields[0] != "Z"


#: The index of the start time in :func:`_stat_fields` (field 22 of ``/proc/PID/stat``).
_START_FIELD = 19


def process_start_time(pid: int) -> int | None:
    """The start time of *pid* in clock ticks since boot (tells a reused pid from its first owner), or None
    when there is no such process (a zombie still has one)."""
    fields = _stat_fields(pid)
    try:
        return int(fields[_START_FIELD]) if fields is not None else None
    except (IndexError, ValueError):
        return None


def is_running(pid: int, start: int | None) -> bool:
    """The process *pid* that started at *start* (None: whichever has that pid) still runs: it exists, is not a
    zombie (it has exited; only its parent's collection is left), and is not another process that reused the pid."""
    fields = _stat_fields(pid)
    if fields is None or fields[0] in ("Z", "X"):
        return False
    return start is None or process_start_time(pid) == start


def is_present(pid: int, start: int | None) -> bool:
    """The process *pid* that started at *start* is still in the process table: running, or exited and not yet
    collected by its parent (``pgrep`` and ``ps`` still list it then)."""
    found = process_start_time(pid)
    return found is not None and (start is None or found == start)


def ancestry(pid: int) -> list[tuple[int, int | None]]:
    """The processes *pid* was started from, nearest first, up to the first process (init), each as its pid and
    start time (:func:`process_start_time`); an orphan's ancestry is that of whoever adopted it."""
    found: list[tuple[int, int | None]] = []
    fields = _stat_fields(pid)
    while fields is not None and int(fields[1]) > 0 and len(found) < _ANCESTRY_LIMIT:
        parent = int(fields[1])
        found.append((parent, process_start_time(parent)))
        fields = _stat_fields(parent)
    return found


#: More parents than a process tree has (a bound against a /proc that changes under the walk).
_ANCESTRY_LIMIT = 256


def why_present(pid: int) -> str:
    """Why *pid* is still there, in words: ``123 (slurmd) still running, state D`` or ``123 (slurmd) exited;
    its parent 1 has not collected it``."""
    try:
        with open(f"/proc/{pid}/stat") as source:
            text = source.read()
    except OSError:
        return f"{pid} gone"
    name = text[text.find("(") + 1 : text.rfind(")")]
    fields = text.rsplit(")", 1)[1].split()
    if fields[0] == "Z":
        return f"{pid} ({name}) exited; its parent {fields[1]} has not collected it"
    return f"{pid} ({name}) still running, state {fields[0]}"


def _parents() -> dict[int, int]:
    """Every live (non-zombie) process's parent."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat_fields(entry)
            if fields is not None and fields[0] != "Z":
                parents[int(entry)] = int(fields[1])
    return parents


def children_of(pid: int) -> set[int]:
    """The live direct children of *pid*."""
    return {child for child, parent in _parents().items() if parent == pid}


def descendants(roots: Iterable[int], parents: dict[int, int] | None = None) -> set[int]:
    """*roots* (those alive) and every live process below them, by ``/proc`` parent links."""
    parents = _parents() if parents is None else parents
    below: dict[int, list[int]] = {}
    for child, parent in parents.items():
        below.setdefault(parent, []).append(child)
    found: set[int] = set()
    stack = [root for root in roots if root in parents]
    while stack:
        pid = stack.pop()
        if pid not in found:
            found.add(pid)
            stack.extend(below.get(pid, ()))
    return found


def _job_dirs_of(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/environ", "rb") as source:
            environ = source.read()
    except OSError:
        return []
    prefix = JOB_VARIABLE.encode() + b"="
    for item in environ.split(b"\0"):
        if item.startswith(prefix):
            return item[len(prefix) :].decode(errors="replace").split(":")
    return []


def running_job_dirs() -> set[str]:
    """The directories of the jobs some live process belongs to (its mark)."""
    return {job_dir for pid in _parents() for job_dir in _job_dirs_of(pid)}


def job_environment(env: dict[str, str], job_dir: str) -> dict[str, str]:
    """*env* marked as belonging to the job *job_dir* (and still to the jobs it already belonged to)."""
    marked = [d for d in env.get(JOB_VARIABLE, "").split(":") if d]
    return {**env, JOB_VARIABLE: ":".join([*marked, job_dir])}


def job_processes(job_dir: str | None = None, roots: Iterable[int] = ()) -> set[int]:
    """The live processes marked with *job_dir*, *roots*, and everything below them (never this process)."""
    parents = _parents()
    marked = {pid for pid in parents if job_dir is not None and job_dir in _job_dirs_of(pid)}
    return descendants([*roots, *marked], parents) - {os.getpid()}


def is_watchdog(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as source:
            argv = source.read().split(b"\0")
    except OSError:
        return False
    return b"mailrail_tools.jobs.control" in argv and _WATCHDOG_ARG.encode() in argv


def _signal(pids: Iterable[int], signum: int) -> None:
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, signum)


def _reap(pids: Iterable[int]) -> None:
    """Collect the exit status of those of *pids* that are our exited children (others: no-op)."""
    for pid in pids:
        with contextlib.suppress(OSError):
            os.waitpid(pid, os.WNOHANG)


#: The file in a job's directory listing the processes of the job that re-parent to whoever runs it (the rank
#: runner's output forwarders, orphaned at their start), one pid per line.
ORPHANS_FILE = "orphans"


def record_orphan(pid: int) -> None:
    """Add *pid* to the orphan list of every job this process belongs to (see :func:`reap_exited_children`)."""
    for job_dir in os.environ.get(JOB_VARIABLE, "").split(":"):
        if job_dir:
            append_to(os.path.join(job_dir, ORPHANS_FILE), f"{pid}\n".encode())


def recorded_orphans(job_dir: str) -> set[int]:
    """The pids :func:`record_orphan` listed for the job *job_dir*."""
    try:
        with open(os.path.join(job_dir, ORPHANS_FILE), encoding="utf-8") as source:
            return {int(line) for line in source if line.strip().isdigit()}
    except OSError:
        return set()


def reap_exited_children(pids: Iterable[int]) -> None:
    """Collect those of *pids* that are exited children of ours: a job's orphans re-parent to us while we are
    its subreaper, and one that exits after the job's end (the rank runner's output forwarder) would stay a
    zombie of ours for as long as this process lives (a job per trial: hundreds)."""
    me = os.getpid()
    for pid in pids:
        fields = _stat_fields(pid)
        if fields is not None and fields[0] == "Z" and int(fields[1]) == me:
            with contextlib.suppress(OSError):
                os.waitpid(pid, os.WNOHANG)


def end_processes(
    find: Callable[[], set[int]], *, group: int | None = None, grace: float = GRACE_S, gone: float = GONE_S
) -> set[int]:
    """End the processes ``find()`` returns (called again at every step, so late ones are found too).

    SIGTERM to process group *group* and to each process, up to *grace* seconds for them to exit,
    SIGKILL to what remains, then up to *gone* seconds for them to be gone: no longer found, and each one
    ever found out of the process table (:func:`wait_until_gone`: a process that init, not we, collects
    is a zombie a while after ``find()`` stops finding it).  Watchdogs (:func:`on_owner_death`) are left to
    finish their commands and only SIGKILLed at the end.  Returns the processes still there after all
    that (normally none).
    """
    ended: dict[int, int | None] = {}  # every process found, with its start time

    def finding() -> set[int]:
        pids = find()
        for pid in pids - ended.keys():
            ended[pid] = process_start_time(pid)
        return pids

    with deferred_signals():
        if group is not None:
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGTERM)
        found = finding()
        _signal((pid for pid in found if not is_watchdog(pid)), signal.SIGTERM)
        deadline = time.monotonic() + grace
        while found and time.monotonic() < deadline:
            time.sleep(0.05)
            _reap(found)
            found = finding()
            _signal((pid for pid in found if not is_watchdog(pid)), signal.SIGTERM)
        deadline = time.monotonic() + gone
        while True:
            workers = {pid for pid in found if not is_watchdog(pid)}
            if group is not None:
                with contextlib.suppress(OSError):
                    os.killpg(group, signal.SIGKILL)
            # a watchdog whose owner is gone runs its commands and exits; SIGKILL only the overdue
            _signal(workers if time.monotonic() < deadline - gone / 2 else found, signal.SIGKILL)
            _reap(found)
            found = finding()
            if not found or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        waiting = {pid: start for pid, start in ended.items() if pid not in found}
        return found | wait_until_gone(waiting, max(0.0, deadline - time.monotonic()))


def wait_until_gone(processes: Mapping[int, int | None], bound: float = GONE_S) -> set[int]:
    """Wait until each of *processes* (pid: start time) is out of the process table, collecting those that are our
    exited children, for at most *bound* seconds; returns those still there then.

    A killed process leaves its namespaces and cgroups, and ``/proc``'s parent links, before it is gone: it exits,
    then stays a zombie until its parent collects it (``pgrep`` lists it until then), so no longer finding it
    there is not yet its end."""
    deadline = time.monotonic() + bound
    while True:
        left = {pid for pid, start in processes.items() if is_present(pid, start)}
        _reap(left)
        left = {pid for pid in left if is_present(pid, processes[pid])}
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.02)


def shared_memory_dir(job_dir: str) -> str:
    """The directory of *job_dir*'s job in node-local shared memory, named after it: the job's MPI puts its
    segments there (Open MPI's backing directories), and ending the job removes it, however the job ended.
    A rank that is killed never unlinks its segments: in ``/dev/shm`` itself they stay until a reboot."""
    return os.path.join(SHARED_MEMORY_ROOT, os.path.basename(job_dir.rstrip(os.sep)))


def end_job(job_dir: str) -> set[int]:
    """End every process marked with *job_dir* and remove the directory, its shared-memory directory and the
    segments its processes mapped (the watchdog's command)."""
    segments = job_files(job_processes(job_dir))
    try:
        return end_processes(lambda: job_processes(job_dir))
    finally:
        segments |= recorded_segments(job_dir)
        shutil.rmtree(job_dir, ignore_errors=True)
        shutil.rmtree(shared_memory_dir(job_dir), ignore_errors=True)
        remove_segments(segments)


# --- signals ---------------------------------------------------------------------------------------


class Terminated(BaseException):
    """SIGINT, SIGTERM or SIGHUP arrived (a BaseException, like KeyboardInterrupt: cleanup runs, then exit)."""

    def __init__(self, signum: int) -> None:
        # args is (signum,): a copy made as type(e)(*e.args) is the same exception (SimPy re-raises a failed
        # process's exception so; with the message as args the copy failed, a ValueError, and the model ran on)
        super().__init__(signum)
        self.signum = signum

    def __str__(self) -> str:
        return f"interrupted by {signal.Signals(self.signum).name}"

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


TERMINATION_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_deferring = 0
_pending: int | None = None
_terminating = False


def _on_termination_signal(signum: int, frame: FrameType | None) -> None:
    global _pending, _terminating
    if _deferring or _terminating:
        # inside a cleanup: note the first signal and let the cleanup finish
        if _pending is None and not _terminating:
            _pending = signum
        return
    _terminating = True
    raise Terminated(signum)


def handle_termination_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP raise :class:`Terminated` in the main thread; later ones are ignored.

    SIGINT inherited as ignored (a background job of a non-interactive shell) is handled all the same;
    SIGHUP inherited as ignored (``nohup``) stays ignored.  Call from the main thread.
    """
    global _terminating, _pending
    _terminating, _pending = False, None
    for signum in TERMINATION_SIGNALS:
        if signum == signal.SIGHUP and signal.getsignal(signum) == signal.SIG_IGN:
            continue
        signal.signal(signum, _on_termination_signal)


def ignore_termination_signals() -> None:
    """This process is ending itself (a rank aborting its job): a termination signal from now on is ignored, not
    raised, so that it neither interrupts the ending nor reports itself as a second failure of the rank (the
    job's end sent SIGTERM while a rank that raised was still passing its traceback on).  SIGKILL still ends
    a process whose ending hangs."""
    global _terminating
    _terminating = True


@contextlib.contextmanager
def deferred_signals() -> Iterator[None]:
    """A termination signal arriving in the block is held until the block ends, then raised."""
    global _deferring, _pending, _terminating
    _deferring += 1
    try:
        yield
    finally:
        _deferring -= 1
        if not _deferring and _pending is not None and not _terminating:
            signum, _pending = _pending, None
            _terminating = True
            raise Terminated(signum)


# --- the watchdog ------------------------------------------------------------------------------------


class _Watchdog:
    """The process that runs the registered commands when its owner dies; one per owner process."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.process: subprocess.Popen[bytes] | None = None
        self.owner = 0
        self.next_id = 0
        self.registered: set[int] = set()  # what the running watchdog holds

    def send(self, ident: int, argv: list[str] | None) -> None:
        """Register *argv* as command *ident*, or with None withdraw command *ident*."""
        message: dict[str, object] = {"add": ident, "argv": argv} if argv is not None else {"remove": ident}
        with self.lock:
            if self.process is None or self.owner != os.getpid() or self.process.poll() is not None:
                self.process = self._start()
                self.owner = os.getpid()
                self.registered = set()
            assert self.process.stdin is not None
            self.process.stdin.write(json.dumps(message).encode() + b"\n")
            self.process.stdin.flush()
            if argv is not None:
                self.registered.add(ident)
            else:
                self.registered.discard(ident)

    def close(self) -> None:
        """At exit: end-of-file tells the watchdog to run what is still registered (normally nothing) once this
        process is gone, and exit.  With nothing registered, waiting for it briefly reaps it (no process left
        behind, no ResourceWarning at shutdown); with something, it waits for this process: no wait here."""
        with self.lock:
            process, self.process = self.process, None
            if process is None or self.owner != os.getpid():
                return
            assert process.stdin is not None
            with contextlib.suppress(OSError):
                process.stdin.close()
            if self.registered:
                return
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=WATCHDOG_EXIT_WAIT_S)

    def new_id(self) -> int:
        with self.lock:
            self.next_id += 1
            return self.next_id

    @staticmethod
    def _start() -> subprocess.Popen[bytes]:
        # Own session: a terminal's Ctrl-C and hang-up do not reach it.  Not in any job (JOB_VARIABLE
        # dropped): a sweep of a job this process runs in must not take its cleanup away.
        env = {k: v for k, v in os.environ.items() if k != JOB_VARIABLE}
        start = process_start_time(os.getpid())
        return subprocess.Popen(
            [sys.executable, "-m", "mailrail_tools.jobs.control", _WATCHDOG_ARG, str(os.getpid()), str(start or "")],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            env=env,
        )


_watchdog = _Watchdog()
atexit.register(_watchdog.close)


# --- what a command removes at its end --------------------------------------------------------------

_cleanups: dict[int, Callable[[], None]] = {}
_cleanups_lock = threading.Lock()
_next_cleanup = 0


def at_command_end(cleanup: Callable[[], None]) -> Callable[[], None]:
    """Call *cleanup* when the command ends (:func:`run_pending_cleanups`: at the end of ``mailrail``'s command,
    or at this process's exit), unless the returned function is called first.

    For what must not outlive the command however it ends.  A termination signal is raised between any two
    steps of Python: also after a thing is made and before the ``with`` block (or ``try``) that removes it is
    entered, or just as that removal starts, before it holds the signals.  What is registered here is
    removed all the same, before the command exits; the watchdog (:func:`on_owner_death`) covers a SIGKILL."""
    global _next_cleanup
    with _cleanups_lock:
        _next_cleanup += 1
        ident = _next_cleanup
        _cleanups[ident] = cleanup

    def forget() -> None:
        with _cleanups_lock:
            _cleanups.pop(ident, None)

    return forget


def run_pending_cleanups() -> None:
    """Call what :func:`at_command_end` registered and is still pending, newest first, termination signals held
    until all are done; a cleanup that fails is said in one line on standard error, and the others still run."""
    with deferred_signals():
        while True:
            with _cleanups_lock:
                if not _cleanups:
                    return
                _, cleanup = _cleanups.popitem()
            try:
                cleanup()
            except Exception as error:
                print(f"mailrail: {error}", file=sys.stderr, flush=True)


# (registered after the watchdog's close, so run before it: what they remove is then unregistered from it)
atexit.register(run_pending_cleanups)


def on_owner_death(argv: Sequence[str]) -> Callable[[], None]:
    """Run *argv* if this process dies (SIGKILL included) before calling the returned unregister function."""
    command = [str(arg) for arg in argv]
    ident = _watchdog.new_id()
    _watchdog.send(ident, command)
    done = False

    def unregister() -> None:
        nonlocal done
        if not done:
            done = True
            with contextlib.suppress(OSError, ValueError):
                _watchdog.send(ident, None)

    return unregister


def end_job_on_owner_death(job_dir: str) -> Callable[[], None]:
    """:func:`end_job` of *job_dir* if this process dies before calling the returned unregister function."""
    return on_owner_death([sys.executable, "-m", "mailrail_tools.jobs.control", "end-job", job_dir])


def _watch(stream: Iterable[bytes], owner: int, owner_start: int | None) -> None:
    """The watchdog's body: keep the registry until end-of-file, then, once the owner (*owner*, started at
    *owner_start*) is gone, run what is still registered.

    End-of-file comes while the owner exits, before it is gone (an exiting Python closes the pipe in its
    ``atexit``; a killed one is a zombie until its parent collects it): a command that asks whether the owner
    still runs (``mailrail cluster down`` refuses a running job's cluster) must find it gone."""
    for signum in TERMINATION_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    commands: dict[int, list[str]] = {}
    for line in stream:
        message = json.loads(line)
        if "add" in message:
            commands[int(message["add"])] = list(message["argv"])
        else:
            commands.pop(int(message["remove"]), None)
    deadline = time.monotonic() + WATCHDOG_OWNER_GONE_S
    while commands and is_running(owner, owner_start) and time.monotonic() < deadline:
        time.sleep(0.01)
    for _, argv in sorted(commands.items()):
        try:
            subprocess.run(argv, timeout=WATCHDOG_COMMAND_S, stdin=subprocess.DEVNULL, check=False)
        except (OSError, subprocess.SubprocessError) as error:
            print(f"mailrail watchdog: {' '.join(argv)}: {error}", file=sys.stderr)


def main(argv: Sequence[str]) -> int:
    """``python -m mailrail_tools.jobs.control watchdog OWNER_PID OWNER_START`` | ``end-job DIR``."""
    if len(argv) == 3 and argv[0] == _WATCHDOG_ARG:
        _watch(sys.stdin.buffer, int(argv[1]), int(argv[2]) if argv[2] else None)
        return 0
    if len(argv) == 2 and argv[0] == "end-job":
        left = end_job(argv[1])
        if left:
            print(f"mailrail: processes of job {argv[1]} still alive: {sorted(left)}", file=sys.stderr)
        return 1 if left else 0
    print("usage: python -m mailrail_tools.jobs.control watchdog OWNER_PID OWNER_START | end-job DIR", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
