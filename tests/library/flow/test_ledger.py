"""The compiled CreditLedger against the reference RankCredits / NodeCredits / AdaptiveCredits, event by event.

The compiled path accounts credits in C (``mailrail.flow._ledger.CreditLedger``, Cython); the
Python classes in :mod:`mailrail.flow` are the specification.  Hypothesis feeds
both the same random events (sends, arrivals with piggybacked tags, releases,
credit messages of every kind from any rank, requests for credit, including invalid
ones) and every result, error (type and text), credit message in the outbox and
piece of observable state must agree after every event.  No MPI here.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from helpers import adaptive_state
from mailrail.errors import ProtocolError
from mailrail.flow import AdaptiveCredits, NodeCredits, RankCredits
from mailrail.flow.adaptive import GRANTED_BYTES, LEASE_BYTES, QUEUE_ENTRY_BYTES
from mailrail.flow.base import ANSWER, GIVE_BACK, GRANT, REQUEST, REVOKE
from mailrail.flow.modes import compiled_ledger
from mailrail.flow.node import LocalCounters

RANKS = 4  # few ranks: events pile up on each, reaching thresholds and bounds
#: TAG_UB values: the smallest allowed (one credit per message), small ones that split counts, MPI's minimum.
MAX_TAGS = st.sampled_from([15, 23, 31, 32767])


def weighted(*choices: tuple[int, st.SearchStrategy[Any]]) -> st.SearchStrategy[Any]:
    """One of *choices* ``(weight, strategy)`` by weight."""
    flat = [strategy for weight, strategy in choices for _ in range(weight)]
    return st.integers(0, len(flat) - 1).flatmap(flat.__getitem__)


def event_scripts(ranks: int, credits_per_pair: int, *, adaptive: bool = False) -> st.SearchStrategy:
    """Scripts of events; arrivals, releases and (adaptive) requests likeliest: they move thresholds and bounds."""
    rank = st.integers(0, ranks - 1)
    tag = st.one_of(st.just(0), st.integers(1, credits_per_pair + 1))
    kind = weighted((4, st.just(GRANT)), (2, st.integers(ANSWER, GIVE_BACK)), (1, st.integers(0, 7)))
    count = st.integers(0, credits_per_pair + 2)
    events = weighted(
        (4, st.tuples(st.just("on_arrival"), rank, tag)),
        (4, st.tuples(st.just("on_release"), rank)),
        (2, st.tuples(st.just("try_acquire"), rank)),
        (1, st.tuples(st.just("take_piggyback"), rank)),
        (1, st.tuples(st.just("ask"), rank, st.integers(0, 5))),
        (2 if adaptive else 1, st.tuples(st.just("on_deferred"), rank, st.integers(0, 5))),
        (1, st.tuples(st.just("on_undeferred"), rank, st.integers(0, 2))),
        (3, st.tuples(st.just("on_credit_message"), rank, kind, count)),
        (2, st.tuples(st.just("popleft"), st.integers(1, 3))),
        *(
            [
                (4, st.tuples(st.just("on_credit_message"), rank, st.just(REQUEST), st.integers(0, 4))),
                (2, st.tuples(st.just("on_credit_message"), rank, st.just(GIVE_BACK), st.integers(0, 3))),
                (1, st.tuples(st.just("on_credit_message"), rank, st.just(REVOKE), st.just(0))),
                (1, st.tuples(st.just("on_credit_message"), rank, st.just(ANSWER), st.integers(0, 3))),
            ]
            if adaptive
            else []
        ),
    )
    return st.lists(events, min_size=10, max_size=150)


def outcome(flow: Any, event: tuple) -> Any:
    name, *args = event
    try:
        if name == "popleft":  # the Endpoint takes credit messages from the outbox, oldest first
            outbox = flow.outbox
            return [outbox.popleft() for _ in range(min(args[0], len(outbox)))]
        return getattr(flow, name)(*args)
    except Exception as error:  # the point: the same exception, type and text
        return ("raised", type(error).__name__, str(error))


def observable(flow: Any, ranks: int) -> dict[str, Any]:
    return {
        "outbox": list(flow.outbox),
        "outbox_len": (len(flow.outbox), bool(flow.outbox)),
        "available": [flow.available(d) for d in range(ranks)],
        "counters": {
            name: getattr(flow, name)
            for name in (
                "unreturned_total",
                "unreturned_high_water",
                "piggybacked",
                "requests_sent",
                "requests_received",
                "reclaimed",
                "revokes_sent",
                "given_back",
                "leases_high_water",
                "waiting_high_water",
            )
        },
        "leases": flow.lease_count(),
        "private_bytes": flow.credit_state_bytes(),
        "shared_bytes": flow.shared_state_bytes(),
        "stall_lines": flow.stall_lines(list(range(ranks))),
    }


def assert_same_run(reference: Any, ledger: Any, script: list[tuple], ranks: int = RANKS) -> None:
    """*script* on both, compared after every event."""
    for name in ("name", "credits_change_silently", "asks_for_credit", "credits_per_pair", "return_threshold"):
        assert getattr(ledger, name) == getattr(reference, name), name
    adaptive = isinstance(reference, AdaptiveCredits)
    for step, event in enumerate(script):
        expected, got = outcome(reference, event), outcome(ledger, event)
        assert got == expected, (step, event)
        assert observable(ledger, ranks) == observable(reference, ranks), (step, event)
        if adaptive:
            assert adaptive_state(ledger) == adaptive_state(reference), (step, event)


def placement_of(node_of_rank: list[int], virtual: bool, ranks: int) -> tuple[list[int], dict[str, Any]]:
    """A rank-to-node map and how the ledger is told it: consecutive blocks (computed) or any map (in memory)."""
    if virtual:
        per_node = 1 + node_of_rank[0]
        return [r // per_node for r in range(ranks)], {"ranks_per_node": per_node}
    table = np.array(node_of_rank, dtype=np.int32)
    return list(node_of_rank), {"node_map": table.ctypes.data, "owner": table}


@settings(max_examples=300, deadline=None)
@given(
    credits_per_pair=st.integers(1, 20),
    threshold=st.integers(1, 20),
    piggyback=st.booleans(),
    max_tag=MAX_TAGS,
    data=st.data(),
)
def test_rank_ledger_decides_like_rank_credits(credits_per_pair, threshold, piggyback, max_tag, data):
    script = data.draw(event_scripts(RANKS, credits_per_pair))
    reference = RankCredits(RANKS, credits_per_pair, threshold, piggyback=piggyback, max_tag=max_tag)
    ledger = compiled_ledger("rank", RANKS, credits_per_pair, threshold, piggyback=piggyback, max_tag=max_tag)
    assert_same_run(reference, ledger, script)


@settings(max_examples=300, deadline=None)
@given(
    credits_per_pair=st.integers(1, 8),
    threshold=st.integers(1, 8),
    node_of_rank=st.lists(st.integers(0, 2), min_size=RANKS, max_size=RANKS),
    virtual=st.booleans(),
    max_tag=MAX_TAGS,
    data=st.data(),
)
def test_node_ledger_decides_like_node_credits(credits_per_pair, threshold, node_of_rank, virtual, max_tag, data):
    script = data.draw(event_scripts(RANKS, credits_per_pair))
    node_map, placement = placement_of(node_of_rank, virtual, RANKS)
    nodes = max(node_map) + 1
    pool = np.full(RANKS, credits_per_pair, dtype=np.int64)
    reference_pool = LocalCounters(RANKS, credits_per_pair)
    reference = NodeCredits(nodes, node_map.__getitem__, reference_pool, credits_per_pair, threshold, max_tag=max_tag)
    ledger = compiled_ledger(
        "node", RANKS, credits_per_pair, threshold, max_tag=max_tag, nodes=nodes, pool=pool.ctypes.data, **placement
    )
    assert_same_run(reference, ledger, script)
    assert pool.tolist() == list(reference_pool.values)  # the ledger counts in the shared pool itself


def node_counters(ranks: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A node's adaptive counters per destination rank as the ledger sees them: pool (0), tokens (1), demand (0)."""
    return np.zeros(ranks, dtype=np.int64), np.ones(ranks, dtype=np.int64), np.zeros(ranks, dtype=np.int64)


