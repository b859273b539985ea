"""Map under mpiexec (or mailrail.testing's World): every operation against a numpy reference.

Each rank regenerates every rank's inputs from the seed, so it can check what the map holds after each
collective against a single-process numpy reference: insert if absent (exactly one of concurrent inserts wins,
one of the inserted values), assign, reduce (add, min, max, bitwise_or, over int and float values; a ufunc sent
by reference), erase then get, visits that send visits and calls from inside themselves (checksums of the
increments), get of absent keys, structured and subarray values, S16 keys.  Then errors, raised on the caller
before anything is sent, and a collective inside a visit.  ``staged``: work left pending at finalize() is
reported as staged.

``RESULT`` of rank 0: ``failures`` (every check that failed, on any rank: empty when all pass), ``checks`` (how
many ran per rank), ``errors`` (rank 0's messages of the expected errors), ``reserve_failures``, ``staged``.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any

import numpy as np

sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # for containers_common
from containers_common import Checks, finalize_pending, local_arrays, run_job

from mailrail import MailRailError
from mailrail.containers import ops as ops_module
from mailrail.containers.map import Map

#: Second-level visits of key k go to key k + VISIT_OFFSET.
VISIT_OFFSET = 1 << 40
#: Per rank (the World's ranks share this module): keys counted by calls made from inside visits, and the
#: errors of collectives tried inside visits.
TALLIES: dict[int, int] = {}
REFUSALS: dict[int, list[str]] = {}


# -- visitors and calls (module level: sent by reference) -----------------------------------------------------


def bump(keys: np.ndarray, values: np.ndarray, depth: int, same: Map, other: Map) -> None:
    """+1 on each key; at depth 1, a second-level visit of keys + VISIT_OFFSET to this map, one of each key to
    *other*, and a call to rank 0 counting the keys.  The maps arrive as this rank's parts of them."""
    assert not keys.flags.writeable and values.flags.writeable and len(np.unique(keys)) == len(keys)
    values += 1
    if depth:
        same.visit(keys + VISIT_OFFSET, bump, depth - 1, same, other)
        other.visit(keys, weigh, 3)
        same.rail.call(0, tally, 0, len(keys))


def weigh(keys: np.ndarray, values: np.ndarray, weight: int) -> None:
    values += weight


def tally(rank: int, count: int) -> None:
    TALLIES[rank] += count


def mark(keys: np.ndarray, values: np.ndarray) -> None:
    values["count"] += 1
    values["tag"] = b"hit"


def grow(keys: np.ndarray, values: np.ndarray, step: np.ndarray) -> None:
    values += step  # a (4,) float32 step on (n, 4) values


def ask_size(keys: np.ndarray, values: np.ndarray, target: Map) -> None:
    try:
        target.size()
    except MailRailError as error:
        REFUSALS[target.rank].append(str(error))


def nothing(keys: np.ndarray, values: np.ndarray) -> None:
    pass


# -- the checks ----------------------------------------------------------------------------------------------------


