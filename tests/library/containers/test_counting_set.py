"""CountingSet: every operation against a numpy reference, under mpiexec in every flow-control mode (with
backpressure) and in memory (mailrail.testing's World, over seeds); errors; pending adds at finalize()."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from containers_support import MPI_RUNS, SCALE, assert_staged, assert_staged_in_memory, job_env, load_program
from helpers import mpirun
from mailrail.containers import counting_set
from mailrail.containers.counting_set import CountingSet
from mailrail.containers.hot import split_hot_numpy
from mailrail.containers.keys import byte_order, canonical, numpy_column
from mailrail.testing import World

# -- under mpiexec ------------------------------------------------------------------------------------------------


@pytest.mark.mpi
@pytest.mark.parametrize("seed, mode, ranks, pools, transport", MPI_RUNS)
def test_counting_set_matches_a_numpy_reference(seed, mode, ranks, pools, transport):
    result = mpirun(
        ranks,
        "containers_counting_set.py",
        "--seed",
        str(seed),
        "--scale",
        SCALE[ranks],
        env=job_env(mode, pools, transport),
    )
    assert result["failures"] == []
    assert len(result["checks"]) == ranks and min(result["checks"]) >= 60
    if pools:
        assert result["reserve_failures"] > 0  # backpressure happened
    errors = result["errors"]
    assert "float64" in errors["float keys"] and "int64" in errors["float keys"]
    assert "(2, 3)" in errors["2-D keys"]
    assert "CountingSet.count()" in errors["collective in a handler"]


@pytest.mark.mpi
def test_adds_pending_at_finalize_are_reported_as_staged():
    result = mpirun(2, "containers_counting_set.py", "--seed", "6", "--batches", "1", "--staged")
    assert result["failures"] == []
    assert_staged(result)


# -- in memory ----------------------------------------------------------------------------------------------------


@settings(max_examples=6, deadline=None)
@given(seed=st.integers(0, 2**16), size=st.integers(1, 4))
def test_counting_set_in_memory_over_seeds(seed, size):
    program = load_program("containers_counting_set")
    world = World(size, seed=seed, datagram_size=256, send_pool_slots=2, recv_pool_slots=4)
    results = world.run(program.scenario, seed, 2, 0.15)
    assert [failure for result in results for failure in result["failures"]] == []


@pytest.mark.filterwarnings("ignore::mailrail.errors.UndeliveredWarning")
def test_counting_set_in_memory_reports_pending_adds_as_staged():
    assert_staged_in_memory(load_program("containers_counting_set"))


def test_a_handler_adding_while_the_barrier_runs_is_counted():
    """Adds sent from inside handlers, two levels deep, are complete when the collective returns."""

    def program(rail):
        counting = CountingSet(rail, np.uint64)

        def relay(source, hops):
            counting.add(np.full(3, hops[0], dtype=np.uint64))
            if hops[0]:
                channel.send_to((rail.rank + 1) % rail.size, hops - 1)

        channel = rail.channels.open(np.int64, relay, name="relay")
        channel.send_to((rail.rank + 1) % rail.size, np.array([2]))
        return counting.count(np.arange(4, dtype=np.uint64)).tolist(), counting.total()

    for counts, total in World(3, seed=5).run(program):
        assert counts == [9, 9, 9, 0] and total == 27


@pytest.mark.parametrize("part", [1, 7, 4096])
def test_one_large_add_goes_in_parts_and_counts_exactly(monkeypatch, part):
    monkeypatch.setattr(CountingSet, "batch_keys", part)
    batches = {}

    def program(rail):
        counting = CountingSet(rail, np.uint64)
        seen = []
        monkeypatch.setattr(
            counting, "_add_batch", lambda keys, real=counting._add_batch: seen.append(len(keys)) or real(keys)
        )
        rng = np.random.default_rng(rail.rank)
        keys = np.concatenate([rng.zipf(1.3, 3000) % 500, rng.integers(0, 1 << 40, 1000)]).astype(np.uint64)
        counting.add(keys)  # one call
        batches[rail.rank] = seen
        return keys, counting.count(np.unique(keys)), counting.total()

    results = World(2, seed=part).run(program)
    everything = np.concatenate([keys for keys, _, _ in results])
    for rank, (keys, counts, total) in enumerate(results):
        unique = np.unique(keys)
        assert counts.tolist() == [int(np.count_nonzero(everything == key)) for key in unique]
        assert total == len(everything)
        assert batches[rank] == [min(part, 4000 - start) for start in range(0, 4000, part)]


def test_one_rank_needs_no_messages():
    def program(rail):
        counting = CountingSet(rail, "S16")
        counting.add(np.array([b"b", b"a", b"b", b"c", b"b", b"a"], dtype="S16"))
        return counting.top(2), counting.size(), counting.total(), local_of(counting)

    [((keys, counts), size, total, (local_keys, local_counts))] = World(1, seed=0).run(program)
    assert keys.tolist() == [b"b", b"a"] and counts.tolist() == [3, 2]
    assert (size, total) == (3, 6)
    assert sorted(zip(local_keys.tolist(), local_counts.tolist())) == [(b"a", 2), (b"b", 3), (b"c", 1)]


def local_of(counting):
    """A set's local() table as numpy arrays of its keys and counts."""
    table = counting.local()
    assert table.column_names == ["key", "count"]
    return numpy_column(table["key"], counting.dtype), table["count"].to_numpy()