def adaptive_ledger(ranks: int, lease: int, threshold: int, counters: tuple[np.ndarray, ...], **placement: Any) -> Any:
    """A compiled adaptive ledger over *counters* (pool, tokens, demand): one node of all *ranks* by default."""
    pool, tokens, demand = counters
    owner = (counters, placement.pop("owner", None))  # the counters, and a node map's array
    arguments = {"recv_slots": 8, "nodes": 1, "ranks_per_node": ranks, **placement}
    return compiled_ledger(
        "adaptive",
        ranks,
        lease,
        threshold,
        pool=pool.ctypes.data,
        tokens=tokens.ctypes.data,
        demand=demand.ctypes.data,
        owner=owner,
        **arguments,
    )


def adaptive_reference(ranks: int, node_of: Any, recv_slots: int, lease: int, threshold: int, **knobs: Any) -> Any:
    """The reference over LocalCounters starting as a node's do: pool 0, tokens 1, demand 0."""
    counters = LocalCounters(ranks, 0), LocalCounters(ranks, 1), LocalCounters(ranks, 0)
    return AdaptiveCredits(node_of, *counters, recv_slots, lease, threshold, **knobs)


def adaptive_pair(
    ranks: int,
    node_map: list[int],
    placement: dict[str, Any],
    recv_slots: int,
    lease: int,
    threshold: int,
    max_tag: int,
) -> tuple[AdaptiveCredits, Any, tuple[np.ndarray, ...]]:
    """The reference over LocalCounters and the ledger over int64 arrays, both starting as a node's do."""
    reference = adaptive_reference(ranks, node_map.__getitem__, recv_slots, lease, threshold, max_tag=max_tag)
    counters = node_counters(ranks)
    placement = {"nodes": max(node_map) + 1, "ranks_per_node": 0, **placement}
    ledger = adaptive_ledger(ranks, lease, threshold, counters, max_tag=max_tag, recv_slots=recv_slots, **placement)
    return reference, ledger, counters


