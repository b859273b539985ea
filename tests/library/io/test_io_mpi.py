"""mailrail.io under real mpiexec jobs, on a real MailRail: every line and row read exactly once (checksums against
one process's read), the datasets the writers make read back whole; bad input ends the job naming the file and
byte offset, through the library's failure path."""

from __future__ import annotations

import json
import random

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq
import pytest

from helpers import mpirun, run_program
from io_support import checksum, rank_table, reference_lines, row_text, text_corpus

pytestmark = pytest.mark.mpi


def totals(result: dict) -> tuple[int, int]:
    """All ranks' count and checksum together (a checksum is a sum: the ranks' add up)."""
    ranks = result["ranks"]
    return sum(r["rows"] for r in ranks), sum(r["checksum"] for r in ranks) % 2**64


@pytest.mark.smoke
def test_read_lines_reads_every_line_once_across_ranks(tmp_path):
    paths = text_corpus(tmp_path / "data")
    result = mpirun(3, "io_read.py", "--reader", "lines", "--batch-bytes", "8192", str(tmp_path / "data"))
    assert totals(result) == checksum(reference_lines(paths))
    assert all(r["rows"] > 0 for r in result["ranks"])  # the large file spread over every rank


@pytest.mark.smoke
def test_read_csv_and_read_json_lines_read_every_row_once_with_one_schema(tmp_path):
    rng = random.Random(5)
    rows = [{"id": i, "name": rng.choice(["a", "b,c", "dé"]), "x": rng.random()} for i in range(4000)]
    (tmp_path / "csv").mkdir()
    (tmp_path / "js").mkdir()
    for part in range(4):
        mine = rows[part * 1000 : (part + 1) * 1000]
        pacsv.write_csv(pa.Table.from_pylist(mine), tmp_path / "csv" / f"p{part}.csv")
        (tmp_path / "js" / f"p{part}.jsonl").write_text("".join(json.dumps(row) + "\n" for row in mine))
    expected = checksum(row_text(row) for row in rows)
    for reader, ranks in (("csv", 2), ("json", 3)):
        folder = "csv" if reader == "csv" else "js"
        result = mpirun(ranks, "io_read.py", "--reader", reader, "--batch-bytes", "4096", str(tmp_path / folder))
        assert totals(result) == expected, reader
        assert len({r["schema"] for r in result["ranks"]}) == 1


@pytest.mark.smoke
def test_read_parquet_deals_row_groups_and_reads_every_row_once(tmp_path):
    table = pa.table({"n": list(range(20_000)), "s": [str(i) * (i % 4) for i in range(20_000)]})
    pq.write_table(table.slice(0, 12_000), tmp_path / "a.parquet", row_group_size=1000)
    pq.write_table(table.slice(12_000), tmp_path / "b.parquet", row_group_size=1000)
    result = mpirun(3, "io_read.py", "--reader", "parquet", "--batch-bytes", "4096", str(tmp_path))
    assert totals(result) == checksum(row_text(row) for row in table.to_pylist())
    assert sorted(r["share"] for r in result["ranks"]) == [6, 7, 7]  # 20 row groups of about one size


@pytest.mark.smoke
def test_the_writers_datasets_read_back_whole(tmp_path):
    result = mpirun(3, "io_write.py", str(tmp_path / "pq"), str(tmp_path / "csv"))
    expected = checksum(row_text(row) for rank in range(3) for row in rank_table(rank).to_pylist())
    for name, suffix in (("parquet", "parquet"), ("csv", "csv")):
        assert result["written"][name] == {
            "parts": [
                str(tmp_path / ("pq" if name == "parquet" else "csv") / f"part-{r:05d}.{suffix}") for r in (1, 2)
            ],
            "total_rows": 150,
        }
        counts = result["back"][name]
        assert (sum(c for c, _ in counts), sum(s for _, s in counts) % 2**64) == expected
    assert pq.read_table(tmp_path / "pq").num_rows == 150


def test_invalid_utf8_ends_the_job_naming_the_file_and_the_byte(tmp_path):
    good = b"".join(b"line %d\n" % i for i in range(20_000))
    (tmp_path / "bad.txt").write_bytes(good + b"\xff\xfe\n" + good)
    completed = run_program(3, "io_read.py", "--reader", "lines", "--batch-bytes", "4096", str(tmp_path / "bad.txt"))
    assert completed.returncode != 0
    output = completed.stdout + completed.stderr
    assert f"{tmp_path / 'bad.txt'}: the line at byte {len(good):,} is not UTF-8" in output, output[-3000:]