# -- the helpers ---------------------------------------------------------------------------------------------------


def test_byte_order_is_memcmp_order_and_canonical_zeroes_padding():
    keys = np.array([b"b", b"ab", b"a", b"\xff", b""], dtype="S2")
    assert keys[byte_order(keys)].tolist() == [b"", b"a", b"ab", b"b", b"\xff"]
    numbers = np.array([256, 1, -1], dtype="<i4")  # bytes 00 01.., 01 00.., ff ff..
    assert numbers[byte_order(numbers)].tolist() == [256, 1, -1]
    assert len(byte_order(numbers[:0])) == 0
    record = np.dtype([("a", "u1"), ("b", "<u2")], align=True)
    garbage = np.frombuffer(bytes([1, 9, 2, 0, 3, 7, 4, 0]), dtype=record)
    clean = canonical(garbage)
    assert clean.view(np.uint8).tolist() == [1, 0, 2, 0, 3, 0, 4, 0]
    assert canonical(numbers) is numbers


def test_an_empty_set_answers_with_empty_arrays_of_its_dtype():
    record = np.dtype([("a", "u1"), ("b", "<u4")], align=True)

    def program(rail):
        counting = CountingSet(rail, record)
        keys, counts = counting.top(3)
        asked = counting.count(np.zeros(2, dtype=record))
        return keys.dtype, len(keys), counts.dtype, asked.tolist(), counting.size(), counting.total()

    for result in World(2, seed=0).run(program):
        assert result == (record, 0, np.dtype(np.int64), [0, 0], 0, 0)


def test_local_after_a_bare_barrier_sees_every_add():
    """No collective of the set's own: rail.barrier() alone, then local() (arrivals wait in a buffer until read)."""

    def program(rail):
        counting = CountingSet(rail, np.int64)
        counting.add(np.array([5, 5, 6, 7 + rail.rank]))
        rail.barrier()
        rail.barrier()
        keys, counts = local_of(counting)
        return dict(zip(keys.tolist(), counts.tolist()))

    held = World(3, seed=1).run(program)
    merged = {key: count for part in held for key, count in part.items()}
    assert sum(len(part) for part in held) == len(merged)  # each key on one rank
    assert merged == {5: 6, 6: 3, 7: 1, 8: 1, 9: 1}


# -- the owners' dense counts ----------------------------------------------------------------------------------


def held(results):
    """Every rank's local() merged into {key: count}, checking that no key is held by two ranks."""
    merged = {}
    for keys, counts, _ in results:
        for key, count in zip(keys.tolist(), counts.tolist()):
            assert key not in merged, key
            merged[key] = count
    return merged


def reference(batches):
    keys, counts = np.unique(np.concatenate(batches), return_counts=True)
    return dict(zip(keys.tolist(), counts.tolist()))


