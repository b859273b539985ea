"""``write_parquet`` and ``write_csv``: every rank writes its part of one dataset, a directory of part files.

A write is collective.  It completes the rail's pending work (``rail.barrier()``), so a container's
``local()`` table holds every operation issued before the call; then rank 0 checks the directory (an
existing non-empty one is refused unless *overwrite*, which empties it) and creates it, and one gather
shares that verdict and every rank's schema: the ranks' schemas must be one, so the parts read back as one
table.  Each rank then writes ``part-<rank>.<suffix>`` (five digits), streaming its batches; a rank with no
row writes no part, except that when no rank has any, rank 0 writes an empty part, so that the dataset
still has its columns.  A last gather returns, on every rank, what was written (:class:`Written`): when
the write returns on any rank, every part is complete.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import InputError, MailRailError
from .collective import gather, start
from .files import sources_of

__all__ = ["write_parquet", "write_csv", "Written", "DEFAULT_ROW_GROUP_BYTES"]

#: The default size of a row group: the unit read_parquet deals out, and what a writer holds before writing.
DEFAULT_ROW_GROUP_BYTES = 64 << 20


@dataclass(frozen=True)
class Written:
    """What a collective write wrote (the same on every rank, but :attr:`part` and :attr:`rows`)."""

    #: The dataset: the directory of the parts.
    path: str
    #: Every part file written, in rank order.
    parts: list[str]
    #: This rank's part (None: it had no row to write).
    part: str | None
    #: Rows this rank wrote.
    rows: int
    #: Rows all ranks wrote.
    total_rows: int


def _rail_of(source: Any, rail: Any, where: str) -> Any:
    carried = getattr(source, "rail", None)
    if rail is None:
        if carried is None:
            raise TypeError(
                f"{where}: pass rail= (the rail whose ranks write together): a {type(source).__name__} carries none"
            )
        return carried
    if carried is not None and carried is not rail:
        raise ValueError(f"{where}: rail= is not the rail of the container written")
    return rail


def _stream(source: Any, where: str) -> tuple[pa.Schema | None, Iterator[pa.RecordBatch]]:
    """*source*'s schema (None: unknown, no batch) and its record batches."""
    if callable(getattr(source, "local", None)):
        source = source.local()
        if not isinstance(source, pa.Table):
            raise TypeError(f"{where}: local() returned a {type(source).__name__}, not a pyarrow.Table")
    if isinstance(source, pa.Table):
        return source.schema, iter(source.to_batches())
    if isinstance(source, pa.RecordBatch):
        return source.schema, iter([source])
    if isinstance(source, pa.RecordBatchReader):
        return source.schema, iter(source)
    if hasattr(source, "__arrow_c_stream__"):  # polars and pandas DataFrames, any Arrow stream
        reader = pa.RecordBatchReader.from_stream(source)
        return reader.schema, iter(reader)
    if isinstance(source, (str, bytes)) or not isinstance(source, Iterable):
        raise TypeError(
            f"{where}: source {type(source).__name__}: a pyarrow Table or RecordBatch, an iterable of them, an Arrow "
            f"stream (a polars or pandas DataFrame), or an object whose local() returns a pyarrow Table"
        )
    items = iter(source)
    first = next(items, None)
    if first is None:
        return None, iter(())
    schema = _item_schema(first, 0, where)

    def batches() -> Iterator[pa.RecordBatch]:
        for number, item in enumerate([first], 0):
            yield from _item_batches(item, number, schema, where)
        for number, item in enumerate(items, 1):
            yield from _item_batches(item, number, schema, where)

    return schema, batches()


def _item_schema(item: Any, number: int, where: str) -> pa.Schema:
    if not isinstance(item, (pa.Table, pa.RecordBatch)):
        raise TypeError(f"{where}: item {number} of the source is a {type(item).__name__}, not a Table or RecordBatch")
    return item.schema


def _item_batches(item: Any, number: int, schema: pa.Schema, where: str) -> Iterator[pa.RecordBatch]:
    if not _item_schema(item, number, where).equals(schema):
        raise ValueError(f"{where}: item {number} of the source has another schema than item 0: {item.schema}")
    yield from item.to_batches() if isinstance(item, pa.Table) else [item]


