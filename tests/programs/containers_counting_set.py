"""CountingSet under mpiexec (or mailrail.testing's World): every operation against a numpy reference.

Each rank regenerates every rank's inputs from the seed, so it checks the set against a single-process numpy
reference (a ``bincount`` of key ids): ``add`` of skewed and uniform batches with duplicates, adds sent from
inside a handler, for uint64, int32, uint16, S16 and structured keys (int32 and uint16 keys are counted densely,
the others in tables; the structured keys' padding bytes hold garbage on the sender: equal fields are one key);
then ``count`` in the caller's order (absent keys, duplicates, empty batches), ``top`` for several k (ties broken
by key bytes), ``size``, ``total``, ``local`` (every key on its owner, once).  Then errors, raised on the caller,
and collectives refused inside a handler.  Last (``--staged``, under mpiexec only), adds left pending at finalize()
are reported as staged.

``RESULT`` of rank 0: ``failures`` (every check that failed, on any rank: empty when all pass), ``checks`` (how
many ran per rank), ``errors`` (rank 0's messages of the expected errors), ``reserve_failures``.
"""

from __future__ import annotations

import argparse
import json
import warnings
from typing import Any

import numpy as np

from mailrail import MailRailError, UndeliveredError, UndeliveredWarning
from mailrail.containers.counting_set import CountingSet
from mailrail.containers.keys import numpy_column

#: Key ids are drawn from 0..DOMAIN-1; queries also ask about ids up to 2 * DOMAIN (absent keys).
DOMAIN = 3000
DTYPES = {
    "uint64": np.dtype(np.uint64),
    "int32": np.dtype(np.int32),
    "S16": np.dtype("S16"),
    "record": np.dtype([("a", "u1"), ("b", "<u4"), ("c", "<u2")], align=True),  # 5 padding bytes of 12
}
#: The CountingSet's own runs add a narrow unsigned dtype (int32 and uint16 keys are counted in dense arrays,
#: the others in tables).  Set and Bag use DTYPES.
COUNTING_DTYPES = {**DTYPES, "uint16": np.dtype(np.uint16)}


def keys_of(ids: np.ndarray, name: str, garbage: np.random.Generator | None = None) -> np.ndarray:
    """The key of each id (one-to-one) in dtype *name*; with *garbage*, structured padding gets random bytes."""
    ids = np.asarray(ids, dtype=np.int64)
    if name == "uint64":
        return ids.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)  # odd: a bijection, bits everywhere
    if name == "int32":
        return (ids - DOMAIN).astype(np.int32)  # negative keys too
    if name == "uint16":
        return ids.astype(np.uint16)
    if name == "S16":
        return np.char.add(b"word-", ids.astype("S11")).astype("S16")
    keys = np.zeros(len(ids), dtype=DTYPES[name])
    keys["a"], keys["b"], keys["c"] = ids % 251, ids, ids % 65521
    if garbage is not None:
        raw = keys.view(np.uint8).reshape(len(ids), keys.dtype.itemsize)
        for pad in padding_bytes(keys.dtype):
            raw[:, pad] = garbage.integers(0, 256, len(ids), dtype=np.uint8)
    return keys


def padding_bytes(dtype: np.dtype) -> list[int]:
    covered = np.zeros(dtype.itemsize, dtype=bool)
    for field, offset in (dtype.fields[name][:2] for name in dtype.names):
        covered[offset : offset + field.itemsize] = True
    return np.flatnonzero(~covered).tolist()


def clean(keys: np.ndarray) -> np.ndarray:
    """The bytes of each key, ``(n, itemsize)`` uint8, structured padding zeroed (numpy's copies of padded
    records leave the padding undefined: keys are equal when their fields' bytes are)."""
    raw = np.array(keys, copy=True).view(np.uint8).reshape(len(keys), keys.dtype.itemsize)
    if keys.dtype.names is not None:
        raw[:, padding_bytes(keys.dtype)] = 0
    return raw


def same_keys(got: np.ndarray, want: np.ndarray) -> bool:
    """The same keys in the same order, by their bytes (padding ignored), and of the same dtype."""
    return got.dtype == want.dtype and np.array_equal(clean(got), clean(want))


def by_bytes(keys: np.ndarray) -> np.ndarray:
    """The stable order of *keys* by their bytes (memcmp), as a reference independent of the library's."""
    rows = np.ascontiguousarray(clean(keys)).view(np.dtype((np.void, keys.dtype.itemsize))).reshape(len(keys))
    return np.argsort(rows, kind="stable")


class Checks:
    """Failures and a count of checks, for one rank."""

    def __init__(self, rank: int) -> None:
        self.rank = rank
        self.failures: list[str] = []
        self.count = 0
        self.errors: dict[str, str] = {}

    def __call__(self, name: str, ok: object, detail: object = "") -> None:
        self.count += 1
        if not ok:
            self.failures.append(f"rank {self.rank}: {name} {str(detail)[:300]}")

    def error(self, name: str, kind: type, words: list[str], action: Any) -> None:
        """*action* raises *kind* with each of *words* in its message."""
        try:
            action()
        except kind as error:
            self.errors[name] = str(error)
            self(f"error {name} names {words}", all(word in str(error) for word in words), error)
            return
        except Exception as error:
            self(f"error {name} is {kind.__name__}", False, f"got {type(error).__name__}: {error}")
            return
        self(f"error {name} raised", False, "no error")