@pytest.mark.parametrize(
    "dtype, low, high",
    [
        (np.int8, -128, 128),
        (np.uint8, 0, 256),
        (np.int16, -300, 300),
        (np.uint16, 60_000, 65_536),
        (np.int32, -(2**31), -(2**31) + 5000),  # the lowest keys
        (np.int64, 2**63 - 5000, 2**63),  # the highest keys
        (np.uint64, 2**64 - 5000, 2**64),  # above 2**63: unsigned arithmetic
        (">i2", -300, 300),  # not the machine's byte order
    ],
)
def test_integer_keys_in_a_narrow_range_are_counted_densely(dtype, low, high):
    """Negative keys, the ends of each type's range, narrow types: the same counts as numpy, from a dense array."""

    def program(rail):
        rng = np.random.default_rng([7, rail.rank])
        batches = [
            rng.integers(low, high, int(rng.integers(0, 3000)), dtype=np.int64 if high < 2**63 else np.uint64).astype(
                dtype
            )
            for _ in range(6)
        ]
        counting = CountingSet(rail, dtype)
        for batch in batches:
            counting.add(batch)
        asked = np.array([low, high - 1, (low + high) // 2], dtype=np.uint64 if high > 2**63 else np.int64).astype(
            dtype
        )
        counts = counting.count(asked)
        keys, local_counts = local_of(counting)
        return keys, local_counts, (counts, counting.total(), counting.size(), counting.dense, batches, asked)

    results = World(3, seed=1).run(program)
    every = [batch for _, _, extra in results for batch in extra[4]]
    want = reference(every)
    assert held(results) == want
    for _, _, (counts, total, size, dense, _, asked) in results:
        assert dense
        assert counts.tolist() == [want.get(key, 0) for key in asked.tolist()]
        assert (total, size) == (sum(want.values()), len(want))
    keys = results[0][0]
    assert keys.dtype == np.dtype(dtype)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, ">i4", ">u8"])
def test_keys_whose_words_spread_wide_are_counted_in_the_table(dtype):
    """Mixed signs of 4- and 8-byte keys (negative ones read as large words), and keys not in the machine's byte
    order: counted exactly, in the table."""

    def program(rail):
        rng = np.random.default_rng([8, rail.rank])
        batches = [
            rng.integers(-2000 if np.dtype(dtype).kind == "i" else 0, 2000, 3000).astype(dtype) for _ in range(3)
        ]
        counting = CountingSet(rail, dtype)
        for batch in batches:
            counting.add(batch)
        asked = np.array([0, 1, 1999], dtype=dtype)
        return counting.count(asked), counting.total(), counting.dense, batches, asked

    results = World(3, seed=2).run(program)
    want = reference([batch for result in results for batch in result[3]])
    for counts, total, dense, _, asked in results:
        assert not dense
        assert counts.tolist() == [want.get(key, 0) for key in asked.tolist()]
        assert total == sum(want.values())


def test_keys_spreading_too_wide_move_to_a_table_with_their_counts():
    """Dense while the keys are narrow; a wide batch mid-run moves a rank's keys into a table (for good), with
    their counts."""

    def program(rail):
        counting = CountingSet(rail, np.int64)
        narrow = np.arange(500, 1500, dtype=np.int64).repeat(3)
        counting.add(narrow)
        before = counting.count(np.array([500, 1000, 1499, 1500]))
        dense_before = counting.dense
        wide = np.array([2**40, -(2**50), 10**6], dtype=np.int64) + rail.rank
        counting.add(wide)
        after = counting.count(np.array([500, 1000, 1499, 2**40, 2**40 + 1, -(2**50), 10**6, 10**6 + 2]))
        dense_after = counting.dense
        counting.add(narrow[:10])  # and on, in the table
        return before.tolist(), dense_before, after.tolist(), dense_after, counting.total(), counting.size()

    results = World(2, seed=3).run(program)
    for before, dense_before, after, _, total, size in results:
        assert before == [6, 6, 6, 0] and dense_before
        assert after == [6, 6, 6, 1, 1, 1, 1, 0]
        assert total == 2 * (3000 + 3 + 10) and size == 1000 + 6
    assert not all(dense_after for _, _, _, dense_after, _, _ in results)


def test_a_range_growing_step_by_step_stays_dense_and_exact():
    """Keys creeping upward and downward across reads: the dense array grows on the side it needs."""

    def program(rail):
        counting = CountingSet(rail, np.int32)
        added = []
        for step in range(8):
            batch = 10_000 + np.arange(step * 1000, step * 1000 + 1500, dtype=np.int32) * (1 if step % 2 else -1)
            counting.add(batch)
            added.append(batch)
            assert counting.size() > 0  # a read settles what arrived: the next batch extends the range
        rail.barrier()
        keys, counts = local_of(counting)
        return keys, counts, (counting.dense, added)

    results = World(2, seed=4).run(program)
    assert all(extra[0] for _, _, extra in results)
    assert held(results) == reference([batch for _, _, extra in results for batch in extra[1]])


