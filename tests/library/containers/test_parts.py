"""A batch larger than ``Container.batch_keys`` goes in parts, and every operation's answer is the one batch's: a map's
insert keeps each key's first value of the batch and assign its last, reductions and sets are exact, a set has every
key once, a visit runs once per occurrence, a bag has every item, spread round-robin as one batch spreads them
(parts of 1, 7 and 4,096 keys)."""

from __future__ import annotations

import numpy as np
import pytest

from mailrail.containers import Array, Bag, Map, Set
from mailrail.containers.base import Container
from mailrail.testing import World

KEYS = 1000
LENGTH = 4 * KEYS


def count_up(keys: np.ndarray, values: np.ndarray) -> None:
    values += 1


def batch(rank: int) -> tuple[np.ndarray, np.ndarray]:
    """This rank's keys (its own, each repeated a few times, in a shuffled order) and one value per occurrence."""
    rng = np.random.default_rng(rank)
    keys = (rng.integers(0, KEYS // 4, KEYS) * 8 + rank).astype(np.int64)  # ranks' keys are disjoint
    return keys, np.arange(KEYS, dtype=np.int64) + 1000 * rank


@pytest.mark.parametrize("part", [1, 7, 4096])
def test_one_large_call_answers_as_one_batch(monkeypatch, part):
    monkeypatch.setattr(Container, "batch_keys", part)
    sends = []

    def program(rail):
        keys, values = batch(rail.rank)
        first, last, total, visits = (Map(rail, np.int64, np.int64) for _ in range(4))
        keys_set, bag = Set(rail, np.int64), Bag(rail, np.int64)
        array, sums = Array(rail, LENGTH, np.int64), Array(rail, LENGTH, np.int64)
        channel = first._inserts
        monkeypatch.setattr(
            channel, "send", lambda *a, real=channel.send, **k: sends.append(rail.rank) or real(*a, **k)
        )
        first.insert(keys, values)
        last.assign(keys, values)
        total.reduce(keys, values, "add")
        visits.visit(keys, count_up)
        keys_set.insert(keys)
        bag.insert(values)
        distinct = np.unique(keys)
        array.set(distinct, distinct * 3)  # each index once: the set's value is exact
        sums.reduce(keys, values, "add")
        rail.barrier()
        everyone = np.arange(0, KEYS * 8, dtype=np.int64)
        return (
            first.get(everyone),
            last.get(everyone),
            total.get(everyone),
            visits.get(everyone),
            keys_set.contains(everyone),
            len(bag.local()),
            bag.gather(0),
            array.gather(everyone[everyone < LENGTH]),
            sums.gather(everyone[everyone < LENGTH]),
        )

    ranks = 3
    results = World(ranks, seed=part).run(program)
    everyone = np.arange(0, KEYS * 8)
    firsts, lasts, totals, occurrences = {}, {}, {}, {}
    array_values, array_sums = np.zeros(LENGTH, np.int64), np.zeros(LENGTH, np.int64)
    for rank in range(ranks):
        keys, values = batch(rank)
        for key, value in zip(keys.tolist(), values.tolist()):
            firsts.setdefault(key, value)
            lasts[key] = value
            totals[key] = totals.get(key, 0) + value
            occurrences[key] = occurrences.get(key, 0) + 1
            if key < LENGTH:
                array_values[key] = key * 3
                array_sums[key] += value
    items = sorted(v for rank in range(ranks) for v in batch(rank)[1].tolist())
    for first, last, total, visited, present, shares, gathered, array, sums in results:
        for (got, found), want in ((first, firsts), (last, lasts), (total, totals), (visited, occurrences)):
            assert found.tolist() == [key in want for key in everyone.tolist()]
            assert got[found].tolist() == [want[key] for key in everyone[found].tolist()]
        assert present.tolist() == [key in firsts for key in everyone.tolist()]
        assert shares == KEYS  # 3 ranks x 1,000 items round-robin: 1,000 each, in parts or not
        assert gathered is None or sorted(gathered.column("item").to_pylist()) == items
        assert array.tolist() == array_values.tolist()
        assert sums.tolist() == array_sums.tolist()
    assert sends.count(0) == -(-KEYS // part)  # the map's inserts left in parts
