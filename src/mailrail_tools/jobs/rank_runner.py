"""The rank runner: what every rank of ``mailrail run -- PROGRAM`` runs (``python -m mailrail_tools.jobs.rank_runner``).

* Every rank dies with its parent (``prterun``, ``prted`` or Hydra's proxy): ``PR_SET_PDEATHSIG``
  is set before the program runs, so a launcher that is SIGKILLed takes its ranks along
  (see :mod:`mailrail_tools.jobs.control`).
* A Python program (``python3 -u prog.py ARGS``, ``-m MODULE ARGS``, ``-c CODE ARGS``) runs in
  this interpreter as ``python -m mpi4py`` runs it, with one difference: an exception that
  escapes it ends the whole job through :func:`mailrail.failure.abort_job` (its traceback once,
  each line prefixed by the rank, or recorded for ``mailrail run`` to show; then ``MPI_Abort``), so no
  peer is left waiting in a collective.
  ``sys.exit(N)`` with N other than 0 ends the job the same way, without a traceback.
* Any other program is exec'd (after the parent-death signal is set); a mailrail command
  (``--command bench stream ...``) runs in this interpreter exactly as ``python -m mailrail_tools`` runs it.
* **Whole lines.** Before the program starts, its stdout and stderr become pipes (a pseudo-terminal
  where the launcher gave a terminal, so that the program buffers as it would have) read by a
  forwarder process, which passes the program's output on to the launcher in whole lines: one
  ``write()`` holds whole lines only (a line longer than ``PIPE_BUF`` alone), an unfinished line
  waits for its end (a carriage return counts, so progress bars still move) or for the program's
  exit.  Launchers read a rank's pipe in large pieces (MPICH's Hydra: 64 KiB, a pipe's capacity)
  or in whole lines (Open MPI 5), so the lines of two ranks no longer mix, however the program
  writes (``PYTHONUNBUFFERED=1`` makes ``print('rank', 0)`` four writes).  ``--tag-output`` also
  starts every line with ``[rank N] ``.  The forwarder is forked twice before the program starts,
  so the program stays the process the launcher started (its pid, signals, exit status and MPI are
  its own) and has no extra child to ``wait()`` for; the forwarder ignores the signals that end a
  job (it ends at end-of-file, once every writer closed the pipes, so what a dying program wrote
  still arrives) and carries the job's mark for the sweeps of :mod:`mailrail_tools.jobs.control`.  A
  failing rank asks it to pass everything on, and waits for the launcher to take it, before
  ``MPI_Abort`` (:func:`mailrail.failure.set_output_forwarder`).

Usage: ``python [OPTIONS] -m mailrail_tools.jobs.rank_runner [--tag-output] (SCRIPT | -m MODULE | -c CODE | - |
--exec PROGRAM | --command MAILRAIL-COMMAND) [ARGS]``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gc
import importlib.abc
import importlib.machinery
import os
import runpy
import select
import signal
import stat
import sys
import termios
import time
import types
from collections.abc import Iterator, Sequence
from typing import Any, NoReturn

from mailrail.config import launcher_rank
from mailrail.failure import (
    OUTPUT_DRAIN_BOUND,
    _unread_bytes,
    abort_job,
    end_job,
    exit_code_of,
    rank_label,
    record_failure,
    set_output_forwarder,
    write_all,
)
from mailrail.segments import JOB_VARIABLE, mapped_segments, record_own_segments, record_segments

from .control import die_with_parent, record_orphan

#: The interpreter options ``mailrail run -- python OPTIONS ...`` keeps (they take no value ...)
PYTHON_FLAGS = set("bBdEiIOPqsSuvx")
#: ... or the next word, or the rest of this one, as their value.
PYTHON_VALUE_OPTIONS = ("-X", "-W")
#: The names ``mailrail run -- NAME`` reads as "this Python" (a path is left alone: the user chose it).
PYTHON_NAMES = ("python", "python3", f"python3.{sys.version_info.minor}")
#: The frames a failing program's traceback starts with that are the runner's, not the program's.
RUNNER_FILES = (__file__, runpy.__file__, "<frozen runpy>")
#: The runner's option that starts every line of the program's output with ``[rank N] ``.
TAG_OUTPUT = "--tag-output"
#: Bytes the forwarder passes on in one write at most when several whole lines are ready (a pipe's
#: atomic write); a longer line goes alone, in one write.
WRITE_BYTES = select.PIPE_BUF
#: Bytes an unfinished line may reach before it is passed on unfinished (a program that never ends its lines).
LINE_LIMIT = 1 << 16
#: The forwarder's process name (``ps -o comm``; its command line is its rank's).
FORWARDER_NAME = "mailrail-lines"
#: Seconds the forwarder, asked to pass everything on, waits for more of what a pseudo-terminal still
#: carries (its writes reach the reading side a moment later).
PTY_SETTLE_S = 0.01


def split_python_argv(args: Sequence[str]) -> tuple[list[str], list[str]]:
    """``python``'s arguments split into its interpreter options and what it runs (``-m M ...`` etc.)."""
    args = list(args)
    options: list[str] = []
    index = 0
    while index < len(args):
        word = args[index]
        flags = len(word) - len(word.lstrip("-")) == 1 and len(word) > 1
        letters = 1
        while flags and letters < len(word) and word[letters] in PYTHON_FLAGS:
            letters += 1
        if word in PYTHON_VALUE_OPTIONS:
            options += args[index : index + 2]
            index += 2
        elif word.startswith(PYTHON_VALUE_OPTIONS) or (flags and letters == len(word)):
            options.append(word)
            index += 1
        elif flags and letters > 1 and word[letters] in "cm":  # -uc CODE, -um MODULE
            options.append(word[:letters])
            args[index] = "-" + word[letters:]
            break
        else:
            break
    return options, args[index:]


