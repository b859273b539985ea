"""mailrail bench read: its corpus, its independent line count and its peers; under mpiexec, its JSON and table."""

from __future__ import annotations

import json

import pytest

from mailrail_tools.bench.read import LONGEST_LINE, counted_lines, pyarrow_lines, wc_lines, write_corpus
from mailrail_tools.jobs.job import run_mailrail


def test_the_corpus_has_the_size_asked_for_in_files_of_whole_lines(tmp_path):
    paths = write_corpus(tmp_path, 3, 2, seed=5)
    assert sum(path.stat().st_size for path in paths) == 3 * 10**6
    for path in paths:
        text = path.read_bytes()
        lines = text.split(b"\n")
        assert text.endswith(b"\n") and lines[-1] == b""
        assert max(len(line) for line in lines) <= LONGEST_LINE and b"" in lines[:-1]  # empty lines too
        assert set(text) <= set(b"abcdefghijklmnopqrstuvwxyz \n")
    assert [p.read_bytes() for p in paths] == [p.read_bytes() for p in write_corpus(tmp_path / "again", 3, 2, seed=5)]


def test_lines_are_counted_as_read_lines_counts_them_and_the_peers_agree(tmp_path):
    files = {"plain": b"a\nbb\n\nccc\n", "no-end": b"a\r\nb", "empty": b"", "one": b"x"}
    paths = []
    for name, text in files.items():
        (tmp_path / name).write_bytes(text)
        paths.append(str(tmp_path / name))
    assert counted_lines(paths) == 4 + 2 + 0 + 1
    assert wc_lines(paths) == 4 + 1  # wc -l counts newlines only
    assert pyarrow_lines(paths, 1 << 20) == counted_lines(paths)


@pytest.mark.mpi
def test_bench_read_reports_the_three_tools_and_memory(tmp_path):
    out = tmp_path / "read.json"
    args = ["bench", "read", "--megabytes", "4", "--files", "3", "--trials", "1", "--batch-bytes", "65536"]
    completed = run_mailrail(2, [*args, "--json", str(out)], timeout=180, capture=True)
    assert completed.returncode == 0, completed.stdout + completed.stderr
    document = json.loads(out.read_text())
    assert document["ranks"] == 2 and document["files"] == 3 and document["bytes"] == 4 * 10**6
    assert document["lines_counted"] == dict.fromkeys(["read_lines", "wc -l", "pyarrow"], document["lines"])
    assert set(document["median_seconds"]) == {"read_lines", "wc -l", "pyarrow"}
    growth = document["peak_growth_bytes_per_rank"]
    assert len(growth) == 2 and document["memory_bound_bytes"] == 2 * 65536 + (24 << 20)
    assert "read_lines" in completed.stdout and "wc -l" in completed.stdout and "MB/s" in completed.stdout


@pytest.mark.mpi
def test_bench_read_reads_the_users_files_and_checks_the_count(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"one\r\ntwo\nthree")
    (tmp_path / "b.txt").write_bytes(b"")
    out = tmp_path / "read.json"
    completed = run_mailrail(
        2, ["bench", "read", str(tmp_path / "*.txt"), "--trials", "1", "--json", str(out)], timeout=180, capture=True
    )
    assert completed.returncode == 0, completed.stdout + completed.stderr
    document = json.loads(out.read_text())
    assert document["lines"] == 3 and document["lines_counted"]["read_lines"] == 3
    assert document["lines_counted"]["wc -l"] == 2  # the last line has no newline: the table says wc -l counts 2
    assert "counts 2 lines" in completed.stdout
