"""Maps to strings of any length and a disjoint set of strings under mpiexec, against a single-process answer: each
rank draws words of any length (empty, non-ASCII, long ones sharing their first 16 bytes) from its seed; every rank
regenerates every rank's draws and computes the answer with dicts and a union-find of its own; the containers must
agree (get, find, size, num_sets, the gathered tables).  A visit appends one mark per visit, so each value's length
counts its visits: every visit applied exactly once.  Also runs in mailrail.testing's World (``scenario``)."""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np
import pyarrow as pa

sys.path.append(os.path.dirname(os.path.abspath(__file__)))  # for containers_common
from containers_common import Checks, run_job, seed_and_scale

from mailrail.containers import DisjointSet, Map

SPECIAL = ["", "über", "東京", "ß" * 20, "a\0b", "x" * 16 + "1", "x" * 16 + "2", "x" * 16 + "22"]


def vocabulary(seed: int, count: int = 600) -> list[str]:
    rng = np.random.default_rng([seed, 99])
    letters = "abcdefghijklmnopqrstuvwxyzäöü語"
    words = ["".join(letters[i] for i in rng.integers(0, len(letters), n)) for n in rng.integers(1, 30, count)]
    return list(dict.fromkeys(SPECIAL + words))


def draws_of(seed: int, rank: int, scale: float, vocab: list[str]) -> dict[str, Any]:
    """A rank's operations: draws over the vocabulary (Zipf but for visits), in batches of varied sizes."""
    rng = np.random.default_rng([seed, rank])

    def words(size: int) -> list[str]:
        return [vocab[i] for i in np.minimum(rng.zipf(1.3, size) - 1, len(vocab) - 1)]

    def uniform(size: int) -> list[str]:  # (a value holds a mark per visit: a few dozen at most)
        return [vocab[i] for i in rng.integers(0, len(vocab), size)]

    sizes = [1, 9, int(400 * scale), 0, int(1500 * scale)]
    return {
        "reduce": [(rng.integers(0, 300, n), words(n)) for n in sizes],
        "visit": [uniform(n) for n in sizes],
        "union": [(words(n), words(n)) for n in sizes],
    }


def value_of(word: str) -> bytes:
    """The one value each word is inserted with (inserts of one key agree, whatever their order)."""
    return (word[::-1] * 3).encode()


def roots_of(pairs: list[tuple[str, str]]) -> dict[str, str]:
    """A single-process union-find: each item's root, its set's smallest item by UTF-8 bytes."""
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for a, b in pairs:
        ra, rb = root(a), root(b)
        if ra != rb:
            low, high = sorted((ra, rb), key=str.encode)
            parent[high] = low
    return {item: root(item) for item in list(parent)}


def scenario(rail: Any, seed: int, scale: float = 1.0) -> dict:
    check = Checks(rail.rank)
    vocab = vocabulary(seed)
    everyone = [draws_of(seed, rank, scale, vocab) for rank in range(rail.size)]
    mine = everyone[rail.rank]

    largest = Map(rail, np.int64, str)
    marks = Map(rail, str, str)
    inserted = Map(rail, str, bytes)
    sets = DisjointSet(rail, str)
    for number, (keys, words) in enumerate(mine["reduce"]):
        given = words if number % 2 else pa.array(words, pa.large_string())
        largest.reduce(keys, given, "max")
        inserted.insert(np.array(words, dtype=object), pa.array([value_of(w) for w in words], pa.binary()))
    for words in mine["visit"]:
        marks.visit(words, append_mark, "|")
    for a, b in mine["union"]:
        sets.union(a, pa.array(b, pa.string()))
    rail.barrier()
    if rail.rank == 0:
        inserted.assign(vocab[:3], b"assigned")

    model_largest: dict[int, str] = {}
    visits: dict[str, int] = {}
    pairs: list[tuple[str, str]] = []
    for draws in everyone:
        for keys, words in draws["reduce"]:
            for key, word in zip(keys.tolist(), words):
                model_largest[key] = max(model_largest.get(key, word), word, key=str.encode)
        for words in draws["visit"]:
            for word in words:
                visits[word] = visits.get(word, 0) + 1
        for a, b in draws["union"]:
            pairs += zip(a, b)
    model_inserted = {word: value_of(word) for draws in everyone for _, words in draws["reduce"] for word in words}
    model_inserted.update(dict.fromkeys(vocab[:3], b"assigned"))
    model_roots = roots_of(pairs)

    asked_keys = np.arange(-1, 301)
    values, found = largest.get(asked_keys)
    check("max values", values.to_pylist() == [model_largest.get(k, "") for k in asked_keys.tolist()])
    check("max found", found.tolist() == [k in model_largest for k in asked_keys.tolist()])
    asked = vocab[rail.rank :: 5] + ["never drawn"]
    counted, found = marks.get(asked)
    check("each visit once", counted.to_pylist() == ["|" * visits.get(w, 0) for w in asked])
    check("visited found", found.tolist() == [w in visits for w in asked])
    kept, found = inserted.get(asked)
    check("inserted", kept.to_pylist() == [model_inserted.get(w, b"") for w in asked], kept.to_pylist()[:5])
    check(
        "map sizes",
        (largest.size(), marks.size(), inserted.size()) == (len(model_largest), len(visits), len(model_inserted)),
    )
    roots = sets.find(asked)
    check("find", roots.to_pylist() == [model_roots.get(w, w) for w in asked])
    check("num_sets", sets.num_sets() == len(set(model_roots.values())))
    check("disjoint set size", sets.size() == len(model_roots))

    gathered = marks.gather(0), largest.gather(0), sets.gather(0)
    if rail.rank == 0:
        whole_marks, whole_largest, whole_sets = (table.to_pydict() for table in gathered)
        check("gathered marks", dict(zip(whole_marks["key"], map(len, whole_marks["value"]))) == visits)
        check("mark checksum", sum(map(len, whole_marks["value"])) == sum(visits.values()))
        check("gathered maxima", dict(zip(whole_largest["key"], whole_largest["value"])) == model_largest)
        check("gathered roots", dict(zip(whole_sets["item"], whole_sets["root"])) == model_roots)
    else:
        check("gathered elsewhere", all(table is None for table in gathered))
    return {"failures": check.failures, "checks": check.count, "errors": {}}


def append_mark(keys: Any, values: Any, mark: str) -> list[str]:
    """A visit: each value gets *mark* appended, once per visit."""
    return [value + mark for value in values.to_pylist()]


def main() -> None:
    args = seed_and_scale().parse_args()
    run_job(lambda rail: scenario(rail, args.seed, args.scale), None, ())


if __name__ == "__main__":
    main()
