"""The plan of mailrail.io (no I/O, no MPI): every byte, every line and every row group is read exactly once,
by one rank, across any number of ranks, and the ranks' loads are even (Hypothesis)."""

from __future__ import annotations

import itertools
import math

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailrail.io.lines import decode_lines, line_blocks
from mailrail.io.plan import Piece, RowGroup, plan_ranges, plan_row_groups, range_loads

files = st.lists(st.tuples(st.integers(0, 5_000), st.booleans()), max_size=25)
ranks = st.integers(1, 17)


def covered(plan: list[list[Piece]], count: int) -> dict[int, list[tuple[int, int, int]]]:
    """Each file's pieces as (start, end, rank), sorted."""
    found: dict[int, list[tuple[int, int, int]]] = {index: [] for index in range(count)}
    for rank, pieces in enumerate(plan):
        for piece in pieces:
            found[piece.file].append((piece.start, piece.end, rank))
    return {index: sorted(pieces) for index, pieces in found.items()}


@settings(deadline=None)  # (wall-clock deadlines fail on a shared machine)
@given(files, ranks)
def test_every_byte_of_every_file_is_in_exactly_one_piece_of_one_rank(files, ranks):
    sizes = [size for size, _ in files]
    splittable = [split for _, split in files]
    plan = plan_ranges(sizes, splittable, ranks)
    assert len(plan) == ranks
    for index, pieces in covered(plan, len(files)).items():
        if sizes[index] == 0:
            assert pieces == []  # an empty file holds no line: nobody opens it
        elif not splittable[index]:
            assert [(start, end) for start, end, _ in pieces] == [(0, sizes[index])]  # whole, one rank
        else:
            assert pieces[0][0] == 0 and pieces[-1][1] == sizes[index]
            assert all(start < end for start, end, _ in pieces)
            assert all(a[1] == b[0] for a, b in itertools.pairwise(pieces))  # no gap, no overlap


@settings(deadline=None)  # (wall-clock deadlines fail on a shared machine)
@given(files, ranks)
def test_loads_are_even_within_a_byte_beyond_what_whole_files_impose(files, ranks):
    sizes = [size for size, _ in files]
    splittable = [split for _, split in files]
    loads = range_loads(plan_ranges(sizes, splittable, ranks))
    total = sum(sizes)
    largest_whole = max((size for size, split in files if not split), default=0)
    assert sum(loads) == total
    assert max(loads) <= math.ceil(total / ranks) + largest_whole
    if all(splittable):
        assert max(loads) - min(loads) <= 1


@settings(deadline=None)  # (wall-clock deadlines fail on a shared machine)
@given(files, ranks)
def test_small_files_are_grouped_and_each_rank_holds_at_most_two_parts_of_files(files, ranks):
    """A rank reads a run of consecutive files: the pieces number at most the files plus ranks - 1."""
    sizes = [size for size, _ in files]
    splittable = [split for _, split in files]
    plan = plan_ranges(sizes, splittable, ranks)
    stream = [index for index, (size, split) in enumerate(files) if size and split]
    pieces = sum(len(rank_pieces) for rank_pieces in plan)
    assert pieces <= sum(1 for size in sizes if size) + ranks - 1
    for rank_pieces in plan:
        partial = [p for p in rank_pieces if splittable[p.file] and (p.start, p.end) != (0, sizes[p.file])]
        assert len(partial) <= 2
        mine = [p.file for p in rank_pieces if splittable[p.file]]
        if mine:  # consecutive files of the stream
            first = stream.index(mine[0])
            assert mine == stream[first : first + len(mine)]


def test_the_plan_is_the_same_for_the_same_sizes_and_refuses_nonsense():
    sizes, splittable = [10, 0, 7, 3_000, 5], [True, True, False, True, False]
    assert plan_ranges(sizes, splittable, 4) == plan_ranges(list(sizes), list(splittable), 4)
    assert plan_ranges([100], [True], 3) == [[Piece(0, 0, 34)], [Piece(0, 34, 67)], [Piece(0, 67, 100)]]
    with pytest.raises(ValueError, match="ranks=0"):
        plan_ranges([1], [True], 0)
    with pytest.raises(ValueError, match="size -1"):
        plan_ranges([-1], [True], 2)
    with pytest.raises(ValueError, match="2 sizes for 1"):
        plan_ranges([1, 2], [True], 2)