@settings(max_examples=500, deadline=None)
@given(
    ranks=st.integers(4, 6),
    recv_slots=st.integers(1, 8),
    lease=st.integers(1, 4),
    threshold=st.integers(1, 3),
    virtual=st.booleans(),
    max_tag=MAX_TAGS,
    data=st.data(),
)
def test_adaptive_ledger_decides_like_adaptive_credits(ranks, recv_slots, lease, threshold, virtual, max_tag, data):
    node_of_rank = data.draw(st.lists(st.integers(0, 2), min_size=ranks, max_size=ranks))
    node_map, placement = placement_of(node_of_rank, virtual, ranks)
    reference, ledger, arrays = adaptive_pair(
        ranks, node_map, placement, recv_slots, min(lease, recv_slots), threshold, max_tag
    )
    assert_same_run(reference, ledger, data.draw(event_scripts(ranks, lease, adaptive=True)), ranks)
    # the ledger counts in the node's pool, tokens and demand themselves
    for values, array in zip((reference.pool, reference.tokens, reference.demand), arrays):
        assert array.tolist() == list(values.values)


@settings(max_examples=100, deadline=None)
@given(ranks=st.integers(40, 300), recv_slots=st.integers(1, 6), threshold=st.integers(1, 3), data=st.data())
def test_adaptive_ledger_with_many_sending_nodes_decides_like_adaptive_credits(ranks, recv_slots, threshold, data):
    """One node per rank, many of them: the lease table grows, and forgotten leases leave it."""
    node_map = list(range(ranks))
    reference, ledger, _ = adaptive_pair(ranks, node_map, {"ranks_per_node": 1}, recv_slots, 1, threshold, 32767)
    # A few dozen of the ranks are busy (far apart in node ids): their leases come and go.
    busy = st.sampled_from(data.draw(st.lists(st.integers(0, ranks - 1), min_size=8, max_size=30, unique=True)))
    events = weighted(
        (4, st.tuples(st.just("on_credit_message"), busy, st.just(REQUEST), st.integers(0, 3))),
        (3, st.tuples(st.just("on_credit_message"), busy, st.just(GIVE_BACK), st.integers(0, 1))),
        (3, st.tuples(st.just("on_arrival"), busy, st.just(0))),
        (3, st.tuples(st.just("on_release"), busy)),
        (1, st.tuples(st.just("popleft"), st.integers(1, 8))),
    )
    assert_same_run(reference, ledger, data.draw(st.lists(events, min_size=50, max_size=400)), ranks)