def _directory(path: Any, filesystem: Any, where: str) -> tuple[Any, str]:
    source = sources_of(path, filesystem, where=where)
    if len(source) != 1:
        raise TypeError(f"{where}: path {path!r}: one directory")
    return source[0].filesystem, source[0].path.rstrip("/") or "/"


def _prepare(filesystem: Any, directory: str, overwrite: bool, where: str) -> None:
    """Rank 0: refuse a file or a non-empty directory at *directory* (unless *overwrite*: empty it), create it."""
    info = filesystem.get_file_info(directory)
    if info.type == pafs.FileType.File:
        raise FileExistsError(f"{where}: {directory} is a file: a dataset is a directory of part files")
    if info.type == pafs.FileType.Directory and filesystem.get_file_info(pafs.FileSelector(directory)):
        if not overwrite:
            raise FileExistsError(
                f"{where}: {directory} exists and is not empty: pass overwrite=True to replace what it holds"
            )
        filesystem.delete_dir_contents(directory)
    filesystem.create_dir(directory, recursive=True)


def _write(
    source: Any,
    path: Any,
    *,
    rail: Any,
    overwrite: bool,
    filesystem: Any,
    schema: pa.Schema | None,
    suffix: str,
    where: str,
    write: Callable[[Any, pa.Schema, Iterator[pa.RecordBatch]], int],
) -> Written:
    if not isinstance(overwrite, bool):
        raise TypeError(f"{where}: overwrite={overwrite!r}: True or False")
    if schema is not None and not isinstance(schema, pa.Schema):
        raise TypeError(f"{where}: schema={schema!r}: a pyarrow.Schema, or None")
    rail = _rail_of(source, rail, where)
    fs, directory = _directory(path, filesystem, where)
    start(rail, where)
    own_schema, batches = _stream(source, where)
    if schema is not None and own_schema is not None and not own_schema.equals(schema):
        raise ValueError(f"{where}: the source's schema is not schema=: {own_schema}")
    peeked = next((batch for batch in batches if batch.num_rows), None)
    has_rows = peeked is not None

    def agree() -> tuple[pa.Schema | None, bool]:
        if rail.rank == 0:
            _prepare(fs, directory, overwrite, where)
        return own_schema, has_rows

    everyone = gather(rail, agree, shared=(InputError, OSError))
    # The ranks that write rows agree on one schema (an empty table's types, often null, do not count).
    writing = [(rank, s) for rank, (s, rows) in enumerate(everyone) if rows and s is not None]
    if len({s.to_string(show_schema_metadata=False) for _, s in writing}) > 1:
        spread = "; ".join(f"rank {rank}: {s}".replace("\n", ", ") for rank, s in writing)
        raise ValueError(f"{where}: the ranks' tables have different schemas (one dataset has one): {spread}")
    common = schema or next((s for _, s in writing), None) or next((s for s, _ in everyone if s is not None), None)
    if common is None:
        raise ValueError(f"{where}: no rank has a table to write, so nothing gives the columns: pass schema=")
    writes = has_rows or (rail.rank == 0 and not any(rows for _, rows in everyone))
    part = f"{directory}/part-{rail.rank:05d}.{suffix}" if writes else None
    rows = 0
    if part is not None:
        fs.create_dir(directory, recursive=True)  # (a node that does not share rank 0's file system)
        stream = _chain(peeked, batches)
        try:
            with fs.open_output_stream(part) as sink:
                rows = write(sink, own_schema or common, stream)
        except (OSError, pa.ArrowException) as error:
            raise MailRailError(f"{where}: writing {part}: {error}") from error
    written = gather(rail, lambda: (part, rows))
    return Written(directory, [p for p, _ in written if p is not None], part, rows, sum(count for _, count in written))


