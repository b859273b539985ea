"""Blocks of lines out of a byte range, decoded into Arrow strings, packed into bounded batches (no MPI)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailrail.io.lines import EOF, Block, InvalidUTF8, LineBatcher, decode_lines, line_blocks


def lines_of(data: bytes, start: int = 0, end: int = EOF, chunk: int = 4) -> list[str]:
    return [
        line
        for block in line_blocks(pa.BufferReader(data), start, end, chunk)
        for line in decode_lines(block).to_pylist()
    ]


def block_of(data: bytes) -> Block:
    array = np.frombuffer(data, np.uint8)
    return Block(0, array, np.flatnonzero(array == 10))


def test_line_ends_are_cut_off_crlf_and_lf_alike_and_a_lone_cr_stays():
    assert decode_lines(block_of(b"a\r\nb\nc\rd\n\r\n\n")).to_pylist() == ["a", "b", "c\rd", "", ""]
    assert decode_lines(block_of(b"a\r\nb\r\n")).to_pylist() == ["a", "b"]  # every line CRLF: one kernel
    assert decode_lines(block_of(b"x\r\r\n")).to_pylist() == ["x\r"]  # one \r is the line end's


def test_a_last_line_without_a_newline_is_a_line_and_an_empty_stream_has_none():
    assert lines_of(b"one\ntwo") == ["one", "two"]
    assert lines_of(b"one\ntwo\r") == ["one", "two"]  # read as if its \n were there
    assert lines_of(b"one\n") == ["one"]
    assert lines_of(b"") == [] and lines_of(b"\n") == [""]


def test_lines_longer_than_a_read_and_than_the_range_are_read_whole_by_the_range_they_begin_in():
    long = b"x" * 1000
    data = b"a\n" + long + b"\nb\n"
    assert lines_of(data, chunk=3) == ["a", long.decode(), "b"]
    # ranges inside the long line: the one where it begins reads it all; those inside it read nothing
    assert lines_of(data, 0, 3, chunk=7) == ["a", long.decode()]
    assert lines_of(data, 3, 500, chunk=7) == []
    assert lines_of(data, 500, len(data), chunk=7) == ["b"]
    # the last line of the stream, begun before the range, without a newline: nothing
    assert lines_of(b"a\n" + long, 10, 20, chunk=3) == []


def test_a_range_reads_only_a_little_past_its_end_to_finish_its_last_line():
    data = b"short\n" * 100_000
    stream = pa.BufferReader(data)
    blocks = list(line_blocks(stream, 0, 60, 1 << 20))
    assert sum(block.lines for block in blocks) == 10
    assert stream.tell() <= 60 + (64 << 10)  # not a whole megabyte


@settings(deadline=None)  # (wall-clock deadlines fail on a shared machine)
@given(st.lists(st.text(st.characters(codec="utf-8", exclude_characters="\n"), max_size=30), max_size=40))
def test_decoded_lines_are_the_text_s_lines(lines):
    data = "".join(line + "\n" for line in lines).encode()
    expected = [line[:-1] if line.endswith("\r") else line for line in lines]
    assert lines_of(data, chunk=5) == expected


def test_invalid_utf8_names_the_first_bad_line_even_when_joined_lines_would_be_valid():
    with pytest.raises(InvalidUTF8) as raised:
        decode_lines(block_of("ok\né\n".encode() + b"\xc3\n\xa9\n"))
    assert raised.value.line == 2 and "byte 0 of the line" in str(raised.value)


def batches_of(arrays: list[list[str]], batch_bytes: int) -> list[pa.StringArray]:
    batcher = LineBatcher(batch_bytes)
    out = [batch for array in arrays for batch in batcher.add(pa.array(array, pa.string()))]
    last = batcher.finish()
    return out + ([last] if last is not None else [])


@settings(deadline=None)  # (wall-clock deadlines fail on a shared machine)
@given(st.lists(st.lists(st.text(max_size=40), max_size=30), max_size=10), st.integers(8, 300))
def test_batches_hold_every_line_in_order_each_within_batch_bytes_but_a_line_larger_than_that(arrays, batch_bytes):
    batches = batches_of(arrays, batch_bytes)
    assert [line for batch in batches for line in batch.to_pylist()] == [line for array in arrays for line in array]
    for batch in batches:
        batch.validate(full=True)
        assert len(batch) > 0
        cost = len(batch.buffers()[2] or b"") + 4 * len(batch)
        assert cost <= batch_bytes or len(batch) == 1


def test_a_line_larger_than_a_batch_is_a_batch_of_its_own_and_the_next_starts_afresh():
    batches = batches_of([["a", "b" * 100, "c"]], 16)
    assert [b.to_pylist() for b in batches] == [["a"], ["b" * 100], ["c"]]


def test_a_batch_s_buffers_are_reused_only_once_the_program_dropped_it(monkeypatch):
    import mailrail.io.lines as lines_module

    fresh = []
    real = lines_module.fresh_pages
    monkeypatch.setattr(lines_module, "fresh_pages", lambda nbytes: fresh.append(nbytes) or real(nbytes))
    monkeypatch.setattr(lines_module, "FRESH_PAGES_FROM", 0)
    chunks = [[f"{chunk}-{i}-" + "x" * (i % 17) for i in range(300)] for chunk in range(40)]
    everything = [line for chunk in chunks for line in chunk]

    batcher = LineBatcher(4096)
    kept = [batch for chunk in chunks for batch in batcher.add(pa.array(chunk, pa.string()))]
    kept.append(batcher.finish())
    assert [line for batch in kept for line in batch.to_pylist()] == everything  # none overwritten while held
    assert len(fresh) == 2 * len(kept)  # so nothing was reused

    fresh.clear()
    batcher = LineBatcher(4096)
    seen = 0
    for chunk in chunks:
        for batch in batcher.add(pa.array(chunk, pa.string())):  # each dropped when the next arrives
            assert batch.to_pylist() == everything[seen : seen + len(batch)]
            seen += len(batch)
    assert seen > 20 * 50 and len(fresh) == 2 * 2  # two batches' buffers, used in turn