def rank_argv(program: Sequence[str], *, tag_output: bool = False) -> list[str]:
    """How a rank runs *program* (``mailrail run -- PROGRAM``): ``python`` is this interpreter, under the runner.

    *tag_output*: every line of the program's output starts with ``[rank N] ``.
    """
    runner = [sys.executable, "-m", "mailrail_tools.jobs.rank_runner", *([TAG_OUTPUT] if tag_output else [])]
    if program and program[0] in PYTHON_NAMES:
        options, target = split_python_argv(program[1:])
        return [runner[0], *options, *runner[1:], *(target or ["-"])]
    return [*runner, "--exec", *program]


def command_argv(command: Sequence[str], *, tag_output: bool = False) -> list[str]:
    """How a rank runs the mailrail command *command* (``mailrail run bench stream``): as ``python -m
    mailrail`` runs it, under the runner (its output in whole lines, its rank dying with its parent)."""
    return [
        sys.executable,
        "-m",
        "mailrail_tools.jobs.rank_runner",
        *([TAG_OUTPUT] if tag_output else []),
        "--command",
        *command,
    ]


def run_python(target: Sequence[str]) -> None:
    """Run ``SCRIPT ARGS`` | ``-m MODULE ARGS`` | ``-c CODE ARGS`` | ``- ARGS`` as ``python`` would, as ``__main__``."""
    first, rest = target[0], list(target[1:])
    if first.startswith("-m"):
        module = first[2:] or rest.pop(0)
        sys.argv = [module, *rest]  # runpy puts the module's file in argv[0]
        sys.path[0] = os.getcwd()
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    elif first.startswith("-c") or first == "-":
        code = sys.stdin.read() if first == "-" else (first[2:] or rest.pop(0))
        sys.argv = ["-c" if first != "-" else "-", *rest]
        sys.path[0] = ""
        main = types.ModuleType("__main__")  # the program's own __main__, as python -c gives it
        sys.modules["__main__"] = main
        exec(compile(code, "<string>", "exec"), vars(main))
    else:
        sys.argv = [first, *rest]
        sys.path[0] = os.path.dirname(os.path.abspath(first))
        runpy.run_path(first, run_name="__main__")


