"""``read_lines``: the lines of text files, spread over the ranks in byte ranges."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa

from ..errors import InputError
from .batches import Batches
from .files import Paths, compression_of
from .lines import InvalidUTF8, LineBatcher, decode_lines
from .ranges import DEFAULT_BATCH_BYTES, RangePlan, blocks_of, checked_batch_bytes, describe, plan_read

__all__ = ["read_lines"]


def read_lines(
    rail: Any, paths: Paths, *, batch_bytes: int = DEFAULT_BATCH_BYTES, filesystem: Any = None
) -> Batches[pa.StringArray]:
    """Collective: this rank's share of the lines of the files *paths* names, in batches of ``pyarrow`` strings.

    Every rank calls it with the same arguments; each line of the input reaches exactly one rank, without
    its line end (``\\n`` or ``\\r\\n``; the last line of a file may lack one).  Files are split among the
    ranks at byte ranges (a line belongs to the range in which it begins), so one large file is read by
    every rank; small files are grouped, consecutive files to a rank.  Compressed files (``.gz``, ``.bz2``,
    ``.zst``, ``.lz4``, ``.br``: pyarrow decompresses them) cannot be split: one rank reads each whole.

    *paths*: a file, a directory (its files, recursively, sorted), a glob pattern, a ``pyarrow.fs`` URI
    (``s3://...``), or a list of them (see :mod:`mailrail.io.files`); *filesystem*: a
    ``pyarrow.fs.FileSystem`` that holds every path.  *batch_bytes* (1 KiB to 1 GiB): the most bytes a batch
    holds (its text plus 4 bytes a line; a line longer than that is a batch of its own).

    The plan is made now (one ``rail.barrier()`` and one gather); the batches are read as they are
    iterated (:class:`~mailrail.io.Batches`).  Invalid UTF-8 raises :class:`~mailrail.errors.InputError`
    naming the file and the byte offset of the line, on the rank that reads it.
    """
    where = describe("read_lines", paths)
    checked_batch_bytes(batch_bytes, where)
    plan = plan_read(rail, paths, filesystem, where)

    def read(batches: Batches[pa.StringArray]) -> Iterator[pa.StringArray]:
        batcher = LineBatcher(batch_bytes)
        for piece in plan.pieces:
            for block in blocks_of(plan, piece):
                try:
                    lines = decode_lines(block)
                except InvalidUTF8 as error:
                    raise _invalid_utf8(plan, piece.file, block.offset + block.line_start(error.line), error) from None
                except ValueError as error:  # a line of 2 GiB or more
                    path = plan.entries[piece.file].path
                    raise InputError(f"{path}: at byte {block.offset:,}: {error}", path=path) from None
                yield from batcher.add(lines)
        last = batcher.finish()
        if last is not None:
            yield last

    return Batches(where, plan.files(), plan.share(), pa.string(), read)


def _invalid_utf8(plan: RangePlan, file: int, offset: int, error: InvalidUTF8) -> InputError:
    path = plan.entries[file].path
    decompressed = " of the decompressed stream" if compression_of(path) else ""
    return InputError(
        f"{path}: the line at byte {offset:,}{decompressed} is not UTF-8 ({error.reason}); read_lines reads UTF-8 "
        f"text only",
        path=path,
        where=f"byte {offset}",
    )
