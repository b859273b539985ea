"""DisjointSet: random unions against a single-process union-find under mpiexec in every flow-control mode (with
backpressure, and once on the Python transport) and in memory (mailrail.testing's World, over seeds); the order
of items that picks the roots; the batch's own components; union(a, a); find of items never named; errors
raised before anything is sent; collectives refused inside handlers."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from containers_support import job_env, load_program, over_seeds, tiny_world
from helpers import mpirun
from mailrail.containers.disjoint_set import DisjointSet, ItemOrder, batch_components
from mailrail.errors import MailRailError
from mailrail.testing import World


def reference_roots(pairs: np.ndarray, count: int) -> np.ndarray:
    """A tiny single-process union-find over 0..count-1: the smallest member of each one's set."""
    parent = list(range(count))

    def root(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for x, y in pairs.tolist():
        rx, ry = root(x), root(y)
        parent[max(rx, ry)] = min(rx, ry)
    return np.array([root(x) for x in range(count)], dtype=np.int64)


# -- under mpiexec ------------------------------------------------------------------------------------------


@pytest.mark.mpi
@pytest.mark.parametrize(
    "dtype, mode, ranks, pools, transport, items, pairs, shape",
    [
        pytest.param("int64", "none", 4, False, None, 1500, 1200, "skewed", marks=pytest.mark.smoke),
        ("int64", "rank", 2, True, None, 1500, 1200, "skewed"),
        ("float64", "node", 4, True, None, 1500, 1200, "skewed"),
        ("bytes12", "adaptive", 3, True, None, 1500, 1200, "uniform"),
        ("unicode3", "rank", 3, False, None, 1500, 1200, "skewed"),
        ("record", "node", 2, False, None, 1500, 1200, "uniform"),
        ("uint8", "adaptive", 4, False, None, 256, 300, "uniform"),  # every uint8: sets merge into one
        ("bytes3", "none", 2, True, None, 1500, 1200, "skewed"),
        ("int16", "adaptive", 4, False, "python", 1500, 1200, "skewed"),
        ("int64", "node", 4, False, None, 8000, 6000, "uniform"),  # a bigger sparse graph: many sets
        ("float32", "none", 1, False, None, 1500, 1200, "skewed"),
    ],
)
def test_disjoint_set_matches_a_single_process_union_find(dtype, mode, ranks, pools, transport, items, pairs, shape):
    env = job_env(mode, pools, transport)
    args = ["--dtype", dtype, "--items", str(items), "--pairs", str(pairs), "--shape", shape]
    result = mpirun(ranks, "disjoint_set_random.py", *args, env=env)
    # The program asserted find, num_sets, size, local and roots against the reference on every rank.
    assert result["first"]["items"] > 0 and result["second"]["items"] >= result["first"]["items"]
    assert result["first"]["sets"] >= 1 and result["records_sent"] > 0
    assert set(result["errors"]) == {"lengths", "dtype", "shape", "find_dtype", "object_dtype"}
    assert result["errors"]["lengths"] == (
        "ValueError: DisjointSet.union(): 3 items in a and 2 in b: union(a, b) pairs a[i] with b[i], so both "
        "must be as long"
    )
    assert result["errors"]["dtype"].startswith("TypeError: DisjointSet.union(): keys of dtype complex128")
    assert result["errors"]["find_dtype"].startswith("TypeError: DisjointSet.find(): keys of dtype complex128")
    if ranks > 1:
        assert result["handler_unions"] > 0  # unions from inside handlers were applied too
        assert result["refused"] > 0
        assert all(
            m.startswith("DisjointSet.num_sets() called from inside a handler") for m in result["refused_messages"]
        )
    if pools and ranks > 1:
        assert result["reserve_failures"] > 0  # backpressure happened


@pytest.mark.mpi
def test_the_batch_example_of_the_docs_runs(tmp_path):
    # The page's example, as written (docs/containers/disjoint-set.md), on two ranks.
    result = mpirun(2, "disjoint_set_example.py")
    assert result == {"roots": [1, 1, 1, 4, 4, 6, 9], "sets": 3, "items": 6}


# -- in memory ----------------------------------------------------------------------------------------------


@over_seeds(
    max_examples=12,
    dtype=st.sampled_from(["int64", "float64", "bytes3", "bytes12", "record"]),
    shape=st.sampled_from(["skewed", "uniform"]),
    datagram_size=st.sampled_from([128, 256, 4096]),
)
def test_disjoint_set_in_memory_over_seeds(seed, size, dtype, shape, datagram_size):
    program = load_program("disjoint_set_random")
    results = tiny_world(size, seed, datagram_size).run(program.exercise, dtype, 200, 160, 4, seed, shape)
    assert len({(r["first"]["sets"], r["second"]["sets"]) for r in results}) == 1


@over_seeds(max_examples=15, count=st.integers(1, 120), waves=st.integers(1, 3))
def test_waves_of_unions_between_collectives_in_memory(seed, size, count, waves):
    """Unions, then find/num_sets/compress, several times: compressed sets merge again correctly."""
    rng = np.random.default_rng(seed)
    batches = [rng.integers(0, count, (int(rng.integers(0, 2 * count)), 2)) for _ in range(waves)]

    def program(rail):
        dset = DisjointSet(rail, np.int64)
        seen = []
        for wave, pairs in enumerate(batches):
            for part in np.array_split(pairs[rail.rank :: rail.size], 2):
                dset.union(part[:, 0], part[:, 1])
            done = np.concatenate(batches[: wave + 1])
            expected = reference_roots(done, count)
            named = np.unique(done)
            assert dset.find(np.arange(count)).tolist() == expected.tolist()
            assert dset.num_sets() == len(np.unique(expected[named]))
            assert dset.size() == len(named)
            if wave % 2 == 0:
                table = dset.roots()
                items, roots = table["item"].to_numpy(), table["root"].to_numpy()
                assert roots.tolist() == expected[items].tolist()
            seen.append(dset.num_sets())
        return seen

    results = tiny_world(size, seed).run(program)
    assert all(result == results[0] for result in results)


def test_union_of_an_item_with_itself_adds_a_set_and_find_adds_nothing():
    def program(rail):
        dset = DisjointSet(rail, np.int64)
        if rail.rank == 0:
            dset.union([5, 7, 5], [5, 7, 5])  # two sets of one item each
        assert dset.num_sets() == 2 and dset.size() == 2
        assert dset.find([5, 7, 8, -3]).tolist() == [5, 7, 8, -3]  # 8 and -3: never named, their own roots
        assert dset.size() == 2  # find added nothing
        if rail.rank == 1:
            dset.union([7], [-3])
        assert dset.find([5, 7, -3]).tolist() == [5, -3, -3]  # -3 < 7: numeric order, negatives included
        dset.union([5], [5])  # already there: nothing changes
        return dset.num_sets(), dset.size()

    assert World(2, seed=3).run(program) == [(2, 3), (2, 3)]


def test_the_root_is_the_smallest_item_whatever_the_order_of_unions():
    pairs = np.array([[9, 8], [8, 7], [30, 9], [7, 2], [100, 30], [4, 5], [5, 3]], dtype=np.uint32)

    def program(rail, order):
        dset = DisjointSet(rail, np.uint32)
        chosen = pairs[order][rail.rank :: rail.size]
        for pair in chosen:  # one pair per call: nothing solved on the sender
            dset.union(pair[:1], pair[1:])
        return dset.find([100, 9, 2, 5, 4, 3, 1]).tolist()

    for seed in range(6):
        order = np.random.default_rng(seed).permutation(len(pairs))
        for result in World(3, seed=seed).run(program, order):
            assert result == [2, 2, 2, 3, 3, 3, 1]


def test_a_batch_is_solved_on_the_sender_one_record_per_item():
    def program(rail):
        dset = DisjointSet(rail, np.int64)
        path = np.arange(1000)
        # 1000 edges of a path, each three times, both ways: 1001 items, one set.
        first = np.concatenate([path, path + 1, path])
        second = np.concatenate([path + 1, path, path + 1])
        dset.union(first, second)
        starts = dset._starts.records_sent
        return starts, dset.num_sets(), dset.find([1000, 500]).tolist()

    [(starts, sets, found)] = World(1, seed=0).run(program)
    assert starts == 1000  # one (0, item) record per item but the smallest, not one per pair
    assert sets == 1 and found == [0, 0]


def test_compress_makes_every_parent_the_root_and_roots_lists_this_ranks_items():
    def program(rail):
        dset = DisjointSet(rail, np.int64)
        for item in range(1 + rail.rank, 200, rail.size):  # one pair per call: chains of walks
            dset.union([200 - item], [199 - item])
        dset.compress()
        table = dset.local()
        items, parents = table["item"].to_numpy(), table["parent"].to_numpy()
        assert (parents == 0).all()
        assert (dset.owner(items) == rail.rank).all()
        table = dset.roots()
        items_again, roots = table["item"].to_numpy(), table["root"].to_numpy()
        assert items_again.tolist() == items.tolist() and (roots == 0).all()
        return len(items)

    assert sum(World(3, seed=5).run(program)) == 200


def test_collectives_are_refused_inside_handlers():
    def program(rail):
        dset = DisjointSet(rail, np.int64)
        refused = []

        def handler(source, records):
            dset.union(records, records + 1)  # asynchronous: allowed
            for name, call in [
                ("find", lambda: dset.find(records)),
                ("num_sets", dset.num_sets),
                ("compress", dset.compress),
                ("roots", dset.roots),
                ("local", dset.local),
                ("size", dset.size),
                ("clear", dset.clear),
            ]:
                with pytest.raises(MailRailError, match=rf"DisjointSet\.{name}\(\) called from inside a handler"):
                    call()
                refused.append(name)

        channel = rail.channels.open(np.int64, handler, "items")
        channel.send_to((rail.rank + 1) % rail.size, np.array([10 * rail.rank]))
        rail.barrier()
        return refused, dset.find([10 * rail.rank + 1]).tolist()

    results = World(2, seed=1).run(program)
    assert results == [(["find", "num_sets", "compress", "roots", "local", "size", "clear"], [0])] + [
        (["find", "num_sets", "compress", "roots", "local", "size", "clear"], [10])
    ]


def test_errors_are_raised_before_anything_is_sent():
    def program(rail):
        dset = DisjointSet(rail, np.int64)
        with pytest.raises(ValueError, match=r"DisjointSet.union\(\): 3 items in a and 2 in b"):
            dset.union([1, 2, 3], [4, 5])
        with pytest.raises(TypeError, match="keys of dtype float64 for a container of dtype int64"):
            dset.union(np.array([1.5]), np.array([2.0]))
        with pytest.raises(ValueError, match=r"must be a 1-D array, got shape \(1, 2\)"):
            dset.union([[1, 2]], [[3, 4]])
        with pytest.raises(TypeError, match=r"DisjointSet.find\(\): keys of dtype float64"):
            dset.find(np.array([1.0]))
        with pytest.raises(TypeError, match=r"DisjointSet.owner\(\): keys of dtype float64"):
            dset.owner(np.array([1.0]))
        with pytest.raises(TypeError, match="fixed-size dtype"):
            DisjointSet(rail, object)
        sent = dset.records_sent + rail.channels.staged()
        return sent, dset.size()

    assert World(2, seed=0).run(program) == [(0, 0), (0, 0)]


def test_unions_of_int32_items_into_an_int64_set_are_cast_safely():
    def program(rail):
        dset = DisjointSet(rail, np.int64)
        dset.union(np.array([3, 4], dtype=np.int32), np.array([4, 5], dtype=np.int8))
        found = dset.find(np.array([5], dtype=np.int16))
        return found.dtype.str, found.tolist()

    assert World(2, seed=2).run(program) == [("<i8", [3]), ("<i8", [3])]


# -- the pieces -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "dtype, values",
    [
        (np.int64, [5, -(2**63), 2**63 - 1, -1, 0, 7]),
        (np.int8, [-128, 127, -1, 0]),
        (np.uint64, [2**64 - 1, 0, 2**63, 5]),
        (np.bool_, [True, False]),
        (np.float64, [1.5, -0.0, 0.0, -np.inf, np.inf, -2.5, 1e-300, -1e-300]),
        (np.float16, [1.5, -0.0, 0.0, -np.inf, np.inf, -2.5]),
        ("datetime64[s]", ["2020-01-01", "1960-05-05", "NaT", "2030-12-31"]),
        ("S5", [b"b", b"a\xff", b"a", b"", b"a\x00b", b"\xff\xff"]),
        ("S11", [b"b", b"a\xff", b"a", b"", b"a\x00b", b"\xff" * 11]),
        ("U2", ["b", "a\u3000", "a", "", "\u00e9", "ab"]),
        ("U3", ["b", "a\u3000", "a", "", "\u00e9", "ab"]),
    ],
)
def test_ordinals_round_trip_and_follow_the_items_order(dtype, values):
    items = np.array(values, dtype=dtype)
    order = ItemOrder(items.dtype)
    ordinals = order.ordinals(items)
    assert order.items(ordinals).tobytes() == items.tobytes()
    if items.dtype.kind == "f":  # the IEEE total order: -0.0 before 0.0
        expected = sorted(range(len(values)), key=lambda i: (float(items[i]), np.signbit(items[i]) == 0))
    elif items.dtype.kind == "M":
        expected = sorted(range(len(values)), key=lambda i: items[i].astype(np.int64))
    elif items.dtype.kind == "S":
        expected = sorted(range(len(values)), key=lambda i: items[i].tobytes())
    else:
        expected = sorted(range(len(values)), key=lambda i: items[i].item())
    assert np.argsort(ordinals, kind="stable").tolist() == expected


