"""Bag under mpiexec (or mailrail.testing's World): inserts and rebalance against a numpy reference.

Each rank regenerates every rank's inputs from the seed.  Round-robin inserts of uneven batches (some from inside
a handler) and ``local_insert`` of very uneven ones, for uint64, int32, S16 and structured items (random bytes
in their padding, which is not part of an item); then ``size``, each rank's share (round-robin from its cursor),
and the multiset of all ranks' items (sorted bytes and a checksum) against the reference; ``rebalance`` evens
the shares to floor or ceil of the mean, moves the fewest items, keeps the multiset; a second ``rebalance``
moves nothing.  Then errors, and collectives refused inside a handler; with ``--staged``, inserts left
pending at finalize() are reported as staged.

``RESULT`` of rank 0: ``failures`` (empty when all pass), ``checks`` per rank, ``errors`` (rank 0's),
``moved`` (items moved by the first rebalance of each dtype, rank 0's), ``reserve_failures``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # for containers_common and containers_counting_set
from containers_common import Checks, finalize_pending, local_arrays, refused_in_a_handler, run_job, seed_and_scale
from containers_counting_set import DOMAIN, DTYPES, clean, keys_of

from mailrail.containers.bag import Bag
from mailrail.containers.partition import hash_keys


def items_of(seed: int, dtype_index: int, sender: int, what: int, name: str, most: int) -> np.ndarray:
    """The items rank *sender* uses in step *what*: ids with repeats (a bag keeps duplicates), padding random."""
    rng = np.random.default_rng([seed, dtype_index, sender, what])
    ids = rng.integers(0, DOMAIN, int(rng.integers(0, most + 1)))
    return keys_of(ids, name, rng)


def raw(items: np.ndarray) -> np.ndarray:
    """The items' bytes, as sortable rows (structured padding zeroed)."""
    return np.ascontiguousarray(clean(items)).view(np.dtype((np.void, items.dtype.itemsize))).reshape(len(items))


def checksum(items: np.ndarray) -> int:
    """An order-free checksum of a multiset of items: the sum of their 64-bit hashes (of all their bytes)."""
    return int(hash_keys(raw(items)).sum(dtype=np.uint64))


def shares(total: int, start: int, size: int) -> np.ndarray:
    """How many of *total* items sent round-robin from rank *start* each rank gets."""
    return np.bincount((start + np.arange(total)) % size, minlength=size)


def check_dtype(rail: Any, check: Checks, seed: int, dtype_index: int, name: str, scale: float) -> int:
    rank, size = rail.rank, rail.size
    bag = Bag(rail, DTYPES[name])
    most = int(1500 * scale)

    def forwarded(source: int, ids: np.ndarray) -> None:
        bag.insert(items_of(seed, dtype_index, source, 10, name, most))  # an insert from inside a handler

    forwarder = rail.channels.open(np.int64, forwarded, name=f"forward {name}")

    def most_of(sender: int) -> int:
        return most * (3 if sender == 0 else 1)  # rank 0 inserts more

    for batch in range(3):
        bag.insert(items_of(seed, dtype_index, rank, batch, name, most_of(rank)))
    bag.local_insert(items_of(seed, dtype_index, rank, 5, name, 4 * most if rank == size - 1 else 0))
    forwarder.send_to((rank + 1) % size, np.zeros(1, dtype=np.int64))  # the next rank inserts step 10 of ours
    # The reference: every item of every rank.
    steps = {s: [items_of(seed, dtype_index, s, b, name, most_of(s)) for b in range(3)] for s in range(size)}
    local = {s: items_of(seed, dtype_index, s, 5, name, 4 * most if s == size - 1 else 0) for s in range(size)}
    forwards = {s: items_of(seed, dtype_index, s, 10, name, most) for s in range(size)}
    everything = np.concatenate([x for s in range(size) for x in (*steps[s], local[s], forwards[s])])
    total = len(everything)
    check(f"{name}: size", bag.size() == total, (bag.size(), total))
    # Each rank's share: round-robin from each inserter's own rank (forwarded items: the receiver inserts them).
    expected_share = sum(
        shares(sum(map(len, steps[s])) + len(forwards[(s - 1) % size]), s, size) for s in range(size)
    ) + np.array([len(local[s]) for s in range(size)])
    (mine,) = local_arrays(bag.local(), bag.dtype)
    check(f"{name}: round-robin share", len(mine) == expected_share[rank], (len(mine), expected_share))

    def whole(phase: str) -> np.ndarray:
        parts = rail.comm.allgather(local_arrays(bag.local(), bag.dtype)[0])
        union = np.concatenate(parts)
        check(
            f"{name} {phase}: the multiset of items",
            len(union) == total and np.array_equal(np.sort(raw(union)), np.sort(raw(everything))),
            (len(union), total),
        )
        check(f"{name} {phase}: checksum", checksum(union) == checksum(everything))
        return np.array([len(part) for part in parts])

    before = whole("after inserts")
    moved = bag.rebalance()
    after = whole("after rebalance")
    low, high = total // size, -(-total // size)
    check(f"{name}: rebalanced to floor or ceil", bool(((after == low) | (after == high)).all()), after)
    # The fewest moves: the fullest ranks keep the extra items.
    targets = np.full(size, low)
    targets[np.argsort(-before, kind="stable")[: total % size]] += 1
    fewest = int(np.maximum(before - targets, 0).sum())
    check(f"{name}: rebalance moved the fewest items", moved == fewest, (moved, fewest, before))
    check(f"{name}: a second rebalance moves nothing", bag.rebalance() == 0)
    return moved


