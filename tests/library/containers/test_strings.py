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
from mailrail.containers import Bag, CountingSet, Map, Set, varkeys
from mailrail.containers.counting_set import StringCountingSet
from mailrail.errors import MessageSizeError
from mailrail.testing import World


@pytest.fixture(autouse=True, params=["compiled", "python"])
def implementation(request, monkeypatch):
    """Every test on the compiled hash, table and cache, and again on their Python references."""
    if request.param == "python":
        monkeypatch.setattr(varkeys, "hash_bytes", varkeys.hash_bytes_numpy)
        monkeypatch.setattr(varkeys, "BytesTable", varkeys.BytesTablePython)
        monkeypatch.setattr(varkeys, "longest", varkeys.longest_numpy)
        monkeypatch.setattr(varkeys, "HotStrings", varkeys.HotStringsPython)
    return request.param


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


@pytest.mark.parametrize("slots, leaving", [(1, 1), (2, 3), (8, 1000)])
def test_a_small_sender_cache_evicts_and_sends_early_yet_counts_exactly(monkeypatch, slots, leaving):
    # Few slots: strings meet others in their slot, leave at once or evict the slot's string with its count, and the
    # leaving records go mid-stream; long strings (over 40 bytes) never take a slot.
    monkeypatch.setattr(StringCountingSet, "hot_slots", slots)
    monkeypatch.setattr(StringCountingSet, "leaving_max", leaving)
    extra = ["long " * 10, "longer " * 10] * 5 + [f"w{i % 7}" for i in range(60)]
    check_counting(tiny_world(3, seed=slots).run(counting_program, slots, str, extra), str)


def test_strings_that_never_repeat_go_plain_and_count_exactly():
    def program(rail):
        counts = CountingSet(rail, str)
        words = [f"{rail.rank}-{i}" for i in range(400)]
        for start in range(0, len(words), 20):
            counts.add(words[start : start + 20])
        plain = counts._plain_adds > 0  # the first batch combined nothing: the next ones went plain
        return {"plain": plain, "total": counts.total(), "size": counts.size()}

    for result in tiny_world(2, seed=0).run(program):
        assert result == {"plain": True, "total": 800, "size": 800}


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


def set_program(rail, seed, kind):
    rng = np.random.default_rng([seed, rail.rank])
    words = as_kind(WORDS, kind)
    inserted = [words[i] for i in rng.integers(0, len(words), 40)]
    erased = [words[i] for i in rng.integers(0, len(words), 3)]
    keys = Set(rail, kind)
    for batch in batches_of(inserted, kind):
        keys.insert(batch)
    rail.barrier()
    keys.erase(erased)
    asked = words + as_kind(["absent"], kind)
    return {
        "inserted": inserted,
        "erased": erased,
        "contains": keys.contains(asked).tolist(),
        "size": keys.size(),
        "local": keys.local()["key"].to_pylist(),
        "owners": keys.owner(keys.local()["key"]).tolist(),
    }


@pytest.mark.parametrize("kind", [str, bytes])
@pytest.mark.parametrize("size", [1, 3])
def test_a_set_of_strings_against_a_python_set(kind, size):
    results = tiny_world(size, seed=size).run(set_program, 3, kind)
    model = {word for result in results for word in result["inserted"]}
    model -= {word for result in results for word in result["erased"]}
    asked = as_kind(WORDS + ["absent"], kind)
    for rank, result in enumerate(results):
        assert result["contains"] == [word in model for word in asked] and result["size"] == len(model)
        assert set(result["owners"]) <= {rank}
    assert sorted(word for result in results for word in result["local"]) == sorted(model)


def map_program(rail, seed, kind):
    rng = np.random.default_rng([seed, rail.rank])
    words = as_kind(WORDS, kind)
    keys = [words[i] for i in rng.integers(0, len(words), 60)]
    values = rng.integers(-50, 50, len(keys))
    sums = Map(rail, kind, np.int64)
    mins = Map(rail, kind, np.int64)
    firsts = Map(rail, kind, np.int64)
    sums.reduce(pa.array(keys), values, "add")
    mins.reduce(np.array(keys, dtype=object), values, "min")
    if rail.rank == 0:
        firsts.insert(keys, values)
        firsts.assign(keys[:1], [1000])
    rail.barrier()
    sums.erase(keys[:2])
    asked = words + as_kind(["absent"], kind)
    return {
        "keys": keys,
        "values": values.tolist(),
        "sums": [v.tolist() for v in sums.get(asked)],
        "mins": [v.tolist() for v in mins.get(asked)],
        "firsts": [v.tolist() for v in firsts.get(asked)],
        "local": sums.local().to_pydict(),
        "size": mins.size(),
    }


