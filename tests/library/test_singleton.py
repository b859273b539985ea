"""A MailRail program started without a launcher (a singleton, ``python prog.py``) leaves nothing behind
(mailrail._mpi): no shared-memory segment, no session directory of its MPI."""

from __future__ import annotations

import subprocess
import sys

import pytest

from helpers import MPI_TIMEOUT, job_environment, job_files_left

#: A singleton that starts MPI as every MailRail module does, uses it, and says where its temporary files go.
PROGRAM = """
import tempfile
from mailrail._mpi import MPI
MPI.COMM_WORLD.Barrier()
print(tempfile.gettempdir())
"""


@pytest.mark.mpi
@pytest.mark.smoke
def test_a_singleton_leaves_nothing_in_its_tmpdir_nor_in_shared_memory(tmp_path):
    """Open MPI 5 left an empty ``ompi.<host>.<uid>/jf.0/<job>`` directory in ``TMPDIR`` on every run (190 in
    a day here), Open MPI 4 its PMIx segments; and Open MPI 5 a segment in /dev/shm."""
    completed = subprocess.run(
        [sys.executable, "-c", PROGRAM],
        env=job_environment(TMPDIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=MPI_TIMEOUT,
    )
    assert completed.returncode == 0, completed.stderr
    assert completed.stdout.strip() == str(tmp_path)  # the program's own temporary files go where it said
    assert sorted(path.name for path in tmp_path.iterdir()) == []
    assert job_files_left() == set()  # (what the process recorded it mapped: its own)


@pytest.mark.mpi
@pytest.mark.smoke
@pytest.mark.parametrize(
    "command", [["bench", "stream"], ["bench", "containers", "--inserts", "1000", "--trials", "1"]]
)
def test_a_command_run_without_a_launcher_leaves_nothing(command, tmp_path):
    """``mailrail bench stream`` on one rank (which says how to start two) and a command that runs there:
    each imported mpi4py itself and left Open MPI 5's segment in /dev/shm (the commands start MPI through
    mailrail._mpi now; import-linter keeps them so)."""
    completed = subprocess.run(
        [sys.executable, "-m", "mailrail_tools", *command],
        env=job_environment(TMPDIR=str(tmp_path)),
        capture_output=True,
        text=True,
        timeout=MPI_TIMEOUT,
    )
    assert completed.returncode in (0, 2), completed.stderr  # (2: the usage error of a command that needs 2 ranks)
    assert sorted(path.name for path in tmp_path.iterdir()) == []
    assert job_files_left() == set()  # (what the process recorded it mapped: its own)
