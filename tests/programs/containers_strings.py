"""CountingSet, Set and Map of str keys under mpiexec, against a single-process answer: each rank draws Zipf words of
any length (empty, non-ASCII, long ones sharing their first 16 bytes), from its seed; every rank regenerates every
rank's words and computes the answer with collections.Counter, set and dict; the containers must agree (counts,
top, contains, get, size, local tables).  Also runs in mailrail.testing's World (``scenario``)."""

from __future__ import annotations

import collections
import os
import sys
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # for containers_common
from containers_common import Checks, finalize_pending, run_job, seed_and_scale

from mailrail.containers import CountingSet, Map, Set

SPECIAL = ["", "über", "東京", "ß" * 20, "x" * 16 + "1", "x" * 16 + "2", "x" * 16 + "22"]


def vocabulary(seed: int, count: int = 2000) -> list[str]:
    rng = np.random.default_rng([seed, 99])
    lengths = rng.integers(1, 41, count)
    letters = "abcdefghijklmnopqrstuvwxyzäöü語"
    words = ["".join(letters[i] for i in rng.integers(0, len(letters), n)) for n in lengths]
    return SPECIAL + words


def words_of(seed: int, rank: int, scale: float, vocab: list[str]) -> list[list[str]]:
    """A rank's batches of words: Zipf draws over the vocabulary, in batches of varied sizes."""
    rng = np.random.default_rng([seed, rank])
    batches = []
    for size in (1, 7, int(500 * scale), int(3000 * scale), 0, int(1500 * scale)):
        draws = np.minimum(rng.zipf(1.2, size) - 1, len(vocab) - 1)
        batches.append([vocab[i] for i in draws])
    return batches


def scenario(rail: Any, seed: int, scale: float = 1.0) -> dict:
    check = Checks(rail.rank)
    vocab = vocabulary(seed)
    everyone = [words_of(seed, rank, scale, vocab) for rank in range(rail.size)]
    all_words = [word for batches in everyone for batch in batches for word in batch]
    model = collections.Counter(all_words)
    mine = everyone[rail.rank]

    counts = CountingSet(rail, str)
    keys = Set(rail, str)
    sums = Map(rail, str, np.int64)
    for number, batch in enumerate(mine):
        kind = number % 3  # a list, a pyarrow array, a numpy array
        given = batch if kind == 0 else pa.array(batch, pa.string()) if kind == 1 else np.array(batch, dtype=object)
        counts.add(given)
        keys.insert(given)
        sums.reduce(given, np.arange(len(batch), dtype=np.int64) % 5, "add")
    erased = vocab[: 3 + rail.rank]
    rail.barrier()
    keys.erase(erased)
    asked = SPECIAL + vocab[rail.rank :: 7] + ["never drawn"]

    check("total", counts.total() == len(all_words), counts.total())
    check("size", counts.size() == len(model), (counts.size(), len(model)))
    check("count", counts.count(asked).tolist() == [model[w] for w in asked])
    words, top = counts.top(10)
    ranked = sorted(model.items(), key=lambda item: (-item[1], item[0].encode()))[:10]
    check("top", list(zip(words.to_pylist(), top.tolist())) == ranked, (words.to_pylist(), ranked))
    table = counts.local()
    check("local keys live on their owner", bool((counts.owner(table["key"]) == rail.rank).all()))
    gathered = rail.comm.allgather(dict(zip(table["key"].to_pylist(), table["count"].to_pylist())))
    union: dict[str, int] = {}
    for part in gathered:
        check("a key on one rank only", not set(part) & set(union))
        union.update(part)
    check("local tables add up to the counts", union == dict(model))

    gone = {w for rank in range(rail.size) for w in vocab[: 3 + rank]}
    present = set(model) - gone
    check("contains", keys.contains(asked).tolist() == [w in present for w in asked])
    check("set size", keys.size() == len(present), (keys.size(), len(present)))

    expected_sums: collections.Counter = collections.Counter()
    for batches in everyone:
        for batch in batches:
            for position, word in enumerate(batch):
                expected_sums[word] += position % 5
    values, found = sums.get(asked)
    check("get values", values.tolist() == [expected_sums.get(w, 0) for w in asked])
    check("get found", found.tolist() == [w in model for w in asked])
    check("map size", sums.size() == len(model))
    return {"failures": check.failures, "checks": check.count, "errors": {}}


def staged(rail: Any, strict: bool) -> dict:
    """Strings added (held on the sender) and inserted (staged) for other ranks, then finalize() without a
    barrier: reported as staged."""
    counts, keys = CountingSet(rail, str), Set(rail, str)
    words = [f"word {i}" for i in range(40)]
    elsewhere = [w for w, owner in zip(words, keys.owner(words).tolist()) if owner != rail.rank][:8]
    counts.add(elsewhere * 2)  # held: one record per string
    keys.insert(elsewhere)
    return finalize_pending(rail, strict, {"pending": 2 * len(elsewhere)})


def main() -> None:
    args = seed_and_scale().parse_args()
    staged_runs = {"staged": lambda rail: staged(rail, False), "strict": lambda rail: staged(rail, True)}
    run_job(lambda rail: scenario(rail, args.seed, args.scale), staged_runs if args.staged else None, ())


if __name__ == "__main__":
    main()