@pytest.mark.parametrize("kind", [str, bytes])
@pytest.mark.parametrize("size", [1, 2, 4])
def test_a_map_of_string_keys_against_a_python_dict(kind, size):
    results = tiny_world(size, seed=size).run(map_program, 5, kind)
    sums, mins = collections.Counter(), {}
    for result in results:
        for key, value in zip(result["keys"], result["values"]):
            sums[key] += value
            mins[key] = min(mins.get(key, value), value)
    for result in results:  # every rank erased its first two keys
        for key in result["keys"][:2]:
            sums.pop(key, None)
    firsts = {}
    for key, value in zip(results[0]["keys"], results[0]["values"]):
        firsts.setdefault(key, value)
    firsts[results[0]["keys"][0]] = 1000
    asked = as_kind(WORDS + ["absent"], kind)
    for result in results:
        assert result["sums"] == [[sums.get(k, 0) for k in asked], [k in sums for k in asked]]
        assert result["mins"] == [[mins.get(k, 0) for k in asked], [k in mins for k in asked]]
        assert result["firsts"] == [[firsts.get(k, 0) for k in asked], [k in firsts for k in asked]]
        assert result["size"] == len(mins)
    merged = {}
    for result in results:
        merged.update(zip(result["local"]["key"], result["local"]["value"]))
    assert merged == dict(sums)


def bag_program(rail, seed, kind):
    rng = np.random.default_rng([seed, rail.rank])
    words = as_kind(WORDS, kind)
    items = [words[i] for i in rng.integers(0, len(words), 50 + 30 * rail.rank)]
    bag = Bag(rail, kind)
    for batch in batches_of(items, kind):
        bag.insert(batch)
    bag.local_insert(items[:5])
    moved = bag.rebalance()
    counts = Map(rail, kind, np.int64)
    bag.reduce_by_key(counts, "add")
    counted = CountingSet(rail, kind)
    bag.collect(counted)
    whole = bag.gather(0)
    return {
        "items": items + items[:5],
        "size": bag.size(),
        "share": len(bag.local()),
        "moved": moved,
        "counts": [v.tolist() for v in counts.get(words)],
        "counted": counted.count(words).tolist(),
        "whole": None if whole is None else whole["item"].to_pylist(),
    }


@pytest.mark.parametrize("kind", [str, bytes])
@pytest.mark.parametrize("size", [1, 3])
def test_a_bag_of_strings_rebalances_reduces_by_key_collects_and_gathers(kind, size):
    results = tiny_world(size, seed=size).run(bag_program, 11, kind)
    model = collections.Counter(item for result in results for item in result["items"])
    total = sum(model.values())
    words = as_kind(WORDS, kind)
    for rank, result in enumerate(results):
        assert result["size"] == total and result["share"] in (total // size, total // size + 1)
        assert result["counts"] == [[model[w] for w in words], [model[w] > 0 for w in words]]
        assert result["counted"] == [model[w] for w in words]
        if rank == 0:
            assert collections.Counter(result["whole"]) == model
        else:
            assert result["whole"] is None


def test_collect_and_gather_of_numbers_and_strings_agree_with_their_models():
    def program(rail):
        counts = CountingSet(rail, str)
        counts.add(["a", "b", "a"] * (rail.rank + 1))
        seen = Set(rail, str)
        totals = Map(rail, str, np.int64)
        rail.barrier()
        counts.collect(seen)
        counts.collect(totals)
        numbers = CountingSet(rail, np.int64)
        numbers.add(np.arange(rail.rank + 3))
        into = Map(rail, np.int64, np.int64)
        rail.barrier()
        numbers.collect(into)
        return (
            seen.gather(1 % rail.size),
            totals.gather(0),
            into.gather(0),
            numbers.gather(0),
        )

    results = World(3, seed=2).run(program)
    seen, totals, into, numbers = results[1][0], results[0][1], results[0][2], results[0][3]
    assert sorted(seen["key"].to_pylist()) == ["a", "b"]
    assert dict(zip(totals["key"].to_pylist(), totals["value"].to_pylist())) == {"a": 12, "b": 6}
    expected = collections.Counter(n for rank in range(3) for n in range(rank + 3))
    assert dict(zip(into["key"].to_pylist(), into["value"].to_pylist())) == expected
    assert dict(zip(numbers["key"].to_pylist(), numbers["count"].to_pylist())) == expected
    assert all(result[1] is None and result[2] is None for result in results[1:])


def add_length(keys, values, extra):
    """A visit: each string's value grows by its length, plus *extra*."""
    values += np.array([len(key) for key in keys.to_pylist()], dtype=values.dtype) + extra


def test_visits_of_a_map_of_string_keys_see_each_key_as_often_as_it_was_visited():
    def program(rail):
        lengths = Map(rail, str, np.int64)
        words = WORDS * 30 + ["y" * 150]  # many chunks of calls: tiny datagrams
        lengths.visit(words, add_length, 1)
        lengths.visit_if_contains(["absent", "a"], add_length, 0)
        rail.barrier()
        values, found = lengths.get(WORDS + ["y" * 150, "absent"])
        return values.tolist(), found.tolist()

    size = 3
    for values, found in tiny_world(size, seed=4, datagram_size=512).run(program):
        expected = [size * 30 * (len(w) + 1) + (size * len(w) if w == "a" else 0) for w in WORDS]
        assert values == expected + [size * 151, 0] and found == [True] * (len(WORDS) + 1) + [False]
