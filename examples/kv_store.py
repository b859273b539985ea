"""A distributed key-value store of Python objects: ``put`` is a call, ``get`` is an ask.

Every key lives on one rank (its owner, by the key's hash); each rank's share is a plain ``dict``.  A rank puts
with ``rail.call(owner, put, key, value)`` (fire and forget) and gets with ``rail.ask(owner, get, key)``, a future
of the value.  Each rank makes ``--operations`` random operations: puts of its own keys first (values of several
kinds: numbers, strings, tuples, dicts), a barrier, then gets of anyone's keys, waited for 256 at a time.
``--verify``: rank 0 replays every rank's puts into one ``dict`` and checks every answer any rank got.

Run: ``mailrail run -n 4 -- python examples/kv_store.py --operations 100000 --verify``
"""

import argparse
import random
import zlib

from mpi4py import MPI

import mailrail
from mailrail import MailRail

parser = argparse.ArgumentParser()
parser.add_argument("--operations", type=int, default=100_000, help="operations per rank (half puts, half gets)")
parser.add_argument("--keys", type=int, default=20_000, help="keys each rank writes")
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--verify", action="store_true")
args = parser.parse_args()

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
share: dict = {}  # this rank's keys and values


def put(key, value) -> None:
    share[key] = value


def get(key):
    return share.get(key)


def owner(key: str) -> int:
    return zlib.crc32(key.encode()) % size  # the same on every rank (Python's own str hash is not)


def value_of(writer: int, step: int):
    """A value of one of several kinds, different at every step."""
    kind = step % 4
    if kind == 0:
        return step
    if kind == 1:
        return f"value {writer}-{step}"
    if kind == 2:
        return (writer, step, [step % 7] * (step % 5))
    return {"writer": writer, "step": step, "tags": {"even" if step % 2 == 0 else "odd"}}


def puts_of(writer: int):
    """The puts of *writer*, in order: keys of its own, each put several times (the last one stays)."""
    rng = random.Random(f"{args.seed}-puts-{writer}")
    return [(f"k{writer}-{rng.randrange(args.keys)}", value_of(writer, step)) for step in range(args.operations // 2)]


def gets_of(reader: int):
    rng = random.Random(f"{args.seed}-gets-{reader}")
    return [f"k{rng.randrange(size)}-{rng.randrange(args.keys)}" for _ in range(args.operations - args.operations // 2)]


with MailRail(comm) as rail:
    start = MPI.Wtime()
    for key, value in puts_of(rank):
        rail.call(owner(key), put, key, value)
    rail.barrier()  # every put has arrived: the gets see the final values
    answers = []
    keys = gets_of(rank)
    for first in range(0, len(keys), 256):
        futures = [rail.ask(owner(key), get, key) for key in keys[first : first + 256]]
        answers += mailrail.wait(futures)
    rail.barrier()
    elapsed = comm.allreduce(MPI.Wtime() - start, op=MPI.MAX)
    stored = comm.allreduce(len(share))

all_answers = comm.gather(answers)
if rank == 0:
    print(f"{size} ranks, {args.operations * size:,} operations, {stored:,} keys stored, {elapsed:.2f} s")
    if args.verify:
        expected: dict = {}
        for writer in range(size):
            expected.update(puts_of(writer))  # a writer's puts to one key run in the order it made them
        wrong = sum(
            answer != expected.get(key)
            for reader in range(size)
            for key, answer in zip(gets_of(reader), all_answers[reader], strict=True)
        )
        assert stored == len(expected), f"{stored} keys stored, expected {len(expected)}"
        assert wrong == 0, f"{wrong} answers differ from the dictionary"
        print(f"verified: {len(expected):,} keys, {sum(map(len, all_answers)):,} answers")