def scenario(rail: Any, seed: int, count: int = 2000) -> dict:
    """Every check on this rank's *rail*; returns ``{"failures", "checks", "errors"}``."""
    rank, size, comm = rail.rank, rail.size, rail.comm
    TALLIES[rank] = 0
    REFUSALS[rank] = []
    check = Checks(rank, detail=500)

    def rng_of(sender: int, step: int) -> np.random.Generator:
        return np.random.default_rng([seed, step, sender])

    # 1. insert if absent: exactly one of concurrent inserts wins, one of the inserted values.
    pool = count  # keys 0..pool-1; keys below pool // 4 are inserted first, by rank 0, and keep their values
    everything = np.arange(pool, dtype=np.int64)
    inserted = Map(rail, np.int64, np.int64)
    if rank == 0:
        early = np.arange(pool // 4, dtype=np.int64)
        inserted.insert(early, -early)
    rail.barrier()

    def insert_inputs(sender: int) -> tuple[np.ndarray, np.ndarray]:
        keys = rng_of(sender, 1).integers(0, pool, count)  # duplicates within the batch and across ranks
        return keys, sender * 10 * count + np.arange(count)  # every inserted value distinct

    inserted.insert(*insert_inputs(rank))
    values, found = inserted.get(everything)
    all_keys = np.concatenate([insert_inputs(r)[0] for r in range(size)])
    all_values = np.concatenate([insert_inputs(r)[1] for r in range(size)])
    scale = 10 * count * size
    present = np.zeros(pool, dtype=bool)
    present[all_keys] = True
    present[: pool // 4] = True
    check("insert: the inserted keys are found", np.array_equal(found, present))
    check("insert: present keys keep their values", np.array_equal(values[: pool // 4], -everything[: pool // 4]))
    late = np.flatnonzero(found)[np.flatnonzero(found) >= pool // 4]
    check(
        "insert: each absent key got one of its inserted values",
        np.isin(late * scale + values[late], all_keys * scale + all_values).all(),
    )
    held = inserted.size()
    check("insert: size", held == int(present.sum()), held)
    local_keys, local_values = local_arrays(inserted.local(), inserted.key_dtype, inserted.value_dtype)
    check("insert: local() holds this rank's keys", (inserted.owner(local_keys) == rank).all())
    check("insert: local() parts add up", comm.allreduce(len(local_keys)) == int(present.sum()))
    check("insert: local() values", np.array_equal(local_values, inserted.get(local_keys)[0]))

    # 2. assign: overwrites; within one rank's batch the last occurrence wins.
    assigned = Map(rail, np.int64, np.float64)
    mine = np.arange(rank, pool, size)
    assigned.insert(mine, np.full(len(mine), -1.0))  # overwritten below
    rail.barrier()

    def assign_inputs(sender: int) -> tuple[np.ndarray, np.ndarray]:
        rng = rng_of(sender, 2)
        own = np.arange(sender, pool, size)  # only this sender assigns these keys
        keys = rng.choice(own, 2 * len(own))  # with duplicates
        return keys, rng.random(len(keys))

    assigned.assign(*assign_inputs(rank))
    reference = np.full(pool, -1.0)
    for sender in range(size):
        keys, vals = assign_inputs(sender)
        reference[keys] = vals  # numpy's assignment: the last occurrence of a key wins
    values, found = assigned.get(everything)
    check("assign: every key found", found.all())
    check("assign: overwritten, the last occurrence wins", np.array_equal(values, reference))

    # 3. reduce: add, min, max, bitwise_or (and bitwise_xor by reference) over ints; add, min, max over floats.
    distinct_keys = 97  # few keys: many duplicates per batch and across ranks

    def reduce_inputs(sender: int, kind: str) -> tuple[np.ndarray, np.ndarray]:
        rng = rng_of(sender, 3 if kind == "i" else 4)
        keys = rng.integers(0, distinct_keys, count)
        if kind == "i":
            return keys, rng.integers(-(1 << 40), 1 << 40, count)
        if kind == "f":
            return keys, rng.integers(-1000, 1000, count).astype(np.float64)  # integer-valued: exact sums
        return keys, rng.random(count) * 1e3  # any floats: sums within a tolerance

    named = {"add": np.add, "min": np.minimum, "max": np.maximum}
    xor_code = ops_module._CODES.pop(np.bitwise_xor, None)  # as if outside numpy: travels in calls
    try:
        for kind, dtype, ops in (
            ("i", np.int64, ["add", "min", "max", np.bitwise_or, np.bitwise_xor]),
            ("f", np.float64, ["add", "min", "max"]),
            ("r", np.float64, ["add"]),
        ):
            target = Map(rail, np.int64, dtype)  # one map, each op on its own range of keys: arrivals mix ops
            keys, vals = reduce_inputs(rank, kind)
            half = count // 2
            for number, op in enumerate(ops):
                target.reduce(keys[:half] + number * distinct_keys, vals[:half], op)  # combined at the owner too
                target.reduce(keys[half:] + number * distinct_keys, vals[half:], op)
            values, found = target.get(np.arange(len(ops) * distinct_keys))
            all_keys = np.concatenate([reduce_inputs(r, kind)[0] for r in range(size)])
            all_vals = np.concatenate([reduce_inputs(r, kind)[1] for r in range(size)])
            reduced = np.unique(all_keys)
            for number, op in enumerate(ops):
                ufunc = named.get(op, op) if isinstance(op, str) else op
                expected = np.zeros(distinct_keys, dtype=all_vals.dtype)
                for key in reduced.tolist():  # a loop over 97 keys builds the reference
                    expected[key] = ufunc.reduce(all_vals[all_keys == key])
                part = slice(number * distinct_keys, (number + 1) * distinct_keys)
                name = f"reduce {kind} {ufunc.__name__}"
                check(f"{name}: keys", np.array_equal(found[part], np.isin(np.arange(distinct_keys), reduced)))
                if kind == "r":
                    check(f"{name}: values", np.allclose(values[part], expected, rtol=1e-12), values[part] - expected)
                else:
                    check(f"{name}: values", np.array_equal(values[part], expected), values[part] - expected)
    finally:
        if xor_code is not None:
            ops_module._CODES[np.bitwise_xor] = xor_code

    # 4. erase then get; erased keys come back with fresh values.
    erased = Map(rail, np.int64, np.int64)
    erased.assign(mine, mine * 7)
    rail.barrier()
    gone = rng_of(0, 5).choice(pool, pool // 3, replace=False)  # the same on every rank
    erased.erase(gone[rank::size])
    erased.erase(np.array([pool + 5, pool + 6]))  # absent keys: ignored
    values, found = erased.get(everything)
    kept = np.ones(pool, dtype=bool)
    kept[gone] = False
    check("erase: erased keys are not found", np.array_equal(found, kept))
    check("erase: the others keep their values", np.array_equal(values, np.where(kept, everything * 7, 0)))
    check("erase: size", erased.size() == pool - len(gone))
    back = gone[: len(gone) // 2]
    if rank == 0:
        erased.insert(back, np.full(len(back), 11))
        erased.visit(gone[len(gone) // 2 :], nothing)  # inserted with zero, whatever the storage held before
    values, found = erased.get(gone)
    check("erase: re-inserted and visited keys are back", found.all())
    fresh = np.r_[np.full(len(back), 11), np.zeros(len(gone) - len(back), dtype=np.int64)]
    check("erase: re-inserted values are fresh", np.array_equal(values, fresh))

    # 5. visits: increments, second-level visits to this map and another, calls, visit_if_contains.
    counts = Map(rail, np.int64, np.int64)
    weights = Map(rail, np.int64, np.int64)
    contains = Map(rail, np.int64, np.int64)

    def visit_inputs(sender: int) -> np.ndarray:
        return rng_of(sender, 6).integers(0, pool, count)  # duplicates: a key visited k times in one arrival

    counts.visit(visit_inputs(rank), bump, 1, counts, weights)
    contains.insert(everything[::2][rank::size], 0)
    rail.barrier()
    contains.visit_if_contains(visit_inputs(rank), weigh, 5)
    per_key = np.bincount(np.concatenate([visit_inputs(r) for r in range(size)]), minlength=pool)
    twice = np.r_[per_key, per_key]
    values, found = counts.get(np.r_[everything, everything + VISIT_OFFSET])
    check("visit: each visit applied once", np.array_equal(values, twice))
    check("visit: visited keys were inserted, others not", np.array_equal(found, twice > 0))
    increments = int(local_arrays(counts.local(), counts.key_dtype, counts.value_dtype)[1].sum())
    check("visit: the checksum of increments", comm.allreduce(increments) == 2 * size * count)
    values, found = weights.get(everything)
    check("visit: second-level visits to another map", np.array_equal(values, 3 * per_key))
    check("visit: ... inserted what they visited", np.array_equal(found, per_key > 0))
    check("visit: calls from inside visits", comm.allreduce(TALLIES[rank]) == size * count)
    values, found = contains.get(everything)
    even = everything % 2 == 0
    check("visit_if_contains: absent keys are not inserted", np.array_equal(found, even))
    check("visit_if_contains: present keys visited", np.array_equal(values, np.where(even, 5 * per_key, 0)))
    check("visit: size", counts.size() == 2 * int((per_key > 0).sum()))

    # 6. structured values, subarray values, S16 keys.
    record = np.dtype([("count", np.int64), ("weight", np.float32), ("tag", "S3")])
    records = Map(rail, np.int64, record)
    mine_300 = np.arange(rank, 300, size)
    given = np.zeros(len(mine_300), dtype=record)
    given["count"] = mine_300 * 2
    given["weight"] = mine_300 / 4
    given["tag"] = b"new"
    records.insert(mine_300, given)
    rail.barrier()
    hits = np.arange(0, 400, 3)
    records.visit(hits, mark)
    values, found = records.get(np.arange(400))
    expected = np.zeros(400, dtype=record)
    expected["count"][:300] = np.arange(300) * 2
    expected["weight"][:300] = np.arange(300) / 4
    expected["tag"][:300] = b"new"
    expected["count"][hits] += size
    expected["tag"][hits] = b"hit"
    check("structured: values", np.array_equal(values, expected) and values.dtype == record, values[:5])
    check("structured: found", np.array_equal(found, (np.arange(400) < 300) | (np.arange(400) % 3 == 0)))

    vector = np.dtype((np.float32, 4))
    vectors = Map(rail, np.int64, vector)
    vectors.reduce(rng_of(rank, 7).integers(0, 50, 400), np.tile(np.arange(4, dtype=np.float32) + 1, (400, 1)), "add")
    vectors.visit(np.arange(50), grow, np.array([0, 0, 0, 100], dtype=np.float32))
    values, found = vectors.get(np.arange(50))
    all_vector_keys = np.concatenate([rng_of(r, 7).integers(0, 50, 400) for r in range(size)])
    expected = np.bincount(all_vector_keys, minlength=50).astype(np.float32)[:, None] * (np.arange(4) + 1)
    expected[:, 3] += 100 * size
    check("subarray: shape and values", values.shape == (50, 4) and np.array_equal(values, expected), values[:3])
    check("subarray: found", found.all())

    word = np.dtype("S16")
    words = Map(rail, word, np.int64)

    def word_inputs(sender: int) -> tuple[np.ndarray, np.ndarray]:
        numbers = rng_of(sender, 8).integers(0, 300, count)
        return np.char.add(b"fairly-long-", numbers.astype("S3")).astype(word), numbers

    words.reduce(word_inputs(rank)[0], 1, "add")  # one value for every key
    words.assign(np.array([b"assigned"], dtype=word), [42])
    probe = np.char.add(b"fairly-long-", np.arange(300).astype("S3")).astype(word)
    values, found = words.get(np.r_[probe, np.array([b"assigned", b"absent"], dtype=word)])
    per_number = np.bincount(np.concatenate([word_inputs(r)[1] for r in range(size)]), minlength=300)
    check("S16 keys: counts", np.array_equal(values[:300], per_number) and np.array_equal(found[:300], per_number > 0))
    check("S16 keys: assigned and absent", values[300] == 42 and found[300] and values[301] == 0 and not found[301])

    # 7. errors, raised here before anything is sent; a collective inside a visit.
    plain = Map(rail, np.int64, np.int64)
    check.error("unknown op", ValueError, ["'average'"], lambda: plain.reduce([1], [1], "average"))
    check.error("lambda", TypeError, ["visit", "lambda"], lambda: plain.visit([1], lambda keys, values: None))
    check.error("length", ValueError, ["3 keys", "(2,)"], lambda: plain.insert([1, 2, 3], np.array([1, 2])))
    check.error("value dtype", TypeError, ["float64", "int64"], lambda: plain.assign([1], np.array([1.5])))
    check.error("key dtype", TypeError, ["float64", "int64"], lambda: plain.erase(np.array([1.5])))
    check.error(
        "structured reduce", TypeError, ["add", "structured", "count"], lambda: records.reduce([1], given[:1], "add")
    )
    check.error(
        "bitwise float", TypeError, ["bitwise_or", "float64"], lambda: assigned.reduce([1], [1.0], np.bitwise_or)
    )
    check.error("unpicklable", TypeError, ["argument 0", "generator"], lambda: plain.visit([1], weigh, (x for x in [])))
    refuser = rail.channels.open(np.int64, lambda source, records: plain.size(), name="map test: refuses")
    check.error(
        "size in a handler", MailRailError, ["Map.size()"], lambda: refuser.send_to(rank, np.zeros(1, np.int64))
    )
    plain.visit([rank], ask_size, plain)  # one visit per rank, which tries a collective at the owner
    rail.barrier()
    check("errors: nothing was sent", plain.size() == size)  # only the visits inserted keys
    refusals = [message for theirs in comm.allgather(REFUSALS[rank]) for message in theirs]
    check("collective in a visit: every visit refused", len(refusals) == size, refusals)
    check("collective in a visit: named", all("Map.size()" in message for message in refusals), refusals)
    check.errors["collective in a visit"] = refusals[-1] if refusals else ""
    return {"failures": check.failures, "checks": check.count, "errors": check.errors}


def staged(rail: Any) -> dict:
    """Inserts and visits of keys owned by other ranks, then finalize() without a barrier: reported staged."""
    pending = Map(rail, np.int64, np.int64)
    candidates = np.arange(64)
    far = candidates[pending.owner(candidates) != rail.rank][:3]
    pending.insert(far, far)
    pending.visit(far, nothing)
    # 3 records, one call per owner.
    return finalize_pending(rail, False, {"pending": len(far) + len(np.unique(pending.owner(far)))})


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--count", type=int, default=2000)
    args = parser.parse_args()
    run_job(lambda rail: scenario(rail, args.seed, args.count), {"staged": staged})


if __name__ == "__main__":
    main()
