"""What the readers of byte ranges share: the arguments' checks, the plan, and a piece read as blocks of lines."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from ..errors import InputError
from .collective import expand_all, start
from .files import FileEntry, Paths, Source, compression_of, open_range, open_whole, sources_of
from .lines import CHUNK_BYTES, EOF, Block, line_blocks
from .plan import Piece, plan_ranges

__all__ = ["DEFAULT_BATCH_BYTES", "checked_batch_bytes", "describe", "RangePlan", "plan_read", "blocks_of", "cut"]

#: The default bound of a batch: 16 MiB (see the documentation's "Memory per rank").
DEFAULT_BATCH_BYTES = 16 << 20
#: The smallest and the largest batch_bytes a reader takes (an Arrow string array holds less than 2 GiB).
MIN_BATCH_BYTES = 1 << 10
MAX_BATCH_BYTES = 1 << 30


def checked_batch_bytes(batch_bytes: int, where: str) -> int:
    if (
        isinstance(batch_bytes, bool)
        or not isinstance(batch_bytes, int)
        or not MIN_BATCH_BYTES <= batch_bytes <= MAX_BATCH_BYTES
    ):
        raise ValueError(
            f"{where}: batch_bytes={batch_bytes!r}: an integer from {MIN_BATCH_BYTES:,} to {MAX_BATCH_BYTES:,}"
        )
    return batch_bytes


def describe(name: str, paths: Paths) -> str:
    """``name(paths)`` as errors and warnings name a read (long lists cut short)."""
    given: Any = paths
    if isinstance(given, (list, tuple)):
        given = [os.fspath(path) if isinstance(path, (str, os.PathLike)) else path for path in given]
    elif isinstance(given, os.PathLike):
        given = os.fspath(given)
    text = repr(given)
    return f"{name}({text if len(text) <= 100 else text[:97] + '...'})"


@dataclass(frozen=True)
class RangePlan:
    """A collective read's files (the same on every rank) and this rank's pieces of them."""

    sources: list[Source]
    entries: list[FileEntry]
    whole: list[bool]  # per file: read as one stream (compressed, or not splittable)
    pieces: list[Piece]  # this rank's

    def share(self) -> list[tuple[str, str]]:
        return [
            (self.entries[p.file].path, "whole" if self.whole[p.file] else f"bytes {p.start}-{p.end}")
            for p in self.pieces
        ]

    def files(self) -> list[str]:
        return [entry.path for entry in self.entries]

    def filesystem(self, file: int) -> Any:
        return self.sources[self.entries[file].source].filesystem


def plan_read(rail: Any, paths: Paths, filesystem: Any, where: str, splittable: bool = True) -> RangePlan:
    """Collective: the files *paths* name and this rank's pieces (compressed files, or every file when not
    *splittable*, whole)."""
    sources = sources_of(paths, filesystem, where=where)
    start(rail, where)
    entries = expand_all(rail, sources)
    whole = [not splittable or compression_of(entry.path) is not None for entry in entries]
    pieces = plan_ranges([entry.size for entry in entries], [not w for w in whole], rail.size)[rail.rank]
    return RangePlan(sources, entries, whole, pieces)


def blocks_of(
    plan: RangePlan,
    piece: Piece,
    begin: int = 0,
    chunk_bytes: int | Callable[[], int] = CHUNK_BYTES,
    stream: Any = None,
) -> Iterator[Block]:
    """The lines of *piece* (those that begin at or after *begin*) as blocks; *stream*: the file already open.

    A file that cannot be opened or read raises :class:`~mailrail.errors.InputError` naming it and, for a
    read that failed midway, the offset reached.
    """
    path = plan.entries[piece.file].path
    whole = plan.whole[piece.file]
    if stream is None:
        stream = (open_whole if whole else open_range)(plan.filesystem(piece.file), path)
    reached = piece.start
    try:
        blocks = line_blocks(stream, max(piece.start, begin), EOF if whole else piece.end, chunk_bytes)
        for block in blocks:
            reached = block.offset + len(block.data)
            yield block
    except (OSError, pa.ArrowException) as error:
        if isinstance(error, InputError):
            raise
        stream_name = "of the decompressed stream " if whole and compression_of(path) else ""
        raise InputError(
            f"{path}: cannot read it past byte {reached:,} {stream_name}: {error}", path=path, where=f"byte {reached}"
        ) from error
    finally:
        stream.close()


def cut(batch: pa.RecordBatch, batch_bytes: int) -> Iterator[pa.RecordBatch]:
    """*batch* as slices of at most about *batch_bytes* each (no copy); nothing for an empty batch."""
    if not batch.num_rows:
        return
    parts = max(1, -(-batch.nbytes // batch_bytes))
    step = -(-batch.num_rows // parts)
    for first in range(0, batch.num_rows, step):
        yield batch.slice(first, step)
