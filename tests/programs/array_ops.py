"""Array against a numpy reference: local fill, gathers, sets, reductions (also from inside calls), errors.

Every rank draws every rank's operations from one shared seed, issues its own, and computes the whole
reference array; after each phase the distributed array, gathered, must equal it exactly (values are
small integers, so float sums are exact in any order).  ``--kind``: ``int64`` elements, ``vector``
(``np.dtype((np.float32, 8))``, values of shape (n, 8)), ``features`` (64 float32) or ``record`` (a
structured dtype: set and gather only; reduce must be refused).  MailRail options come from MAILRAIL_*.
Prints ``RESULT {json}`` on rank 0.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from mailrail.containers.array import Array
from mailrail.errors import MailRailError

KINDS = {
    "int64": np.dtype(np.int64),
    "vector": np.dtype((np.float32, 8)),
    "features": np.dtype((np.float32, 64)),  # a GNN vertex's features: 264-byte records
    "record": np.dtype([("id", "<i4"), ("weight", "<f8"), ("tag", "S3")]),
}
#: Each rank's array, for the functions calls run (calls name module-level functions; the data is here).
#: Keyed by rank: under mailrail.testing every rank runs in this one process.
ARRAYS: dict[int, Array] = {}
#: What a collective inside a call raised, per rank.
REFUSED: dict[int, list[str]] = {}


def values_of(kind: str, rng: np.random.Generator, count: int) -> np.ndarray:
    """*count* random values of an element of *kind* (small integers: float sums exact in any order)."""
    if kind == "int64":
        return rng.integers(-1000, 1000, count)
    if kind in ("vector", "features"):
        return rng.integers(-50, 50, (count, *KINDS[kind].shape)).astype(np.float32)
    values = np.zeros(count, KINDS["record"])
    values["id"] = rng.integers(0, 1 << 30, count)
    values["weight"] = rng.integers(-100, 100, count) / 4
    values["tag"] = rng.choice([b"abc", b"xy", b"", b"zzz"], count)
    return values


def fill_of(kind: str, index: np.ndarray) -> np.ndarray:
    """The values a rank writes into its own block through local(), for global *index*."""
    if kind == "int64":
        return index * 7 % 101
    if kind in ("vector", "features"):
        return (index[:, None] * 7 % 101 + np.arange(KINDS[kind].shape[0])).astype(np.float32)
    values = np.zeros(len(index), KINDS["record"])
    values["id"] = index
    values["weight"] = index / 2
    values["tag"] = np.where(index % 2 == 0, b"ev", b"od")
    return values


def call_updates(kind: str, seed: int, sender: int, length: int) -> tuple[np.ndarray, np.ndarray]:
    """The reduction rank *sender* asks another rank to make: drawn from a seed (a call fits in a datagram)."""
    rng = np.random.default_rng([seed, 7, sender])
    count = int(rng.integers(1, 2 * length))
    return rng.integers(0, length, count), values_of(kind, rng, count)


def reduce_remotely(kind: str, seed: int, sender: int, dest: int) -> None:
    """Runs on rank *dest* as a call: an asynchronous reduce sent from inside a handler."""
    array = ARRAYS[dest]
    array.reduce(*call_updates(kind, seed, sender, array.length), "add")


def gather_inside_a_call(rank: int) -> None:
    """Runs on *rank* as a call: a collective inside a handler must be refused."""
    try:
        ARRAYS[rank].gather(np.arange(1))
    except MailRailError as error:
        REFUSED[rank].append(str(error))


def expect(error: type[Exception], text: str, action: Any) -> str:
    try:
        action()
    except error as raised:
        assert text in str(raised), f"expected {text!r} in {raised!r}"
        return str(raised)
    raise AssertionError(f"expected {error.__name__} with {text!r}")


def exercise(rail: Any, kind: str, length: int, seed: int) -> dict[str, Any]:
    """Every phase on *rail*; returns what rank 0 reports (asserts fail the job)."""
    rank, ranks = rail.rank, rail.size
    shared = np.random.default_rng(seed)
    array = ARRAYS[rank] = Array(rail, length, KINDS[kind])
    REFUSED[rank] = []
    assert array.length == len(array) == length and array.dtype == KINDS[kind]
    reference = fill_of(kind, np.arange(length))
    checks: list[str] = []

    def agree(what: str) -> None:
        everything = array.gather(np.arange(length))
        assert everything.shape == reference.shape and everything.dtype == reference.dtype, what
        assert np.array_equal(everything, reference), f"rank {rank}: {what}: the array differs from the reference"
        checks.append(what)

    # Each rank fills its own block in place.
    start, view = array.local_view()
    assert view.flags.writeable and start == array.blocks.start(rank)
    view[:] = fill_of(kind, start + np.arange(len(view)))
    array.barrier()
    agree("local fill")

    # Gathers: random indices with repeats (one rank asks for none), sorted distinct ones, a reversed range.
    for what, draw in [
        ("gather with repeats", lambda n: shared.integers(0, length, n)),
        ("gather sorted distinct", lambda n: np.unique(shared.integers(0, length, n))),
        ("gather reversed", lambda n: np.arange(length)[::-1][: n % (length + 1)]),
    ]:
        wanted = [
            draw(0 if r == ranks - 1 and ranks > 1 else int(shared.integers(1, 3 * length))) for r in range(ranks)
        ]
        got = array.gather(wanted[rank])
        assert np.array_equal(got, reference[wanted[rank]]), f"rank {rank}: {what}"
        checks.append(what)

    # Sets to distinct indices (each index set by one rank only: the result is exact).
    chosen = shared.permutation(length)[: length // 2]
    owner_rank = shared.integers(0, ranks, len(chosen))
    new_values = values_of(kind, shared, len(chosen))
    mine = owner_rank == rank
    array.set(chosen[mine], new_values[mine])
    reference[chosen] = new_values
    agree("sets to distinct indices")

    # Every rank sets one hot index: the result is one of their values.
    hot = int(shared.integers(0, length))
    candidates = values_of(kind, shared, ranks)
    array.set(np.array([hot]), candidates[rank : rank + 1])
    array.barrier()
    got = array.gather(np.array([hot]))[0]
    assert any(np.array_equal(got, candidate) for candidate in candidates), f"rank {rank}: concurrent set"
    reference[hot] = got
    checks.append("concurrent sets of one index")

    # One element for every index (broadcast).
    some = np.unique(shared.integers(0, length, 5))
    element = values_of(kind, shared, 1)[0]
    if rank == 0:
        array.set(some, element)
    reference[some] = element
    agree("set of one element to many indices")

    if kind == "record":
        expect(TypeError, "does not apply", lambda: array.reduce([0], reference[:1], "add"))
        checks.append("reduce refused on records")
    else:
        ops: list[Any] = ["add", "min", "max"] + ([np.bitwise_or] if kind == "int64" else [])
        for op in ops:
            # Half the updates go to 3 hub indices: repeats within a batch and across ranks.
            counts = [int(shared.integers(0, 4 * length)) for _ in range(ranks)]
            hubs = shared.integers(0, length, 3)
            drawn = [
                np.where(shared.random(n) < 0.5, hubs[shared.integers(0, 3, n)], shared.integers(0, length, n))
                for n in counts
            ]
            values = [values_of(kind, shared, n) for n in counts]
            array.reduce(drawn[rank], values[rank], op)
            ufunc = {"add": np.add, "min": np.minimum, "max": np.maximum}.get(op, op)
            for r in range(ranks):
                ufunc.at(reference, drawn[r], values[r])
            agree(f"reduce {getattr(op, '__name__', op)}")

        # Reductions sent from inside calls: each rank asks the next one to reduce for it.
        rail.call((rank + 1) % ranks, reduce_remotely, kind, seed, rank, (rank + 1) % ranks)
        for r in range(ranks):
            np.add.at(reference, *call_updates(kind, seed, r, length))
        agree("reduce from inside calls")

        # Sets and reductions of the same epoch, to disjoint indices.
        split = shared.permutation(length)
        set_part, add_part = split[: length // 3], split[length // 3 :]
        set_values, add_values = values_of(kind, shared, len(set_part)), values_of(kind, shared, len(add_part))
        if rank == ranks - 1:
            array.set(set_part, set_values)
        array.reduce(add_part, add_values, "add")
        reference[set_part] = set_values
        for _ in range(ranks):
            np.add.at(reference, add_part, add_values)
        agree("sets and reductions together")

    # Errors: raised here, before anything is sent.
    sent_before = array._updates.records_sent
    example = reference[:1]
    messages = [
        expect(
            IndexError, f"index {length} is out of range 0..{length - 1}", lambda: array.set([0, length], reference[:2])
        ),
        expect(IndexError, "index -1 is out of range", lambda: array.set([-1], example)),
        expect(IndexError, f"index {length + 5} is out of range", lambda: array.gather([0, length + 5])),
        expect(IndexError, f"index {length}", lambda: array.owner([length])),
        expect(TypeError, "indices must be integers", lambda: array.set(np.array([0.5]), example)),
        expect(ValueError, "indices must be a 1-D array", lambda: array.set(np.zeros((1, 1), int), example)),
        expect(ValueError, "values of shape", lambda: array.set([0, 1], reference[:3])),
    ]
    if kind != "record":
        messages.append(expect(ValueError, "unknown op 'mul'", lambda: array.reduce([0], example, "mul")))
        messages.append(expect(TypeError, "of dtype complex128", lambda: array.set([0], example.astype(np.complex128))))
    if kind == "int64":
        messages.append(expect(TypeError, "gives float64", lambda: array.reduce([0], example, np.divide)))
    assert array._updates.records_sent == sent_before, "an error sent records"
    rail.call(rank, gather_inside_a_call, rank)
    array.barrier()
    assert len(REFUSED[rank]) == 1 and "collective" in REFUSED[rank][0], REFUSED[rank]
    checks.append("errors")
    agree("unchanged by errors")
    return {
        "kind": kind,
        "length": length,
        "checks": checks,
        "messages": messages,
        "records_sent": array._updates.records_sent,
        "records_received": array._updates.records_received,
    }


def main() -> None:
    from mpi4py import MPI

    from mailrail import MailRail

    parser = argparse.ArgumentParser()
    parser.add_argument("--kind", choices=sorted(KINDS), default="int64")
    parser.add_argument("--length", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    comm = MPI.COMM_WORLD
    rail = MailRail(comm)
    result = exercise(rail, args.kind, args.length, args.seed)
    sent = comm.allreduce(result.pop("records_sent"))
    received = comm.allreduce(result.pop("records_received"))
    stats = comm.gather(rail.stats())
    rail.finalize(strict=True)
    if comm.Get_rank() == 0:
        assert stats is not None
        result.update(
            ranks=comm.Get_size(),
            sent=sent,
            received=received,
            reserve_failures=sum(s["reserve_failures"] for s in stats),
        )
        print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
