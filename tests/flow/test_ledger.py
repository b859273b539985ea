"""The compiled CreditLedger against the reference RankCredits / NodeCredits, event by event.

The compiled path accounts credits in C (``mailrail.flow._ledger.CreditLedger``, Cython); the
Python classes in :mod:`mailrail.flow` are the specification.  Hypothesis feeds
both the same random events (sends, arrivals with piggybacked tags, releases,
credit returns, including invalid ones) and every result, error and piece of
observable state must agree.  No MPI here.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mailrail.errors import ProtocolError
from mailrail.flow import NodeCredits, RankCredits
from mailrail.flow.node import LocalCounters
from mailrail.transport import compiled

RANKS = 4  # few ranks: events pile up on each, reaching thresholds and bounds


def events(credits_per_pair: int) -> st.SearchStrategy:
    """Scripts of events, arrivals and releases twice as likely (they move the thresholds and bounds)."""
    rank = st.integers(0, RANKS - 1)
    tag = st.one_of(st.just(0), st.integers(1, credits_per_pair + 1))
    kinds = [
        "on_arrival",
        "on_arrival",
        "on_release",
        "on_release",
        "try_acquire",
        "take_piggyback",
        "on_credit_return",
    ]
    arguments = {"on_arrival": st.tuples(rank, tag), "on_credit_return": st.tuples(rank, st.integers(1, 4))}
    event = st.sampled_from(kinds).flatmap(
        lambda kind: st.tuples(st.just(kind), arguments.get(kind, st.tuples(rank))).map(lambda e: (e[0], *e[1]))
    )
    return st.lists(event, min_size=10, max_size=150)


def outcome(flow, event: tuple):
    name, *args = event
    try:
        return getattr(flow, name)(*args)
    except ProtocolError as error:
        return ("ProtocolError", str(error))


def observable(flow) -> dict:
    return {
        "available": [flow.available(d) for d in range(RANKS)],
        "total": flow.unreturned_total,
        "high_water": flow.unreturned_high_water,
        "piggybacked": getattr(flow, "piggybacked", 0),
        "private_bytes": flow.credit_state_bytes(),
        "shared_bytes": flow.shared_state_bytes(),
    }


def assert_same_run(reference, ledger, script: list[tuple]) -> None:
    for name in ("name", "credits_change_silently", "credits_per_pair", "return_threshold"):
        assert getattr(ledger, name) == getattr(reference, name), name
    for step, event in enumerate(script):
        expected, got = outcome(reference, event), outcome(ledger, event)
        assert got == expected, (step, event)
        assert observable(ledger) == observable(reference), (step, event)


@settings(max_examples=300, deadline=None)
@given(
    credits_per_pair=st.integers(1, 8),
    threshold=st.integers(1, 8),
    piggyback=st.booleans(),
    max_tag=st.integers(1, 4),
    data=st.data(),
)
def test_rank_ledger_decides_like_rank_credits(credits_per_pair, threshold, piggyback, max_tag, data):
    script = data.draw(events(credits_per_pair))
    reference = RankCredits(RANKS, credits_per_pair, threshold, piggyback=piggyback, max_tag=max_tag)
    ledger = compiled.credit_ledger("rank", RANKS, credits_per_pair, threshold, piggyback=piggyback, max_tag=max_tag)
    assert_same_run(reference, ledger, script)


@settings(max_examples=300, deadline=None)
@given(
    credits_per_pair=st.integers(1, 8),
    threshold=st.integers(1, 8),
    node_of_rank=st.lists(st.integers(0, 2), min_size=RANKS, max_size=RANKS),
    virtual=st.booleans(),
    data=st.data(),
)
def test_node_ledger_decides_like_node_credits(credits_per_pair, threshold, node_of_rank, virtual, data):
    script = data.draw(events(credits_per_pair))
    if virtual:  # consecutive ranks per node, computed
        per_node = 1 + node_of_rank[0]
        node_map = [r // per_node for r in range(RANKS)]
        placement = {"ranks_per_node": per_node}
    else:  # any rank-to-node map, read from (what would be node-shared) memory
        node_map = node_of_rank
        table = np.array(node_map, dtype=np.int32)
        placement = {"node_map": table.ctypes.data}
    nodes = max(node_map) + 1
    pool = np.full(RANKS, credits_per_pair, dtype=np.int64)
    reference_pool = LocalCounters(RANKS, credits_per_pair)
    reference = NodeCredits(nodes, node_map.__getitem__, reference_pool, credits_per_pair, threshold)
    ledger = compiled.credit_ledger(
        "node", RANKS, credits_per_pair, threshold, nodes=nodes, pool=pool.ctypes.data, owner=pool, **placement
    )
    assert_same_run(reference, ledger, script)
    assert pool.tolist() == list(reference_pool.values)  # the ledger counts in the shared pool itself


def test_a_node_pool_is_shared_by_every_ledger_on_it():
    pool = np.full(RANKS, 3, dtype=np.int64)
    first, second = (
        compiled.credit_ledger("node", RANKS, 3, 1, nodes=1, ranks_per_node=RANKS, pool=pool.ctypes.data, owner=pool)
        for _ in range(2)
    )
    assert [first.try_acquire(2), second.try_acquire(2), second.try_acquire(2), first.try_acquire(2)] == [
        True,
        True,
        True,
        False,
    ]
    second.on_credit_return(2, 2)
    assert first.available(2) == 2 and pool[2] == 2


def test_ledger_rejects_bad_input_by_value():
    with pytest.raises(ValueError, match="'bogus'"):
        compiled.credit_ledger("bogus", RANKS, 2, 1)
    with pytest.raises(ValueError, match="pool address"):
        compiled.credit_ledger("node", RANKS, 2, 1, nodes=2)
    with pytest.raises(ValueError, match=">= 1"):
        compiled.credit_ledger("rank", RANKS, 0, 1)
    ledger = compiled.credit_ledger("rank", RANKS, 2, 1)
    for call in (ledger.try_acquire, ledger.available, ledger.on_release):
        with pytest.raises(IndexError, match=f"rank {RANKS} is out of range 0..{RANKS - 1}"):
            call(RANKS)


def test_a_detached_node_ledger_no_longer_touches_shared_memory():
    pool = np.full(RANKS, 3, dtype=np.int64)
    ledger = compiled.credit_ledger(
        "node", RANKS, 3, 1, nodes=1, ranks_per_node=RANKS, pool=pool.ctypes.data, owner=pool
    )
    ledger.detach()
    for call in (ledger.try_acquire, ledger.available, ledger.on_release):
        with pytest.raises(RuntimeError, match="detached"):
            call(0)
    assert ledger.unreturned_high_water == 0 and ledger.credit_state_bytes() == 2 * 8
