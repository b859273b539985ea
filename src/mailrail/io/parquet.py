"""``read_parquet``: the row groups of Parquet files dealt out among the ranks, balanced by bytes.

The plan takes two gathers.  First the paths are expanded (:mod:`mailrail.io.collective`); then each
rank reads the footers of every ``size``-th file (from its rank on), and one gather gives every rank every
row group's rows and weight (the bytes of the columns read, uncompressed) and the schema of each file whose
schema is not the first file's; the files with rows must have one schema.
:func:`~mailrail.io.plan.plan_row_groups` cuts the row groups, in file order, into one consecutive run per
rank.  A directory given alone is a dataset: its ``key=value`` directories (Hive partitioning) become
columns, as ``pyarrow.dataset`` reads them.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from ..errors import InputError
from .batches import Batches
from .collective import expand_all, gather, start
from .files import FileEntry, Paths, Source, sources_of
from .plan import plan_row_groups
from .ranges import DEFAULT_BATCH_BYTES, checked_batch_bytes, cut, describe

__all__ = ["read_parquet"]

_READ_ERRORS = (OSError, pa.ArrowException)


def _dataset() -> Any:
    # pyarrow.dataset imports pandas when it is installed (a second or so): only read_parquet loads it.
    import pyarrow.dataset as ds

    return ds


def _open(source: Source, path: str) -> Any:
    """*path* as a ``pyarrow.parquet.ParquetFile`` (its footer read) and the file under it, to close."""
    handle = source.filesystem.open_input_file(path)
    try:
        return pq.ParquetFile(handle, pre_buffer=False), handle
    except BaseException:
        handle.close()
        raise


def _partitions(
    sources: list[Source], entries: list[FileEntry], partitioning: str | None
) -> tuple[pa.Schema, list[dict[str, Any]]]:
    """The partition columns (Hive: ``key=value`` directories) of a directory given alone, and each file's
    values of them; found from the paths alone (no file opened), the same on every rank."""
    none: tuple[pa.Schema, list[dict[str, Any]]] = (pa.schema([]), [{} for _ in entries])
    if partitioning is None or len(sources) != 1:
        return none
    source = sources[0]
    if source.filesystem.get_file_info(source.path).type != pafs.FileType.Directory:
        return none
    ds = _dataset()
    options = ds.FileSystemFactoryOptions(partition_base_dir=source.path)
    options.partitioning_factory = ds.HivePartitioning.discover()
    paths = [entry.path for entry in entries]
    factory = ds.FileSystemDatasetFactory(source.filesystem, paths, ds.ParquetFileFormat(), options)
    schema = factory.inspect(fragments=0)  # the partition columns: read from the paths alone
    if not len(schema):
        return none
    scheme = ds.partitioning(schema, flavor="hive")
    base = source.path.rstrip("/")
    return schema, [ds.get_partition_keys(scheme.parse(entry.path[len(base) :])) for entry in entries]


def read_parquet(
    rail: Any,
    paths: Paths,
    *,
    columns: Sequence[str] | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    partitioning: str | None = "hive",
    filesystem: Any = None,
) -> Batches[pa.RecordBatch]:
    """Collective: this rank's share of the rows of the Parquet files *paths* names, as ``pyarrow.RecordBatch``.

    Every rank calls it with the same arguments.  The row groups of all the files are dealt out among the
    ranks, consecutive ones to a rank, balanced by their bytes (uncompressed, of the columns read), so each
    row reaches exactly one rank; a rank's load is within one row group of an even share (a file of one
    row group is read by one rank: write files with several).  Every file with rows has the schema of the
    first that has any (else :class:`~mailrail.errors.InputError` names the file); the batches have it,
    with *columns* only (each must exist: else an error naming it) and, when *paths* is one directory, its
    Hive partition columns (``year=2024/``: *partitioning* ``"hive"``; None for none).  *batch_bytes*: the
    most bytes a batch holds, about (from the row group's size); *paths* and *filesystem*: as
    :func:`read_lines`'s.
    """
    where = describe("read_parquet", paths)
    checked_batch_bytes(batch_bytes, where)
    if partitioning not in ("hive", None):
        raise ValueError(f"{where}: partitioning={partitioning!r}: 'hive' or None")
    if columns is not None and (isinstance(columns, str) or not all(isinstance(c, str) for c in columns)):
        raise TypeError(f"{where}: columns={columns!r}: a list of column names")
    sources = sources_of(paths, filesystem, where=where)
    start(rail, where)
    entries = expand_all(rail, sources)
    partition_schema, partitions = _partitions(sources, entries, partitioning)

    def footer(index: int) -> tuple[Any, pa.Schema]:
        entry = entries[index]
        try:
            parquet, handle = _open(sources[entry.source], entry.path)
            handle.close()
            return parquet.metadata, parquet.schema_arrow
        except _READ_ERRORS as error:
            raise InputError(f"{entry.path}: cannot read it as Parquet: {error}", path=entry.path) from error

    def footers() -> dict[int, tuple[list[tuple[int, int]], pa.Schema | None]]:
        """This rank's files: their row groups' (weight, rows), and their schema where it is not the first's."""
        _, schema = footer(0)
        found: dict[int, tuple[list[tuple[int, int]], pa.Schema | None]] = {-1: ([], schema)}
        for index in range(rail.rank, len(entries), rail.size):
            metadata, own = footer(index)
            weights = [_weight(metadata, group, columns) for group in range(metadata.num_row_groups)]
            found[index] = (weights, None if own.equals(schema, check_metadata=False) else own)
        return found

    gathered: dict[int, tuple[list[tuple[int, int]], pa.Schema | None]] = {}
    for part in gather(rail, footers):
        gathered.update(part)
    first_schema = gathered.pop(-1)[1]
    assert first_schema is not None
    groups = {index: weights for index, (weights, _) in gathered.items()}
    schemas = [gathered[index][1] or first_schema for index in range(len(entries))]
    # One schema: the first file's with rows (a file without rows has none to lose, whatever its types).
    with_rows = [index for index in range(len(entries)) if any(rows for _, rows in groups[index])]
    reference = with_rows[0] if with_rows else 0
    schema = schemas[reference]
    for index in with_rows:
        if not schemas[index].equals(schema, check_metadata=False):
            path = entries[index].path
            raise InputError(
                f"{path}: its schema differs from {entries[reference].path}'s: {_difference(schemas[index], schema)} "
                f"(the files of one read_parquet have one schema: read the others separately)",
                path=path,
            )
    read_columns = _read_columns(schema, partition_schema, columns, where, entries[reference].path)
    full = pa.schema([*schema, *partition_schema])
    if len(full.names) != len(set(full.names)):
        raise InputError(f"{where}: a partition directory's key is also a column of the files: {full.names}")
    out_schema = pa.schema([full.field(name) for name in read_columns])
    plan = plan_row_groups([[weight for weight, _ in groups[i]] for i in range(len(entries))], rail.size)[rail.rank]
    if not with_rows:
        plan = []

    from_file = [name for name in read_columns if name in schema.names]

    def read(batches: Batches[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        opened: tuple[int, Any, Any] | None = None  # (file, ParquetFile, handle): consecutive groups share it
        try:
            for item in plan:
                entry = entries[item.file]
                weight, rows = groups[item.file][item.group]
                batch_rows = max(1, rows * batch_bytes // max(weight, 1)) if rows else 1
                values = partitions[item.file]
                try:
                    if opened is None or opened[0] != item.file:
                        if opened is not None:
                            opened[2].close()
                            opened = None
                        opened = (item.file, *_open(sources[entry.source], entry.path))
                    for batch in opened[1].iter_batches(
                        batch_size=batch_rows, row_groups=[item.group], columns=from_file, use_threads=False
                    ):
                        count = batch.num_rows
                        arrays = [
                            batch.column(name)
                            if name in from_file
                            else pa.repeat(pa.scalar(values.get(name), out_schema.field(name).type), count)
                            for name in read_columns
                        ]
                        yield from cut(pa.RecordBatch.from_arrays(arrays, schema=out_schema), batch_bytes)
                except _READ_ERRORS as error:
                    raise InputError(
                        f"{entry.path}: row group {item.group} cannot be read: {error}",
                        path=entry.path,
                        where=f"row group {item.group}",
                    ) from error
        finally:
            if opened is not None:
                opened[2].close()

    share = [(entries[item.file].path, f"row group {item.group}") for item in plan]
    return Batches(where, [entry.path for entry in entries], share, out_schema, read)


def _read_columns(
    schema: pa.Schema, partition_schema: pa.Schema, columns: Sequence[str] | None, where: str, first: str
) -> list[str]:
    names = [*schema.names, *partition_schema.names]
    if columns is None:
        return names
    for name in columns:
        if name not in names:
            raise InputError(f"{where}: no column {name!r} in {first} (its columns: {', '.join(names)})", path=first)
    return list(columns)


def _weight(metadata: Any, group: int, columns: Sequence[str] | None) -> tuple[int, int]:
    """Row group *group*'s bytes (uncompressed, of the *columns* read that are in the file: None, all) and rows."""
    row_group = metadata.row_group(group)
    wanted = None if columns is None else set(columns)
    weight = 0
    for index in range(row_group.num_columns):
        chunk = row_group.column(index)
        if wanted is None or chunk.path_in_schema.split(".")[0] in wanted:
            weight += chunk.total_uncompressed_size
    return weight, row_group.num_rows


def _difference(own: pa.Schema, expected: pa.Schema) -> str:
    for field in expected:
        if field.name not in own.names:
            return f"no column {field.name!r}"
        if not own.field(field.name).equals(field):
            return f"column {field.name!r} is {own.field(field.name).type}, not {field.type}"
    extra = [name for name in own.names if name not in expected.names]
    return f"an extra column {extra[0]!r}" if extra else "its columns are in another order"
