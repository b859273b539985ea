"""Who reads what: the plan every rank computes alike from the same sizes (no I/O, no MPI).

The readers of :mod:`mailrail.io` gather each file's size (or each Parquet row group's) once, then every
rank calls the same function here with the same numbers and gets the same answer, so no rank tells
another what to read.

**Byte ranges** (:func:`plan_ranges`, for lines, CSV and JSON lines).  A file that can be split (not
compressed) is read in byte ranges; a line belongs to the range in which it begins, so a reader of range
``[start, end)`` skips the line it starts inside of (the previous range's) and reads on past ``end`` to
finish its last line.  The splittable files are laid end to end in their order, as one stream, and each
rank gets one stretch of it: a rank reads a run of consecutive small files, or part of a large one, and
at most two of its pieces are parts of files.  Files that cannot be split (compressed) are whole pieces,
dealt first to the least-loaded rank, largest first; the stream then fills the ranks up to one level
(water-filling), so the loads differ by at most a byte beyond what the whole files impose.

**Row groups** (:func:`plan_row_groups`, for Parquet).  The row groups of all the files, in their order,
are cut into one consecutive run per rank by their weights (bytes): a rank's load is within one row
group of an even share.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Piece", "RowGroup", "plan_ranges", "plan_row_groups", "range_loads"]


@dataclass(frozen=True, slots=True)
class Piece:
    """Bytes ``[start, end)`` of file number *file*: the lines that begin there.  A file that cannot be split
    is one piece ``[0, size)``, and its reader reads the whole stream."""

    file: int
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class RowGroup:
    """Row group *group* of file number *file*."""

    file: int
    group: int


def _checked_ranks(ranks: int) -> int:
    if isinstance(ranks, bool) or not isinstance(ranks, int) or ranks < 1:
        raise ValueError(f"ranks={ranks!r}: an integer >= 1")
    return ranks


def plan_ranges(sizes: Sequence[int], splittable: Sequence[bool], ranks: int) -> list[list[Piece]]:
    """Each rank's pieces of the files (*sizes* in bytes; *splittable*: whether each may be cut), in file order.

    Empty files get no piece (they hold no line).  Every byte of every other file is in exactly one piece of
    exactly one rank; a file that cannot be split is one piece of one rank.
    """
    _checked_ranks(ranks)
    if len(sizes) != len(splittable):
        raise ValueError(f"{len(sizes)} sizes for {len(splittable)} splittable flags")
    for index, size in enumerate(sizes):
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise ValueError(f"file {index}: size {size!r} is not a byte count")
    pieces: list[list[Piece]] = [[] for _ in range(ranks)]
    loads = [0] * ranks

    # Whole files first, largest first, each to the least-loaded rank (the lowest of equals): LPT.
    whole = sorted((i for i, size in enumerate(sizes) if size and not splittable[i]), key=lambda i: (-sizes[i], i))
    for index in whole:
        rank = min(range(ranks), key=lambda r: (loads[r], r))
        pieces[rank].append(Piece(index, 0, sizes[index]))
        loads[rank] += sizes[index]

    # Then the stream of splittable files, shared out so that every rank that takes any ends at one level.
    stream = [i for i, size in enumerate(sizes) if size and splittable[i]]
    shares = _water_fill(loads, sum(sizes[i] for i in stream))
    cursor = 0  # position in stream: file stream[cursor], from byte offset
    offset = 0
    for rank in range(ranks):
        wanted = shares[rank]
        while wanted:
            index = stream[cursor]
            take = min(wanted, sizes[index] - offset)
            pieces[rank].append(Piece(index, offset, offset + take))
            wanted -= take
            offset += take
            if offset == sizes[index]:
                cursor, offset = cursor + 1, 0
    for rank_pieces in pieces:
        rank_pieces.sort(key=lambda piece: (piece.file, piece.start))
    return pieces


def _water_fill(loads: Sequence[int], total: int) -> list[int]:
    """How much of *total* each rank takes so that the ranks that take any end level (within a byte).

    The ranks in order of load take part while the level is at least their load: the largest such
    prefix ``k`` has level ``(total + sum of their loads) / k``; integer shares, the remainder one byte
    each to the least loaded.
    """
    ranks = len(loads)
    order = sorted(range(ranks), key=lambda r: (loads[r], r))
    prefix = 0
    taking = 1
    running = 0
    for k in range(1, ranks + 1):
        running += loads[order[k - 1]]
        if loads[order[k - 1]] * k <= total + running:
            taking, prefix = k, running
        else:
            break
    level, remainder = divmod(total + prefix, taking)
    shares = [0] * ranks
    for position, rank in enumerate(order[:taking]):
        shares[rank] = level - loads[rank] + (1 if position < remainder else 0)
    return shares


def range_loads(pieces: Sequence[Sequence[Piece]]) -> list[int]:
    """The bytes each rank's pieces span."""
    return [sum(piece.end - piece.start for piece in rank_pieces) for rank_pieces in pieces]


def plan_row_groups(weights: Sequence[Sequence[int]], ranks: int) -> list[list[RowGroup]]:
    """Each rank's row groups: *weights*\\ [file][group] (bytes) cut into one consecutive run per rank.

    A row group goes to the rank whose share ``[r * total / ranks, (r + 1) * total / ranks)`` holds its
    midpoint, so each rank's load is within one row group of ``total / ranks``.  With no weight at all
    (every group empty), each group counts as one.
    """
    _checked_ranks(ranks)
    flat = [(file, group, weight) for file, groups in enumerate(weights) for group, weight in enumerate(groups)]
    for file, group, weight in flat:
        if isinstance(weight, bool) or not isinstance(weight, int) or weight < 0:
            raise ValueError(f"file {file}, row group {group}: weight {weight!r} is not a byte count")
    total = sum(weight for _, _, weight in flat)
    if total == 0:
        flat = [(file, group, 1) for file, group, _ in flat]
        total = len(flat)
    plan: list[list[RowGroup]] = [[] for _ in range(ranks)]
    before = 0
    for file, group, weight in flat:
        rank = min(ranks - 1, (2 * before + weight) * ranks // (2 * total))
        plan[rank].append(RowGroup(file, group))
        before += weight
    return plan