def test_forgotten_leases_leave_the_table_and_their_records_are_reused():
    """Many nodes ask in turn for one receive slot: each is served after the one before gave it back."""
    ranks = 1000
    reference, ledger, _ = adaptive_pair(ranks, list(range(ranks)), {"ranks_per_node": 1}, 1, 1, 1, 32767)
    script: list[tuple] = [("on_credit_message", 0, REQUEST, 1)]
    for node in range(1, ranks):
        script += [
            ("on_credit_message", node, REQUEST, 1),  # waits: no slot is free, the holder is revoked
            ("on_credit_message", node - 1, GIVE_BACK, 1),  # the slot comes back and answers the waiting node
            ("popleft", 3),
        ]
    assert_same_run(reference, ledger, script, ranks)
    state = ledger.adaptive_state()
    assert list(state["leases"]) == [ranks - 1] and ledger.credit_state_bytes() == reference.credit_state_bytes()
    assert ledger.leases_high_water == 2 and ledger.revokes_sent == ranks - 1


def test_a_release_of_a_message_that_never_arrived_is_refused_by_both():
    """No Endpoint makes one, but a ledger refuses it rather than owing credits nothing accounts for."""
    reference, ledger, _ = adaptive_pair(5, list(range(5)), {"ranks_per_node": 1}, 8, 4, 1, 32767)
    script = [
        ("on_release", 1),  # no lease at all
        ("on_credit_message", 1, REQUEST, 4),
        ("on_release", 1),  # a lease, nothing in use
        ("on_arrival", 1, 0),
        ("on_release", 1),
        ("on_release", 1),  # one arrived, released already
    ]
    assert_same_run(reference, ledger, script, 5)
    with pytest.raises(ProtocolError, match=r"node 1 \(via rank 1\) has no message here to release"):
        ledger.on_release(1)


# -- the outbox -------------------------------------------------------------------------------------


def test_the_outbox_is_a_fifo_that_grows_and_wraps_around():
    outbox = compiled_ledger("rank", RANKS, 2, 1).outbox
    assert not outbox and len(outbox) == 0 and list(outbox) == []
    with pytest.raises(IndexError, match="pop from an empty deque"):
        outbox.popleft()
    expected: list[tuple[int, int, int]] = []
    for i in range(100):  # pushes and pops interleaved: the ring wraps, then grows past 8, 16, 32
        outbox.append((i % 7, i % 5, 2**40 + i))
        expected.append((i % 7, i % 5, 2**40 + i))
        if i % 3 == 0:
            assert outbox.popleft() == expected.pop(0)
        assert list(outbox) == expected and len(outbox) == len(expected) and bool(outbox) == bool(expected)
    snapshot = iter(outbox)
    outbox.popleft()
    assert list(snapshot) == expected  # iteration is over a snapshot
    assert repr(outbox).startswith("Outbox([(") and len(outbox) == len(expected) - 1
    outbox.clear()
    assert not outbox and list(outbox) == []
    outbox.append((1, GRANT, 3))
    assert outbox.popleft() == (1, GRANT, 3)


def test_a_release_crossing_the_threshold_puts_the_return_in_the_outbox_in_pieces():
    ledger = compiled_ledger("rank", RANKS, 40, 40, max_tag=135)  # at most 16 credits per message
    for _ in range(40):
        ledger.on_arrival(3, 0)
    for _ in range(40):
        assert ledger.on_release(3) is None
    assert list(ledger.outbox) == [(3, GRANT, 16), (3, GRANT, 16), (3, GRANT, 8)]


# -- shared counters ----------------------------------------------------------------------------------