def batch_ids(seed: int, dtype_index: int, sender: int, batch: int, scale: float) -> np.ndarray:
    """The ids rank *sender* adds in *batch*: skewed (Zipf) or uniform, with duplicates, maybe none at all."""
    rng = np.random.default_rng([seed, dtype_index, sender, batch])
    count = int(rng.integers(0, int(2500 * scale) + 1))
    if batch % 2:
        return (rng.zipf(1.3, count) - 1) % DOMAIN
    return rng.integers(0, DOMAIN, count)


def forward_ids(seed: int, dtype_index: int, sender: int, scale: float) -> np.ndarray:
    """The ids rank *sender* sends to the next rank, which adds them inside its handler."""
    rng = np.random.default_rng([seed, dtype_index, sender, 1000])
    return rng.integers(0, DOMAIN, int(rng.integers(0, int(600 * scale) + 1)))


def check_dtype(rail: Any, check: Checks, seed: int, dtype_index: int, name: str, batches: int, scale: float) -> None:
    rank, size = rail.rank, rail.size
    comm = rail.comm
    counting = CountingSet(rail, COUNTING_DTYPES[name])
    garbage = np.random.default_rng([seed, dtype_index, rank, 2000])

    def forwarded(source: int, ids: np.ndarray) -> None:
        counting.add(keys_of(ids, name, garbage))  # an add from inside a handler

    forwarder = rail.channels.open(np.int64, forwarded, name=f"forward {name}")
    for batch in range(batches):
        counting.add(keys_of(batch_ids(seed, dtype_index, rank, batch, scale), name, garbage))
        if batch == 0:
            forwarder.send_to((rank + 1) % size, forward_ids(seed, dtype_index, rank, scale))
    if batches == 0:
        forwarder.send_to((rank + 1) % size, forward_ids(seed, dtype_index, rank, scale))
    # The reference: every rank's adds, regenerated here.
    every = [batch_ids(seed, dtype_index, s, b, scale) for s in range(size) for b in range(batches)]
    every += [forward_ids(seed, dtype_index, s, scale) for s in range(size)]
    all_ids = np.concatenate(every).astype(np.int64)
    reference = np.bincount(all_ids, minlength=2 * DOMAIN)
    present = np.flatnonzero(reference)
    where = f"{name}:"

    check(f"{where} size", counting.size() == len(present), (counting.size(), len(present)))
    check(f"{where} total", counting.total() == len(all_ids), (counting.total(), len(all_ids)))

    # count: the rank's own queries, present and absent keys, duplicates, in its order; then odd ranks ask nothing.
    query = np.random.default_rng([seed, dtype_index, rank, 3000]).integers(0, 2 * DOMAIN, 1500)
    got = counting.count(keys_of(query, name, garbage))
    check(f"{where} count", got.dtype == np.int64 and np.array_equal(got, reference[query]), got[:10])
    mine = query[:7] if rank % 2 == 0 else query[:0]
    got = counting.count(keys_of(mine, name))
    check(f"{where} count of a short or empty batch", np.array_equal(got, reference[mine]), got)

    # top: count descending, ties by key bytes; the same arrays on every rank.
    expected_keys = keys_of(present, name)
    expected_counts = reference[present]
    order = by_bytes(expected_keys)
    order = order[np.argsort(-expected_counts[order], kind="stable")]
    for k in (0, 1, 7, 50, len(present) + 3):
        keys, counts = counting.top(k)
        want = order[:k]
        check(
            f"{where} top({k})",
            same_keys(keys, expected_keys[want]) and np.array_equal(counts, expected_counts[want]),
            (keys[:5], counts[:5], expected_keys[want][:5], expected_counts[want][:5]),
        )
    # local: each key once, on its owner.
    table = counting.local()
    local_keys, local_counts = numpy_column(table["key"], counting.dtype), table["count"].to_numpy()
    check(f"{where} local keys live on their owner", bool((counting.owner(local_keys) == rank).all()))
    gathered = comm.allgather((local_keys, local_counts))
    union_keys = np.concatenate([theirs[0] for theirs in gathered])
    union_counts = np.concatenate([theirs[1] for theirs in gathered])
    got_order, want_order = by_bytes(union_keys), by_bytes(expected_keys)
    check(
        f"{where} local parts make the whole, once",
        len(union_keys) == len(present)
        and same_keys(union_keys[got_order], expected_keys[want_order])
        and np.array_equal(union_counts[got_order], expected_counts[want_order]),
        (len(union_keys), len(present)),
    )
    # A second round: adds after collectives are seen by the next collective.
    extra = batch_ids(seed, dtype_index, rank, batches, scale)
    counting.add(keys_of(extra, name, garbage))
    extra_total = sum(len(batch_ids(seed, dtype_index, s, batches, scale)) for s in range(size))
    check(f"{where} total after more adds", counting.total() == len(all_ids) + extra_total)