def test_whole_files_go_to_the_least_loaded_rank_then_the_stream_fills_the_others_up():
    plan = plan_ranges([90, 50, 60], [False, True, False], 3)
    assert plan[0] == [Piece(0, 0, 90)] and plan[1] == [Piece(2, 0, 60)]
    assert plan[2] == [Piece(1, 0, 50)]  # the level is 66: only the empty rank takes stream bytes
    assert range_loads(plan) == [90, 60, 50]


@settings(deadline=None)  # (wall-clock deadlines fail on a shared machine)
@given(st.lists(st.lists(st.integers(0, 10_000), max_size=6), max_size=12), ranks)
def test_row_groups_are_dealt_once_in_consecutive_runs_within_one_group_of_an_even_share(weights, ranks):
    plan = plan_row_groups(weights, ranks)
    dealt = [group for rank_groups in plan for group in rank_groups]
    everything = [RowGroup(file, group) for file, groups in enumerate(weights) for group in range(len(groups))]
    assert dealt == everything  # each once, and rank r's run precedes rank r + 1's
    total = sum(map(sum, weights))
    largest = max((w for groups in weights for w in groups), default=0)
    for rank_groups in plan:
        load = sum(weights[g.file][g.group] for g in rank_groups)
        assert load <= total / ranks + largest


def test_row_groups_without_weight_are_dealt_by_count():
    plan = plan_row_groups([[0, 0, 0], [0]], 2)
    assert [len(groups) for groups in plan] == [2, 2]


# -- lines: the plan and the readers' ranges together -------------------------------------------------------

line_text = st.text(st.characters(codec="utf-8", exclude_characters="\n"), max_size=12).map(str.encode)
ends = st.sampled_from([b"\n", b"\r\n"])
contents = st.lists(st.lists(st.tuples(line_text, ends), max_size=12), max_size=8)


def file_bytes(lines: list[tuple[bytes, bytes]], final_end: bool) -> bytes:
    data = b"".join(text + end for text, end in lines)
    if lines and not final_end:
        data = data[: -len(lines[-1][1])]  # the last line without its line end
    return data


def expected_lines(data: bytes) -> list[bytes]:
    """The lines a single process reads: split at \\n, one \\r before it dropped; a last line without \\n counts."""
    if data and not data.endswith(b"\n"):
        data += b"\n"
    return [line[:-1] if line.endswith(b"\r") else line for line in data.split(b"\n")[:-1]]


def read_piece(data: bytes, piece: Piece, whole: bool, chunk: int) -> list[bytes]:
    end = len(data) if not whole else 2**63 - 1
    out = []
    for block in line_blocks(pa.BufferReader(data), piece.start, end if whole else piece.end, chunk):
        out += decode_lines(block).cast(pa.binary()).to_pylist()
    return out


@settings(max_examples=300, deadline=None)
@given(contents, st.lists(st.booleans(), min_size=8, max_size=8), ranks, st.integers(1, 40), st.data())
def test_every_line_is_read_exactly_once_across_any_number_of_ranks(contents, final_ends, ranks, chunk, data):
    files = [file_bytes(lines, final_ends[i]) for i, lines in enumerate(contents)]
    splittable = [data.draw(st.booleans(), label=f"file {i} splittable") for i in range(len(files))]
    plan = plan_ranges([len(f) for f in files], splittable, ranks)
    read = [
        [line for p in pieces for line in read_piece(files[p.file], p, not splittable[p.file], chunk)]
        for pieces in plan
    ]
    expected = [line for f in files for line in expected_lines(f)]
    assert sorted(line for lines in read for line in lines) == sorted(expected)
    if all(splittable):  # the stream is laid out in rank order: reading the ranks in order reads the files in order
        assert [line for lines in read for line in lines] == expected


SMALL = b"ab\r\n\n\ncdef\nlong line here\r\n\r\nx\ny\r"


@pytest.mark.parametrize("chunk", [1, 2, 5, 64])
def test_range_boundaries_at_every_byte_of_a_small_file_read_each_line_once(chunk):
    expected = expected_lines(SMALL)
    for a in range(len(SMALL) + 1):
        for b in range(a, len(SMALL) + 1):
            pieces = [Piece(0, 0, a), Piece(0, a, b), Piece(0, b, len(SMALL))]
            got = [line for piece in pieces for line in read_piece(SMALL, piece, False, chunk)]
            assert got == expected, (a, b)
