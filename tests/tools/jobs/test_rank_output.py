"""The rank runner's output forwarder (``mailrail_tools.jobs.rank_runner``): a rank's stdout and stderr reach the
launcher in whole lines, however the program writes them, optionally tagged with the rank; the program stays the
process the launcher started (pid, exit status, signals), and what it wrote before it failed or was
signalled still arrives.

The first tests run the runner alone, reading its output the way a launcher does (``os.read`` of up to
64 KiB, a pipe's capacity); the ``mpi`` ones run two ranks under a real ``mailrail run``, where lines of
ranks that wrote them in pieces used to mix (``[' 0', 'rankrank 1']``: MPICH's Hydra passes on each
piece as it comes).  Every wait is bounded; none is asserted on.
"""

from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time
import tty

import pytest

from helpers import alive, mailrail
from mailrail_tools.jobs import rank_runner

pytestmark = pytest.mark.jobs  # (no rail: make test-python-transport leaves them out)

#: Seconds any one runner below may take (they take well under one).
BOUND = 60.0

#: Writes LINES lines to stdout and stderr, each in three pieces with a pause between them (so a reader
#: that is not held back sees the pieces one by one): ``rank R line I end``.
FRAGMENTS = r"""
import os, sys, time
rank = next((os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK") if v in os.environ), "?")
for i in range(int(sys.argv[1])):
    for piece in (f"rank {rank}", f" line {i}", " end\n"):
        os.write(1, piece.encode())
        os.write(2, piece.encode())
        time.sleep(0.002)
"""
#: The same lines written by print() (several writes each when Python runs unbuffered).
PRINTS = r"""
import os, sys
rank = next((os.environ[v] for v in ("OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK") if v in os.environ), "?")
for i in range(int(sys.argv[1])):
    print("rank", rank, "line", i, "end")
    print("rank", rank, "line", i, "end", file=sys.stderr)
"""
LINE = re.compile(r"rank (\d) line (\d+) end")


def runner(*args, env=None, **popen) -> subprocess.Popen:
    """``python -m mailrail_tools.jobs.rank_runner ARGS`` outside any launcher (rank 3, unbuffered), its output read by
    the test."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.PIPE)
    env = {**os.environ, "PMI_RANK": "3", "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "mailrail_tools.jobs.rank_runner", *args], env=env, **popen)


def reads(process: subprocess.Popen, until: bytes | None = None) -> dict[str, list[bytes]]:
    """Every ``os.read`` of the process's stdout and stderr until both end (or *until* appears on stdout),
    bounded by BOUND seconds: what a launcher would get from each read."""
    streams = {process.stdout.fileno(): "stdout", process.stderr.fileno(): "stderr"}
    got: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
    deadline = time.monotonic() + BOUND
    while streams:
        if until is not None and until in b"".join(got["stdout"]):
            return got
        ready = select.select(list(streams), [], [], max(0.0, deadline - time.monotonic()))[0]
        if not ready:
            process.kill()
            pytest.fail(f"the runner did not end within {BOUND} s: {got}")
        for fd in ready:
            chunk = os.read(fd, 65536)
            if chunk:
                got[streams[fd]].append(chunk)
            else:
                del streams[fd]
    return got


@pytest.mark.parametrize("how", ["in-process", "exec"])
def test_each_read_of_a_rank_s_output_holds_whole_lines(how):
    """The program writes each line in three pieces; every read the launcher makes ends at a line's end."""
    target = ["-c", FRAGMENTS, "20"] if how == "in-process" else ["--exec", sys.executable, "-c", FRAGMENTS, "20"]
    process = runner(*target)
    got = reads(process)
    assert process.wait(BOUND) == 0
    for name in ("stdout", "stderr"):
        assert all(chunk.endswith(b"\n") for chunk in got[name]), got[name]
        lines = b"".join(got[name]).decode().splitlines()
        assert lines == [f"rank 3 line {i} end" for i in range(20)]


def test_a_line_without_its_newline_is_passed_on_when_the_program_ends():
    process = runner("-c", "import sys; print('whole'); sys.stdout.write('unfinished')")
    assert b"".join(reads(process)["stdout"]) == b"whole\nunfinished"
    assert process.wait(BOUND) == 0


def test_tag_output_starts_every_line_with_the_rank():
    code = "import os; [os.write(1, piece) for piece in (b'a', b'b\\nc', b'\\n', b'\\n', b'tail')]"
    process = runner("--tag-output", "-c", code)
    assert b"".join(reads(process)["stdout"]) == b"[rank 3] ab\n[rank 3] c\n[rank 3] \n[rank 3] tail"
    assert process.wait(BOUND) == 0