def test_other_dtypes_use_a_table():
    def program(rail):
        counting = CountingSet(rail, np.float64)
        counting.add(np.array([0.0, -0.0, 0.0, np.nan]))
        return counting.dense, counting.count(np.array([0.0, -0.0, 1.0])).tolist()

    for dense, counts in World(2, seed=0).run(program):
        assert not dense and counts == [4, 2, 0]  # every rank added them: 0.0 and -0.0 are two keys


def test_arrivals_larger_than_the_buffer_are_counted_at_once(monkeypatch):
    """A tiny buffer: settles mid-run, and records beyond a whole buffer counted straight from the datagram."""
    monkeypatch.setattr(CountingSet, "pending_bytes", 64)

    def program(rail):
        rng = np.random.default_rng(rail.rank)
        batches = [rng.integers(0, 50, 400), rng.zipf(1.5, 400) % 1000, rng.integers(0, 2**62, 300)]
        counting = CountingSet(rail, np.int64)
        for batch in batches:
            counting.add(batch)
        rail.barrier()
        keys, counts = local_of(counting)
        return keys, counts, batches

    results = World(3, seed=2, datagram_size=2048).run(program)
    assert held(results) == reference([batch for _, _, batches in results for batch in batches])


# -- the senders' combining -------------------------------------------------------------------------------------


@pytest.fixture(params=["compiled", "numpy"])
def hot_lookup(request, monkeypatch):
    """The sender's hot-key lookup: each test of combining runs over the compiled pass and its numpy reference."""
    if request.param == "numpy":
        monkeypatch.setattr(counting_set, "split_hot", split_hot_numpy)
    return request.param


def test_keys_that_do_not_repeat_go_plain_and_repeated_keys_combined(hot_lookup):
    """The sample decides: distinct keys travel as plain keys, repeated ones as (count, key) records on hot keys."""

    def program(rail, repeated):
        counting = CountingSet(rail, np.uint64)
        rng = np.random.default_rng([9, rail.rank])
        batches = []
        for _ in range(10):
            batch = rng.integers(0, 2**63, 2000, dtype=np.uint64)
            if repeated:
                batch[:1500] = rng.integers(0, 20, 1500)  # 20 hot keys: three quarters of every batch
            batches.append(batch)
            counting.add(batch)
        rail.barrier()
        keys, counts = local_of(counting)
        return keys, counts, (batches, counting._plain.records_sent, counting._adds.records_sent, counting._hot)

    distinct = World(2, seed=1).run(program, False)
    for _, _, (_, plain, pairs, hot) in distinct:
        assert pairs == 0 and plain == 10 * 2000 and hot is None
    assert held(distinct) == reference([batch for _, _, extra in distinct for batch in extra[0]])

    skewed = World(2, seed=1).run(program, True)
    for _, _, (_, plain, pairs, hot) in skewed:
        assert hot is not None
        # each hot key once per batch (a few share a slot of the hot table with another, and go plain)
        assert pairs <= 10 * 20 and plain + pairs < 20000 // 2
    assert held(skewed) == reference([batch for _, _, extra in skewed for batch in extra[0]])


def test_combining_follows_the_keys_when_they_change(hot_lookup):
    """Hot keys that go cold make the next batch a sample; keys that stop repeating turn combining off, and the
    periodic sample turns it on again.  Every count stays exact."""

    def program(rail):
        counting = CountingSet(rail, np.int32)
        counting.sample_every = 4
        rng = np.random.default_rng([11, rail.rank])
        batches, hot_seen = [], []
        for step in range(24):
            phase = step // 8
            if phase == 0:
                batch = rng.integers(0, 10, 1000)  # repeats: combined on hot keys
            elif phase == 1:
                batch = rng.integers(100, 110, 1000)  # other hot keys: the old ones went cold
            else:
                batch = rng.permutation(2**20)[:1000] + 10_000  # no repeats: plain
            batch = batch.astype(np.int32)
            batches.append(batch)
            counting.add(batch)
            hot_seen.append(
                None
                if counting._hot is None
                else sorted(counting._hot.records["key"][counting._hot.records["key"] != 0].tolist())
            )
        rail.barrier()
        keys, counts = local_of(counting)
        return keys, counts, (batches, hot_seen)

    results = World(2, seed=2).run(program)
    assert held(results) == reference([batch for _, _, extra in results for batch in extra[0]])
    for _, _, (_, hot_seen) in results:
        assert hot_seen[7] is not None and set(hot_seen[7]) <= set(range(1, 10))
        assert hot_seen[15] is not None and set(hot_seen[15]) <= set(range(100, 110))
        assert hot_seen[23] is None


