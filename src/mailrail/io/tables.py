"""``read_csv`` and ``read_json_lines``: rows of text files through pyarrow's parsers, in byte ranges, one schema.

Both read a rank's pieces as blocks of whole lines (:mod:`mailrail.io.lines`) and hand each block to
pyarrow's parser with the one schema of the read: given, or inferred by rank 0 from the first block of the
first file that has rows and shared with the plan, so that every rank's batches have the same columns and
types.  A block that does not fit it (a value that does not convert, a field not in the schema, a row with
too many fields) is an :class:`~mailrail.errors.InputError` naming the file and the byte offset of the row,
found by bisecting the block: the slow path, taken only after pyarrow refused it.

A block of text is at most a quarter of *batch_bytes*, and smaller when the previous block grew when parsed,
so that its record batch is about a quarter of *batch_bytes* too: pyarrow's parser takes some 3.5 times the
text while it works (measured), and a rank must hold the batch the program has, the block, the parser's work
and the new batch within about twice *batch_bytes*.  A batch that comes out larger is cut (slices, no copy).
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson

from ..errors import InputError
from .batches import Batches
from .collective import gather
from .files import Paths, compression_of, open_range, open_whole
from .lines import Block, line_blocks
from .plan import Piece
from .ranges import DEFAULT_BATCH_BYTES, RangePlan, blocks_of, checked_batch_bytes, cut, describe, plan_read

__all__ = ["read_csv", "read_json_lines"]

#: The text rank 0 infers a schema from: the first block of this many bytes (pyarrow's own block size).
INFER_BYTES = 1 << 20
#: The smallest block of text parsed at once.
MIN_BLOCK_BYTES = 1 << 10
_PARSE_ERRORS = (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError)


def _shown(data: bytes, most: int = 80) -> str:
    text = data.decode("utf-8", "replace").rstrip("\r\n")
    return repr(text if len(text) <= most else text[: most - 3] + "...")


def _without_first_line(block: Block) -> Block | None:
    """*block* less its first line (a header), or None when that was its only line."""
    if block.lines == 1:
        return None
    cut = int(block.newlines[0]) + 1
    return Block(block.offset + cut, block.data[cut:], block.newlines[1:] - cut)


class _Parser:
    """How one read parses a block of lines into a table, and finds the row a failed block failed on."""

    kind = ""

    def parse(self, data: pa.Buffer) -> pa.Table:
        raise NotImplementedError

    def hint(self) -> str:
        return ""

    def describe(self, error: Exception, text: bytes) -> str:
        """pyarrow's complaint about row *text*, less its row numbers (they count within a block), with a hint."""
        return re.sub(r"Row #\d+: | in row \d+", "", str(error)) + self.hint()

    def table(self, block: Block, path: str, decompressed: bool) -> pa.Table:
        """The block's rows as a table, or :class:`~mailrail.errors.InputError` naming the row that failed."""
        try:
            return self.parse(pa.py_buffer(block.data))
        except _PARSE_ERRORS as error:
            line = self._failing_line(block)
            raise self.error(block, line, path, decompressed, error) from None

    def error(self, block: Block, line: int, path: str, decompressed: bool, error: Exception) -> InputError:
        offset = block.offset + block.line_start(line)
        text = bytes(block.data[block.line_start(line) : int(block.newlines[line]) + 1])
        stream = " of the decompressed stream" if decompressed else ""
        return InputError(
            f"{path}: the row at byte {offset:,}{stream} ({_shown(text)}): {self.describe(error, text)}",
            path=path,
            where=f"byte {offset}",
        )

    def _failing_line(self, block: Block) -> int:
        """The line of *block* at which its prefix first fails to parse (bisection)."""
        low, high = 0, block.lines - 1  # the first failing prefix ends in [low, high]
        while low < high:
            middle = (low + high) // 2
            try:
                self.parse(pa.py_buffer(block.data[: int(block.newlines[middle]) + 1]))
            except _PARSE_ERRORS:
                high = middle
            else:
                low = middle + 1
        return low


def _parse_options(base: pacsv.ParseOptions, handler: Callable[[Any], str] | None = None) -> pacsv.ParseOptions:
    """A copy of *base* with row handler *handler* (``copy.copy`` would give it a handler that calls None)."""
    options = pacsv.ParseOptions(
        delimiter=base.delimiter,
        quote_char=base.quote_char,
        double_quote=base.double_quote,
        escape_char=base.escape_char,
        newlines_in_values=base.newlines_in_values,
        ignore_empty_lines=base.ignore_empty_lines,
    )
    if handler is not None:
        options.invalid_row_handler = handler
    return options


