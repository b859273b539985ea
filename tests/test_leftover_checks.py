"""The leftover checks count what the test (the session) made, and only that (issue 48): a file its own job leaves
fails them, a file another process on the machine makes or leaves meanwhile never does.

A test's jobs are marked with a directory of the test's own (tests/conftest.py makes it, helpers.job_environment
puts it in their ``MAILRAIL_JOB_DIRS``), where their processes and runners record what they map in /dev/shm and hold
in /tmp (mailrail.segments); the checks read that record: helpers.job_files_left in a test, the conftest's
pytest_sessionfinish at the end of a session.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys

import pytest

from helpers import (
    MPI_TIMEOUT,
    ROOT,
    job_environment,
    job_files_left,
    job_processes_left,
    job_records,
    recorded_job_files,
    unclaimed_job_files,
)
from mailrail import segments
from mailrail_tools.jobs import bounded
from mailrail_tools.jobs.bounded import run_bounded
from mailrail_tools.jobs.which_mpi import mpi_environment, mpiexec_argv

pytestmark = pytest.mark.skipif(not os.path.isdir(segments.SHARED_MEMORY_ROOT), reason="no /dev/shm here")

#: A job's process that makes a file in /dev/shm, maps it, records it as every MailRail process records its MPI's
#: segments (mailrail.segments), and is SIGKILLed before it could unlink it.
LEAVES = """
import mmap, os, signal, sys
from mailrail import segments
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
os.ftruncate(fd, mmap.PAGESIZE)
held = mmap.mmap(fd, mmap.PAGESIZE)
segments.record_own_segments()
os.kill(os.getpid(), signal.SIGKILL)
"""

#: A process of another job on the machine (another test run's, a user's): makes files where MPIs put theirs and
#: leaves them, mapped and held by no one (what an ended job leaves).
FOREIGN = """
import sys
for path in sys.argv[1:]:
    open(path, "x").close()
"""

#: Seconds a process that only makes a file or two may take.
MOMENT_BOUND_S = 60.0


def shared_memory_name() -> str:
    return os.path.join(segments.SHARED_MEMORY_ROOT, f"mailrail-test-{secrets.token_hex(6)}")


def launcher_file_name() -> str:
    return segments.LAUNCHER_FILE_PREFIXES[0] + secrets.token_hex(3)


def outside_the_tests_jobs() -> dict[str, str]:
    """An environment with no job's mark: a process started with it is not one of the test's jobs."""
    return {name: value for name, value in os.environ.items() if name != segments.JOB_VARIABLE}


def plant_foreign(paths: list[str]) -> None:
    """*paths* made and left by a process outside the test's jobs, in a session of its own."""
    subprocess.run(
        [sys.executable, "-c", FOREIGN, *paths],
        env=outside_the_tests_jobs(),
        start_new_session=True,
        check=True,
        timeout=MOMENT_BOUND_S,
    )


def remove(paths: list[str] | set[str]) -> None:
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)


@pytest.fixture
def no_removal(monkeypatch: pytest.MonkeyPatch) -> None:
    """The job runner's removal of what its job recorded is defeated: what the job leaves stays (for the test to
    remove)."""
    monkeypatch.setattr(bounded, "remove_segments", lambda paths: None)


def test_a_file_the_test_s_own_job_leaves_fails_the_check(no_removal):
    path = shared_memory_name()
    try:
        completed = run_bounded(
            [sys.executable, "-c", LEAVES, path], timeout=MOMENT_BOUND_S, env=job_environment(), capture=True
        )
        assert completed.returncode == -signal.SIGKILL, completed.stderr
        assert job_files_left(bound=0) == {path}
    finally:
        remove([path])
    assert job_files_left(bound=0) == set()


#: Once MPI has started everywhere (as MailRail programs start it: recording the rank's segments and its launcher's
#: files), rank 0 SIGKILLs the launcher on this node (Open MPI's prterun, MPICH's Hydra proxy), and every rank SIGKILLs
#: itself once it is gone: neither the ranks' MPI nor the launcher (Open MPI 5's removes the segments of a rank killed
#: alone) unlinks a thing.  (The launcher is the parent the rank started with: an orphaned rank's parent is the test.)
KILLED_WHOLE = """
import os, signal, time
from mailrail._mpi import MPI
launcher = os.getppid()
MPI.COMM_WORLD.Barrier()
if MPI.COMM_WORLD.rank == 0 and os.getppid() == launcher:
    os.kill(launcher, signal.SIGKILL)
deadline = time.monotonic() + 60
while os.getppid() == launcher and time.monotonic() < deadline:
    time.sleep(0.01)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.mpi
@pytest.mark.smoke
def test_what_a_killed_job_s_mpi_leaves_fails_the_check(no_removal, tmp_path):
    """The MPI's own files (Open MPI's sm_segment.*, MPICH's mpich_shm_* in /dev/shm itself: not a local job; Hydra's
    topology file in /tmp) that a job SIGKILLed whole left, the job runner's removal defeated."""
    program = tmp_path / "killed_whole.py"
    program.write_text(KILLED_WHOLE)
    argv = mpiexec_argv(2, [sys.executable, str(program)])
    completed = run_bounded(argv, timeout=MPI_TIMEOUT, env=mpi_environment(base=job_environment()), capture=True)
    left = job_files_left(bound=0)
    try:
        assert completed.returncode != 0, completed.stdout + completed.stderr
        made = recorded_job_files(job_records())
        if not made:  # (Debian's MPICH over UCX maps no file there)
            pytest.skip("this MPI's ranks map no file in /dev/shm: nothing a killed job could leave there")
        assert left and left <= made, (left, made)
    finally:
        remove(left)
    assert job_files_left(bound=0) == set()


