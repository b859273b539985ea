"""What outlives a killed job's processes and who finds it (mailrail.segments): no MPI job here."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from mailrail import segments

#: A child that opens *path* (argv[1]), says so, and holds it until its standard input closes.
HOLDER = "import sys; f = open(sys.argv[1]); print('held', flush=True); sys.stdin.read()"
#: A child that records what its parent holds, as a rank does once MPI started (its parent: the launcher).
RECORDER = "from mailrail import segments; segments.record_own_segments()"


def launcher_file() -> str:
    """A file named as MPICH's Hydra names its topology file (removed by the caller)."""
    directory = os.path.dirname(segments.LAUNCHER_FILE_PREFIXES[0])
    fd, path = tempfile.mkstemp(prefix=os.path.basename(segments.LAUNCHER_FILE_PREFIXES[0]), dir=directory)
    os.close(fd)
    return path


def test_a_launcher_file_is_the_job_s_while_one_of_its_processes_holds_it():
    path = launcher_file()
    try:
        holder = subprocess.Popen(
            [sys.executable, "-c", HOLDER, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        try:
            assert holder.stdout.readline() == "held\n"
            assert segments.held_launcher_files([holder.pid]) == {path}
            assert path in segments.job_files([holder.pid, os.getpid()])
        finally:
            holder.stdin.close()
            holder.wait(10)
            holder.stdout.close()
        assert segments.held_launcher_files([holder.pid]) == set()  # (gone: nothing to read)
    finally:
        os.unlink(path)


def test_a_rank_records_the_launcher_files_its_parent_holds(tmp_path):
    path = launcher_file()
    try:
        with open(path):  # this process plays the launcher on the node
            env = dict(os.environ, **{segments.JOB_VARIABLE: str(tmp_path)})
            subprocess.run([sys.executable, "-c", RECORDER], env=env, check=True, timeout=60)
        assert path in segments.recorded_segments(str(tmp_path))
        segments.remove_segments(segments.recorded_segments(str(tmp_path)))
        assert not os.path.exists(path)
    finally:
        if os.path.exists(path):
            os.unlink(path)


def test_a_record_names_nothing_outside_shared_memory_and_the_launchers_files(tmp_path):
    (tmp_path / segments.SEGMENTS_FILE).write_text(
        "/etc/passwd\n/dev/shm/mpich_shm_x\n/tmp/other\n/dev/shm/../etc/passwd\n/tmp/hydra_hwloc_xmlfile_/../x\n"
    )
    assert segments.recorded_segments(str(tmp_path)) == {"/dev/shm/mpich_shm_x"}