class _CsvParser(_Parser):
    """CSV blocks without their header: *names* are the columns, *schema* (None: inferring) their types."""

    kind = "CSV"

    def __init__(
        self,
        names: list[str],
        schema: pa.Schema | None,
        parse_options: pacsv.ParseOptions,
        convert_options: pacsv.ConvertOptions,
        inferred: str | None = None,
        skip: bool = False,
    ) -> None:
        self.names = names
        self.parse_options = _parse_options(parse_options, self._skip if skip else None)
        self.schema = schema
        self.convert_options = copy.copy(convert_options)
        if schema is not None:
            self.convert_options.column_types = schema
        self.inferred = inferred
        self.counting = True  # (off while bisecting: a skipped row is counted once)
        self.skipped: Callable[[Any], None] | None = None  # told of each row skipped

    def _skip(self, row: Any) -> str:
        if self.counting and self.skipped is not None:
            self.skipped(row)
        return "skip"

    def parse(self, data: pa.Buffer) -> pa.Table:
        options = pacsv.ReadOptions(column_names=self.names, use_threads=False, block_size=max(len(data) + 1, 1 << 16))
        return pacsv.read_csv(
            pa.BufferReader(data),
            read_options=options,
            parse_options=self.parse_options,
            convert_options=self.convert_options,
        )

    def _failing_line(self, block: Block) -> int:
        self.counting = False
        try:
            return super()._failing_line(block)
        finally:
            self.counting = True

    def describe(self, error: Exception, text: bytes) -> str:
        detail = str(error) if not text else re.sub(r"Row #\d+: ", "", str(error))
        column = re.match(r"In CSV column #(\d+): ", detail)
        if column is not None and int(column.group(1)) < len(self.names):
            detail = f"column {self.names[int(column.group(1))]!r}: " + detail[column.end() :]
        if "conversion error" in detail and self.inferred is not None:
            detail += (
                f" (the column types were inferred from the first {INFER_BYTES >> 20} MiB of {self.inferred}: give "
                f"read_csv column_types={{name: pyarrow type}} for the columns whose values vary)"
            )
        elif "Expected" in detail and "columns" in detail:
            detail += " (on_bad_lines='skip' skips such rows, and counts them)"
        return detail


class _JsonParser(_Parser):
    kind = "JSON"

    def __init__(self, schema: pa.Schema | None, inferred: str | None = None) -> None:
        self.schema = schema
        self.inferred = inferred
        self.parse_options = (
            pajson.ParseOptions()
            if schema is None
            else pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="error")
        )

    def parse(self, data: pa.Buffer) -> pa.Table:
        options = pajson.ReadOptions(use_threads=False, block_size=max(len(data) + 1, 1 << 16))
        return pajson.read_json(pa.BufferReader(data), read_options=options, parse_options=self.parse_options)

    def describe(self, error: Exception, text: bytes) -> str:
        detail = re.sub(r" in row \d+", "", str(error))
        if "unexpected field" in detail:
            try:
                row = json.loads(text)
            except ValueError:
                row = None
            if isinstance(row, dict):
                extra = [name for name in row if name not in self.schema.names] if self.schema is not None else []
                if extra:
                    detail += f" {extra[0]!r}"
        if "unexpected field" in detail or "changed from" in detail:
            detail += self.hint()
        return detail

    def hint(self) -> str:
        if self.inferred is None:
            return " (a field not in the schema given to read_json_lines is an error)"
        return (
            f" (the schema was inferred from the first {INFER_BYTES >> 20} MiB of {self.inferred}: give "
            f"read_json_lines schema= (a pyarrow.Schema) to read rows whose fields or types differ)"
        )


def _header_names(line: Block, parse_options: pacsv.ParseOptions, path: str) -> list[str]:
    try:
        table = pacsv.read_csv(
            pa.BufferReader(pa.py_buffer(line.data)),
            read_options=pacsv.ReadOptions(use_threads=False),
            parse_options=parse_options,
        )
    except _PARSE_ERRORS as error:
        raise InputError(f"{path}: its header line does not parse as CSV: {error}", path=path, where="byte 0") from None
    return list(table.column_names)


