"""Maps to strings of any length (``Map(rail, key_dtype, str)``, ``Map(rail, str, str)``, and with ``bytes``) and
disjoint sets of strings (``DisjointSet(rail, str)``) in mailrail.testing's World, several ranks and seeds, tiny
datagrams (backpressure): each against a plain Python model (a dict, a union-find of its own).  Random strings
(empty, long, non-ASCII, NULs), every input type, the longest value (pair, item) that fits and one byte more
(refused, naming both sizes); the value column alone against a dict."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from containers_support import tiny_world
from mailrail.channels import Blobs
from mailrail.containers import CountingSet, DisjointSet, Map
from mailrail.containers.varvalues import StringColumn, extremes, less
from mailrail.errors import MessageSizeError
from mailrail.testing import World

#: Strings the tests draw from: empty, non-ASCII, NULs, and longer ones sharing their first 16 bytes.
WORDS = ["", "a", "b", "über", "東京", "a\0b", "x" * 16 + "1", "x" * 16 + "2", "x" * 16 + "22", "ß" * 30]

texts = st.text(max_size=40)


def as_kind(words: list[str], kind: type) -> list:
    return list(words) if kind is str else [word.encode() for word in words]


def given_as(words: list, kind: type, turn: int):
    """*words* as the input type of this *turn*: a list, a pyarrow array of either width, a numpy object array."""
    arrow = [pa.string(), pa.large_string()] if kind is str else [pa.binary(), pa.large_binary()]
    return [list(words), pa.array(words, arrow[0]), pa.array(words, arrow[1]), np.array(words, dtype=object)][turn % 4]


def order_key(word: str | bytes) -> bytes:
    """The containers' order of strings: by their bytes (UTF-8 for str)."""
    return word.encode() if isinstance(word, str) else word


# -- Map(rail, key_dtype, str) ---------------------------------------------------------------------------------------


def fixed_key_program(rail, seed, kind, words):
    rng = np.random.default_rng([seed, rail.rank])
    strings = as_kind(words, kind)
    keys = rng.integers(0, 30, 80)
    values = [strings[i] for i in rng.integers(0, len(strings), len(keys))]
    largest, smallest, firsts = Map(rail, np.int64, kind), Map(rail, np.int64, kind), Map(rail, np.int64, kind)
    for turn, start in enumerate(range(0, len(keys), 20)):
        largest.reduce(keys[start : start + 20], given_as(values[start : start + 20], kind, turn), "max")
        smallest.reduce(keys[start : start + 20], given_as(values[start : start + 20], kind, turn + 1), np.minimum)
    if rail.rank == 0:
        firsts.insert(keys, values)
    rail.barrier()
    if rail.rank == 0:
        firsts.assign(keys[:5], strings[-1])  # one value for every key
    erased = keys[-3:]
    largest.erase(erased)
    asked = np.arange(-1, 31)
    got = {
        name: [column.to_pylist() if isinstance(column, pa.Array) else column.tolist() for column in m.get(asked)]
        for name, m in (("largest", largest), ("smallest", smallest), ("firsts", firsts))
    }
    return {
        "keys": keys.tolist(),
        "values": values,
        "erased": erased.tolist(),
        "got": got,
        "size": largest.size(),
        "local": largest.local(),
        "whole": smallest.gather(0),
        "type": largest.local().schema.field("value").type,
        "last": strings[-1],
    }