class _SegmentsOnceMPIStarts(importlib.abc.MetaPathFinder):
    """Records the rank's segments as soon as ``from mpi4py import MPI`` has started MPI in the program: a
    rank killed a moment later (before the forwarder's next look) would otherwise leave MPICH's
    ``mpich_shm_*`` in /dev/shm (seen here).  Once: it leaves ``sys.meta_path`` at the import it watches."""

    def find_spec(self, name: str, path: Sequence[str] | None, target: types.ModuleType | None = None) -> Any:
        if name != "mpi4py.MPI":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        for finder in list(sys.meta_path):  # the finder that would have found it (mpi4py's own, for a wheel's ABIs)
            spec = finder.find_spec(name, path, target) if hasattr(finder, "find_spec") else None
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _RecordingLoader(spec.loader)
                return spec
        return None


class _RecordingLoader(importlib.abc.Loader):
    def __init__(self, loader: importlib.abc.Loader) -> None:
        self.loader = loader

    def __getattr__(self, name: str) -> Any:  # the rest of the loader's interface is the loader's
        return getattr(self.loader, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        self.loader.exec_module(module)
        with contextlib.suppress(Exception):  # (mpi4py.rc.initialize = False: nothing started, nothing mapped)
            if module.Is_initialized() and not module.Is_finalized():
                record_own_segments()


def end_job_on(error: BaseException) -> NoReturn:
    """A rank's program failed: end the job (traceback once unless it is a plain ``sys.exit``)."""
    if isinstance(error, SystemExit):
        if error.code is not None and not isinstance(error.code, int):
            sys.stderr.write(f"[{rank_label()}] {error.code}\n")
        record_failure(None, exit_code_of(error))
        end_job(exit_code_of(error))
    abort_job(_without_runner_frames(error), exit_code=exit_code_of(error))


def _without_runner_frames(error: BaseException) -> BaseException:
    """*error* with the runner's and runpy's frames dropped from its traceback: the user's own frames show."""
    tb = error.__traceback__
    while tb is not None and tb.tb_next is not None and tb.tb_frame.f_code.co_filename in RUNNER_FILES:
        tb = tb.tb_next
    return error.with_traceback(tb)


# --- whole lines: the output forwarder -------------------------------------------------------------


class _Stream:
    """One of the program's output streams as the forwarder sees it: where it reads the program's bytes
    (*source*), where it writes them (*target*, the launcher's), and the unfinished line it holds."""

    def __init__(self, source: int, target: int, prefix: bytes, pty: bool) -> None:
        self.source, self.target, self.prefix, self.pty = source, target, prefix, pty
        self.held = bytearray()  # read, not yet written: an unfinished line
        self.at_line_start = True  # the next byte written starts a line (where the tag goes)
        self.broken = False  # the launcher's end is gone: nothing more is written

    def read(self) -> bool | None:
        """Take what the program wrote (one read) and pass on its whole lines: True if there was something,
        None if nothing now, False at end-of-file."""
        try:
            data = os.read(self.source, LINE_LIMIT)
        except BlockingIOError:
            return None
        except OSError as error:  # a pseudo-terminal whose last writer closed it says EIO, not end-of-file
            if error.errno != errno.EIO:
                raise
            data = b""
        if not data:
            return False
        self.held += data
        end = max(self.held.rfind(b"\n"), self.held.rfind(b"\r")) + 1
        if end == 0 and len(self.held) >= LINE_LIMIT:
            end = len(self.held)
        if end:
            self.write(end)
        return True

    def drain(self) -> bool:
        """Read until nothing is left to read now; False at end-of-file."""
        while True:
            got = self.read()
            if got is None:
                return True
            if not got:
                return False

    def write(self, end: int | None = None) -> None:
        """Write the first *end* bytes held (default all, the unfinished line too), tagged, in whole lines."""
        end = len(self.held) if end is None else end
        data = bytes(self.held[:end])
        del self.held[:end]
        if not data or self.broken:
            return
        if self.prefix:
            body = data[:-1].replace(b"\n", b"\n" + self.prefix) + data[-1:]
            data = (self.prefix if self.at_line_start else b"") + body
            self.at_line_start = data.endswith(b"\n")
        for piece in _whole_line_pieces(data, WRITE_BYTES):
            if not write_all(self.target, piece):
                self.broken = True  # the launcher is gone: the program's next write fails, as it would have
                return


def _whole_line_pieces(data: bytes, size: int) -> Iterator[bytes]:
    """*data* cut after newlines into pieces of at most *size* bytes; a longer line is one piece alone."""
    start = 0
    while len(data) - start > size:
        cut = data.rfind(b"\n", start, start + size) + 1
        if cut <= start:  # the line is longer than size: it goes alone, whole
            cut = data.find(b"\n", start + size) + 1 or len(data)
        yield data[start:cut]
        start = cut
    if start < len(data):
        yield data[start:]


#: Seconds between the forwarder's looks at the program's mapped shared memory while output arrives, and
#: (in ms) while none does.  A look reads /proc/PID/maps: cheap next to these intervals.
SEGMENT_LOOK_S = 0.05
SEGMENT_IDLE_LOOK_MS = 1000


class _SegmentWatch:
    """The program's shared-memory segments (its MPI's, MPICH's ``mpich_shm_*`` among them), recorded in its
    job's directory as they appear: a rank killed before its MPI unlinks them leaves them in /dev/shm until a
    reboot, and a dead process's maps can no longer be read, so whoever ends the job removes what is recorded
    (:func:`mailrail.segments.recorded_segments`).  The forwarder looks before it passes output on, so
    what the program had mapped when it printed a line is known once the line arrives."""

    def __init__(self, program: int) -> None:
        self.program = program
        self.seen: set[str] = set()
        self.last = 0.0

    def look(self) -> None:
        now = time.monotonic()
        if now - self.last >= SEGMENT_LOOK_S:
            self.last = now
            new = mapped_segments([self.program]) - self.seen
            if new:
                self.seen |= new
                record_segments(sorted(new))


def _forward(streams: list[_Stream], control: int | None, ack: int, watch: _SegmentWatch | None) -> NoReturn:
    """The forwarder's body: pass the program's output on until every stream ends, then exit.

    A byte on *control* (a failing rank, :func:`_wait_until_forwarded`) means: pass on everything the
    program wrote so far, the unfinished line too, wait (bounded) for the launcher to take it, answer
    a byte on *ack*.  *watch*, if any, looks at the program's segments at every wake-up.
    """
    by_source = {stream.source: stream for stream in streams}
    poller = select.poll()
    for source in by_source:
        poller.register(source, select.POLLIN)
    if control is not None:
        poller.register(control, select.POLLIN)

    def end(stream: _Stream) -> None:
        stream.write()
        poller.unregister(stream.source)
        del by_source[stream.source]
        os.close(stream.source)

    while by_source:
        ready = poller.poll(SEGMENT_IDLE_LOOK_MS if watch is not None else None)
        if watch is not None:
            watch.look()
        for fd, _ in ready:
            if fd == control:
                try:
                    asked = os.read(control, 64)
                except BlockingIOError:
                    continue
                if not asked:  # the program is gone or exec'd another
                    poller.unregister(control)
                    control = None
                    continue
                deadline = time.monotonic() + OUTPUT_DRAIN_BOUND
                for stream in list(by_source.values()):
                    if not _settled(stream, deadline):
                        end(stream)
                for stream in by_source.values():
                    stream.write()
                for target in {stream.target for stream in streams}:
                    while _unread_bytes(target) > 0 and time.monotonic() < deadline:
                        time.sleep(0.005)
                with contextlib.suppress(OSError):
                    os.write(ack, b".")
            elif fd in by_source:
                stream = by_source[fd]
                if stream.read() is False or stream.broken:
                    end(stream)
    os._exit(0)


def _settled(stream: _Stream, deadline: float) -> bool:
    """Read all *stream* holds now (a pseudo-terminal: until it stays quiet a moment); False at end-of-file."""
    if not stream.drain():
        return False
    while stream.pty and time.monotonic() < deadline:
        if not select.select([stream.source], [], [], PTY_SETTLE_S)[0]:
            return True
        if not stream.drain():
            return False
    return True


def _forwarded_kind(fd: int) -> os.stat_result | None:
    """*fd*'s status when the forwarder should stand before it (a pipe, socket, terminal or file), else None
    (closed, or ``/dev/null`` and the like: left as it is)."""
    try:
        status = os.fstat(fd)
    except OSError:
        return None
    mode = status.st_mode
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISREG(mode) or os.isatty(fd):
        return status
    return None


def _program_end(fd: int) -> tuple[int, int]:
    """The two ends of what the program writes to instead of *fd*: ``(forwarder's, program's)``.

    A pseudo-terminal when *fd* is a terminal (a program buffers for a terminal as it would have; a
    newline stays a newline: the launcher's terminal translates, if anything does; its window size is
    the launcher's), else a pipe.
    """
    if not os.isatty(fd):
        return os.pipe()
    reader, writer = os.openpty()
    attributes = termios.tcgetattr(writer)
    attributes[1] &= ~termios.OPOST  # oflag: no output processing (\n -> \r\n) of our own
    termios.tcsetattr(writer, termios.TCSANOW, attributes)
    with contextlib.suppress(OSError):
        fcntl.ioctl(writer, termios.TIOCSWINSZ, fcntl.ioctl(fd, termios.TIOCGWINSZ, b"\0" * 8))
    os.set_inheritable(reader, False)
    os.set_inheritable(writer, False)
    return reader, writer


def forward_output_in_lines(*, tag: bool = False) -> None:
    """Stand a forwarder between this process's stdout and stderr and the launcher (see the module's
    docstring): from now on fds 1 and 2 are pipes (or pseudo-terminals) it reads; whole lines reach
    the launcher.  Call once, before MPI starts; *tag* starts every line with ``[rank N] ``."""
    rank = launcher_rank()
    prefix = f"[rank {rank if rank is not None else '?'}] ".encode() if tag else b""
    plan: list[tuple[list[int], int, int]] = []  # (the program's fds, forwarder's end, program's end)
    seen: dict[tuple[int, int], list[int]] = {}
    for fd in (1, 2):
        status = _forwarded_kind(fd)
        if status is None:
            continue
        key = (status.st_dev, status.st_ino)
        if key in seen:  # stderr is stdout (2>&1): one stream, so their order stays the program's
            seen[key].append(fd)
            continue
        seen[key] = [fd]
        plan.append((seen[key], *_program_end(fd)))
    if not plan:
        return
    control_reader, control_writer = os.pipe()
    ack_reader, ack_writer = os.pipe()
    for text in (sys.stdout, sys.stderr):  # nothing buffered is written twice, by the program and the forwarder
        if text is not None:
            text.flush()
    started = _start_forwarder(plan, prefix, control_reader, ack_writer)
    for fds, reader, writer in plan:
        if started:
            for fd in fds:
                os.dup2(writer, fd)  # inheritable: the program's children write to the forwarder too
        os.close(writer)
        os.close(reader)
    os.close(control_reader)
    os.close(ack_writer)
    if started:
        set_output_forwarder(lambda bound: _wait_until_forwarded(control_writer, ack_reader, bound))
    else:  # no process could be forked: the output goes to the launcher directly, as before
        os.close(control_writer)
        os.close(ack_reader)


def _start_forwarder(plan: list[tuple[list[int], int, int]], prefix: bytes, control: int, ack: int) -> bool:
    """Fork the forwarder through a middle process that exits at once: the forwarder is no child of the
    program's (a program that waits for all its children never waits for it).  False if a fork failed."""
    program = os.getpid()
    try:
        middle = os.fork()
    except OSError:
        return False
    if middle == 0:
        try:
            if os.fork() == 0:
                _become_forwarder(plan, prefix, control, ack, program)
        except BaseException:
            os._exit(1)
        os._exit(0)
    _, status = os.waitpid(middle, 0)
    return os.waitstatus_to_exitcode(status) == 0


def _become_forwarder(
    plan: list[tuple[list[int], int, int]], prefix: bytes, control: int, ack: int, program: int
) -> NoReturn:
    """The forwarder process: keep only its own fds, ignore the signals that end a job, forward."""
    try:
        gc.disable()  # it creates no cycles; a collection would touch (and copy) every page it shares
        record_orphan(os.getpid())  # orphaned already: whoever runs the job reaps it when it ends
        with contextlib.suppress(OSError), open("/proc/self/comm", "w") as comm:
            comm.write(FORWARDER_NAME)  # what ps -o comm, top and pkill see (its command line is the rank's)
        for signum in signal.valid_signals():
            if signum not in _SIGNALS_KEPT:
                with contextlib.suppress(OSError, ValueError):
                    signal.signal(signum, signal.SIG_IGN)
        streams = [_Stream(reader, fds[0], prefix, os.isatty(fds[0])) for fds, reader, _ in plan]
        keep = {control, ack} | {stream.source for stream in streams} | {stream.target for stream in streams}
        _close_all_but(keep)
        for stream in streams:
            os.set_blocking(stream.source, False)
        os.set_blocking(control, False)
        _forward(streams, control, ack, _SegmentWatch(program) if os.environ.get(JOB_VARIABLE) else None)
    except BaseException as error:  # a bug here must not pass silently: the program's output is lost
        with contextlib.suppress(OSError):
            os.write(2, f"[{rank_label()}] mailrail: the output forwarder failed: {error!r}\n".encode())
        os._exit(1)


def _close_all_but(keep: set[int]) -> None:
    """Close every fd of this process but *keep*: the program's stdin, its copies of the write ends (the
    forwarder would never see end-of-file), whatever else the rank had open."""
    try:
        fds = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:  # no /proc
        fds = list(range(min(os.sysconf("SC_OPEN_MAX"), 1 << 16)))
    for fd in fds:
        if fd not in keep:
            with contextlib.suppress(OSError):
                os.close(fd)


#: Signals the forwarder keeps as they are: the ones it cannot ignore, faults, and job control.
_SIGNALS_KEPT = {
    signal.SIGKILL,
    signal.SIGSTOP,
    signal.SIGCHLD,
    signal.SIGCONT,
    signal.SIGTSTP,
    signal.SIGTTIN,
    signal.SIGTTOU,
    signal.SIGSEGV,
    signal.SIGBUS,
    signal.SIGFPE,
    signal.SIGILL,
    signal.SIGABRT,
    signal.SIGTRAP,
}


def _wait_until_forwarded(control: int, ack: int, bound: float) -> None:
    """Ask the forwarder to pass on everything written so far and wait (at most *bound* s) until it says done."""
    try:
        os.write(control, b".")
        if select.select([ack], [], [], bound)[0]:
            os.read(ack, 64)
    except OSError:  # the forwarder is gone: nothing to wait for
        pass


# --- the runner ------------------------------------------------------------------------------------


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    tag = bool(argv) and argv[0] == TAG_OUTPUT
    if tag:
        argv.pop(0)
    if not argv or argv[0] in ("--exec", "--command") and len(argv) < 2:
        print(__doc__.rsplit("Usage: ", 1)[1].strip(), file=sys.stderr)
        return 2
    die_with_parent()
    forward_output_in_lines(tag=tag)
    if argv[0] == "--command":  # exactly as python -m mailrail_tools runs it: its own exit status and errors
        run_python(["-m", "mailrail_tools", *argv[1:]])
        return 0
    if argv[0] == "--exec":
        try:
            os.execvp(argv[1], list(argv[1:]))
        except OSError as error:
            sys.stderr.write(f"[{rank_label()}] mailrail run: cannot run {argv[1]!r}: {error.strerror}\n")
            return 127
    if os.environ.get(JOB_VARIABLE) and "mpi4py.MPI" not in sys.modules:
        sys.meta_path.insert(0, _SegmentsOnceMPIStarts())
    try:
        run_python(argv)
    except SystemExit as error:
        if exit_code_of(error) != 0:
            end_job_on(error)
    except BaseException as error:
        end_job_on(error)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
