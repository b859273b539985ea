"""read_csv and read_json_lines in mailrail.testing's World: every row reaches exactly one rank, at 1, 2, 3 and 5
ranks, with one schema on every rank, compared with pyarrow reading the same files in one process; what does
not parse is an error naming the file and the row's byte offset, or, when asked, skipped and counted."""

from __future__ import annotations

import gzip
import json
import random
import warnings
from collections import Counter

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pytest

from io_support import row_text
from mailrail.errors import SkippedRowsWarning
from mailrail.io import InputError, read_csv, read_json_lines
from mailrail.testing import World


def csv_corpus(root, seed=3, files=9):
    """CSV files with a header each (one gzip-compressed, some CRLF, one empty, one with a header only);
    their rows as one process reads them."""
    rng = random.Random(seed)
    root.mkdir()
    rows = []
    for index in range(files):
        end = "\r\n" if index % 3 == 0 else "\n"
        count = 0 if index in (2, 5) else rng.randint(50, 900)
        mine = [
            {"id": index * 10_000 + j, "word": rng.choice(["a", "bé", "c,d", 'say "hi"', ""]), "value": rng.random()}
            for j in range(count)
        ]
        rows += mine
        text = "id,word,value" + end
        text += "".join(f'{r["id"]},"{r["word"].replace(chr(34), chr(34) * 2)}",{r["value"]!r}{end}' for r in mine)
        if index == 2:
            text = ""  # an empty file
        data = text.encode()
        if index == 4:
            (root / f"part{index}.csv.gz").write_bytes(gzip.compress(data))
        else:
            (root / f"part{index}.csv").write_bytes(data)
    return rows


def gather_rows(size, reader, *args, seed=0, **kwargs):
    """Each rank's rows (as text) and its Batches; every batch checked against the read's schema."""

    def program(rail):
        batches = reader(rail, *args, **kwargs)
        rows = []
        for batch in batches:
            assert batch.schema == batches.schema and batch.num_rows
            rows += [row_text(row) for row in batch.to_pylist()]
        return rows, batches

    return World(size=size, seed=seed).run(program)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_read_csv_reads_every_row_exactly_once_with_one_inferred_schema(tmp_path, size):
    rows = csv_corpus(tmp_path / "csv")
    results = gather_rows(size, read_csv, str(tmp_path / "csv"), batch_bytes=4096, seed=size)
    got = [row for rows_, _ in results for row in rows_]
    assert Counter(got) == Counter(row_text(row) for row in rows)
    schemas = {str(batches.schema) for _, batches in results}
    assert schemas == {str(pa.schema([("id", pa.int64()), ("word", pa.string()), ("value", pa.float64())]))}
    tables = [pacsv.read_csv(path) for path in sorted((tmp_path / "csv").iterdir()) if path.stat().st_size]
    single = pa.concat_tables(table for table in tables if table.num_rows)  # pyarrow in one process, file by file
    assert Counter(got) == Counter(row_text(row) for row in single.to_pylist())
    if size > 1:
        assert all(any(part.startswith("bytes") for _, part in batches.share) for _, batches in results)


def test_read_csv_takes_column_types_names_without_a_header_and_pyarrow_s_options(tmp_path):
    (tmp_path / "a.csv").write_text("1;x;2024-01-02\n2;;2024-03-04\n")
    (tmp_path / "b.csv").write_text("3;NA;2025-05-06\n")
    results = gather_rows(
        2,
        read_csv,
        str(tmp_path),
        column_names=["n", "s", "day"],
        column_types={"n": pa.int32(), "day": pa.date32()},
        parse_options=pacsv.ParseOptions(delimiter=";"),
        convert_options=pacsv.ConvertOptions(null_values=["NA"], strings_can_be_null=True),
    )
    schema = results[0][1].schema
    assert schema == pa.schema([("n", pa.int32()), ("s", pa.string()), ("day", pa.date32())])
    assert sorted(row for rows, _ in results for row in rows) == [
        row_text({"day": "2024-01-02", "n": 1, "s": "x"}),
        row_text({"day": "2024-03-04", "n": 2, "s": ""}),  # null_values: NA only
        row_text({"day": "2025-05-06", "n": 3, "s": None}),
    ]


def test_a_value_that_does_not_fit_the_inferred_type_names_the_file_the_byte_and_column_types(tmp_path):
    csv_corpus(tmp_path / "csv")
    bad = tmp_path / "csv" / "zlast.csv"
    bad.write_text("id,word,value\n1,a,0.5\n2,b,zero point five\n")
    with pytest.raises(InputError) as raised:
        gather_rows(3, read_csv, str(tmp_path / "csv"))
    message = str(raised.value)
    assert message.startswith(f"{bad}: the row at byte 22 ('2,b,zero point five'): column 'value': ")
    assert "column_types=" in message and "part0.csv" in message and raised.value.where == "byte 22"
    # named in column_types, the column reads as asked
    results = gather_rows(3, read_csv, str(tmp_path / "csv"), column_types={"value": pa.string()})
    assert sum(len(rows) for rows, _ in results) > 1000