def check_fixed_keys(results, kind):
    largest, smallest, firsts = {}, {}, {}
    for result in results:
        for key, value in zip(result["keys"], result["values"]):
            largest[key] = max(largest.get(key, value), value, key=order_key)
            smallest[key] = min(smallest.get(key, value), value, key=order_key)
    for result in results:
        for key in result["erased"]:
            largest.pop(key, None)
    for key, value in zip(results[0]["keys"], results[0]["values"]):
        firsts.setdefault(key, value)
    for key in results[0]["keys"][:5]:
        firsts[key] = results[0]["last"]
    empty = "" if kind is str else b""
    asked = list(range(-1, 31))
    for rank, result in enumerate(results):
        for name, model in (("largest", largest), ("smallest", smallest), ("firsts", firsts)):
            assert result["got"][name] == [[model.get(k, empty) for k in asked], [k in model for k in asked]], name
        assert result["size"] == len(largest)
        assert result["type"] == (pa.string() if kind is str else pa.binary())
        assert result["local"].column_names == ["key", "value"]
        if rank:
            assert result["whole"] is None
    merged = {}
    for result in results:
        local = result["local"].to_pydict()
        assert not set(local["key"]) & set(merged)
        merged.update(zip(local["key"], local["value"]))
    assert merged == largest
    whole = results[0]["whole"].to_pydict()
    assert dict(zip(whole["key"], whole["value"])) == smallest


@pytest.mark.parametrize("kind", [str, bytes])
@pytest.mark.parametrize("size", [1, 2, 4])
def test_a_map_of_numbers_to_strings_against_a_python_dict(kind, size):
    check_fixed_keys(tiny_world(size, seed=size, datagram_size=512).run(fixed_key_program, 3, kind, WORDS), kind)


@settings(max_examples=12, deadline=None)
@given(size=st.integers(1, 4), seed=st.integers(0, 2**16), words=st.lists(texts, min_size=1, max_size=40))
def test_a_map_of_numbers_to_random_strings_equals_a_dict(size, seed, words):
    check_fixed_keys(tiny_world(size, seed, datagram_size=512).run(fixed_key_program, seed, str, words), str)


# -- Map(rail, str, str) and friends ---------------------------------------------------------------------------------


def string_pairs_program(rail, seed, key_kind, value_kind, words):
    rng = np.random.default_rng([seed, rail.rank])
    keys_from, values_from = as_kind(words, key_kind), as_kind(words, value_kind)
    keys = [keys_from[i] for i in rng.integers(0, len(keys_from), 60)]
    values = [values_from[i] for i in rng.integers(0, len(values_from), len(keys))]
    largest, firsts, lasts = (Map(rail, key_kind, value_kind) for _ in range(3))
    for turn, start in enumerate(range(0, len(keys), 15)):
        batch = slice(start, start + 15)
        largest.reduce(given_as(keys[batch], key_kind, turn), given_as(values[batch], value_kind, turn + 1), "max")
    if rail.rank == 0:
        firsts.insert(given_as(keys, key_kind, 1), values)
        lasts.assign(keys, given_as(values, value_kind, 2))
    rail.barrier()
    largest.erase(keys[:2])
    asked = keys_from + as_kind(["never drawn"], key_kind)
    got = {}
    for name, m in (("largest", largest), ("firsts", firsts), ("lasts", lasts)):
        found_values, found = m.get(asked)
        got[name] = [found_values.to_pylist(), found.tolist()]
    return {
        "keys": keys,
        "values": values,
        "got": got,
        "size": largest.size(),
        "local": largest.local().to_pydict(),
        "owners": largest.owner(largest.local()["key"]).tolist(),
        "whole": lasts.gather(rail.size - 1),
    }


def check_string_pairs(results, key_kind, value_kind, words):
    largest, firsts, lasts = {}, {}, {}
    for result in results:
        for key, value in zip(result["keys"], result["values"]):
            largest[key] = max(largest.get(key, value), value, key=order_key)
    for result in results:
        for key in result["keys"][:2]:
            largest.pop(key, None)
    for key, value in zip(results[0]["keys"], results[0]["values"]):
        firsts.setdefault(key, value)
        lasts[key] = value
    empty = value_kind()
    asked = as_kind(words, key_kind) + as_kind(["never drawn"], key_kind)
    for rank, result in enumerate(results):
        for name, model in (("largest", largest), ("firsts", firsts), ("lasts", lasts)):
            assert result["got"][name] == [[model.get(k, empty) for k in asked], [k in model for k in asked]], name
        assert result["size"] == len(largest)
        assert set(result["owners"]) <= {rank}
    merged = {}
    for result in results:
        merged.update(zip(result["local"]["key"], result["local"]["value"]))
    assert merged == largest
    whole = results[-1]["whole"]
    assert whole.schema.types == [
        pa.string() if key_kind is str else pa.binary(),
        pa.string() if value_kind is str else pa.binary(),
    ]
    assert dict(zip(whole["key"].to_pylist(), whole["value"].to_pylist())) == lasts


