"""write_parquet and write_csv in mailrail.testing's World: each rank writes its part of one dataset, which
pyarrow, pandas, polars and Dask read back as one table; a rank with nothing writes nothing; an existing
dataset is refused unless overwritten; the ranks' schemas must agree."""

from __future__ import annotations

import os
from collections import Counter

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from io_support import rank_table, row_text
from mailrail.io import read_csv, read_parquet, write_csv, write_parquet
from mailrail.testing import World


class Local:
    """A stand-in for a container: its rail, and local() returning this rank's pyarrow table."""

    def __init__(self, rail, table):
        self.rail = rail
        self.table = table

    def local(self):
        return self.table


def every_row(size: int) -> Counter:
    return Counter(row_text(row) for rank in range(size) for row in rank_table(rank).to_pylist())


@pytest.mark.parametrize("write, suffix", [(write_parquet, "parquet"), (write_csv, "csv")])
@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_every_rank_writes_its_part_and_the_dataset_reads_back_as_one_table(tmp_path, write, suffix, size):
    out = tmp_path / "out"
    written = World(size=size, seed=size).run(lambda rail: write(Local(rail, rank_table(rail.rank)), out))
    # Rank 0 has no row, so no part; but when no rank has any, rank 0 writes an empty part (the columns).
    parts = [str(out / f"part-{rank:05d}.{suffix}") for rank in (range(1, size) if size > 1 else [0])]
    assert all(w.parts == parts and w.total_rows == 50 * sum(range(size)) for w in written)
    assert [w.rows for w in written] == [50 * rank for rank in range(size)]
    assert [w.part for w in written] == ([None] + parts if size > 1 else parts)
    assert sorted(os.listdir(out)) == [os.path.basename(p) for p in parts]
    back = ds.dataset(out, format=suffix).to_table()
    assert Counter(row_text(row) for row in back.to_pylist()) == every_row(size)
    reader = read_parquet if suffix == "parquet" else read_csv
    again = World(size=3).run(lambda rail: [row_text(r) for b in reader(rail, str(out)) for r in b.to_pylist()])
    assert Counter(row for rows in again for row in rows) == every_row(size)


def test_pandas_polars_and_dask_read_the_datasets_back(tmp_path):
    pandas = pytest.importorskip("pandas")
    World(size=4).run(lambda rail: write_parquet(Local(rail, rank_table(rail.rank)), tmp_path / "pq"))
    World(size=4).run(lambda rail: write_csv(Local(rail, rank_table(rail.rank)), tmp_path / "csv"))
    expected = every_row(4)

    def rows_of(frame) -> Counter:
        return Counter(row_text(row) for row in frame.to_dict("records"))

    assert rows_of(pandas.read_parquet(tmp_path / "pq")) == expected
    parts = sorted((tmp_path / "csv").iterdir())
    assert rows_of(pandas.concat(pandas.read_csv(part) for part in parts)) == expected
    polars = pytest.importorskip("polars")
    assert Counter(row_text(r) for r in polars.read_parquet(f"{tmp_path}/pq/*.parquet").to_dicts()) == expected
    assert Counter(row_text(r) for r in polars.read_csv(f"{tmp_path}/csv/*.csv").to_dicts()) == expected
    dask = pytest.importorskip("dask.dataframe")
    assert rows_of(dask.read_parquet(str(tmp_path / "pq")).compute()) == expected
    assert rows_of(dask.read_csv(f"{tmp_path}/csv/*.csv").compute()) == expected


def test_sources_tables_batches_iterables_and_dataframes_stream_into_row_groups(tmp_path):
    pandas = pytest.importorskip("pandas")

    def program(rail):
        table = rank_table(rail.rank + 1)
        sources = {
            "table": table,
            "batch": table.to_batches()[0],
            "iterable": (table.slice(i, 10) for i in range(0, table.num_rows, 10)),
            "pandas": table.to_pandas(),
        }
        done = {}
        for name, source in sources.items():
            done[name] = write_parquet(source, tmp_path / name, rail=rail, row_group_bytes=512).total_rows
        return done

    results = World(size=2).run(program)
    assert results[0] == {"table": 150, "batch": 150, "iterable": 150, "pandas": 150}
    streamed = pq.ParquetFile(tmp_path / "iterable" / "part-00000.parquet")
    assert streamed.num_row_groups > 1  # held one row group at a time, not the whole table
    assert len(pandas.read_parquet(tmp_path / "pandas")) == 150


def test_an_existing_dataset_is_refused_unless_overwritten(tmp_path):
    out = tmp_path / "out"
    World(size=2).run(lambda rail: write_parquet(Local(rail, rank_table(rail.rank + 1)), out))

    def again(rail, **kwargs):
        try:
            return write_parquet(Local(rail, rank_table(rail.rank)), out, **kwargs).total_rows
        except FileExistsError as error:
            return str(error)

    refused = World(size=2).run(again)
    assert len(set(refused)) == 1 and f"{out} exists and is not empty: pass overwrite=True" in refused[0]
    assert World(size=2).run(again, overwrite=True) == [50, 50]
    assert sorted(os.listdir(out)) == ["part-00001.parquet"]  # the old parts are gone
    (tmp_path / "file").write_text("x")
    with pytest.raises(FileExistsError, match="is a file"):
        World(size=1).run(lambda rail: write_csv(rank_table(1), tmp_path / "file", rail=rail))


def test_ranks_must_agree_on_the_schema_and_nothing_at_all_needs_schema(tmp_path):
    def program(rail):
        table = rank_table(1)
        if rail.rank == 1:
            table = table.cast(pa.schema([("id", pa.int32()), ("word", pa.string()), ("value", pa.float64())]))
        return write_parquet(table, tmp_path / "mixed", rail=rail)

    with pytest.raises(ValueError, match="different schemas .*rank 0: id: int64.*rank 1: id: int32"):
        World(size=2).run(program)
    empty = pa.table({"id": pa.array([], pa.int64())})
    with pytest.raises(ValueError, match="pass schema="):
        World(size=2).run(lambda rail: write_parquet([], tmp_path / "none", rail=rail))
    written = World(size=2).run(lambda rail: write_parquet([], tmp_path / "none", rail=rail, schema=empty.schema))
    assert written[0].parts == [str(tmp_path / "none" / "part-00000.parquet")]
    assert pq.read_table(tmp_path / "none").schema == empty.schema


def test_bad_sources_and_a_missing_rail_are_refused(tmp_path):
    with pytest.raises(TypeError, match="pass rail="):
        write_parquet(rank_table(1), tmp_path / "x")

    def program(rail):
        errors = []
        for source in ("text", 3, [rank_table(1), "x"]):
            with pytest.raises(TypeError) as raised:
                write_csv(source, tmp_path / f"bad{len(errors)}", rail=rail)
            errors.append(str(raised.value))
        return errors

    errors = World(size=1).run(program)[0]
    assert "a pyarrow Table or RecordBatch" in errors[0] and "item 1 of the source is a str" in errors[2]


def test_csv_write_options_pass_through(tmp_path):
    World(size=2).run(
        lambda rail: write_csv(
            rank_table(rail.rank + 1), tmp_path / "tsv", rail=rail, write_options=pacsv.WriteOptions(delimiter="\t")
        )
    )
    assert (tmp_path / "tsv" / "part-00000.csv").read_text().startswith('"id"\t"word"\t"value"\n')