def test_stdout_and_stderr_that_are_one_pipe_stay_in_the_program_s_order():
    code = "import sys\nfor i in range(50):\n    print('out', i)\n    print('err', i, file=sys.stderr)"
    process = runner("-c", code, stderr=subprocess.STDOUT)
    out, _ = process.communicate(timeout=BOUND)
    expected = "".join(f"out {i}\nerr {i}\n" for i in range(50))
    assert out.decode() == expected


def test_a_terminal_stays_a_terminal_and_a_newline_a_newline():
    """Given a terminal (Open MPI gives its ranks one for stdout) the program gets a pseudo-terminal: it
    buffers as for a terminal, and the forwarder adds no carriage returns of its own."""
    reader, writer = os.openpty()
    tty.setraw(writer)  # the launcher's terminal translates nothing: what arrives is what was forwarded
    try:
        process = runner("-c", "import sys; print(sys.stdout.isatty(), sys.stderr.isatty())", stdout=writer)
        os.close(writer)
        output = b""
        deadline = time.monotonic() + BOUND
        while b"\n" not in output and select.select([reader], [], [], max(0.0, deadline - time.monotonic()))[0]:
            output += os.read(reader, 1024)
        _, err = process.communicate(timeout=BOUND)
    finally:
        os.close(reader)
    assert output == b"True False\n", err
    assert process.returncode == 0


def test_the_program_is_the_process_started_and_has_no_child_of_the_runner_s():
    code = "import os\ntry:\n    os.wait()\nexcept ChildProcessError:\n    print(os.getpid(), 'no children')"
    process = runner("-c", code)
    out = b"".join(reads(process)["stdout"]).decode()
    assert out == f"{process.pid} no children\n"
    assert process.wait(BOUND) == 0


@pytest.mark.parametrize(
    ("target", "status"),
    [
        (["-c", "import sys; sys.exit(3)"], 3),
        (["-c", "import os, signal; os.kill(os.getpid(), signal.SIGTERM)"], -signal.SIGTERM),
        (["--exec", "sh", "-c", "exit 5"], 5),
        (["--exec", "sh", "-c", "kill -USR1 $$"], -signal.SIGUSR1),
    ],
)
def test_exit_status_and_death_by_signal_are_the_program_s(target, status):
    process = runner(*target)
    reads(process)
    assert process.wait(BOUND) == status


def test_a_failing_program_s_traceback_arrives_whole():
    process = runner("-c", "import sys\nsys.stdout.write('unfinished')\nraise RuntimeError('injected')")
    got = reads(process)
    assert process.wait(BOUND) == 1
    assert b"".join(got["stdout"]) == b"unfinished"
    err = b"".join(got["stderr"]).decode()
    assert err.splitlines()[-1] == "[rank 3 on " + os.uname().nodename + "] RuntimeError: injected", err


def test_a_failing_rank_has_its_output_passed_on_before_it_ends():
    """What ``end_job`` waits for before ``MPI_Abort``: the forwarder passes on everything written so far, the
    unfinished line too, while the program still runs (here it then waits for the test)."""
    code = (
        "import sys\nfrom mailrail import failure\nsys.stdout.write('unfinished')\nsys.stdout.flush()\n"
        "failure._wait_for_output_taken(failure.OUTPUT_DRAIN_BOUND)\nsys.stdin.read()"
    )
    process = runner("-c", code, stdin=subprocess.PIPE)
    try:
        got = reads(process, until=b"unfinished")
        assert process.poll() is None  # still running: the forwarder did not wait for its end
        assert b"".join(got["stdout"]) == b"unfinished"
    finally:
        process.stdin.close()
        process.wait(BOUND)


def test_what_a_program_writes_as_a_signal_ends_it_still_arrives():
    """SIGTERM to the rank's whole process group (as launchers send it): the forwarder ignores it, and
    passes on what the program's handler prints before it exits."""
    code = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: (print('cleaning up'), sys.exit(0)))\n"
        "print('READY')\ntime.sleep(60)"
    )
    process = runner("-c", code, start_new_session=True)
    got = reads(process, until=b"READY\n")
    os.killpg(process.pid, signal.SIGTERM)
    got["stdout"] += reads(process)["stdout"]
    assert b"".join(got["stdout"]) == b"READY\ncleaning up\n"
    assert process.wait(BOUND) == 0


def test_the_forwarder_ends_with_the_program():
    marker = f"mailrail-test-{os.getpid()}-{time.monotonic_ns()}"
    process = runner("-c", "print('done')", env={"MAILRAIL_TEST_MARK": marker})
    reads(process)
    assert process.wait(BOUND) == 0
    forwarders = [pid for pid in _processes_named(rank_runner.FORWARDER_NAME) if _has_mark(pid, marker)]
    deadline = time.monotonic() + BOUND
    while any(alive(pid) for pid in forwarders) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not [pid for pid in forwarders if alive(pid)]