@pytest.mark.parametrize("key_kind, value_kind", [(str, str), (bytes, bytes), (str, bytes), (bytes, str)])
@pytest.mark.parametrize("size", [1, 3])
def test_a_map_of_strings_to_strings_against_a_python_dict(key_kind, value_kind, size):
    results = tiny_world(size, seed=size, datagram_size=512).run(string_pairs_program, 5, key_kind, value_kind, WORDS)
    check_string_pairs(results, key_kind, value_kind, WORDS)


@settings(max_examples=12, deadline=None)
@given(size=st.integers(1, 4), seed=st.integers(0, 2**16), words=st.lists(texts, min_size=1, max_size=40))
def test_a_map_of_random_strings_to_random_strings_equals_a_dict(size, seed, words):
    results = tiny_world(size, seed, datagram_size=512).run(string_pairs_program, seed, str, str, words)
    check_string_pairs(results, str, str, words)


def tag_visit(keys, values, tag):
    """A visit: each value gets *tag* appended, once per visit (the values come as a pyarrow array)."""
    assert isinstance(keys, pa.Array) or isinstance(keys, np.ndarray)
    return [value + tag for value in values.to_pylist()]


def leave_as_is(keys, values):
    """A visit that changes nothing (returns None)."""


@pytest.mark.parametrize("key_kind", [np.int64, str])
def test_visits_of_string_values_append_once_per_visit_and_insert_absent_keys_empty(key_kind):
    def program(rail):
        tags = Map(rail, key_kind, str)
        keys = (list(range(20)) if key_kind is np.int64 else [f"key {i}" for i in range(20)]) * 3  # repeated keys
        absent = 99 if key_kind is np.int64 else "absent"
        tags.visit(keys, tag_visit, "ü")
        tags.visit(keys[:5], leave_as_is)
        tags.visit_if_contains([*keys[:1], absent], tag_visit, "!")
        rail.barrier()
        values, found = tags.get([*keys[:20], absent])
        return values.to_pylist(), found.tolist()

    size = 3
    for values, found in tiny_world(size, seed=2, datagram_size=512).run(program):
        # Each visit appended its tag once; visits in flight apply in any order.
        assert sorted(values[0]) == sorted("ü" * 3 * size + "!" * size)
        assert values[1:] == ["ü" * 3 * size] * 19 + [""] and found == [True] * 20 + [False]


def one_text(keys, values):
    """A visit returning one str value, whatever the number of keys."""
    return ["text"]


def test_a_visit_returning_values_of_the_wrong_type_or_count_is_named():
    def program(rail):  # one rank: a visit runs inside the call that sends it
        raw, text = Map(rail, np.int64, bytes), Map(rail, np.int64, str)
        errors = []
        for target, keys in ((raw, [1]), (text, [1, 2])):
            with pytest.raises((TypeError, ValueError)) as refused:
                target.visit(keys, one_text)
            errors.append(str(refused.value))
        return errors

    ((wrong_type, wrong_count),) = World(1, seed=1).run(program)
    assert wrong_type.startswith("Map.visit(): ") and "one_text: returned values of type string" in wrong_type
    assert "returned 1 values for 2 keys" in wrong_count


def test_reductions_of_min_and_max_in_flight_together_and_refused_ops():
    def program(rail):
        words = Map(rail, np.int64, str)
        words.reduce([1, 1, 2], ["m", "z", "m"], "max")
        words.reduce([1, 2, 2], ["a", "b", "a"], "min")
        errors = {}
        for op in ("add", np.multiply):
            with pytest.raises(TypeError) as refused:
                words.reduce([1], ["x"], op)
            errors[getattr(op, "__name__", op)] = str(refused.value)
        values, _ = words.get([1, 2])
        return values.to_pylist(), errors

    for values, errors in World(2, seed=4).run(program):
        # Every reduction arrives at the owner as one of two, in any order; the ones of one key differ by op, so
        # the result depends on the order: whichever applies, it is one of the outcomes of some order.
        assert values[0] in ("a", "z") and values[1] in ("a", "m")
        assert "op add does not apply to values of str" in errors["add"] and "'min' or 'max'" in errors["add"]
        assert "op multiply" in errors["multiply"]