def test_records_are_ordered_by_their_bytes_with_padding_ignored():
    dtype = np.dtype([("tag", np.uint8), ("value", np.uint32)], align=True)  # 3 padding bytes
    items = np.zeros(3, dtype=dtype)
    items["tag"] = [2, 1, 1]
    items["value"] = [0, 9, 3]
    dirty = items.copy()
    dirty.view(np.uint8).reshape(3, 8)[:, 1:4] = 0xAB  # garbage in the padding: the same items
    order = ItemOrder(dtype)
    assert np.array_equal(order.ordinals(items), order.ordinals(dirty))
    # By bytes from the first: tag first; value's little-endian bytes then (3 < 9 either way here).
    assert np.argsort(order.ordinals(items)).tolist() == [2, 1, 0]


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), count=st.integers(1, 300))
def test_batch_components_are_a_union_finds_smallest_members(seed, count):
    rng = np.random.default_rng(seed)
    pairs = rng.integers(0, count, (int(rng.integers(0, 2 * count)), 2))
    smallest = batch_components(pairs[:, 0].astype(np.intp), pairs[:, 1].astype(np.intp), count)
    assert smallest.tolist() == reference_roots(pairs, count).tolist()


def test_sparse_and_dense_batches_give_the_same_sets():
    # Integers spanning little more than the batch are numbered without a sort; wide ones are sorted.
    def program(rail, scale):
        dset = DisjointSet(rail, np.int64)
        pairs = np.array([[1, 2], [3, 4], [2, 3], [10, 11]]) * scale
        dset.union(pairs[:, 0], pairs[:, 1])
        return dset.find(np.array([4, 2, 11, 12]) * scale).tolist(), dset.num_sets()

    assert World(1).run(program, 1) == [([1, 1, 10, 12], 2)]
    assert World(1).run(program, 10**15) == [([10**15, 10**15, 10 * 10**15, 12 * 10**15], 2)]