def errors(rail: Any, check: Checks) -> None:
    bag = Bag(rail, np.int64)
    check.error("float items", TypeError, ["float64", "int64"], lambda: bag.insert(np.array([1.5])))
    check.error("2-D items", ValueError, ["(2, 2)"], lambda: bag.insert(np.zeros((2, 2), dtype=np.int64)))
    check.error("2-D local items", ValueError, ["(1, 2)"], lambda: bag.local_insert(np.zeros((1, 2), np.int64)))
    check.error("object dtype", TypeError, ["object"], lambda: Bag(rail, object))
    check.error("owner", TypeError, ["Bag.owner()", "no owner"], lambda: bag.owner(np.arange(3)))
    # An insert, asynchronous, is allowed in a handler.
    refusals = refused_in_a_handler(rail, [bag.size, bag.rebalance], lambda: bag.insert(np.arange(4)))
    check("size refused in a handler", len(refusals) == 2 and "Bag.size()" in refusals[0], refusals)
    check("rebalance refused in a handler", len(refusals) == 2 and "Bag.rebalance()" in refusals[1], refusals)
    if refusals:
        check.errors["collective in a handler"] = refusals[1]
    bag.insert([1, 2, 3])  # a list of Python ints converts
    check("a list of ints", bag.size() == 7 * rail.size)


def scenario(rail: Any, seed: int, scale: float = 1.0, only: tuple[str, ...] = ()) -> dict:
    """Every check on this rank's *rail*; returns ``{"failures", "checks", "errors", "moved"}``."""
    check = Checks(rail.rank)
    moved = {}
    for dtype_index, name in enumerate(DTYPES):
        if not only or name in only:
            moved[name] = check_dtype(rail, check, seed, dtype_index, name, scale)
    errors(rail, check)
    return {"failures": check.failures, "checks": check.count, "errors": check.errors, "moved": moved}


def staged(rail: Any, strict: bool) -> dict:
    """Inserts whose round-robin sends them to other ranks, then finalize() without a barrier: staged."""
    bag = Bag(rail, np.uint64)
    bag.insert(np.arange(4 * rail.size, dtype=np.uint64))  # 3 of every 4 go elsewhere
    return finalize_pending(rail, strict, {"pending": 4 * (rail.size - 1)})


def main() -> None:
    args = seed_and_scale().parse_args()
    staged_runs = {"staged": lambda rail: staged(rail, False), "strict": lambda rail: staged(rail, True)}
    run_job(
        lambda rail: scenario(rail, args.seed, args.scale), staged_runs if args.staged else None, ("errors", "moved")
    )


if __name__ == "__main__":
    main()