def test_values_are_given_as_any_batch_or_one_string_and_bad_ones_are_refused_before_sending():
    def program(rail):
        values = Map(rail, np.int64, str)
        values.assign(np.arange(5), np.array(["a", "bb", "", "über", "東"]))  # numpy U
        values.insert([5, 6], "same")
        values.assign([7], pa.chunked_array([pa.array(["chunked"])]))
        errors = {}
        for name, batch in {
            "bytes for str": [b"a"],
            "count": ["a", "b", "c"],
            "numbers": np.arange(2),
            "null": pa.array(["a", None]),
            "one bytes": b"ab",
        }.items():
            with pytest.raises((TypeError, ValueError)) as error:
                values.assign([1, 2], batch)
            errors[name] = f"{type(error.value).__name__}: {error.value}"
        staged = rail.channels.staged()
        got, found = values.get(np.arange(9))
        return got.to_pylist(), found.tolist(), errors, staged

    ((got, found, errors, staged),) = World(1, seed=1).run(program)
    assert got == ["a", "bb", "", "über", "東", "same", "same", "chunked", ""] and found == [True] * 8 + [False]
    assert staged == 0
    assert errors["count"].startswith("ValueError: Map.assign(): 2 keys but 3 values")
    assert errors["one bytes"] == "TypeError: Map.assign(): a bytes value for a Map of str values"
    assert "null" in errors["null"] and "binary" in errors["bytes for str"]


def test_collect_into_a_map_of_strings_assigns_and_counts_are_refused():
    def program(rail):
        source = Map(rail, str, str)
        source.assign([f"k{rail.rank}", "shared"], [f"v{rail.rank}", "same"])
        into = Map(rail, str, str)
        counts = CountingSet(rail, str)
        counts.add(["a"])
        rail.barrier()
        source.collect(into)
        with pytest.raises(TypeError, match="counts do not reduce into strings"):
            counts.collect(into)
        whole = into.gather(0)
        return None if whole is None else dict(zip(whole["key"].to_pylist(), whole["value"].to_pylist()))

    results = World(3, seed=5).run(program)
    assert results[0] == {"k0": "v0", "k1": "v1", "k2": "v2", "shared": "same"}
    assert results[1:] == [None, None]


def test_the_longest_value_that_fits_goes_and_one_byte_more_is_refused_naming_both_sizes():
    def program(rail):
        values = Map(rail, np.int64, bytes)
        longest = values._longest_string
        values.assign([1, 2], [b"v" * longest, b""])
        with pytest.raises(MessageSizeError) as refused:
            values.assign([3, 4], [b"small", b"v" * (longest + 1)])
        got, found = values.get([1, 2, 3])
        return longest, str(refused.value), [len(v) for v in got.to_pylist()], found.tolist()

    for longest, message, lengths, found in World(2, seed=3, datagram_size=256).run(program):
        assert f"a {longest + 1}-byte value does not fit in a 256-byte datagram" in message
        assert f"strings of up to {longest} bytes" in message
        assert lengths == [longest, 0, 0] and found == [True, True, False]  # the refused batch sent nothing


def test_the_longest_key_and_value_together_that_fit_go_and_one_byte_more_is_refused_naming_the_sizes():
    def program(rail):
        pairs = Map(rail, bytes, bytes)
        together = pairs._longest_pair
        key = b"k" * 10
        pairs.insert([key], [b"v" * (together - 10)])
        with pytest.raises(MessageSizeError) as refused:
            pairs.insert([b"other"], [b"v" * (together - 4)])
        got, _ = pairs.get([key, b"other"])
        return together, str(refused.value), [len(v) for v in got.to_pylist()]

    for together, message, lengths in World(2, seed=3, datagram_size=256).run(program):
        assert f"a 5-byte key with its {together - 4}-byte value ({together + 1} bytes)" in message
        assert f"in a 256-byte datagram, which takes a key and its value of up to {together} bytes" in message
        assert lengths == [together - 10, 0]