@pytest.mark.parametrize("dtype", ["S16", np.dtype([("a", "u1"), ("b", "<u4")], align=True), np.float32])
def test_combining_longer_and_padded_keys(dtype):
    """Hot keys of two words (hashes confirmed on the words) and padded records (garbage padding): exact counts."""

    def program(rail):
        counting = CountingSet(rail, dtype)
        rng = np.random.default_rng([5, rail.rank])
        ids = [rng.integers(0, 40, 1200) for _ in range(6)]
        for batch in ids:
            keys = np.zeros(len(batch), dtype=dtype)
            if keys.dtype.names:
                keys["a"], keys["b"] = batch % 7, batch
                keys.view(np.uint8).reshape(len(batch), -1)[:, 1:4] = rng.integers(0, 256, (len(batch), 3))
            else:
                keys[:] = batch.astype(keys.dtype) if keys.dtype.kind != "S" else batch.astype("S16")
            counting.add(keys)
        asked = np.zeros(40, dtype=dtype)
        if asked.dtype.names:
            asked["a"], asked["b"] = np.arange(40) % 7, np.arange(40)
        else:
            asked[:] = np.arange(40).astype(asked.dtype) if asked.dtype.kind != "S" else np.arange(40).astype("S16")
        return counting.count(asked), ids, counting._hot is not None

    results = World(2, seed=3).run(program)
    want = np.bincount(np.concatenate([batch for _, ids, _ in results for batch in ids]), minlength=40)
    for counts, _, hot in results:
        assert counts.tolist() == want.tolist() and hot


def test_keys_are_counted_on_their_owners():
    def program(rail, dtype, high):
        counting = CountingSet(rail, dtype)
        keys = np.random.default_rng(rail.rank).integers(0, high, 3000, dtype=np.uint64).astype(dtype)
        counting.add(keys)
        counting.add(keys[:100])  # repeated: combined into (count, key) records
        total = counting.total()
        mine, counts = local_of(counting)
        return total, bool((counting.owner(mine) == rail.rank).all()), int(counts.sum())

    # dense counts by block (narrow integers), a table (wide ones, strings): keys counted where they live
    for dtype, high in ((np.uint64, 5000), (np.int64, 2**63 - 1), (np.uint32, 2**32 - 1), ("S8", 2**62)):
        for size in (1, 2, 3, 4, 5, 8):
            results = World(size, seed=0).run(lambda rail, dtype=dtype, high=high: program(rail, dtype, high))
            assert all(on_owner for _, on_owner, _ in results), (dtype, size)
            assert {total for total, _, _ in results} == {3100 * size} == {sum(c for _, _, c in results)}


@pytest.mark.filterwarnings("ignore::mailrail.errors.UndeliveredWarning")
def test_hot_counts_held_on_the_sender_are_sent_by_a_barrier_or_reported_at_finalize(hot_lookup):
    """Hot keys' counts wait on the sender across adds: a barrier (or a flush) sends them, exactly once; left
    held at finalize() they are reported as staged."""

    def program(rail, finish):
        counting = CountingSet(rail, np.uint64)
        rng = np.random.default_rng([3, rail.rank])
        batches = [rng.integers(0, 30, 500).astype(np.uint64) for _ in range(5)]
        for batch in batches:
            counting.add(batch)
        held = counting._held_records()
        if finish == "finalize":
            return held, rail.finalize()["staged"]
        after_flush = None
        if finish == "flush":
            rail.channels.flush()
            after_flush = counting._held_records()
        rail.barrier()
        return held, after_flush, local_of(counting), batches

    for held_records, staged in World(2, seed=4).run(program, "finalize"):
        assert held_records > 0 and staged >= held_records
    for finish in ("barrier", "flush"):
        results = World(2, seed=4).run(program, finish)
        for held_records, after_flush, _, _ in results:
            assert held_records > 0 and after_flush in (None, 0)
        got = held([(*local, None) for _, _, local, _ in results])
        assert got == reference([batch for _, _, _, batches in results for batch in batches])


