"""Lines split into words: the compiled pass and Arrow's kernels give what ``bytes.split()`` gives per line, on
random lines (every ASCII whitespace byte, multi-byte UTF-8, empty lines, nulls, slices, both offset widths)."""

from __future__ import annotations

import importlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mailrail.io
from mailrail.io import words
from mailrail.io.words import split_words_arrow, split_words_compiled

COMPILED = importlib.import_module("mailrail.io._words")  # make test builds it: no skip
SPLITS = [pytest.param(split_words_arrow, id="arrow"), pytest.param(split_words_compiled, id="compiled")]
#: Pieces of lines: every byte bytes.split() splits on, and characters it does not (a no-break space, an em
#: space, NEL, the information separators str.split() would split on).
PIECES = ["a", "bc", "über", "東京", "x" * 17, " ", "\t", "\n", "\x0b", "\x0c", "\r", "  "]
PIECES += ["\xa0", "\u2003", "\x85", "\x1c"]


def expected_words(lines: list[bytes | None]) -> list[bytes]:
    return [word for line in lines if line is not None for word in line.split()]


def test_the_compiled_pass_is_the_one_chosen():
    assert words.IMPLEMENTATION == "compiled"
    assert words.split_words is split_words_compiled and mailrail.io.split_words is split_words_compiled


line_strategy = st.one_of(st.none(), st.lists(st.sampled_from(PIECES), max_size=12).map("".join))


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(line_strategy, max_size=40),
    large=st.booleans(),
    binary=st.booleans(),
    cut=st.tuples(st.integers(0, 45), st.integers(0, 45)),
)
def test_both_split_as_bytes_split_does(lines, large, binary, cut):
    text_type = pa.large_string() if large else pa.string()
    array = pa.array(lines, type=text_type)
    if binary:
        array = array.cast(pa.large_binary() if large else pa.binary())
    start, stop = min(cut), max(cut)
    array = array.slice(start, stop - start)
    encoded = [None if line is None else line.encode() for line in lines[start:stop]]
    expected = expected_words(encoded)
    for split in (split_words_arrow, split_words_compiled):
        result = split(array)
        assert result.type == (pa.binary() if binary else pa.string())  # int32 offsets: the words fit
        got = result.to_pylist()
        assert (got if binary else [word.encode() for word in got]) == expected, split.__name__
        assert result.offset == 0 and result.null_count == 0
        result.validate(full=True)


@settings(max_examples=200, deadline=None)
@given(lines=st.lists(st.binary(max_size=30), max_size=30), lead=st.integers(0, 9))
def test_both_split_any_bytes_as_bytes_split_does(lines, lead):
    array = pa.array([b"\xff lead"] * lead + lines, type=pa.binary()).slice(lead)
    for split in (split_words_arrow, split_words_compiled):
        assert split(array).to_pylist() == expected_words(lines), split.__name__


@pytest.mark.parametrize("split", SPLITS)
@pytest.mark.parametrize("line_type", [pa.string(), pa.large_string(), pa.binary(), pa.large_binary()])
def test_an_empty_array_and_lines_without_words_have_no_words(split, line_type):
    text = line_type in (pa.string(), pa.large_string())
    for lines in ([], [None, None], ["", " \t\r\n", None, "\x0b\x0c"]):
        result = split(pa.array(lines, type=line_type))
        assert len(result) == 0 and result.type == (pa.string() if text else pa.binary())


@pytest.mark.parametrize("split", SPLITS)
def test_large_string_lines_give_their_words(split):
    lines = ["the quick  brown\tfox", "", None, "über 東京\r"] * 1000
    result = split(pa.array(lines, type=pa.large_string()))
    assert result.type == pa.string()  # fewer than 2**31 bytes of words: int32 offsets
    assert result.to_pylist() == ["the", "quick", "brown", "fox", "über", "東京"] * 1000


@pytest.mark.parametrize("split", SPLITS)
def test_a_null_line_has_no_words_even_where_its_bytes_are_not_empty(split):
    # Arrow does not require a null's range of bytes to be empty: line 1 covers "hidden", and is null.
    data = b"one twohidden three"
    offsets = np.array([0, 7, 13, 19], np.int32)
    validity = pa.py_buffer(np.packbits([1, 0, 1], bitorder="little"))
    lines = pa.Array.from_buffers(pa.string(), 3, [validity, pa.py_buffer(offsets), pa.py_buffer(data)])
    assert split(lines).to_pylist() == ["one", "two", "three"]
    assert split(lines.slice(1)).to_pylist() == ["three"]


@pytest.mark.parametrize("split", SPLITS)
def test_a_chunked_array_is_split_whole_and_other_types_are_refused(split):
    chunked = pa.chunked_array([["a b", "c"], ["d  e"]])
    assert split(chunked).to_pylist() == ["a", "b", "c", "d", "e"]
    with pytest.raises(TypeError, match="string or binary"):
        split(pa.array([1, 2]))
    with pytest.raises(TypeError, match="string or binary"):
        split(["a b"])


@settings(max_examples=100, deadline=None)
@given(lines=st.lists(st.lists(st.sampled_from(PIECES), max_size=8).map("".join), max_size=20))
def test_the_compiled_pass_writes_int64_offsets_alike(lines):
    encoded = [line.encode() for line in lines]
    offsets = np.zeros(len(lines) + 1, np.int64)
    np.cumsum([len(line) for line in encoded], out=offsets[1:])
    data = np.frombuffer(b"".join(encoded), np.uint8)
    word_offsets, word_data = COMPILED.split_words(offsets, data, np.empty(0, np.uint8), 0, wide=True)
    assert word_offsets.dtype == np.int64
    joined = word_data.tobytes()
    assert [joined[a:b] for a, b in zip(word_offsets[:-1], word_offsets[1:])] == expected_words(encoded)


def test_the_compiled_pass_refuses_offsets_outside_the_data():
    data = np.frombuffer(b"abc def", np.uint8)
    none = np.empty(0, np.uint8)
    with pytest.raises(ValueError, match="for 7 bytes"):
        COMPILED.split_words(np.array([0, 8], np.int32), data, none, 0)
    with pytest.raises(ValueError, match="must ascend"):
        COMPILED.split_words(np.array([0, 5, 3, 7], np.int64), data, none, 0)
    with pytest.raises(ValueError, match="validity bitmap"):
        COMPILED.split_words(np.array([0, 3, 7], np.int32), data, np.ones(1, np.uint8), 7)