def _chain(first: pa.RecordBatch | None, rest: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    if first is not None:
        yield first
    yield from rest


def write_parquet(
    source: Any,
    path: str | os.PathLike[str],
    *,
    rail: Any = None,
    overwrite: bool = False,
    schema: pa.Schema | None = None,
    compression: str = "snappy",
    row_group_bytes: int = DEFAULT_ROW_GROUP_BYTES,
    filesystem: Any = None,
) -> Written:
    """Collective: every rank writes its *source* as its part of the Parquet dataset *path* (a directory).

    *source*: a ``pyarrow.Table`` or ``RecordBatch``, an iterable of them (streamed: a rank holds one row
    group at a time), an Arrow stream (a polars or pandas DataFrame), or an object whose ``local()`` returns
    a ``pyarrow.Table`` (a container: its rail is then the write's).  *rail*: the rail whose ranks write
    together (from the source when it carries one).  *path*: a local directory or a ``pyarrow.fs`` URI; an
    existing non-empty one is refused (``FileExistsError``) unless *overwrite* (its contents are deleted).
    *schema*: the dataset's schema when no rank may have a table to write.  Row groups of about
    *row_group_bytes* (Arrow bytes, before encoding: the unit :func:`read_parquet` deals out).

    Read it back with ``pyarrow.parquet.read_table(path)``, ``pandas.read_parquet(path)``,
    ``polars.read_parquet(path + "/*.parquet")``, ``dask.dataframe.read_parquet(path)``, or read_parquet.
    """
    where = f"write_parquet(..., {os.fspath(path)!r})"
    if isinstance(row_group_bytes, bool) or not isinstance(row_group_bytes, int) or row_group_bytes < 1:
        raise ValueError(f"{where}: row_group_bytes={row_group_bytes!r}: a positive integer")

    def write(sink: Any, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> int:
        rows = 0
        pending: list[pa.RecordBatch] = []
        held = 0
        with pq.ParquetWriter(sink, schema, compression=compression) as writer:
            for batch in batches:
                pending.append(batch)
                held += batch.nbytes
                rows += batch.num_rows
                if held >= row_group_bytes:
                    writer.write_table(pa.Table.from_batches(pending, schema), row_group_size=2**62)
                    pending, held = [], 0
            if pending:
                writer.write_table(pa.Table.from_batches(pending, schema), row_group_size=2**62)
        return rows

    return _write(
        source,
        path,
        rail=rail,
        overwrite=overwrite,
        filesystem=filesystem,
        schema=schema,
        suffix="parquet",
        where=where,
        write=write,
    )


def write_csv(
    source: Any,
    path: str | os.PathLike[str],
    *,
    rail: Any = None,
    overwrite: bool = False,
    schema: pa.Schema | None = None,
    write_options: pacsv.WriteOptions | None = None,
    filesystem: Any = None,
) -> Written:
    """Collective: every rank writes its *source* as its part of the CSV dataset *path* (a directory).

    Each part has a header line (unless *write_options* says otherwise: ``pyarrow.csv.WriteOptions``).
    *source*, *rail*, *overwrite*, *schema* and *filesystem*: as :func:`write_parquet`'s.  Read it back
    with :func:`read_csv`, ``pyarrow.dataset.dataset(path, format="csv")``,
    ``polars.read_csv(path + "/*.csv")``, ``dask.dataframe.read_csv(path + "/*.csv")``, or pandas, one part
    at a time (``pandas.read_csv`` reads a file, not a directory).
    """
    where = f"write_csv(..., {os.fspath(path)!r})"
    if write_options is not None and not isinstance(write_options, pacsv.WriteOptions):
        raise TypeError(f"{where}: write_options={write_options!r}: a pyarrow.csv.WriteOptions, or None")

    def write(sink: Any, schema: pa.Schema, batches: Iterator[pa.RecordBatch]) -> int:
        rows = 0
        with pacsv.CSVWriter(sink, schema, write_options=write_options or pacsv.WriteOptions()) as writer:
            for batch in batches:
                writer.write_batch(batch)
                rows += batch.num_rows
        return rows

    return _write(
        source,
        path,
        rail=rail,
        overwrite=overwrite,
        filesystem=filesystem,
        schema=schema,
        suffix="csv",
        where=where,
        write=write,
    )