@pytest.mark.filterwarnings("ignore::mailrail.errors.UndeliveredWarning")
@pytest.mark.parametrize("finish", ["barrier", "flush", "handler", "finalize"])
def test_plain_keys_wait_on_the_sender_until_a_batch_a_flush_or_a_barrier(finish):
    """Keys that are not combined wait on the sender until send_batch_bytes of them can go, or a flush or a
    barrier sends them (exactly once); an add from a handler during a barrier sends at once; keys still waiting
    at finalize() are reported as staged."""

    def program(rail):
        counting = CountingSet(rail, np.uint64)
        counting.send_batch_bytes = 8 * 1000  # 1000 keys
        counting._waiting = counting_set._Batch(np.dtype(np.uint64), 1000)
        batches = [np.arange(300, dtype=np.uint64) + np.uint64(1000 * (4 * rail.rank + i)) for i in range(4)]
        sent = []
        for batch in batches:
            counting.add(batch)  # the first add is a sample: sent at once; the others wait, 900 keys of 1000
            sent.append(counting._plain.records_sent)
        waiting = counting._held_records()
        if finish == "finalize":
            return sent, waiting, rail.finalize()["staged"]
        if finish == "flush":
            rail.channels.flush()
        elif finish == "handler":
            extra = np.arange(5, dtype=np.uint64) + np.uint64(10**9 + 10 * rail.rank)
            batches.append(extra)
            channel = rail.channels.open(np.int64, lambda source, records: counting.add(extra))  # a barrier first
            channel.send_to((rail.rank + 1) % rail.size, np.zeros(1, dtype=np.int64))
        after = counting._held_records()
        rail.barrier()
        return sent, (waiting, after, counting._held_records()), (*local_of(counting), batches)

    results = World(2, seed=6).run(program)
    for sent, held_counts, rest in results:
        assert sent == [300, 300, 300, 300]  # no second sample: four adds, every 32nd is one
        if finish == "finalize":
            assert held_counts == 900 and rest >= 900  # staged: the waiting keys, and the channels' partial rows
        else:
            waiting, after, end = held_counts
            assert waiting == 900 and end == 0 and after == (0 if finish in ("flush", "handler") else 900)
    if finish != "finalize":
        got = held([local for _, _, local in results])
        assert got == reference([batch for _, _, (_, _, batches) in results for batch in batches])


def test_samples_finding_nothing_to_combine_come_ever_more_rarely_and_combining_brings_them_back():
    def program(rail):
        counting = CountingSet(rail, np.uint64)
        counting.sample_every, counting.sample_every_max = 2, 8
        samples = []
        real = counting._add_sample

        def sample(keys):
            samples.append(step)
            real(keys)

        counting._add_sample = sample
        rng = np.random.default_rng([2, rail.rank])
        batches = []
        for step in range(40):
            if step < 26:
                batch = rng.integers(0, 2**63, 100, dtype=np.uint64)  # distinct: nothing to combine
            else:
                batch = rng.integers(0, 5, 100).astype(np.uint64)  # five hot keys
            batches.append(batch)
            counting.add(batch)
        rail.barrier()
        return (*local_of(counting), (samples, batches))

    results = World(2, seed=0).run(program)
    for _, _, (samples, _) in results:
        # intervals 2, 4, 8, 8, 8 while nothing combines; the sample at 30 combines: every 2nd again
        assert samples == [0, 2, 6, 14, 22, 30, 32, 34, 36, 38]
    assert held(results) == reference([b for _, _, (_, batches) in results for b in batches])


def clear_then_count(rail, dtype):
    """Adds, clear(), then other adds: only the second adds are counted, on every rank."""
    counts = CountingSet(rail, dtype)
    rng = np.random.default_rng([5, rail.rank])
    first = rng.integers(0, 50, 400).astype(dtype)
    counts.add(first)
    counts.add(first)  # a repeat: combined and held on the sender, then forgotten too
    counts.clear()
    second = np.arange(rail.rank, rail.rank + 10).astype(dtype)
    counts.add(second)
    return counts.total(), counts.size(), counts.count(np.arange(0, 20).astype(dtype)).tolist()


@pytest.mark.parametrize("dtype", [np.uint64, np.int32, np.float64])
def test_clear_forgets_everything_before_it_and_keeps_counting(dtype):
    for seed in range(3):
        for result in World(size=3, seed=seed).run(clear_then_count, dtype):
            total, size, counted = result
            expected = np.bincount(np.concatenate([np.arange(r, r + 10) for r in range(3)]), minlength=20)
            assert total == 30 and size == 12 and counted == expected.tolist()