# -- DisjointSet(rail, str) -----------------------------------------------------------------------------------------


def reference_roots(pairs: list[tuple], items: list) -> dict:
    """A single-process union-find of *pairs*: each item's root, the smallest item of its set by bytes."""
    parent = {item: item for item in items}

    def root(x):
        while parent[x] != x:
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = root(a), root(b)
        if ra != rb:
            low, high = sorted((ra, rb), key=order_key)
            parent[high] = low
    return {item: root(item) for item in items}


def disjoint_set_program(rail, seed, kind, words, waves):
    rng = np.random.default_rng([seed, rail.rank])
    strings = as_kind(words, kind)
    sets = DisjointSet(rail, kind)
    pairs = []
    for wave in range(waves):
        count = int(rng.integers(0, 12))
        a = [strings[i] for i in rng.integers(0, len(strings), count)]
        b = [strings[i] for i in rng.integers(0, len(strings), count)]
        sets.union(given_as(a, kind, wave), given_as(b, kind, wave + 1))
        pairs += zip(a, b)
        if wave % 2:
            sets.compress()
    asked = strings + as_kind(["never named"], kind)
    roots = sets.find(asked)
    return {
        "pairs": pairs,
        "roots": roots.to_pylist(),
        "type": roots.type,
        "sets": sets.num_sets(),
        "size": sets.size(),
        "local": sets.local(),
        "owned": sets.roots(),
        "whole": sets.gather(0),
    }


def check_disjoint_set(results, kind, words):
    pairs = [pair for result in results for pair in result["pairs"]]
    named = sorted({item for pair in pairs for item in pair}, key=order_key)
    model = reference_roots(pairs, named)
    asked = as_kind(words, kind) + as_kind(["never named"], kind)
    expected = [model.get(item, item) for item in asked]
    for rank, result in enumerate(results):
        assert result["roots"] == expected
        assert result["type"] == (pa.string() if kind is str else pa.binary())
        assert result["size"] == len(named)
        assert result["sets"] == len(set(model.values()))
        local = result["local"].to_pydict()
        assert all(order_key(p) <= order_key(i) for i, p in zip(local["item"], local["parent"]))
        owned = result["owned"].to_pydict()
        assert dict(zip(owned["item"], owned["root"])) == {item: model[item] for item in owned["item"]}
        if rank:
            assert result["whole"] is None
    whole = results[0]["whole"].to_pydict()
    assert dict(zip(whole["item"], whole["root"])) == model and len(whole["item"]) == len(named)


@pytest.mark.parametrize("kind", [str, bytes])
@pytest.mark.parametrize("size", [1, 2, 4])
def test_a_disjoint_set_of_strings_against_a_single_process_union_find(kind, size):
    results = tiny_world(size, seed=size, datagram_size=512).run(disjoint_set_program, 7, kind, WORDS, 6)
    check_disjoint_set(results, kind, WORDS)


@settings(max_examples=15, deadline=None)
@given(
    size=st.integers(1, 4),
    seed=st.integers(0, 2**16),
    words=st.lists(texts, min_size=1, max_size=30, unique=True),
    waves=st.integers(1, 5),
)
def test_a_disjoint_set_of_random_strings_equals_a_union_find(size, seed, words, waves):
    results = tiny_world(size, seed, datagram_size=512).run(disjoint_set_program, seed, str, words, waves)
    check_disjoint_set(results, str, words)


def test_a_union_of_an_item_with_itself_adds_it_and_the_root_is_the_smallest_by_bytes():
    def program(rail):
        sets = DisjointSet(rail, str)
        sets.union(["lone"], ["lone"])
        sets.union(["z", "ü", "a\0"], ["ü", "é", "a"])  # é (c3 a9) before ü (c3 bc), after z; "a" before "a\0"
        return sets.find(["lone", "z", "ü", "é", "a\0", "a"]).to_pylist(), sets.num_sets(), sets.size()

    for roots, sets, size in World(3, seed=1).run(program):
        assert roots == ["lone", "z", "z", "z", "a", "a"] and sets == 3 and size == 6


