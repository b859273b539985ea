"""Channels: two record channels and calls on one rail, nested sends and calls, exactly once.

Every rank sends random uint64 records on one channel, 12-byte words on another, and calls ``tally`` on random
ranks; a record whose value is even is forwarded once from inside the handler, and every call makes one more
call from inside itself (``hop``), to this rank or another. One ``rail.barrier()`` completes all of it. Every
rank also calls ``small`` with numbers and a short string (calls that wait in their destination's batch),
which must run once each, in the order each sender made them. Each rank checks the multisets it received
against what every rank sent (each regenerates the others' inputs from the seed). ``RESULT`` of rank 0:
counts.
"""

import argparse
import json

import numpy as np
from mpi4py import MPI

import mailrail
from mailrail import MailRail
from mailrail.errors import RemoteError

parser = argparse.ArgumentParser()
parser.add_argument("--seed", type=int, default=1)
parser.add_argument("--count", type=int, default=3000)
args = parser.parse_args()

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
WORD = np.dtype("S12")


def inputs(sender: int):
    """What *sender* sends: numbers and their destinations, words and theirs, calls and theirs."""
    rng = np.random.default_rng([args.seed, sender])
    numbers = rng.integers(0, 1 << 40, args.count, dtype=np.uint64)
    number_dests = rng.integers(0, size, args.count)
    words = np.array([f"w{sender}-{i}".encode() for i in range(args.count // 3)], dtype=WORD)
    word_dests = rng.integers(0, size, len(words))
    call_dests = rng.integers(0, size, args.count // 5)
    return numbers, number_dests, words, word_dests, call_dests


received_numbers: list[np.ndarray] = []
received_words: list[np.ndarray] = []
calls: list[tuple[int, int, int]] = []  # (origin, number, hops)
small_calls: dict[int, list[int]] = {}  # origin: the numbers of its small calls, in the order they ran


def on_numbers(source: int, records: np.ndarray) -> None:
    assert not records.flags.writeable
    received_numbers.append(records.copy())
    forward = records[records % 2 == 0] + np.uint64(1)  # odd: forwarded once
    if len(forward):
        numbers.send(np.full(len(forward), (rank + 1) % size), forward)


def on_words(source: int, records: np.ndarray) -> None:
    received_words.append(records.copy())


def tally(origin: int, number: int, hops: int, payload: np.ndarray) -> None:
    assert payload.sum() == number  # out-of-band numpy argument arrived intact
    calls.append((origin, number, hops))
    if hops == 0:
        rail.call((number + rank) % size, tally, origin, number, 1, payload)


def small(origin: int, number: int, word: str, weight: float) -> None:
    assert word == f"s{number}" and weight == number / 2
    small_calls.setdefault(origin, []).append(number)


bulk_sums: list[tuple[int, int]] = []


def bulk(origin: int, values: np.ndarray) -> None:
    """A call larger than a datagram (it travels in pieces)."""
    bulk_sums.append((origin, int(values.sum())))


def cube(number: int) -> int:
    return number**3


def refuse(number: int) -> None:
    raise KeyError(number)


rail = MailRail(comm)
numbers = rail.channels.open(np.uint64, on_numbers, name="numbers")
words = rail.channels.open(WORD, on_words, name="words")
mine = inputs(rank)
numbers.send(mine[1], mine[0])
words.send(mine[3], mine[2])
for index, dest in enumerate(mine[4].tolist()):
    rail.call(dest, tally, rank, index, 0, np.array([index], dtype=np.int64))
    rail.call(dest, small, rank, index, f"s{index}", index / 2)
rail.call((rank + 1) % size, bulk, rank, np.arange(20_000 + rank, dtype=np.int64))
rail.barrier()
previous_rank = (rank - 1) % size
assert bulk_sums == [(previous_rank, (20_000 + previous_rank) * (19_999 + previous_rank) // 2)], bulk_sums

# Expected at this rank, from every sender's inputs.
expected_numbers = []
expected_words = []
expected_calls = 0
for sender in range(size):
    n, nd, w, wd, cd = inputs(sender)
    expected_numbers.append(n[nd == rank])
    expected_words.append(w[wd == rank])
    expected_calls += int((cd == rank).sum())
expected_n = np.sort(np.concatenate(expected_numbers))
# Forwarded: every even number that arrived at rank - 1 (+1).
previous = (rank - 1) % size
forwarded = []
for sender in range(size):
    n, nd, *_ = inputs(sender)
    arrived = n[nd == previous]
    forwarded.append(arrived[arrived % 2 == 0] + np.uint64(1))
expected_n = np.sort(np.concatenate([expected_n, *forwarded]))
got_n = np.sort(np.concatenate(received_numbers)) if received_numbers else np.empty(0, np.uint64)
assert np.array_equal(got_n, expected_n), f"rank {rank}: numbers differ ({len(got_n)} vs {len(expected_n)})"
got_w = np.sort(np.concatenate(received_words)) if received_words else np.empty(0, WORD)
assert np.array_equal(got_w, np.sort(np.concatenate(expected_words))), f"rank {rank}: words differ"
for sender in range(size):
    wanted = np.flatnonzero(inputs(sender)[4] == rank).tolist()
    assert small_calls.get(sender, []) == wanted, f"rank {rank}: small calls from {sender} missing or out of order"
# Asks: answered in order of the futures, an exception raised on the answering rank comes back.
futures = [rail.ask((rank + i) % size, cube, i) for i in range(args.count // 3)]
assert mailrail.wait(futures) == [i**3 for i in range(args.count // 3)], f"rank {rank}: wrong answers"
try:
    rail.ask((rank + 1) % size, refuse, rank).result()
    raise AssertionError("a remote KeyError was not raised")
except RemoteError as error:
    assert error.rank == (rank + 1) % size and error.kind == "KeyError" and "in refuse" in str(error)
rail.barrier()
first_hops = sum(1 for c in calls if c[2] == 0)
assert first_hops == expected_calls, f"rank {rank}: {first_hops} calls, expected {expected_calls}"
totals = comm.allreduce(np.array([len(got_n), len(got_w), len(calls), sum(c[1] for c in calls)]), op=MPI.SUM)
sent_calls = sum(len(inputs(s)[4]) for s in range(size))
assert totals[2] == 2 * sent_calls, f"{totals[2]} calls ran, expected {2 * sent_calls} (each hops once)"
assert totals[3] == 2 * sum(int(np.arange(len(inputs(s)[4])).sum()) for s in range(size))
stats = rail.stats()
report = rail.finalize(strict=True)
if rank == 0:
    print(
        "RESULT "
        + json.dumps(
            {
                "numbers": int(totals[0]),
                "words": int(totals[1]),
                "calls": int(totals[2]),
                "implementation": stats["implementation"],
                "report": report,
            }
        ),
        flush=True,
    )