def errors(rail: Any, check: Checks) -> None:
    """Bad input raises on the caller before anything is sent; collectives are refused inside handlers."""
    counting = CountingSet(rail, np.int64)
    check.error("float keys", TypeError, ["float64", "int64"], lambda: counting.add(np.array([1.5, 2.5])))
    check.error("2-D keys", ValueError, ["(2, 3)"], lambda: counting.add(np.zeros((2, 3), dtype=np.int64)))
    check.error("2-D count", ValueError, ["(1, 1)"], lambda: counting.count(np.zeros((1, 1), dtype=np.int64)))
    check.error("bytes keys", TypeError, ["int64"], lambda: counting.count(np.array([b"ab"])))
    check.error("negative k", ValueError, ["-1"], lambda: counting.top(-1))
    check.error("float k", TypeError, ["float", "2.5"], lambda: counting.top(2.5))
    check.error("object dtype", TypeError, ["object"], lambda: CountingSet(rail, object))
    check.error("owner of floats", TypeError, ["float64"], lambda: counting.owner(np.array([0.5])))
    refusals: list[str] = []

    def collective_inside(source: int, records: np.ndarray) -> None:
        for what, action in (
            ("count", lambda: counting.count(np.arange(3))),
            ("top", lambda: counting.top(1)),
            ("size", counting.size),
            ("total", counting.total),
        ):
            try:
                action()
                refusals.append(f"{what}: no error")
            except MailRailError as error:
                refusals.append(str(error))
        counting.add(np.arange(3))  # asynchronous work is allowed in a handler

    probe = rail.channels.open(np.int64, collective_inside, name="probe")
    probe.send_to((rail.rank + 1) % rail.size, np.zeros(1, dtype=np.int64))
    rail.barrier()
    check("collectives refused in a handler", len(refusals) == 4, refusals)
    for what, message in zip(("count", "top", "size", "total"), refusals):
        check(f"{what} refused in a handler", f"CountingSet.{what}()" in message, message)
    if refusals:
        check.errors["collective in a handler"] = refusals[0]
    check("an add in a handler counted", counting.total() == 3 * rail.size)
    counting.add([7, 7, 8])  # a list of Python ints converts
    check("a list of ints", np.array_equal(counting.count([7, 8, 9]), [2 * rail.size, rail.size, 0]))


def scenario(rail: Any, seed: int, batches: int = 4, scale: float = 1.0, only: tuple[str, ...] = ()) -> dict:
    """Every check on this rank's *rail*; returns ``{"failures", "checks", "errors"}``."""
    check = Checks(rail.rank)
    for dtype_index, name in enumerate(COUNTING_DTYPES):
        if not only or name in only:
            check_dtype(rail, check, seed, dtype_index, name, batches, scale)
    errors(rail, check)
    return {"failures": check.failures, "checks": check.count, "errors": check.errors}


def staged(rail: Any, strict: bool) -> dict:
    """Adds of keys owned by other ranks, then finalize() without a barrier: the report counts them as staged."""
    counting = CountingSet(rail, np.uint64)
    candidates = np.arange(200, dtype=np.uint64)
    elsewhere = candidates[counting.owner(candidates) != rail.rank][:10]
    counting.add(np.repeat(elsewhere, 3))  # combined on the sender: one record per key
    result: dict[str, Any] = {"pending": len(elsewhere)}
    if strict:
        try:
            rail.finalize(strict=True)
            result["error"] = "no error"
        except UndeliveredError as error:
            result["error"] = str(error)
        return result
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result["report"] = rail.finalize()
    result["warnings"] = [str(w.message) for w in caught if w.category is UndeliveredWarning]
    return result


def main() -> None:
    from mpi4py import MPI

    from mailrail import MailRail

    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batches", type=int, default=4)
    parser.add_argument("--scale", type=float, default=1.0, help="batch sizes, relative to the defaults")
    parser.add_argument("--staged", action="store_true", help="also check what finalize() reports as staged")
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rail = MailRail(comm)
    result = scenario(rail, args.seed, args.batches, args.scale)
    stats = rail.stats()
    report = rail.finalize(strict=True)
    if any(report.values()):
        result["failures"].append(f"rank {comm.rank}: finalize after barriers reported {report}")
    if args.staged:
        result["staged"] = staged(MailRail(comm), strict=False)
        result["strict"] = staged(MailRail(comm), strict=True)
    everyone = comm.gather(result, root=0)
    reserve_failures = comm.reduce(stats["reserve_failures"], root=0)
    if comm.rank == 0:
        assert everyone is not None
        summary = {
            "failures": [failure for theirs in everyone for failure in theirs["failures"]],
            "checks": [theirs["checks"] for theirs in everyone],
            "errors": everyone[0]["errors"],
            "reserve_failures": reserve_failures,
        }
        if args.staged:
            summary["staged"] = [theirs["staged"] for theirs in everyone]
            summary["strict"] = [theirs["strict"] for theirs in everyone]
        print("RESULT " + json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