def test_a_node_pool_is_shared_by_every_ledger_on_it():
    pool = np.full(RANKS, 3, dtype=np.int64)
    first, second = (
        compiled_ledger("node", RANKS, 3, 1, nodes=1, ranks_per_node=RANKS, pool=pool.ctypes.data, owner=pool)
        for _ in range(2)
    )
    assert [first.try_acquire(2), second.try_acquire(2), second.try_acquire(2), first.try_acquire(2)] == [
        True,
        True,
        True,
        False,
    ]
    second.on_credit_message(2, GRANT, 2)
    assert first.available(2) == 2 and pool[2] == 2


def test_a_revoke_takes_what_the_pool_holds_beyond_the_waiting_sends_up_to_one_message():
    """take_up_to on the node's pool: min(pool - demand, max_count), never below zero, the rest left."""
    counters = pool, _, demand = node_counters(RANKS)
    ledger = adaptive_ledger(RANKS, 2, 1, counters, max_tag=31, recv_slots=64)  # 3 credits per message
    reference = adaptive_reference(RANKS, lambda rank: 0, 64, 2, 1, max_tag=31)
    pool[:] = [0, 2, 3, 7]
    demand[:] = [0, 0, 0, 0]
    for rank, value in enumerate([0, 2, 3, 7]):
        reference.pool.values[rank] = value
    script = [(rank, REVOKE, 0) for rank in range(RANKS)] + [(3, REVOKE, 0)]
    for flow in (ledger, reference):
        for message in script:
            flow.on_credit_message(*message)
    pool[0] = reference.pool.values[0] = -2  # transiently negative (MPI atomics overdraw): nothing to take
    pool[2] = reference.pool.values[2] = 5
    for flow in (ledger, reference):
        flow.on_deferred(2, 1)  # two sends wait for rank 2: they keep 2 of the 5
        flow.on_deferred(2, 2)
        flow.on_credit_message(0, REVOKE, 0)
        flow.on_credit_message(2, REVOKE, 0)
        flow.on_undeferred(2, 2)
    assert pool.tolist() == list(reference.pool.values) == [-2, 0, 2, 1]
    assert demand.tolist() == list(reference.demand.values) == [0, 0, 0, 0]
    assert (
        list(ledger.outbox)
        == list(reference.outbox)
        == [
            (0, GIVE_BACK, 0),
            (1, GIVE_BACK, 2),
            (2, GIVE_BACK, 3),
            (3, GIVE_BACK, 3),
            (3, GIVE_BACK, 3),
            (0, GIVE_BACK, 0),
            (2, GIVE_BACK, 3),
        ]
    )


def test_the_adaptive_tokens_and_demand_are_shared_by_the_ledgers_of_a_node():
    counters = pool, tokens, demand = node_counters(RANKS)
    first, second = (adaptive_ledger(RANKS, 2, 1, counters) for _ in range(2))
    first.on_deferred(2, 5)
    second.on_deferred(2, 7)  # the node asked already: no second request
    assert list(first.outbox) == [(2, REQUEST, 5)] and not second.outbox and tokens[2] == 0 and demand[2] == 2
    second.on_credit_message(2, ANSWER, 2)  # the answer may reach any rank of the node
    assert tokens[2] == 1 and first.available(2) == 2 and first.try_acquire(2)
    first.on_undeferred(2, 1)
    assert (first.requests_sent, second.requests_sent, demand[2], pool[2]) == (1, 0, 1, 1)


# -- refusals -------------------------------------------------------------------------------------