def _open(plan: RangePlan, file: int) -> Any:
    path = plan.entries[file].path
    return (open_whole if plan.whole[file] else open_range)(plan.filesystem(file), path)


def _csv_rows(
    plan: RangePlan, piece: Piece, header: bool, parse_options: pacsv.ParseOptions, size: int | Callable[[], int]
) -> tuple[list[str] | None, Iterator[Block]]:
    """The names in the header of *piece*'s file (None: no *header*) and the piece's blocks of rows.

    A range reads its file's header line first (every rank that reads part of a file reads its header),
    then its own lines after it; a whole file's stream is read once, its first line the header.
    """
    path = plan.entries[piece.file].path
    stream = _open(plan, piece.file)
    if not header:
        return None, blocks_of(plan, piece, 0, size, stream)
    if plan.whole[piece.file]:
        blocks = blocks_of(plan, piece, 0, size, stream)
        first = next(blocks, None)
        if first is None:
            return None, iter(())
        names = _header_names(
            Block(0, first.data[: int(first.newlines[0]) + 1], first.newlines[:1]), parse_options, path
        )
        rest = _without_first_line(first)
        return names, _chain(rest, blocks)
    try:
        line = next(line_blocks(stream, 0, 1, 1 << 16), None)
    except (OSError, pa.ArrowException) as error:
        stream.close()
        raise InputError(f"{path}: cannot read its header: {error}", path=path, where="byte 0") from error
    if line is None:
        stream.close()
        return None, iter(())
    names = _header_names(line, parse_options, path)
    return names, blocks_of(plan, piece, len(line.data), size, stream)


def _chain(first: Block | None, rest: Iterator[Block]) -> Iterator[Block]:
    if first is not None:
        yield first
    yield from rest


def _adaptive_batches(
    plan: RangePlan,
    batch_bytes: int,
    blocks: Callable[[Piece, Callable[[], int]], Iterator[Block]],
    parser: _Parser,
) -> Iterator[pa.RecordBatch]:
    """Each of this rank's pieces, its blocks parsed and cut to *batch_bytes*; each block's text a quarter of
    *batch_bytes*, less when the last block grew when parsed (see the module)."""
    text_bytes = batch_bytes // 4

    def next_size() -> int:
        return text_bytes

    for piece in plan.pieces:
        path = plan.entries[piece.file].path
        decompressed = plan.whole[piece.file] and compression_of(path) is not None
        for block in blocks(piece, next_size):
            table = parser.table(block, path, decompressed)
            if table.num_rows:
                grown = max(table.nbytes, 1) / len(block.data)
                text_bytes = int(max(batch_bytes / 4 / max(grown, 1.0), MIN_BLOCK_BYTES))
            for batch in table.to_batches():
                yield from cut(batch, batch_bytes)


def _first_rows(
    plan: RangePlan, header: bool, parse_options: pacsv.ParseOptions | None
) -> Iterator[tuple[int, list[str] | None, Block]]:
    """Rank 0's look for a schema: ``(file, header names, first block of rows)`` of each file that has rows,
    in order (the caller stops at the first); each file's header alone when it has no rows (*block* empty)."""
    for file, entry in enumerate(plan.entries):
        if not entry.size:
            continue
        piece = Piece(file, 0, entry.size)
        if parse_options is not None:
            names, blocks = _csv_rows(plan, piece, header, parse_options, INFER_BYTES)
        else:
            names, blocks = None, blocks_of(plan, piece, 0, INFER_BYTES)
        for block in blocks:
            if _has_content(block):
                yield file, names, block
                break
        else:
            if names is not None:
                yield file, names, Block(0, np.empty(0, np.uint8), np.empty(0, np.int64))
        if hasattr(blocks, "close"):
            blocks.close()


def _has_content(block: Block) -> bool:
    """Whether any line of *block* is more than a line end (empty lines hold no row)."""
    return bool(np.any((block.data != 10) & (block.data != 13)))