#: Ranks that wait until the file named by their first argument exists (another process makes it meanwhile),
#: then end normally.
WAITS_FOR = """
import os, sys, time
from mailrail._mpi import MPI
deadline = time.monotonic() + 60
while not os.path.exists(sys.argv[1]) and time.monotonic() < deadline:
    time.sleep(0.05)
MPI.COMM_WORLD.Barrier()
"""


@pytest.mark.mpi
@pytest.mark.smoke
def test_files_another_process_leaves_meanwhile_never_fail_the_check():
    """While the test's own job runs, a process outside it (as another test run's or a user's job is) makes a file
    in /dev/shm and an MPI launcher's file in /tmp, and leaves them: what the machine-wide view took for files an
    ended job left (the sessions issue 48 failed).  The test's check passes; its own job's files are all it counts."""
    foreign = [shared_memory_name(), launcher_file_name()]
    planted: list[bool] = []

    def plant() -> None:  # (run_bounded's watch: called while the job runs)
        if not planted:
            plant_foreign(foreign)
            planted.append(True)

    argv = mpiexec_argv(2, [sys.executable, "-c", WAITS_FOR, foreign[0]])
    try:
        completed = run_bounded(
            argv, timeout=MPI_TIMEOUT, env=mpi_environment(base=job_environment()), capture=True, watch=plant
        )
        assert completed.returncode == 0, completed.stdout + completed.stderr
        assert planted and set(foreign) <= unclaimed_job_files()  # what a machine-wide check counts
        assert job_files_left() == set()
        assert job_processes_left() == []
    finally:
        remove(foreign)


# --- the session's check (tests/conftest.py), in a session of its own ------------------------------------

#: The tests of a session of their own, started by the tests below: one leaves a file of its own job's, the other
#: runs a job that leaves nothing while another process leaves files.  PLANTED names the files.
SESSION_TESTS = f"""
import os, secrets, subprocess, sys

from helpers import job_environment
from mailrail_tools.jobs import bounded
from mailrail_tools.jobs.bounded import run_bounded

LEAVES = {LEAVES!r}
FOREIGN = {FOREIGN!r}


def test_leaves(monkeypatch):
    monkeypatch.setattr(bounded, "remove_segments", lambda paths: None)
    argv = [sys.executable, "-c", LEAVES, os.environ["PLANTED"]]
    assert run_bounded(argv, timeout=60, env=job_environment(), capture=True).returncode == -9


def test_another_process_leaves():
    own = "/dev/shm/mailrail-test-" + secrets.token_hex(6)
    argv = [sys.executable, "-c", LEAVES, own]
    run_bounded(argv, timeout=60, env=job_environment(), capture=True)
    assert not os.path.exists(own)  # (recorded, and removed by its runner)
    foreign = os.environ["PLANTED"].split(":")
    subprocess.run([sys.executable, "-c", FOREIGN, *foreign], start_new_session=True, check=True)
"""


def session(tmp_path, test: str, planted: list[str]) -> subprocess.CompletedProcess:
    """Run *test* of :data:`SESSION_TESTS` in a pytest session of its own, with the suite's conftest."""
    tests = tmp_path / "session"
    tests.mkdir()
    (tests / "test_session.py").write_text(SESSION_TESTS)
    env = {name: value for name, value in outside_the_tests_jobs().items() if not name.startswith("PYTEST_")}
    env.update(PLANTED=":".join(planted), PYTHONPATH=str(ROOT / "tests"))
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "conftest"]
    argv += ["-c", str(ROOT / "pyproject.toml"), "--rootdir", str(tests), f"{tests / 'test_session.py'}::{test}"]
    return subprocess.run(argv, env=env, capture_output=True, text=True, timeout=MPI_TIMEOUT, cwd=tests)


def test_a_session_whose_job_leaves_a_file_fails_and_names_it_and_its_test(tmp_path):
    path = shared_memory_name()
    try:
        completed = session(tmp_path, "test_leaves", [path])
        assert os.path.exists(path)
    finally:
        remove([path])
    assert completed.returncode == pytest.ExitCode.TESTS_FAILED, completed.stdout + completed.stderr
    assert "1 passed" in completed.stdout, completed.stdout  # the test passed; the session failed
    assert "the session's jobs left 1 files" in completed.stdout, completed.stdout
    assert f"{path}  (a job of test_session.py::test_leaves)" in completed.stdout, completed.stdout


def test_a_session_passes_while_another_process_leaves_files(tmp_path):
    foreign = [shared_memory_name(), launcher_file_name()]
    try:
        completed = session(tmp_path, "test_another_process_leaves", foreign)
        assert all(os.path.exists(path) for path in foreign)  # left there the whole time the session checked
    finally:
        remove(foreign)
    assert completed.returncode == pytest.ExitCode.OK, completed.stdout + completed.stderr
    assert "1 passed" in completed.stdout, completed.stdout