def test_ledger_rejects_bad_input_by_value():
    with pytest.raises(ValueError, match="'bogus'"):
        compiled_ledger("bogus", RANKS, 2, 1)
    with pytest.raises(ValueError, match="pool address"):
        compiled_ledger("node", RANKS, 2, 1, nodes=2)
    with pytest.raises(ValueError, match="tokens and demand addresses"):
        compiled_ledger("adaptive", RANKS, 2, 1, recv_slots=4, nodes=1, ranks_per_node=1, pool=1, tokens=1)
    with pytest.raises(ValueError, match=">= 1"):
        compiled_ledger("rank", RANKS, 0, 1)
    makers = (
        lambda: RankCredits(RANKS, 2, 1, max_tag=14),
        lambda: compiled_ledger("rank", RANKS, 2, 1, max_tag=14),
        lambda: adaptive_ledger(RANKS, 2, 1, node_counters(RANKS), max_tag=14),
    )
    errors = set()
    for make in makers:  # a tag space too small for credit messages, refused as the reference refuses it
        with pytest.raises(ValueError) as raised:
            make()
        errors.add(str(raised.value))
    assert len(errors) == 1 and "tag_ub=14 is too small" in errors.pop()
    for recv_slots, lease, threshold in ((0, 1, 1), (4, 0, 1), (4, 1, 0)):
        with pytest.raises(ValueError) as python:
            adaptive_reference(1, lambda r: 0, recv_slots, lease, threshold)
        with pytest.raises(ValueError) as ledger:
            adaptive_ledger(1, lease, threshold, node_counters(1), recv_slots=recv_slots)
        assert str(ledger.value) == str(python.value)
    ledger = compiled_ledger("rank", RANKS, 2, 1)
    for call in (ledger.try_acquire, ledger.available, ledger.on_release):
        with pytest.raises(IndexError, match=f"rank {RANKS} is out of range 0..{RANKS - 1}"):
            call(RANKS)


def test_each_mode_refuses_the_credit_messages_it_does_not_know_like_the_reference():
    node_pool = np.full(RANKS, 2, dtype=np.int64)
    pairs = [
        (RankCredits(RANKS, 2, 1), compiled_ledger("rank", RANKS, 2, 1)),
        (
            NodeCredits(1, lambda r: 0, LocalCounters(RANKS, 2), 2, 1),
            compiled_ledger("node", RANKS, 2, 1, nodes=1, ranks_per_node=RANKS, pool=node_pool.ctypes.data),
        ),
        (
            adaptive_reference(RANKS, lambda r: 0, 4, 2, 1),
            adaptive_ledger(RANKS, 2, 1, node_counters(RANKS), recv_slots=4),
        ),
    ]
    for reference, ledger in pairs:
        kinds = range(5, 8) if reference.name == "adaptive" else range(1, 8)
        for kind in kinds:
            assert outcome(ledger, ("on_credit_message", 2, kind, 9)) == outcome(
                reference, ("on_credit_message", 2, kind, 9)
            )
            assert outcome(ledger, ("on_credit_message", 2, kind, 9))[0] == "raised"


def test_a_detached_node_ledger_no_longer_touches_shared_memory():
    pool = np.full(RANKS, 3, dtype=np.int64)
    ledger = compiled_ledger("node", RANKS, 3, 1, nodes=1, ranks_per_node=RANKS, pool=pool.ctypes.data, owner=pool)
    ledger.detach()
    for call in (ledger.try_acquire, ledger.available, ledger.on_release):
        with pytest.raises(RuntimeError, match="detached"):
            call(0)
    assert ledger.unreturned_high_water == 0 and ledger.credit_state_bytes() == 2 * 8


def test_a_detached_adaptive_ledger_no_longer_touches_shared_memory():
    node_map = np.array([0, 0, 1, 1], dtype=np.int32)
    ledger = adaptive_ledger(
        RANKS, 2, 1, node_counters(RANKS), recv_slots=4, nodes=2, ranks_per_node=0, node_map=node_map.ctypes.data
    )
    ledger.on_credit_message(2, REQUEST, 3)
    ledger.detach()
    calls = [
        lambda: ledger.try_acquire(0),
        lambda: ledger.available(0),
        lambda: ledger.on_release(2),
        lambda: ledger.on_arrival(2, 0),
        lambda: ledger.on_credit_message(2, ANSWER, 1),
        lambda: ledger.ask(0, 1),
        lambda: ledger.on_deferred(0, 1),
        lambda: ledger.on_undeferred(0, 1),
        lambda: ledger.stall_lines([0]),
    ]
    for call in calls:
        with pytest.raises(RuntimeError, match="detached"):
            call()
    # a lease record, a place in revocable, and rank 2 granted since the node's last revoke
    assert ledger.lease_count() == 1 and ledger.credit_state_bytes() == LEASE_BYTES + QUEUE_ENTRY_BYTES + GRANTED_BYTES
    assert list(ledger.outbox) == [(2, ANSWER, 2)]