def _processes_named(name: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/comm") as comm:
                    if comm.read().strip() == name:
                        found.append(int(entry))
            except OSError:
                continue
    return found


def _has_mark(pid: int, marker: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as environ:
            return marker.encode() in environ.read()
    except OSError:
        return False


def test_the_forwarder_holds_only_its_own_fds():
    """The forwarder holds no copy of the program's stdin or of its own write ends (it would never see
    end-of-file), nor anything else the rank had open."""
    code = "import os, time\nprint('READY', flush=True)\nimport sys\nsys.stdin.read()"
    marker = f"mailrail-test-{os.getpid()}-{time.monotonic_ns()}"
    process = runner("-c", code, stdin=subprocess.PIPE, env={"MAILRAIL_TEST_MARK": marker})
    try:
        reads(process, until=b"READY\n")
        (forwarder,) = [pid for pid in _processes_named(rank_runner.FORWARDER_NAME) if _has_mark(pid, marker)]
        fds = {int(fd) for fd in os.listdir(f"/proc/{forwarder}/fd")}
        assert 0 not in fds
        assert len(fds) == 2 + 2 + 2  # stdout, stderr; the two ends it reads; control and answer
    finally:
        process.stdin.close()
        process.wait(BOUND)


# --- under a real mailrail run ---------------------------------------------------------------------


def _assert_whole_lines(text: str, ranks: int, lines: int, prefix: str = "") -> None:
    got = sorted(text.splitlines())
    expected = sorted(f"{prefix.format(r)}rank {r} line {i} end" for r in range(ranks) for i in range(lines))
    assert got == expected, [line for line in got if line not in expected][:10]


@pytest.mark.mpi
@pytest.mark.smoke
@pytest.mark.parametrize("writes", ["fragments", "unbuffered-print", "exec"])
def test_two_ranks_lines_never_mix_under_mailrail_run(writes):
    """Two ranks write 30 lines each in pieces, to stdout and stderr, through the launcher: every line arrives
    whole (MPICH's Hydra used to splice one rank's pieces into the other's lines)."""
    if writes == "exec":  # a program run by path is exec'd, not run in the runner's interpreter
        program = [sys.executable, "-c", FRAGMENTS, "30"]
    else:
        program = ["python", "-c", FRAGMENTS if writes == "fragments" else PRINTS, "30"]
    completed = mailrail("run", "-n", "2", "--", *program, env={"PYTHONUNBUFFERED": "1"}, timeout=180)
    assert completed.returncode == 0, completed.stderr[-3000:]
    _assert_whole_lines(completed.stdout, 2, 30)
    own = [line for line in completed.stderr.splitlines() if line.startswith("mailrail run: ")]
    assert len(own) == 1, completed.stderr[-3000:]
    _assert_whole_lines("".join(f"{line}\n" for line in completed.stderr.splitlines()[1:]), 2, 30)


@pytest.mark.mpi
@pytest.mark.smoke
def test_tag_output_under_mailrail_run_names_the_rank_of_every_line():
    completed = mailrail(
        "run", "-n", "2", "--tag-output", "--", "python", "-c", PRINTS, "5", env={"PYTHONUNBUFFERED": "1"}
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    _assert_whole_lines(completed.stdout, 2, 5, prefix="[rank {}] ")


@pytest.mark.mpi
def test_tag_output_tags_a_mailrail_command_s_lines_too():
    completed = mailrail("run", "-n", "2", "--tag-output", "info", "--plan", "--ranks", "4", "--ranks-per-node", "2")
    assert completed.returncode == 0, completed.stderr[-3000:]
    lines = completed.stdout.splitlines()
    by_rank = {r: [line[len(f"[rank {r}] ") :] for line in lines if line.startswith(f"[rank {r}] ")] for r in (0, 1)}
    assert len(by_rank[0]) + len(by_rank[1]) == len(lines), completed.stdout
    assert by_rank[0] == by_rank[1] and any("adaptive" in line for line in by_rank[0]), completed.stdout


def test_the_runner_is_what_mailrail_run_starts_for_a_mailrail_command_too():
    from mailrail_tools.cli.run import program_argv

    assert program_argv(["bench", "stream"]) == [
        sys.executable,
        "-m",
        "mailrail_tools.jobs.rank_runner",
        "--command",
        "bench",
        "stream",
    ]
    assert program_argv(["--", "python", "-u", "x.py"], tag_output=True) == [
        sys.executable,
        "-u",
        "-m",
        "mailrail_tools.jobs.rank_runner",
        "--tag-output",
        "x.py",
    ]
    assert program_argv(["--", "hostname"], tag_output=True)[3:] == ["--tag-output", "--exec", "hostname"]