def test_the_longest_item_that_fits_goes_and_one_byte_more_is_refused_naming_both_sizes():
    def program(rail):
        sets = DisjointSet(rail, bytes)
        longest = sets.longest_item
        sets.union([b"i" * longest], [b"j" * longest])
        with pytest.raises(MessageSizeError) as refused:
            sets.union([b"a"], [b"i" * (longest + 1)])
        return longest, str(refused.value), sets.find([b"j" * longest, b"a"]).to_pylist(), sets.size()

    for longest, message, roots, size in World(2, seed=3, datagram_size=256).run(program):
        assert f"a {longest + 1}-byte item does not fit in a 256-byte datagram" in message
        assert f"strings of up to {longest} bytes" in message
        assert roots == [b"i" * longest, b"a"] and size == 2


def test_clear_forgets_every_string_item():
    def program(rail):
        sets = DisjointSet(rail, str)
        sets.union(["a", "b"], ["c", "d"])
        sets.clear()
        sets.union(["x"], ["y"])
        return sets.size(), sets.find(["a", "y"]).to_pylist()

    assert World(2, seed=2).run(program) == [(2, ["a", "x"])] * 2


# -- the value column and the order of strings ---------------------------------------------------------------------


def packed(strings: list[bytes]) -> Blobs:
    return Blobs.of(pa.array(strings, pa.binary()))


@settings(max_examples=40, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.booleans(), st.lists(st.tuples(st.integers(0, 40), st.binary(max_size=300)), max_size=30)),
        max_size=20,
    )
)
def test_a_string_column_holds_what_a_dict_holds_through_writes_erasures_and_compactions(steps):
    column = StringColumn(capacity=4)
    column.compact_floor = 64  # compactions in small examples too
    model: list[bytes] = []
    for erase, writes in steps:
        if erase and model:  # the table's erasure: the last entries move into the holes
            gone = sorted({index % len(model) for index, _ in writes})
            held, size = len(model), len(model) - len(gone)
            kept = [i for i in range(held) if i not in gone]
            moved_to = np.array([i for i in gone if i < size], dtype=np.int64)
            moved_from = np.array([i for i in kept if i >= size], dtype=np.int64)
            column.erase(held, size, moved_from, moved_to)
            for to, source in zip(moved_to.tolist(), moved_from.tolist()):
                model[to] = model[source]
            del model[size:]
            continue
        size = max([len(model)] + [index + 1 for index, _ in writes])
        column.fit(size)
        model += [b""] * (size - len(model))
        last = {index: value for index, value in writes}  # distinct indices
        column.set(np.array(list(last), dtype=np.int64), packed(list(last.values())))
        for index, value in last.items():
            model[index] = value
        assert column.live == sum(map(len, model)) and len(column) == len(model)
        assert column.garbage <= max(column.live, column.compact_floor)
    got = column.get(np.array([*range(len(model)), -1], dtype=np.int64))
    assert got.arrow(pa.binary()).to_pylist() == [*model, b""]


@settings(max_examples=40, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(0, 5), st.text(max_size=8)), min_size=1, max_size=40))
def test_less_and_extremes_follow_the_order_of_utf8_bytes(pairs):
    groups = np.array([group for group, _ in pairs])
    strings = [text.encode() for _, text in pairs]
    values = packed(strings)
    assert less(values, packed(strings[::-1])).tolist() == [a < b for a, b in zip(strings, strings[::-1])]
    for largest in (False, True):
        found, positions = extremes(groups, values, largest)
        choose = max if largest else min
        expected = {g: choose(s for h, s in zip(groups.tolist(), strings) if h == g) for g in set(groups.tolist())}
        assert found.tolist() == sorted(expected)
        assert [strings[p] for p in positions.tolist()] == [expected[g] for g in sorted(expected)]
