"""Set under mpiexec (or mailrail.testing's World): inserts and erases against a numpy reference.

Each rank regenerates every rank's inputs from the seed.  Three phases, a collective between each (inserts and
erases of one key are not ordered before a barrier, so a phase never both inserts and erases a key): inserts
with duplicates (some from inside a handler); erases of present and absent keys (some from inside a handler)
beside inserts of new keys; inserts of erased keys again.  After each: ``size``, ``contains`` in the caller's
order, ``local`` (every key on its owner, once), for uint64, int32, S16 and structured keys (garbage in the
padding on the sender).  Then errors, and collectives refused inside a handler; with ``--staged``, inserts left
pending at finalize() are reported as staged.

``RESULT`` of rank 0: ``failures`` (empty when all pass), ``checks`` per rank, ``errors`` (rank 0's),
``reserve_failures``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # for containers_common and containers_counting_set
from containers_common import Checks, finalize_pending, local_arrays, refused_in_a_handler, run_job, seed_and_scale
from containers_counting_set import DOMAIN, DTYPES, by_bytes, keys_of, same_keys

from mailrail.containers.set import Set


def ids_of(seed: int, dtype_index: int, sender: int, what: int, low: int, high: int, most: int) -> np.ndarray:
    """Ids in ``low..high-1`` that rank *sender* uses in step *what*, with duplicates, maybe none."""
    rng = np.random.default_rng([seed, dtype_index, sender, what])
    return rng.integers(low, high, int(rng.integers(0, most + 1)))


def check_dtype(rail: Any, check: Checks, seed: int, dtype_index: int, name: str, scale: float) -> None:
    rank, size = rail.rank, rail.size
    keys = Set(rail, DTYPES[name])
    garbage = np.random.default_rng([seed, dtype_index, rank, 2000])
    most = int(2000 * scale)

    def forwarded(source: int, ids: np.ndarray) -> None:
        # Nested operations: positive ids are inserted, negative ones (-1 - id) erased.
        keys.insert(keys_of(ids[ids >= 0], name, garbage))
        keys.erase(keys_of(-1 - ids[ids < 0], name, garbage))

    forwarder = rail.channels.open(np.int64, forwarded, name=f"forward {name}")
    nxt = (rank + 1) % size
    expected = np.zeros(3 * DOMAIN, dtype=bool)

    def everyone(what: int, low: int, high: int, most: int) -> np.ndarray:
        return np.concatenate([ids_of(seed, dtype_index, s, what, low, high, most) for s in range(size)])

    def verify(phase: str) -> None:
        present = np.flatnonzero(expected)
        check(f"{name} {phase}: size", keys.size() == len(present), (keys.size(), len(present)))
        query = np.random.default_rng([seed, dtype_index, rank, 3000]).integers(0, 3 * DOMAIN, 1200)
        got = keys.contains(keys_of(query, name, garbage))
        check(f"{name} {phase}: contains", got.dtype == bool and np.array_equal(got, expected[query]))
        short = query[: rank % 3]  # empty on some ranks
        check(f"{name} {phase}: contains, short", np.array_equal(keys.contains(keys_of(short, name)), expected[short]))
        (local,) = local_arrays(keys.local(), keys.dtype)
        check(f"{name} {phase}: local keys live on their owner", bool((keys.owner(local) == rank).all()))
        union = np.concatenate(rail.comm.allgather(local))
        want = keys_of(present, name)
        check(
            f"{name} {phase}: local parts make the whole, once",
            len(union) == len(want) and same_keys(union[by_bytes(union)], want[by_bytes(want)]),
            (len(union), len(want)),
        )

    # 1. Inserts with duplicates, a handler inserting more.
    for batch in range(3):
        keys.insert(keys_of(ids_of(seed, dtype_index, rank, batch, 0, DOMAIN, most), name, garbage))
    forwarder.send_to(nxt, ids_of(seed, dtype_index, rank, 10, 0, DOMAIN, most // 4))
    for what in (0, 1, 2, 10):
        expected[everyone(what, 0, DOMAIN, most if what < 10 else most // 4)] = True
    verify("inserts")
    # 2. Erases (present and absent keys; some erased twice, by two ranks), a handler erasing more; inserts of
    # new keys (ids DOMAIN..2*DOMAIN-1, never erased in this phase).
    keys.erase(keys_of(ids_of(seed, dtype_index, rank, 20, 0, DOMAIN, most), name, garbage))
    forwarder.send_to(nxt, -1 - ids_of(seed, dtype_index, rank, 21, 0, DOMAIN, most // 4))
    keys.insert(keys_of(ids_of(seed, dtype_index, rank, 22, DOMAIN, 2 * DOMAIN, most), name, garbage))
    expected[everyone(20, 0, DOMAIN, most)] = False
    expected[everyone(21, 0, DOMAIN, most // 4)] = False
    expected[everyone(22, DOMAIN, 2 * DOMAIN, most)] = True
    verify("erases")
    # 3. Erased keys inserted again.
    keys.insert(keys_of(ids_of(seed, dtype_index, rank, 20, 0, DOMAIN, most)[::2], name, garbage))
    for s in range(size):
        expected[ids_of(seed, dtype_index, s, 20, 0, DOMAIN, most)[::2]] = True
    verify("inserted again")


def errors(rail: Any, check: Checks) -> None:
    keys = Set(rail, np.int64)
    check.error("float keys", TypeError, ["float64", "int64"], lambda: keys.insert(np.array([1.5])))
    check.error("2-D erase", ValueError, ["(2, 2)"], lambda: keys.erase(np.zeros((2, 2), dtype=np.int64)))
    check.error("2-D contains", ValueError, ["(1, 3)"], lambda: keys.contains(np.zeros((1, 3), dtype=np.int64)))
    check.error("object dtype", TypeError, ["object"], lambda: Set(rail, object))
    # An insert, asynchronous, is allowed in a handler.
    refusals = refused_in_a_handler(
        rail, [lambda: keys.contains(np.arange(2)), keys.size], lambda: keys.insert(np.arange(5))
    )
    check("contains refused in a handler", len(refusals) == 2 and "Set.contains()" in refusals[0], refusals)
    check("size refused in a handler", len(refusals) == 2 and "Set.size()" in refusals[1], refusals)
    if refusals:
        check.errors["collective in a handler"] = refusals[0]
    check("an insert in a handler", keys.size() == 5)
    keys.erase([0, 1, 9])  # a list of Python ints converts; an absent key is ignored
    check("a list of ints", np.array_equal(keys.contains([0, 1, 2, 9]), [False, False, True, False]))


def scenario(rail: Any, seed: int, scale: float = 1.0, only: tuple[str, ...] = ()) -> dict:
    """Every check on this rank's *rail*; returns ``{"failures", "checks", "errors"}``."""
    check = Checks(rail.rank)
    for dtype_index, name in enumerate(DTYPES):
        if not only or name in only:
            check_dtype(rail, check, seed, dtype_index, name, scale)
    errors(rail, check)
    return {"failures": check.failures, "checks": check.count, "errors": check.errors}


def staged(rail: Any, strict: bool) -> dict:
    """Inserts and erases of keys owned by other ranks, then finalize() without a barrier: staged."""
    keys = Set(rail, np.uint64)
    candidates = np.arange(200, dtype=np.uint64)
    elsewhere = candidates[keys.owner(candidates) != rail.rank][:10]
    keys.insert(np.repeat(elsewhere, 2))  # duplicates dropped on the sender
    keys.erase(elsewhere[:3])
    return finalize_pending(rail, strict, {"pending": len(elsewhere) + len(elsewhere[:3])})


def main() -> None:
    args = seed_and_scale().parse_args()
    staged_runs = {"staged": lambda rail: staged(rail, False), "strict": lambda rail: staged(rail, True)}
    run_job(lambda rail: scenario(rail, args.seed, args.scale), staged_runs if args.staged else None, ("errors",))


if __name__ == "__main__":
    main()