def read_csv(
    rail: Any,
    paths: Paths,
    *,
    column_types: Mapping[str, pa.DataType] | pa.Schema | None = None,
    column_names: list[str] | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    on_bad_lines: str = "error",
    parse_options: pacsv.ParseOptions | None = None,
    convert_options: pacsv.ConvertOptions | None = None,
    filesystem: Any = None,
) -> Batches[pa.RecordBatch]:
    """Collective: this rank's share of the rows of the CSV files *paths* names, as ``pyarrow.RecordBatch``.

    Every rank calls it with the same arguments; each row reaches exactly one rank, and every rank's
    batches have one schema.  Files are split among the ranks at byte ranges, as :func:`read_lines`
    splits them (a row belongs to the range in which its line begins); each file's first line is its
    header (read by every rank that reads part of the file, and the same in every file), unless
    *column_names* are given.  A quoted value that holds a newline cannot be split at line boundaries:
    for such files pass ``parse_options=pyarrow.csv.ParseOptions(newlines_in_values=True)``, and each file
    is read whole by one rank (as compressed files always are).

    *column_types*: pyarrow types by column name (a dict, or a ``pyarrow.Schema``); the columns not named
    are inferred once, by rank 0 from the first MiB of rows of the first file that has any, and shared
    (a column empty there is read as strings).  A later value that does not convert to its column's type is
    an error naming the file and the row's byte offset: name that column in *column_types*.
    *on_bad_lines*: ``"error"`` (a row with the wrong number of fields is an
    :class:`~mailrail.errors.InputError`) or ``"skip"``: such rows are skipped and counted
    (:attr:`Batches.skipped_rows`, and a :class:`~mailrail.errors.SkippedRowsWarning` at the end of this
    rank's iteration).  *parse_options* and *convert_options*: pyarrow's (``delimiter``, ``quote_char``,
    ``null_values``, ``include_columns`` ...), less the row handler and the column types, which are the
    arguments above.  *batch_bytes*, *paths* and *filesystem*: as :func:`read_lines`'s.
    """
    where = describe("read_csv", paths)
    checked_batch_bytes(batch_bytes, where)
    if on_bad_lines not in ("error", "skip"):
        raise ValueError(f"{where}: on_bad_lines={on_bad_lines!r}: 'error' or 'skip'")
    parse_options = pacsv.ParseOptions() if parse_options is None else parse_options
    convert_options = pacsv.ConvertOptions() if convert_options is None else convert_options
    if not isinstance(parse_options, pacsv.ParseOptions) or not isinstance(convert_options, pacsv.ConvertOptions):
        raise TypeError(f"{where}: parse_options and convert_options are pyarrow.csv.ParseOptions and ConvertOptions")
    if parse_options.invalid_row_handler is not None:
        raise ValueError(f"{where}: parse_options.invalid_row_handler is read_csv's own: use on_bad_lines")
    if convert_options.column_types and column_types is not None:
        raise ValueError(f"{where}: column types given twice: as column_types and in convert_options")
    given = dict(convert_options.column_types or {}) if column_types is None else _types_of(column_types, where)
    convert_options = copy.copy(convert_options)
    convert_options.column_types = given
    if column_names is not None and (
        not isinstance(column_names, (list, tuple)) or not all(isinstance(name, str) for name in column_names)
    ):
        raise TypeError(f"{where}: column_names={column_names!r}: a list of str")
    names_given = None if column_names is None else list(column_names)
    skip = on_bad_lines == "skip"
    whole_files = parse_options.newlines_in_values
    plan = plan_read(rail, paths, filesystem, where, splittable=not whole_files)
    infer = _infer_whole_csv if whole_files else _infer_csv
    names, schema, inferred = next(
        value
        for value in gather(
            rail,
            lambda: infer(plan, names_given, parse_options, convert_options, skip, where) if rail.rank == 0 else None,
        )
        if value is not None
    )
    parser = _CsvParser(names, schema, parse_options, convert_options, inferred, skip=skip)
    current: list[Any] = [None, None]  # the file and the block being read: where a skipped row was

    def blocks(piece: Piece, size: Callable[[], int]) -> Iterator[Block]:
        found, rows = _csv_rows(plan, piece, names_given is None, parse_options, size)
        path = plan.entries[piece.file].path
        if found is not None and found != names:
            raise InputError(
                f"{path}: its header {found} is not the first file's ({names}): the files of one read_csv "
                f"have the same columns (read the others separately)",
                path=path,
                where="byte 0",
            )
        current[:] = [path, None]
        for block in rows:
            current[1] = block
            yield block

    def read(batches: Batches[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        def skipped(row: Any) -> None:
            batches.skipped(1, "" if batches.skipped_rows else _row_place(current[0], current[1], row))

        parser.skipped = skipped
        if whole_files:
            yield from _whole_csv_batches(plan, batch_bytes, names_given, parser, current)
        else:
            yield from _adaptive_batches(plan, batch_bytes, blocks, parser)

    return Batches(where, plan.files(), plan.share(), schema, read)


def _checked_columns(
    names: list[str], given: Mapping[str, Any], convert_options: pacsv.ConvertOptions, path: str
) -> None:
    """Refuse column types or included columns that name no column of the files (pyarrow would ignore them)."""
    unknown = [name for name in [*given, *convert_options.include_columns] if name not in names]
    if unknown and not convert_options.include_missing_columns:
        raise InputError(f"{path}: no column {unknown[0]!r} (its columns: {', '.join(names)})", path=path)


def _schema_of(table: pa.Table, given: Mapping[str, Any]) -> pa.Schema:
    """The inferred schema: a column with no value in the block (type null) is read as strings."""
    return pa.schema(
        [
            field.with_type(pa.string()) if field.type == pa.null() and field.name not in given else field
            for field in table.schema
        ]
    )


def _infer_csv(
    plan: RangePlan,
    names_given: list[str] | None,
    parse_options: pacsv.ParseOptions,
    convert_options: pacsv.ConvertOptions,
    skip: bool,
    where: str,
) -> tuple[list[str], pa.Schema, str | None] | None:
    """Rank 0's part of the plan: the column names and the schema (None on the other ranks)."""
    given = convert_options.column_types
    header_names = None
    for file, names, block in _first_rows(plan, names_given is None, parse_options):
        names = names or list(names_given or [])
        path = plan.entries[file].path
        _checked_columns(names, given, convert_options, path)
        header_names = header_names or names
        if not block.lines:
            continue
        parser = _CsvParser(names, None, parse_options, convert_options, skip=skip)
        table = parser.table(block, path, plan.whole[file] and compression_of(path) is not None)
        if table.num_rows:
            inferred = path if set(table.schema.names) - set(given) else None
            return names, _schema_of(table, given), inferred
    names = header_names or names_given
    if names is None:
        raise InputError(f"{where}: every file is empty: no header line names the columns (give column_names)")
    included = list(convert_options.include_columns) or names
    return names, pa.schema([(name, given.get(name, pa.string())) for name in included]), None


def _infer_whole_csv(
    plan: RangePlan,
    names_given: list[str] | None,
    parse_options: pacsv.ParseOptions,
    convert_options: pacsv.ConvertOptions,
    skip: bool,
    where: str,
) -> tuple[list[str], pa.Schema, str | None] | None:
    """:func:`_infer_csv` for files whose values may hold newlines: pyarrow's own reader reads the first block."""
    options = _parse_options(parse_options, (lambda row: "skip") if skip else None)
    for file, entry in enumerate(plan.entries):
        if not entry.size:
            continue
        stream = _open(plan, file)
        try:
            reader = pacsv.open_csv(
                stream,
                read_options=pacsv.ReadOptions(column_names=names_given, use_threads=False, block_size=INFER_BYTES),
                parse_options=options,
                convert_options=convert_options,
            )
            first = next(iter(reader), None)
        except _PARSE_ERRORS as error:
            raise InputError(f"{entry.path}: its first rows do not parse as CSV: {error}", path=entry.path) from None
        finally:
            stream.close()
        if first is not None and first.num_rows:
            inferred = entry.path if set(first.schema.names) - set(convert_options.column_types) else None
            return (
                list(first.schema.names),
                _schema_of(pa.Table.from_batches([first]), convert_options.column_types),
                inferred,
            )
    if names_given is None:
        raise InputError(f"{where}: no file has rows: nothing names the columns (give column_names)")
    return (
        names_given,
        pa.schema([(name, convert_options.column_types.get(name, pa.string())) for name in names_given]),
        None,
    )


def _whole_csv_batches(
    plan: RangePlan, batch_bytes: int, names_given: list[str] | None, parser: _CsvParser, current: list[Any]
) -> Iterator[pa.RecordBatch]:
    """Files whose quoted values may hold newlines, each read whole by pyarrow's streaming reader; an error
    names the file and the row as pyarrow counts it."""
    for piece in plan.pieces:
        path = plan.entries[piece.file].path
        current[:] = [path, None]
        stream = _open(plan, piece.file)
        try:
            reader = pacsv.open_csv(
                stream,
                read_options=pacsv.ReadOptions(
                    column_names=names_given, use_threads=False, block_size=max(batch_bytes // 2, 1 << 16)
                ),
                parse_options=parser.parse_options,
                convert_options=parser.convert_options,
            )
            assert parser.schema is not None
            if reader.schema.names != parser.schema.names:
                raise InputError(
                    f"{path}: its columns {reader.schema.names} are not the first file's ({parser.schema.names}): the "
                    f"files of one read_csv have the same columns (read the others separately)",
                    path=path,
                    where="byte 0",
                )
            for batch in reader:
                yield from cut(batch, batch_bytes)
        except _PARSE_ERRORS as error:
            raise InputError(
                f"{path}: {parser.describe(error, b'')} (newlines_in_values=True: the file is read whole, and pyarrow "
                f"counts its rows, not bytes)",
                path=path,
            ) from None
        finally:
            stream.close()


def _types_of(column_types: Mapping[str, pa.DataType] | pa.Schema, where: str) -> dict[str, pa.DataType]:
    if isinstance(column_types, pa.Schema):
        return {field.name: field.type for field in column_types}
    if not isinstance(column_types, Mapping):
        raise TypeError(f"{where}: column_types={column_types!r}: a dict of pyarrow types by name, or a pyarrow.Schema")
    types = {}
    for name, kind in column_types.items():
        if not isinstance(kind, pa.DataType):
            raise TypeError(f"{where}: column_types[{name!r}] = {kind!r}: a pyarrow type (pyarrow.int64(), ...)")
        types[name] = kind
    return types


def _row_place(path: str, block: Block | None, row: Any) -> str:
    """Where a skipped row was: pyarrow numbers a block's non-empty lines from 1 (a whole file's rows, when
    there is no block)."""
    if block is None:
        return f"{path}, row {row.number} ({_shown(str(row.text).encode())})"
    starts = np.concatenate([[0], block.newlines[:-1] + 1])
    carriage = (block.newlines > starts) & (block.data[block.newlines - 1] == 13)
    filled = np.flatnonzero(block.newlines - starts - carriage > 0)
    number = getattr(row, "number", None)
    if number is not None and 0 < number <= len(filled):
        return f"{path}, byte {block.offset + int(starts[filled[number - 1]]):,} ({_shown(row.text.encode())})"
    return f"{path}, bytes {block.offset:,}-{block.offset + len(block.data):,} ({_shown(str(row.text).encode())})"


def read_json_lines(
    rail: Any,
    paths: Paths,
    *,
    schema: pa.Schema | None = None,
    batch_bytes: int = DEFAULT_BATCH_BYTES,
    filesystem: Any = None,
) -> Batches[pa.RecordBatch]:
    """Collective: this rank's share of the rows of the JSON-lines files *paths* names (NDJSON: one JSON
    object a line), as ``pyarrow.RecordBatch``.

    Split as :func:`read_lines` splits (blank lines hold no row), each row to exactly one rank, every
    batch with one schema: *schema* (a ``pyarrow.Schema``; a field that is not in it is an error), or
    inferred once, by rank 0 from the first MiB of the first file that has rows, and shared; then a later
    row with a field or a type the schema does not have is an :class:`~mailrail.errors.InputError` naming
    the file and the row's byte offset, and saying to give *schema*.  *batch_bytes*, *paths* and
    *filesystem*: as :func:`read_lines`'s.
    """
    where = describe("read_json_lines", paths)
    checked_batch_bytes(batch_bytes, where)
    if schema is not None and not isinstance(schema, pa.Schema):
        raise TypeError(f"{where}: schema={schema!r}: a pyarrow.Schema, or None")
    plan = plan_read(rail, paths, filesystem, where)
    inferred: str | None = None
    if schema is None:

        def infer() -> tuple[pa.Schema, str | None] | None:
            if rail.rank != 0:
                return None
            for file, _, block in _first_rows(plan, False, None):
                path = plan.entries[file].path
                table = _JsonParser(None).table(block, path, plan.whole[file] and compression_of(path) is not None)
                if table.num_rows:
                    return table.schema, path
            return pa.schema([]), None

        schema, inferred = next(value for value in gather(rail, infer) if value is not None)
    parser = _JsonParser(schema, inferred)

    def read(batches: Batches[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        yield from _adaptive_batches(plan, batch_bytes, lambda piece, size: blocks_of(plan, piece, 0, size), parser)

    return Batches(where, plan.files(), plan.share(), schema, read)