def test_a_row_with_the_wrong_number_of_fields_is_an_error_or_skipped_and_counted_when_asked(tmp_path):
    rows = csv_corpus(tmp_path / "csv")
    (tmp_path / "csv" / "zz.csv").write_text("id,word,value\n1,a,0.5\n2,b,0.5,extra\n3,c\n4,d,1.5\n")
    with pytest.raises(InputError, match=r"zz\.csv: the row at byte 22 \('2,b,0\.5,extra'\): .*Expected 3 columns"):
        gather_rows(2, read_csv, str(tmp_path / "csv"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        results = gather_rows(2, read_csv, str(tmp_path / "csv"), on_bad_lines="skip")
    assert sum(batches.skipped_rows for _, batches in results) == 2
    assert sum(len(rows_) for rows_, _ in results) == len(rows) + 2
    skipped = [str(w.message) for w in caught if w.category is SkippedRowsWarning]
    assert len(skipped) == 1 and "skipped 2 bad row(s) on this rank" in skipped[0]
    assert f"the first at {tmp_path / 'csv' / 'zz.csv'}, byte 22 ('2,b,0.5,extra')" in skipped[0]


def test_every_file_s_header_must_be_the_first_file_s(tmp_path):
    csv_corpus(tmp_path / "csv")
    (tmp_path / "csv" / "zz.csv").write_text("id,value,word\n1,0.5,a\n")
    with pytest.raises(InputError, match=r"zz\.csv: its header \['id', 'value', 'word'\] is not the first file's"):
        gather_rows(3, read_csv, str(tmp_path / "csv"))


def test_column_types_that_name_no_column_are_refused(tmp_path):
    csv_corpus(tmp_path / "csv")
    with pytest.raises(InputError, match="no column 'vlaue'"):
        gather_rows(2, read_csv, str(tmp_path / "csv"), column_types={"vlaue": pa.float64()})


def test_quoted_newlines_are_read_whole_files_with_newlines_in_values(tmp_path):
    for index in range(4):
        rows = "".join(f'{index}{j},"line one\nline two {j}"\n' for j in range(200))
        (tmp_path / f"q{index}.csv").write_text("n,text\n" + rows)
    options = pacsv.ParseOptions(newlines_in_values=True)
    results = gather_rows(3, read_csv, str(tmp_path), parse_options=options, batch_bytes=2048)
    got = [json.loads(row) for rows, _ in results for row in rows]
    assert len(got) == 800 and all(row["text"].startswith("line one\nline two") for row in got)
    assert all(part == "whole" for _, batches in results for _, part in batches.share)


@pytest.mark.parametrize("size", [1, 2, 3, 5])
def test_read_json_lines_reads_every_row_exactly_once_with_one_schema(tmp_path, size):
    rng = random.Random(size)
    rows = []
    (tmp_path / "js").mkdir()
    for index in range(6):
        mine = [
            {"id": index * 1000 + j, "tags": ["x"] * rng.randint(0, 3), "v": {"a": rng.random()}}
            for j in range(index * 97)
        ]
        rows += mine
        text = "".join(json.dumps(r) + ("\r\n" if j % 5 else "\n\n") for j, r in enumerate(mine))
        name = tmp_path / "js" / f"f{index}.jsonl"
        if index == 3:
            name.with_suffix(".jsonl.gz").write_bytes(gzip.compress(text.encode()))
        else:
            name.write_text(text)
    results = gather_rows(size, read_json_lines, str(tmp_path / "js"), batch_bytes=4096)
    assert Counter(row for rows_, _ in results for row in rows_) == Counter(row_text(r) for r in rows)
    single = pajson.read_json(str(tmp_path / "js" / "f1.jsonl")).schema
    assert all(batches.schema == single for _, batches in results)


def test_a_json_row_outside_the_schema_names_the_file_the_byte_and_the_field(tmp_path):
    (tmp_path / "a.jsonl").write_text("".join(json.dumps({"id": i}) + "\n" for i in range(100)))
    (tmp_path / "b.jsonl").write_text('{"id": 1}\n{"id": 2, "extra": true}\n')
    with pytest.raises(InputError) as raised:
        gather_rows(2, read_json_lines, str(tmp_path))
    message = str(raised.value)
    assert message.startswith(f"{tmp_path / 'b.jsonl'}: the row at byte 10 (") and "unexpected field 'extra'" in message
    assert "schema=" in message
    schema = pa.schema([("id", pa.int64()), ("extra", pa.bool_())])
    results = gather_rows(2, read_json_lines, str(tmp_path), schema=schema)
    assert sum(len(rows) for rows, _ in results) == 102
    (tmp_path / "b.jsonl").write_text('{"id": 1}\n{"id": 2\n')
    with pytest.raises(InputError, match=r"b\.jsonl: the row at byte 10 .*JSON parse error"):
        gather_rows(2, read_json_lines, str(tmp_path), schema=schema)
