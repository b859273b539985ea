"""Containers of strings (``str`` and ``bytes`` keys of any length) in mailrail.testing's World, several ranks and
seeds, tiny datagrams (backpressure): each against a plain Python model (collections.Counter, set, dict).  Empty
strings, non-ASCII ones, keys longer than 16 bytes sharing their first 16, every input type (pyarrow arrays of
either width, numpy U/S/object arrays, lists), the longest key that fits and one byte more (refused, naming both
sizes)."""

from __future__ import annotations

import collections

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from containers_support import tiny_world
from mailrail.containers import CountingSet
from mailrail.errors import MessageSizeError
from mailrail.testing import World

#: Keys the tests draw from: empty, non-ASCII, and three longer than 16 bytes sharing their first 16.
WORDS = ["", "a", "b", "über", "東京", "x" * 16 + "1", "x" * 16 + "2", "x" * 16 + "22", "a word with spaces"]


def as_kind(words: list[str], kind: type) -> list:
    return words if kind is str else [word.encode() for word in words]


def batches_of(words: list, kind: type) -> list:
    """The same words as every input type a container takes, in turns."""
    arrow = pa.string() if kind is str else pa.binary()
    large = pa.large_string() if kind is str else pa.large_binary()
    numpy_kind = "U" if kind is str else "S"
    cut = np.linspace(0, len(words), 7).astype(int)
    parts = [words[a:b] for a, b in zip(cut[:-1], cut[1:])]
    trailing_nul_free = [all(not w.endswith("\0" if kind is str else b"\0") for w in p) for p in parts]
    converted = [
        parts[0],  # a list
        pa.array(parts[1], arrow),
        pa.array(parts[2], large),
        np.array(parts[3], dtype=object),
        np.array(parts[4], dtype=numpy_kind) if trailing_nul_free[4] and parts[4] else parts[4],
        pa.chunked_array([pa.array(parts[5], arrow)], arrow),
    ]
    return converted


def counting_program(rail, seed, kind, extra):
    rng = np.random.default_rng([seed, rail.rank])
    words = as_kind([WORDS[i] for i in rng.integers(0, len(WORDS), 200)] + extra[rail.rank :: rail.size], kind)
    counts = CountingSet(rail, kind)
    for batch in batches_of(words, kind):
        counts.add(batch)
    asked = as_kind(WORDS + ["absent"], kind)
    keys, top = counts.top(4)
    return {
        "words": words,
        "total": counts.total(),
        "size": counts.size(),
        "count": counts.count(asked).tolist(),
        "top": list(zip(keys.to_pylist(), top.tolist())),
        "local": counts.local(),
        "type": keys.type,
    }


def check_counting(results, kind):
    model = collections.Counter(word for result in results for word in result["words"])
    ranked = sorted(model.items(), key=lambda item: (-item[1], item[0] if kind is bytes else item[0].encode()))
    merged = collections.Counter()
    for result in results:
        assert result["total"] == sum(model.values()) and result["size"] == len(model)
        assert result["count"] == [model[word] for word in as_kind(WORDS + ["absent"], kind)]
        assert result["top"] == ranked[:4]
        assert result["type"] == (pa.string() if kind is str else pa.binary())
        table = result["local"]
        assert table.column_names == ["key", "count"] and table.schema.field("count").type == pa.int64()
        merged.update(dict(zip(table["key"].to_pylist(), table["count"].to_pylist())))
    assert merged == model


@pytest.mark.parametrize("kind", [str, bytes])
@pytest.mark.parametrize("size", [1, 2, 3])
def test_a_counting_set_of_strings_counts_every_input_type(kind, size):
    check_counting(tiny_world(size, seed=size).run(counting_program, 7, kind, []), kind)


words_strategy = st.lists(st.text(max_size=30), max_size=150)


@settings(max_examples=15, deadline=None)
@given(size=st.integers(1, 4), seed=st.integers(0, 2**16), extra=words_strategy)
def test_a_counting_set_of_random_words_equals_a_counter(size, seed, extra):
    extra = [word.replace("\0", "") for word in extra]  # numpy's U arrays drop trailing NULs: not this test's point
    check_counting(tiny_world(size, seed, datagram_size=512).run(counting_program, seed, str, extra), str)


def test_the_longest_key_that_fits_goes_and_one_byte_more_is_refused_naming_both_sizes():
    def program(rail):
        counts = CountingSet(rail, bytes)
        longest = counts._longest_string
        counts.add([b"k" * longest, b""])
        with pytest.raises(MessageSizeError) as refused:
            counts.add([b"small", b"k" * (longest + 1)])
        return longest, str(refused.value), counts.count([b"k" * longest, b"small"]).tolist(), counts.total()

    for longest, message, found, total in World(2, seed=3, datagram_size=256).run(program):
        assert f"a {longest + 1}-byte key does not fit in a 256-byte datagram" in message
        assert f"strings of up to {longest} bytes" in message
        assert found == [2, 0] and total == 4  # the refused batch sent nothing, not even its small key


def test_bad_batches_are_refused_before_anything_is_sent():
    def program(rail):
        counts = CountingSet(rail, str)
        errors = {}
        for name, batch in {
            "bytes for str": [b"a"],
            "mixed": np.array(["a", b"b"], dtype=object),
            "numbers": np.arange(3),
            "one string": "abc",
            "binary array": pa.array([b"a"]),
            "2-D": np.array([["a"]]),
            "null": pa.array(["a", None]),
        }.items():
            with pytest.raises((TypeError, ValueError)) as error:
                counts.add(batch)
            errors[name] = f"{type(error.value).__name__}: {error.value}"
        return errors, rail.channels.staged(), counts.total()

    ((errors, staged, total),) = World(1, seed=1).run(program)
    assert staged == 0 and total == 0
    assert errors["bytes for str"].startswith("TypeError: CountingSet.add(): keys of type binary")
    assert "null" in errors["null"] and "1-D" in errors["2-D"] and "int64" in errors["numbers"]
    assert "not one str" in errors["one string"] and "binary" in errors["binary array"]
