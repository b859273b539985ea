"""read_parquet in mailrail.testing's World: row groups dealt out among 1, 2, 3 and 5 ranks, every row once,
balanced by bytes; a Hive-partitioned directory's partition columns; missing columns and other schemas refused
naming the file."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from io_support import row_text
from mailrail.io import InputError, read_parquet
from mailrail.testing import World


def table(rows: int, offset: int = 0) -> pa.Table:
    return pa.table(
        {
            "x": pa.array(range(offset, offset + rows), pa.int64()),
            "word": [f"w{i}" * (i % 5) for i in range(rows)],
            "k": [i % 3 for i in range(rows)],
        }
    )


def gather_rows(size, *args, seed=0, **kwargs):
    def program(rail):
        batches = read_parquet(rail, *args, **kwargs)
        rows = []
        for batch in batches:
            assert batch.schema == batches.schema and batch.num_rows
            rows += [row_text(row) for row in batch.to_pylist()]
        return rows, batches

    return World(size=size, seed=seed).run(program)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_row_groups_are_dealt_out_and_every_row_reaches_one_rank(tmp_path, size):
    (tmp_path / "files").mkdir()
    whole = []
    for index, rows in enumerate([1000, 0, 333, 2500]):
        part = table(rows, index * 10_000)
        whole.append(part)
        pq.write_table(part, tmp_path / "files" / f"f{index}.parquet", row_group_size=100)
    results = gather_rows(size, str(tmp_path / "files"), batch_bytes=2048, seed=size)
    expected = pa.concat_tables(part for part in whole if part.num_rows)  # (an empty table's types are null)
    assert Counter(row for rows, _ in results for row in rows) == Counter(row_text(r) for r in expected.to_pylist())
    written = sum(pq.ParquetFile(path).num_row_groups for path in (tmp_path / "files").iterdir())
    assert sum(len(batches.share) for _, batches in results) == written >= 10 + 4 + 25

    def weight(path, part):
        group = pq.ParquetFile(path).metadata.row_group(int(part.removeprefix("row group ")))
        return sum(group.column(i).total_uncompressed_size for i in range(group.num_columns))

    loads = [sum(weight(path, part) for path, part in batches.share) for _, batches in results]
    largest = max(weight(path, part) for _, batches in results for path, part in batches.share)
    assert max(loads) <= sum(loads) / size + largest  # even, by bytes, within one row group
    assert all(batches.schema == expected.schema for _, batches in results)


def test_a_hive_partitioned_directory_has_its_partition_columns(tmp_path):
    data = table(3000)
    ds.write_dataset(
        data, tmp_path / "ds", format="parquet", partitioning=["k"], partitioning_flavor="hive", max_rows_per_group=128
    )
    results = gather_rows(3, str(tmp_path / "ds"))
    expected = ds.dataset(tmp_path / "ds", format="parquet", partitioning="hive").to_table()
    assert results[0][1].schema == expected.schema and "k" in expected.schema.names
    assert Counter(row for rows, _ in results for row in rows) == Counter(row_text(r) for r in data.to_pylist())
    picked = gather_rows(2, str(tmp_path / "ds"), columns=["k", "x"])
    assert picked[0][1].schema.names == ["k", "x"]
    assert Counter(row for rows, _ in picked for row in rows) == Counter(
        row_text({"k": r["k"], "x": r["x"]}) for r in data.to_pylist()
    )
    without = gather_rows(2, str(tmp_path / "ds"), partitioning=None)
    assert without[0][1].schema.names == ["x", "word"]


def test_a_column_that_does_not_exist_is_refused_on_every_rank_naming_it(tmp_path):
    pq.write_table(table(10), tmp_path / "a.parquet")

    def program(rail):
        with pytest.raises(InputError) as raised:
            read_parquet(rail, str(tmp_path / "a.parquet"), columns=["x", "nope"])
        return str(raised.value)

    messages = World(size=3).run(program)
    assert len(set(messages)) == 1 and "no column 'nope'" in messages[0] and "a.parquet" in messages[0]


def test_a_file_with_another_schema_or_not_parquet_is_refused_naming_it(tmp_path):
    pq.write_table(table(10), tmp_path / "a.parquet")
    pq.write_table(
        table(10).cast(pa.schema([("x", pa.float64()), ("word", pa.string()), ("k", pa.int64())])),
        tmp_path / "b.parquet",
    )
    with pytest.raises(InputError, match=r"b\.parquet: its schema differs from .*a\.parquet's: column 'x' is double"):
        gather_rows(3, str(tmp_path))
    (tmp_path / "b.parquet").write_bytes(b"not parquet")
    with pytest.raises(InputError, match=r"b\.parquet: cannot read it as Parquet"):
        gather_rows(3, str(tmp_path))


def test_uris_name_files_and_datasets_on_pyarrow_s_file_systems(tmp_path):
    from mailrail.io import write_parquet

    uri = f"file://{tmp_path}/out"
    World(size=2).run(lambda rail: write_parquet(table(100, rail.rank * 100), uri, rail=rail))
    results = gather_rows(3, f"file://{tmp_path}/out/*.parquet")
    expected = pa.concat_tables([table(100, 0), table(100, 100)])
    assert Counter(row for rows, _ in results for row in rows) == Counter(row_text(r) for r in expected.to_pylist())
